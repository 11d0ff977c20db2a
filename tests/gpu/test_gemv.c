/* test_gemv.c — GPU GEMV against the CPU formats code, then a bandwidth table (run by `make gpu-test`).
 *
 * Correctness: for every format, random rows are quantized with the reference quantizer, multiplied on the
 * GPU, and compared with the CPU's exact dequantize-and-dot (nf_vec_dot_f32). The two differ only in the
 * order of f32 additions, so the bound is relative to sum |w||x| of the row.
 * Speed (a benchmark, not a pass/fail criterion): one 14336x4096 GEMV per format, the llama.cpp shape of
 * docs/benchmarks.md, timed with CUDA events over many launches rotating through weight copies larger than
 * L2, printed as CSV (and written to $NF_GEMV_CSV if set). Entry point nf_gpu_test_gemv (tests/gpu/main.c). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_gemv.h"
#include "gpu_tests.h"
#include "formats/formats.h"
#include "util/error.h"

#define CHECK(x)                                                                                      \
    do {                                                                                              \
        cudaError_t e_ = (x);                                                                         \
        if (e_ != cudaSuccess) nf_die("%s:%d: %s: %s", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
    } while (0)

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double uniform(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return ((rng_state >> 11) + 0.5) / 9007199254740992.0;
}
static float gauss(void) { return (float)(sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform())); }

static const uint32_t types[] = {NF_TYPE_F32, NF_TYPE_F16, NF_TYPE_BF16, NF_TYPE_Q8_0,
                                 NF_TYPE_Q4_K, NF_TYPE_Q6_K, NF_TYPE_Q2_K, NF_TYPE_IQ2_XXS};
#define N_TYPES (sizeof types / sizeof types[0])

/* Quantize rows x cols random normal weights; returns host bytes. */
static void *make_weights(uint32_t type, int64_t rows, int64_t cols, size_t *bytes) {
    size_t rb = nf_row_bytes(type, cols);
    uint8_t *q = nf_xmalloc(rb * rows);
    float *row = nf_xmalloc(sizeof(float) * cols);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) row[c] = gauss() * 0.02f;
        if (nf_quantize(type, row, q + rb * r, cols, cols, NULL) != rb) nf_die("quantize %s failed", nf_type_get(type)->name);
    }
    free(row);
    *bytes = rb * rows;
    return q;
}

static int check_type(uint32_t type) {
    const int64_t rows = 512, cols = 4096;
    size_t bytes;
    uint8_t *w = make_weights(type, rows, cols, &bytes);
    float *x = nf_xmalloc(sizeof(float) * cols), *y = nf_xmalloc(sizeof(float) * rows);
    float *deq = nf_xmalloc(sizeof(float) * cols);
    for (int64_t c = 0; c < cols; c++) x[c] = gauss();
    void *dw; float *dx, *dy;
    CHECK(cudaMalloc(&dw, bytes)); CHECK(cudaMalloc((void **)&dx, sizeof(float) * cols)); CHECK(cudaMalloc((void **)&dy, sizeof(float) * rows));
    CHECK(cudaMemcpy(dw, w, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dx, x, sizeof(float) * cols, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(dy, 0xff, sizeof(float) * rows)); /* NaN poison: an unwritten row fails */
    if (nf_cuda_gemv(type, dw, dx, dy, rows, cols, NULL)) nf_die("%s", nf_error());
    CHECK(cudaMemcpy(y, dy, sizeof(float) * rows, cudaMemcpyDeviceToHost));
    size_t rb = nf_row_bytes(type, cols);
    double worst = 0;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *row = w + rb * r;
        float ref = nf_vec_dot_f32(type, cols, row, x);
        nf_dequantize(type, row, deq, cols);
        double mag = 0;
        for (int64_t c = 0; c < cols; c++) mag += fabs(deq[c] * x[c]);
        double err = fabs((double)y[r] - ref) / (mag + 1e-30);
        if (!(err <= worst)) worst = isnan(err) ? INFINITY : err;
    }
    int ok = worst < 2e-6;
    printf("gemv %-8s rows %lld cols %lld  max |gpu-cpu| / sum|w x| = %.3g  %s\n", nf_type_get(type)->name,
           (long long)rows, (long long)cols, worst, ok ? "ok" : "FAIL");
    cudaFree(dw); cudaFree(dx); cudaFree(dy);
    free(w); free(x); free(y); free(deq);
    return ok;
}

static void bench_type(uint32_t type, FILE *csv) {
    const int64_t rows = 14336, cols = 4096;
    size_t bytes;
    uint8_t *w = make_weights(type, rows, cols, &bytes);
    int copies = (int)(512e6 / bytes) + 2; /* rotate through > 8x the 60 MB L2 */
    if (copies > 32) copies = 32;
    void **dw = nf_xcalloc(copies, sizeof(void *));
    for (int i = 0; i < copies; i++) {
        CHECK(cudaMalloc(&dw[i], bytes));
        CHECK(cudaMemcpy(dw[i], w, bytes, cudaMemcpyHostToDevice));
    }
    float *dx, *dy;
    CHECK(cudaMalloc((void **)&dx, sizeof(float) * cols)); CHECK(cudaMalloc((void **)&dy, sizeof(float) * rows));
    CHECK(cudaMemset(dx, 0, sizeof(float) * cols));
    for (int i = 0; i < 20; i++) nf_cuda_gemv(type, dw[i % copies], dx, dy, rows, cols, NULL);
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a)); CHECK(cudaEventCreate(&b));
    const int iters = 400;
    CHECK(cudaEventRecord(a, NULL));
    for (int i = 0; i < iters; i++) nf_cuda_gemv(type, dw[i % copies], dx, dy, rows, cols, NULL);
    CHECK(cudaEventRecord(b, NULL));
    CHECK(cudaEventSynchronize(b));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    double us = 1000.0 * ms / iters, gbps = bytes / (us * 1e3);
    printf("bench %-8s %lldx%lld  %8.2f us  %7.0f GB/s\n", nf_type_get(type)->name, (long long)rows, (long long)cols, us, gbps);
    if (csv) fprintf(csv, "%s,%lld,%lld,%zu,%.3f,%.1f\n", nf_type_get(type)->name, (long long)rows, (long long)cols, bytes, us, gbps);
    if (csv) fflush(csv);
    for (int i = 0; i < copies; i++) cudaFree(dw[i]);
    free(dw); cudaFree(dx); cudaFree(dy); free(w);
    cudaEventDestroy(a); cudaEventDestroy(b);
}

int nf_gpu_test_gemv(int bench) {
    if (nf_cuda_gemv_init()) nf_die("%s", nf_error());
    int failed = 0;
    for (size_t i = 0; i < N_TYPES; i++) failed += !check_type(types[i]);
    printf("gemv: %d passed, %d failed\n", (int)N_TYPES - failed, failed);
    if (bench) {
        const char *path = getenv("NF_GEMV_CSV");
        FILE *csv = path ? fopen(path, "w") : NULL;
        if (csv) fprintf(csv, "format,rows,cols,weight_bytes,us_per_run,gbps\n");
        for (size_t i = 0; i < N_TYPES; i++) bench_type(types[i], csv);
        if (csv) fclose(csv);
    }
    return failed;
}
