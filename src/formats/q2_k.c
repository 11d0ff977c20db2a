/* q2_k.c — Q2_K: super-blocks of 256 weights in 16 sub-blocks of 16; x = d*(s&15)*q - dmin*(s>>4), q in 0..3.
 *
 * Layout (84 bytes): scales[16] (low nibble: scale, high nibble: min of each sub-block), qs[64], f16 d,
 * f16 dmin. In each 128-value half, byte l of its 32 qs bytes holds values l, l+32, l+64, l+96 at bit offsets
 * 0, 2, 4, 6.
 *
 * Reference quantizer (the method of ggml's quantize_row_q2_K_ref): per sub-block an asymmetric fit
 * (nf_make_qkx2_quants, nmax 3, weights |x|, absolute error), 4-bit scales and mins against their maxima, then q
 * recomputed with the rounded values; the bytes equal ggml's (scripts/check_quants_vs_ggml.py). With an
 * importance vector: weights qw*sqrt(sigma2+x^2), squared error, a finer search, then our own refinement
 * (refit below). */
#include "formats/quants.h"

void nf_dequant_q2_k_scalar(const void *src, float *dst, int64_t nb) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < nb; i++, b += NF_Q2_K_BYTES) {
        const float d = nf_ldh(b + 80), min = nf_ldh(b + 82);
        const uint8_t *sc = b, *q = b + 16;
        int is = 0;
        for (int n = 0; n < NF_QK_K; n += 128, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                float dl = d * (float)(sc[is] & 0xF), ml = min * (float)(sc[is] >> 4);
                is++;
                for (int l = 0; l < 16; l++) *dst++ = dl * (float)((q[l] >> shift) & 3) - ml;
                dl = d * (float)(sc[is] & 0xF);
                ml = min * (float)(sc[is] >> 4);
                is++;
                for (int l = 0; l < 16; l++) *dst++ = dl * (float)((q[l + 16] >> shift) & 3) - ml;
            }
        }
    }
}

#if defined(__AVX2__) && defined(__FMA__)
/* sub-block j (32 values: half j/4, bit pair j%4; its first and last 16 values have their own scale and min):
 * the same operations as the plain C loop (scale times q, then minus the min, unfused) */
static inline void q2_k_decode(const uint8_t *b, int j, __m256 v[4]) {
    const uint8_t *sc = b + 2 * j, *q = b + 16 + 32 * (j / 4);
    const float d = nf_ldh_fast(b + 80), min = nf_ldh_fast(b + 82);
    const __m128i shift = _mm_cvtsi32_si128(2 * (j % 4));
    const __m256i three = _mm256_set1_epi32(3);
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        const int h = g / 2;
        const __m256 dl = _mm256_set1_ps(d * (float)(sc[h] & 0xF)), ml = _mm256_set1_ps(min * (float)(sc[h] >> 4));
        const __m256i u = _mm256_and_si256(_mm256_srl_epi32(nf_avx2_u8x8(q + 8 * g), shift), three);
        v[g] = _mm256_sub_ps(_mm256_mul_ps(dl, _mm256_cvtepi32_ps(u)), ml);
    }
}
NF_AVX2_DEQUANT_DOTF(q2_k, NF_Q2_K_BYTES, 8, q2_k_decode)
#else
void nf_dequant_q2_k(const void *src, float *dst, int64_t nb) { nf_dequant_q2_k_scalar(src, dst, nb); }
float nf_dotf_q2_k(int64_t nb, const void *w, const float *x) { return nf_dotf_blocks(NF_TYPE_Q2_K, nb, w, x); }
#endif

/* Importance-vector path only (ggml's reference method, reproduced exactly by the weights-only path, has no
 * such step). Two rounds of: move each sub-block's 4-bit scale and min codes by at most one step where that
 * lowers its weighted error (q re-rounded); then, with codes and q fixed, refit the f16 d and dmin by weighted
 * least squares and re-round q, keeping that only if the weighted error drops. */
static double werr(const float *x, const float *w, const uint8_t *sc, float df, float mf, const uint8_t *L) {
    double e = 0;
    for (int k = 0; k < NF_QK_K; k++) {
        const double y = (double)(df * (float)(sc[k / 16] & 0xF)) * L[k] - (double)(mf * (float)(sc[k / 16] >> 4)) - x[k];
        e += w[k] * y * y;
    }
    return e;
}

static void requant(const float *x, const uint8_t *sc, float df, float mf, uint8_t *L) {
    for (int j = 0; j < 16; j++) {
        const float d = df * (float)(sc[j] & 0xF);
        if (d == 0.0f) continue;
        const float dm = mf * (float)(sc[j] >> 4);
        for (int ii = 0; ii < 16; ii++)
            L[16 * j + ii] = (uint8_t)nf_clampi(nf_nearest_int((x[16 * j + ii] + dm) / d), 0, 3);
    }
}

static void refit(const float *x, const float *w, uint8_t *b, uint8_t *L) {
    uint8_t *sc = b;
    for (int round = 0; round < 2; round++) {
        const float df = nf_ldh(b + 80), mf = nf_ldh(b + 82);
        for (int j = 0; j < 16; j++) {
            int bs = sc[j] & 0xF, bm = sc[j] >> 4;
            nf_refine_scale_min(x + 16 * j, w + 16 * j, L + 16 * j, 16, 3, 15, df, mf, &bs, &bm);
            sc[j] = (uint8_t)(bs | (bm << 4));
        }
        const double best = werr(x, w, sc, df, mf, L);
        double saa = 0, sab = 0, sbb = 0, sax = 0, sbx = 0;
        for (int k = 0; k < NF_QK_K; k++) {
            const double a = (double)(sc[k / 16] & 0xF) * L[k], bb = sc[k / 16] >> 4, ww = w[k], xx = x[k];
            saa += ww * a * a; sab += ww * a * bb; sbb += ww * bb * bb; sax += ww * a * xx; sbx += ww * bb * xx;
        }
        const double det = saa * sbb - sab * sab;
        if (!(det > 0)) return;
        const double d = (sax * sbb - sbx * sab) / det, dm = (sax * sab - sbx * saa) / det;
        if (!(d > 0) || !(dm >= 0) || d > 65504 || dm > 65504) return;
        const uint16_t dh = nf_f32_to_f16((float)d), mh = nf_f32_to_f16((float)dm);
        uint8_t L2[NF_QK_K];
        memcpy(L2, L, sizeof L2);
        requant(x, sc, nf_f16_to_f32(dh), nf_f16_to_f32(mh), L2);
        if (!(werr(x, w, sc, nf_f16_to_f32(dh), nf_f16_to_f32(mh), L2) < best)) return;
        nf_st16(b + 80, dh);
        nf_st16(b + 82, mh);
        memcpy(L, L2, sizeof L2);
    }
}

void nf_quant_q2_k(const float *x, void *dst, int64_t nb, const float *qw) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < nb; i++, b += NF_Q2_K_BYTES, x += NF_QK_K, qw = qw ? qw + NF_QK_K : NULL) {
        uint8_t L[NF_QK_K], Laux[16];
        float weights[16], mins[16], scales[16], wall[NF_QK_K];
        float sigma2 = 0.0f;
        if (qw) {
            for (int l = 0; l < NF_QK_K; l++) sigma2 += x[l] * x[l];
            sigma2 /= NF_QK_K;
        }
        float max_scale = 0.0f, max_min = 0.0f;
        for (int j = 0; j < 16; j++) {
            const float *xs = x + 16 * j;
            if (qw) {
                for (int l = 0; l < 16; l++) weights[l] = qw[16 * j + l] * sqrtf(sigma2 + xs[l] * xs[l]);
                memcpy(wall + 16 * j, weights, sizeof weights);
                scales[j] = nf_make_qkx2_quants(16, 3, xs, weights, L + 16 * j, &mins[j], Laux, -0.9f, 0.05f, 36, 0);
            } else {
                for (int l = 0; l < 16; l++) weights[l] = fabsf(xs[l]);
                scales[j] = nf_make_qkx2_quants(16, 3, xs, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, 1);
            }
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        uint8_t *sc = b;
        uint16_t dh = 0, mh = 0;
        if (max_scale > 0.0f) {
            const float iscale = 15.0f / max_scale;
            for (int j = 0; j < 16; j++) sc[j] = (uint8_t)nf_clampi(nf_nearest_int(iscale * scales[j]), 0, 15);
            dh = nf_f32_to_f16(max_scale / 15.0f);
        } else {
            memset(sc, 0, 16);
        }
        if (max_min > 0.0f) {
            const float iscale = 15.0f / max_min;
            for (int j = 0; j < 16; j++) sc[j] |= (uint8_t)(nf_clampi(nf_nearest_int(iscale * mins[j]), 0, 15) << 4);
            mh = nf_f32_to_f16(max_min / 15.0f);
        }
        nf_st16(b + 80, dh);
        nf_st16(b + 82, mh);
        requant(x, sc, nf_f16_to_f32(dh), nf_f16_to_f32(mh), L);
        if (qw) refit(x, wall, b, L);
        uint8_t *q = b + 16;
        for (int j = 0; j < NF_QK_K; j += 128, q += 32)
            for (int l = 0; l < 32; l++)
                q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
    }
}

/* Plain C version: the fallback, and the reference the AVX2 version is tested against. */
float nf_dot_q2_k_scalar(int64_t nb, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    float sum = 0.0f;
    for (int64_t i = 0; i < nb; i++, a += NF_Q2_K_BYTES, b += NF_Q8_K_BYTES) {
        const uint8_t *sc = a, *q = a + 16;
        const int8_t *q8 = (const int8_t *)(b + 4);
        int16_t bsums[16];
        memcpy(bsums, b + 4 + NF_QK_K, sizeof bsums);
        uint8_t aux[NF_QK_K];
        for (int n = 0; n < 2; n++)
            for (int k = 0; k < 4; k++)
                for (int l = 0; l < 32; l++) aux[128 * n + 32 * k + l] = (q[32 * n + l] >> (2 * k)) & 3;
        int32_t sumi = 0, summ = 0;
        for (int j = 0; j < 16; j++) {
            sumi += (int32_t)(sc[j] & 0xF) * nf_sdot_ui(aux + 16 * j, q8 + 16 * j, 16);
            summ += (int32_t)(sc[j] >> 4) * bsums[j];
        }
        const float dy = nf_ldf32(b), d = nf_ldh_fast(a + 80) * dy;
        sum += d * (float)sumi - nf_ldh_fast(a + 82) * dy * (float)summ;
    }
    return sum;
}

#if defined(__AVX2__)
float nf_dot_q2_k(int64_t nb, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    __m256 acc = _mm256_setzero_ps();
    float summins = 0.0f;
    const __m256i three = _mm256_set1_epi8(3);
    for (int64_t i = 0; i < nb; i++, a += NF_Q2_K_BYTES, b += NF_Q8_K_BYTES) {
        const uint8_t *sc = a;
        const int8_t *q8 = (const int8_t *)(b + 4);
        int16_t bsums[16];
        memcpy(bsums, b + 4 + NF_QK_K, sizeof bsums);
        __m256i sumi = _mm256_setzero_si256();
        int32_t summ = 0;
        for (int j = 0; j < 16; j++) summ += (int32_t)(sc[j] >> 4) * bsums[j];
        for (int n = 0; n < 2; n++) {
            const __m256i raw = nf_avx2_load(a + 16 + 32 * n);
            for (int k = 0; k < 4; k++) {                  /* 32 values = sub-blocks 8n+2k, 8n+2k+1 */
                const int j = 8 * n + 2 * k;
                const __m256i v = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * k), three);
                const __m256i p = _mm256_maddubs_epi16(v, nf_avx2_load(q8 + 128 * n + 32 * k));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, nf_avx2_scales2(sc[j] & 0xF, sc[j + 1] & 0xF)));
            }
        }
        const float dy = nf_ldf32(b);
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(nf_ldh_fast(a + 80) * dy), _mm256_cvtepi32_ps(sumi)));
        summins += nf_ldh_fast(a + 82) * dy * (float)summ;
    }
    return nf_avx2_hsum_ps(acc) - summins;
}
#else
float nf_dot_q2_k(int64_t nb, const void *w, const void *x) { return nf_dot_q2_k_scalar(nb, w, x); }
#endif
