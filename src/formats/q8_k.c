/* q8_k.c — Q8_K: the activation format of the K-quant and IQ2_XXS dot products (ggml's block_q8_K).
 *
 * 256 values per block: f32 d, int8 q[256] with x ~ d*q, and int16 bsums[16] = sums of q over each group of 16
 * (the K-quant dots use them to apply per-sub-block minimums without touching q again). Quantization is ggml's
 * reference: scale from the signed value of largest magnitude, iscale = -127/max, q = min(127, nearest(x*iscale)). */
#include "formats/quants.h"

void nf_dequant_q8_k(const void *src, float *dst, int64_t nb) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < nb; i++, b += NF_Q8_K_BYTES, dst += NF_QK_K) {
        const float d = nf_ldf32(b);
        const int8_t *q = (const int8_t *)(b + 4);
        for (int j = 0; j < NF_QK_K; j++) dst[j] = d * (float)q[j];
    }
}

void nf_quant_q8_k(const float *src, void *dst, int64_t nb) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < nb; i++, b += NF_Q8_K_BYTES, src += NF_QK_K) {
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < NF_QK_K; j++) {
            float a = fabsf(src[j]);
            if (a > amax) { amax = a; max = src[j]; }
        }
        int8_t *q = (int8_t *)(b + 4);
        int16_t bsums[16];
        if (amax == 0.0f) {
            memset(b, 0, NF_Q8_K_BYTES);
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < NF_QK_K; j++) {
            int v = nf_nearest_int(iscale * src[j]);
            q[j] = (int8_t)nf_clampi(v, -128, 127);
        }
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++) s += q[16 * g + j];
            bsums[g] = (int16_t)s;
        }
        float d = 1.0f / iscale;
        memcpy(b, &d, 4);
        memcpy(b + 4 + NF_QK_K, bsums, sizeof bsums);
    }
}

float nf_dot_q8_k(int64_t nb, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    float sum = 0.0f;
    for (int64_t i = 0; i < nb; i++, a += NF_Q8_K_BYTES, b += NF_Q8_K_BYTES) {
        const int8_t *qa = (const int8_t *)(a + 4), *qb = (const int8_t *)(b + 4);
        int32_t s = 0;
        for (int j = 0; j < NF_QK_K; j++) s += (int32_t)qa[j] * (int32_t)qb[j];
        sum += nf_ldf32(a) * nf_ldf32(b) * (float)s;
    }
    return sum;
}
