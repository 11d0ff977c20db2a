/* bw_probe.c — the CPU memory read probe (bw_probe.h): threads sum disjoint slices of one large buffer with
 * 64-bit loads in four independent accumulators (enough memory-level parallelism for the hardware prefetchers),
 * each pass timed with CLOCK_MONOTONIC from thread start to the last join. The sums are kept so the loads cannot
 * be optimised away. */
#include "bench/bw_probe.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/error.h"

typedef struct {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} slice;

static void *read_slice(void *arg) {
    slice *s = arg;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    size_t i = 0;
    for (; i + 4 <= s->n; i += 4) {
        a += s->p[i];
        b ^= s->p[i + 1];
        c += s->p[i + 2];
        d ^= s->p[i + 3];
    }
    for (; i < s->n; i++) a += s->p[i];
    s->sum = a + b + c + d;
    return NULL;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int nf_cpu_read_bandwidth(size_t bytes, int threads, int passes, nf_bw_probe *out) {
    memset(out, 0, sizeof *out);
    if (threads <= 0) {
        const char *env = getenv("NF_THREADS");
        threads = env && atoi(env) > 0 ? atoi(env) : (int)sysconf(_SC_NPROCESSORS_ONLN);
        if (threads <= 0) threads = 1;
    }
    if (threads > 256) threads = 256;
    if (passes < 1) passes = 1;
    bytes &= ~(size_t)4095;
    if (bytes < (size_t)threads * 4096) return nf_fail("bandwidth probe: %zu bytes is too small", bytes);
    uint64_t *buf = aligned_alloc(4096, bytes);
    if (!buf) return nf_fail("bandwidth probe: cannot allocate %zu MiB", bytes >> 20);
    const size_t words = bytes / sizeof *buf;
    for (size_t i = 0; i < words; i++) buf[i] = i * 0x9e3779b97f4a7c15ull; /* real pages, non-zero data */

    pthread_t tid[256];
    slice sl[256];
    double *gbps = nf_xmalloc((size_t)passes * sizeof *gbps);
    volatile uint64_t keep = 0;
    for (int pass = -1; pass < passes; pass++) { /* pass -1: untimed (thread stacks, TLB) */
        const size_t per = words / (size_t)threads;
        double t0 = now();
        int started = 0;
        for (int t = 0; t < threads; t++) {
            sl[t].p = buf + (size_t)t * per;
            sl[t].n = t == threads - 1 ? words - (size_t)t * per : per;
            if (t == 0) continue; /* the calling thread reads slice 0 */
            if (pthread_create(&tid[t], NULL, read_slice, &sl[t]) != 0) break;
            started = t;
        }
        read_slice(&sl[0]);
        for (int t = 1; t <= started; t++) pthread_join(tid[t], NULL);
        double t1 = now();
        if (started != threads - 1) {
            free(buf);
            free(gbps);
            return nf_fail("bandwidth probe: cannot start %d threads", threads);
        }
        for (int t = 0; t < threads; t++) keep += sl[t].sum;
        if (pass >= 0) gbps[pass] = (double)bytes / (t1 - t0) / 1e9;
    }
    (void)keep;
    free(buf);
    qsort(gbps, (size_t)passes, sizeof *gbps, cmp_double);
    out->gbps = gbps[passes / 2];
    out->best_gbps = gbps[passes - 1];
    out->bytes = bytes;
    out->passes = passes;
    out->threads = threads;
    free(gbps);
    return 0;
}
