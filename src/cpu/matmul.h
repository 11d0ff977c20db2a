/* matmul.h — threaded matrix × activations over any stored weight type (the CPU backend's workhorse).
 *
 * A weight matrix is `rows` rows of `n` contiguous values of one nf_type (ggml order {n, rows}); a 3-D
 * tensor {n, rows, k} is k such matrices and nf_mat_slice picks one (an expert, an MLA head). Activations are
 * f32 rows. For every weight type, quantized ones included, the product is the stored weight values exactly as
 * nf_dequantize gives them dotted against the f32 activation in f32; activations are never quantized (ggml's
 * Q8_0 / Q8_K activations would make the forward discontinuous in its inputs; see matmul.c). */
#ifndef NF_CPU_MATMUL_H
#define NF_CPU_MATMUL_H

#include <stdint.h>

#include "cpu/threads.h"
#include "model/model.h"

typedef struct {
    const void *data;
    uint32_t type;
    int64_t n;      /* values per row (contraction length) */
    int64_t rows;   /* output rows */
    size_t row_bytes;
} nf_mat;

/* View of a 2-D weight tensor (a 3-D one with ne[2] == 1 too). */
nf_mat nf_mat_of(const nf_tensor *t);
/* Matrix k of a 3-D tensor {n, rows, K}. */
nf_mat nf_mat_slice(const nf_tensor *t, int64_t k);
/* Rows [r0, r0 + nrows) of a matrix. */
nf_mat nf_mat_rows(nf_mat m, int64_t r0, int64_t nrows);

/* y[t*ldy + r] = W[r,:] · x[t*ldx + :] for t < T, r < W.rows. Threaded over rows when the pool is given
 * and the product is big enough. */
void nf_matmul(nf_pool *pool, const nf_mat *w, const float *x, int T, int64_t ldx, float *y, int64_t ldy);

/* Single-threaded variant for use inside a task that is already running on the pool. */
void nf_matmul_serial(const nf_mat *w, const float *x, int T, int64_t ldx, float *y, int64_t ldy);

/* Dequantize row r of a matrix into out[n] (f32). */
void nf_mat_row_f32(const nf_mat *w, int64_t r, float *out);

/* Plain f32 dot product (vectorised; used for F32 weights and attention scores). */
float nf_dot_f32(const float *a, const float *b, int64_t n);

#endif
