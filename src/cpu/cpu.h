/* cpu.h — internals shared by the CPU reference backend's files (not a public header).
 *
 * The CPU backend keeps the model, the thread pool and a cache of small parameter vectors (norm weights,
 * biases, conv taps, hc base/scale...) converted once to f32, so the block files can treat every small
 * tensor as a float array whatever type the file stored it in. Each block lives in its own file:
 * hc.c, kda.c, mla.c, indexer.c, moe.c; vec.c holds the row-wise elementwise helpers; backend_cpu.c builds
 * the nf_backend table. */
#ifndef NF_CPU_CPU_H
#define NF_CPU_CPU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu/matmul.h"
#include "cpu/threads.h"
#include "model/backend.h"

typedef struct {
    const void *key;
    float *val;
} nf_vec_entry;

typedef struct {
    const nf_model *m;
    nf_pool *pool;
    nf_vec_entry *vecs;     /* open-addressed table of converted small tensors */
    size_t vecs_cap, vecs_n;
} nf_cpu;

static inline nf_cpu *nf_cpu_of(nf_backend *be) { return (nf_cpu *)be->impl; }

/* The f32 values of a small tensor (any supported type); NULL (with nf_fail) when absent or unsupported.
 * Must be called from the thread that drives the backend, not from pool tasks. */
const float *nf_cpu_vec(nf_cpu *c, const nf_tensor *t);

/* ---- elementwise helpers (vec.c) ---- */
/* out[i] = x[i] / sqrt(mean(x^2) + eps) * (w ? w[i] : 1) */
void nf_rmsnorm_row(const float *x, int64_t n, float eps, const float *w, float *out);
void nf_layernorm_row(const float *x, int64_t n, float eps, const float *w, const float *b, float *out);
/* x / sqrt(sum x^2 + eps), in place */
void nf_l2norm_row(float *x, int64_t n, float eps);
void nf_softmax_row(float *x, int64_t n);
float nf_silu(float x);
float nf_softplus(float x);
void nf_swiglu_clamped(const float *g, const float *u, int64_t n, float limit, float *out);

static inline float nf_sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* ---- blocks (one file each) ---- */
int nf_cpu_hc_pre(nf_backend *be, int il, int site, const float *X, int T, float *h, float *mix);
int nf_cpu_hc_post(nf_backend *be, float *X, const float *y, const float *mix, int T);
int nf_cpu_kda_block(nf_backend *be, int il, nf_state *st, const float *x, int T, float *y);
int nf_cpu_mla_project(nf_backend *be, int il, nf_state *st, const float *x, int T, float *qr, float *q);
int nf_cpu_mla_attend(nf_backend *be, int il, nf_state *st, const float *q, const int32_t *sel, int T, float *y);
int nf_cpu_indexer_select(nf_backend *be, int il, nf_state *st, const float *x, const float *qr, int T,
                          int32_t *sel);
int nf_cpu_dense_mlp(nf_backend *be, int il, const float *x, int T, float *y);
int nf_cpu_moe_block(nf_backend *be, int il, const float *x, int T, float *y);

/* Pure helpers exposed for unit tests. */
/* Sinkhorn projection of a hc x hc logit matrix (row i = source stream): softmax over j, + eps, then column
 * normalisation, then (iters - 1) x (row, column) normalisation. In place. */
void nf_hc_sinkhorn(float *comb, int hc, int iters, float eps);
/* Pool one k-pool: P[c] = sum_m softmax_m(gate[m][c] + ape[m][c]) * key[m][c]. */
void nf_kpool_compress(const float *key, const float *gate, const float *ape, int kpool, int hd, float *P);
/* Indices of the top k of n scores, ordered by descending score, ties by ascending index. Returns the
 * number written (min(k, n)). */
int nf_topk_desc(const float *score, int n, int k, int32_t *out);
/* One KDA recurrence step for one head (fp32): S[dk][dv] *= exp(g) per key row; delta rule with beta;
 * o[dv] = S^T q. */
void nf_kda_step(float *S, int dk, int dv, const float *q, const float *k, const float *v, const float *g,
                 float beta, float *o);

#endif
