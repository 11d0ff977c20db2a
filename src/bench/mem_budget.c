/* mem_budget.c — nf-bench's memory budget before any allocation (what is counted and why: mem_budget.h). */
#include "bench/mem_budget.h"

#include <stdio.h>

#include "bench/byte_model.h"

void nf_bench_mem_plan(const nf_hparams *hp, double weight_bytes, int64_t cap, int64_t snapshot_tokens,
                       double headroom, nf_bench_mem *out) {
    out->weights = weight_bytes;
    out->state = nf_state_bytes_at(hp, cap);
    out->snapshot = snapshot_tokens > 0 ? nf_state_bytes_at(hp, snapshot_tokens) : 0;
    out->headroom = headroom;
    out->total = out->weights + out->state + out->snapshot + out->headroom;
}

int nf_bench_mem_check(const nf_bench_mem *m, int64_t cap, double available, const char *where, char *msg, size_t n) {
    if (m->total <= available) return 0;
    char snap[96] = "";
    if (m->snapshot > 0)
        snprintf(snap, sizeof snap, " + %.2f GB snapshot at the last frontier (--fill synthetic needs none)",
                 m->snapshot / 1e9);
    snprintf(msg, n, "the run needs %.2f GB: %.2f GB weights + %.2f GB state for %lld tokens (%.1f KiB/token)%s + "
             "%.2f GB headroom; %.2f GB are %s", m->total / 1e9, m->weights / 1e9, m->state / 1e9, (long long)cap,
             cap > 0 ? m->state / (double)cap / 1024.0 : 0.0, snap, m->headroom / 1e9, available / 1e9, where);
    return -1;
}
