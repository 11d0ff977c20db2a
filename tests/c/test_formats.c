/* test_formats.c — tensor formats: the type table, hand-built blocks decoded against the layout formulas,
 * quantize/dequantize round trips, dot products against dequantize-and-dot, and bad input. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"
#include "formats/quants.h"   /* internal: the plain C dot kernels */
#include "util/error.h"

static const uint32_t all_types[] = {NF_TYPE_F32, NF_TYPE_F16, NF_TYPE_BF16, NF_TYPE_Q8_0,
                                     NF_TYPE_Q4_K, NF_TYPE_Q6_K, NF_TYPE_Q2_K, NF_TYPE_IQ2_XXS, NF_TYPE_Q8_K};
#define NTYPES (sizeof all_types / sizeof all_types[0])

static uint64_t rng_state = 88172645463325252ull;
static double urand(void) {                 /* xorshift64, [0,1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}
static float grand(void) {                  /* standard normal */
    double u = urand() + 1e-12, v = urand();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

Test(formats, type_table_and_row_bytes) {
    struct { uint32_t t; const char *name; int64_t bs; size_t bytes; } facts[] = {
        {NF_TYPE_F32, "f32", 1, 4},        {NF_TYPE_F16, "f16", 1, 2},         {NF_TYPE_BF16, "bf16", 1, 2},
        {NF_TYPE_Q8_0, "q8_0", 32, 34},    {NF_TYPE_Q4_K, "q4_K", 256, 144},   {NF_TYPE_Q6_K, "q6_K", 256, 210},
        {NF_TYPE_Q2_K, "q2_K", 256, 84},   {NF_TYPE_IQ2_XXS, "iq2_xxs", 256, 66}, {NF_TYPE_Q8_K, "q8_K", 256, 292},
    };
    for (size_t i = 0; i < sizeof facts / sizeof facts[0]; i++) {
        const nf_type_info *ti = nf_type_get(facts[i].t);
        cr_assert_str_eq(ti->name, facts[i].name);
        cr_assert_eq(ti->block_size, facts[i].bs);
        cr_assert_eq(ti->block_bytes, facts[i].bytes);
        cr_assert(ti->supported);
        cr_assert_eq(nf_type_from_name(facts[i].name), (int)facts[i].t);
        cr_assert_eq(nf_row_bytes(facts[i].t, 4096), (size_t)(4096 / facts[i].bs) * facts[i].bytes);
        cr_assert_eq(nf_row_bytes(facts[i].t, 0), 0);
        if (facts[i].bs > 1) cr_assert_eq(nf_row_bytes(facts[i].t, facts[i].bs + 1), 0);
    }
    cr_assert_eq(nf_row_bytes(NF_TYPE_F32, INT64_MAX), 0);              /* overflow is refused, not wrapped */
    cr_assert_eq(nf_row_bytes(NF_TYPE_F32, -4), 0);
    cr_assert_eq(nf_type_from_name("Q4_k"), NF_TYPE_Q4_K);
    cr_assert_eq(nf_type_from_name("IQ2_XXS"), NF_TYPE_IQ2_XXS);
    cr_assert_eq(nf_type_from_name("q4"), -1);
    cr_assert_null(nf_type_get(5)->name);
    cr_assert_null(nf_type_get(1000)->name);
    cr_assert_not(nf_type_get(NF_TYPE_Q4_0)->supported);
    cr_assert_eq(nf_vec_dot_type(NF_TYPE_F16), NF_TYPE_F32);
    cr_assert_eq(nf_vec_dot_type(NF_TYPE_BF16), NF_TYPE_F32);
    cr_assert_eq(nf_vec_dot_type(NF_TYPE_Q8_0), NF_TYPE_Q8_0);
    cr_assert_eq(nf_vec_dot_type(NF_TYPE_Q4_K), NF_TYPE_Q8_K);
    cr_assert_eq(nf_vec_dot_type(NF_TYPE_IQ2_XXS), NF_TYPE_Q8_K);
}

Test(formats, half_conversions) {
    cr_assert_eq(nf_f32_to_f16(1.0f), 0x3c00);
    cr_assert_eq(nf_f32_to_f16(-2.0f), 0xc000);
    cr_assert_eq(nf_f32_to_f16(65504.0f), 0x7bff);
    cr_assert_eq(nf_f32_to_f16(65520.0f), 0x7c00);             /* rounds to inf */
    cr_assert_eq(nf_f32_to_f16(65519.99f), 0x7bff);
    cr_assert_eq(nf_f32_to_f16(ldexpf(1.0f, -24)), 0x0001);    /* smallest subnormal */
    cr_assert_eq(nf_f32_to_f16(ldexpf(1.0f, -25)), 0x0000);    /* tie to even: 0 */
    cr_assert_eq(nf_f32_to_f16(ldexpf(3.0f, -25)), 0x0002);    /* tie to even: 2 */
    cr_assert_eq(nf_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3c00);  /* tie to even, down */
    cr_assert_eq(nf_f32_to_f16(1.0f + ldexpf(3.0f, -11)), 0x3c02);  /* tie to even, up */
    cr_assert_eq(nf_f32_to_f16(INFINITY), 0x7c00);
    cr_assert_eq(nf_f32_to_f16(-0.0f), 0x8000);
    cr_assert_eq(nf_f32_to_f16(NAN) & 0x7e00, 0x7e00);
    for (uint32_t h = 0; h < 65536; h++) {                      /* f16 -> f32 -> f16 is the identity */
        float f = nf_f16_to_f32((uint16_t)h);
        if (f != f) continue;
        cr_assert_eq(nf_f32_to_f16(f), h, "half %04x", h);
    }
    cr_assert_eq(nf_f16_to_f32(0x0001), ldexpf(1.0f, -24));
    cr_assert_eq(nf_f16_to_f32(0x3555), 0.333251953125f);
    cr_assert_eq(nf_f32_to_bf16(1.0f), 0x3f80);
    cr_assert_eq(nf_f32_to_bf16(1.00390625f), 0x3f80);          /* tie to even, down */
    cr_assert_eq(nf_f32_to_bf16(1.01171875f), 0x3f82);          /* tie to even, up */
    cr_assert_eq(nf_bf16_to_f32(0xc040), -3.0f);
}

Test(formats, q8_0_hand_block) {
    uint8_t b[34];
    put16(b, 0x3800);                                          /* d = 0.5 */
    for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)(-128 + 8 * j);
    float y[32];
    cr_assert_eq(nf_dequantize(NF_TYPE_Q8_0, b, y, 32), 0);
    for (int j = 0; j < 32; j++) cr_assert_eq(y[j], 0.5f * (float)(-128 + 8 * j));
    /* the quantizer: amax 127 -> d = 1, q = round-half-away(x) */
    float x[32];
    for (int j = 0; j < 32; j++) x[j] = (float)j - 15.5f;
    x[31] = 127.0f;
    uint8_t q[34];
    cr_assert_eq(nf_quantize(NF_TYPE_Q8_0, x, q, 32, 32, NULL), 34);
    cr_assert_eq(q[0] | (q[1] << 8), 0x3c00);
    for (int j = 0; j < 31; j++) cr_assert_eq((int8_t)q[2 + j], (int)roundf(x[j]), "j=%d", j);
    cr_assert_eq((int8_t)q[33], 127);
}

Test(formats, q4_k_hand_block) {
    uint8_t b[144] = {0};
    put16(b, 0x3c00);                                          /* d = 1 */
    put16(b + 2, 0x3800);                                      /* dmin = 0.5 */
    const int sc[8] = {1, 2, 63, 4, 5, 40, 17, 33}, mn[8] = {0, 3, 9, 62, 1, 50, 16, 63};
    for (int j = 0; j < 4; j++) {                              /* 6-bit packing, written from the layout */
        b[4 + j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        b[8 + j] = (uint8_t)(mn[j] | ((mn[j + 4] >> 4) << 6));
        b[12 + j] = (uint8_t)((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
    }
    for (int i = 0; i < 128; i++) b[16 + i] = (uint8_t)(i * 37 + 11);
    float y[256];
    cr_assert_eq(nf_dequantize(NF_TYPE_Q4_K, b, y, 256), 0);
    for (int k = 0; k < 256; k++) {
        int chunk = k / 64, r = k % 64, byte = 32 * chunk + (r % 32);
        int q = r < 32 ? b[16 + byte] & 15 : b[16 + byte] >> 4;
        int j = k / 32;
        cr_assert_eq(y[k], (float)sc[j] * (float)q - 0.5f * (float)mn[j], "k=%d", k);
    }
}

Test(formats, q6_k_hand_block) {
    uint8_t b[210];
    for (int i = 0; i < 192; i++) b[i] = (uint8_t)(i * 113 + 7);
    const int8_t sc[16] = {1, -2, 3, 127, -128, 5, 6, 7, 8, 9, 10, -11, 12, 13, 14, 15};
    memcpy(b + 192, sc, 16);
    put16(b + 208, 0x3400);                                    /* d = 0.25 */
    float y[256];
    cr_assert_eq(nf_dequantize(NF_TYPE_Q6_K, b, y, 256), 0);
    for (int k = 0; k < 256; k++) {
        int half = k / 128, r = k % 128, l = r % 32, quarter = r / 32;
        const uint8_t *ql = b + 64 * half, *qh = b + 128 + 32 * half;
        int lo = quarter == 0 ? ql[l] & 15 : quarter == 1 ? ql[l + 32] & 15 : quarter == 2 ? ql[l] >> 4 : ql[l + 32] >> 4;
        int hi = (qh[l] >> (2 * quarter)) & 3;
        float want = 0.25f * (float)sc[k / 16] * (float)((lo | (hi << 4)) - 32);
        cr_assert_eq(y[k], want, "k=%d", k);
    }
}

Test(formats, q2_k_hand_block) {
    uint8_t b[84];
    for (int j = 0; j < 16; j++) b[j] = (uint8_t)((j & 15) | (((15 - j) & 15) << 4));
    for (int i = 0; i < 64; i++) b[16 + i] = (uint8_t)(i * 29 + 3);
    put16(b + 80, 0x4000);                                     /* d = 2 */
    put16(b + 82, 0x3400);                                     /* dmin = 0.25 */
    float y[256];
    cr_assert_eq(nf_dequantize(NF_TYPE_Q2_K, b, y, 256), 0);
    for (int k = 0; k < 256; k++) {
        int half = k / 128, r = k % 128, l = r % 32, shift = 2 * (r / 32);
        int q = (b[16 + 32 * half + l] >> shift) & 3;
        int s = b[k / 16];
        float want = 2.0f * (float)(s & 15) * (float)q - 0.25f * (float)(s >> 4);
        cr_assert_eq(y[k], want, "k=%d", k);
    }
}

Test(formats, iq2_xxs_hand_block) {
    uint8_t b[66] = {0};
    put16(b, 0x3c00);                                          /* d = 1 */
    /* group 0: points 0 (all 0x08) and 1 (first byte 0x2b), 0, 0; signs: sub-group 0 field 1 -> element 0 and
     * (parity) element 7 negative; scale code 3 -> db = (0.5+3)*0.25 = 0.875 */
    put32(b + 2, 0x00000100u);
    put32(b + 6, 1u | (3u << 28));
    float y[256];
    cr_assert_eq(nf_dequantize(NF_TYPE_IQ2_XXS, b, y, 256), 0);
    cr_assert_eq(y[0], -0.875f * 8.0f);
    for (int j = 1; j < 7; j++) cr_assert_eq(y[j], 0.875f * 8.0f);
    cr_assert_eq(y[7], -0.875f * 8.0f);
    cr_assert_eq(y[8], 0.875f * 43.0f);
    for (int j = 9; j < 32; j++) cr_assert_eq(y[j], 0.875f * 8.0f, "j=%d", j);
    for (int j = 32; j < 256; j++) cr_assert_eq(y[j], 0.125f * 8.0f, "j=%d", j);  /* scale code 0: db = 1/8 */
}

static double rel_rmse(const float *a, const float *b, int64_t n) {
    double e = 0, s = 0;
    for (int64_t i = 0; i < n; i++) { e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]); s += (double)b[i] * b[i]; }
    return s > 0 ? sqrt(e / s) : sqrt(e);
}

static double max_rel(uint32_t t) {
    switch (t) {
    case NF_TYPE_F32: return 0;
    case NF_TYPE_F16: return 3e-4;
    case NF_TYPE_BF16: return 2.5e-3;
    case NF_TYPE_Q8_0: return 0.008;
    case NF_TYPE_Q8_K: return 0.008;
    case NF_TYPE_Q6_K: return 0.022;
    case NF_TYPE_Q4_K: return 0.085;
    case NF_TYPE_Q2_K: return 0.34;
    default: return 0.40;                                      /* IQ2_XXS */
    }
}

Test(formats, round_trip_error_bounds) {
    const int64_t n = 8192;
    float *x = malloc(n * 4), *y = malloc(n * 4);
    uint8_t *q = malloc(n * 4);
    for (int64_t i = 0; i < n; i++) x[i] = grand();
    double prev = -1;
    const uint32_t order[] = {NF_TYPE_F32, NF_TYPE_F16, NF_TYPE_BF16, NF_TYPE_Q8_0, NF_TYPE_Q6_K, NF_TYPE_Q4_K,
                              NF_TYPE_Q2_K};
    for (size_t k = 0; k < NTYPES; k++) {
        uint32_t t = all_types[k];
        cr_assert_eq(nf_quantize(t, x, q, n, n, NULL), nf_row_bytes(t, n));
        cr_assert_eq(nf_dequantize(t, q, y, n), 0);
        double e = rel_rmse(y, x, n);
        cr_assert(e <= max_rel(t), "%s: relative rmse %g", nf_type_get(t)->name, e);
    }
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {  /* more bits, less error */
        cr_assert_eq(nf_quantize(order[k], x, q, n, n, NULL), nf_row_bytes(order[k], n));
        nf_dequantize(order[k], q, y, n);
        double e = rel_rmse(y, x, n);
        cr_assert(e >= prev, "%s error %g below the previous type's %g", nf_type_get(order[k])->name, e, prev);
        prev = e;
    }
    free(x); free(y); free(q);
}

static double ref_dot(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

Test(formats, dots_match_dequantized_dot) {
    const int64_t n = 4096;
    float *w = malloc(n * 4), *x = malloc(n * 4), *wd = malloc(n * 4);
    uint8_t *q = malloc(n * 4), *act = malloc(n * 4 + 64);
    for (int rep = 0; rep < 4; rep++) {
        for (int64_t i = 0; i < n; i++) { w[i] = grand() * (rep + 1); x[i] = grand() + (rep == 3 ? 2.0f : 0.0f); }
        for (size_t k = 0; k < NTYPES; k++) {
            uint32_t t = all_types[k];
            nf_quantize(t, w, q, n, n, NULL);
            nf_dequantize(t, q, wd, n);
            double exact = ref_dot(wd, x, n), scale = sqrt(ref_dot(wd, wd, n) * ref_dot(x, x, n));
            float f = nf_vec_dot_f32(t, n, q, x);
            cr_assert(fabs(f - exact) <= 1e-5 * scale, "%s f32 dot %g vs %g", nf_type_get(t)->name, f, exact);
            nf_quantize_activation(t, x, act, n);
            float d = nf_vec_dot(t, n, q, act);
            /* exact dot of the weights with the dequantized activation: only f32 rounding may differ */
            float xd[4096];
            uint32_t vt = nf_vec_dot_type(t);
            nf_dequantize(vt, act, xd, n);
            double exact_q = ref_dot(wd, xd, n);
            cr_assert(fabs(d - exact_q) <= 2e-5 * scale, "%s dot %g vs %g", nf_type_get(t)->name, d, exact_q);
            cr_assert(fabs(d - exact) <= (vt == NF_TYPE_F32 ? 1e-5 : 0.01) * scale, "%s", nf_type_get(t)->name);
        }
    }
    free(w); free(x); free(wd); free(q); free(act);
}

Test(formats, edge_cases) {
    const int64_t n = 512;
    float x[512], y[512];
    uint8_t q[2048], q2[2048 + 1];
    for (size_t k = 0; k < NTYPES; k++) {
        uint32_t t = all_types[k];
        const char *name = nf_type_get(t)->name;
        /* all zeros -> all zeros, and a zero dot */
        memset(x, 0, sizeof x);
        cr_assert_eq(nf_quantize(t, x, q, n, n, NULL), nf_row_bytes(t, n));
        cr_assert_eq(nf_dequantize(t, q, y, n), 0);
        for (int i = 0; i < n; i++) cr_assert_eq(y[i], 0.0f, "%s zero row", name);
        /* constant rows (positive and negative) */
        for (int sgn = -1; sgn <= 1; sgn += 2) {
            for (int i = 0; i < n; i++) x[i] = 0.37f * (float)sgn;
            nf_quantize(t, x, q, n, n, NULL);
            nf_dequantize(t, q, y, n);
            cr_assert(rel_rmse(y, x, n) <= (t == NF_TYPE_IQ2_XXS ? 0.1 : t == NF_TYPE_Q2_K ? 0.05 : 0.01),
                      "%s constant %d: %g", name, sgn, rel_rmse(y, x, n));
        }
        /* huge (but f16-scale-representable) values and a lone outlier stay finite and bounded */
        const float big = t == NF_TYPE_F16 ? 1e4f : 1e5f;     /* f16 (and the f16 block scales) stop at 65504 */
        for (int i = 0; i < n; i++) x[i] = big * grand();
        x[17] = 6.5f * big;                                     /* q8_0: amax/127 must fit f16 */
        nf_quantize(t, x, q, n, n, NULL);
        nf_dequantize(t, q, y, n);
        for (int i = 0; i < n; i++) cr_assert(isfinite(y[i]), "%s huge", name);
        cr_assert(rel_rmse(y, x, n) < 0.9, "%s huge: %g", name, rel_rmse(y, x, n));
        /* unaligned buffers give the same bytes and values */
        for (int i = 0; i < n; i++) x[i] = grand();
        nf_quantize(t, x, q, n, n, NULL);
        cr_assert_eq(nf_quantize(t, x, q2 + 1, n, n, NULL), nf_row_bytes(t, n));
        cr_assert_eq(memcmp(q, q2 + 1, nf_row_bytes(t, n)), 0, "%s unaligned", name);
        float y2[512];
        nf_dequantize(t, q, y, n);
        nf_dequantize(t, q2 + 1, y2, n);
        cr_assert_eq(memcmp(y, y2, sizeof y), 0);
        /* n not a multiple of the block size is rejected */
        int64_t bs = nf_type_get(t)->block_size;
        if (bs > 1) {
            nf_clear_error();
            cr_assert_eq(nf_quantize(t, x, q, bs + 1, bs + 1, NULL), 0);
            cr_assert(strstr(nf_error(), "multiple"), "%s: %s", name, nf_error());
            cr_assert_eq(nf_dequantize(t, q, y, bs - 1), -1);
            cr_assert(isnan(nf_vec_dot(t, bs + 1, q, q2)));
            cr_assert(isnan(nf_vec_dot_f32(t, bs / 2, q, x)));
        }
        cr_assert_eq(nf_dequantize(t, q, y, -bs), -1);
    }
    /* unsupported and unknown types */
    cr_assert_eq(nf_dequantize(NF_TYPE_Q4_0, q, y, 32), -1);
    cr_assert(strstr(nf_error(), "not supported"));
    cr_assert_eq(nf_quantize(NF_TYPE_Q5_K, x, q, 256, 256, NULL), 0);
    cr_assert_eq(nf_dequantize(39, q, y, 32), -1);
    cr_assert(isnan(nf_vec_dot(1234, 32, q, q2)));
    cr_assert_eq(nf_vec_dot_type(NF_TYPE_Q4_0), NF_TYPE_COUNT);
    /* an importance vector needs a row length that is a multiple of the block size */
    float im[512];
    for (int i = 0; i < 512; i++) im[i] = 1.0f;
    cr_assert_eq(nf_quantize(NF_TYPE_Q4_K, x, q, 512, 100, im), 0);
    cr_assert_eq(nf_quantize(NF_TYPE_Q4_K, x, q, 512, 256, im), nf_row_bytes(NF_TYPE_Q4_K, 512));
}

Test(formats, imatrix_reduces_weighted_error) {
    const int64_t n = 2048, row = 1024;
    float *x = malloc(n * 4), *y = malloc(n * 4), *im = malloc(row * 4);
    uint8_t *q = malloc(n);
    for (int64_t i = 0; i < n; i++) x[i] = grand();
    for (int64_t i = 0; i < row; i++) im[i] = (i % 37 == 0) ? 50.0f : 1.0f;
    const uint32_t ts[] = {NF_TYPE_Q4_K, NF_TYPE_Q6_K, NF_TYPE_Q2_K, NF_TYPE_IQ2_XXS};
    for (size_t k = 0; k < 4; k++) {
        double e[2];
        for (int use = 0; use < 2; use++) {
            cr_assert_eq(nf_quantize(ts[k], x, q, n, row, use ? im : NULL), nf_row_bytes(ts[k], n));
            nf_dequantize(ts[k], q, y, n);
            e[use] = 0;
            for (int64_t i = 0; i < n; i++) e[use] += im[i % row] * (double)(y[i] - x[i]) * (y[i] - x[i]);
        }
        cr_assert(e[1] < e[0], "%s: weighted error with imatrix %g, without %g", nf_type_get(ts[k])->name, e[1], e[0]);
    }
    free(x); free(y); free(im); free(q);
}

Test(formats, nonfinite_inputs_stay_in_their_block) {
    /* nan / inf in the first block must not crash and must not change any other block's bytes */
    const int64_t n = 1024;
    float x[1024], bad[1024];
    static uint8_t q0[8192], q1[8192];
    for (int i = 0; i < n; i++) x[i] = grand();
    for (size_t k = 0; k < NTYPES; k++) {
        const uint32_t t = all_types[k];
        const nf_type_info *ti = nf_type_get(t);
        for (int v = 0; v < 3; v++) {
            memcpy(bad, x, sizeof x);
            bad[3] = v == 0 ? NAN : v == 1 ? INFINITY : -INFINITY;
            nf_quantize(t, x, q0, n, n, NULL);
            cr_assert_eq(nf_quantize(t, bad, q1, n, n, NULL), nf_row_bytes(t, n));
            cr_assert_eq(memcmp(q0 + ti->block_bytes * (ti->block_size == 1 ? 4 : 1),
                                q1 + ti->block_bytes * (ti->block_size == 1 ? 4 : 1),
                                nf_row_bytes(t, n) - ti->block_bytes * (ti->block_size == 1 ? 4 : 1)), 0,
                         "%s: a non-finite value leaked out of its block", ti->name);
        }
    }
}

Test(formats, simd_dequantizers_match_plain_c) {
    /* the AVX2 dequantizers (when built) against the plain C ones, bit for bit, on arbitrary block bytes: every
     * nibble, grid index, sign pattern and scale code, with the f16 block scales kept finite */
    struct { uint32_t t; void (*plain)(const void *, float *, int64_t); int scale_off[2]; } k[] = {
        {NF_TYPE_Q8_0, nf_dequant_q8_0_scalar, {0, -1}},  {NF_TYPE_Q4_K, nf_dequant_q4_k_scalar, {0, 2}},
        {NF_TYPE_Q6_K, nf_dequant_q6_k_scalar, {208, -1}}, {NF_TYPE_Q2_K, nf_dequant_q2_k_scalar, {80, 82}},
        {NF_TYPE_IQ2_XXS, nf_dequant_iq2_xxs_scalar, {0, -1}},
    };
    const int64_t n = 4096;
    static uint8_t w[4096 * 2];
    static float fast[4096], plain[4096];
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        const nf_type_info *ti = nf_type_get(k[i].t);
        const int64_t nb = n / ti->block_size;
        for (int rep = 0; rep < 20; rep++) {
            for (size_t j = 0; j < nf_row_bytes(k[i].t, n); j++) w[j] = (uint8_t)(urand() * 256);
            for (int64_t b = 0; b < nb; b++)
                for (int s = 0; s < 2; s++)
                    if (k[i].scale_off[s] >= 0) w[b * ti->block_bytes + k[i].scale_off[s] + 1] &= 0x3b;  /* |d| < 1 */
            cr_assert_eq(nf_dequantize(k[i].t, w, fast, n), 0);
            k[i].plain(w, plain, nb);
            for (int64_t j = 0; j < n; j++)
                cr_assert(memcmp(&fast[j], &plain[j], 4) == 0, "%s value %lld: %.9g vs plain %.9g", ti->name,
                          (long long)j, fast[j], plain[j]);
        }
    }
}

Test(formats, f32_dot_multiplies_exactly_the_dequantized_values) {
    /* nf_vec_dot_f32 (the fused decode-and-multiply-add kernels) against unit vectors returns each dequantized
     * value exactly (w*1 + sums of w*0 is exact), on arbitrary block bytes with finite scales */
    const uint32_t ts[] = {NF_TYPE_Q8_0, NF_TYPE_Q4_K, NF_TYPE_Q6_K, NF_TYPE_Q2_K, NF_TYPE_IQ2_XXS};
    const int scale_off[][2] = {{0, -1}, {0, 2}, {208, -1}, {80, 82}, {0, -1}};
    const int64_t n = 512;
    static uint8_t w[2048];
    static float e[512], wd[512];
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        const nf_type_info *ti = nf_type_get(ts[i]);
        for (int rep = 0; rep < 4; rep++) {
            for (size_t j = 0; j < nf_row_bytes(ts[i], n); j++) w[j] = (uint8_t)(urand() * 256);
            for (int64_t b = 0; b < n / ti->block_size; b++)
                for (int s = 0; s < 2; s++)
                    if (scale_off[i][s] >= 0) w[b * ti->block_bytes + scale_off[i][s] + 1] &= 0x3b;
            nf_dequantize(ts[i], w, wd, n);
            for (int64_t j = 0; j < n; j++) {
                e[j] = 1.0f;
                const float got = nf_vec_dot_f32(ts[i], n, w, e);
                e[j] = 0.0f;
                cr_assert(got == wd[j], "%s value %lld: dot with unit vector %.9g, dequantized %.9g", ti->name,
                          (long long)j, got, wd[j]);
            }
        }
    }
}

Test(formats, simd_dots_match_plain_c) {
    /* the AVX2 kernels (when built) against the plain C ones, on arbitrary block bytes: every nibble, grid
     * index, sign pattern and scale code, with the f16 block scales kept finite */
    struct { uint32_t t; float (*plain)(int64_t, const void *, const void *); int scale_off[2]; } k[] = {
        {NF_TYPE_Q8_0, nf_dot_q8_0_scalar, {0, -1}},  {NF_TYPE_Q4_K, nf_dot_q4_k_scalar, {0, 2}},
        {NF_TYPE_Q6_K, nf_dot_q6_k_scalar, {208, -1}}, {NF_TYPE_Q2_K, nf_dot_q2_k_scalar, {80, 82}},
        {NF_TYPE_IQ2_XXS, nf_dot_iq2_xxs_scalar, {0, -1}},
    };
    const int64_t n = 4096;
    static uint8_t w[4096 * 2], act[4096 * 2];
    static float x[4096], wd[4096], xd[4096];
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        const nf_type_info *ti = nf_type_get(k[i].t);
        const int64_t nb = n / ti->block_size;
        for (int rep = 0; rep < 20; rep++) {
            for (size_t j = 0; j < nf_row_bytes(k[i].t, n); j++) w[j] = (uint8_t)(urand() * 256);
            for (int64_t b = 0; b < nb; b++)
                for (int s = 0; s < 2; s++)
                    if (k[i].scale_off[s] >= 0) w[b * ti->block_bytes + k[i].scale_off[s] + 1] &= 0x3b;  /* |d| < 1 */
            for (int64_t j = 0; j < n; j++) x[j] = grand();
            nf_quantize_activation(k[i].t, x, act, n);
            const float fast = nf_vec_dot(k[i].t, n, w, act), plain = k[i].plain(nb, w, act);
            nf_dequantize(k[i].t, w, wd, n);
            nf_dequantize(nf_vec_dot_type(k[i].t), act, xd, n);
            double aw = 0, ax = 0;
            for (int64_t j = 0; j < n; j++) { aw += (double)wd[j] * wd[j]; ax += (double)xd[j] * xd[j]; }
            const double tol = 1e-5 * sqrt(aw * ax) + 1e-30;
            cr_assert(fabs((double)fast - plain) <= tol, "%s: simd %g, plain %g", ti->name, fast, plain);
            cr_assert(fabs(plain - ref_dot(wd, xd, n)) <= tol, "%s: plain %g, exact %g", ti->name, plain,
                      ref_dot(wd, xd, n));
        }
    }
}
