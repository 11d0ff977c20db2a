/* q4_k.c — Q4_K: super-blocks of 256 weights in 8 sub-blocks of 32; x = d*sc[j]*q - dmin*m[j], q in 0..15.
 *
 * Layout (144 bytes): f16 d, f16 dmin, 12 bytes holding eight 6-bit scales sc and eight 6-bit mins m, then 128
 * bytes of 4-bit q. Within each 64-value chunk, byte l holds value l in its low nibble and value l+32 in its
 * high nibble. Scale packing: for j<4, sc[j] = s[j]&63, m[j] = s[j+4]&63; for j>=4,
 * sc[j] = (s[j+4]&15) | (s[j-4]>>6)<<4 and m[j] = (s[j+4]>>4) | (s[j]>>6)<<4.
 *
 * Reference quantizer (the method of ggml's quantize_row_q4_K_ref): per sub-block an asymmetric fit
 * (nf_make_qkx2_quants, weights av|x|+|x|), then the 8 scales and 8 mins are each quantized to 6 bits against
 * their maximum, and q is recomputed with the rounded scales. Without an importance vector the bytes equal
 * ggml's (scripts/check_quants_vs_ggml.py). With one, the fit weights are qw*sqrt(sigma2 + x^2) (ggml's
 * weighting), followed by our own refinement (refit below); bytes then differ from ggml's, error does not rise. */
#include "formats/quants.h"

static inline void get_scale_min(int j, const uint8_t *s, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

void nf_dequant_q4_k_scalar(const void *src, float *dst, int64_t nb) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < nb; i++, b += NF_Q4_K_BYTES) {
        const float d = nf_ldh(b), min = nf_ldh(b + 2);
        const uint8_t *s = b + 4, *q = b + 16;
        for (int j = 0; j < 8; j += 2, q += 32) {
            uint8_t sc, m;
            get_scale_min(j, s, &sc, &m);
            const float d1 = d * (float)sc, m1 = min * (float)m;
            get_scale_min(j + 1, s, &sc, &m);
            const float d2 = d * (float)sc, m2 = min * (float)m;
            for (int l = 0; l < 32; l++) *dst++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *dst++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

#if defined(__AVX2__) && defined(__FMA__)
/* sub-block j (32 values): the same operations as the plain C loop (scale times q, then minus the min, unfused) */
static inline void q4_k_decode(const uint8_t *b, int j, __m256 v[4]) {
    uint8_t sc, m;
    get_scale_min(j, b + 4, &sc, &m);
    const __m256 dj = _mm256_set1_ps(nf_ldh_fast(b) * (float)sc), mj = _mm256_set1_ps(nf_ldh_fast(b + 2) * (float)m);
    const uint8_t *q = b + 16 + 32 * (j / 2);
    const __m128i shift = _mm_cvtsi32_si128(4 * (j & 1));
    const __m256i low4 = _mm256_set1_epi32(0xF);
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        const __m256i u = _mm256_and_si256(_mm256_srl_epi32(nf_avx2_u8x8(q + 8 * g), shift), low4);
        v[g] = _mm256_sub_ps(_mm256_mul_ps(dj, _mm256_cvtepi32_ps(u)), mj);
    }
}
NF_AVX2_DEQUANT_DOTF(q4_k, NF_Q4_K_BYTES, 8, q4_k_decode)
#else
void nf_dequant_q4_k(const void *src, float *dst, int64_t nb) { nf_dequant_q4_k_scalar(src, dst, nb); }
float nf_dotf_q4_k(int64_t nb, const void *w, const float *x) { return nf_dotf_blocks(NF_TYPE_Q4_K, nb, w, x); }
#endif

static void set_scale_min(int j, uint8_t *s, int sc, int m) {
    if (j < 4) {
        s[j] = (uint8_t)((s[j] & 0xC0) | sc);
        s[j + 4] = (uint8_t)((s[j + 4] & 0xC0) | m);
    } else {
        s[j + 4] = (uint8_t)((sc & 0xF) | ((m & 0xF) << 4));
        s[j - 4] = (uint8_t)((s[j - 4] & 0x3F) | ((sc >> 4) << 6));
        s[j] = (uint8_t)((s[j] & 0x3F) | ((m >> 4) << 6));
    }
}

/* q from the stored scales: nearest level for each value (sub-blocks with a zero scale keep their L). */
static void requant(const float *x, const uint8_t *s, float df, float mf, uint8_t *L) {
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        get_scale_min(j, s, &sc, &m);
        const float d = df * (float)sc;
        if (d == 0.0f) continue;
        const float dm = mf * (float)m;
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = (uint8_t)nf_clampi(nf_nearest_int((x[32 * j + l] + dm) / d), 0, 15);
    }
}

static double werr(const float *x, const float *w, const uint8_t *s, float df, float mf, const uint8_t *L) {
    double e = 0;
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        get_scale_min(j, s, &sc, &m);
        for (int l = 0; l < 32; l++) {
            double y = (double)(df * (float)sc) * L[32 * j + l] - (double)(mf * (float)m) - x[32 * j + l];
            e += w[32 * j + l] * y * y;
        }
    }
    return e;
}

/* Importance-vector path only (not part of ggml's reference method, which the weights-only path reproduces
 * exactly). Two rounds of: move each sub-block's 6-bit scale and min codes by at most one step where that
 * lowers its weighted error; then, with codes and q fixed, refit the two f16 super-block scales by weighted
 * least squares (x ~ d*(sc*q) - dmin*m) and re-round q. A step is kept only if the weighted error drops. */
static void refit(const float *x, const float *w, uint8_t *b, uint8_t *L) {
    uint8_t *s = b + 4;
    float df = nf_ldh(b), mf = nf_ldh(b + 2);
    double best = werr(x, w, s, df, mf, L);
    for (int round = 0; round < 2; round++) {
        for (int j = 0; j < 8; j++) {
            uint8_t sc0, m0;
            get_scale_min(j, s, &sc0, &m0);
            int bsc = sc0, bm = m0;
            nf_refine_scale_min(x + 32 * j, w + 32 * j, L + 32 * j, 32, 15, 63, df, mf, &bsc, &bm);
            set_scale_min(j, s, bsc, bm);
        }
        best = werr(x, w, s, df, mf, L);       /* never above the previous value: each sub-block kept its best */
        double saa = 0, sab = 0, sbb = 0, sax = 0, sbx = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            get_scale_min(j, s, &sc, &m);
            for (int l = 0; l < 32; l++) {
                const double a = (double)sc * L[32 * j + l], bb = m, ww = w[32 * j + l], xx = x[32 * j + l];
                saa += ww * a * a; sab += ww * a * bb; sbb += ww * bb * bb; sax += ww * a * xx; sbx += ww * bb * xx;
            }
        }
        const double det = saa * sbb - sab * sab;
        if (!(det > 0)) return;
        const double d = (sax * sbb - sbx * sab) / det, dm = (sax * sab - sbx * saa) / det;
        if (!(d > 0) || !(dm >= 0) || d > 65504 || dm > 65504) return;
        const uint16_t dh = nf_f32_to_f16((float)d), mh = nf_f32_to_f16((float)dm);
        uint8_t L2[NF_QK_K];
        memcpy(L2, L, sizeof L2);
        const float df2 = nf_f16_to_f32(dh), mf2 = nf_f16_to_f32(mh);
        requant(x, s, df2, mf2, L2);
        const double e = werr(x, w, s, df2, mf2, L2);
        if (!(e < best)) return;
        best = e;
        nf_st16(b, dh);
        nf_st16(b + 2, mh);
        memcpy(L, L2, sizeof L2);
    }
}

void nf_quant_q4_k(const float *x, void *dst, int64_t nb, const float *qw) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < nb; i++, b += NF_Q4_K_BYTES, x += NF_QK_K, qw = qw ? qw + NF_QK_K : NULL) {
        uint8_t L[NF_QK_K], Laux[32];
        float weights[32], mins[8], scales[8], wall[NF_QK_K];
        float sigma2 = 0.0f;
        if (qw) {
            for (int l = 0; l < NF_QK_K; l++) sigma2 += x[l] * x[l];
            sigma2 = 2.0f * sigma2 / NF_QK_K;
        }
        float max_scale = 0.0f, max_min = 0.0f;
        for (int j = 0; j < 8; j++) {
            const float *xs = x + 32 * j;
            if (qw) {
                for (int l = 0; l < 32; l++) weights[l] = qw[32 * j + l] * sqrtf(sigma2 + xs[l] * xs[l]);
                memcpy(wall + 32 * j, weights, sizeof weights);
            } else {
                float sum_x2 = 0.0f;
                for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
                float av_x = sqrtf(sum_x2 / 32.0f);
                for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(xs[l]);
            }
            scales[j] = nf_make_qkx2_quants(32, 15, xs, weights, L + 32 * j, &mins[j], Laux, -1.0f, 0.1f, 20, 0);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
        const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
        uint8_t *s = b + 4;
        memset(s, 0, 12);
        for (int j = 0; j < 8; j++) {
            int ls = nf_clampi(nf_nearest_int(inv_scale * scales[j]), 0, 63);
            int lm = nf_clampi(nf_nearest_int(inv_min * mins[j]), 0, 63);
            if (j < 4) {
                s[j] = (uint8_t)ls;
                s[j + 4] = (uint8_t)lm;
            } else {
                s[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
                s[j - 4] |= (uint8_t)((ls >> 4) << 6);
                s[j] |= (uint8_t)((lm >> 4) << 6);
            }
        }
        const uint16_t dh = nf_f32_to_f16(max_scale / 63.0f), mh = nf_f32_to_f16(max_min / 63.0f);
        nf_st16(b, dh);
        nf_st16(b + 2, mh);
        requant(x, s, nf_f16_to_f32(dh), nf_f16_to_f32(mh), L);
        if (qw) refit(x, wall, b, L);
        uint8_t *q = b + 16;
        for (int j = 0; j < NF_QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

/* Plain C version: the fallback, and the reference the AVX2 version is tested against. */
float nf_dot_q4_k_scalar(int64_t nb, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    float sum = 0.0f;
    for (int64_t i = 0; i < nb; i++, a += NF_Q4_K_BYTES, b += NF_Q8_K_BYTES) {
        const uint8_t *q = a + 16;
        const int8_t *q8 = (const int8_t *)(b + 4);
        int16_t bsums[16];
        memcpy(bsums, b + 4 + NF_QK_K, sizeof bsums);
        uint8_t aux[NF_QK_K];
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) {
                aux[64 * j + l] = q[32 * j + l] & 0xF;
                aux[64 * j + 32 + l] = q[32 * j + l] >> 4;
            }
        int32_t sumi = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            get_scale_min(j, a + 4, &sc, &m);
            sumi += (int32_t)sc * nf_sdot_ui(aux + 32 * j, q8 + 32 * j, 32);
            summ += (int32_t)m * (bsums[2 * j] + bsums[2 * j + 1]);
        }
        const float dy = nf_ldf32(b), d = nf_ldh_fast(a) * dy;
        sum += d * (float)sumi - nf_ldh_fast(a + 2) * dy * (float)summ;
    }
    return sum;
}

#if defined(__AVX2__)
float nf_dot_q4_k(int64_t nb, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    __m256 acc = _mm256_setzero_ps();
    float summins = 0.0f;
    const __m256i lo4 = _mm256_set1_epi8(0x0F);
    for (int64_t i = 0; i < nb; i++, a += NF_Q4_K_BYTES, b += NF_Q8_K_BYTES) {
        const uint8_t *q = a + 16;
        const int8_t *q8 = (const int8_t *)(b + 4);
        int16_t bsums[16];
        memcpy(bsums, b + 4 + NF_QK_K, sizeof bsums);
        __m256i sumi = _mm256_setzero_si256();
        int32_t summ = 0;
        for (int j = 0; j < 4; j++) {                      /* 64 values: low nibbles, then high nibbles */
            const __m256i raw = nf_avx2_load(q + 32 * j);
            uint8_t sc0, m0, sc1, m1;
            get_scale_min(2 * j, a + 4, &sc0, &m0);
            get_scale_min(2 * j + 1, a + 4, &sc1, &m1);
            const __m256i p0 = _mm256_maddubs_epi16(_mm256_and_si256(raw, lo4), nf_avx2_load(q8 + 64 * j));
            const __m256i p1 = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(raw, 4), lo4),
                                                    nf_avx2_load(q8 + 64 * j + 32));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p0, _mm256_set1_epi16((short)sc0)));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p1, _mm256_set1_epi16((short)sc1)));
            summ += (int32_t)m0 * (bsums[4 * j] + bsums[4 * j + 1]) + (int32_t)m1 * (bsums[4 * j + 2] + bsums[4 * j + 3]);
        }
        const float dy = nf_ldf32(b);
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(nf_ldh_fast(a) * dy), _mm256_cvtepi32_ps(sumi)));
        summins += nf_ldh_fast(a + 2) * dy * (float)summ;
    }
    return nf_avx2_hsum_ps(acc) - summins;
}
#else
float nf_dot_q4_k(int64_t nb, const void *w, const void *x) { return nf_dot_q4_k_scalar(nb, w, x); }
#endif
