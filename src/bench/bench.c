/* bench.c — nf_bench_run: everything around the measurement loop (sweep.c). It refuses bad inputs before any
 * measurement (capacity, prompt length, unreadable files, a backend not compiled in), opens the model (a GGUF or
 * a synthetic spec), the speculative decoder with --draft, and the backend, writes the log header (build, host,
 * device, driver, model, sequence, sweep, routes), measures the read-bandwidth probe, runs the warm-up and the
 * sweep, and cleans up. */
#include "bench/bench.h"

#include <errno.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bw_probe.h"
#include "bench/flop_model.h"
#include "bench/mem_budget.h"
#include "bench/byte_model.h"
#include "bench/run_env.h"
#include "bench/stages.h"
#include "bench/sweep.h"
#include "bench/token_seq.h"
#include "cpu/backend_cpu.h"
#include "formats/formats.h"
#include "model/layout.h"
#include "model/model.h"
#include "model/recipe.h"
#include "model/synth.h"
#include "text/tokenizer.h"
#include "util/error.h"
#ifdef NF_CUDA
#include "cuda/backend_cuda.h"
#include "cuda/cuda_bench.h"
#endif


#define REFUSED 2
#define FAILED 1

static int say(int code, const char *what) {
    fprintf(stderr, "%s: %s: %s\n", nf_progname, code == REFUSED ? "refused" : "error", what);
    return code;
}

static void describe_model(const nf_model *m, const nf_bench_opts *o, char *buf, size_t n) {
    const nf_hparams *hp = &m->hp;
    double w = 0;
    if (nf_decode_weight_bytes(m, &w) < 0) w = 0;
    char src[512];
    if (o->synthetic) snprintf(src, sizeof src, "synthetic %s (seed %llu)", o->synthetic, (unsigned long long)o->seed);
    else snprintf(src, sizeof src, "%s", o->model_path);
    snprintf(buf, n, "%s: %d layers, n_embd %d, vocab %d, context %d, %d/%d experts, %.4f GB of weights read per "
             "decode token", src, hp->n_layer, hp->n_embd, hp->n_vocab, hp->n_ctx_train, hp->n_expert_used,
             hp->n_expert, w / 1e9);
}

/* Bytes of every tensor of a synthetic model in recipe r (what NF_SYNTH_HOST puts in host memory). */
static double synth_bytes(const nf_hparams *hp, const nf_recipe *r) {
    int n;
    nf_layout_tensor *lt = nf_layout_tensors_alloc(hp, &n);
    if (!lt) return -1;
    double total = 0;
    for (int i = 0; i < n; i++)
        total += (double)nf_row_bytes(nf_recipe_type(r, &lt[i], NULL), lt[i].ne[0]) * (double)lt[i].ne[1] *
                 (double)lt[i].ne[2] * (double)lt[i].ne[3];
    free(lt);
    return total;
}

/* MemAvailable of /proc/meminfo in bytes (0 when unknown). */
static double host_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    double kib = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1) break;
    fclose(f);
    return kib * 1024;
}

/* The speculative decoder of --draft (NULL with nf_fail()): the drafter is made here so a bad drafter is refused
 * before any measurement. */
static nf_spec *make_decoder(const nf_bench_opts *o, const nf_model *m) {
    nf_drafter *d = nf_drafter_from_spec(o->draft, m, o->n_threads);
    if (!d) return NULL;
    if (d->observe && o->n_frontiers > 1) {
        nf_drafter_free(d);
        nf_fail("--draft %s follows the target's hidden states, and its cache cannot be restored with the target's "
                "snapshot: give one frontier per process", o->draft);
        return NULL;
    }
    return nf_spec_new(d, &o->spec);
}

static int load_sequence(const nf_bench_opts *o, const nf_model *m, const nf_hparams *hp, int64_t need,
                         nf_token_seq *seq, char *desc, size_t n) {
    if (o->prompt_ids) {
        if (nf_token_seq_ids(o->prompt_ids, hp->n_vocab, seq) < 0) return -1;
        snprintf(desc, n, "ids file %s", o->prompt_ids);
    } else if (o->prompt_text) {
        nf_tokenizer *tok = NULL;
        if (o->tokenizer) tok = nf_tokenizer_load(o->tokenizer);
        else if (m && m->file) tok = nf_tokenizer_from_gguf(m->file);
        else return nf_fail("the model has no tokenizer to read the text prompt %s with: give --tokenizer FILE "
                            "(a GGUF or tokenizer.json), or --prompt-ids FILE, or no prompt for the synthetic "
                            "sequence", o->prompt_text);
        if (!tok) return nf_fail_prefix("tokenizer");
        int r = nf_token_seq_text(tok, o->prompt_text, hp->n_vocab, seq);
        nf_tokenizer_free(tok);
        if (r < 0) return -1;
        snprintf(desc, n, "text %s tokenized with %s", o->prompt_text, o->tokenizer ? o->tokenizer : "the model's tokenizer");
    } else {
        nf_token_seq_synthetic(o->seed, hp->n_vocab, hp->eos_id, need, seq);
        snprintf(desc, n, "synthetic (seed %llu)", (unsigned long long)o->seed);
    }
    if (seq->n < need) {
        int64_t have = seq->n;
        nf_token_seq_free(seq);
        return nf_fail("the prompt holds %lld tokens; the last frontier needs %lld", (long long)have, (long long)need);
    }
    return 0;
}

static nf_backend *open_backend(const nf_bench_opts *o, const nf_model *m, int cuda) {
#ifdef NF_CUDA
    if (cuda) return nf_backend_cuda_create(m, 0);
#else
    (void)cuda;
#endif
    return nf_cpu_backend_create(m, o->n_threads);
}

/* The read probe bw_fraction compares with: one GPU's, or with a pipeline over n_dev > 1 GPUs the sum of each
 * GPU's (the stages stream their weights from their own memories; issue 11 asks for the fraction of the sum) */
static int read_probe(const nf_bench_opts *o, int cuda, int n_dev, nf_bw_probe *bw, char *desc, size_t n) {
#ifdef NF_CUDA
    if (cuda) {
        size_t l2 = nf_cuda_l2_bytes(0);
        size_t bytes = o->probe_bytes > 0 ? (size_t)o->probe_bytes : (size_t)2 << 30;
        if (nf_cuda_read_bandwidth(0, bytes, 21, bw) < 0) return -1;
        int k = snprintf(desc, n, "GPU read probe: %.1f GB/s (median of %d launches, best %.1f) over %zu MiB = %.0fx L2",
                         bw->gbps, bw->passes, bw->best_gbps, bw->bytes >> 20, l2 ? (double)bw->bytes / (double)l2 : 0.0);
        for (int d = 1; d < n_dev; d++) {
            nf_bw_probe b;
            if (nf_cuda_read_bandwidth(d, bytes, 21, &b) < 0) return -1;
            bw->gbps += b.gbps;
            bw->best_gbps += b.best_gbps;
            if (k > 0 && (size_t)k < n)
                k += snprintf(desc + k, n - (size_t)k, "%s device %d %.1f GB/s", d == 1 ? ";" : ",", d, b.gbps);
        }
        if (n_dev > 1 && k > 0 && (size_t)k < n)
            snprintf(desc + k, n - (size_t)k, "; bw_fraction against their sum, %.1f GB/s", bw->gbps);
        return 0;
    }
#else
    (void)cuda;
    (void)n_dev;
#endif
    size_t bytes = o->probe_bytes > 0 ? (size_t)o->probe_bytes : (size_t)256 << 20;
    if (nf_cpu_read_bandwidth(bytes, o->n_threads, 5, bw) < 0) return -1;
    snprintf(desc, n, "CPU read probe: %.2f GB/s (median of %d passes, best %.2f) over %zu MiB, %d threads", bw->gbps,
             bw->passes, bw->best_gbps, bw->bytes >> 20, bw->threads);
    return 0;
}

static const char *env_or(const char *name, const char *dflt) {
    const char *v = getenv(name);
    return v ? v : dflt;
}

/* the prefill chunk: the one asked for, else what the backend asks for (the CUDA backend's 16384, the chunk nf and
 * nf-server prefill with there), else 512 (the CPU figures of earlier runs); *why says which, for the log */
#define NF_BENCH_DEFAULT_CHUNK 512
static int bench_chunk(int asked, const nf_backend *be, const char **why) {
    *why = asked > 0 ? "" : be->prefill_chunk > 0 ? " (the backend's preference)" : " (default)";
    return asked > 0 ? asked : be->prefill_chunk > 0 ? be->prefill_chunk : NF_BENCH_DEFAULT_CHUNK;
}

int nf_bench_run(const nf_bench_opts *opts) {
    char msg[1024];
    nf_bench_opts eff = *opts; /* opts with the chunk resolved once the backend is open */
    const nf_bench_opts *o = &eff;
    const int cuda = !strcmp(o->backend, "cuda");
    if (!cuda && strcmp(o->backend, "cpu")) {
        snprintf(msg, sizeof msg, "unknown backend '%s' (cpu or cuda)", o->backend);
        return say(REFUSED, msg);
    }
#ifndef NF_CUDA
    if (cuda) return say(REFUSED, "this build has no CUDA backend; build with `make cuda` and run build/cuda/nf-bench");
#endif
    if (!o->model_path == !o->synthetic) return say(REFUSED, "give exactly one of -m MODEL.gguf and --synthetic SPEC");
    const int n_stages = nf_split_args_stages(&o->split);
    if (n_stages > 1 && o->draft) return say(REFUSED, "--gpus/--split: a pipeline with --draft is not supported yet");
    if (o->n_frontiers < 1 || o->gen < 1) return say(REFUSED, "no frontiers or no probe steps");

    /* the model's hyperparameters first: every refusal below needs them, none needs the weights */
    nf_model *m = NULL;
    nf_hparams hp;
    const nf_recipe *recipe = NULL;
    if (o->model_path) {
        m = nf_model_load(o->model_path);
        if (!m) return say(REFUSED, nf_error());
        hp = m->hp;
    } else {
        if (nf_synth_spec_parse(o->synthetic, &hp, &recipe) < 0) return say(REFUSED, nf_error());
    }

    nf_spec *spec = NULL;
    if (m && o->draft && !(spec = make_decoder(o, m))) {
        nf_model_free(m);
        return say(REFUSED, nf_error());
    }

    const int64_t last = o->frontiers[o->n_frontiers - 1];
    const int64_t cap = o->ctx > 0 ? o->ctx : last + o->gen;
    nf_token_seq seq = {0};
    nf_backend *be = NULL;
    nf_bench_stages stages;
    memset(&stages, 0, sizeof stages);
    FILE *csv = NULL, *dump = NULL;
    int rc = REFUSED;
    if (last + o->gen > cap) {
        snprintf(msg, sizeof msg, "frontier %lld plus %d probe tokens needs %lld positions; --ctx is %lld",
                 (long long)last, o->gen, (long long)(last + o->gen), (long long)cap);
        say(REFUSED, msg);
        goto out;
    }
    const int kpool = hp.idx_kpool > 0 ? hp.idx_kpool : 1;
    if (o->fill == NF_BENCH_FILL_SYNTHETIC && o->frontiers[0] <= kpool) {
        snprintf(msg, sizeof msg, "--fill synthetic measures its scales on a real prefill of at least one indexer pool "
                 "(%d tokens) before frontier 1; frontier 1 is %lld (give at least %d)", kpool,
                 (long long)o->frontiers[0], kpool + 1);
        say(REFUSED, msg);
        goto out;
    }
    if (cap > hp.n_ctx_train) {
        snprintf(msg, sizeof msg, "%lld positions (frontier %lld + %d probe tokens, or --ctx) exceed the model's context "
                 "length %d", (long long)cap, (long long)last, o->gen, hp.n_ctx_train);
        say(REFUSED, msg);
        goto out;
    }
    /* memory, before anything is made (mem_budget.h): refuse a run that cannot fit rather than fail or be killed
     * partway */
    nf_bench_mem budget;
    double mem_avail = 0;
    const char *mem_where = cuda ? "free on the GPU" : "available in host memory (MemAvailable)";
    {
        double weights = 0;
        if (!m) weights = synth_bytes(&hp, recipe);
        else if (cuda) { /* a GGUF is uploaded whole: its size bounds the weights */
            struct stat sb;
            if (stat(o->model_path, &sb) == 0) weights = (double)sb.st_size;
        } /* a GGUF on the CPU is mapped: page cache, not counted */
#ifdef NF_CUDA
        if (cuda) {
            size_t fr = 0, tot = 0;
            if (nf_cuda_mem_info(0, &fr, &tot) < 0) {
                say(REFUSED, nf_error());
                goto out;
            }
            mem_avail = (double)fr;
        }
#endif
        if (!cuda) mem_avail = host_mem_available();
        nf_bench_mem_plan(&hp, weights, cap, o->fill == NF_BENCH_FILL_SYNTHETIC ? 0 : last,
                          cuda ? (double)(2ull << 30) : 0, &budget);
        /* a pipeline is checked per stage and device when its plan is made (stages.h) */
        if (n_stages == 1 && mem_avail > 0 && nf_bench_mem_check(&budget, cap, mem_avail, mem_where, msg, sizeof msg) < 0) {
            if (!m && !cuda) {
                size_t k = strlen(msg);
                snprintf(msg + k, sizeof msg - k,
                         " (--backend cuda makes the large tensors of synthetic %s on the GPU)", o->synthetic);
            }
            say(REFUSED, msg);
            goto out;
        }
    }
    char seq_desc[512];
    if (load_sequence(o, m, &hp, last, &seq, seq_desc, sizeof seq_desc) < 0) {
        say(REFUSED, nf_error());
        goto out;
    }
    if (o->csv_path && !(csv = fopen(o->csv_path, "w"))) {
        snprintf(msg, sizeof msg, "--csv %s: %s", o->csv_path, strerror(errno));
        say(REFUSED, msg);
        goto out;
    }
    if (o->dump_path && !(dump = fopen(o->dump_path, "w"))) {
        snprintf(msg, sizeof msg, "--dump-steps %s: %s", o->dump_path, strerror(errno));
        say(REFUSED, msg);
        goto out;
    }
    rc = FAILED;

    char line[1024];
    fprintf(stderr, "nf-bench: build %s\n", nf_run_env_build());
    nf_run_env_cpu(line, sizeof line);
    fprintf(stderr, "nf-bench: host %s\n", line);
    nf_run_env_nvidia_driver(line, sizeof line);
    fprintf(stderr, "nf-bench: nvidia driver %s\n", line);

    if (!m) {
        m = nf_synth_model_create(&hp, recipe, o->seed, cuda ? NF_SYNTH_DEVICE : NF_SYNTH_HOST);
        if (!m) {
            say(FAILED, nf_error());
            goto out;
        }
    }

    if (o->draft && !spec && !(spec = make_decoder(o, m))) { /* a synthetic model exists only now */
        say(REFUSED, nf_error());
        rc = REFUSED;
        goto out;
    }

    describe_model(m, o, line, sizeof line);
    fprintf(stderr, "nf-bench: model %s\n", line);
    fprintf(stderr, "nf-bench: memory budget %.2f GB (weights %.2f + state %.2f for %lld tokens + snapshot %.2f + "
            "headroom %.2f) of %.2f GB %s\n", budget.total / 1e9, budget.weights / 1e9, budget.state / 1e9,
            (long long)cap, budget.snapshot / 1e9, budget.headroom / 1e9, mem_avail / 1e9, mem_where);
    fprintf(stderr, "nf-bench: sequence %s: %lld tokens, the first %lld used\n", seq_desc, (long long)seq.n,
            (long long)last);
    fprintf(stderr, "nf-bench: sweep");
    for (int i = 0; i < o->n_frontiers; i++) fprintf(stderr, "%s%lld", i ? "," : " ", (long long)o->frontiers[i]);
    fprintf(stderr, "; probe %d greedy steps (EOS %d excluded); warm-up %d tokens; capacity %lld\n", o->gen,
            hp.eos_id, o->warmup, (long long)cap);
    if (o->fill == NF_BENCH_FILL_SYNTHETIC)
        fprintf(stderr, "nf-bench: fill synthetic: frontiers are reached by filling the caches (untimed) with "
                "pseudo-random rows at the RMS of a real %lld-token prefill, not by prefill; prefill columns empty\n",
                (long long)(o->frontiers[0] - 1 < NF_BENCH_FILL_PREFIX ? o->frontiers[0] - 1 : NF_BENCH_FILL_PREFIX));
    if (spec) {
        const nf_spec_params *sp = nf_spec_params_of(spec);
        fprintf(stderr, "nf-bench: speculative probe: drafter %s, mode %s, K %d, window %d, min_cycles %d, warmup %d, "
                "margin %.3f, backoff %d..%d, defer %s\n", o->draft, nf_spec_mode_name(sp->mode), sp->draft_max,
                sp->window, sp->min_cycles, sp->warmup, sp->margin, sp->backoff_min, sp->backoff_max,
                sp->no_defer ? "off" : "on");
    }

    if (n_stages > 1) {
        int refused = 0;
        if (nf_bench_stages_open(&stages, &o->split, m, cap, cuda, o->n_threads, (double)(2ull << 30), &refused) < 0) {
            rc = say(refused ? REFUSED : FAILED, nf_error());
            goto out;
        }
        be = stages.be;
    } else {
        be = open_backend(o, m, cuda);
    }
    if (!be) {
        say(FAILED, nf_error());
        goto out;
    }
    const char *chunk_why;
    eff.chunk = bench_chunk(opts->chunk, be, &chunk_why);
    fprintf(stderr, "nf-bench: prefill chunk %d%s\n", o->chunk, chunk_why);
#ifdef NF_CUDA
    if (cuda) {
        if (nf_cuda_describe(0, line, sizeof line) < 0) {
            say(FAILED, nf_error());
            goto out;
        }
        fprintf(stderr, "nf-bench: device %s\n", line);
    }
#endif
    if (!cuda) {
        nf_run_env_cpu(line, sizeof line);
        fprintf(stderr, "nf-bench: device cpu: %s, backend threads %s\n", line,
                o->n_threads > 0 ? "as -t" : "NF_THREADS or all online CPUs");
    }
    fprintf(stderr, "nf-bench: routes: backend %s; argmax on the host over each step's logits; NF_CUDA_QDOT=%s "
            "NF_CUDA_SYNC=%s NF_CUDA_GRAPH=%s\n", be->name, env_or("NF_CUDA_QDOT", "(unset)"), env_or("NF_CUDA_SYNC", "(unset)"),
            env_or("NF_CUDA_GRAPH", "(unset)"));

    nf_bench_ctx c = {.o = o, .be = be, .cuda_device = cuda ? 0 : -1, .cuda_devices = stages.n_devices, .ids = seq.ids, .n_ids = seq.n, .cap = cap,
                      .csv = csv ? csv : stdout, .dump = dump, .spec = spec};
    if (nf_bench_warmup(&c) < 0) {
        say(FAILED, nf_error());
        goto out;
    }
    nf_bw_probe bw;
    if (read_probe(o, cuda, stages.n_devices, &bw, line, sizeof line) < 0) {
        say(FAILED, nf_error());
        goto out;
    }
    fprintf(stderr, "nf-bench: %s\n", line);
    c.probe_gbps = bw.gbps;
#ifdef NF_CUDA
    if (cuda) { /* the tensor-core ceiling prefill_ceiling_fraction compares with (cuda_bench.h) */
        double tc_best = 0;
        if (nf_cuda_gemm_ceiling(0, 8192, 9, &c.tc_tflops, &tc_best) < 0) {
            say(FAILED, nf_error());
            goto out;
        }
        fprintf(stderr, "nf-bench: GEMM ceiling: %.1f TFLOPS (median of 9 calls, best %.1f): the project's bf16 "
                "tensor-core GEMM (cuda_gemm.cu) on 8192x8192 bf16 weights x 8192 vectors\n", c.tc_tflops, tc_best);
        /* a pipeline's stages overlap in a chunked prefill: its ceiling is the sum of its GPUs' */
        for (int d = 1; d < stages.n_devices; d++) {
            double t = 0, tb = 0;
            if (nf_cuda_gemm_ceiling(d, 8192, 9, &t, &tb) < 0) {
                say(FAILED, nf_error());
                goto out;
            }
            c.tc_tflops += t;
            fprintf(stderr, "nf-bench: GEMM ceiling of device %d: %.1f TFLOPS; prefill_ceiling_fraction against the "
                    "sum, %.1f TFLOPS\n", d, t, c.tc_tflops);
        }
    }
#endif
    {
        double params = 0;
        if (nf_active_matrix_params(&hp, &params) == 0)
            fprintf(stderr, "nf-bench: prefill FLOPs/token = 2 x %.4g active matrix parameters + attention, indexer "
                    "and KDA work at the depth (docs/performance.md)\n", params);
    }

    nf_bench_csv_header(c.csv);
    if (nf_bench_sweep_frontiers(&c) < 0) {
        say(FAILED, nf_error());
        goto out;
    }
#ifdef NF_CUDA
    /* what a larger prefill chunk costs in memory (one backend without stages: device 0) */
    for (int d = 0; cuda && d < (stages.n_devices > 0 ? stages.n_devices : 1); d++) {
        size_t used = 0, reserved = 0;
        if (nf_cuda_pool_peak(d, &used, &reserved) < 0)
            fprintf(stderr, "nf-bench: device %d memory pool peak: %s\n", d, nf_error());
        else
            fprintf(stderr, "nf-bench: device %d memory pool peak: %.2f GB used, %.2f GB reserved (activations and "
                    "scratch, prefill chunk %d)\n", d, used / 1e9, reserved / 1e9, o->chunk);
    }
#endif
    rc = 0;
out:
    if (csv && fclose(csv) != 0 && rc == 0) rc = say(FAILED, "--csv: write failed");
    if (dump && fclose(dump) != 0 && rc == 0) rc = say(FAILED, "--dump-steps: write failed");
    nf_spec_free(spec);
    if (stages.be) nf_bench_stages_close(&stages);
    else nf_backend_free(be);
    nf_token_seq_free(&seq);
    nf_model_free(m);
    return rc;
}
