/* q8_0.c — Q8_0: blocks of 32 weights, one f16 scale d and 32 int8 values; x = d * q.
 *
 * The quantizer is ggml's reference one (d = amax/127 rounded to f16, q = roundf(x / d) with ties away from
 * zero), which is also what the gguf Python package computes, so files quantized by either are byte-equal.
 * Q8_0 is also the activation format for Q8_0 weights: the dot is sum over blocks of dw*dx*sum(qw*qx). */
#include "formats/quants.h"

void nf_dequant_q8_0_scalar(const void *src, float *dst, int64_t nb) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < nb; i++, b += NF_Q8_0_BYTES, dst += NF_QK8_0) {
        const float d = nf_ldh(b);
        const int8_t *q = (const int8_t *)(b + 2);
        for (int j = 0; j < NF_QK8_0; j++) dst[j] = (float)q[j] * d;
    }
}

#if defined(__AVX2__) && defined(__FMA__)
/* the block's 32 values: the same products as the plain C loop (one multiply per value) */
static inline void q8_0_decode(const uint8_t *b, int sub, __m256 v[4]) {
    (void)sub;
    const __m256 d = _mm256_set1_ps(nf_ldh_fast(b));
    v[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(nf_avx2_i8x8(b + 2)), d);
    v[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(nf_avx2_i8x8(b + 10)), d);
    v[2] = _mm256_mul_ps(_mm256_cvtepi32_ps(nf_avx2_i8x8(b + 18)), d);
    v[3] = _mm256_mul_ps(_mm256_cvtepi32_ps(nf_avx2_i8x8(b + 26)), d);
}
NF_AVX2_DEQUANT_DOTF(q8_0, NF_Q8_0_BYTES, 1, q8_0_decode)
#else
void nf_dequant_q8_0(const void *src, float *dst, int64_t nb) { nf_dequant_q8_0_scalar(src, dst, nb); }
float nf_dotf_q8_0(int64_t nb, const void *w, const float *x) { return nf_dotf_blocks(NF_TYPE_Q8_0, nb, w, x); }
#endif

static inline int8_t q8_of(float v) {       /* v already rounded; guards nan/inf inputs against UB */
    if (v >= 127.0f) return 127;
    if (v <= -128.0f) return -128;
    return v == v ? (int8_t)v : 0;
}

void nf_quant_q8_0(const float *src, void *dst, int64_t nb) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < nb; i++, b += NF_Q8_0_BYTES, src += NF_QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < NF_QK8_0; j++) {
            float a = fabsf(src[j]);
            if (a > amax) amax = a;
        }
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        nf_st16(b, nf_f32_to_f16(d));
        int8_t *q = (int8_t *)(b + 2);
        for (int j = 0; j < NF_QK8_0; j++) q[j] = q8_of(roundf(src[j] * id));
    }
}

/* Plain C version: the fallback, and the reference the AVX2 version is tested against. */
float nf_dot_q8_0_scalar(int64_t nb, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    float sum = 0.0f;
    for (int64_t i = 0; i < nb; i++, a += NF_Q8_0_BYTES, b += NF_Q8_0_BYTES) {
        const int8_t *qa = (const int8_t *)(a + 2), *qb = (const int8_t *)(b + 2);
        sum += (float)nf_sdot_ii(qa, qb, NF_QK8_0) * (nf_ldh_fast(a) * nf_ldh_fast(b));
    }
    return sum;
}

#if defined(__AVX2__)
float nf_dot_q8_0(int64_t nb, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    __m256 acc = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t i = 0; i < nb; i++, a += NF_Q8_0_BYTES, b += NF_Q8_0_BYTES) {
        /* weights may hold -128 (hand-made files): |-128| is 128 unsigned, still exact against |x| <= 127 */
        const __m256i p = _mm256_madd_epi16(nf_avx2_pairs_ii(nf_avx2_load(a + 2), nf_avx2_load(b + 2)), ones);
        const __m256 d = _mm256_set1_ps(nf_ldh_fast(a) * nf_ldh_fast(b));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(d, _mm256_cvtepi32_ps(p)));
    }
    return nf_avx2_hsum_ps(acc);
}
#else
float nf_dot_q8_0(int64_t nb, const void *w, const void *x) { return nf_dot_q8_0_scalar(nb, w, x); }
#endif
