/* cuda_gemm.h — the tiled matrix product for many activation vectors at once (prefill), C interface.
 *
 * Same product as the backend's nf_cuda_matmul_ex (cuda_internal.h), for nvec vectors:
 *   y[v*ldy + r] = W_s[r,:] . x[(v/xdiv)*ldx + :]   for r < rows, v < nvec,
 *   s = ids ? ids[v] : v % smod   (W_s: matrix s of a 3-D tensor, at w + s * slice_bytes)
 * computed by tiles: each thread block dequantizes a tile of weight rows once for a tile of vectors that use the
 * same matrix (all vectors for a 2-D matrix; the vectors of one head for smod > 1; the vectors routed to one
 * expert, grouped on the device without a host synchronisation, for ids). See cuda_gemm.cu for the numerics.
 *
 * Every pointer is a device pointer; the work is queued on `stream` (a cudaStream_t, NULL for the default
 * stream). ids values must lie in [0, nmat). */
#ifndef NF_CUDA_GEMM_H
#define NF_CUDA_GEMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Vectors per matrix from which the backend's products use this GEMM (nf_cuda_gemm_try): below it the per-vector
 * kernel, which reads each weight row once per vector, is as cheap and stays exact to f32. */
#define NF_CUDA_GEMM_MIN_VECTORS 16

typedef struct {
    const void *w;       /* device address of matrix 0 */
    uint32_t type;       /* nf_type: F32, F16, BF16, Q8_0, Q4_K, Q6_K, Q2_K, IQ2_XXS */
    int64_t n;           /* values per row (the reduction length) */
    int64_t rows;        /* rows per matrix */
    int64_t nmat;        /* matrices (3-D tensors); ids index them */
    size_t row_bytes;    /* bytes between rows */
    size_t slice_bytes;  /* bytes between matrices */
} nf_gemm_weights;

typedef enum {
    NF_GEMM_AUTO = 0,    /* F32 weights: NF_GEMM_F32; every other format: NF_GEMM_BF16 */
    NF_GEMM_BF16 = 1,    /* tensor cores: weights and activations rounded to bf16, f32 accumulation */
    NF_GEMM_F32 = 2,     /* CUDA cores, f32 throughout (same tiling) */
} nf_gemm_mode;

/* 0: queued; 1: this product is not handled (a type or a weight alignment the kernels do not take; nothing
 * queued, the caller uses another kernel); -1: error (nf_error). */
int nf_cuda_gemm(const nf_gemm_weights *w, const float *x, int64_t ldx, int xdiv, int smod, const int32_t *ids,
                 float *y, int64_t ldy, int nvec, nf_gemm_mode mode, void *stream);
/* NF_CUDA_GEMM_PREDEQ (default on, =off): quantized matrices of >= NF_GEMM_PREDEQ_MIN_VECTORS vectors per matrix
 * (not routed) are decoded once into a bf16 copy and multiplied as BF16 (the same bits); the count of such products so far */
#define NF_GEMM_PREDEQ_MIN_VECTORS 4096
/* NF_CUDA_GEMM_PREDEQ_EXPERTS (default on, =off): routed experts of >= this many vectors per expert on average decoded once
 * per batch of experts (the same bits); counted with the others */
#define NF_GEMM_PREDEQ_EXPERT_MIN_VECTORS 256
int nf_cuda_gemm_predeq_count(void);

#ifdef __cplusplus
}
#endif

#endif
