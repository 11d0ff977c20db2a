/* gpu_rand.h — seeded pseudo-random test data for the GPU test files (xorshift64, uniform in (0, 1), Box-Muller
 * normal). Each including file gets its own stream seeded with GPU_RAND_SEED, defined before the include, so one
 * file's draws never shift another's data and every file keeps the data it was written with. */
#ifndef NF_TESTS_GPU_RAND_H
#define NF_TESTS_GPU_RAND_H

#include <math.h>
#include <stdint.h>

#ifndef GPU_RAND_SEED
#error "define GPU_RAND_SEED before including gpu_rand.h"
#endif

static uint64_t rng = GPU_RAND_SEED;
static inline uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static inline double uniform(void) { return ((rnd() >> 8) + 0.5) / 16777216.0; }
static inline float gauss(void) { return (float)(sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform())); }

#endif
