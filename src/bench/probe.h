/* probe.h — the greedy decode probe of nf-bench and what it reports.
 *
 * At each frontier the probe runs exactly G steps of eval -> argmax: step s picks the argmax of the current
 * logits excluding the model's EOS id (so every row decodes the same count) and feeds it back through one
 * decode forward. No sampler, no speculative path: the ids are a pure function of the model, the state and the
 * backend's arithmetic, which makes their hash (gen_ids_hash) an exactness witness on every speed row.
 *
 * Hash: FNV-1a 64 over the ids as 4-byte little-endian unsigned integers (offset basis 0xcbf29ce484222325,
 * prime 0x100000001b3), printed as 16 lowercase hex digits — the function nf-ab's exact.py computes. */
#ifndef NF_BENCH_PROBE_H
#define NF_BENCH_PROBE_H

#include <stddef.h>
#include <stdint.h>

#define NF_FNV64_INIT 0xcbf29ce484222325ull

/* The id with the largest logit among [0, n) except `exclude` (pass -1 to exclude nothing); ties go to the
 * lower id; NaN never wins unless every candidate is NaN (then the lowest candidate id). */
int32_t nf_argmax_excluding(const float *logits, int32_t n, int32_t exclude);

/* The k largest logits of [0, n) as ids[k] and vals[k], descending, ties by lower id, NaN last. k <= n. */
void nf_topk_logits(const float *logits, int32_t n, int k, int32_t *ids, float *vals);

/* FNV-1a 64 of ids as little-endian uint32, continuing from h (start with NF_FNV64_INIT). */
uint64_t nf_ids_fnv64(uint64_t h, const int32_t *ids, size_t n);

#endif
