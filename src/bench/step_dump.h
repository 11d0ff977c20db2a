/* step_dump.h — nf-bench --dump-steps: one JSON-lines block per frontier with the prompt ids and, per probe step,
 * the chosen token and the step's top-K logits (docs/ab.md "The step-dump contract"; nf-ab exact reads it).
 *
 *   {"type":"frontier","ctx":C,"prompt_tokens":C,"gen_tokens":G,"topk":K,"prompt_ids":[...],"prompt_fnv64":"..."}
 *   {"type":"step","ctx":C,"step":s,"token":id,"topk":[[id,logit],...]}      s = 0..G-1
 *   {"type":"end","ctx":C,"steps":G,"gen_ids_fnv64":"..."}
 *
 * Logits are printed with %.9g (enough digits to round-trip a float); non-finite values as the strings "nan",
 * "inf", "-inf". Each record is flushed whole, so a crash leaves a dump without its "end" line (truncated). */
#ifndef NF_BENCH_STEP_DUMP_H
#define NF_BENCH_STEP_DUMP_H

#include <stdint.h>
#include <stdio.h>

/* Each returns 0, or -1 with nf_error() on a write error. */
int nf_step_dump_frontier(FILE *f, int64_t ctx, const int32_t *prompt_ids, int64_t n_prompt, int gen, int topk);
int nf_step_dump_step(FILE *f, int64_t ctx, int step, int32_t token, const int32_t *ids, const float *vals, int k);
int nf_step_dump_end(FILE *f, int64_t ctx, int steps, uint64_t gen_hash);

#endif
