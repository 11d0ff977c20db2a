/* cuda_gemv.h — single-token matrix-vector products on the GPU for every weight format we store.
 *
 * y[r] = sum_c W[r][c] * x[c] for a row-major weight matrix in any supported nf_type (rows stored as the GGUF
 * stores them: `cols` elements per row, rows back to back), f32 activations and outputs. This is the first,
 * plain version: one warp per row, each lane decoding whole 32-element chunks of its row. It is the
 * correctness baseline the fused decode kernels of later work are compared against.
 *
 * C API (callable from the C library, which is compiled by the C compiler). Returns 0, or -1 with nf_error(). */
#ifndef NF_CUDA_GEMV_H
#define NF_CUDA_GEMV_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Copy format lookup tables (IQ2_XXS grid and signs) to the device; call once before any gemv. */
int nf_cuda_gemv_init(void);
/* True if nf_cuda_gemv can run weights of this type. */
int nf_cuda_gemv_supports(uint32_t type);
/* Launch on `stream` (a cudaStream_t, NULL for the default stream). All pointers are device pointers.
 * cols must be a multiple of 32 (of 256 for the K-quants and IQ2_XXS, as the format itself requires). */
int nf_cuda_gemv(uint32_t type, const void *w, const float *x, float *y, int64_t rows, int64_t cols, void *stream);

#ifdef __cplusplus
}
#endif

#endif
