/* matmul.c — threaded weight × activation products for the CPU backend (see matmul.h).
 *
 * Every product is the stored weight values, exactly as nf_dequantize gives them, dotted against the f32
 * activation in f32. Activations are never quantized (no Q8_0 / Q8_K activation as ggml does): quantizing an
 * activation is a discontinuous function of it, so a one-ulp difference upstream (another backend's summation
 * order, a different thread split) could move a value across a rounding boundary and change the product by a
 * whole quantization step, which chaotic models amplify. With f32 activations a model file is a continuous
 * function of its inputs, and two backends on the same file differ only by summation order.
 *
 * Loop order: each task owns a block of weight rows. For T > 1 tokens each row is decoded once into a per-task
 * f32 buffer (F32 rows are used in place) and every token is dotted against it with nf_dot_f32 while it is hot
 * in cache, so prefill reads and decodes the weights once. For one token (decode) a quantized row goes through
 * nf_vec_dot_f32 instead, whose AVX2 kernels decode each block in registers and use nf_dot_f32's accumulators
 * and order (vector k of every 32 values into accumulator k, then ((s0 + s1) + (s2 + s3))), so the result is
 * the same bits and a token's output does not depend on the chunk size: prefill, chunked prefill and decode
 * stay bit-identical (tests/c/test_forward_ops.c checks both paths against nf_dot_f32 of the dequantized row). */
#include "cpu/matmul.h"

#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

nf_mat nf_mat_of(const nf_tensor *t) {
    nf_mat m;
    m.data = t->data;
    m.type = t->type;
    m.n = t->ne[0];
    m.rows = t->ne[1];
    m.row_bytes = nf_row_bytes(t->type, t->ne[0]);
    return m;
}

nf_mat nf_mat_slice(const nf_tensor *t, int64_t k) {
    nf_mat m = nf_mat_of(t);
    m.data = (const char *)t->data + (size_t)k * (size_t)m.rows * m.row_bytes;
    return m;
}

nf_mat nf_mat_rows(nf_mat m, int64_t r0, int64_t nrows) {
    m.data = (const char *)m.data + (size_t)r0 * m.row_bytes;
    m.rows = nrows;
    return m;
}

float nf_dot_f32(const float *a, const float *b, int64_t n) {
    int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    float acc = _mm_cvtss_f32(h);
#else
    float p[8] = {0};
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) p[j] += a[i + j] * b[i + j];
    float acc = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
#endif
    for (; i < n; i++) acc += a[i] * b[i];
    return acc;
}

#if defined(__AVX2__) && defined(__FMA__)
/* nf_dot_f32 of one row against four activation rows at once (y[t*ldy] for t < 4): each token keeps its own four
 * accumulators, filled and reduced exactly as nf_dot_f32 does, so every result is nf_dot_f32's bits; the 16
 * independent multiply-add chains (instead of 4) and the shared row loads make prefill several times faster.
 * n must be a multiple of 32. */
static void dot_f32_x4(const float *w, const float *x, int64_t ldx, int64_t n, float *y, int64_t ldy) {
    __m256 s[4][4];
#pragma GCC unroll 4
    for (int t = 0; t < 4; t++)
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) s[t][k] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 32)
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m256 wk = _mm256_loadu_ps(w + i + 8 * k);
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++) s[t][k] = _mm256_fmadd_ps(wk, _mm256_loadu_ps(x + t * ldx + i + 8 * k), s[t][k]);
        }
#pragma GCC unroll 4
    for (int t = 0; t < 4; t++) {
        const __m256 v = _mm256_add_ps(_mm256_add_ps(s[t][0], s[t][1]), _mm256_add_ps(s[t][2], s[t][3]));
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        h = _mm_add_ss(h, _mm_movehdup_ps(h));
        y[t * ldy] = _mm_cvtss_f32(h);
    }
}
#endif

/* y[t*ldy] = nf_dot_f32(row, x + t*ldx, n) for t < T */
static void dot_tokens(const float *row, const float *x, int64_t ldx, int T, int64_t n, float *y, int64_t ldy) {
    int t = 0;
#if defined(__AVX2__) && defined(__FMA__)
    if (n % 32 == 0)
        for (; t + 4 <= T; t += 4) dot_f32_x4(row, x + t * ldx, ldx, n, y + t * ldy, ldy);
#endif
    for (; t < T; t++) y[t * ldy] = nf_dot_f32(row, x + t * ldx, n);
}

void nf_mat_row_f32(const nf_mat *w, int64_t r, float *out) {
    const void *row = (const char *)w->data + (size_t)r * w->row_bytes;
    if (w->type == NF_TYPE_F32) memcpy(out, row, (size_t)w->n * sizeof(float));
    else nf_dequantize(w->type, row, out, w->n);
}

typedef struct {
    const nf_mat *w;
    const float *x;
    int T;
    int64_t ldx, ldy;
    float *y;
    int64_t rows_per_task;
} mm_job;

static void mm_rows(const mm_job *j, int64_t r0, int64_t r1) {
    const nf_mat *w = j->w;
    if (w->type == NF_TYPE_F32) {
        for (int64_t r = r0; r < r1; r++) {
            const float *row = (const float *)((const char *)w->data + (size_t)r * w->row_bytes);
            dot_tokens(row, j->x, j->ldx, j->T, w->n, j->y + r, j->ldy);
        }
        return;
    }
#if defined(__AVX2__) && defined(__FMA__)
    /* one token: the fused kernels decode each block in registers (no buffer round trip); their sum is
     * nf_dot_f32's on the dequantized row, bit for bit (same accumulators, same order) */
    if (j->T == 1 && nf_type_get(w->type)->quantized) {
        for (int64_t r = r0; r < r1; r++)
            j->y[r] = nf_vec_dot_f32(w->type, w->n, (const char *)w->data + (size_t)r * w->row_bytes, j->x);
        return;
    }
#endif
    float *buf = malloc((size_t)w->n * sizeof(float));
    if (!buf) abort();
    for (int64_t r = r0; r < r1; r++) {
        nf_mat_row_f32(w, r, buf);
        dot_tokens(buf, j->x, j->ldx, j->T, w->n, j->y + r, j->ldy);
    }
    free(buf);
}

static void mm_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    const mm_job *j = ctx;
    int64_t r0 = task * j->rows_per_task;
    int64_t r1 = r0 + j->rows_per_task;
    if (r1 > j->w->rows) r1 = j->w->rows;
    mm_rows(j, r0, r1);
}

static void matmul_impl(nf_pool *pool, const nf_mat *w, const float *x, int T, int64_t ldx, float *y, int64_t ldy) {
    if (T <= 0 || w->rows <= 0) return;
    mm_job j = {.w = w, .x = x, .T = T, .ldx = ldx, .ldy = ldy, .y = y};
    int nt = nf_pool_size(pool);
    double work = (double)w->rows * (double)w->n * (double)T;
    if (!pool || nt == 1 || work < 131072.0 || w->rows < 2) {
        mm_rows(&j, 0, w->rows);
    } else {
        int64_t tasks = (int64_t)nt * 4;
        if (tasks > w->rows) tasks = w->rows;
        j.rows_per_task = (w->rows + tasks - 1) / tasks;
        tasks = (w->rows + j.rows_per_task - 1) / j.rows_per_task;
        nf_pool_run(pool, tasks, mm_task, &j);
    }
}

void nf_matmul(nf_pool *pool, const nf_mat *w, const float *x, int T, int64_t ldx, float *y, int64_t ldy) {
    matmul_impl(pool, w, x, T, ldx, y, ldy);
}

void nf_matmul_serial(const nf_mat *w, const float *x, int T, int64_t ldx, float *y, int64_t ldy) {
    matmul_impl(NULL, w, x, T, ldx, y, ldy);
}
