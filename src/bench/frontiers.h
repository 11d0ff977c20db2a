/* frontiers.h — the context depths nf-bench measures at.
 *
 * Two ways to name them: an explicit ascending list ("2048,4096,65536"), or ds4-bench's sweep rule, which
 * nf-ab re-computes to check a CSV holds exactly the rows it asked for (docs/ab.md "The bench contract"):
 * start, then prev + incr (mul = 1) or ceil(prev * mul), at least prev + 1 (mul > 1), clamped so that the last
 * frontier is exactly max. */
#ifndef NF_BENCH_FRONTIERS_H
#define NF_BENCH_FRONTIERS_H

#include <stdint.h>

/* The sweep start..max. Returns the number of frontiers written to *out (malloc'ed), or -1 with nf_error()
 * (start < 1, max < start, incr < 1 with mul = 1, mul < 1 or not finite). */
int nf_bench_sweep(int64_t start, int64_t max, int64_t incr, double mul, int64_t **out);

/* A comma-separated list of positive, strictly ascending integers. Returns the count (*out malloc'ed), or -1
 * with nf_error() naming the bad item. */
int nf_bench_frontier_list(const char *list, int64_t **out);

#endif
