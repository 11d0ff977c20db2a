/* spec.c — the speculative decoder: one verified cycle per call (draft, checkpoint, batched verify, accept,
 * rollback + re-run on a partial accept) and the admission controller (contract and cycle in spec.h; cost
 * model and rules in docs/speculative.md). */
#include "engine/spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/forward.h"
#include "util/error.h"

#define NF_SPEC_LAZY_MAX 8 /* most tokens a partial accept may defer into the next forward */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void nf_drafter_free(nf_drafter *d) {
    if (d && d->destroy) d->destroy(d);
}

const char *nf_spec_mode_name(nf_spec_mode m) {
    switch (m) {
    case NF_SPEC_SERIAL: return "serial";
    case NF_SPEC_CONSERVATIVE: return "conservative";
    case NF_SPEC_SPECULATIVE: return "speculative";
    }
    return "?";
}

int nf_spec_mode_parse(const char *s, nf_spec_mode *out) {
    if (!strcmp(s, "serial")) *out = NF_SPEC_SERIAL;
    else if (!strcmp(s, "conservative")) *out = NF_SPEC_CONSERVATIVE;
    else if (!strcmp(s, "speculative")) *out = NF_SPEC_SPECULATIVE;
    else return nf_fail("spec mode: expected serial, conservative or speculative, got '%s'", s);
    return 0;
}

nf_spec_params nf_spec_defaults(void) {
    nf_spec_params p;
    memset(&p, 0, sizeof p);
    p.mode = NF_SPEC_CONSERVATIVE;
    p.draft_max = 6;
    p.reasoning = false;
    p.window = 16;
    p.min_cycles = 4;
    p.warmup = 3;
    p.margin = 0.02;
    p.backoff_min = 16;
    p.backoff_max = 512;
    p.seed = 0;
    return p;
}

int nf_spec_params_set(nf_spec_params *p, const char *kv) {
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv || !eq[1]) return nf_fail("spec option '%s': expected key=value", kv);
    size_t kl = (size_t)(eq - kv);
    const char *v = eq + 1;
    char *end = NULL;
#define KEY(s) (kl == strlen(s) && !strncmp(kv, s, kl))
    if (KEY("mode")) return nf_spec_mode_parse(v, &p->mode);
    if (KEY("reasoning") || KEY("no_defer")) {
        bool b;
        if (!strcmp(v, "1") || !strcmp(v, "true")) b = true;
        else if (!strcmp(v, "0") || !strcmp(v, "false")) b = false;
        else return nf_fail("spec option %.*s: expected 0/1/true/false, got '%s'", (int)kl, kv, v);
        if (KEY("reasoning")) p->reasoning = b;
        else p->no_defer = b;
        return 0;
    }
    if (KEY("margin")) {
        double d = strtod(v, &end);
        if (*end || !(d > -1 && d < 100)) return nf_fail("spec option margin: bad value '%s'", v);
        p->margin = d;
        return 0;
    }
    if (KEY("seed")) {
        unsigned long long u = strtoull(v, &end, 10);
        if (*end) return nf_fail("spec option seed: bad value '%s'", v);
        p->seed = u;
        return 0;
    }
    long l = strtol(v, &end, 10);
    if (*end || l < 0 || l > 1000000) return nf_fail("spec option %.*s: bad value '%s'", (int)kl, kv, v);
    if (KEY("draft_max")) p->draft_max = (int)l;
    else if (KEY("window")) p->window = (int)l;
    else if (KEY("min_cycles")) p->min_cycles = (int)l;
    else if (KEY("warmup")) p->warmup = (int)l;
    else if (KEY("backoff_min")) p->backoff_min = (int)l;
    else if (KEY("backoff_max")) p->backoff_max = (int)l;
    else return nf_fail("spec option: unknown key '%.*s' (mode, draft_max, reasoning, window, min_cycles, warmup, "
                        "margin, backoff_min, backoff_max, seed, no_defer)", (int)kl, kv);
#undef KEY
    return 0;
}

/* ---- admission controller ------------------------------------------------------------------------------ */

void nf_spec_ctl_init(nf_spec_ctl *c, const nf_spec_params *p) {
    memset(c, 0, sizeof *c);
    c->p = *p;
    if (c->p.window < 1) c->p.window = 1;
    if (c->p.min_cycles < 1) c->p.min_cycles = 1;
    if (c->p.min_cycles > c->p.window) c->p.min_cycles = c->p.window;
    if (c->p.backoff_min < 1) c->p.backoff_min = 1;
    if (c->p.backoff_max < c->p.backoff_min) c->p.backoff_max = c->p.backoff_min;
    c->ser_t = nf_xcalloc((size_t)c->p.window, sizeof *c->ser_t);
    c->cyc_t = nf_xcalloc((size_t)c->p.window, sizeof *c->cyc_t);
    c->cyc_c = nf_xcalloc((size_t)c->p.window, sizeof *c->cyc_c);
    nf_spec_ctl_reset(c);
}

void nf_spec_ctl_free(nf_spec_ctl *c) {
    free(c->ser_t);
    free(c->cyc_t);
    free(c->cyc_c);
    c->ser_t = c->cyc_t = NULL;
    c->cyc_c = NULL;
}

void nf_spec_ctl_reset(nf_spec_ctl *c) {
    c->ser_n = c->ser_i = 0;
    c->cyc_n = c->cyc_i = 0;
    c->since_probe = 0;
    c->park_left = 0;
    c->backoff = c->p.backoff_min;
    c->parks = c->probes = 0;
}

double nf_spec_ctl_rate_serial(const nf_spec_ctl *c) {
    double t = 0;
    for (int i = 0; i < c->ser_n; i++) t += c->ser_t[i];
    return t > 0 ? c->ser_n / t : 0;
}

double nf_spec_ctl_rate_spec(const nf_spec_ctl *c) {
    double t = 0;
    long n = 0;
    for (int i = 0; i < c->cyc_n; i++) t += c->cyc_t[i], n += c->cyc_c[i];
    return t > 0 ? n / t : 0;
}

bool nf_spec_ctl_admit(nf_spec_ctl *c, bool in_reasoning) {
    if (c->p.mode == NF_SPEC_SERIAL) return false;
    if (in_reasoning && !c->p.reasoning) return false;
    if (c->p.mode == NF_SPEC_SPECULATIVE) return true;
    if (c->ser_n < c->p.warmup) return false;  /* measure the serial rate first */
    if (c->park_left > 0) {
        c->park_left--;
        if (c->park_left == 0) { /* the park is over: the next cycles are a fresh probe */
            c->probes++;
            c->cyc_n = c->cyc_i = 0;
            c->since_probe = 0;
        }
        return false;
    }
    return true;
}

void nf_spec_ctl_serial(nf_spec_ctl *c, double seconds) {
    c->ser_t[c->ser_i] = seconds;
    c->ser_i = (c->ser_i + 1) % c->p.window;
    if (c->ser_n < c->p.window) c->ser_n++;
}

void nf_spec_ctl_cycle(nf_spec_ctl *c, double seconds, int committed) {
    c->cyc_t[c->cyc_i] = seconds;
    c->cyc_c[c->cyc_i] = committed;
    c->cyc_i = (c->cyc_i + 1) % c->p.window;
    if (c->cyc_n < c->p.window) c->cyc_n++;
    c->since_probe++;
    if (c->p.mode != NF_SPEC_CONSERVATIVE || c->since_probe < c->p.min_cycles) return;
    double rs = nf_spec_ctl_rate_serial(c), rv = nf_spec_ctl_rate_spec(c);
    if (rs <= 0) return;
    if (rv < rs * (1.0 + c->p.margin)) { /* not paying: park, doubling the park each time in a row */
        c->parks++;
        c->park_left = c->backoff;
        c->backoff = c->backoff * 2 > c->p.backoff_max ? c->p.backoff_max : c->backoff * 2;
        c->since_probe = 0;
    } else if (c->since_probe >= c->p.window) {
        c->backoff = c->p.backoff_min; /* a full window paid: forget earlier failures */
    }
}

/* ---- decoder ------------------------------------------------------------------------------------------- */

struct nf_spec {
    nf_drafter *d;
    nf_spec_params p;
    nf_spec_ctl ctl;
    nf_spec_stats stats;
    nf_rng rng;
    int32_t think_open, think_close;
    int32_t pending;

    int32_t *ctx;          /* hist ++ [tok] for the drafter */
    size_t cap_ctx;
    int32_t *blk;          /* [tok, d1..dn] of the last cycle */
    int n_blk;             /* tokens of blk logically committed (deferred + tok + accepted) */
    int off;               /* deferred tokens at the start of blk */
    int32_t lazy[NF_SPEC_LAZY_MAX]; /* committed tokens not yet fed to the state (deferred re-run) */
    int n_lazy;
    float *vlog;           /* verify logits [(K+1) * n_vocab] */
    size_t cap_vlog;
    float *probs;          /* [n_vocab] (sampled acceptance) */
    size_t cap_probs;
    nf_state_ckpt ck;
    bool have_ck;
    float *hid;            /* target hidden states for observe() */
    size_t cap_hid;
    float *q;              /* [K][n_vocab] drafter distributions (sampled drafts) */
    size_t cap_q;
    nf_sampler *dsmp;      /* the target's sampling parameters without penalties, for the drafter's q */
};

nf_spec *nf_spec_new(nf_drafter *d, const nf_spec_params *p) {
    if (!d) return NULL;
    nf_spec *sp = nf_xcalloc(1, sizeof *sp);
    sp->d = d;
    sp->p = p ? *p : nf_spec_defaults();
    if (sp->p.draft_max < 1) sp->p.draft_max = 1;
    if (sp->p.draft_max > 32) sp->p.draft_max = 32;
    nf_spec_ctl_init(&sp->ctl, &sp->p);
    sp->think_open = sp->think_close = -1;
    sp->pending = -1;
    sp->blk = nf_xmalloc((size_t)(NF_SPEC_LAZY_MAX + sp->p.draft_max + 1) * sizeof *sp->blk);
    nf_rng_seed(&sp->rng, sp->p.seed ^ 0x5bec0dedULL);
    return sp;
}

void nf_spec_free(nf_spec *sp) {
    if (!sp) return;
    nf_drafter_free(sp->d);
    nf_spec_ctl_free(&sp->ctl);
    if (sp->have_ck) nf_state_ckpt_free(&sp->ck);
    free(sp->ctx);
    free(sp->blk);
    free(sp->vlog);
    free(sp->probs);
    free(sp->hid);
    free(sp->q);
    nf_sampler_free(sp->dsmp);
    free(sp);
}

const nf_spec_params *nf_spec_params_of(const nf_spec *sp) { return &sp->p; }
const char *nf_spec_drafter_name(const nf_spec *sp) { return sp->d->name; }
nf_drafter *nf_spec_drafter(nf_spec *sp) { return sp->d; }

void nf_spec_set_think_ids(nf_spec *sp, int32_t open, int32_t close) {
    sp->think_open = open;
    sp->think_close = close;
}

void nf_spec_begin(nf_spec *sp) {
    nf_spec_ctl_reset(&sp->ctl);
    memset(&sp->stats, 0, sizeof sp->stats);
    sp->pending = -1;
    sp->n_blk = 0;
    sp->n_lazy = 0;
    nf_sampler_free(sp->dsmp); /* rebuilt from the request's sampling parameters on first use */
    sp->dsmp = NULL;
}

int32_t nf_spec_take_pending(nf_spec *sp) {
    int32_t t = sp->pending;
    sp->pending = -1;
    return t;
}

const nf_spec_stats *nf_spec_stats_get(nf_spec *sp) {
    sp->stats.parks = sp->ctl.parks;
    sp->stats.probes = sp->ctl.probes;
    sp->stats.rate_serial = nf_spec_ctl_rate_serial(&sp->ctl);
    sp->stats.rate_spec = nf_spec_ctl_rate_spec(&sp->ctl);
    return &sp->stats;
}

void nf_spec_stats_line(const nf_spec *sp, char *buf, size_t cap) {
    const nf_spec_stats *s = nf_spec_stats_get((nf_spec *)sp);
    double al = s->cycles ? (double)s->accepted / s->cycles : 0;
    double cpc = s->cycles ? (double)s->committed / s->cycles : 0;
    double acc = s->drafted ? 100.0 * s->accepted / s->drafted : 0;
    double spec_s = s->draft_s + s->verify_s + s->rerun_s;
    double rv = spec_s > 0 ? s->committed / spec_s : 0;
    double rs = s->serial_s > 0 && s->serial > 0 ? s->serial / s->serial_s : 0;
    char sp_txt[48] = "n/a";
    if (rv > 0 && rs > 0) snprintf(sp_txt, sizeof sp_txt, "%.2fx", rv / rs);
    snprintf(buf, cap,
             "spec[%s/%s K=%d]: %lld cycles, acceptance length %.2f, %.2f commits/cycle, %.0f%% of %lld drafts "
             "accepted, %lld serial tokens (%lld without draft), %lld rollbacks (%lld tokens re-run, %lld deferred), %lld parks, "
             "speculative %.1f tok/s vs serial %.1f tok/s (%s)",
             sp->d->name, nf_spec_mode_name(sp->p.mode), sp->p.draft_max, (long long)s->cycles, al, cpc, acc,
             (long long)s->drafted, (long long)s->serial, (long long)s->no_draft, (long long)s->rollbacks,
             (long long)s->rerun_tokens, (long long)s->deferred_tokens, (long long)s->parks, rv, rs, sp_txt);
}

/* Is the end of ctx inside a reasoning block? */
static bool in_reasoning(const nf_spec *sp, const int32_t *h, size_t n) {
    if (sp->think_open < 0) return false;
    for (size_t i = n; i-- > 0;) {
        if (h[i] == sp->think_close) return false;
        if (h[i] == sp->think_open) return true;
    }
    return false;
}

int nf_spec_target_forward(nf_spec *sp, nf_backend *be, nf_state *st, const int32_t *toks, int T, float *logits,
                           int all_logits) {
    if (!sp->d->observe) return nf_forward(be, st, toks, T, logits, all_logits, NULL);
    size_t need = (size_t)T * (size_t)be->model->hp.n_embd;
    if (need > sp->cap_hid) {
        free(sp->hid);
        sp->hid = nf_xmalloc(need * sizeof(float));
        sp->cap_hid = need;
    }
    int64_t p0 = st->pos;
    if (nf_forward_ex(be, st, toks, T, logits, all_logits, NULL, sp->hid) < 0) return -1;
    return sp->d->observe(sp->d, p0, toks, T, sp->hid);
}

/* A serial step: the deferred tokens (if any) and tok in one forward, logits after tok. */
static int feed_serial(nf_spec *sp, nf_spec_io *io, int L, bool no_draft, double t0) {
    if (nf_spec_target_forward(sp, io->be, io->st, sp->blk, L + 1, io->logits, 0) < 0) return -1;
    sp->n_lazy = 0;
    double dt = now_s() - t0;
    sp->stats.serial++;
    sp->stats.serial_s += dt;
    if (no_draft) sp->stats.no_draft++;
    nf_spec_ctl_serial(&sp->ctl, dt);
    return 0;
}

int32_t nf_draw(const float *q, int32_t V, nf_rng *r) {
    double tot = 0;
    for (int32_t i = 0; i < V; i++) tot += q[i];
    double u = nf_rng_uniform(r) * tot, acc = 0;
    int32_t last = 0;
    for (int32_t i = 0; i < V; i++) {
        if (q[i] <= 0) continue;
        acc += q[i];
        last = i;
        if (u < acc) return i;
    }
    return last;
}

/* A draw from max(0, p - q) (normalised); -1 when it is all zero (p <= q everywhere: cannot follow a rejection). */
static int32_t sample_residual_q(nf_spec *sp, const float *p, const float *q, int32_t V) {
    double tot = 0;
    for (int32_t i = 0; i < V; i++)
        if (p[i] > q[i]) tot += (double)p[i] - q[i];
    if (tot <= 0) return -1;
    double u = nf_rng_uniform(&sp->rng) * tot, acc = 0;
    int32_t last = -1;
    for (int32_t i = 0; i < V; i++) {
        if (p[i] <= q[i]) continue;
        acc += (double)p[i] - q[i];
        last = i;
        if (u < acc) return i;
    }
    return last;
}

static int32_t sample_residual(nf_spec *sp, const float *p, int32_t V, int32_t skip) {
    double tot = 0;
    for (int32_t i = 0; i < V; i++)
        if (i != skip) tot += p[i];
    if (tot <= 0) return skip; /* p was one-hot on the draft: cannot happen after a rejection */
    double u = nf_rng_uniform(&sp->rng) * tot, acc = 0;
    int32_t last = -1;
    for (int32_t i = 0; i < V; i++) {
        if (i == skip || p[i] <= 0) continue;
        acc += p[i];
        last = i;
        if (u < acc) return i;
    }
    return last;
}

int nf_spec_feed(nf_spec *sp, nf_spec_io *io, int32_t tok, int max_extra, int32_t *extra, int *n_extra) {
    *n_extra = 0;
    sp->n_blk = 0;
    double t0 = now_s();
    const int32_t V = io->be->model->hp.n_vocab;
    const int L = sp->n_lazy; /* committed tokens whose forward was deferred (state = history minus these) */
    if (io->st->pos + L != (int64_t)io->n_hist)
        return nf_fail("spec: the state (%lld tokens + %d deferred) does not match the history (%zu)",
                       (long long)io->st->pos, L, io->n_hist);
    memcpy(sp->blk, sp->lazy, (size_t)L * sizeof *sp->blk);
    sp->blk[L] = tok;
    sp->off = L;
    int K = sp->p.draft_max < max_extra ? sp->p.draft_max : max_extra;
    bool inr = in_reasoning(sp, io->hist, io->n_hist) && tok != sp->think_close;
    if (tok == sp->think_open && sp->think_open >= 0) inr = true;
    if (K <= 0 || !nf_spec_ctl_admit(&sp->ctl, inr)) return feed_serial(sp, io, L, false, t0);

    /* draft */
    if (io->n_hist + 1 > sp->cap_ctx) {
        size_t c = sp->cap_ctx ? sp->cap_ctx : 256;
        while (c < io->n_hist + 1) c *= 2;
        sp->ctx = nf_xrealloc(sp->ctx, c * sizeof *sp->ctx);
        sp->cap_ctx = c;
    }
    memcpy(sp->ctx, io->hist, io->n_hist * sizeof *sp->ctx);
    sp->ctx[io->n_hist] = tok;
    int32_t *dr = sp->blk + L + 1;
    bool greedy = !io->sp || io->sp->temperature <= 0;
    if (!greedy && !io->smp) return nf_fail("spec: sampled acceptance needs the sampler");
    bool sampled = !greedy && sp->d->draft_sampled;
    int nd;
    if (sampled) { /* drafts drawn from the drafter's own distribution q (kept for the acceptance test) */
        const int32_t Vd = V;
        if ((size_t)K * (size_t)Vd > sp->cap_q) {
            free(sp->q);
            sp->q = nf_xmalloc((size_t)K * (size_t)Vd * sizeof(float));
            sp->cap_q = (size_t)K * (size_t)Vd;
        }
        if (!sp->dsmp) {
            nf_sampler_params dp = *io->sp;
            dp.repetition_penalty = 1, dp.presence_penalty = 0, dp.frequency_penalty = 0, dp.penalty_last_n = 0;
            sp->dsmp = nf_sampler_new(&dp, Vd);
            if (!sp->dsmp) return -1;
        }
        nd = sp->d->draft_sampled(sp->d, sp->ctx, io->n_hist + 1, dr, K, sp->dsmp, &sp->rng, sp->q);
    } else {
        nd = sp->d->draft(sp->d, sp->ctx, io->n_hist + 1, dr, K);
    }
    if (nd < 0) return -1;
    for (int i = 0; i < nd; i++) { /* never verify past a stop token or an invalid id */
        if (dr[i] < 0 || dr[i] >= V || (io->is_stop && io->is_stop(io->user, dr[i]))) {
            nd = i;
            break;
        }
    }
    double t1 = now_s();
    sp->stats.draft_s += t1 - t0;
    if (nd == 0) return feed_serial(sp, io, L, true, t0);

    /* verify: [deferred..., tok, d1..dn] in one forward */
    const int T = L + 1 + nd;
    size_t need = (size_t)T * (size_t)V;
    if (need > sp->cap_vlog) {
        free(sp->vlog);
        sp->vlog = nf_xmalloc(need * sizeof(float));
        sp->cap_vlog = need;
    }
    if (sp->have_ck) nf_state_ckpt_free(&sp->ck);
    sp->have_ck = false;
    if (nf_state_checkpoint(io->st, &sp->ck) < 0) return -1;
    sp->have_ck = true;
    if (nf_spec_target_forward(sp, io->be, io->st, sp->blk, T, sp->vlog, 1) < 0) return -1;
    sp->n_lazy = 0;
    double t2 = now_s();
    sp->stats.verify_s += t2 - t1;

    /* accept: row L + i follows blk[L + i] (row L follows tok) */
    int j = 0;
    for (; j < nd; j++) {
        const float *row = sp->vlog + (size_t)(L + j) * V;
        int32_t d = dr[j];
        if (greedy) {
            if ((io->pick ? io->pick(io->user, row) : nf_sampler_sample(io->smp, row)) != d) break;
        } else {
            if ((size_t)V > sp->cap_probs) {
                free(sp->probs);
                sp->probs = nf_xmalloc((size_t)V * sizeof(float));
                sp->cap_probs = (size_t)V;
            }
            nf_sampler_probs(io->smp, row, sp->probs);
            double u = nf_rng_uniform(&sp->rng);
            if (sampled) { /* q = the drafter's distribution: accept with min(1, p/q), else max(0, p - q) */
                const float *q = sp->q + (size_t)j * V;
                if (!(u * q[d] < sp->probs[d])) {
                    int32_t r = sample_residual_q(sp, sp->probs, q, V);
                    sp->pending = r >= 0 ? r : nf_draw(sp->probs, V, &sp->rng);
                    break;
                }
            } else if (!(u < sp->probs[d])) { /* q one-hot on d */
                sp->pending = sample_residual(sp, sp->probs, V, d);
                break;
            }
        }
        if (io->smp) nf_sampler_accept(io->smp, d);
        extra[j] = d;
    }
    sp->stats.cycles++;
    sp->stats.drafted += nd;
    sp->stats.accepted += j;
    sp->stats.committed += j + 1;
    sp->stats.hist[j]++;
    if (j < nd) { /* partial accept: back to the checkpoint; the accepted part is re-run now or deferred */
        if (nf_state_rollback(io->st, &sp->ck) < 0) return -1;
        sp->stats.rollbacks++;
        int keep = L + 1 + j;
        if (L == 0 && keep <= NF_SPEC_LAZY_MAX && !sp->p.no_defer) { /* defer into the next forward (at most one cycle in a row) */
            memcpy(sp->lazy, sp->blk, (size_t)keep * sizeof *sp->blk);
            sp->n_lazy = keep;
            sp->stats.deferred_tokens += keep;
        } else {
            if (nf_spec_target_forward(sp, io->be, io->st, sp->blk, keep, NULL, 0) < 0) return -1;
            sp->stats.rerun_tokens += keep;
        }
    }
    double t3 = now_s();
    sp->stats.rerun_s += t3 - t2;
    memcpy(io->logits, sp->vlog + (size_t)(L + j) * V, (size_t)V * sizeof(float));
    *n_extra = j;
    sp->n_blk = L + 1 + j;
    nf_spec_ctl_cycle(&sp->ctl, t3 - t0, j + 1);
    return 0;
}

int nf_spec_truncate(nf_spec *sp, nf_spec_io *io, int keep) {
    sp->pending = -1;
    if (keep < 0 || sp->off + keep + 1 > sp->n_blk || !sp->have_ck)
        return nf_fail("spec: truncate to %d out of range", keep);
    const int32_t V = io->be->model->hp.n_vocab;
    int n = sp->off + keep + 1;
    if (io->st->pos != sp->ck.pos && nf_state_rollback(io->st, &sp->ck) < 0) return -1;
    sp->n_lazy = 0;
    if (nf_spec_target_forward(sp, io->be, io->st, sp->blk, n, NULL, 0) < 0) return -1;
    memcpy(io->logits, sp->vlog + (size_t)(n - 1) * V, (size_t)V * sizeof(float));
    sp->n_blk = n;
    return 0;
}

int nf_spec_flush(nf_spec *sp, nf_spec_io *io) {
    if (sp->n_lazy == 0) return 0;
    int L = sp->n_lazy;
    sp->n_lazy = 0;
    if (io->st->pos + L != (int64_t)io->n_hist)
        return nf_fail("spec: flush: the state (%lld tokens + %d deferred) does not match the history (%zu)",
                       (long long)io->st->pos, L, io->n_hist);
    double t0 = now_s();
    int rc = nf_spec_target_forward(sp, io->be, io->st, sp->lazy, L, NULL, 0);
    sp->stats.rerun_s += now_s() - t0;
    return rc;
}

bool nf_spec_lazy(const nf_spec *sp) { return sp->n_lazy > 0; }
