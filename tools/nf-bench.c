/* nf-bench — prefill and decode speed of one model on one backend over a sweep of context depths, as a CSV that
 * nf-ab consumes (docs/ab.md "The bench contract"; method in src/bench/bench.h, byte model in docs/performance.md).
 *
 * Thin: flags -> nf_bench_opts -> nf_bench_run. Flag names follow ds4-bench where nf-ab uses them (--prompt-file,
 * --model, --ctx-start, --ctx-max, --step-incr, --step-mul, --gen-tokens, --csv, --dump-steps, --dump-topk) with
 * shorter aliases. Exit 2 for anything refused before a measurement (an unknown flag included: a harness must
 * not guess capabilities from --help), 1 for a failure during the run. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/split_args.h"
#include "bench/bench.h"
#include "bench/frontiers.h"
#include "engine/spec.h"
#include "util/error.h"

static void usage(FILE *o) {
    fprintf(o,
"usage: nf-bench (-m MODEL.gguf | --synthetic PRESET:RECIPE [--seed N]) [options]\n"
"\n"
"Walks one token sequence to ascending context frontiers: at each frontier only the new interval is prefilled\n"
"(timed), the state is snapshotted, a greedy probe of --gen steps runs (argmax excluding EOS, timed), and the\n"
"state is restored. One CSV row per frontier:\n"
"  ctx,prefill_tokens,prefill_tps,gen_tokens,gen_tps,state_bytes,bytes_per_token,decode_gbps,bw_fraction,\n"
"  gen_ids_hash,gen_first_ms,gen_all_tps,probe_gbps,weight_bytes,state_read_bytes,prefill_s,\n"
"  draft,spec_cycles,accept_len,commits_per_cycle,draft_tokens,accepted_tokens,spec_serial_tokens,spec_parks,\n"
"  fill,prefill_tflops,tc_ceiling_tflops,prefill_ceiling_fraction\n"
"gen_tps excludes the first probe step; bytes_per_token is the byte model of docs/performance.md;\n"
"bw_fraction compares decode_gbps with a read-bandwidth probe run in this process on the same device;\n"
"gen_ids_hash is FNV-1a 64 of the probe's ids (docs/ab.md). prefill_tflops counts the FLOP model of\n"
"docs/performance.md; tc_ceiling_tflops is the project's bf16 GEMM on a 8192^3 problem measured in this process\n"
"(GPU only; empty on the CPU). The log (build, device, driver) goes to stderr.\n"
"\n"
"model and backend:\n"
"  -m, --model FILE         GGUF model\n"
"      --synthetic P:R      synthetic model in memory, no file: preset tiny|glm53, recipe f32|bf16|q8|q4|q2\n"
"                           (e.g. glm53:q2; with --backend cuda the large tensors are made on the GPU)\n"
"                           PRESET@N keeps the first N layers: glm53@32:q2 (~70 GB) fits an 80 GB GPU\n"
"      --seed N             seed of the synthetic weights and of the synthetic token sequence (default 1)\n"
"      --backend B          cpu (default) or cuda (CUDA builds: make cuda, build/cuda/nf-bench)\n"
"  -t, --threads N          CPU backend threads (default: NF_THREADS or all online CPUs)\n"
"      --cuda-graphs on|off decode steps as one CUDA graph launch (default off; sets NF_CUDA_GRAPH)\n"
"\n"
"token sequence (default: synthetic ids from --seed, docs/performance.md):\n"
"      --prompt FILE        text, tokenized once as plain text (alias --prompt-file); needs the model's\n"
"                           tokenizer or --tokenizer FILE (GGUF or tokenizer.json)\n"
"      --prompt-ids FILE    whitespace-separated token ids\n"
"\n"
"frontiers (the sequence must hold at least the last one):\n"
"      --frontiers LIST     explicit ascending list, e.g. 2048,4096,8192\n"
"      --ctx-start N        first frontier (default 2048)\n"
"      --ctx-max N          last frontier (default: --ctx-start)\n"
"      --step-mul X         next = ceil(prev * X), at least prev + 1 (default 2: doubling; 1 with --step-incr)\n"
"      --step-incr N        next = prev + N when --step-mul is 1\n"
"      --ctx N              state capacity in tokens (alias --ctx-alloc; default: last frontier + --gen);\n"
"                           a frontier + --gen beyond it or beyond the model's context length is refused\n"
"\n"
"measurement:\n"
"  -n, --gen N              probe steps per frontier (alias --gen-tokens; default 128)\n"
"      --chunk N            prefill tokens per forward call (alias --prefill-chunk; default: the backend's\n"
"                           preference, as nf and nf-server use it: 16384 on CUDA, 512 on the CPU)\n"
"      --warmup N           untimed warm-up: N-token prefill + 2 decode steps on a scratch state\n"
"                           (alias --warmup-tokens; default 16; 0 = none)\n"
"      --probe-mib N        bandwidth probe buffer in MiB (default: 2048 on a GPU, 256 on the CPU)\n"
"      --fill MODE          how the state reaches each frontier: prefill (default; timed) or synthetic: the\n"
"                           caches are filled (untimed) with pseudo-random rows at the RMS of a real prefill of\n"
"                           the first min(frontier 1 - 1, 256) tokens, then the probe is timed as usual; for\n"
"                           decode at depths too long to prefill. Prefill columns empty, fill=synthetic\n"
"\n"
"speculative probe (docs/speculative.md; gen_ids_hash stays the serial probe's):\n"
"      --draft D            decode the probe through the speculative decoder with drafter D: lookup (prompt\n"
"                           n-grams), mtp (the model's MTP block; one frontier per process) or model:FILE\n"
"                           (a draft GGUF with the same vocabulary); adds the columns' values\n"
"      --draft-max K        drafts verified per cycle (default 6)\n"
"      --spec-mode M        serial | conservative (default: speculate while it pays) | speculative (always)\n"
"      --spec-set K=V       any speculative parameter (window, margin, warmup, min_cycles, backoff_min,\n"
"                           backoff_max, no_defer, ...), repeatable\n"
"\n"
"output:\n"
"      --csv FILE           CSV file (default: stdout)\n"
"      --dump-steps FILE    per-step JSON lines: prompt ids, token, top-K logits (docs/ab.md step-dump contract)\n"
"      --dump-topk K        logits per step in the dump (default 20)\n"
"  -h, --help\n"
"\n"
"pipeline (model/pipeline.h; the memory plan is printed at load; not with --draft or --fill synthetic):\n");
    nf_split_args_usage(o, 6, 21);
}

static int refuse(const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "nf-bench: refused: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, " (nf-bench --help)\n");
    exit(2);
}

static long long parse_int(const char *flag, const char *v, long long lo, long long hi) {
    if (!v) refuse("%s needs a value%s", flag, "");
    errno = 0;
    char *end;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || *v == '+' || *v == ' ') refuse("%s: expected an integer, got '%s'", flag, v);
    if (x < lo || x > hi) refuse("%s: '%s' is out of range", flag, v);
    return x;
}

int main(int argc, char **argv) {
    nf_progname = "nf-bench";
    nf_bench_opts o = {.seed = 1, .backend = "cpu", .gen = 128, .chunk = 0, .warmup = 16, .dump_topk = 20,
                       .spec = nf_spec_defaults()};
    nf_split_args_init(&o.split);
    int have_spec_opts = 0;
    const char *frontier_list = NULL;
    long long start = 2048, max = -1, incr = -1;
    double mul = -1;
    int have_sweep = 0, have_topk = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define IS(x) (!strcmp(a, x))
#define TAKE() (v ? (i++, v) : (refuse("%s needs a value%s", a, ""), v))
        if (IS("-h") || IS("--help")) {
            usage(stdout);
            return 0;
        } else if (IS("-m") || IS("--model")) o.model_path = TAKE();
        else if (IS("--synthetic")) o.synthetic = TAKE();
        else if (IS("--seed")) {
            const char *s = TAKE();
            errno = 0;
            char *end;
            o.seed = strtoull(s, &end, 10);
            if (errno || end == s || *end || *s == '-' || *s == '+') refuse("--seed: expected an unsigned integer, got '%s'%s", s, "");
        } else if (IS("--backend")) o.backend = TAKE();
        else if (IS("-t") || IS("--threads")) o.n_threads = (int)parse_int(a, TAKE(), 1, 1024);
        else if (IS("--cuda-graphs")) {
            const char *s = TAKE();
            if (strcmp(s, "on") && strcmp(s, "off")) refuse("--cuda-graphs: expected on or off, got '%s'%s", s, "");
            setenv("NF_CUDA_GRAPH", s, 1); /* read when the CUDA backend is made */
        }
        else if (IS("--prompt") || IS("--prompt-file")) o.prompt_text = TAKE();
        else if (IS("--prompt-ids")) o.prompt_ids = TAKE();
        else if (IS("--tokenizer")) o.tokenizer = TAKE();
        else if (IS("--frontiers")) frontier_list = TAKE();
        else if (IS("--ctx-start")) { start = parse_int(a, TAKE(), 1, 1LL << 40); have_sweep = 1; }
        else if (IS("--ctx-max")) { max = parse_int(a, TAKE(), 1, 1LL << 40); have_sweep = 1; }
        else if (IS("--step-incr")) { incr = parse_int(a, TAKE(), 1, 1LL << 40); have_sweep = 1; }
        else if (IS("--step-mul")) {
            const char *s = TAKE();
            char *end;
            errno = 0;
            mul = strtod(s, &end);
            if (errno || end == s || *end || !isfinite(mul) || mul < 1) refuse("--step-mul: expected a number >= 1, got '%s'%s", s, "");
            have_sweep = 1;
        } else if (IS("--ctx") || IS("--ctx-alloc")) o.ctx = parse_int(a, TAKE(), 1, 1LL << 40);
        else if (IS("-n") || IS("--gen") || IS("--gen-tokens")) o.gen = (int)parse_int(a, TAKE(), 1, 1 << 24);
        else if (IS("--chunk") || IS("--prefill-chunk")) o.chunk = (int)parse_int(a, TAKE(), 1, 1 << 20);
        else if (IS("--warmup") || IS("--warmup-tokens")) o.warmup = (int)parse_int(a, TAKE(), 0, 1 << 20);
        else if (IS("--probe-mib")) o.probe_bytes = parse_int(a, TAKE(), 1, 1 << 20) << 20;
        else if (IS("--fill")) {
            const char *f = TAKE();
            if (!strcmp(f, "prefill")) o.fill = NF_BENCH_FILL_PREFILL;
            else if (!strcmp(f, "synthetic")) o.fill = NF_BENCH_FILL_SYNTHETIC;
            else refuse("--fill: expected prefill or synthetic, got '%s'%s", f, "");
        } else if (IS("--csv")) o.csv_path = TAKE();
        else if (IS("--dump-steps")) o.dump_path = TAKE();
        else if (IS("--dump-topk")) { o.dump_topk = (int)parse_int(a, TAKE(), 1, 1000); have_topk = 1; }
        else if (IS("--draft")) o.draft = TAKE();
        else if (IS("--draft-max")) { o.spec.draft_max = (int)parse_int(a, TAKE(), 1, 32); have_spec_opts = 1; }
        else if (IS("--spec-mode")) {
            const char *s = TAKE();
            if (nf_spec_mode_parse(s, &o.spec.mode) < 0) refuse("--spec-mode: %s%s", nf_error(), "");
            have_spec_opts = 1;
        } else if (IS("--spec-set")) {
            const char *s = TAKE();
            if (nf_spec_params_set(&o.spec, s) < 0) refuse("--spec-set: %s%s", nf_error(), "");
            have_spec_opts = 1;
        } else {
            int r = nf_split_args_take(&o.split, argc, argv, &i);
            if (r < 0) refuse("%s%s", nf_error(), "");
            if (r == 0) refuse("unknown option '%s'%s", a, "");
        }
#undef IS
#undef TAKE
    }
    if (nf_split_args_check(&o.split) < 0) refuse("%s%s", nf_error(), "");
    if (!o.model_path && !o.synthetic) refuse("give a model: -m MODEL.gguf or --synthetic PRESET:RECIPE%s%s", "", "");
    if (o.model_path && o.synthetic) refuse("-m and --synthetic are exclusive%s%s", "", "");
    if (o.prompt_text && o.prompt_ids) refuse("--prompt and --prompt-ids are exclusive%s%s", "", "");
    if (o.tokenizer && !o.prompt_text) refuse("--tokenizer is only used with --prompt FILE%s%s", "", "");
    if (have_topk && !o.dump_path) refuse("--dump-topk needs --dump-steps FILE%s%s", "", "");
    if (have_spec_opts && !o.draft) refuse("--draft-max, --spec-mode and --spec-set need --draft D%s%s", "", "");
    if (o.draft && o.fill == NF_BENCH_FILL_SYNTHETIC)
        refuse("--fill synthetic gives no real history for a drafter; it is not taken with --draft%s%s", "", "");
    if (o.draft && o.dump_path)
        refuse("--dump-steps records the serial eval -> argmax loop (docs/ab.md); it is not taken with --draft%s%s", "", "");
    if (frontier_list && have_sweep) refuse("--frontiers and --ctx-start/--ctx-max/--step-* are exclusive%s%s", "", "");

    int64_t *fr = NULL;
    int n;
    if (frontier_list) n = nf_bench_frontier_list(frontier_list, &fr);
    else {
        if (max < 0) max = start;
        if (mul < 0) mul = incr > 0 ? 1 : 2;
        if (mul == 1 && incr < 0) refuse("--step-mul 1 needs --step-incr N%s%s", "", "");
        n = nf_bench_sweep(start, max, incr, mul, &fr);
    }
    if (n < 0) refuse("%s%s", nf_error(), "");
    o.frontiers = fr;
    o.n_frontiers = n;
    int rc = nf_bench_run(&o);
    free(fr);
    return rc;
}
