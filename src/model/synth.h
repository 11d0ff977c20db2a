/* synth.h — synthetic glm5-next models: presets and deterministic seeded random weights.
 *
 * A synthetic model is any nf_hparams (a preset, then any dimension overridden) written in the layout of
 * layout.h with a recipe of recipe.h. Every value is a pure function of (seed, tensor name, element index), so
 * the same seed gives the same weights in every recipe and whatever the write order. Scales keep activations
 * finite through all layers: matrices ~ N(0, 1/sqrt(fan_in)), residual outputs further scaled by
 * 1/sqrt(2 n_layer), norms 1, hc base small and scale 1, A_log and dt_bias in the HF init ranges, router bias
 * small. Tensors are generated and written one at a time, so a glm53-sized file needs one tensor in memory.
 *
 * The same models also exist without a file (synth_model.c): nf_synth_model_create builds an nf_model in memory,
 * either with every value on the host (NF_SYNTH_HOST: byte for byte what nf_synth_write would write) or with
 * its large matrices "virtual" (NF_SYNTH_DEVICE: their bytes are made on the GPU by the CUDA backend, from a
 * small pool of quantized N(0,1) blocks scaled to each tensor's sigma), which is how the released dimensions
 * (glm53:q2, ~98 GB) fit on one GPU with no file and no host copy. */
#ifndef NF_MODEL_SYNTH_H
#define NF_MODEL_SYNTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/layout.h"
#include "model/model.h"
#include "model/recipe.h"

/* Fill hp with a preset: "tiny" (~10M parameters, every feature: KDA + MLA, dense + MoE, hc 4, indexer
 * kpool 4, one MTP block) or "glm53" (the released GLM-5.3-Flash dimensions, spec §1); "PRESET@N" keeps the
 * preset's first N trunk layers (e.g. glm53@32: fits an 80 GB GPU with the q2 recipe). -1 if unknown. */
int nf_synth_preset(const char *name, nf_hparams *hp);
/* Recompute the derived per-layer arrays after a dimension override: layer kinds (MLA where i % mla_every ==
 * mla_every-1; mla_every 0 keeps the current kinds), layer_moe from n_dense_lead, n_layer_total. */
void nf_synth_derive(nf_hparams *hp, int mla_every);

/* Values of elements [first, first+n) of tensor t (flattened, ne[0] fastest). */
void nf_synth_values(const nf_hparams *hp, const nf_layout_tensor *t, uint64_t seed, int64_t first, int64_t n,
                     float *dst);

/* 1 and *sigma when tensor t's values are N(0, sigma) (every matrix; some params), 0 for the constant and
 * uniform-derived params (norm weights, biases, hc scale, dt_bias, ssm_a). */
int nf_synth_sigma(const nf_hparams *hp, const nf_layout_tensor *t, double *sigma);
/* Bytes of tensor t stored as `type`. */
uint64_t nf_synth_tensor_bytes(const nf_layout_tensor *t, uint32_t type);
struct nf_pool;
/* Every value of tensor t generated and encoded as `type` into out (nf_synth_tensor_bytes bytes): exactly the
 * bytes nf_synth_write writes for it. pool (may be NULL: this thread only) spreads the rows over threads. */
int nf_synth_encode(const nf_hparams *hp, const nf_layout_tensor *t, uint64_t seed, uint32_t type, uint8_t *out,
                    struct nf_pool *pool);

typedef void (*nf_synth_progress)(void *ctx, int index, int count, const nf_layout_tensor *t, uint64_t bytes_done,
                                  uint64_t bytes_total);

/* Write a whole model. Returns 0, or -1 (partial file removed). The number of tensors whose recipe type fell back
 * to a wider one (rows not a multiple of the block size) is stored in *n_fallback when given. */
int nf_synth_write(const char *path, const nf_hparams *hp, const nf_recipe *r, uint64_t seed,
                   nf_synth_progress progress, void *ctx, int *n_fallback);

/* ---- synthetic models in memory (synth_model.c) ---- */

/* Parse "PRESET:RECIPE" (e.g. "glm53:q2", "tiny:f32", "glm53@32:q2"); fills hp (preset, derived arrays) and *r. 0 or -1 (nf_fail). */
int nf_synth_spec_parse(const char *spec, nf_hparams *hp, const nf_recipe **r);

/* A synthetic model in memory, no file. mode NF_SYNTH_HOST: every tensor's values on the host (small presets; the
 * CPU backend can run it; values identical to what nf_synth_write would write). mode NF_SYNTH_DEVICE: tensors of
 * at most `NF_SYNTH_HOST_MAX` bytes (norms, hc, router, small matrices...) live on the host as in HOST mode; larger
 * ones are virtual (their host bytes are never materialised; nf_backend_cuda_create fills them on the GPU). */
typedef enum { NF_SYNTH_HOST = 0, NF_SYNTH_DEVICE = 1 } nf_synth_mode;

/* Largest tensor a DEVICE-mode model keeps on the host: above every glm53 router (4.7 MB f32), hc and small MLA/KDA
 * matrix, below every attention/FFN/expert matrix that carries the bulk of the bytes. */
#define NF_SYNTH_HOST_MAX ((size_t)8 << 20)

/* The model's tensors sit in one anonymous region (MAP_NORESERVE: untouched pages cost nothing), each at an
 * NF_SYNTH_ALIGN boundary so a virtual tensor shares no page with a host one (the host never touches it). */
#define NF_SYNTH_ALIGN 4096

/* Returns NULL with nf_error() on bad hparams, a type a virtual tensor cannot have, or no memory. Free with
 * nf_model_free. The model's m->file is NULL and m->synth describes it. */
nf_model *nf_synth_model_create(const nf_hparams *hp, const nf_recipe *r, uint64_t seed, nf_synth_mode mode);
/* Same with the host/virtual threshold given (tests force small tensors virtual). In DEVICE mode a tensor is
 * virtual when it is a matrix (not a param role, see layout.h) of N(0, sigma) values and has more than host_max
 * bytes. */
nf_model *nf_synth_model_create_ex(const nf_hparams *hp, const nf_recipe *r, uint64_t seed, nf_synth_mode mode,
                                   size_t host_max);

/* Blocks a virtual tensor is made of are copies of pool blocks: quantized types hold NF_SYNTH_POOL_BLOCKS blocks
 * of N(0,1) values quantized with the type's own quantizer; float types (F32, F16, BF16) NF_SYNTH_POOL_VALUES
 * single values. A pool is stored once per (type, sigma) with its scale fields (the f16 d/dmin of each block) or
 * its values already multiplied by sigma, so block i of a tensor is a plain copy of pool block
 * nf_synth_pool_index(key, i) (the GPU fills ~100 GB with copies in well under a second). */
#define NF_SYNTH_POOL_BLOCKS 4096
#define NF_SYNTH_POOL_VALUES 65536

typedef struct {
    uint32_t type;
    float sigma;
    uint32_t block_bytes;   /* bytes of one block (quantized) or one value (float types) */
    uint32_t n_blocks;      /* a power of two */
    uint8_t *bytes;         /* n_blocks * block_bytes */
} nf_synth_pool;

typedef struct {
    const char *name;       /* points into the model's layout table (valid for the model's lifetime) */
    int layout_index;       /* index in nf_layout_tensors order */
    uint32_t type;
    uint64_t offset;        /* in the region */
    uint64_t bytes;
    bool virt;              /* DEVICE mode: made on the GPU, host pages never touched */
    int pool;               /* virtual tensors: index into pools */
    uint64_t key;           /* virtual tensors: block-selection key (seed and name) */
} nf_synth_tensor;

typedef struct nf_synth {
    nf_hparams hp;
    const nf_recipe *recipe;
    uint64_t seed;
    nf_synth_mode mode;
    size_t host_max;
    uint8_t *region;        /* mmap'ed, region_bytes long; every tensor's data points inside it */
    size_t region_bytes;
    nf_layout_tensor *layout;
    int n_tensors;
    nf_synth_tensor *tensors;   /* in layout order, increasing offsets */
    int n_pools;
    nf_synth_pool *pools;
    int n_virtual;
    uint64_t tensor_bytes;      /* every tensor (trunk, globals, MTP blocks) */
    uint64_t virtual_bytes;     /* of which virtual */
} nf_synth;

#if defined(__CUDACC__)
#define NF_SYNTH_HOST_DEVICE __host__ __device__
#else
#define NF_SYNTH_HOST_DEVICE
#endif
/* Pool block of block i of a virtual tensor with key `key`: one function for the host reference and the CUDA
 * kernel (cuda_synth.cu), so both pick the same blocks. */
static inline NF_SYNTH_HOST_DEVICE uint32_t nf_synth_pool_index(uint64_t key, uint64_t i, uint32_t n_blocks) {
    uint64_t z = (key ^ i) + 0x9e3779b97f4a7c15ull;   /* splitmix64 */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (uint32_t)(z & (n_blocks - 1));
}

/* Key of a virtual tensor's block selection (seed and tensor name). */
uint64_t nf_synth_block_key(uint64_t seed, const char *name);
/* Blocks [first, first + n) of virtual tensor t written to dst: the bytes the GPU holds for them. */
void nf_synth_virtual_fill(const nf_synth *s, const nf_synth_tensor *t, uint64_t first, uint64_t n, uint8_t *dst);
/* The synth entry whose data starts at `data` (NULL when none). */
const nf_synth_tensor *nf_synth_find(const nf_synth *s, const void *data);
/* Write every virtual tensor's bytes into the host region (nf_synth_virtual_fill) and mark it host: the model
 * then holds on the host exactly what a DEVICE-mode GPU copy holds, so the CPU backend can run it (tests,
 * small presets). 0, or -1 when m is not a synthetic model. */
int nf_synth_model_materialize(nf_model *m);
/* Called by nf_model_free for a synthetic model. */
void nf_synth_release(nf_synth *s);

#endif
