/* nf-dotbench.c — rough single-core throughput of the CPU dot products, per weight format.
 *
 * For each supported type: quantize a random 4096 x 4096 weight matrix (64 MiB of f32, less once quantized;
 * rows are reused so it streams from cache-unfriendly memory as in a real matvec), prepare one activation with
 * nf_quantize_activation, and time nf_vec_dot over all rows (and nf_vec_dot_f32 for comparison). Prints
 * GB/s of weight bytes read. Not a test; numbers depend on the machine and its load.
 *
 * usage: nf-dotbench [rows [cols [seconds-per-type]]] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "formats/formats.h"
#include "util/error.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    nf_progname = "nf-dotbench";
    const int64_t rows = argc > 1 ? atoll(argv[1]) : 4096, cols = argc > 2 ? atoll(argv[2]) : 4096;
    const double secs = argc > 3 ? atof(argv[3]) : 1.0;
    if (rows <= 0 || cols <= 0 || cols % 256) nf_die("rows > 0 and cols a positive multiple of 256 please");
    float *w = nf_xmalloc((size_t)(rows * cols) * 4), *x = nf_xmalloc((size_t)cols * 4);
    uint64_t s = 12345;
    for (int64_t i = 0; i < rows * cols; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        w[i] = (float)((int64_t)(s >> 40) - (1 << 23)) / (float)(1 << 23);
    }
    for (int64_t i = 0; i < cols; i++) x[i] = w[i * 7 % (rows * cols)];
    const uint32_t types[] = {NF_TYPE_F32, NF_TYPE_F16, NF_TYPE_BF16, NF_TYPE_Q8_0, NF_TYPE_Q6_K,
                              NF_TYPE_Q4_K, NF_TYPE_Q2_K, NF_TYPE_IQ2_XXS};
    printf("%-8s %10s %12s %12s %14s\n", "type", "MiB", "dot GB/s", "dot_f32 GB/s", "quantize MB/s");
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const uint32_t t = types[k];
        const size_t rb = nf_row_bytes(t, cols);
        uint8_t *q = nf_xmalloc(rb * (size_t)rows);
        double t0 = now();
        for (int64_t r = 0; r < rows; r++) nf_quantize(t, w + r * cols, q + rb * (size_t)r, cols, cols, NULL);
        const double tq = now() - t0;
        uint8_t *act = nf_xmalloc((size_t)cols * 4 + 64);
        nf_quantize_activation(t, x, act, cols);
        double best[2] = {0, 0};
        volatile float sink = 0;
        for (int mode = 0; mode < 2; mode++) {
            double start = now(), el = 0;
            int64_t passes = 0;
            do {
                double p0 = now();
                float acc = 0;
                for (int64_t r = 0; r < rows; r++)
                    acc += mode == 0 ? nf_vec_dot(t, cols, q + rb * (size_t)r, act)
                                     : nf_vec_dot_f32(t, cols, q + rb * (size_t)r, x);
                sink += acc;
                double gbs = (double)rb * (double)rows / (now() - p0) / 1e9;
                if (gbs > best[mode]) best[mode] = gbs;
                passes++;
                el = now() - start;
            } while (el < secs);
        }
        (void)sink;
        printf("%-8s %10.1f %12.2f %12.2f %14.1f\n", nf_type_get(t)->name, (double)(rb * (size_t)rows) / 1048576.0,
               best[0], best[1], (double)(rows * cols) * 4 / tq / 1e6);
        free(q);
        free(act);
    }
    free(w);
    free(x);
    return 0;
}
