/* q6_k.c — Q6_K: super-blocks of 256 weights in 16 sub-blocks of 16; x = d*sc[j]*(q-32), q in 0..63.
 *
 * Layout (210 bytes): ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16], f16 d. In each 128-value
 * half: ql[l] holds values l (low nibble) and l+64 (high nibble), ql[l+32] holds l+32 and l+96, and qh[l]
 * holds the high bits of l, l+32, l+64, l+96 at bit offsets 0, 2, 4, 6.
 *
 * Reference quantizer (the method of ggml's quantize_row_q6_K_ref): per sub-block a symmetric fit
 * (nf_make_qx_quants, nmax 32, weights x^2, or qw*sqrt(sigma2+x^2) with an importance vector), then the 16
 * scales are quantized to int8 against the scale of largest magnitude (which maps to -128), d = 1/iscale in
 * f16, and q is recomputed with the rounded scales. Without an importance vector the bytes equal ggml's
 * (scripts/check_quants_vs_ggml.py); with one, our own refinement follows (refit below). */
#include "formats/quants.h"

void nf_dequant_q6_k_scalar(const void *src, float *dst, int64_t nb) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < nb; i++, b += NF_Q6_K_BYTES) {
        const float d = nf_ldh(b + 208);
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        for (int n = 0; n < NF_QK_K; n += 128, ql += 64, qh += 32, sc += 8, dst += 128) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                dst[l] = d * (float)sc[is] * (float)q1;
                dst[l + 32] = d * (float)sc[is + 2] * (float)q2;
                dst[l + 64] = d * (float)sc[is + 4] * (float)q3;
                dst[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

#if defined(__AVX2__) && defined(__FMA__)
/* sub-block j (32 values: half j/4, quarter k = j%4 of the plain C loop's q1..q4): the same operations as the
 * plain C loop ((d * scale) * q; values l < 16 and l >= 16 have their own scale) */
static inline void q6_k_decode(const uint8_t *b, int j, __m256 v[4]) {
    const int n = j / 4, k = j % 4;
    const uint8_t *ql = b + 64 * n + 32 * (k & 1), *qh = b + 128 + 32 * n;
    const int8_t *sc = (const int8_t *)(b + 192 + 8 * n + 2 * k);
    const float d = nf_ldh_fast(b + 208);
    const __m256 d0 = _mm256_set1_ps(d * (float)sc[0]), d1 = _mm256_set1_ps(d * (float)sc[1]);
    const __m128i lshift = _mm_cvtsi32_si128(4 * (k >> 1)), hshift = _mm_cvtsi32_si128(2 * k);
    const __m256i low4 = _mm256_set1_epi32(0xF), three = _mm256_set1_epi32(3), off = _mm256_set1_epi32(32);
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        const __m256i lo = _mm256_and_si256(_mm256_srl_epi32(nf_avx2_u8x8(ql + 8 * g), lshift), low4);
        const __m256i hi = _mm256_and_si256(_mm256_srl_epi32(nf_avx2_u8x8(qh + 8 * g), hshift), three);
        const __m256i q = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), off);
        v[g] = _mm256_mul_ps(g < 2 ? d0 : d1, _mm256_cvtepi32_ps(q));
    }
}
NF_AVX2_DEQUANT_DOTF(q6_k, NF_Q6_K_BYTES, 8, q6_k_decode)
#else
void nf_dequant_q6_k(const void *src, float *dst, int64_t nb) { nf_dequant_q6_k_scalar(src, dst, nb); }
float nf_dotf_q6_k(int64_t nb, const void *w, const float *x) { return nf_dotf_blocks(NF_TYPE_Q6_K, nb, w, x); }
#endif

/* Importance-vector path only (ggml's reference method, reproduced exactly by the weights-only path, has no
 * such step). Two rounds of: move each sub-block's int8 scale code by at most one step where that lowers its
 * weighted error (q re-rounded); then refit the f16 d by weighted least squares with codes and q fixed,
 * re-round q, and keep that only if the weighted error drops. */
static double werr(const float *x, const float *w, const int8_t *sc, float df, const int8_t *L) {
    double e = 0;
    for (int k = 0; k < NF_QK_K; k++) {
        const double y = (double)(df * (float)sc[k / 16]) * (L[k] - 32) - x[k];
        e += w[k] * y * y;
    }
    return e;
}

static void requant(const float *x, const int8_t *sc, float df, int8_t *L) {
    for (int j = 0; j < 16; j++) {
        const float d = df * (float)sc[j];
        if (d == 0.0f) continue;
        for (int ii = 0; ii < 16; ii++)
            L[16 * j + ii] = (int8_t)(nf_clampi(nf_nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
    }
}

static void refit(const float *x, const float *w, uint8_t *b, int8_t *L) {
    int8_t *sc = (int8_t *)(b + 192);
    for (int round = 0; round < 2; round++) {
        const float df = nf_ldh(b + 208);
        for (int j = 0; j < 16; j++) {
            const int s0 = sc[j];
            int bs = s0;
            double be = -1;
            int8_t Lb[16];
            memcpy(Lb, L + 16 * j, 16);
            for (int s = s0 - 1; s <= s0 + 1; s++) {
                if (s < -128 || s > 127) continue;
                const float d = df * (float)s;
                double e = 0;
                int8_t Lt[16];
                for (int l = 0; l < 16; l++) {
                    const float xv = x[16 * j + l];
                    Lt[l] = d != 0.0f ? (int8_t)(nf_clampi(nf_nearest_int(xv / d), -32, 31) + 32) : L[16 * j + l];
                    const double y = (double)d * (Lt[l] - 32) - xv;
                    e += w[16 * j + l] * y * y;
                }
                if (be < 0 || e < be) { be = e; bs = s; memcpy(Lb, Lt, 16); }
            }
            sc[j] = (int8_t)bs;
            memcpy(L + 16 * j, Lb, 16);
        }
        const double best = werr(x, w, sc, df, L);
        double saa = 0, sax = 0;
        for (int k = 0; k < NF_QK_K; k++) {
            const double a = (double)sc[k / 16] * (L[k] - 32);
            saa += w[k] * a * a;
            sax += w[k] * a * x[k];
        }
        if (!(saa > 0)) return;
        const double d = sax / saa;
        if (!(fabs(d) <= 65504)) return;
        const uint16_t dh = nf_f32_to_f16((float)d);
        int8_t L2[NF_QK_K];
        memcpy(L2, L, sizeof L2);
        requant(x, sc, nf_f16_to_f32(dh), L2);
        if (!(werr(x, w, sc, nf_f16_to_f32(dh), L2) < best)) return;
        nf_st16(b + 208, dh);
        memcpy(L, L2, sizeof L2);
    }
}

void nf_quant_q6_k(const float *x, void *dst, int64_t nb, const float *qw) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < nb; i++, b += NF_Q6_K_BYTES, x += NF_QK_K, qw = qw ? qw + NF_QK_K : NULL) {
        int8_t L[NF_QK_K];
        float scales[16], weights[16], wall[NF_QK_K];
        float sigma2 = 0.0f;
        if (qw) {
            for (int l = 0; l < NF_QK_K; l++) sigma2 += x[l] * x[l];
            sigma2 /= NF_QK_K;
        }
        float max_scale = 0.0f, max_abs_scale = 0.0f;
        for (int ib = 0; ib < 16; ib++) {
            const float *xs = x + 16 * ib;
            if (qw) {
                for (int l = 0; l < 16; l++) weights[l] = qw[16 * ib + l] * sqrtf(sigma2 + xs[l] * xs[l]);
                memcpy(wall + 16 * ib, weights, sizeof weights);
            }
            const float scale = nf_make_qx_quants(16, 32, xs, L + 16 * ib, 1, qw ? weights : NULL);
            scales[ib] = scale;
            if (fabsf(scale) > max_abs_scale) {
                max_abs_scale = fabsf(scale);
                max_scale = scale;
            }
        }
        if (!(max_abs_scale >= 1e-15f)) {
            memset(b, 0, NF_Q6_K_BYTES);
            continue;
        }
        const float iscale = -128.0f / max_scale;
        const uint16_t dh = nf_f32_to_f16(1.0f / iscale);
        nf_st16(b + 208, dh);
        int8_t *sc = (int8_t *)(b + 192);
        for (int ib = 0; ib < 16; ib++) sc[ib] = (int8_t)nf_clampi(nf_nearest_int(iscale * scales[ib]), -128, 127);
        requant(x, sc, nf_f16_to_f32(dh), L);
        if (qw) refit(x, wall, b, L);
        uint8_t *ql = b, *qh = b + 128;
        for (int j = 0; j < NF_QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                const uint8_t q1 = (uint8_t)L[j + l], q2 = (uint8_t)L[j + l + 32];
                const uint8_t q3 = (uint8_t)L[j + l + 64], q4 = (uint8_t)L[j + l + 96];
                ql[l] = (uint8_t)((q1 & 0xF) | ((q3 & 0xF) << 4));
                ql[l + 32] = (uint8_t)((q2 & 0xF) | ((q4 & 0xF) << 4));
                qh[l] = (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
            }
        }
    }
}

/* Plain C version: the fallback, and the reference the AVX2 version is tested against. */
float nf_dot_q6_k_scalar(int64_t nb, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    float sum = 0.0f;
    for (int64_t i = 0; i < nb; i++, a += NF_Q6_K_BYTES, b += NF_Q8_K_BYTES) {
        const uint8_t *ql = a, *qh = a + 128;
        const int8_t *sc = (const int8_t *)(a + 192);
        const int8_t *q8 = (const int8_t *)(b + 4);
        int8_t aux[NF_QK_K];
        for (int n = 0; n < 2; n++) {
            int8_t *o = aux + 128 * n;
            const uint8_t *l4 = ql + 64 * n, *h2 = qh + 32 * n;
            for (int l = 0; l < 32; l++) {
                o[l] = (int8_t)(((l4[l] & 0xF) | ((h2[l] & 3) << 4)) - 32);
                o[l + 32] = (int8_t)(((l4[l + 32] & 0xF) | (((h2[l] >> 2) & 3) << 4)) - 32);
                o[l + 64] = (int8_t)(((l4[l] >> 4) | (((h2[l] >> 4) & 3) << 4)) - 32);
                o[l + 96] = (int8_t)(((l4[l + 32] >> 4) | (((h2[l] >> 6) & 3) << 4)) - 32);
            }
        }
        int32_t sumi = 0;
        for (int j = 0; j < 16; j++) sumi += (int32_t)sc[j] * nf_sdot_ii(aux + 16 * j, q8 + 16 * j, 16);
        sum += nf_ldh_fast(a + 208) * nf_ldf32(b) * (float)sumi;
    }
    return sum;
}

#if defined(__AVX2__)
float nf_dot_q6_k(int64_t nb, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    __m256 acc = _mm256_setzero_ps();
    const __m256i lo4 = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3), m32 = _mm256_set1_epi8(32);
    for (int64_t i = 0; i < nb; i++, a += NF_Q6_K_BYTES, b += NF_Q8_K_BYTES) {
        const int8_t *sc = (const int8_t *)(a + 192);
        const int8_t *q8 = (const int8_t *)(b + 4);
        __m256i sumi = _mm256_setzero_si256();
        for (int n = 0; n < 2; n++) {
            const __m256i l0 = nf_avx2_load(a + 64 * n), l1 = nf_avx2_load(a + 64 * n + 32);
            const __m256i h = nf_avx2_load(a + 128 + 32 * n);
            const __m256i v[4] = {
                _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(l0, lo4),
                                                _mm256_slli_epi16(_mm256_and_si256(h, three), 4)), m32),
                _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(l1, lo4),
                                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), three), 4)), m32),
                _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), lo4),
                                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), three), 4)), m32),
                _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), lo4),
                                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), three), 4)), m32),
            };
            for (int k = 0; k < 4; k++) {                  /* 32 values = sub-blocks 8n+2k, 8n+2k+1 */
                const int j = 8 * n + 2 * k;
                const __m256i p = nf_avx2_pairs_ii(v[k], nf_avx2_load(q8 + 128 * n + 32 * k));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, nf_avx2_scales2(sc[j], sc[j + 1])));
            }
        }
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(nf_ldh_fast(a + 208) * nf_ldf32(b)),
                                               _mm256_cvtepi32_ps(sumi)));
    }
    return nf_avx2_hsum_ps(acc);
}
#else
float nf_dot_q6_k(int64_t nb, const void *w, const void *x) { return nf_dot_q6_k_scalar(nb, w, x); }
#endif
