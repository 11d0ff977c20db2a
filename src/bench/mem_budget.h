/* mem_budget.h — what an nf-bench run will hold in memory, computed from the model's shapes before anything is
 * allocated, so a sweep that cannot fit is refused with the numbers (exit 2) instead of failing, or being killed,
 * after minutes of work.
 *
 * Counted: the weights (a synthetic model's tensors in its recipe, or the GGUF file's size on a GPU; a GGUF on the
 * CPU is mapped, not counted); the sequence state at the capacity (state bytes in use at `cap` tokens,
 * byte_model.h); with the prefill method the snapshot of the state at the last frontier (snapshot/restore around
 * the probe; --fill synthetic uses a checkpoint of the fixed-size part instead, not counted); and a headroom for
 * activations and kernel scratch (on a GPU 2 GiB; the read probe's 2 GiB buffer is freed before the state exists). */
#ifndef NF_BENCH_MEM_BUDGET_H
#define NF_BENCH_MEM_BUDGET_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

typedef struct {
    double weights, state, snapshot, headroom;
    double total;
} nf_bench_mem;

/* The budget of a run: state at cap tokens, a snapshot at snapshot_tokens (0: none). */
void nf_bench_mem_plan(const nf_hparams *hp, double weight_bytes, int64_t cap, int64_t snapshot_tokens,
                       double headroom, nf_bench_mem *out);

/* 0 when m->total <= available; else -1 and a one-line refusal in msg naming every part, cap and `where` (e.g.
 * "free on the GPU"). */
int nf_bench_mem_check(const nf_bench_mem *m, int64_t cap, double available, const char *where, char *msg, size_t n);

#endif
