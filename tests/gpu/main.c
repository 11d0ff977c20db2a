/* main.c — the GPU test program (build/cuda/nf-gpu-tests, run by `make gpu-test` on a machine with a GPU).
 *
 *   nf-gpu-tests [--bench] [--quick] [--only gemv|gemm|backend|synth|attn|pipeline|router|kda]
 *
 * Runs every GPU test file's entry point (gpu_tests.h) and exits non-zero when any check failed. --bench adds
 * the GEMV bandwidth table (CSV to $NF_GEMV_CSV when set), the GEMM timing table, the indexer/attention phase
 * timings and the KDA recurrence's fused vs prepared timings; --quick runs a small subset of the backend test
 * (for compute-sanitizer, which slows kernels down a lot), of the synthetic-model test (no glm53 sizes), of the
 * attention test and of the KDA test (no full-size case). */
#include <stdio.h>
#include <string.h>

#include "gpu_tests.h"
#include "util/error.h"

int main(int argc, char **argv) {
    nf_progname = "nf-gpu-tests";
    setvbuf(stdout, NULL, _IOLBF, 0); /* a run cut short by a time limit keeps every finished line */
    int bench = 0, quick = 0;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bench")) bench = 1;
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else {
            fprintf(stderr, "usage: nf-gpu-tests [--bench] [--quick] "
                            "[--only gemv|gemm|backend|synth|attn|pipeline|router|kda]\n");
            return 2;
        }
    }
    if (only && strcmp(only, "gemv") && strcmp(only, "gemm") && strcmp(only, "backend") && strcmp(only, "synth") &&
        strcmp(only, "attn") && strcmp(only, "pipeline") && strcmp(only, "router") && strcmp(only, "kda")) {
        fprintf(stderr,
                "nf-gpu-tests: --only %s: unknown test (gemv, gemm, backend, synth, attn, pipeline, router or kda)\n",
                only);
        return 2;
    }
    int failed = 0;
    if (!only || !strcmp(only, "gemv")) failed += nf_gpu_test_gemv(bench);
    if (!only || !strcmp(only, "gemm")) failed += nf_gpu_test_gemm(bench);
    if (!only || !strcmp(only, "backend")) failed += nf_gpu_test_backend(quick);
    if (!only || !strcmp(only, "synth")) failed += nf_gpu_test_synth(quick);
    if (!only || !strcmp(only, "attn")) failed += nf_gpu_test_attn(bench, quick);
    if (!only || !strcmp(only, "pipeline")) failed += nf_gpu_test_pipeline(quick);
    if (!only || !strcmp(only, "router")) failed += nf_gpu_test_router();
    if (!only || !strcmp(only, "kda")) failed += nf_gpu_test_kda(bench, quick);
    printf("nf-gpu-tests: %s (%d failed checks)\n", failed ? "FAIL" : "PASS", failed);
    return failed ? 1 : 0;
}
