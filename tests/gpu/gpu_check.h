/* gpu_check.h — the non-fatal check of the GPU test files that count failures (test_backend.c, test_synth.c,
 * test_attn.c, ...): a failed condition prints "FAIL file:line: message" and increments the including file's own
 * `static int n_failed`, so one file's failures never leak into another's count. CU: a CUDA runtime call of a
 * test's own setup (allocation, copies) that must succeed, else the program stops with the call and the error. */
#ifndef NF_TESTS_GPU_CHECK_H
#define NF_TESTS_GPU_CHECK_H

#include <cuda_runtime.h>
#include <stdio.h>

#include "util/error.h"

#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            n_failed++;                                                                                      \
            printf("  FAIL %s:%d: ", __FILE__, __LINE__);                                                    \
            printf(__VA_ARGS__);                                                                             \
            printf("\n");                                                                                    \
        }                                                                                                    \
    } while (0)

#define CU(x)                                                                                                \
    do {                                                                                                     \
        cudaError_t e_ = (x);                                                                                \
        if (e_ != cudaSuccess) nf_die("%s:%d: %s: %s", __FILE__, __LINE__, #x, cudaGetErrorString(e_));      \
    } while (0)

#endif
