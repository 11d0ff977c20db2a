/* cuda_splitk.h — decode products of a few f32 rows with long columns, split over the columns across CTAs
 * (cuda_splitk.cu: the hyper-connection projection). */
#ifndef NF_CUDA_SPLITK_H
#define NF_CUDA_SPLITK_H

#include "cuda/cuda_internal.h"

#define NF_SPLITK_MAX_T 8        /* tokens per launch (decode, speculative verify) */
#define NF_SPLITK_MAX_ROWS 32    /* rows of the matrix (glm53's hc projection: (2 + 4) x 4 = 24) */
#define NF_SPLITK_MAX_SLICES 256 /* column slices of 128 (rows of up to 32768 values) */

/* 1 when w (f32, <= 32 rows of a multiple of 128 columns, 256..32768) times T <= 8 aligned vectors takes the
 * split product */
int nf_cuda_splitk_fits(const nf_cuda_mat *w, int T, int64_t ldx, const float *x);
/* y[t][r] = (norm ? inv_rms(x[t]) : 1) * sum_c w[r][c] x[t][c]; returns 1 (nothing launched) when the shape does not
 * fit or the buffers are unavailable (inside a graph capture before first use): the caller takes another path */
int nf_cuda_matmul_splitk(nf_cuda *c, const nf_cuda_mat *w, const float *x, int T, int64_t ldx, int norm, float eps,
                          float *y, int64_t ldy);
/* hc_post of the streams X[T][hc][n] (y: the block outputs [T][n], mix: [T][hc + hc*hc]) fused with the next
 * site's projection mm[t][r] = inv_rms(X[t]) sum_c w[r][c] X[t][c] of the new streams: X is updated bit for bit as
 * nf_cuda_hc_post updates it. Returns 1 (nothing launched) when the shape does not fit (hc != 4, w not f32, ...) */
int nf_cuda_hc_post_project(nf_cuda *c, float *X, const float *y, const float *mix, int T, int hc, int64_t n,
                            const nf_cuda_mat *w, float eps, float *mm, int64_t ldm);
void nf_cuda_splitk_free(nf_cuda *c);

#endif
