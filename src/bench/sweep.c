/* sweep.c — nf-bench's measurement loop: per frontier, the timed incremental prefill, the untimed snapshot, the
 * timed greedy probe (serial, or through the speculative decoder with --draft), the untimed restore, then one CSV
 * row (method in bench.h). With --fill synthetic the frontier is reached by an untimed fill of the caches
 * (model/state_fill.h) and the state is saved by a checkpoint instead of a snapshot (bench.h says why). Clocks are CLOCK_MONOTONIC read after a device-wide sync; the probe adds no
 * synchronisation of its own (each step's logits copy to the host is the backend's, and the argmax needs it). */
#include "bench/sweep.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/byte_model.h"
#include "bench/flop_model.h"
#include "bench/probe.h"
#include "bench/step_dump.h"
#include "model/forward.h"
#include "model/state.h"
#include "model/state_fill.h"
#include "util/error.h"
#ifdef NF_CUDA
#include "cuda/cuda_bench.h"
#endif

static int device_sync(const nf_bench_ctx *c) {
#ifdef NF_CUDA
    for (int d = 0; c->cuda_device >= 0 && d < (c->cuda_devices > 0 ? c->cuda_devices : 1); d++)
        if (nf_cuda_device_sync(c->cuda_device + d) < 0) return -1;
    if (c->cuda_device >= 0) return 0;
#else
    (void)c;
#endif
    return 0;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* now() after everything queued on the device has finished */
static int synced_now(const nf_bench_ctx *c, double *t) {
    if (device_sync(c) < 0) return -1;
    *t = now();
    return 0;
}

int nf_bench_warmup(nf_bench_ctx *c) {
    const nf_bench_opts *o = c->o;
    const nf_hparams *hp = &c->be->model->hp;
    int64_t n = o->warmup;
    if (n <= 0) return 0;
    if (n > c->n_ids) n = c->n_ids;
    if (n > c->cap - 2) n = c->cap - 2;
    if (n < 1) return 0;
    nf_state *st = nf_backend_state_create(c->be, n + 2);
    if (!st) return nf_fail_prefix("warm-up");
    float *logits = nf_xmalloc((size_t)hp->n_vocab * sizeof *logits);
    int rc = nf_prefill(c->be, st, c->ids, n, o->chunk, logits, 0, NULL);
    for (int s = 0; rc == 0 && s < 2; s++) {
        int32_t tok = nf_argmax_excluding(logits, hp->n_vocab, hp->eos_id);
        rc = nf_forward(c->be, st, &tok, 1, logits, 0, NULL);
    }
    if (rc == 0) rc = device_sync(c);
    free(logits);
    nf_state_free(st);
    return rc < 0 ? nf_fail_prefix("warm-up") : 0;
}

typedef struct {
    int32_t *ids;     /* [gen] */
    int32_t *top_ids; /* [gen][k] (dump only) */
    float *top_vals;
    double t_start, t_first, t_end;
} probe_out;

/* G steps of argmax (excluding EOS) -> decode forward, from the logits that follow the prefill. */
static int run_probe(nf_bench_ctx *c, nf_state *st, float *logits, probe_out *p) {
    const nf_hparams *hp = &c->be->model->hp;
    const int G = c->o->gen, K = c->dump ? c->o->dump_topk : 0;
    if (synced_now(c, &p->t_start) < 0) return -1;
    for (int s = 0; s < G; s++) {
        int32_t tok = nf_argmax_excluding(logits, hp->n_vocab, hp->eos_id);
        p->ids[s] = tok;
        if (K) nf_topk_logits(logits, hp->n_vocab, K, p->top_ids + (size_t)s * K, p->top_vals + (size_t)s * K);
        if (nf_forward(c->be, st, &tok, 1, logits, 0, NULL) < 0) return nf_fail_prefix("probe step %d", s);
        if (s == 0 && synced_now(c, &p->t_first) < 0) return -1;
    }
    return synced_now(c, &p->t_end);
}

static int32_t probe_pick(void *user, const float *row) {
    const nf_hparams *hp = user;
    return nf_argmax_excluding(row, hp->n_vocab, hp->eos_id);
}

static bool probe_is_eos(void *user, int32_t id) { return id == ((const nf_hparams *)user)->eos_id; }

/* The same G greedy tokens through the speculative decoder: each feed commits the picked token plus the drafts the
 * verification accepted (never more than G in all); the deferred tail is flushed inside the timing so the state
 * has consumed all G tokens, as in the serial probe. hist holds the frontier's ids on entry (n_hist of them) and
 * has room for G more. *first is the count the first feed committed (the steady rate starts after it). */
static int run_probe_spec(nf_bench_ctx *c, nf_state *st, float *logits, int32_t *hist, size_t n_hist, probe_out *p,
                          int *first) {
    const nf_hparams *hp = &c->be->model->hp;
    const int G = c->o->gen;
    nf_spec_begin(c->spec);
    nf_drafter *d = nf_spec_drafter(c->spec);
    if (!d->observe) { /* bring a stateful drafter (model) up to the frontier untimed: that catch-up is prefill */
        int32_t scratch;
        if (d->draft(d, hist, n_hist, &scratch, 1) < 0) return nf_fail_prefix("drafter catch-up");
    }
    int32_t *extra = nf_xmalloc((size_t)G * sizeof *extra);
    nf_spec_io io = {.be = c->be, .st = st, .hist = hist, .n_hist = n_hist, .logits = logits, .pick = probe_pick,
                     .is_stop = probe_is_eos, .user = (void *)hp};
    int rc = -1, s = 0;
    if (synced_now(c, &p->t_start) < 0) goto out;
    while (s < G) {
        int32_t tok = probe_pick((void *)hp, logits);
        int n_extra = 0;
        io.n_hist = n_hist;
        if (nf_spec_feed(c->spec, &io, tok, G - s - 1, extra, &n_extra) < 0) {
            nf_fail_prefix("speculative probe at step %d", s);
            goto out;
        }
        p->ids[s++] = hist[n_hist++] = tok;
        for (int k = 0; k < n_extra; k++) p->ids[s++] = hist[n_hist++] = extra[k];
        if (*first == 0) {
            *first = s;
            if (synced_now(c, &p->t_first) < 0) goto out;
        }
    }
    io.n_hist = n_hist;
    if (nf_spec_flush(c->spec, &io) < 0) {
        nf_fail_prefix("speculative probe: flush");
        goto out;
    }
    rc = synced_now(c, &p->t_end);
out:
    free(extra);
    return rc;
}

static void spec_columns(nf_spec *sp, nf_bench_row *r) {
    const nf_spec_stats *s = nf_spec_stats_get(sp);
    r->draft = nf_spec_drafter_name(sp);
    r->spec_cycles = s->cycles;
    r->accept_len = s->cycles ? (double)s->accepted / (double)s->cycles : 0;
    r->commits_per_cycle = s->cycles ? (double)s->committed / (double)s->cycles : 0;
    r->draft_tokens = s->drafted;
    r->accepted_tokens = s->accepted;
    r->spec_serial_tokens = s->serial;
    r->spec_parks = s->parks;
}

/* the target forwards of a prefill go through the decoder when its drafter reads hidden states (mtp) */
static int prefill(nf_bench_ctx *c, nf_state *st, const int32_t *ids, int64_t n, float *logits) {
    if (!c->spec || !nf_spec_drafter(c->spec)->observe) return nf_prefill(c->be, st, ids, n, c->o->chunk, logits, 0, NULL);
    const int64_t chunk = c->o->chunk > 0 ? c->o->chunk : n;
    for (int64_t i = 0; i < n; i += chunk) {
        int T = (int)(n - i < chunk ? n - i : chunk);
        if (nf_spec_target_forward(c->spec, c->be, st, ids + i, T, logits, 0) < 0) return -1;
    }
    return 0;
}

/* mean bytes read per timed probe step (steps 1..G-1; step 0 when G = 1), query positions ctx + s */
static void probe_bytes(const nf_hparams *hp, double weights, int64_t ctx, int G, nf_bench_row *r) {
    int first = G > 1 ? 1 : 0;
    double state = 0;
    for (int s = first; s < G; s++) {
        nf_decode_bytes b;
        nf_decode_state_reads(hp, ctx + s, &b);
        state += nf_decode_bytes_total(&b);
    }
    r->weight_bytes = weights;
    r->state_read_bytes = state / (double)(G - first);
    r->bytes_per_token = r->weight_bytes + r->state_read_bytes;
}

/* Untimed, --fill synthetic: bring st from its position to `to` with the fill and run token to-1 through the model
 * for the probe's first logits. At the first frontier a short real prefill gives the fill's scales. */
static int fill_to(nf_bench_ctx *c, nf_state *st, int64_t to, nf_state_fill_scales *sc, float *logits, double *secs) {
    const nf_bench_opts *o = c->o;
    const nf_hparams *hp = &c->be->model->hp;
    double t0, t1;
    if (synced_now(c, &t0) < 0) return -1;
    if (st->pos == 0) {
        int64_t prefix = to - 1 < NF_BENCH_FILL_PREFIX ? to - 1 : NF_BENCH_FILL_PREFIX;
        if (nf_prefill(c->be, st, c->ids, prefix, o->chunk, logits, 0, NULL) < 0)
            return nf_fail_prefix("fill: prefill of the first %lld tokens", (long long)prefix);
        if (nf_state_fill_measure(hp, st, sc) < 0) return -1;
    }
    if (nf_state_fill(st, to - 1, o->seed, sc) < 0) return -1;
    if (nf_forward(c->be, st, c->ids + to - 1, 1, logits, 0, NULL) < 0)
        return nf_fail_prefix("fill: token %lld", (long long)(to - 1));
    if (synced_now(c, &t1) < 0) return -1;
    *secs = t1 - t0;
    return 0;
}

int nf_bench_sweep_frontiers(nf_bench_ctx *c) {
    const nf_bench_opts *o = c->o;
    const nf_model *m = c->be->model;
    const nf_hparams *hp = &m->hp;
    const int G = o->gen, K = c->dump ? o->dump_topk : 0;
    const int filling = o->fill == NF_BENCH_FILL_SYNTHETIC;
    double weights;
    if (nf_decode_weight_bytes(m, &weights) < 0) return -1;

    nf_state *st = nf_backend_state_create(c->be, c->cap);
    if (!st) return nf_fail_prefix("state for %lld tokens", (long long)c->cap);
    if (nf_state_reserve(st, c->cap) < 0) {
        nf_state_free(st);
        return nf_fail_prefix("state for %lld tokens", (long long)c->cap);
    }
    float *logits = nf_xmalloc((size_t)hp->n_vocab * sizeof *logits);
    nf_state_fill_scales *scales = filling ? nf_xmalloc(sizeof *scales) : NULL;
    probe_out p = {.ids = nf_xmalloc((size_t)G * sizeof(int32_t))};
    if (K) {
        p.top_ids = nf_xmalloc((size_t)G * K * sizeof(int32_t));
        p.top_vals = nf_xmalloc((size_t)G * K * sizeof(float));
    }
    int32_t *hist = c->spec ? nf_xmalloc((size_t)c->cap * sizeof *hist) : NULL; /* frontier ids ++ probe ids */
    int rc = -1;
    for (int i = 0; i < o->n_frontiers; i++) {
        const int64_t from = i ? o->frontiers[i - 1] : 0, to = o->frontiers[i];
        double t0 = 0, t1 = 0, fill_s = 0;
        if (filling) {
            if (fill_to(c, st, to, scales, logits, &fill_s) < 0) goto done;
        } else {
            if (synced_now(c, &t0) < 0) goto done;
            if (prefill(c, st, c->ids + from, to - from, logits) < 0) {
                nf_fail_prefix("prefill of [%lld, %lld)", (long long)from, (long long)to);
                goto done;
            }
            if (synced_now(c, &t1) < 0) goto done;
        }

        nf_state *snap = NULL;
        nf_state_ckpt ck = {0};
        if (filling ? nf_state_checkpoint(st, &ck) < 0 : !(snap = nf_state_snapshot(st))) {
            nf_fail_prefix("%s at ctx %lld", filling ? "checkpoint" : "snapshot", (long long)to);
            goto done;
        }
        int first = 0;
        if (hist) memcpy(hist, c->ids, (size_t)to * sizeof *hist);
        int pr = c->spec ? run_probe_spec(c, st, logits, hist, (size_t)to, &p, &first) : run_probe(c, st, logits, &p);
        int rr = pr == 0 ? (filling ? nf_state_rollback(st, &ck) : nf_state_restore(st, snap)) : 0;
        if (filling) nf_state_ckpt_free(&ck);
        nf_state_free(snap);
        if (pr < 0) goto done;
        if (rr < 0) {
            nf_fail_prefix("restore at ctx %lld", (long long)to);
            goto done;
        }

        nf_bench_row r;
        memset(&r, 0, sizeof r);
        r.ctx = to;
        r.fill = o->fill;
        r.prefill_tokens = to - from;
        r.prefill_s = t1 - t0;
        r.prefill_tps = filling ? 0 : (double)r.prefill_tokens / r.prefill_s;
        r.gen_tokens = G;
        r.gen_first_ms = (p.t_first - p.t_start) * 1e3;
        if (!c->spec) r.gen_tps = G > 1 ? (double)(G - 1) / (p.t_end - p.t_first) : 1.0 / (p.t_first - p.t_start);
        else r.gen_tps = first < G ? (double)(G - first) / (p.t_end - p.t_first) : (double)G / (p.t_end - p.t_start);
        r.gen_all_tps = (double)G / (p.t_end - p.t_start);
        r.state_bytes = nf_state_bytes_at(hp, to);
        probe_bytes(hp, weights, to, G, &r);
        r.decode_gbps = r.bytes_per_token * r.gen_tps / 1e9;
        r.probe_gbps = c->probe_gbps;
        r.prefill_tflops = r.tc_ceiling_tflops = r.prefill_ceiling_fraction = NAN;
        if (c->tc_tflops > 0) {
            nf_prefill_flops fl;
            r.tc_ceiling_tflops = c->tc_tflops;
            if (!filling && nf_prefill_flops_span(hp, from, to, &fl) == 0) {
                r.prefill_tflops = nf_prefill_flops_total(&fl) / r.prefill_s / 1e12;
                r.prefill_ceiling_fraction = r.prefill_tflops / c->tc_tflops;
            }
        }
        r.bw_fraction = c->probe_gbps > 0 ? r.decode_gbps / c->probe_gbps : 0;
        r.gen_ids_hash = nf_ids_fnv64(NF_FNV64_INIT, p.ids, (size_t)G);
        if (c->spec) spec_columns(c->spec, &r);

        if (c->dump) {
            if (nf_step_dump_frontier(c->dump, to, c->ids, to, G, K) < 0) goto done;
            for (int s = 0; s < G; s++)
                if (nf_step_dump_step(c->dump, to, s, p.ids[s], p.top_ids + (size_t)s * K, p.top_vals + (size_t)s * K,
                                      K) < 0)
                    goto done;
            if (nf_step_dump_end(c->dump, to, G, r.gen_ids_hash) < 0) goto done;
        }
        nf_bench_csv_row(c->csv, &r);
        if (ferror(c->csv)) {
            nf_fail("CSV: write failed");
            goto done;
        }
        if (c->spec) {
            char line[1024];
            nf_spec_stats_line(c->spec, line, sizeof line);
            fprintf(stderr, "nf-bench: ctx %lld: %s\n", (long long)to, line);
        }
        char pre[160];
        if (filling) snprintf(pre, sizeof pre, "state filled, not prefilled (synthetic, untimed: %.3f s)", fill_s);
        else if (isfinite(r.prefill_tflops))
            snprintf(pre, sizeof pre, "prefill %lld tokens in %.3f s (%.1f t/s, %.1f TFLOPS = %.3f of the GEMM ceiling)",
                     (long long)r.prefill_tokens, r.prefill_s, r.prefill_tps, r.prefill_tflops,
                     r.prefill_ceiling_fraction);
        else snprintf(pre, sizeof pre, "prefill %lld tokens in %.3f s (%.1f t/s)", (long long)r.prefill_tokens,
                      r.prefill_s, r.prefill_tps);
        fprintf(stderr,
                "nf-bench: ctx %lld: %s; decode %d tokens %.2f t/s (first %.1f ms), "
                "%.1f MB/token, %.1f GB/s = %.3f of the probe; ids %016llx\n",
                (long long)to, pre, G, r.gen_tps, r.gen_first_ms, r.bytes_per_token / 1e6, r.decode_gbps,
                r.bw_fraction, (unsigned long long)r.gen_ids_hash);
    }
    rc = 0;
done:
    free(hist);
    free(logits);
    free(scales);
    free(p.ids);
    free(p.top_ids);
    free(p.top_vals);
    nf_state_free(st);
    return rc;
}
