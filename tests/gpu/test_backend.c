/* test_backend.c — the CUDA backend against the CPU reference backend (entry nf_gpu_test_backend, run by
 * `make gpu-test`).
 *
 * Models: the four HF fixtures (tests/data/fixtures/{base,shared,kpool16,nondefault}) converted with nf-convert,
 * and nf-synth's `tiny` preset (n_embd 256, so the q4/q2 recipes really store Q4_K / Q2_K / IQ2_XXS: the
 * fixtures' 64-wide rows fall back to Q8_0/BF16), each in the f32, bf16, q8, q4 and q2 recipes. Per model:
 *
 * Prefill products over >= NF_CUDA_GEMM_MIN_VECTORS (16) vectors per matrix run the tiled GEMM (cuda_gemm.cu),
 * which rounds non-F32 weights and activations to bf16 (F32 weights stay f32). NF_CUDA_GEMM=f32 puts the same
 * tiles and expert grouping on its f32 path, so the exact checks below run in that mode ("f32 GEMM") and check
 * every kernel's logic at the tight tolerance; the default bf16 mode is checked block by block against the bf16
 * bound and reported end to end. Per model:
 *
 *  1. blocks: a "pair" backend runs every block of one prefill on both backends from IDENTICAL inputs (the CPU's
 *     outputs, and its state, are copied to the GPU before each block) and records the largest relative error
 *     of each block's outputs and state updates (max |gpu - cpu| / max |cpu| over the buffer); selections are
 *     compared row by row as sets. This isolates each kernel's error from error propagation. Twice: f32 GEMM
 *     (LOGIT_TOL, identical selections) and bf16 GEMM (BF16_BLOCK_TOL; selections reported).
 *  2. end to end: one-shot prefill logits, GPU vs CPU, per position max |gpu - cpu| / max |cpu|, against the
 *     tolerance (LOGIT_TOL, below); indexer selections as sets. f32 GEMM; the bf16 GEMM's numbers are printed.
 *  3. GPU self-consistency: in the default mode, prefill in two chunks of >= 16 tokens is bit-identical to the
 *     one-shot prefill (a vector's GEMM result does not depend on the tile it shares, and every other kernel
 *     computes a token's values in the same order whatever T is; the chunked KDA recurrence when the cut is at a
 *     multiple of its 64-token chunks, which the test's cut is); chunked prefill with chunks under the GEMM
 *     threshold (the per-vector kernel) and token-by-token decode (cuda_gemv.cu's streaming kernels, <= 8
 *     vectors) are each within LOGIT_TOL of the f32-GEMM one-shot prefill with the same selections (the three
 *     product kernels differ by summation order, so not bit for bit).
 *  4. greedy: 64 greedy steps after an 8-token prompt on each backend (f32 GEMM); the token sequences must be
 *     identical.
 *  5. state: snapshot/restore and checkpoint/rollback on the device reproduce a 16-token continuation
 *     bit-identically; a device state restored into a fresh device state and a device state copied to a HOST
 *     state continue the sequence (the latter on the CPU backend, within the logit tolerance).
 *  6. long context (f32 fixtures base and kpool16, 4096 tokens): visible pools far beyond the top-k budget;
 *     blocks from identical inputs including decode steps at depth (selections exact, attention within
 *     tolerance), end to end, and a chunked prefill bit-identical to one-shot. For the CPU emulation
 *     (scripts/cuemu): NF_GPU_TEST_LONG=n sets the length, NF_GPU_TEST_LONG_ONLY=1 skips everything else;
 *     NF_GPU_TEST_RECIPES=q8,q4 runs those recipes only (--quick runs f32 and q2); NF_GPU_TEST_SYNTH_ONLY=1 skips
 *     the fixtures (the synthetic tiny model only).
 *
 * Tolerance (relative to the largest |logit| of the position), the same for every recipe: 1e-4.
 *  - f32, bf16: both backends compute in f32 from the same stored weights (bf16 widens exactly); they differ
 *    only in the order of f32 additions (~n * 2^-24 relative per dot, n <= a few hundred here) and in expf
 *    ulps, amplified through 8 layers: 1e-4 leaves a 100x margin over the ~1e-6 expected (measured on the
 *    H200: <= 4.5e-6 end to end, <= 7.6e-7 per block).
 *  - q8, q4, q2: the same argument holds unchanged. Neither backend quantizes activations: each decodes every
 *    quantized weight to exactly nf_dequantize's f32 value (same float operations, unfused) and dots it with the
 *    f32 activation in f32, so a quantized model is an f32 model with other weight values, continuous in its
 *    inputs, and the backends again differ only by summation order (~1e-6, at most ~1e-5 expected). Before, both
 *    quantized activations to Q8_0/Q8_K: a one-ulp difference upstream could flip a rounding step and the random
 *    fixtures amplified it to 0.4 relative with diverging greedy tokens; that is gone, so the quantized recipes
 *    get the exact recipes' tolerance, identical selections (block check and end to end) and identical greedy
 *    tokens over 64 steps. A flipped discrete choice (router or indexer top-k) would exceed 1e-4 and fail.
 *  - bf16 GEMM (the default for prefill products): each product of a bf16-rounded weight and activation moves by
 *    up to 2^-7 relative (~2^-9 typical), a dot by ~1e-4 of sum |w x| (tests/gpu/test_gemm.c); a block chains a
 *    few products and normalisations, so its output moves by ~1e-3..1e-2 of its largest value (the CPU emulation
 *    of the kernels, scripts/cuemu, fixture base: 1.9e-3..9.2e-3 over the bf16/q8/q4 recipes); BF16_BLOCK_TOL
 *    (3e-2) bounds each block from identical inputs. End to end, these random-init fixtures amplify a perturbation
 *    of that size (8 layers; near-tied router and indexer choices flip: emulated logits 0.24-0.28 relative,
 *    argmax 38-39/40), so the bf16 end-to-end numbers are printed, not gated; the f32-GEMM run gates the logic. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cpu/backend_cpu.h"
#include "cuda/backend_cuda.h"
#include "cuda/cuda_gemm.h"
#include "cuda/cuda_kda.h"
#include "gpu_tests.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/state.h"
#include "util/error.h"

static int n_failed;
#include "gpu_check.h"
#include "gpu_env.h"

/* one line per model, printed together at the end */
static char summary[64][320];
static int n_summary;
static int fails_before;

/* logit tolerance of every recipe (the header comment says why) */
#define LOGIT_TOL 1e-4
/* block error bound of the bf16 prefill GEMM (header comment) */
#define BF16_BLOCK_TOL 3e-2
/* chunk under the GEMM threshold for a model with k routed experts per token (MoE products have T * k vectors) */
static int small_chunk(int k) {
    int c = (NF_CUDA_GEMM_MIN_VECTORS - 1) / (k > 1 ? k : 1);
    return c < 1 ? 1 : c > 5 ? 5 : c;
}
/* NF_CUDA_GEMM=mode until gemm_mode(NULL) puts back what the caller had (calls come in such pairs) */
static void gemm_mode(const char *mode) {
    static env_saved saved;
    if (mode) saved = env_push("NF_CUDA_GEMM", mode);
    else env_pop(&saved);
}

/* ------------------------------------------------------------------------------------------------------ */
/* pair backend: each block on both backends from the CPU's inputs                                         */

enum { B_EMBED, B_HC_PRE, B_HC_POST, B_RMSNORM, B_KDA, B_KDA_STATE, B_MLA_PROJ, B_LATENT, B_INDEXER_STATE, B_MLA_ATT,
       B_DENSE, B_MOE, B_HEAD, B_COUNT };
static const char *block_names[B_COUNT] = {"embed", "hc_pre", "hc_post", "rmsnorm", "kda", "kda_state", "mla_proj",
                                           "latent", "idx_state", "mla_att", "dense", "moe", "head"};

typedef struct {
    void *h, *d;
    size_t bytes;
} pair_buf;

typedef struct {
    nf_backend *cpu, *gpu;
    nf_state *gst;
    pair_buf bufs[32];
    int nbufs;
    double err[B_COUNT];
    int calls[B_COUNT];
    long sel_rows, sel_bad;
    long fused_vals, fused_bad; /* fused hc calls vs the GPU's own unfused calls: values compared, values not bit-equal */
    int cuda_error;
} pair_ctx;

static pair_ctx *ctx_of(nf_backend *be) { return (pair_ctx *)be->impl; }

static void *dev_of(pair_ctx *P, const void *h) {
    for (int i = 0; i < P->nbufs; i++) {
        const char *b = P->bufs[i].h;
        if ((const char *)h >= b && (const char *)h < b + P->bufs[i].bytes)
            return (char *)P->bufs[i].d + ((const char *)h - b);
    }
    nf_die("pair backend: pointer %p is not a pair buffer", h);
}

static void cu_check(pair_ctx *P, cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        if (!P->cuda_error) printf("  CUDA error in %s: %s\n", what, cudaGetErrorString(e));
        P->cuda_error = 1;
    }
}

static void up(pair_ctx *P, const void *h, size_t bytes) {
    cu_check(P, cudaDeviceSynchronize(), "sync before upload");
    cu_check(P, cudaMemcpy(dev_of(P, h), h, bytes, cudaMemcpyHostToDevice), "upload");
    /* a pageable upload may still be in flight when cudaMemcpy returns, and the backend's stream does not wait
     * for the legacy stream */
    cu_check(P, cudaDeviceSynchronize(), "sync after upload");
}

static double rel_err(const float *g, const float *c, size_t n) {
    double mx = 0, md = 0;
    for (size_t i = 0; i < n; i++) {
        double a = fabs((double)c[i]), d = fabs((double)g[i] - (double)c[i]);
        if (a > mx) mx = a;
        if (!(d <= md)) md = isnan(d) ? INFINITY : d;
    }
    return md / (mx > 0 ? mx : 1e-30);
}

/* compare n floats at device address d with the host values h */
static void cmp_dev(pair_ctx *P, int kind, const void *d, const float *h, size_t n) {
    if (n == 0) return;
    float *g = nf_xmalloc(n * sizeof(float));
    cu_check(P, cudaDeviceSynchronize(), "sync before download");
    cu_check(P, cudaMemcpy(g, d, n * sizeof(float), cudaMemcpyDeviceToHost), "download");
    double e = rel_err(g, h, n);
    if (!(e <= P->err[kind])) P->err[kind] = isnan(e) ? INFINITY : e;
    free(g);
}
static void cmp(pair_ctx *P, int kind, const float *h, size_t n) {
    cmp_dev(P, kind, dev_of(P, h), h, n);
    P->calls[kind]++;
}

/* Copy the host state (authoritative) to the GPU state, caches up to pos + T included (the GPU state gets room
 * for the T new tokens; rows not yet written on the host are overwritten by the GPU block). */
static void sync_state(pair_ctx *P, const nf_state *st, int T) {
    nf_state *g = P->gst;
    if (nf_state_reserve(g, st->pos + T) < 0) nf_die("%s", nf_error());
    cu_check(P, cudaDeviceSynchronize(), "sync state");
    const size_t f = sizeof(float);
    for (int l = 0; l < st->n_layer; l++) {
        const nf_layer_state *S = &st->L[l];
        nf_layer_state *D = &g->L[l];
        if (S->kind == NF_LAYER_KDA) {
            cu_check(P, cudaMemcpy(D->conv, S->conv, (size_t)st->conv_rows * st->conv_width * f, cudaMemcpyHostToDevice), "state");
            cu_check(P, cudaMemcpy(D->S, S->S, (size_t)st->kda_heads * st->kda_hd * st->kda_hd * f, cudaMemcpyHostToDevice), "state");
        } else {
            cu_check(P, cudaMemcpy(D->latent, S->latent, (size_t)(st->pos + T) * st->kv_lora * f, cudaMemcpyHostToDevice), "state");
            cu_check(P, cudaMemcpy(D->pool_key, S->pool_key, (size_t)((st->pos + T) / st->kpool) * st->idx_hd * f,
                                   cudaMemcpyHostToDevice), "state");
            cu_check(P, cudaMemcpy(D->open_key, S->open_key, (size_t)st->kpool * st->idx_hd * f, cudaMemcpyHostToDevice), "state");
            cu_check(P, cudaMemcpy(D->open_gate, S->open_gate, (size_t)st->kpool * st->idx_hd * f, cudaMemcpyHostToDevice), "state");
        }
    }
    cu_check(P, cudaDeviceSynchronize(), "sync state");
    g->pos = st->pos;
}

static void *p_alloc(nf_backend *be, size_t bytes) {
    pair_ctx *P = ctx_of(be);
    if (P->nbufs == 32) return NULL;
    void *h = calloc(1, bytes ? bytes : 1);
    void *d = P->gpu->alloc(P->gpu, bytes);
    if (!h || !d) {
        free(h);
        if (d) P->gpu->release(P->gpu, d);
        return NULL;
    }
    P->bufs[P->nbufs++] = (pair_buf){h, d, bytes ? bytes : 1};
    return h;
}
static void p_release(nf_backend *be, void *p) {
    pair_ctx *P = ctx_of(be);
    for (int i = 0; i < P->nbufs; i++)
        if (P->bufs[i].h == p) {
            P->gpu->release(P->gpu, P->bufs[i].d);
            free(p);
            P->bufs[i] = P->bufs[--P->nbufs];
            return;
        }
}
static int p_to_host(nf_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    memcpy(dst, src, bytes);
    return 0;
}

#define HP (&P->cpu->model->hp)

static int p_embed(nf_backend *be, const int32_t *tokens, int T, float *X) {
    pair_ctx *P = ctx_of(be);
    if (P->gpu->embed(P->gpu, tokens, T, dev_of(P, X)) < 0 || P->cpu->embed(P->cpu, tokens, T, X) < 0) return -1;
    cmp(P, B_EMBED, X, (size_t)T * HP->hc_count * HP->n_embd);
    return 0;
}
static int p_hc_pre(nf_backend *be, int il, int site, const float *X, int T, float *h, float *mix) {
    pair_ctx *P = ctx_of(be);
    const int hc = HP->hc_count, n = HP->n_embd;
    up(P, X, (size_t)T * hc * n * sizeof(float));
    if (P->gpu->hc_pre(P->gpu, il, site, dev_of(P, X), T, dev_of(P, h), dev_of(P, mix)) < 0) return -1;
    if (P->cpu->hc_pre(P->cpu, il, site, X, T, h, mix) < 0) return -1;
    cmp(P, B_HC_PRE, h, (size_t)T * n);
    cmp(P, B_HC_PRE, mix, (size_t)T * (hc + hc * hc));
    return 0;
}
/* a fused call's device output against the GPU's own unfused calls' (backend.h: equal bit for bit) */
static void fused_same(pair_ctx *P, const void *fused, const void *unfused, size_t n) {
    float *f = nf_xmalloc(n * sizeof(float)), *u = nf_xmalloc(n * sizeof(float));
    cu_check(P, cudaDeviceSynchronize(), "sync fused");
    cu_check(P, cudaMemcpy(f, fused, n * sizeof(float), cudaMemcpyDeviceToHost), "download");
    cu_check(P, cudaMemcpy(u, unfused, n * sizeof(float), cudaMemcpyDeviceToHost), "download");
    for (size_t i = 0; i < n; i++) P->fused_bad += memcmp(&f[i], &u[i], sizeof(float)) != 0;
    P->fused_vals += (long)n;
    free(f);
    free(u);
}

/* the CPU's hc_pre + rmsnorm of X (the host side of a pair buffer), compared with what the GPU left in mix and x */
static int cpu_pre_norm(pair_ctx *P, int il, int site, const float *X, int T, const nf_tensor *w, float *x, float *mix) {
    const int hc = HP->hc_count, n = HP->n_embd;
    const size_t nx = (size_t)T * n;
    float *h = nf_xmalloc(nx * sizeof(float));
    const int rc = P->cpu->hc_pre(P->cpu, il, site, X, T, h, mix) < 0 || P->cpu->rmsnorm(P->cpu, w, h, T, x) < 0 ? -1 : 0;
    free(h);
    if (rc < 0) return -1;
    cmp(P, B_HC_PRE, mix, (size_t)T * (hc + hc * hc));
    cmp(P, B_RMSNORM, x, nx);
    return 0;
}

/* the GPU's fused hc_pre_norm against the CPU's hc_pre + rmsnorm (tolerance, as both blocks), and against the GPU's
 * own hc_pre + rmsnorm, which it must equal bit for bit (backend.h) */
static int p_hc_pre_norm(nf_backend *be, int il, int site, const float *X, int T, const nf_tensor *w, float *x,
                         float *mix) {
    pair_ctx *P = ctx_of(be);
    const int hc = HP->hc_count, n = HP->n_embd;
    const size_t nx = (size_t)T * n, nmix = (size_t)T * (hc + hc * hc);
    up(P, X, (size_t)T * hc * n * sizeof(float));
    if (P->gpu->hc_pre_norm(P->gpu, il, site, dev_of(P, X), T, w, dev_of(P, x), dev_of(P, mix)) < 0) return -1;
    float *dh = P->gpu->alloc(P->gpu, nx * sizeof(float)), *dx = P->gpu->alloc(P->gpu, nx * sizeof(float)),
          *dmix = P->gpu->alloc(P->gpu, nmix * sizeof(float));
    if (!dh || !dx || !dmix) return nf_fail("pair hc_pre_norm: out of device memory");
    if (P->gpu->hc_pre(P->gpu, il, site, dev_of(P, X), T, dh, dmix) < 0 || P->gpu->rmsnorm(P->gpu, w, dh, T, dx) < 0)
        return -1;
    fused_same(P, dev_of(P, x), dx, nx);
    fused_same(P, dev_of(P, mix), dmix, nmix);
    P->gpu->release(P->gpu, dh);
    P->gpu->release(P->gpu, dx);
    P->gpu->release(P->gpu, dmix);
    return cpu_pre_norm(P, il, site, X, T, w, x, mix);
}

/* the GPU's hc_post_pre_norm (the streams' update folded into the next site's projection in decode) against the
 * CPU's hc_post, hc_pre and rmsnorm (tolerance: the hc_post, hc_pre and rmsnorm blocks), and against the GPU's own
 * hc_post then hc_pre_norm from the same inputs (on copies of X and mix), which it must equal bit for bit */
static int p_hc_post_pre_norm(nf_backend *be, float *X, const float *y, int il, int site, int T, const nf_tensor *w,
                              float *x, float *mix) {
    pair_ctx *P = ctx_of(be);
    const int hc = HP->hc_count, n = HP->n_embd;
    const size_t nX = (size_t)T * hc * n, nx = (size_t)T * n, nmix = (size_t)T * (hc + hc * hc), f = sizeof(float);
    up(P, X, nX * f);
    up(P, y, nx * f);
    up(P, mix, nmix * f);
    float *dX = P->gpu->alloc(P->gpu, nX * f), *dx = P->gpu->alloc(P->gpu, nx * f), *dmix = P->gpu->alloc(P->gpu, nmix * f);
    if (!dX || !dx || !dmix) return nf_fail("pair hc_post_pre_norm: out of device memory");
    cu_check(P, cudaMemcpy(dX, dev_of(P, X), nX * f, cudaMemcpyDeviceToDevice), "copy X");
    cu_check(P, cudaMemcpy(dmix, dev_of(P, mix), nmix * f, cudaMemcpyDeviceToDevice), "copy mix");
    cu_check(P, cudaDeviceSynchronize(), "sync copies");
    if (P->gpu->hc_post(P->gpu, dX, dev_of(P, y), dmix, T) < 0 ||
        P->gpu->hc_pre_norm(P->gpu, il, site, dX, T, w, dx, dmix) < 0 ||
        P->gpu->hc_post_pre_norm(P->gpu, dev_of(P, X), dev_of(P, y), il, site, T, w, dev_of(P, x), dev_of(P, mix)) < 0)
        return -1;
    fused_same(P, dev_of(P, X), dX, nX);
    fused_same(P, dev_of(P, x), dx, nx);
    fused_same(P, dev_of(P, mix), dmix, nmix);
    P->gpu->release(P->gpu, dX);
    P->gpu->release(P->gpu, dx);
    P->gpu->release(P->gpu, dmix);
    if (P->cpu->hc_post(P->cpu, X, y, mix, T) < 0) return -1;
    cmp(P, B_HC_POST, X, nX);
    return cpu_pre_norm(P, il, site, X, T, w, x, mix);
}
static int p_hc_post(nf_backend *be, float *X, const float *y, const float *mix, int T) {
    pair_ctx *P = ctx_of(be);
    const int hc = HP->hc_count, n = HP->n_embd;
    up(P, X, (size_t)T * hc * n * sizeof(float));
    up(P, y, (size_t)T * n * sizeof(float));
    up(P, mix, (size_t)T * (hc + hc * hc) * sizeof(float));
    if (P->gpu->hc_post(P->gpu, dev_of(P, X), dev_of(P, y), dev_of(P, mix), T) < 0) return -1;
    if (P->cpu->hc_post(P->cpu, X, y, mix, T) < 0) return -1;
    cmp(P, B_HC_POST, X, (size_t)T * hc * n);
    return 0;
}
static int p_rmsnorm(nf_backend *be, const nf_tensor *w, const float *x, int T, float *out) {
    pair_ctx *P = ctx_of(be);
    up(P, x, (size_t)T * w->ne[0] * sizeof(float));
    if (P->gpu->rmsnorm(P->gpu, w, dev_of(P, x), T, dev_of(P, out)) < 0) return -1;
    if (P->cpu->rmsnorm(P->cpu, w, x, T, out) < 0) return -1;
    cmp(P, B_RMSNORM, out, (size_t)T * w->ne[0]);
    return 0;
}
static int p_kda(nf_backend *be, int il, nf_state *st, const float *x, int T, float *y) {
    pair_ctx *P = ctx_of(be);
    up(P, x, (size_t)T * HP->n_embd * sizeof(float));
    sync_state(P, st, T);
    if (P->gpu->kda_block(P->gpu, il, P->gst, dev_of(P, x), T, dev_of(P, y)) < 0) return -1;
    if (P->cpu->kda_block(P->cpu, il, st, x, T, y) < 0) return -1;
    cmp(P, B_KDA, y, (size_t)T * HP->n_embd);
    const nf_layer_state *S = &st->L[il], *D = &P->gst->L[il];
    cmp_dev(P, B_KDA_STATE, D->conv, S->conv, (size_t)st->conv_rows * st->conv_width);
    cmp_dev(P, B_KDA_STATE, D->S, S->S, (size_t)st->kda_heads * st->kda_hd * st->kda_hd);
    P->calls[B_KDA_STATE]++;
    return 0;
}
static int p_mla_project(nf_backend *be, int il, nf_state *st, const float *x, int T, float *qr, float *q) {
    pair_ctx *P = ctx_of(be);
    up(P, x, (size_t)T * HP->n_embd * sizeof(float));
    sync_state(P, st, T);
    if (P->gpu->mla_project(P->gpu, il, P->gst, dev_of(P, x), T, dev_of(P, qr), dev_of(P, q)) < 0) return -1;
    if (P->cpu->mla_project(P->cpu, il, st, x, T, qr, q) < 0) return -1;
    cmp(P, B_MLA_PROJ, qr, (size_t)T * HP->q_lora_rank);
    cmp(P, B_MLA_PROJ, q, (size_t)T * HP->n_head * HP->qk_nope_dim);
    const size_t kl = (size_t)st->kv_lora;
    cmp_dev(P, B_LATENT, P->gst->L[il].latent + st->pos * kl, st->L[il].latent + st->pos * kl, (size_t)T * kl);
    P->calls[B_LATENT]++;
    return 0;
}
static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}
static int p_indexer(nf_backend *be, int il, nf_state *st, const float *x, const float *qr, int T, int32_t *sel) {
    pair_ctx *P = ctx_of(be);
    up(P, x, (size_t)T * HP->n_embd * sizeof(float));
    up(P, qr, (size_t)T * HP->q_lora_rank * sizeof(float));
    sync_state(P, st, T);
    if (P->gpu->indexer_select(P->gpu, il, P->gst, dev_of(P, x), dev_of(P, qr), T, dev_of(P, sel)) < 0) return -1;
    if (P->cpu->indexer_select(P->cpu, il, st, x, qr, T, sel) < 0) return -1;
    const int width = nf_topk_width(HP);
    int32_t *g = nf_xmalloc((size_t)T * width * sizeof(int32_t)), *c = nf_xmalloc((size_t)width * sizeof(int32_t));
    cu_check(P, cudaDeviceSynchronize(), "sync");
    cu_check(P, cudaMemcpy(g, dev_of(P, sel), (size_t)T * width * sizeof(int32_t), cudaMemcpyDeviceToHost), "download sel");
    for (int t = 0; t < T; t++) {
        int32_t *gr = g + (size_t)t * width;
        memcpy(c, sel + (size_t)t * width, (size_t)width * sizeof(int32_t));
        qsort(gr, (size_t)width, sizeof(int32_t), cmp_i32);
        qsort(c, (size_t)width, sizeof(int32_t), cmp_i32);
        P->sel_rows++;
        P->sel_bad += memcmp(gr, c, (size_t)width * sizeof(int32_t)) != 0;
    }
    free(g);
    free(c);
    const nf_layer_state *S = &st->L[il], *D = &P->gst->L[il];
    const size_t hd = (size_t)st->idx_hd;
    cmp_dev(P, B_INDEXER_STATE, D->open_key, S->open_key, (size_t)st->kpool * hd);
    cmp_dev(P, B_INDEXER_STATE, D->open_gate, S->open_gate, (size_t)st->kpool * hd);
    cmp_dev(P, B_INDEXER_STATE, D->pool_key, S->pool_key, (size_t)((st->pos + T) / st->kpool) * hd);
    P->calls[B_INDEXER_STATE]++;
    return 0;
}
static int p_mla_attend(nf_backend *be, int il, nf_state *st, const float *q, const int32_t *sel, int T, float *y) {
    pair_ctx *P = ctx_of(be);
    up(P, q, (size_t)T * HP->n_head * HP->qk_nope_dim * sizeof(float));
    up(P, sel, (size_t)T * nf_topk_width(HP) * sizeof(int32_t));
    sync_state(P, st, T);
    if (P->gpu->mla_attend(P->gpu, il, P->gst, dev_of(P, q), dev_of(P, sel), T, dev_of(P, y)) < 0) return -1;
    if (P->cpu->mla_attend(P->cpu, il, st, q, sel, T, y) < 0) return -1;
    cmp(P, B_MLA_ATT, y, (size_t)T * HP->n_embd);
    return 0;
}
static int p_dense(nf_backend *be, int il, const float *x, int T, float *y) {
    pair_ctx *P = ctx_of(be);
    up(P, x, (size_t)T * HP->n_embd * sizeof(float));
    if (P->gpu->dense_mlp(P->gpu, il, dev_of(P, x), T, dev_of(P, y)) < 0) return -1;
    if (P->cpu->dense_mlp(P->cpu, il, x, T, y) < 0) return -1;
    cmp(P, B_DENSE, y, (size_t)T * HP->n_embd);
    return 0;
}
static int p_moe(nf_backend *be, int il, const float *x, int T, float *y) {
    pair_ctx *P = ctx_of(be);
    up(P, x, (size_t)T * HP->n_embd * sizeof(float));
    if (P->gpu->moe_block(P->gpu, il, dev_of(P, x), T, dev_of(P, y)) < 0) return -1;
    /* y is read below straight from device memory, not through the backend: a combine the backend deferred for the
     * next hc projection (NF_CUDA_COMBINE_FOLD) must be launched first */
    if (nf_cuda_flush(P->gpu) < 0) return -1;
    if (P->cpu->moe_block(P->cpu, il, x, T, y) < 0) return -1;
    cmp(P, B_MOE, y, (size_t)T * HP->n_embd);
    return 0;
}
static int p_head(nf_backend *be, const float *X, int T, float *logits) {
    pair_ctx *P = ctx_of(be);
    up(P, X, (size_t)T * HP->hc_count * HP->n_embd * sizeof(float));
    if (P->gpu->head(P->gpu, dev_of(P, X), T, dev_of(P, logits)) < 0) return -1;
    if (P->cpu->head(P->cpu, X, T, logits) < 0) return -1;
    cmp(P, B_HEAD, logits, (size_t)T * HP->n_vocab);
    return 0;
}

static long last_sel_bad;

/* One prefill through the pair backend (two chunks, then `ndecode` single-token steps); prints the block table;
 * returns the worst block error. */
static double block_check(nf_backend *cpu, nf_backend *gpu, const int32_t *tok, int n, double tol, int strict_sel,
                          const char *what, int ndecode) {
    pair_ctx P;
    memset(&P, 0, sizeof P);
    P.cpu = cpu;
    P.gpu = gpu;
    P.gst = nf_backend_state_create(gpu, 16);
    CHECK(P.gst != NULL, "device state: %s", nf_error());
    if (!P.gst) return INFINITY;
    nf_backend pb;
    memset(&pb, 0, sizeof pb);
    pb.name = "pair";
    pb.model = cpu->model;
    pb.impl = &P;
    pb.alloc = p_alloc;
    pb.release = p_release;
    pb.to_host = p_to_host;
    pb.embed = p_embed;
    pb.hc_pre = p_hc_pre;
    pb.hc_post = p_hc_post;
    pb.rmsnorm = p_rmsnorm;
    if (gpu->hc_pre_norm) pb.hc_pre_norm = p_hc_pre_norm;
    if (gpu->hc_post_pre_norm && gpu->hc_pre_norm) pb.hc_post_pre_norm = p_hc_post_pre_norm;
    pb.kda_block = p_kda;
    pb.mla_project = p_mla_project;
    pb.indexer_select = p_indexer;
    pb.mla_attend = p_mla_attend;
    pb.dense_mlp = p_dense;
    pb.moe_block = p_moe;
    pb.head = p_head;
    nf_state *st = nf_state_create(&cpu->model->hp, 16);
    float *logits = nf_xmalloc((size_t)n * cpu->model->hp.n_vocab * sizeof(float));
    /* two calls: a prefill chunk, then a continuation (state carried between calls) */
    const int np = n - ndecode, half = np / 2;
    int rc = nf_prefill(&pb, st, tok, half, 0, logits, 1, NULL);
    if (rc == 0) rc = nf_prefill(&pb, st, tok + half, np - half, 0, logits, 1, NULL);
    for (int d = 0; rc == 0 && d < ndecode; d++) rc = nf_prefill(&pb, st, tok + np + d, 1, 0, logits, 1, NULL);
    CHECK(rc == 0, "pair prefill: %s", nf_error());
    CHECK(!P.cuda_error, "CUDA error during the block check");
    if (P.fused_vals)
        printf("  fused hc calls vs their unfused calls (both GPU): %ld of %ld values differ\n", P.fused_bad, P.fused_vals);
    CHECK(P.fused_bad == 0, "fused hc calls differ from their unfused calls at %ld of %ld values", P.fused_bad,
          P.fused_vals);
    double worst = 0;
    printf("  blocks, %s (max |gpu-cpu|/max|cpu| from identical inputs):", what);
    for (int k = 0; k < B_COUNT; k++) {
        if (!P.calls[k]) continue;
        printf(" %s %.1e", block_names[k], P.err[k]);
        if (!(P.err[k] <= worst)) worst = P.err[k];
    }
    printf("; sel rows differing %ld/%ld\n", P.sel_bad, P.sel_rows);
    last_sel_bad = P.sel_bad;
    CHECK(worst <= tol, "block error %.3g > tolerance %.1g (%s)", worst, tol, what);
    if (strict_sel) CHECK(P.sel_bad == 0, "%ld of %ld selection rows differ from identical inputs", P.sel_bad, P.sel_rows);
    free(logits);
    nf_state_free(st);
    while (P.nbufs) p_release(&pb, P.bufs[0].h);
    nf_state_free(P.gst);
    return worst;
}

/* ------------------------------------------------------------------------------------------------------ */

static int prefill(nf_backend *be, const int32_t *tok, int n, int chunk, float *logits, int32_t *sel, int64_t sel_pos) {
    nf_state *st = nf_backend_state_create(be, 16);
    if (!st) return -1;
    nf_topk_dump d = {sel, sel_pos};
    int rc = nf_prefill(be, st, tok, n, chunk, logits, 1, sel ? &d : NULL);
    nf_state_free(st);
    return rc;
}

/* A switch read at backend creation (`name` = on / off): chunked prefill of chunk `small` on a backend created with
 * each setting gives the same logits and selections bit for bit, and `taken` (the backend's count of the path's
 * uses) is > 0 with it on and 0 off. 1 when both hold. */
static int switch_same(const nf_model *m, const int32_t *tok, int n, int small, int n_mla, size_t nsel, const char *name,
                       unsigned long long (*taken)(nf_backend *), const char *what, const char *against) {
    const int64_t V = m->hp.n_vocab;
    float *lg[2] = {nf_xmalloc((size_t)n * V * sizeof(float)), nf_xmalloc((size_t)n * V * sizeof(float))};
    int32_t *sl[2] = {nf_xcalloc(nsel, sizeof(int32_t)), nf_xcalloc(nsel, sizeof(int32_t))};
    unsigned long long count[2] = {0, 0};
    int ran = 1;
    for (int on = 0; on < 2; on++) {
        env_saved sv = env_push(name, on ? "on" : "off");
        nf_backend *g = nf_backend_cuda_create(m, 0); /* reads the switch */
        env_pop(&sv);
        CHECK(g != NULL, "gpu backend (%s=%s): %s", name, on ? "on" : "off", nf_error());
        if (!g) {
            ran = 0;
            continue;
        }
        const int rc = prefill(g, tok, n, small, lg[on], n_mla ? sl[on] : NULL, n);
        CHECK(rc == 0, "gpu chunked (%s=%s): %s", name, on ? "on" : "off", nf_error());
        ran &= rc == 0;
        count[on] = taken(g);
        nf_backend_free(g);
    }
    const int same = ran && !memcmp(lg[0], lg[1], (size_t)n * V * sizeof(float)) && !memcmp(sl[0], sl[1], nsel * sizeof(int32_t));
    printf("  gpu chunk %d, %s (%s=on: %llu times) vs %s: %s\n", small, what, name, count[1], against,
           same ? "bit-identical" : "DIFFERENT");
    CHECK(same, "gpu chunk %d: %s=on changes the logits or selections", small, name);
    CHECK(count[1] > 0 && count[0] == 0, "%s: taken %llu times with it on, %llu off", name, count[1], count[0]);
    for (int i = 0; i < 2; i++) {
        free(lg[i]);
        free(sl[i]);
    }
    return same && count[1] > 0 && count[0] == 0;
}

/* per position: max |g - c| / max |c|; returns the worst, counts positions over tol and argmax agreement */
static double compare_logits(const float *g, const float *c, int n, int V, double tol, int *over, int *argmax_same) {
    double worst = 0;
    *over = 0;
    *argmax_same = 0;
    for (int p = 0; p < n; p++) {
        const float *gp = g + (size_t)p * V, *cp = c + (size_t)p * V;
        double e = rel_err(gp, cp, (size_t)V);
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
        *over += !(e <= tol);
        int ag = 0, ac = 0;
        for (int i = 1; i < V; i++) {
            if (gp[i] > gp[ag]) ag = i;
            if (cp[i] > cp[ac]) ac = i;
        }
        *argmax_same += ag == ac;
    }
    return worst;
}

static int argmax(const float *x, int V, float *margin) {
    int a = 0;
    for (int i = 1; i < V; i++) if (x[i] > x[a]) a = i;
    float second = -INFINITY;
    for (int i = 0; i < V; i++) if (i != a && x[i] > second) second = x[i];
    if (margin) *margin = x[a] - second;
    return a;
}

static int greedy(nf_backend *be, const int32_t *prompt, int np, int steps, int32_t *out, float *margin) {
    const int V = be->model->hp.n_vocab;
    nf_state *st = nf_backend_state_create(be, 16);
    float *lg = nf_xmalloc((size_t)V * sizeof(float));
    int rc = st ? nf_prefill(be, st, prompt, np, 0, lg, 0, NULL) : -1;
    for (int s = 0; rc == 0 && s < steps; s++) {
        int32_t t = argmax(lg, V, margin ? &margin[s] : NULL);
        out[s] = t;
        rc = nf_forward(be, st, &t, 1, lg, 0, NULL);
    }
    free(lg);
    nf_state_free(st);
    return rc;
}

static int sel_rows_differ(const int32_t *a, const int32_t *b, size_t rows, int width) {
    int bad = 0;
    int32_t *x = nf_xmalloc((size_t)width * sizeof(int32_t)), *y = nf_xmalloc((size_t)width * sizeof(int32_t));
    for (size_t r = 0; r < rows; r++) {
        memcpy(x, a + r * width, (size_t)width * sizeof(int32_t));
        memcpy(y, b + r * width, (size_t)width * sizeof(int32_t));
        qsort(x, (size_t)width, sizeof(int32_t), cmp_i32);
        qsort(y, (size_t)width, sizeof(int32_t), cmp_i32);
        bad += memcmp(x, y, (size_t)width * sizeof(int32_t)) != 0;
    }
    free(x);
    free(y);
    return bad;
}

/* snapshot/restore, checkpoint/rollback, device->device and device->host state copies */
static void state_checks(nf_backend *cpu, nf_backend *gpu, const int32_t *tok, int P, int K, double tol) {
    const int V = gpu->model->hp.n_vocab;
    float *A = nf_xmalloc((size_t)K * V * sizeof(float)), *B = nf_xmalloc((size_t)K * V * sizeof(float));
    nf_state *st = nf_backend_state_create(gpu, 16);
    CHECK(st && nf_prefill(gpu, st, tok, P, 0, NULL, 0, NULL) == 0, "state prefill: %s", nf_error());
    if (!st) return;
    nf_state *snap = nf_state_snapshot(st);
    nf_state_ckpt ck;
    memset(&ck, 0, sizeof ck);
    CHECK(snap != NULL, "snapshot: %s", nf_error());
    CHECK(nf_state_checkpoint(st, &ck) == 0, "checkpoint: %s", nf_error());
    CHECK(nf_prefill(gpu, st, tok + P, K, 1, A, 1, NULL) == 0, "decode A: %s", nf_error());
    /* restore */
    CHECK(snap && nf_state_restore(st, snap) == 0, "restore: %s", nf_error());
    CHECK(st->pos == P, "restored pos %lld != %d", (long long)st->pos, P);
    CHECK(nf_prefill(gpu, st, tok + P, K, 1, B, 1, NULL) == 0, "decode B: %s", nf_error());
    int same_restore = !memcmp(A, B, (size_t)K * V * sizeof(float));
    CHECK(same_restore, "decode after restore differs");
    /* rollback */
    CHECK(nf_state_rollback(st, &ck) == 0, "rollback: %s", nf_error());
    CHECK(nf_prefill(gpu, st, tok + P, K, 1, B, 1, NULL) == 0, "decode C: %s", nf_error());
    int same_rollback = !memcmp(A, B, (size_t)K * V * sizeof(float));
    CHECK(same_rollback, "decode after rollback differs");
    /* a fresh device state restored from the snapshot */
    nf_state *st2 = nf_backend_state_create(gpu, 16);
    CHECK(st2 && snap && nf_state_restore(st2, snap) == 0, "restore into fresh: %s", nf_error());
    CHECK(st2 && nf_prefill(gpu, st2, tok + P, K, 1, B, 1, NULL) == 0, "decode D: %s", nf_error());
    int same_fresh = !memcmp(A, B, (size_t)K * V * sizeof(float));
    CHECK(same_fresh, "fresh state restored from snapshot differs");
    /* device state -> host state, continued on the CPU */
    nf_state *hs = nf_state_create(&gpu->model->hp, 16);
    CHECK(snap && nf_state_restore(hs, snap) == 0, "device->host restore: %s", nf_error());
    CHECK(nf_prefill(cpu, hs, tok + P, K, 0, B, 1, NULL) == 0, "cpu continuation: %s", nf_error());
    int over, am;
    double e = compare_logits(A, B, K, V, tol, &over, &am);
    printf("  state: restore %s, rollback %s, fresh %s, device->host state on the CPU: max rel %.2e (%d/%d over tol, argmax %d/%d)\n",
           same_restore ? "exact" : "DIFF", same_rollback ? "exact" : "DIFF", same_fresh ? "exact" : "DIFF", e, over, K, am, K);
    CHECK(over == 0, "CPU continuation of the device state: %d positions over tolerance", over);
    nf_state_free(hs);
    nf_state_free(st2);
    nf_state_ckpt_free(&ck);
    nf_state_free(snap);
    nf_state_free(st);
    free(A);
    free(B);
}

static int read_tokens(const char *path, int32_t *out, int cap) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int n = 0;
    long v;
    while (n < cap && fscanf(f, "%ld", &v) == 1) out[n++] = (int32_t)v;
    fclose(f);
    return n;
}

static void test_model(const char *label, const char *path, const char *recipe, const int32_t *tok_in, int ntok, int quick) {
    printf("== %s (%s)\n", label, recipe);
    nf_model *m = nf_model_load(path);
    CHECK(m != NULL, "load %s: %s", path, nf_error());
    if (!m) return;
    nf_backend *cpu = nf_cpu_backend_create(m, 0);
    nf_backend *gpu = nf_backend_cuda_create(m, 0);
    CHECK(cpu && gpu, "backends: %s", nf_error());
    if (!cpu || !gpu) {
        nf_backend_free(gpu);
        nf_backend_free(cpu);
        nf_model_free(m);
        return;
    }
    const int V = m->hp.n_vocab;
    const double tol = LOGIT_TOL;
    const int strict = 1;
    int32_t *tok = nf_xmalloc((size_t)ntok * sizeof(int32_t));
    for (int i = 0; i < ntok; i++) tok[i] = tok_in[i] % V;
    const int n = ntok;

    fails_before = n_failed;
    /* 1. blocks from identical inputs: f32 GEMM (exact checks), then bf16 GEMM (its bound) */
    gemm_mode("f32");
    /* the last 2 tokens as one-token calls: the decode-only paths (decode GEMV, split attention) from identical
     * inputs too */
    double blk = block_check(cpu, gpu, tok, n, tol, strict, "f32 GEMM", 2);
    long blk_sel = last_sel_bad;
    gemm_mode(NULL);
    double blk16 = block_check(cpu, gpu, tok, n, BF16_BLOCK_TOL, 0, "bf16 GEMM", 0);

    /* 2. end to end */
    const int n_mla = nf_mla_layer_count(&m->hp), width = nf_topk_width(&m->hp);
    const size_t nsel = (size_t)(n_mla > 0 ? n_mla : 1) * n * width;
    float *ref = nf_xmalloc((size_t)n * V * sizeof(float)), *g1 = nf_xmalloc((size_t)n * V * sizeof(float)),
          *g2 = nf_xmalloc((size_t)n * V * sizeof(float));
    int32_t *sref = nf_xcalloc(nsel, sizeof(int32_t)), *sg = nf_xcalloc(nsel, sizeof(int32_t)),
            *sg2 = nf_xcalloc(nsel, sizeof(int32_t));
    CHECK(prefill(cpu, tok, n, 0, ref, n_mla ? sref : NULL, n) == 0, "cpu prefill: %s", nf_error());
    gemm_mode("f32");
    CHECK(prefill(gpu, tok, n, 0, g1, n_mla ? sg : NULL, n) == 0, "gpu prefill: %s", nf_error());
    int over, am;
    double e = compare_logits(g1, ref, n, V, tol, &over, &am);
    int sel_bad = n_mla ? sel_rows_differ(sg, sref, (size_t)n_mla * n, width) : 0;
    printf("  prefill %d tokens, f32 GEMM: logits max rel %.2e (tol %.0e; %d/%d positions over), argmax %d/%d, selection rows differing %d/%d\n",
           n, e, tol, over, n, am, n, sel_bad, n_mla * n);
    CHECK(over == 0, "%d of %d positions over the logit tolerance", over, n);
    if (strict) CHECK(sel_bad == 0, "%d selection rows differ", sel_bad);
    gemm_mode(NULL);
    float *g16 = nf_xmalloc((size_t)n * V * sizeof(float));
    int32_t *sg16 = nf_xcalloc(nsel, sizeof(int32_t));
    CHECK(prefill(gpu, tok, n, 0, g16, n_mla ? sg16 : NULL, n) == 0, "gpu prefill: %s", nf_error());
    int over16, am16;
    double e16 = compare_logits(g16, ref, n, V, tol, &over16, &am16);
    int sel16 = n_mla ? sel_rows_differ(sg16, sref, (size_t)n_mla * n, width) : 0;
    printf("  prefill %d tokens, bf16 GEMM (not gated): logits max rel %.2e, argmax %d/%d, selection rows differing %d/%d\n",
           n, e16, am16, n, sel16, n_mla * n);

    /* the KDA conv's row kernel (the default) gives the grid-stride kernel's bits (NF_CUDA_KDA_CONV_ROWS=off) */
    {
        env_saved sv = env_push("NF_CUDA_KDA_CONV_ROWS", "off");
        CHECK(prefill(gpu, tok, n, 0, g2, n_mla ? sg2 : NULL, n) == 0, "gpu prefill (conv grid-stride): %s", nf_error());
        env_pop(&sv);
        const int same_rows = !memcmp(g16, g2, (size_t)n * V * sizeof(float));
        printf("  prefill with the KDA conv row kernel vs the grid-stride kernel: %s\n", same_rows ? "bit-identical" : "DIFFERENT");
        CHECK(same_rows, "the KDA conv row kernel changes the prefill logits");
    }
    /* 3. GPU consistency: two GEMM-sized chunks == one-shot bit for bit; small chunks == decode bit for bit and
     * within the tolerance of the f32-GEMM one-shot prefill */
    int chunk_ok = 1;
    /* cut at a multiple of NF_KDA_CHUNK: the chunked KDA recurrence (default mode, calls of >= 64 tokens) starts its
     * chunks at each call's first token, so only such cuts give the one-shot's bits (cuda_kda.h) */
    int big = (n + 1) / 2;
    if (big >= NF_KDA_CHUNK) big -= big % NF_KDA_CHUNK;
    memset(sg2, 0, nsel * sizeof(int32_t));
    CHECK(prefill(gpu, tok, n, big, g2, n_mla ? sg2 : NULL, n) == 0, "gpu chunked: %s", nf_error());
    int same = !memcmp(g16, g2, (size_t)n * V * sizeof(float)) && !memcmp(sg16, sg2, nsel * sizeof(int32_t));
    printf("  gpu chunk %d vs one-shot (bf16 GEMM in both): %s (max rel %.2e)\n", big, same ? "bit-identical" : "DIFFERENT",
           rel_err(g2, g16, (size_t)n * V));
    CHECK(same, "gpu chunk %d differs from one-shot", big);
    chunk_ok &= same;
    const int small = small_chunk(m->hp.n_expert_used);
    memset(sg2, 0, nsel * sizeof(int32_t));
    CHECK(prefill(gpu, tok, n, small, g2, n_mla ? sg2 : NULL, n) == 0, "gpu chunked: %s", nf_error());
    int small_over, small_am;
    double d = compare_logits(g2, g1, n, V, tol, &small_over, &small_am);
    int small_sel = n_mla ? sel_rows_differ(sg2, sg, (size_t)n_mla * n, width) : 0;
    printf("  gpu chunk %d (per-vector products) vs f32-GEMM one-shot: max rel %.2e (%d/%d over tol), selection rows differing %d\n",
           small, d, small_over, n, small_sel);
    CHECK(small_over == 0, "gpu chunk %d: %d positions over the tolerance from the f32-GEMM one-shot prefill", small, small_over);
    if (strict) CHECK(small_sel == 0, "gpu chunk %d: %d selection rows differ", small, small_sel);
    chunk_ok &= small_over == 0;
    /* decode's MoE combine folded into the next site's hc projection (NF_CUDA_COMBINE_FOLD=on) against the combine
     * launched (off), and decode's hc mixing in the split projection's last CTA (NF_CUDA_HC_TAIL=on) against the
     * mixing kernel: chunk `small` (decode-sized forwards) bit-identical, and the path taken */
    if (m->hp.n_expert > 0)
        chunk_ok &= switch_same(m, tok, n, small, n_mla, nsel, "NF_CUDA_COMBINE_FOLD", nf_cuda_combines_folded,
                                "MoE combine folded into the hc projection", "launched");
    chunk_ok &= switch_same(m, tok, n, small, n_mla, nsel, "NF_CUDA_HC_TAIL", nf_cuda_hc_tails,
                            "hc mixing in the projection's last CTA", "the mixing kernel");
    if (!quick) {
        float *g3 = nf_xmalloc((size_t)n * V * sizeof(float));
        int32_t *sg3 = nf_xcalloc(nsel, sizeof(int32_t));
        CHECK(prefill(gpu, tok, n, 1, g3, n_mla ? sg3 : NULL, n) == 0, "gpu decode: %s", nf_error());
        int dec_over, dec_am;
        const double dd = compare_logits(g3, g1, n, V, tol, &dec_over, &dec_am);
        const int dec_sel = n_mla ? sel_rows_differ(sg3, sg, (size_t)n_mla * n, width) : 0;
        printf("  gpu token-by-token (streaming GEMV) vs f32-GEMM one-shot: max rel %.2e (%d/%d over tol), selection rows differing %d\n",
               dd, dec_over, n, dec_sel);
        CHECK(dec_over == 0, "gpu token-by-token decode: %d positions over the tolerance", dec_over);
        if (strict) CHECK(dec_sel == 0, "gpu token-by-token decode: %d selection rows differ", dec_sel);
        chunk_ok &= dec_over == 0;
        free(g3);
        free(sg3);
    }

    /* 4. greedy (f32 GEMM: the 8-token prompt's routed products reach the GEMM) */
    const int steps = quick ? 8 : 64, np = 8;
    int32_t gc[64], gg[64];
    float margin[64];
    CHECK(greedy(cpu, tok, np, steps, gc, margin) == 0, "cpu greedy: %s", nf_error());
    gemm_mode("f32");
    CHECK(greedy(gpu, tok, np, steps, gg, NULL) == 0, "gpu greedy: %s", nf_error());
    gemm_mode(NULL);
    int first = -1;
    for (int s = 0; s < steps; s++)
        if (gc[s] != gg[s]) {
            first = s;
            break;
        }
    if (first < 0) printf("  greedy %d steps: identical\n", steps);
    else printf("  greedy %d steps: FIRST DIFFERENCE at step %d (cpu %d gpu %d, cpu top-2 margin %.3g)\n", steps, first,
                gc[first], gg[first], margin[first]);
    CHECK(first < 0, "greedy tokens differ at step %d", first);

    /* 5. state */
    int before_state = n_failed;
    state_checks(cpu, gpu, tok, quick ? 12 : 40, quick ? 4 : 16, tol);
    if (n_summary < 64)
        snprintf(summary[n_summary++], sizeof summary[0],
                 "SUMMARY %-12s %-4s %s blocks %.1e sel %ld | e2e %.1e over %d/%d argmax %d/%d sel %d | chunk %s | greedy %s | state %s | bf16 blocks %.1e e2e %.1e argmax %d/%d",
                 label, recipe, n_failed == fails_before ? "ok  " : "FAIL", blk, blk_sel, e, over, n, am, n, sel_bad,
                 chunk_ok ? "ok" : "DIFF", first < 0 ? "same" : "DIFF", n_failed == before_state ? "ok" : "FAIL", blk16,
                 e16, am16, n);

    free(ref);
    free(g1);
    free(g2);
    free(g16);
    free(sg16);
    free(sref);
    free(sg);
    free(sg2);
    free(tok);
    nf_backend_free(gpu);
    nf_backend_free(cpu);
    nf_model_free(m);
}

static int run(const char *cmd) {
    int rc = system(cmd);
    if (rc != 0) printf("  command failed (%d): %s\n", rc, cmd);
    return rc;
}

/* Long context: an f32 fixture run far past its top-k, so that the visible pools outnumber the selection budget
 * many times over (fixture base: 1024 pools vs 8 selected at 4096 tokens; kpool16: 256 vs 4). Blocks from
 * identical inputs over two prefill chunks and 4 decode steps at depth (selections exact, attention within
 * the f32 tolerance), end to end (logits within tolerance, selections identical), and a chunked GPU prefill
 * (chunk 777, odd; every chunk >= 16 tokens, so the same product kernels) bit-identical to one-shot. All with the
 * f32 GEMM (NF_CUDA_GEMM=f32). */
static void long_context(const char *fixture, int n, const char *build, const char *dir) {
    char path[512], cmd[2048];
    printf("== long context: fixture %s (f32), %d tokens\n", fixture, n);
    snprintf(path, sizeof path, "%s/long-%s.gguf", dir, fixture);
    snprintf(cmd, sizeof cmd, "%s/nf-convert tests/data/fixtures/%s -o %s --recipe f32 --no-tokenizer > %s/convert.log 2>&1",
             build, fixture, path, dir);
    if (run(cmd) != 0) {
        n_failed++;
        return;
    }
    nf_model *m = nf_model_load(path);
    CHECK(m != NULL, "load %s: %s", path, nf_error());
    nf_backend *cpu = m ? nf_cpu_backend_create(m, 0) : NULL, *gpu = m ? nf_backend_cuda_create(m, 0) : NULL;
    CHECK(!m || (cpu && gpu), "backends: %s", nf_error());
    if (!cpu || !gpu) {
        nf_backend_free(gpu);
        nf_backend_free(cpu);
        nf_model_free(m);
        unlink(path);
        return;
    }
    const int V = m->hp.n_vocab, n_mla = nf_mla_layer_count(&m->hp), width = nf_topk_width(&m->hp);
    const double tol = LOGIT_TOL;
    const int kpool = m->hp.idx_kpool > 0 ? m->hp.idx_kpool : 1;
    printf("  %d pools visible at the end, %d selected per query\n", n / kpool, m->hp.idx_topk / kpool);
    int32_t *tok = nf_xmalloc((size_t)n * sizeof(int32_t));
    uint64_t r = 987654321;
    for (int i = 0; i < n; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((r >> 33) % (uint64_t)V);
    }
    fails_before = n_failed;
    gemm_mode("f32"); /* the exact checks' mode (an f32 model takes the f32 GEMM path anyway) */
    const double blk = block_check(cpu, gpu, tok, n, tol, 1, "f32 GEMM", 4);
    const long blk_sel = last_sel_bad;
    const size_t nsel = (size_t)(n_mla > 0 ? n_mla : 1) * n * width;
    float *ref = nf_xmalloc((size_t)n * V * sizeof(float)), *g1 = nf_xmalloc((size_t)n * V * sizeof(float)),
          *g2 = nf_xmalloc((size_t)n * V * sizeof(float));
    int32_t *sref = nf_xcalloc(nsel, sizeof(int32_t)), *sg = nf_xcalloc(nsel, sizeof(int32_t)),
            *sg2 = nf_xcalloc(nsel, sizeof(int32_t));
    CHECK(prefill(cpu, tok, n, 0, ref, sref, n) == 0, "cpu prefill: %s", nf_error());
    CHECK(prefill(gpu, tok, n, 0, g1, sg, n) == 0, "gpu prefill: %s", nf_error());
    int over, am;
    const double e = compare_logits(g1, ref, n, V, tol, &over, &am);
    const int sel_bad = sel_rows_differ(sg, sref, (size_t)n_mla * n, width);
    printf("  prefill %d tokens: logits max rel %.2e (tol %.0e; %d/%d positions over), argmax %d/%d, selection rows "
           "differing %d/%d\n", n, e, tol, over, n, am, n, sel_bad, n_mla * n);
    CHECK(over == 0, "%d of %d positions over the logit tolerance", over, n);
    CHECK(sel_bad == 0, "%d selection rows differ", sel_bad);
    int chunk = n >= 2000 ? 777 : (n / 3) | 1; /* odd: chunks end inside pools */
    /* a last chunk below the GEMM's vectors takes the decode products, which round differently (NF_GPU_TEST_LONG=64
     * gave 21 + 21 + 21 + 1) */
    while (n % chunk && n % chunk < 16 && chunk + 2 < n) chunk += 2;
    CHECK(prefill(gpu, tok, n, chunk, g2, sg2, n) == 0, "gpu chunked: %s", nf_error());
    const int same = !memcmp(g1, g2, (size_t)n * V * sizeof(float)) && !memcmp(sg, sg2, nsel * sizeof(int32_t));
    printf("  gpu chunk %d vs one-shot: %s\n", chunk, same ? "bit-identical" : "DIFFERENT");
    CHECK(same, "gpu chunk %d differs from one-shot", chunk);
    if (n_summary < 64)
        snprintf(summary[n_summary++], sizeof summary[0],
                 "SUMMARY long %-7s %5d %s blocks %.1e sel %ld | e2e %.1e over %d/%d argmax %d/%d sel %d | chunk %s",
                 fixture, n, n_failed == fails_before ? "ok  " : "FAIL", blk, blk_sel, e, over, n, am, n, sel_bad,
                 same ? "exact" : "DIFF");
    gemm_mode(NULL);
    free(ref);
    free(g1);
    free(g2);
    free(sref);
    free(sg);
    free(sg2);
    free(tok);
    nf_backend_free(gpu);
    nf_backend_free(cpu);
    nf_model_free(m);
    unlink(path);
}

int nf_gpu_test_backend(int quick) {
    n_failed = 0;
    n_summary = 0;
    n_failed += nf_cuda_selftest();
    const char *build = getenv("NF_BUILD") ? getenv("NF_BUILD") : "build/cuda";
    char dir[] = "/tmp/nf-gpu-test.XXXXXX";
    if (!mkdtemp(dir)) nf_die("mkdtemp failed");
    static const char *fixtures[] = {"base", "shared", "kpool16", "nondefault"};
    static const char *recipes[] = {"f32", "bf16", "q8", "q4", "q2"};
    /* NF_GPU_TEST_SYNTH_ONLY=1: the synthetic tiny model only (the emulation's check of paths the fixtures' small
     * dims do not take: kv_lora_rank 64 for the one-kernel MLA core) */
    const int nfix = getenv("NF_GPU_TEST_SYNTH_ONLY") ? 0 : quick ? 1 : 4;
    int32_t tokens[512];
    char path[512], cmd[2048], label[64];
    const int npos = quick ? 40 : 128;
    /* NF_GPU_TEST_LONG_ONLY: only the long-context case (for the CPU emulation of scripts/cuemu) */
    const int long_only = getenv("NF_GPU_TEST_LONG_ONLY") != NULL;
    for (int r = 0; r < (long_only ? 0 : 5); r++) {
        const char *rc = recipes[r];
        /* NF_GPU_TEST_RECIPES=q8,q4: these recipes only (the emulation of a path that only some recipes' row
         * lengths take, e.g. the MoE pair launch at the tiny synthetic model's 256 columns: q8, q4) */
        const char *only = getenv("NF_GPU_TEST_RECIPES");
        if (only && *only) {
            char list[128];
            snprintf(list, sizeof list, ",%s,", only);
            char item[16];
            snprintf(item, sizeof item, ",%s,", rc);
            if (!strstr(list, item)) continue;
        } else if (quick && r != 0 && r != 4) {
            continue;
        }
        for (int fi = 0; fi < nfix; fi++) {
            snprintf(path, sizeof path, "%s/%s-%s.gguf", dir, fixtures[fi], rc);
            snprintf(cmd, sizeof cmd, "%s/nf-convert tests/data/fixtures/%s -o %s --recipe %s --no-tokenizer > %s/convert.log 2>&1",
                     build, fixtures[fi], path, rc, dir);
            if (run(cmd) != 0) {
                n_failed++;
                continue;
            }
            snprintf(cmd, sizeof cmd, "tests/data/fixtures/%s/tokens.txt", fixtures[fi]);
            int nt = read_tokens(cmd, tokens, npos);
            CHECK(nt >= 32, "fixture %s: %d tokens", fixtures[fi], nt);
            snprintf(label, sizeof label, "fixture %s", fixtures[fi]);
            if (nt >= 32) test_model(label, path, rc, tokens, nt, quick);
            unlink(path);
        }
        /* synthetic tiny model: real K-quant / IQ2 matrices (NF_GPU_TEST_FIXTURES_ONLY skips it) */
        if (getenv("NF_GPU_TEST_FIXTURES_ONLY")) continue;
        snprintf(path, sizeof path, "%s/synth-%s.gguf", dir, rc);
        snprintf(cmd, sizeof cmd, "%s/nf-synth --out %s --recipe %s --preset tiny --quiet > %s/synth.log 2>&1", build,
                 path, rc, dir);
        if (run(cmd) != 0) {
            n_failed++;
            continue;
        }
        uint64_t s = 12345;
        for (int i = 0; i < npos; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            tokens[i] = (int32_t)((s >> 33) % 4096);
        }
        test_model("synth tiny", path, rc, tokens, npos, quick);
        unlink(path);
    }
    /* NF_GPU_TEST_LONG=n overrides the length (the CPU emulation of scripts/cuemu needs a shorter run) */
    const int nlong = getenv("NF_GPU_TEST_LONG") ? atoi(getenv("NF_GPU_TEST_LONG")) : quick ? 300 : 4096;
    long_context("base", nlong, build, dir);
    if (!quick) long_context("kpool16", nlong, build, dir);
    unlink(strcat(strcpy(path, dir), "/convert.log"));
    unlink(strcat(strcpy(path, dir), "/synth.log"));
    rmdir(dir);
    for (int i = 0; i < n_summary; i++) printf("%s\n", summary[i]);
    printf("backend: %s (%d failed checks)\n", n_failed ? "FAIL" : "PASS", n_failed);
    return n_failed;
}
