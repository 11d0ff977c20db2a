/* bench.h — nf-bench: prefill and decode speed of one model on one backend, swept over context depths.
 *
 * Method (ds4-bench's, shared/spec/ab-protocol.md §1 and §6.1; the CSV and dump contracts are docs/ab.md's):
 *   - one token sequence (token_seq.h) is walked to ascending frontiers F1 < F2 < ... (frontiers.h);
 *   - at each frontier only the new interval [F(i-1), Fi) is prefilled, in chunks, and timed: row 1 is a cold
 *     prefill, later rows time the resume path;
 *   - the state is snapshotted, a greedy probe of G steps runs (argmax excluding EOS, probe.h), and the snapshot
 *     is restored, so the probe's tokens never enter the next interval; snapshot and restore are not timed;
 *   - an untimed warm-up (its own short prefill and two decode steps on a scratch state) runs first, so module
 *     load and first-call allocations do not land in frontier 1;
 *   - clocks are read only after a device-wide sync (CLOCK_MONOTONIC); inside the probe the only
 *     synchronisation is the backend's copy of each step's logits to the host, which the argmax needs.
 * gen_tps excludes the first probe step (it carries lazy initialisation on a GPU); the full-probe rate and the
 * first step's time are extra columns. bytes_per_token (byte_model.h) is averaged over the positions of the
 * timed steps; decode_gbps = bytes_per_token * gen_tps; bw_fraction = decode_gbps / the read probe's GB/s
 * (bw_probe.h), measured in the same process on the same device before the sweep.
 *
 * With a drafter (--draft) the probe decodes through the speculative decoder (engine/spec.h) instead: the same G
 * tokens (greedy acceptance uses the same argmax excluding EOS, so gen_ids_hash equals the serial probe's), timed
 * from the first feed (which may commit several tokens) to the end, deferred tokens flushed inside the timing.
 * A draft model is first brought up to the frontier untimed (its catch-up is prefill work, not decode). A drafter
 * that reads the target's hidden states (mtp) sees the prefill through the decoder and needs one frontier per
 * process (its cache cannot be restored with the target's snapshot).
 *
 * --fill synthetic (NF_BENCH_FILL_SYNTHETIC) reaches each frontier without prefilling it, for decode at depths
 * whose prefill would take too long (300k tokens ~5 min, 1M ~15 min on an H200): the first
 * min(frontier 1 - 1, NF_BENCH_FILL_PREFIX) tokens are prefilled (untimed) and the RMS of every array of that real
 * state is measured; then, at each frontier F, the caches are filled (untimed) with deterministic pseudo-random
 * rows at those RMS up to F - 1 (model/state_fill.h; on a GPU by a kernel), token F - 1 of the sequence runs
 * through the model (untimed) for the probe's first logits, and the probe is timed as above. The state is saved by
 * a checkpoint and rolled back after the probe (state.h; equivalent for a state that only moved forward, and a
 * 1M-token glm53 snapshot would not fit beside the state on one H200). Decode cost depends on the cache sizes and
 * the selection path, not on the values, so gen_tps is decode at depth; the prefill columns are empty and the
 * `fill` column says `synthetic` (`prefill` otherwise). Not with --draft (a drafter needs the real history). */
#ifndef NF_BENCH_BENCH_H
#define NF_BENCH_BENCH_H

#include <stdint.h>
#include <stdio.h>

#include "app/split_args.h"
#include "engine/spec.h"

/* How the state reaches each frontier (header comment). */
typedef enum { NF_BENCH_FILL_PREFILL = 0, NF_BENCH_FILL_SYNTHETIC = 1 } nf_bench_fill;
#define NF_BENCH_FILL_PREFIX 256

typedef struct {
    const char *model_path;     /* GGUF file, or NULL with `synthetic` */
    const char *synthetic;      /* "PRESET:RECIPE" (model/synth.h), or NULL */
    uint64_t seed;              /* synthetic weights and the synthetic token sequence */
    const char *backend;        /* "cpu" or "cuda" */
    int n_threads;              /* CPU backend threads (<= 0: NF_THREADS or all cores) */
    const int64_t *frontiers;   /* ascending */
    int n_frontiers;
    int gen;                    /* probe steps (>= 1) */
    int chunk;                  /* prefill tokens per forward call (0: the backend's preference, else 512) */
    int warmup;                 /* warm-up prefill tokens (0: no warm-up) */
    int64_t ctx;                /* state capacity in tokens (0: last frontier + gen) */
    const char *prompt_text;    /* text file, or NULL */
    const char *prompt_ids;     /* ids file, or NULL (neither: the synthetic sequence) */
    const char *tokenizer;      /* tokenizer for prompt_text when the model has none (GGUF or tokenizer.json) */
    const char *csv_path;       /* NULL: stdout */
    const char *dump_path;      /* --dump-steps, or NULL */
    int dump_topk;
    int64_t probe_bytes;        /* bandwidth probe buffer (0: the default for the backend) */
    const char *draft;          /* --draft lookup|mtp|model:FILE (engine/spec.h), or NULL: the serial probe */
    nf_spec_params spec;        /* the speculative decoder's parameters (with draft) */
    nf_bench_fill fill;
    nf_split_args split;        /* --gpus / --split: more than one stage runs the model as a pipeline (stages.h) */
} nf_bench_opts;

/* One CSV row (csv.c writes the columns, in the contract's order). */
typedef struct {
    int64_t ctx, prefill_tokens;
    double prefill_tps;
    int gen_tokens;
    double gen_tps;             /* steady: steps 1..G-1 (step 0 alone when G = 1) */
    double state_bytes;         /* in use at ctx (byte_model.h nf_state_bytes_at) */
    double bytes_per_token;
    double decode_gbps, bw_fraction;
    uint64_t gen_ids_hash;
    /* extra columns */
    double gen_first_ms;        /* probe step 0 */
    double gen_all_tps;         /* all G steps */
    double probe_gbps;
    double weight_bytes;        /* weights part of bytes_per_token */
    double state_read_bytes;    /* state part of bytes_per_token */
    double prefill_s;
    /* speculative probe columns (--draft; "none" and zeros for the serial probe) */
    const char *draft;
    int64_t spec_cycles;        /* verify forwards */
    double accept_len;          /* accepted drafted tokens per cycle */
    double commits_per_cycle;   /* tokens committed per verify forward (accept_len + 1) */
    int64_t draft_tokens, accepted_tokens;
    int64_t spec_serial_tokens; /* tokens fed without verification (admission said no, or no draft) */
    int64_t spec_parks;         /* times the admission controller parked speculation */
    nf_bench_fill fill;         /* NF_BENCH_FILL_SYNTHETIC: prefill_tokens, prefill_tps and prefill_s are empty */
    /* prefill against the tensor-core ceiling (flop_model.h; NaN = empty: the CPU backend, or a filled row) */
    double prefill_tflops, tc_ceiling_tflops, prefill_ceiling_fraction;
} nf_bench_row;

void nf_bench_csv_header(FILE *f);
void nf_bench_csv_row(FILE *f, const nf_bench_row *r);

/* Run the bench; the log goes to stderr, the CSV to csv_path (or stdout). Returns 0; 2 when the inputs are
 * refused before any measurement (frontier beyond the capacity, prompt too short, unreadable file, backend not
 * compiled in); 1 on a failure during the run. The message is printed to stderr. */
int nf_bench_run(const nf_bench_opts *o);

#endif
