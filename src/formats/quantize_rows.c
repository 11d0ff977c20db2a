/* quantize_rows.c — nf_quantize split by rows over threads (see quantize_rows.h). */
#include "formats/quantize_rows.h"

#include <pthread.h>
#include <stddef.h>

#include "formats/formats.h"
#include "util/error.h"

typedef struct {
    uint32_t type;
    const float *src;
    uint8_t *dst;
    int64_t row0, rows, row_len;
    size_t row_bytes;
    size_t ret;
} qjob;

static void *qworker(void *arg) {
    qjob *j = arg;
    j->ret = j->rows ? nf_quantize(j->type, j->src + j->row0 * j->row_len, j->dst + j->row0 * j->row_bytes,
                                   j->rows * j->row_len, j->row_len, NULL)
                     : 1;
    return NULL;
}

int nf_quantize_rows(uint32_t type, const float *src, void *dst, int64_t rows, int64_t row_len, int n_threads) {
    size_t rb = nf_row_bytes(type, row_len);
    if (!rb) return nf_fail("type %s cannot store rows of %lld", nf_type_get(type)->name, (long long)row_len);
    if (rows <= 0) return 0;
    int nt = n_threads < 1 ? 1 : n_threads;
    if ((int64_t)nt > rows) nt = (int)rows;
    if (rows * row_len < (1 << 16)) nt = 1;
    if (nt > 64) nt = 64;
    qjob jobs[64];
    pthread_t th[64];
    int started[64] = {0};
    for (int i = 0; i < nt; i++) {
        int64_t r0 = rows * i / nt, r1 = rows * (i + 1) / nt;
        jobs[i] = (qjob){type, src, dst, r0, r1 - r0, row_len, rb, 0};
    }
    for (int i = 1; i < nt; i++) started[i] = pthread_create(&th[i], NULL, qworker, &jobs[i]) == 0;
    qworker(&jobs[0]);
    for (int i = 1; i < nt; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        else qworker(&jobs[i]);
    }
    for (int i = 0; i < nt; i++)
        if (!jobs[i].ret) return nf_fail("quantization to %s failed", nf_type_get(type)->name);
    return 0;
}
