/* quants.h — internal to src/formats: block layouts and the per-family kernels that dispatch.c routes to.
 *
 * Blocks are read and written through byte offsets and memcpy (never by casting to a struct pointer), so a
 * row may start at any address (a GGUF tensor is only 32-byte aligned, and fuzzers hand us anything).
 * All multi-byte fields are little-endian, as in ggml files; we assume a little-endian host.
 *
 * Each family file provides, for a whole number `nb` of blocks:
 *   nf_dequant_<t>(src, dst, nb)            exact ggml dequantization (same float operations, same order; AVX2
 *                                           where available: the CPU matmul dots every quantized row through it)
 *   nf_dequant_<t>_scalar(src, dst, nb)     the same in plain C (fallback; tests require identical bits)
 *   nf_quant_<t>(src, dst, nb, qw)          reference quantizer; qw = per-element importance or NULL
 *   nf_dot_<t>(nb, w, x)                    dot with the activation format of that type (AVX2 where available)
 *   nf_dot_<t>_scalar(nb, w, x)             the same in plain C (fallback; tests compare the two)
 *   nf_dotf_<t>(nb, w, x)                   dot with an f32 vector x: the nf_dequant_<t> values times x, summed in
 *                                           f32 (AVX2+FMA: decoded in registers, fused multiply-add; otherwise
 *                                           nf_dotf_blocks). nf_vec_dot_f32 routes here; the CPU matmul uses it. */
#ifndef NF_FORMATS_QUANTS_H
#define NF_FORMATS_QUANTS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "formats/formats.h"

#if defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif

/* Dequantization must be bit-exact with ggml and the gguf package: no fused multiply-add contraction. GCC
 * does not contract in ISO C mode (-std=c11, as the Makefile builds); clang needs to be told. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define NF_QK8_0 32
#define NF_QK_K 256

/* Byte sizes and field offsets of each block (ggml layouts). */
#define NF_Q8_0_BYTES 34    /* f16 d | int8 qs[32] */
#define NF_Q8_K_BYTES 292   /* f32 d | int8 qs[256] | int16 bsums[16] */
#define NF_Q4_K_BYTES 144   /* f16 d | f16 dmin | u8 scales[12] | u8 qs[128] */
#define NF_Q6_K_BYTES 210   /* u8 ql[128] | u8 qh[64] | int8 scales[16] | f16 d */
#define NF_Q2_K_BYTES 84    /* u8 scales[16] | u8 qs[64] | f16 d | f16 dmin */
#define NF_IQ2_XXS_BYTES 66 /* f16 d | u16 qs[32] */

static inline uint16_t nf_ld16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t nf_ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline float nf_ldf32(const uint8_t *p) { float v; memcpy(&v, p, 4); return v; }
static inline void nf_st16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static inline void nf_st32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline float nf_ldh(const uint8_t *p) { return nf_f16_to_f32(nf_ld16(p)); }
/* The same for the dot products: a hardware conversion where there is one (equal for every non-nan value). */
static inline float nf_ldh_fast(const uint8_t *p) {
#if defined(__F16C__)
    return _cvtsh_ss(nf_ld16(p));
#else
    return nf_ldh(p);
#endif
}

/* Integer dot of n int8 (or uint8) pairs. Written as a plain reduction because GCC recognizes it as a
 * widening multiply-add (pmaddwd / vpdpbusd) and vectorizes it whole; callers pass a constant n. */
static inline int32_t nf_sdot_ii(const int8_t *a, const int8_t *b, int n) {
    int32_t s = 0;
    for (int j = 0; j < n; j++) s += (int32_t)a[j] * (int32_t)b[j];
    return s;
}
static inline int32_t nf_sdot_ui(const uint8_t *a, const int8_t *b, int n) {
    int32_t s = 0;
    for (int j = 0; j < n; j++) s += (int32_t)a[j] * (int32_t)b[j];
    return s;
}

/* Round to nearest, ties to even (what ggml's nearest_int does), saturating instead of undefined for huge
 * values and giving 0 for nan. */
static inline int nf_nearest_int(float f) {
    if (!(fabsf(f) < 4194303.0f)) return f != f ? 0 : (f > 0 ? 4194303 : -4194303);
    return (int)lrintf(f);
}
static inline int nf_clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

#if defined(__AVX2__)
/* AVX2 helpers for the dots (each has a plain C equivalent in the family files). Products are formed with
 * maddubs (unsigned x signed bytes -> pairs summed into int16); the operand ranges used below keep every pair
 * sum far from int16 saturation: |w| <= 32 (or unsigned <= 43) against activations within +-127. */
/* 16 int16 pair sums of 32 signed x signed bytes (signs moved onto the activation side). */
static inline __m256i nf_avx2_pairs_ii(__m256i w, __m256i x) {
    return _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}
static inline __m256i nf_avx2_load(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline float nf_avx2_hsum_ps(__m256 v) {
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}
/* Loads of 8 bytes widened to 8 int32 lanes. */
static inline __m256i nf_avx2_u8x8(const uint8_t *p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p));
}
static inline __m256i nf_avx2_i8x8(const uint8_t *p) {
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p));
}
/* The AVX2 dequantizer and f32 dot of a family, from its decoder DECODE(block, sub, v): sub-block `sub` (32
 * values) of a block, as four vectors of 8 values computed with exactly the plain C dequantizer's float
 * operations. The dequantizer stores them; the dot multiplies them into x with fused multiply-adds, vector k
 * of every sub-block into accumulator k, summed ((s0 + s1) + (s2 + s3)) at the end. */
#define NF_AVX2_DEQUANT_DOTF(T, BLOCK_BYTES, SUBS, DECODE)                                                     \
    void nf_dequant_##T(const void *src, float *dst, int64_t nb) {                                           \
        const uint8_t *b = src;                                                                              \
        for (int64_t i = 0; i < nb; i++, b += (BLOCK_BYTES))                                                 \
            _Pragma("GCC unroll 8") for (int j = 0; j < (SUBS); j++, dst += 32) {                                                    \
                __m256 v[4];                                                                                 \
                DECODE(b, j, v);                                                                             \
                _mm256_storeu_ps(dst, v[0]);                                                                 \
                _mm256_storeu_ps(dst + 8, v[1]);                                                             \
                _mm256_storeu_ps(dst + 16, v[2]);                                                            \
                _mm256_storeu_ps(dst + 24, v[3]);                                                            \
            }                                                                                                \
    }                                                                                                        \
    float nf_dotf_##T(int64_t nb, const void *w, const float *x) {                                           \
        const uint8_t *b = w;                                                                                \
        __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(),                \
               s3 = _mm256_setzero_ps();                                                                     \
        for (int64_t i = 0; i < nb; i++, b += (BLOCK_BYTES))                                                 \
            _Pragma("GCC unroll 8") for (int j = 0; j < (SUBS); j++, x += 32) {                                                      \
                __m256 v[4];                                                                                 \
                DECODE(b, j, v);                                                                             \
                s0 = _mm256_fmadd_ps(v[0], _mm256_loadu_ps(x), s0);                                          \
                s1 = _mm256_fmadd_ps(v[1], _mm256_loadu_ps(x + 8), s1);                                      \
                s2 = _mm256_fmadd_ps(v[2], _mm256_loadu_ps(x + 16), s2);                                     \
                s3 = _mm256_fmadd_ps(v[3], _mm256_loadu_ps(x + 24), s3);                                     \
            }                                                                                                \
        return nf_avx2_hsum_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));                 \
    }
/* int16 vector holding scale a in lanes 0-7 and scale b in lanes 8-15 (two 16-value sub-blocks) */
static inline __m256i nf_avx2_scales2(int a, int b) {
    return _mm256_setr_epi16((short)a, (short)a, (short)a, (short)a, (short)a, (short)a, (short)a, (short)a,
                             (short)b, (short)b, (short)b, (short)b, (short)b, (short)b, (short)b, (short)b);
}
#endif

/* Scale searches shared by the K-quant quantizers (kquant_search.c). */
/* Importance refinement shared by Q2_K and Q4_K: move one sub-block's scale code *sc and min code *m by -1..+1
 * each (within [0, code_max]), re-quantize its n values to codes 0..qmax under d = df*sc, dmin = mf*m, and keep
 * the pair with the least weighted squared error (the first found on ties). L[0..n) receives the winning codes
 * (n <= 32). */
void nf_refine_scale_min(const float *x, const float *w, uint8_t *L, int n, int qmax, int code_max, float df,
                         float mf, int *sc, int *m);
float nf_make_qx_quants(int n, int nmax, const float *x, int8_t *L, int rmse_type, const float *qw);
float nf_make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                          uint8_t *Laux, float rmin, float rdelta, int nstep, int use_mad);

/* Plain C dot of nb blocks of `type` with f32 x: each block dequantized (nf_dequantize), then accumulated in
 * f32 (dispatch.c; the fallback of the nf_dotf_<t> kernels). */
float nf_dotf_blocks(uint32_t type, int64_t nb, const void *w, const float *x);

/* IQ2_XXS tables (iq2_tables.c). */
extern const uint64_t nf_iq2xxs_grid[256];
extern const uint8_t nf_iq2_ksigns[128];
extern const uint64_t nf_iq2_signmask[128];

void nf_dequant_q8_0(const void *src, float *dst, int64_t nb);
void nf_dequant_q8_0_scalar(const void *src, float *dst, int64_t nb);
float nf_dotf_q8_0(int64_t nb, const void *w, const float *x);
void nf_quant_q8_0(const float *src, void *dst, int64_t nb);
float nf_dot_q8_0(int64_t nb, const void *w, const void *x);
float nf_dot_q8_0_scalar(int64_t nb, const void *w, const void *x);

void nf_dequant_q8_k(const void *src, float *dst, int64_t nb);
void nf_quant_q8_k(const float *src, void *dst, int64_t nb);
float nf_dot_q8_k(int64_t nb, const void *w, const void *x);

void nf_dequant_q4_k(const void *src, float *dst, int64_t nb);
void nf_dequant_q4_k_scalar(const void *src, float *dst, int64_t nb);
float nf_dotf_q4_k(int64_t nb, const void *w, const float *x);
void nf_quant_q4_k(const float *src, void *dst, int64_t nb, const float *qw);
float nf_dot_q4_k(int64_t nb, const void *w, const void *x);
float nf_dot_q4_k_scalar(int64_t nb, const void *w, const void *x);

void nf_dequant_q6_k(const void *src, float *dst, int64_t nb);
void nf_dequant_q6_k_scalar(const void *src, float *dst, int64_t nb);
float nf_dotf_q6_k(int64_t nb, const void *w, const float *x);
void nf_quant_q6_k(const float *src, void *dst, int64_t nb, const float *qw);
float nf_dot_q6_k(int64_t nb, const void *w, const void *x);
float nf_dot_q6_k_scalar(int64_t nb, const void *w, const void *x);

void nf_dequant_q2_k(const void *src, float *dst, int64_t nb);
void nf_dequant_q2_k_scalar(const void *src, float *dst, int64_t nb);
float nf_dotf_q2_k(int64_t nb, const void *w, const float *x);
void nf_quant_q2_k(const float *src, void *dst, int64_t nb, const float *qw);
float nf_dot_q2_k(int64_t nb, const void *w, const void *x);
float nf_dot_q2_k_scalar(int64_t nb, const void *w, const void *x);

void nf_dequant_iq2_xxs(const void *src, float *dst, int64_t nb);
void nf_dequant_iq2_xxs_scalar(const void *src, float *dst, int64_t nb);
float nf_dotf_iq2_xxs(int64_t nb, const void *w, const float *x);
void nf_quant_iq2_xxs(const float *src, void *dst, int64_t nb, const float *qw);
float nf_dot_iq2_xxs(int64_t nb, const void *w, const void *x);
float nf_dot_iq2_xxs_scalar(int64_t nb, const void *w, const void *x);

#endif
