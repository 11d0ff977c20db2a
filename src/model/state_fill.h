/* state_fill.h — a sequence state brought to a context depth without running the model (nf-bench --fill synthetic).
 *
 * Why: decode at depth costs what the caches' sizes and the selection path cost (the indexer scores every pooled
 * key, the top-k narrows them, attention reads the selected latent rows), not what the cached values are. Filling
 * the caches directly measures decode at 300k or 1M tokens without the minutes of prefill a real walk to that
 * depth takes. The values are pseudo-random but at realistic scale: every array is filled with a deterministic
 * uniform variable of RMS 1 times a per-layer, per-array RMS (nf_state_fill_scales), which nf-bench measures
 * from a short real prefill (nf_state_fill_measure), so the norms match what the model writes.
 *
 * What a fill from position pos to `to` writes (layout in state.h; the state is grown to hold `to` tokens):
 *   MLA layer:  latent rows [pos, to); pooled keys of the pools completed by tokens [pos, to) (pools
 *               [pos/kpool, to/kpool)); the open-pool key and gate rows of tokens [max(pos, to - kpool), to),
 *               each in its slot token % kpool;
 *   KDA layer:  the recurrent state S and the conv window, overwritten whole.
 * then pos = to. Element e of an array gets scale * nf_state_fill_unit(key, e), e counted from the start of the
 * array for the caches (row * width + column) and per token for the open rows, and key a function of (seed,
 * layer, array): filling to a then to b writes the same caches as filling to b at once, and the host and the CUDA
 * fill (a kernel per array, cuda_state.cu) write the same bits. An array whose scale is 0 is not written (the
 * pooled keys and open rows of a layer that reuses another layer's selection are never read).
 *
 * What stays real: nothing the fill writes; rows below pos stay as they were. A decode step after a fill runs the
 * same kernels over the same sizes as after a real prefill to `to`, which is what a depth benchmark needs; its
 * tokens are not the model's continuation of any text. */
#ifndef NF_MODEL_STATE_FILL_H
#define NF_MODEL_STATE_FILL_H

#include <stdint.h>

#include "model/model.h"
#include "model/state.h"

#ifdef __cplusplus
extern "C" {
#endif

/* RMS of each array of one layer (0: leave the array untouched). */
typedef struct {
    float latent, pool_key, open_key, open_gate;   /* MLA */
    float kda_S, conv;                              /* KDA */
} nf_state_fill_rms;

typedef struct nf_state_fill_scales {
    int n_layer;
    nf_state_fill_rms L[NF_MAX_LAYERS];
} nf_state_fill_scales;

/* Which array a key belongs to. */
enum { NF_FILL_LATENT = 1, NF_FILL_POOL_KEY, NF_FILL_OPEN_KEY, NF_FILL_OPEN_GATE, NF_FILL_KDA_S, NF_FILL_CONV };

/* One contiguous run of a fill: dst[i] = scale * nf_state_fill_unit(key, first + i) for i < n. dst is host memory
 * for a host state and device memory for a hooked state. */
typedef struct {
    float *dst;
    uint64_t n, first, key;
    float scale;
} nf_state_fill_span;

#if defined(__CUDACC__)
#define NF_STATE_FILL_HD __host__ __device__
#else
#define NF_STATE_FILL_HD
#endif
/* A uniform variable on [-sqrt 3, sqrt 3) (RMS 1) from a splitmix64 hash of (key, e); every step is exact or
 * one float rounding, so host and device agree bit for bit. */
static inline NF_STATE_FILL_HD float nf_state_fill_unit(uint64_t key, uint64_t e) {
    uint64_t z = key + e * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u = (float)(uint32_t)(z >> 40) * (1.0f / 8388608.0f) - 1.0f;   /* [-1, 1), 24 bits */
    return u * 1.7320508f;
}

/* Key of (seed, layer, array). */
uint64_t nf_state_fill_key(uint64_t seed, int layer, int array);

/* Per-layer RMS of what a real prefill wrote into st (host or device state, st->pos >= kpool so one pool is
 * complete): latent rows [0, pos), pooled keys [0, pos/kpool), the open rows of the last min(pos, kpool) tokens,
 * S and conv. Layers with indexer_shared get 0 for the pooled keys and open rows. 0, or -1 with nf_error(). */
int nf_state_fill_measure(const nf_hparams *hp, const nf_state *st, nf_state_fill_scales *out);

/* Every layer at RMS 1, S at 1/sqrt(kda_head_dim) (tests; nf-bench measures instead). */
void nf_state_fill_scales_unit(const nf_hparams *hp, nf_state_fill_scales *out);

/* The spans of a fill of st from st->pos to `to` (header comment), in layer order, handed to emit. */
void nf_state_fill_spans(const nf_state *st, int64_t to, uint64_t seed, const nf_state_fill_scales *sc,
                         void (*emit)(const nf_state_fill_span *span, void *ctx), void *ctx);

/* Fill st (host or hooked) from st->pos to `to` (>= st->pos), growing it first; then st->pos = to. 0, or -1 with
 * nf_error() (to below pos, out of memory, a device state whose backend has no fill). */
int nf_state_fill(nf_state *st, int64_t to, uint64_t seed, const nf_state_fill_scales *sc);

#ifdef __cplusplus
}
#endif

#endif
