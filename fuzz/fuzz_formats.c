/* fuzz_formats.c — libFuzzer target for the tensor formats (src/formats).
 *
 * Input: one byte choosing the type, then raw block bytes (at most 64 blocks). Whatever the bytes: dequantize
 * them, dot them with a fixed activation (nf_vec_dot and nf_vec_dot_f32), quantize the dequantized values
 * again (they may include nan and inf; with and without an importance vector) and dequantize that. Nothing may
 * crash, read out of bounds or hit undefined behaviour, and a call with a bad element count must be refused
 * with a message. Seeds: one block or row of each type (fuzz/corpus/formats/).
 */
#include "formats/formats.h"
#include "util/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static volatile float sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const uint32_t types[] = {NF_TYPE_F32, NF_TYPE_F16, NF_TYPE_BF16, NF_TYPE_Q8_0, NF_TYPE_Q4_K,
                                     NF_TYPE_Q6_K, NF_TYPE_Q2_K, NF_TYPE_IQ2_XXS, NF_TYPE_Q8_K};
    if (size < 1) return 0;
    const uint32_t t = types[data[0] % (sizeof types / sizeof types[0])];
    const nf_type_info *ti = nf_type_get(t);
    data++, size--;
    const int64_t nblk = (int64_t)(size / ti->block_bytes);
    if (nblk == 0 || nblk > 64) return 0;
    const int64_t n = nblk * ti->block_size;
    uint8_t *w = malloc((size_t)nblk * ti->block_bytes);  /* exact size, so ASan sees any overread */
    float *y = malloc((size_t)n * sizeof(float)), *x = malloc((size_t)n * sizeof(float));
    const uint32_t vt = nf_vec_dot_type(t);
    uint8_t *act = malloc(nf_row_bytes(vt, n));
    uint8_t *q = malloc(nf_row_bytes(t, n));
    memcpy(w, data, (size_t)nblk * ti->block_bytes);
    for (int64_t i = 0; i < n; i++) x[i] = (float)((i * 37) % 19) - 9.0f;
    if (nf_dequantize(t, w, y, n) != 0) abort();
    nf_quantize_activation(t, x, act, n);
    sink = nf_vec_dot(t, n, w, act);
    sink = nf_vec_dot_f32(t, n, w, x);
    if (nf_quantize(t, y, q, n, n, NULL) != nf_row_bytes(t, n)) abort();
    if (nf_quantize(t, y, q, n, ti->block_size == 1 ? n : (ti->block_size), x) != nf_row_bytes(t, n)) abort();
    if (nf_dequantize(t, q, y, n) != 0) abort();
    /* invalid calls are refused with a message, never crash */
    if (ti->block_size > 1) {
        nf_clear_error();
        if (nf_dequantize(t, w, y, n - 1) != -1 || !nf_error()[0]) abort();
    }
    free(w); free(y); free(x); free(act); free(q);
    return 0;
}
