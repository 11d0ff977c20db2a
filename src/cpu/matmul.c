/* matmul.c — threaded weight × activation products for the CPU backend (see matmul.h).
 *
 * Loop order: each task owns a block of weight rows and runs every token against each row while it is hot in
 * cache, so prefill over T tokens reads the weights once. F32 rows are dotted directly; F16/BF16 rows are
 * widened to f32 first (exact); quantized rows use the formats library's nf_vec_dot against activations
 * converted once per call. */
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

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
/* Q8_0 weight row · Q8_0 activation (34-byte blocks: f16 scale, 32 x int8), AVX2; same sum as nf_vec_dot. */
static float dot_q8_0_avx2(int64_t n, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    __m256 acc = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t i = 0; i < n / 32; i++, a += 34, b += 34) {
        uint16_t ha, hb;
        memcpy(&ha, a, 2);
        memcpy(&hb, b, 2);
        __m256i qa = _mm256_loadu_si256((const __m256i *)(a + 2));
        __m256i qb = _mm256_loadu_si256((const __m256i *)(b + 2));
        __m256i ax = _mm256_sign_epi8(qa, qa);
        __m256i sy = _mm256_sign_epi8(qb, qa);
        __m256i p16 = _mm256_maddubs_epi16(ax, sy);
        __m256i p32 = _mm256_madd_epi16(p16, ones);
        float d = _cvtsh_ss(ha) * _cvtsh_ss(hb);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), _mm256_set1_ps(d), acc);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}
#define HAVE_Q8_0_AVX2 1
#endif

void nf_mat_row_f32(const nf_mat *w, int64_t r, float *out) {
    const void *row = (const char *)w->data + (size_t)r * w->row_bytes;
    if (w->type == NF_TYPE_F32) memcpy(out, row, (size_t)w->n * sizeof(float));
    else nf_dequantize(w->type, row, out, w->n);
}

typedef struct {
    const nf_mat *w;
    const float *x;
    const void *xq;       /* quantized activations, T rows of xq_bytes */
    size_t xq_bytes;
    int T;
    int64_t ldx, ldy;
    float *y;
    int64_t rows_per_task;
} mm_job;

static void mm_rows(const mm_job *j, int64_t r0, int64_t r1) {
    const nf_mat *w = j->w;
    uint32_t type = w->type;
    const nf_type_info *ti = nf_type_get(type);
    if (type == NF_TYPE_F32) {
        for (int64_t r = r0; r < r1; r++) {
            const float *row = (const float *)((const char *)w->data + (size_t)r * w->row_bytes);
            for (int t = 0; t < j->T; t++) j->y[t * j->ldy + r] = nf_dot_f32(row, j->x + t * j->ldx, w->n);
        }
    } else if (!ti->quantized) {
        float *buf = malloc((size_t)w->n * sizeof(float));
        if (!buf) abort();
        for (int64_t r = r0; r < r1; r++) {
            nf_mat_row_f32(w, r, buf);
            for (int t = 0; t < j->T; t++) j->y[t * j->ldy + r] = nf_dot_f32(buf, j->x + t * j->ldx, w->n);
        }
        free(buf);
    } else {
#ifdef HAVE_Q8_0_AVX2
        if (type == NF_TYPE_Q8_0) {
            for (int64_t r = r0; r < r1; r++) {
                const void *row = (const char *)w->data + (size_t)r * w->row_bytes;
                for (int t = 0; t < j->T; t++)
                    j->y[t * j->ldy + r] = dot_q8_0_avx2(w->n, row, (const char *)j->xq + (size_t)t * j->xq_bytes);
            }
            return;
        }
#endif
        for (int64_t r = r0; r < r1; r++) {
            const void *row = (const char *)w->data + (size_t)r * w->row_bytes;
            for (int t = 0; t < j->T; t++)
                j->y[t * j->ldy + r] = nf_vec_dot(type, w->n, row, (const char *)j->xq + (size_t)t * j->xq_bytes);
        }
    }
}

static void mm_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    const mm_job *j = ctx;
    int64_t r0 = task * j->rows_per_task;
    int64_t r1 = r0 + j->rows_per_task;
    if (r1 > j->w->rows) r1 = j->w->rows;
    mm_rows(j, r0, r1);
}

static void *prepare_activations(const nf_mat *w, const float *x, int T, int64_t ldx, size_t *bytes) {
    uint32_t at = nf_vec_dot_type(w->type);
    *bytes = nf_row_bytes(at, w->n);
    void *xq = malloc(*bytes * (size_t)T + 64);
    if (!xq) abort();
    for (int t = 0; t < T; t++) nf_quantize_activation(w->type, x + t * ldx, (char *)xq + (size_t)t * *bytes, w->n);
    return xq;
}

static void matmul_impl(nf_pool *pool, const nf_mat *w, const float *x, int T, int64_t ldx, float *y, int64_t ldy) {
    if (T <= 0 || w->rows <= 0) return;
    mm_job j = {.w = w, .x = x, .T = T, .ldx = ldx, .ldy = ldy, .y = y};
    void *xq = NULL;
    if (nf_type_get(w->type)->quantized) {
        xq = prepare_activations(w, x, T, ldx, &j.xq_bytes);
        j.xq = xq;
    }
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
    free(xq);
}

void nf_matmul(nf_pool *pool, const nf_mat *w, const float *x, int T, int64_t ldx, float *y, int64_t ldy) {
    matmul_impl(pool, w, x, T, ldx, y, ldy);
}

void nf_matmul_serial(const nf_mat *w, const float *x, int T, int64_t ldx, float *y, int64_t ldy) {
    matmul_impl(NULL, w, x, T, ldx, y, ldy);
}
