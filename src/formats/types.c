/* types.c — the table of tensor formats (ids, names, block layouts) and half-precision conversions.
 *
 * Block sizes and byte counts are the ggml facts for each type id, so files written by llama.cpp's tools and
 * ours agree. Only types with supported = true can be dequantized or dotted here. */
#include "formats/formats.h"

#include <ctype.h>
#include <stdint.h>
#include <string.h>

#define QK_K 256

static const nf_type_info type_table[NF_TYPE_COUNT] = {
    [NF_TYPE_F32]     = {"f32", 1, 4, true, false},
    [NF_TYPE_F16]     = {"f16", 1, 2, true, false},
    [NF_TYPE_Q4_0]    = {"q4_0", 32, 18, false, true},
    [NF_TYPE_Q4_1]    = {"q4_1", 32, 20, false, true},
    [NF_TYPE_Q5_0]    = {"q5_0", 32, 22, false, true},
    [NF_TYPE_Q5_1]    = {"q5_1", 32, 24, false, true},
    [NF_TYPE_Q8_0]    = {"q8_0", 32, 34, true, true},
    [NF_TYPE_Q8_1]    = {"q8_1", 32, 36, false, true},
    [NF_TYPE_Q2_K]    = {"q2_K", QK_K, 84, true, true},
    [NF_TYPE_Q3_K]    = {"q3_K", QK_K, 110, false, true},
    [NF_TYPE_Q4_K]    = {"q4_K", QK_K, 144, true, true},
    [NF_TYPE_Q5_K]    = {"q5_K", QK_K, 176, false, true},
    [NF_TYPE_Q6_K]    = {"q6_K", QK_K, 210, true, true},
    [NF_TYPE_Q8_K]    = {"q8_K", QK_K, 292, true, true},
    [NF_TYPE_IQ2_XXS] = {"iq2_xxs", QK_K, 66, true, true},
    [NF_TYPE_IQ2_XS]  = {"iq2_xs", QK_K, 74, false, true},
    [NF_TYPE_IQ3_XXS] = {"iq3_xxs", QK_K, 98, false, true},
    [NF_TYPE_IQ1_S]   = {"iq1_s", QK_K, 50, false, true},
    [NF_TYPE_IQ4_NL]  = {"iq4_nl", 32, 18, false, true},
    [NF_TYPE_IQ3_S]   = {"iq3_s", QK_K, 110, false, true},
    [NF_TYPE_IQ2_S]   = {"iq2_s", QK_K, 82, false, true},
    [NF_TYPE_IQ4_XS]  = {"iq4_xs", QK_K, 136, false, true},
    [NF_TYPE_I8]      = {"i8", 1, 1, false, false},
    [NF_TYPE_I16]     = {"i16", 1, 2, false, false},
    [NF_TYPE_I32]     = {"i32", 1, 4, false, false},
    [NF_TYPE_I64]     = {"i64", 1, 8, false, false},
    [NF_TYPE_F64]     = {"f64", 1, 8, false, false},
    [NF_TYPE_IQ1_M]   = {"iq1_m", QK_K, 56, false, true},
    [NF_TYPE_BF16]    = {"bf16", 1, 2, true, false},
};

static const nf_type_info unknown_type = {NULL, 0, 0, false, false};

const nf_type_info *nf_type_get(uint32_t type) {
    if (type >= NF_TYPE_COUNT || !type_table[type].name) return &unknown_type;
    return &type_table[type];
}

int nf_type_from_name(const char *name) {
    for (int t = 0; t < NF_TYPE_COUNT; t++) {
        const char *n = type_table[t].name;
        if (!n) continue;
        size_t i = 0;
        while (n[i] && name[i] && tolower((unsigned char)n[i]) == tolower((unsigned char)name[i])) i++;
        if (!n[i] && !name[i]) return t;
    }
    return -1;
}

size_t nf_row_bytes(uint32_t type, int64_t n) {
    const nf_type_info *ti = nf_type_get(type);
    if (!ti->name || n < 0 || n % ti->block_size) return 0;
    if ((uint64_t)(n / ti->block_size) > SIZE_MAX / ti->block_bytes) return 0;   /* would overflow */
    return (size_t)(n / ti->block_size) * ti->block_bytes;
}

/* ---- half precision ---- */

static inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float nf_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (mant << 13));         /* inf / nan */
    if (exp == 0) {
        if (!mant) return bits_f32(sign);
        float v = (float)mant * (1.0f / 16777216.0f);                             /* subnormal: mant * 2^-24 */
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t nf_f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) {                                                        /* nan: keep the top payload */
        uint32_t m = (a & 0x7fffffu) >> 13;                                       /* bits, as numpy does (a  */
        return (uint16_t)(sign | 0x7c00 | (m ? m : 1));                           /* signaling nan stays so) */
    }
    if (a >= 0x47800000u) return (uint16_t)(sign | 0x7c00);                      /* overflow -> inf */
    if (a < 0x38800000u) {                                                         /* subnormal or zero */
        /* value * 2^24 rounded to nearest even gives the subnormal mantissa */
        float v = bits_f32(a) * 16777216.0f;
        uint32_t m = (uint32_t)v;
        float rem = v - (float)m;
        if (rem > 0.5f || (rem == 0.5f && (m & 1))) m++;
        return (uint16_t)(sign | m);
    }
    uint32_t mant = a & 0x7fffff, exp = (a >> 23) - 112;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;                         /* may carry into exp: ok */
    return (uint16_t)(sign | h);
}

float nf_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t nf_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64);     /* quiet nan, as ggml */
    return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}
