/* iq2_xxs.c — IQ2_XXS: 2.06 bits per weight; 256 weights as 8 groups of 32, each as 4 grid points of 8.
 *
 * Layout (66 bytes): f16 d, then per group of 32 two little-endian u32: a = four grid indices (byte k: the
 * point of the k-th 8 values in nf_iq2xxs_grid), b = four 7-bit sign fields (bits 7k..7k+6; the 8th sign makes
 * the count of minus signs even, see nf_iq2_ksigns) and a 4-bit scale s in bits 28..31.
 * Value = d * (0.5 + s) * 0.25 * grid_byte * sign. Grid bytes are 8, 25, 43, i.e. multiples 1, 3.125, 5.375
 * of 8, so a group's effective scale is d*(2s+1) and its levels are {1, 3.125, 5.375} times that.
 *
 * Reference quantizer (in the manner of ggml's quantize_row_iq2_xxs_impl, written from the method): per group
 * of 32, fold signs into the data (if a sub-group of 8 has an odd number of negatives, the element with least
 * weight*x^2 keeps the wrong sign), then try a range of scales: each 8-value sub-group is rounded to the nearest
 * levels; if that point is not on the 256-point grid the best of its nearest grid neighbours (precomputed
 * once) is taken under the weighted error; the scale with the best weighted least-squares fit wins and is
 * refined once. (ggml only tries scales that put the group maximum near the top level; we also try a few that
 * put it lower, which matters for flat groups.) Weights are qw*sqrt(sigma2 + x^2) (ggml's), with qw = 1 when no importance vector is given.
 * Unlike ggml, the fit uses the true level values 1, 3.125, 5.375 rather than 1, 3, 5. Finally the 8 group
 * scales are coded in 4 bits against d = max/31. */
#include "formats/quants.h"

#include <float.h>
#include <pthread.h>
#include <stdlib.h>

static const float level_val[3] = {1.0f, 3.125f, 5.375f};   /* grid byte / 8 */

void nf_dequant_iq2_xxs_scalar(const void *src, float *dst, int64_t nb) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < nb; i++, b += NF_IQ2_XXS_BYTES) {
        const float d = nf_ldh(b);
        const uint8_t *qs = b + 2;
        for (int ib = 0; ib < 8; ib++, qs += 8) {
            const uint32_t a = nf_ld32(qs), s = nf_ld32(qs + 4);
            const float db = d * (0.5f + (float)(s >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++) {
                const uint64_t g = nf_iq2xxs_grid[(a >> (8 * l)) & 0xFF];
                const uint8_t signs = nf_iq2_ksigns[(s >> (7 * l)) & 127];
                for (int j = 0; j < 8; j++) {
                    const float gv = (float)((g >> (8 * j)) & 0xFF);
                    *dst++ = db * gv * ((signs >> j) & 1 ? -1.0f : 1.0f);
                }
            }
        }
    }
}

#if defined(__AVX2__) && defined(__FMA__)
/* group ib (32 values): the same operations as the plain C loop ((db * grid value) times +-1, the signs from
 * nf_iq2_signmask's 0x01 / 0xFF bytes) */
static inline void iq2_xxs_decode(const uint8_t *b, int ib, __m256 v[4]) {
    const uint8_t *qs = b + 2 + 8 * ib;
    const uint32_t a = nf_ld32(qs), s = nf_ld32(qs + 4);
    const __m256 db = _mm256_set1_ps(nf_ldh_fast(b) * (0.5f + (float)(s >> 28)) * 0.25f);
#pragma GCC unroll 4
    for (int l = 0; l < 4; l++) {
        const __m256i g = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)nf_iq2xxs_grid[(a >> (8 * l)) & 0xFF]));
        const __m256i m = _mm256_cvtepi8_epi32(_mm_cvtsi64_si128((long long)nf_iq2_signmask[(s >> (7 * l)) & 127]));
        v[l] = _mm256_mul_ps(_mm256_mul_ps(db, _mm256_cvtepi32_ps(g)), _mm256_cvtepi32_ps(m));
    }
}
NF_AVX2_DEQUANT_DOTF(iq2_xxs, NF_IQ2_XXS_BYTES, 8, iq2_xxs_decode)
#else
void nf_dequant_iq2_xxs(const void *src, float *dst, int64_t nb) { nf_dequant_iq2_xxs_scalar(src, dst, nb); }
float nf_dotf_iq2_xxs(int64_t nb, const void *w, const float *x) { return nf_dotf_blocks(NF_TYPE_IQ2_XXS, nb, w, x); }
#endif

/* ---- grid index structures for the quantizer ---- */

static int32_t kmap[6561];     /* levels as a base-3 number -> grid index, or -(1+offset) into kneigh */
static uint16_t *kneigh;       /* per off-grid point: count, then that many grid indices */
static uint8_t glev[256][8];   /* level index (0..2) of each coordinate of each grid point */
static float gval[256][8];     /* level value (1, 3.125, 5.375) of each coordinate of each grid point */
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_ok;

static void init_tables(void) {
    size_t cap = 1 << 16, used = 0;
    kneigh = malloc(cap * sizeof(uint16_t));
    if (!kneigh) return;
    for (int p = 0; p < 6561; p++) kmap[p] = -1;
    for (int g = 0; g < 256; g++) {
        int p = 0;
        for (int j = 7; j >= 0; j--) {
            int v = (int)((nf_iq2xxs_grid[g] >> (8 * j)) & 0xFF);
            glev[g][j] = v == 0x08 ? 0 : v == 0x19 ? 1 : 2;
            gval[g][j] = level_val[glev[g][j]];
            p = 3 * p + glev[g][j];
        }
        kmap[p] = g;
    }
    for (int p = 0; p < 6561; p++) {                                 /* every 8-vector of levels 0..2 */
        int lev[8], t = p;
        for (int j = 0; j < 8; j++) { lev[j] = t % 3; t /= 3; }
        if (kmap[p] >= 0) continue;
        float dist[256], d1 = FLT_MAX, d2 = FLT_MAX;
        for (int g = 0; g < 256; g++) {
            float s = 0.0f;
            for (int j = 0; j < 8; j++) {
                float e = level_val[lev[j]] - level_val[glev[g][j]];
                s += e * e;
            }
            dist[g] = s;
            if (s < d1) { d2 = d1; d1 = s; }
            else if (s > d1 && s < d2) d2 = s;
        }
        if (used + 258 > cap) {
            cap *= 2;
            uint16_t *nk = realloc(kneigh, cap * sizeof(uint16_t));
            if (!nk) return;
            kneigh = nk;
        }
        kmap[p] = -(int32_t)(used + 1);
        size_t head = used++;
        for (int g = 0; g < 256; g++)
            if (dist[g] <= d2) kneigh[used++] = (uint16_t)g;
        kneigh[head] = (uint16_t)(used - head - 1);
    }
    init_ok = 1;
}

/* Grid point for the 8 values xv (sign-folded) with weights w at `scale`: nearest levels, then the grid or the
 * best listed neighbour under the weighted squared error. */
static int pick_point(const float *xv, const float *w, float scale, float id) {
    int p = 0;
    for (int j = 7; j >= 0; j--) {
        float t = id * xv[j];
        p = 3 * p + (t < 2.0625f ? 0 : t < 4.25f ? 1 : 2);
    }
    int32_t g = kmap[p];
    if (g >= 0) return g;
    const uint16_t *nl = kneigh + (-(int64_t)g - 1);
    float best = FLT_MAX;
    int bi = nl[1];
    for (int k = 1; k <= nl[0]; k++) {
        float s = 0.0f;
        for (int j = 0; j < 8; j++) {
            float e = scale * gval[nl[k]][j] - xv[j];
            s += w[j] * e * e;
        }
        if (s < best) { best = s; bi = nl[k]; }
    }
    return bi;
}

static void fit(const float *xv, const float *w, const int *pts, float *sumqx, float *sumq2) {
    float a = 0.0f, b = 0.0f;
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 8; j++) {
            float q = gval[pts[k]][j];
            a += w[8 * k + j] * xv[8 * k + j] * q;
            b += w[8 * k + j] * q * q;
        }
    *sumqx = a;
    *sumq2 = b;
}

void nf_quant_iq2_xxs(const float *x, void *dst, int64_t nb, const float *qw) {
    pthread_once(&init_once, init_tables);
    uint8_t *b = dst;
    for (int64_t i = 0; i < nb; i++, b += NF_IQ2_XXS_BYTES, x += NF_QK_K, qw = qw ? qw + NF_QK_K : NULL) {
        memset(b, 0, NF_IQ2_XXS_BYTES);
        if (!init_ok) continue;
        float sigma2 = 0.0f;
        for (int l = 0; l < NF_QK_K; l++) sigma2 += x[l] * x[l];
        sigma2 /= NF_QK_K;
        float scales[8] = {0};
        int pts[8][4] = {{0}};
        uint32_t signs[8][4] = {{0}};
        float max_scale = 0.0f;
        for (int ib = 0; ib < 8; ib++) {
            const float *xb = x + 32 * ib;
            float w[32], xv[32];
            for (int l = 0; l < 32; l++) {
                w[l] = (qw ? qw[32 * ib + l] : 1.0f) * sqrtf(sigma2 + xb[l] * xb[l]);
                xv[l] = fabsf(xb[l]);
            }
            for (int k = 0; k < 4; k++) {
                uint32_t s = 0;
                int nflip = 0;
                for (int j = 0; j < 8; j++)
                    if (xb[8 * k + j] < 0) { s |= 1u << j; nflip++; }
                if (nflip & 1) {
                    int imin = 0;
                    float m = w[8 * k] * xb[8 * k] * xb[8 * k];
                    for (int j = 1; j < 8; j++) {
                        float c = w[8 * k + j] * xb[8 * k + j] * xb[8 * k + j];
                        if (c < m) { m = c; imin = j; }
                    }
                    xv[8 * k + imin] = -xv[8 * k + imin];
                    s ^= 1u << imin;
                }
                signs[ib][k] = s & 127;
            }
            float max = 0.0f;
            for (int l = 0; l < 32; l++) if (xv[l] > max) max = xv[l];
            if (!(max > 1e-15f) || !(max < FLT_MAX)) continue;      /* zero (or non-finite) group: all zero */
            float best = 0.0f, scale = 0.0f;
            int cur[4];
            /* the group maximum lands near the top level (17 trials), or on a lower level (6 more trials:
             * these catch flat groups, e.g. a constant row is exactly the all-lowest-level point) */
            static const float lower[6] = {1.0f, 1.5f, 2.0f, 2.5f, 3.125f, 3.7f};
            for (int is = -8; is <= 14; is++) {
                const float id = (is <= 8 ? level_val[2] + 0.1f * (float)is : lower[is - 9]) / max;
                for (int k = 0; k < 4; k++) cur[k] = pick_point(xv + 8 * k, w + 8 * k, 1.0f / id, id);
                float sumqx, sumq2;
                fit(xv, w, cur, &sumqx, &sumq2);
                if (sumq2 > 0.0f && sumqx * sumqx > best * sumq2) {
                    scale = sumqx / sumq2;
                    best = scale * sumqx;
                    memcpy(pts[ib], cur, sizeof cur);
                }
            }
            if (scale > 0.0f) {                                     /* one refinement at the chosen scale */
                for (int k = 0; k < 4; k++) cur[k] = pick_point(xv + 8 * k, w + 8 * k, scale, 1.0f / scale);
                float sumqx, sumq2;
                fit(xv, w, cur, &sumqx, &sumq2);
                if (sumq2 > 0.0f && sumqx * sumqx > best * sumq2) {
                    scale = sumqx / sumq2;
                    memcpy(pts[ib], cur, sizeof cur);
                }
            }
            if (scale < 0.0f) {                                     /* flip every sign (parity flips too) */
                scale = -scale;
                for (int k = 0; k < 4; k++) signs[ib][k] = ~signs[ib][k] & 127;
            }
            scales[ib] = scale;
            if (scale > max_scale) max_scale = scale;
        }
        if (!(max_scale > 0.0f)) continue;
        const uint16_t dh = nf_f32_to_f16(max_scale / 31.0f);
        const float d = nf_f16_to_f32(dh);
        if (!(d > 0.0f)) continue;
        nf_st16(b, dh);
        const float id = 1.0f / d;
        uint8_t *qs = b + 2;
        for (int ib = 0; ib < 8; ib++, qs += 8) {
            int l = nf_clampi(nf_nearest_int(0.5f * (id * scales[ib] - 1.0f)), 0, 15);
            uint32_t a = 0, s = (uint32_t)l << 28;
            for (int k = 0; k < 4; k++) {
                a |= (uint32_t)pts[ib][k] << (8 * k);
                s |= signs[ib][k] << (7 * k);
            }
            nf_st32(qs, a);
            nf_st32(qs + 4, s);
        }
    }
}

/* Plain C version: the fallback, and the reference the AVX2 version is tested against. */
float nf_dot_iq2_xxs_scalar(int64_t nb, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    float sum = 0.0f;
    for (int64_t i = 0; i < nb; i++, a += NF_IQ2_XXS_BYTES, b += NF_Q8_K_BYTES) {
        const uint8_t *qs = a + 2;
        const int8_t *q8 = (const int8_t *)(b + 4);
        int32_t bsum = 0;
        for (int ib = 0; ib < 8; ib++, qs += 8, q8 += 32) {
            const uint32_t ga = nf_ld32(qs), s = nf_ld32(qs + 4);
            int8_t g[32], m[32], v[32];      /* grid magnitudes times +-1 sign bytes */
            for (int l = 0; l < 4; l++) {
                memcpy(g + 8 * l, &nf_iq2xxs_grid[(ga >> (8 * l)) & 0xFF], 8);
                memcpy(m + 8 * l, &nf_iq2_signmask[(s >> (7 * l)) & 127], 8);
            }
            for (int j = 0; j < 32; j++) v[j] = (int8_t)(g[j] * m[j]);
            bsum += (int32_t)(2 * (s >> 28) + 1) * nf_sdot_ii(v, q8, 32);
        }
        sum += nf_ldh_fast(a) * nf_ldf32(b) * (float)bsum;
    }
    return 0.125f * sum;
}

#if defined(__AVX2__)
#include <immintrin.h>

/* AVX2: per group of 32, the four unsigned grid points form one vector, the signs are applied to the
 * activations (_mm256_sign_epi8 with bytes 0x01 / 0xFF), and maddubs/madd sum the products into 8 int32 lanes
 * already multiplied by the group scale. Same integer result as the scalar code below. */
float nf_dot_iq2_xxs(int64_t nb, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    float sum = 0.0f;
    for (int64_t i = 0; i < nb; i++, a += NF_IQ2_XXS_BYTES, b += NF_Q8_K_BYTES) {
        const uint8_t *qs = a + 2;
        const int8_t *q8 = (const int8_t *)(b + 4);
        __m256i acc = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib++, qs += 8, q8 += 32) {
            const uint32_t ga = nf_ld32(qs), s = nf_ld32(qs + 4);
            long long g[4], m[4];
            for (int l = 0; l < 4; l++) {
                g[l] = (long long)nf_iq2xxs_grid[(ga >> (8 * l)) & 0xFF];
                m[l] = (long long)nf_iq2_signmask[(s >> (7 * l)) & 127];
            }
            /* built in registers (a 4 x 8-byte store then a 32-byte reload would stall store forwarding) */
            const __m256i gv = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_insert_epi64(_mm_cvtsi64_si128(g[0]), g[1], 1)),
                _mm_insert_epi64(_mm_cvtsi64_si128(g[2]), g[3], 1), 1);
            const __m256i mv = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_insert_epi64(_mm_cvtsi64_si128(m[0]), m[1], 1)),
                _mm_insert_epi64(_mm_cvtsi64_si128(m[2]), m[3], 1), 1);
            const __m256i qv = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(const void *)q8), mv);
            const __m256i p16 = _mm256_maddubs_epi16(gv, qv);
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16((short)(2 * (s >> 28) + 1))));
        }
        __m128i r = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
        r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 0x4e));
        r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 0xb1));
        sum += nf_ldh_fast(a) * nf_ldf32(b) * (float)_mm_cvtsi128_si32(r);
    }
    return 0.125f * sum;
}
#else
float nf_dot_iq2_xxs(int64_t nb, const void *w, const void *x) { return nf_dot_iq2_xxs_scalar(nb, w, x); }
#endif
