/* test_quantize_rows.c — nf_quantize_rows (formats/quantize_rows.h): the threaded row split used by nf-convert and
 * nf-quantize gives the same bytes as one nf_quantize call, for any thread count, and rejects rows a type cannot
 * store. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"
#include "formats/quantize_rows.h"
#include "util/error.h"

Test(quantize_rows, same_bytes_for_any_thread_count) {
    const int64_t rows = 67, row_len = 512;   /* 67 rows: uneven split */
    float *x = malloc((size_t)(rows * row_len) * sizeof *x);
    uint32_t seed = 12345;
    for (int64_t i = 0; i < rows * row_len; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * (1.0f + (float)(i % 7));
    }
    const uint32_t types[] = {NF_TYPE_Q8_0, NF_TYPE_Q4_K, NF_TYPE_Q2_K, NF_TYPE_BF16};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        size_t bytes = nf_row_bytes(types[k], row_len) * (size_t)rows;
        uint8_t *want = malloc(bytes), *got = malloc(bytes);
        cr_assert(nf_quantize(types[k], x, want, rows * row_len, row_len, NULL) == bytes);
        for (int nt = 1; nt <= 5; nt += 2) {
            memset(got, 0xAB, bytes);
            cr_assert_eq(nf_quantize_rows(types[k], x, got, rows, row_len, nt), 0, "%s", nf_error());
            cr_assert(memcmp(want, got, bytes) == 0, "type %s, %d threads", nf_type_get(types[k])->name, nt);
        }
        free(want);
        free(got);
    }
    free(x);
}

Test(quantize_rows, rejects_rows_the_type_cannot_store) {
    float x[96] = {0};
    uint8_t out[512];
    cr_assert_eq(nf_quantize_rows(NF_TYPE_Q4_K, x, out, 1, 96, 2), -1);
    cr_assert(strstr(nf_error(), "q4_K") && strstr(nf_error(), "96"), "%s", nf_error());
    cr_assert_eq(nf_quantize_rows(NF_TYPE_Q8_0, x, out, 0, 96, 2), 0);   /* no rows: nothing to do */
}
