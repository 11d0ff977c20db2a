/* frontiers.c — frontier lists for nf-bench: the ds4-bench sweep rule (shared with nf-ab's ab_frontiers in
 * scripts/ab/lib.sh, which must enumerate the same list) and explicit lists (see frontiers.h). */
#include "bench/frontiers.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "util/error.h"

#define MAX_FRONTIERS 100000 /* a sweep longer than this is a typo (step 1 to a million), not a benchmark */

int nf_bench_sweep(int64_t start, int64_t max, int64_t incr, double mul, int64_t **out) {
    *out = NULL;
    if (start < 1) return nf_fail("frontiers: the first frontier must be >= 1 (got %lld)", (long long)start);
    if (max < start)
        return nf_fail("frontiers: --ctx-max %lld is below --ctx-start %lld", (long long)max, (long long)start);
    if (!isfinite(mul) || mul < 1) return nf_fail("frontiers: --step-mul must be >= 1 (got %g)", mul);
    if (mul == 1 && incr < 1) return nf_fail("frontiers: --step-incr must be >= 1 (got %lld)", (long long)incr);
    int n = 0, cap = 16;
    int64_t *f = nf_xmalloc((size_t)cap * sizeof *f);
    int64_t cur = start;
    for (;;) {
        if (n == MAX_FRONTIERS) {
            free(f);
            return nf_fail("frontiers: the sweep %lld..%lld has more than %d frontiers", (long long)start,
                           (long long)max, MAX_FRONTIERS);
        }
        if (n == cap) f = nf_xrealloc(f, (size_t)(cap *= 2) * sizeof *f);
        f[n++] = cur;
        if (cur >= max) break;
        int64_t next;
        if (mul > 1) {
            double x = ceil((double)cur * mul);
            next = x >= (double)max ? max : (int64_t)x;
            if (next < cur + 1) next = cur + 1;
        } else {
            next = incr > max - cur ? max : cur + incr;
        }
        if (next > max) next = max;
        cur = next;
    }
    *out = f;
    return n;
}

int nf_bench_frontier_list(const char *list, int64_t **out) {
    *out = NULL;
    if (!list || !*list) return nf_fail("frontiers: empty list");
    int n = 0, cap = 16;
    int64_t *f = nf_xmalloc((size_t)cap * sizeof *f);
    const char *p = list;
    for (int item = 1;; item++) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || (*end && *end != ',') || *p == '+' || *p == '-' || *p == ' ') {
            free(f);
            return nf_fail("frontiers: item %d of '%s' is not a positive integer", item, list);
        }
        if (v < 1 || (n > 0 && v <= f[n - 1])) {
            free(f);
            return nf_fail("frontiers: '%s': %lld is %s", list, v,
                           v < 1 ? "not positive" : "not above the previous frontier (the list must ascend)");
        }
        if (n == MAX_FRONTIERS) {
            free(f);
            return nf_fail("frontiers: more than %d frontiers", MAX_FRONTIERS);
        }
        if (n == cap) f = nf_xrealloc(f, (size_t)(cap *= 2) * sizeof *f);
        f[n++] = v;
        if (!*end) break;
        p = end + 1;
    }
    *out = f;
    return n;
}
