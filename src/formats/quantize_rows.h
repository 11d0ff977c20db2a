/* quantize_rows.h — nf_quantize over row ranges on several threads.
 *
 * Shared by the converter (src/convert) and the re-quantizer (src/model/requantize.c) so that a recipe gives the
 * same bytes whichever tool wrote the file: rows are independent, so the result does not depend on the thread
 * count. */
#ifndef NF_FORMATS_QUANTIZE_ROWS_H
#define NF_FORMATS_QUANTIZE_ROWS_H

#include <stdint.h>

/* Quantize `rows` rows of `row_len` f32 values (src, row-major) to `type` into dst (rows * nf_row_bytes(type,
 * row_len) bytes), splitting the rows over up to n_threads threads (<= 1: the calling thread only; small
 * tensors always use one). 0, or -1 with nf_error() when the type cannot store rows of that length or the
 * quantizer fails. */
int nf_quantize_rows(uint32_t type, const float *src, void *dst, int64_t rows, int64_t row_len, int n_threads);

#endif
