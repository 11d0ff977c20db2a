/* dispatch.c — the public entry points of formats.h: route each type to its family file (q8_0.c, q4_k.c, ...)
 * and handle the plain float types (F32, F16, BF16) here.
 *
 * Every entry point validates the type and the element count first (bad input sets nf_error and returns the
 * documented failure value; it never crashes). The dot products pair each weight type with the activation
 * format ggml uses (nf_vec_dot_type): plain floats keep f32 activations, Q8_0 pairs with Q8_0, and the K-quants
 * and IQ2_XXS pair with Q8_K. nf_vec_dot_f32 instead dots the dequantized weight values with an f32 vector in
 * f32 (the family files' nf_dotf_<t> kernels); the CPU backend's matmul uses only that one. */
#include "formats/quants.h"
#include "util/error.h"

#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#endif

static int check(uint32_t type, int64_t n, const char *what) {
    const nf_type_info *ti = nf_type_get(type);
    if (!ti->name) return nf_fail("%s: unknown tensor type %u", what, type);
    if (!ti->supported) return nf_fail("%s: tensor type %s is not supported", what, ti->name);
    if (n < 0 || n % ti->block_size)
        return nf_fail("%s: %lld elements is not a multiple of the %s block size %lld", what, (long long)n,
                       ti->name, (long long)ti->block_size);
    return 0;
}

int nf_dequantize(uint32_t type, const void *src, float *dst, int64_t n) {
    if (check(type, n, "dequantize")) return -1;
    const int64_t nbk = n / NF_QK_K;
    switch (type) {
    case NF_TYPE_F32: memcpy(dst, src, (size_t)n * 4); break;
    case NF_TYPE_F16: {
        const uint8_t *s = src;
        int64_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
        /* the hardware conversion equals nf_f16_to_f32 except on nan payloads (it quiets signalling nans):
         * groups holding an inf/nan bit pattern take the plain conversion */
        const __m128i expo = _mm_set1_epi16(0x7c00);
        for (; i + 8 <= n; i += 8) {
            const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(s + 2 * i));
            if (_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(h, expo), expo)))
                for (int k = 0; k < 8; k++) dst[i + k] = nf_f16_to_f32(nf_ld16(s + 2 * (i + k)));
            else
                _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
        }
#endif
        for (; i < n; i++) dst[i] = nf_f16_to_f32(nf_ld16(s + 2 * i));
        break;
    }
    case NF_TYPE_BF16: {
        const uint8_t *s = src;
        int64_t i = 0;
#if defined(__AVX2__)
        for (; i + 8 <= n; i += 8) {
            const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(s + 2 * i)));
            _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
        }
#endif
        for (; i < n; i++) dst[i] = nf_bf16_to_f32(nf_ld16(s + 2 * i));
        break;
    }
    case NF_TYPE_Q8_0: nf_dequant_q8_0(src, dst, n / NF_QK8_0); break;
    case NF_TYPE_Q8_K: nf_dequant_q8_k(src, dst, nbk); break;
    case NF_TYPE_Q4_K: nf_dequant_q4_k(src, dst, nbk); break;
    case NF_TYPE_Q6_K: nf_dequant_q6_k(src, dst, nbk); break;
    case NF_TYPE_Q2_K: nf_dequant_q2_k(src, dst, nbk); break;
    case NF_TYPE_IQ2_XXS: nf_dequant_iq2_xxs(src, dst, nbk); break;
    default: return nf_fail("dequantize: tensor type %u has no dequantizer", type);
    }
    return 0;
}

size_t nf_quantize(uint32_t type, const float *src, void *dst, int64_t n, int64_t row_len, const float *imatrix) {
    if (check(type, n, "quantize")) return 0;
    const nf_type_info *ti = nf_type_get(type);
    if (imatrix && (row_len <= 0 || row_len % ti->block_size))
        return nf_fail("quantize: row length %lld is not a positive multiple of the %s block size",
                       (long long)row_len, ti->name), 0;
    uint8_t *d = dst;
    const int64_t nbk = n / NF_QK_K;
    switch (type) {
    case NF_TYPE_F32: memcpy(dst, src, (size_t)n * 4); break;
    case NF_TYPE_F16:
        for (int64_t i = 0; i < n; i++) nf_st16(d + 2 * i, nf_f32_to_f16(src[i]));
        break;
    case NF_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) nf_st16(d + 2 * i, nf_f32_to_bf16(src[i]));
        break;
    case NF_TYPE_Q8_0: nf_quant_q8_0(src, dst, n / NF_QK8_0); break;
    case NF_TYPE_Q8_K: nf_quant_q8_k(src, dst, nbk); break;
    case NF_TYPE_Q4_K: case NF_TYPE_Q6_K: case NF_TYPE_Q2_K: case NF_TYPE_IQ2_XXS: {
        void (*fn)(const float *, void *, int64_t, const float *) =
            type == NF_TYPE_Q4_K ? nf_quant_q4_k : type == NF_TYPE_Q6_K ? nf_quant_q6_k
            : type == NF_TYPE_Q2_K ? nf_quant_q2_k : nf_quant_iq2_xxs;
        if (!imatrix) {
            fn(src, dst, nbk, NULL);
            break;
        }
        for (int64_t b = 0; b < nbk; b++)     /* one block at a time: its columns are (b*256) mod row_len */
            fn(src + b * NF_QK_K, d + b * ti->block_bytes, 1, imatrix + (b * NF_QK_K) % row_len);
        break;
    }
    default: return nf_fail("quantize: tensor type %s has no quantizer", ti->name), 0;
    }
    return nf_row_bytes(type, n);
}

uint32_t nf_vec_dot_type(uint32_t type) {
    switch (type) {
    case NF_TYPE_F32: case NF_TYPE_F16: case NF_TYPE_BF16: return NF_TYPE_F32;
    case NF_TYPE_Q8_0: return NF_TYPE_Q8_0;
    case NF_TYPE_Q2_K: case NF_TYPE_Q4_K: case NF_TYPE_Q6_K: case NF_TYPE_Q8_K: case NF_TYPE_IQ2_XXS:
        return NF_TYPE_Q8_K;
    default: return NF_TYPE_COUNT;  /* not a type: no dot product for it */
    }
}

void nf_quantize_activation(uint32_t type, const float *x, void *dst, int64_t n) {
    const uint32_t vt = nf_vec_dot_type(type);
    if (vt == NF_TYPE_COUNT) { nf_fail("quantize_activation: no dot product for tensor type %u", type); return; }
    if (check(type, n, "quantize_activation") || check(vt, n, "quantize_activation")) return;
    if (vt == NF_TYPE_F32) memcpy(dst, x, (size_t)n * 4);
    else if (vt == NF_TYPE_Q8_0) nf_quant_q8_0(x, dst, n / NF_QK8_0);
    else nf_quant_q8_k(x, dst, n / NF_QK_K);
}

/* ---- f32 dot kernels (16 independent partial sums so the compiler can vectorize without reassociating) ---- */

#define LANES 16

static float dot_f32(const float *a, const float *b, int64_t n) {
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) acc[j] += a[i + j] * b[i + j];
    float s = 0.0f;
    for (int j = 0; j < LANES; j++) s += acc[j];
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static float dot_bf16(const uint8_t *w, const float *x, int64_t n) {
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        uint16_t h[LANES];
        memcpy(h, w + 2 * i, sizeof h);
        for (int j = 0; j < LANES; j++) {
            uint32_t u = (uint32_t)h[j] << 16;
            float f;
            memcpy(&f, &u, 4);
            acc[j] += f * x[i + j];
        }
    }
    float s = 0.0f;
    for (int j = 0; j < LANES; j++) s += acc[j];
    for (; i < n; i++) s += nf_bf16_to_f32(nf_ld16(w + 2 * i)) * x[i];
    return s;
}

static float dot_f16(const uint8_t *w, const float *x, int64_t n) {
    float acc[LANES] = {0};
    int64_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    for (; i + LANES <= n; i += LANES) {
        __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(w + 2 * i)));
        __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(w + 2 * i + 16)));
        s0 = _mm256_add_ps(s0, _mm256_mul_ps(w0, _mm256_loadu_ps(x + i)));
        s1 = _mm256_add_ps(s1, _mm256_mul_ps(w1, _mm256_loadu_ps(x + i + 8)));
    }
    _mm256_storeu_ps(acc, s0);
    _mm256_storeu_ps(acc + 8, s1);
#else
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) acc[j] += nf_f16_to_f32(nf_ld16(w + 2 * (i + j))) * x[i + j];
#endif
    float s = 0.0f;
    for (int j = 0; j < LANES; j++) s += acc[j];
    for (; i < n; i++) s += nf_f16_to_f32(nf_ld16(w + 2 * i)) * x[i];
    return s;
}

float nf_vec_dot(uint32_t type, int64_t n, const void *w_row, const void *x_act) {
    if (check(type, n, "vec_dot")) return NAN;
    const int64_t nbk = n / NF_QK_K;
    switch (type) {
    case NF_TYPE_F32: return dot_f32(w_row, x_act, n);
    case NF_TYPE_F16: return dot_f16(w_row, x_act, n);
    case NF_TYPE_BF16: return dot_bf16(w_row, x_act, n);
    case NF_TYPE_Q8_0: return nf_dot_q8_0(n / NF_QK8_0, w_row, x_act);
    case NF_TYPE_Q8_K: return nf_dot_q8_k(nbk, w_row, x_act);
    case NF_TYPE_Q4_K: return nf_dot_q4_k(nbk, w_row, x_act);
    case NF_TYPE_Q6_K: return nf_dot_q6_k(nbk, w_row, x_act);
    case NF_TYPE_Q2_K: return nf_dot_q2_k(nbk, w_row, x_act);
    case NF_TYPE_IQ2_XXS: return nf_dot_iq2_xxs(nbk, w_row, x_act);
    default: nf_fail("vec_dot: tensor type %u has no dot product", type); return NAN;
    }
}

float nf_dotf_blocks(uint32_t type, int64_t nb, const void *w_row, const float *x) {
    const nf_type_info *ti = nf_type_get(type);
    const int64_t bs = ti->block_size;
    const uint8_t *w = w_row;
    float buf[NF_QK_K];
    float acc[LANES] = {0};
    for (int64_t i = 0; i < nb; i++, w += ti->block_bytes, x += bs) {
        nf_dequantize(type, w, buf, bs);
        for (int64_t k = 0; k < bs; k += LANES)
            for (int j = 0; j < LANES; j++) acc[j] += buf[k + j] * x[k + j];
    }
    float s = 0.0f;
    for (int j = 0; j < LANES; j++) s += acc[j];
    return s;
}

float nf_vec_dot_f32(uint32_t type, int64_t n, const void *w_row, const float *x) {
    if (check(type, n, "vec_dot_f32")) return NAN;
    const int64_t nbk = n / NF_QK_K;
    switch (type) {
    case NF_TYPE_F32: return dot_f32(w_row, x, n);
    case NF_TYPE_F16: return dot_f16(w_row, x, n);
    case NF_TYPE_BF16: return dot_bf16(w_row, x, n);
    case NF_TYPE_Q8_0: return nf_dotf_q8_0(n / NF_QK8_0, w_row, x);
    case NF_TYPE_Q4_K: return nf_dotf_q4_k(nbk, w_row, x);
    case NF_TYPE_Q6_K: return nf_dotf_q6_k(nbk, w_row, x);
    case NF_TYPE_Q2_K: return nf_dotf_q2_k(nbk, w_row, x);
    case NF_TYPE_IQ2_XXS: return nf_dotf_iq2_xxs(nbk, w_row, x);
    default: return nf_dotf_blocks(type, n / nf_type_get(type)->block_size, w_row, x);
    }
}
