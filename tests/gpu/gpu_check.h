/* gpu_check.h — the non-fatal check of the GPU test files that count failures (test_backend.c, test_synth.c,
 * test_attn.c): a failed condition prints "FAIL file:line: message" and increments the including file's own
 * `static int n_failed`, so one file's failures never leak into another's count. */
#ifndef NF_TESTS_GPU_CHECK_H
#define NF_TESTS_GPU_CHECK_H

#include <stdio.h>

#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            n_failed++;                                                                                      \
            printf("  FAIL %s:%d: ", __FILE__, __LINE__);                                                    \
            printf(__VA_ARGS__);                                                                             \
            printf("\n");                                                                                    \
        }                                                                                                    \
    } while (0)

#endif
