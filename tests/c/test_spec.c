/* test_spec.c — speculative decoding (src/engine/spec.h) on the CPU:
 *
 * - exactness: greedy generation through the session with a speculative decoder is byte-identical to serial
 *   decoding, for every drafter (lookup, draft model = another model, draft model = the target itself, an
 *   adversarial "oracle" drafter), over many prompts, and the state afterwards is the same (a further prefill
 *   gives bit-identical logits);
 * - rollback at every position of a block: an oracle drafter that proposes the true continuation with the
 *   draft at index j corrupted accepts exactly j tokens, for j = 0..K, and the output stays exact;
 * - a callback stop in the middle of a verified block leaves the state of a serial run of that length;
 * - sampled acceptance preserves the target distribution (chi-square against nf_sampler_probs at the first
 *   and second draft positions);
 * - the admission controller (fake clock): parks when speculation does not pay, backs off exponentially,
 *   probes again, stays on when it pays; reasoning is serial by default.
 *
 * Models: the transformers fixtures (tests/data/fixtures/{base,nondefault}, vocab 512) converted to F32 with
 * nf_convert into /tmp, and the embedded model (models/tiny/nf-tiny-bf16.gguf, trained, with tokenizer) when it
 * exists. NF_SPEC_LONG=1 runs the acceptance size (20 prompts x 256 tokens per drafter on both models). */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "convert/convert.h"
#include "cpu/backend_cpu.h"
#include "engine/session.h"
#include "engine/spec.h"
#include "model/forward.h"
#include "util/error.h"

#define TINY "models/tiny/nf-tiny-bf16.gguf"

static char base_path[128], alt_path[128];

static void convert_fixture(const char *name, char *out, size_t cap) {
    snprintf(out, cap, "/tmp/nf-test-spec-%d-%s.gguf", (int)getpid(), name);
    char dir[128];
    snprintf(dir, sizeof dir, "tests/data/fixtures/%s", name);
    nf_convert_opts o = {.hf_dir = dir, .out_path = out, .recipe = "f32", .n_threads = 2, .quiet = true,
                         .no_tokenizer = true};
    cr_assert_eq(nf_convert(&o, NULL), 0, "convert %s: %s", name, nf_error());
}

static void setup(void) {
    convert_fixture("base", base_path, sizeof base_path);
    convert_fixture("nondefault", alt_path, sizeof alt_path);
}

static void teardown(void) {
    unlink(base_path);
    unlink(alt_path);
}

static bool long_mode(void) {
    const char *e = getenv("NF_SPEC_LONG");
    return e && *e && strcmp(e, "0");
}

static nf_session *open_s(const char *path, float temp) {
    nf_session_opts o = nf_session_opts_default();
    o.n_threads = 2;
    o.n_ctx = 2048;
    o.sampler.temperature = temp;
    o.sampler.min_p = 0;
    nf_session *s = nf_session_create(path, &o);
    cr_assert_not_null(s, "%s", nf_error());
    return s;
}

/* prompt i: pseudo-random ordinary ids with a repeated segment (so prompt lookup has something to find) */
static size_t make_prompt(int i, int32_t V, int32_t *out) {
    uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
    size_t n = 12 + (size_t)(i % 5) * 7;
    for (size_t k = 0; k < n; k++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        out[k] = (int32_t)((s >> 33) % (uint64_t)(V - 16));
    }
    size_t rep = n / 2;
    memcpy(out + n, out + 3, rep * sizeof *out); /* repeat a stretch */
    return n + rep;
}

typedef struct {
    int32_t *ids;
    size_t n, cap;
    int stop_at; /* stop (callback) after this many tokens; -1 never */
} collect;

static int on_tok(void *u, const nf_gen_token *t) {
    collect *c = u;
    if (t->id < 0) return 0;
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 256;
        c->ids = realloc(c->ids, c->cap * sizeof *c->ids);
    }
    c->ids[c->n++] = t->id;
    return c->stop_at >= 0 && (int)c->n >= c->stop_at;
}

/* generate n tokens greedily after prompt; returns the ids (caller frees) */
static int32_t *run_gen(nf_session *s, const int32_t *prompt, size_t np, int64_t n, size_t *got, int stop_at,
                        nf_gen_stats *gs) {
    cr_assert_eq(nf_session_set_prompt(s, prompt, np, NULL, 0, NULL, NULL), 0, "%s", nf_error());
    collect c = {.stop_at = stop_at};
    nf_gen_opts g = {.max_tokens = n, .ignore_stop = true};
    nf_gen_stats local;
    cr_assert_eq(nf_session_generate(s, &g, on_tok, &c, gs ? gs : &local), 0, "%s", nf_error());
    *got = c.n;
    return c.ids;
}

/* after generation: append the same extra tokens to both sessions, compare logits bit-exactly */
static void assert_same_state(nf_session *a, nf_session *b) {
    size_t na, nb;
    const int32_t *ta = nf_session_tokens(a, &na), *tb = nf_session_tokens(b, &nb);
    cr_assert_eq(na, nb, "history lengths %zu vs %zu", na, nb);
    cr_assert(!memcmp(ta, tb, na * sizeof *ta), "histories differ");
    int V = nf_session_model(a)->hp.n_vocab;
    cr_assert(!memcmp(nf_session_logits(a), nf_session_logits(b), (size_t)V * sizeof(float)), "logits differ");
    int32_t more[5] = {1, 7, 3, 7, 1};
    cr_assert_eq(nf_session_prefill(a, more, 5, NULL, 0, NULL, NULL), 0, "%s", nf_error());
    cr_assert_eq(nf_session_prefill(b, more, 5, NULL, 0, NULL, NULL), 0, "%s", nf_error());
    cr_assert(!memcmp(nf_session_logits(a), nf_session_logits(b), (size_t)V * sizeof(float)),
              "logits differ after a further prefill (state not restored exactly)");
}

/* ---- an oracle drafter: the serial continuation with draft index `bad` corrupted ------------------------- */

typedef struct {
    const int32_t *ref;  /* prompt ++ serial continuation */
    size_t n_ref;
    int bad;             /* corrupt this draft index (>= K: none) */
    int32_t V;
} oracle;

static int oracle_draft(nf_drafter *d, const int32_t *ctx, size_t n, int32_t *out, int max) {
    oracle *o = d->impl;
    cr_assert(n <= o->n_ref && !memcmp(ctx, o->ref, n * sizeof *ctx), "context is not a prefix of the reference");
    int k = 0;
    for (; k < max && n + (size_t)k < o->n_ref; k++) {
        out[k] = o->ref[n + (size_t)k];
        if (k == o->bad) out[k] = (out[k] + 1) % o->V;
    }
    return k;
}

static void oracle_destroy(nf_drafter *d) { free(d); }

static nf_drafter *make_oracle(oracle *o) {
    nf_drafter *d = calloc(1, sizeof *d);
    d->name = "oracle";
    d->impl = o;
    d->draft = oracle_draft;
    d->destroy = oracle_destroy;
    return d;
}

/* serial vs speculative (drafter made by mk for each prompt) over n_prompts x n_tok */
typedef nf_drafter *(*mk_fn)(void *arg);

static void exactness(const char *target, mk_fn mk, void *arg, int n_prompts, int64_t n_tok, int K,
                      nf_spec_stats *total) {
    nf_session *ser = open_s(target, 0), *spc = open_s(target, 0);
    int32_t V = nf_session_model(ser)->hp.n_vocab;
    memset(total, 0, sizeof *total);
    for (int i = 0; i < n_prompts; i++) {
        int32_t prompt[64];
        size_t np = make_prompt(i, V, prompt);
        nf_session_reset(ser);
        nf_session_reset(spc);
        size_t n1, n2;
        int32_t *a = run_gen(ser, prompt, np, n_tok, &n1, -1, NULL);
        nf_spec *sp = nf_spec_new(mk(arg), &(nf_spec_params){.mode = NF_SPEC_SPECULATIVE, .draft_max = K, .window = 16,
                                                     .min_cycles = 4, .backoff_min = 16, .backoff_max = 512});
        nf_session_set_spec(spc, sp);
        int32_t *b = run_gen(spc, prompt, np, n_tok, &n2, -1, NULL);
        cr_assert_eq(n1, (size_t)n_tok);
        cr_assert_eq(n2, n1, "prompt %d: %zu vs %zu tokens", i, n2, n1);
        for (size_t k = 0; k < n1; k++)
            cr_assert_eq(a[k], b[k], "prompt %d: token %zu differs (%d vs %d)", i, k, b[k], a[k]);
        assert_same_state(ser, spc);
        const nf_spec_stats *st = nf_spec_stats_get(sp);
        total->cycles += st->cycles, total->drafted += st->drafted, total->accepted += st->accepted;
        total->committed += st->committed, total->serial += st->serial, total->rollbacks += st->rollbacks;
        total->no_draft += st->no_draft;
        for (int j = 0; j <= 32; j++) total->hist[j] += st->hist[j];
        cr_assert_eq(st->committed + st->serial, (int64_t)n_tok,
                     "every fed token is counted once (%lld + %lld)", (long long)st->committed,
                     (long long)st->serial);
        free(a);
        free(b);
    }
    nf_session_free(ser);
    nf_session_free(spc);
}

static nf_drafter *mk_lookup(void *arg) {
    (void)arg;
    nf_lookup_params p = nf_lookup_defaults();
    p.min_ngram = 1;
    return nf_drafter_lookup(&p);
}

static nf_drafter *mk_model(void *arg) {
    const char *path = arg;
    nf_drafter *d = nf_drafter_model(path, 0, 1, NULL);
    cr_assert_not_null(d, "%s", nf_error());
    return d;
}

static void report(const char *what, const nf_spec_stats *t) {
    fprintf(stderr, "spec %-28s cycles %5lld  drafted %6lld  accepted %6lld (%.2f/cycle)  serial %5lld  rollbacks %lld\n",
            what, (long long)t->cycles, (long long)t->drafted, (long long)t->accepted,
            t->cycles ? (double)t->accepted / t->cycles : 0, (long long)t->serial, (long long)t->rollbacks);
}

TestSuite(spec, .init = setup, .fini = teardown, .timeout = 240);

Test(spec, greedy_exact_lookup_fixture) {
    nf_spec_stats t;
    exactness(base_path, mk_lookup, NULL, long_mode() ? 20 : 8, long_mode() ? 256 : 96, 6, &t);
    report("lookup (fixture base)", &t);
    cr_assert_gt(t.cycles, 0, "lookup never drafted");
}

Test(spec, greedy_exact_draft_model_fixture) {
    nf_spec_stats t;
    exactness(base_path, mk_model, alt_path, long_mode() ? 20 : 6, long_mode() ? 256 : 64, 4, &t);
    report("model:nondefault (fixture base)", &t);
    cr_assert_gt(t.cycles, 0);
    cr_assert_gt(t.rollbacks, 0, "a different draft model should be rejected sometimes");
    exactness(base_path, mk_model, base_path, long_mode() ? 20 : 4, long_mode() ? 256 : 64, 4, &t);
    report("model:self (fixture base)", &t);
    cr_assert_eq(t.accepted, t.drafted, "the target as its own draft model is always accepted");
    cr_assert_eq(t.rollbacks, 0);
}

/* accept exactly j of K drafts, for every j */
Test(spec, rollback_every_position) {
    const int K = 5;
    const int64_t N = 40;
    nf_session *ser = open_s(base_path, 0);
    int32_t V = nf_session_model(ser)->hp.n_vocab;
    int32_t prompt[64];
    size_t np = make_prompt(3, V, prompt);
    size_t n1;
    int32_t *a = run_gen(ser, prompt, np, N, &n1, -1, NULL);
    int32_t *ref = malloc((np + n1) * sizeof *ref);
    memcpy(ref, prompt, np * sizeof *ref);
    memcpy(ref + np, a, n1 * sizeof *ref);
    for (int v = 0; v < 2 * (K + 1); v++) {
        int bad = v % (K + 1);
        bool no_defer = v > K; /* both ways of restoring a partial accept: deferred re-run and immediate re-run */
        oracle o = {.ref = ref, .n_ref = np + n1, .bad = bad, .V = V};
        nf_session *spc = open_s(base_path, 0);
        nf_spec *sp = nf_spec_new(make_oracle(&o), &(nf_spec_params){.mode = NF_SPEC_SPECULATIVE, .draft_max = K,
                                                                    .window = 8, .min_cycles = 2, .backoff_min = 1,
                                                                    .backoff_max = 1, .no_defer = no_defer});
        nf_session_set_spec(spc, sp);
        size_t n2;
        int32_t *b = run_gen(spc, prompt, np, N, &n2, -1, NULL);
        cr_assert_eq(n2, n1);
        cr_assert(!memcmp(a, b, n1 * sizeof *a), "bad=%d: output differs from serial", bad);
        const nf_spec_stats *st = nf_spec_stats_get(sp);
        /* every full block accepts exactly `bad` drafts (blocks cut short by max_tokens may accept fewer) */
        int64_t full = 0;
        for (int j = 0; j <= K; j++)
            if (j != bad) full += st->hist[j];
        cr_assert_gt(st->hist[bad], 0, "bad=%d: no cycle accepted exactly %d", bad, bad);
        cr_assert_leq(full, 2, "bad=%d: %lld cycles accepted another count", bad, (long long)full);
        if (bad == K) cr_assert_eq(st->rollbacks, 0, "all drafts right: no rollback");
        else cr_assert_geq(st->rollbacks, st->hist[bad] - 1, "bad=%d: a rejected draft must roll back", bad);
        if (no_defer) cr_assert_eq(st->deferred_tokens, 0);
        else if (bad < K) cr_assert_gt(st->deferred_tokens, 0, "bad=%d: nothing deferred", bad);
        nf_session *chk = open_s(base_path, 0);
        size_t n3;
        int32_t *c = run_gen(chk, prompt, np, N, &n3, -1, NULL);
        assert_same_state(chk, spc);
        free(c);
        free(b);
        nf_session_free(spc);
        nf_session_free(chk);
    }
    free(ref);
    free(a);
    nf_session_free(ser);
}

/* the callback stops after token m, inside a verified block: the state must be that of a serial run of m */
Test(spec, stop_inside_block) {
    nf_session *ser = open_s(base_path, 0);
    int32_t V = nf_session_model(ser)->hp.n_vocab;
    int32_t prompt[64];
    size_t np = make_prompt(5, V, prompt);
    size_t n1;
    int32_t *a = run_gen(ser, prompt, np, 48, &n1, -1, NULL);
    int32_t *ref = malloc((np + n1) * sizeof *ref);
    memcpy(ref, prompt, np * sizeof *ref);
    memcpy(ref + np, a, n1 * sizeof *ref);
    for (int v = 0; v < 18; v++) {
        int m = 1 + v % 9;
        /* all drafts right, or draft 2 of each block wrong (partial accepts with deferred re-runs before the stop) */
        oracle o = {.ref = ref, .n_ref = np + n1, .bad = v < 9 ? 99 : 2, .V = V};
        nf_session *spc = open_s(base_path, 0), *chk = open_s(base_path, 0);
        nf_session_set_spec(spc, nf_spec_new(make_oracle(&o), &(nf_spec_params){.mode = NF_SPEC_SPECULATIVE,
                                                                                .draft_max = 6, .window = 8,
                                                                                .min_cycles = 2}));
        size_t n2, n3;
        int32_t *b = run_gen(spc, prompt, np, 48, &n2, m, NULL);
        cr_assert_eq(n2, (size_t)m);
        int32_t *c = run_gen(chk, prompt, np, m, &n3, -1, NULL);
        cr_assert(!memcmp(b, c, (size_t)m * sizeof *b));
        /* and generation continues exactly */
        collect c1 = {.stop_at = -1}, c2 = {.stop_at = -1};
        nf_gen_opts g = {.max_tokens = 10, .ignore_stop = true};
        cr_assert_eq(nf_session_generate(spc, &g, on_tok, &c1, NULL), 0);
        cr_assert_eq(nf_session_generate(chk, &g, on_tok, &c2, NULL), 0);
        cr_assert_eq(c1.n, c2.n);
        cr_assert(!memcmp(c1.ids, c2.ids, c1.n * sizeof *c1.ids), "m=%d bad=%d: continuation differs", m, o.bad);
        assert_same_state(chk, spc);
        free(c1.ids);
        free(c2.ids);
        free(b);
        free(c);
        nf_session_free(spc);
        nf_session_free(chk);
    }
    free(ref);
    free(a);
    nf_session_free(ser);
}

/* ---- sampled acceptance preserves the target distribution ------------------------------------------------ */

typedef struct {
    int32_t d[2];
} fixed_draft;

static int fixed_draft_fn(nf_drafter *d, const int32_t *ctx, size_t n, int32_t *out, int max) {
    (void)ctx, (void)n;
    fixed_draft *f = d->impl;
    int k = 0;
    for (; k < max && k < 2; k++) out[k] = f->d[k];
    return k;
}

/* chi-square of counts against probabilities p (bins with expected < 5 pooled) */
static double chi2(const int *cnt, const float *p, int V, int N, int *dof) {
    double x = 0, pe = 0, po = 0;
    int k = 0;
    for (int i = 0; i < V; i++) {
        double e = (double)p[i] * N;
        if (e >= 5) {
            x += (cnt[i] - e) * (cnt[i] - e) / e;
            k++;
        } else {
            pe += e;
            po += cnt[i];
            cr_assert(p[i] > 0 || cnt[i] == 0, "token %d has probability 0 but was drawn %d times", i, cnt[i]);
        }
    }
    if (pe > 0) x += (po - pe) * (po - pe) / pe, k++;
    *dof = k - 1;
    return x;
}

Test(spec, sampling_preserves_distribution) {
    nf_model *m = nf_model_load(base_path);
    cr_assert_not_null(m, "%s", nf_error());
    nf_backend *be = nf_cpu_backend_create(m, 2);
    const int V = m->hp.n_vocab;
    nf_state *st = nf_state_create(&m->hp, 64);
    int32_t prompt[64];
    size_t np = make_prompt(7, V, prompt);
    float *lg = malloc((size_t)V * sizeof(float));
    cr_assert_eq(nf_prefill(be, st, prompt, (int64_t)np, 0, lg, 0, NULL), 0, "%s", nf_error());
    nf_state *base = nf_state_snapshot(st);
    nf_sampler_params spar = nf_sampler_defaults();
    spar.min_p = 0;
    /* the first token t (as the session would sample it) and the expected distributions p1 = p(.|prompt,t),
     * p2 = p(.|prompt,t,d1) */
    int32_t t = 5;
    float *p1 = malloc((size_t)V * sizeof(float)), *p2 = malloc((size_t)V * sizeof(float));
    float *lg2 = malloc((size_t)2 * V * sizeof(float));
    nf_state *tmp = nf_state_snapshot(base);
    int32_t two[2] = {t, 0};
    cr_assert_eq(nf_forward(be, tmp, two, 1, lg2, 1, NULL), 0);
    /* a temperature at which the most likely token has probability ~0.3-0.8 (d1: accepted often, not always),
     * with many other tokens still drawable */
    static const float temps[] = {1.0f, 0.5f, 0.3f, 0.2f, 0.15f, 0.1f, 0.07f, 0.05f};
    nf_sampler *ref = NULL;
    int32_t d1 = 0;
    for (size_t ti = 0; ti < sizeof temps / sizeof temps[0]; ti++) {
        spar.temperature = temps[ti];
        nf_sampler_free(ref);
        ref = nf_sampler_new(&spar, V);
        nf_sampler_probs(ref, lg2, p1);
        d1 = 0;
        for (int i = 1; i < V; i++)
            if (p1[i] > p1[d1]) d1 = i;
        if (p1[d1] >= 0.3f) break;
    }
    two[1] = d1;
    nf_state_restore(tmp, base);
    cr_assert_eq(nf_forward(be, tmp, two, 2, lg2, 1, NULL), 0);
    nf_sampler_probs(ref, lg2 + V, p2);
    int32_t d2 = 0; /* the token closest to probability 0.3: rejected often */
    for (int i = 1; i < V; i++)
        if (fabsf(p2[i] - 0.3f) < fabsf(p2[d2] - 0.3f)) d2 = i;
    fixed_draft fd = {{d1, d2}};
    nf_drafter *dr = calloc(1, sizeof *dr);
    dr->name = "fixed";
    dr->impl = &fd;
    dr->draft = fixed_draft_fn;
    dr->destroy = oracle_destroy;
    nf_spec *sp = nf_spec_new(dr, &(nf_spec_params){.mode = NF_SPEC_SPECULATIVE, .draft_max = 2, .seed = getenv("NF_SPEC_SEED") ? strtoull(getenv("NF_SPEC_SEED"), NULL, 10) : 42});
    const int N = getenv("NF_SPEC_N") ? atoi(getenv("NF_SPEC_N")) : 6000;
    int *c1 = calloc((size_t)V, sizeof(int)), *c2 = calloc((size_t)V, sizeof(int));
    int n2 = 0;
    nf_sampler *smp = nf_sampler_new(&spar, V);
    for (int it = 0; it < N; it++) {
        nf_state_restore(st, base);
        nf_sampler_reset(smp);
        for (size_t k = 0; k < np; k++) nf_sampler_accept(smp, prompt[k]);
        nf_sampler_accept(smp, t);
        nf_spec_begin(sp);
        nf_spec_io io = {.be = be, .st = st, .hist = prompt, .n_hist = np, .logits = lg, .smp = smp, .sp = &spar};
        int32_t extra[4];
        int ne;
        cr_assert_eq(nf_spec_feed(sp, &io, t, 2, extra, &ne), 0, "%s", nf_error());
        int32_t x1 = ne >= 1 ? extra[0] : nf_spec_take_pending(sp);
        cr_assert(x1 >= 0 && x1 < V);
        c1[x1]++;
        if (ne >= 1) { /* d1 accepted: the next token is distributed as p2 */
            int32_t x2 = ne >= 2 ? extra[1] : nf_spec_take_pending(sp);
            cr_assert(x2 >= 0 && x2 < V);
            c2[x2]++;
            n2++;
        }
        nf_spec_io fio = io;
        fio.n_hist = np + 1 + (size_t)ne; /* the committed history; the flush feeds what a rollback deferred */
        cr_assert_eq(nf_spec_flush(sp, &fio), 0, "%s", nf_error());
        cr_assert_eq(st->pos, (int64_t)np + 1 + ne, "state position after the cycle");
    }
    int dof1, dof2;
    double x1 = chi2(c1, p1, V, N, &dof1), x2 = chi2(c2, p2, V, n2, &dof2);
    fprintf(stderr, "spec sampling (T=%.2f): p(d1)=%.3f accepted %d/%d; chi2 pos1 %.1f (dof %d), pos2 %.1f (dof %d, n %d, p(d2)=%.3f)\n",
            spar.temperature, p1[d1], c1[d1], N, x1, dof1, x2, dof2, n2, p2[d2]);
    /* a generous bound: chi2 mean = dof, sd = sqrt(2 dof); 5 sd above the mean */
    cr_assert_lt(x1, dof1 + 5 * sqrt(2.0 * dof1) + 10, "position 1 distribution differs from the target");
    cr_assert_lt(x2, dof2 + 5 * sqrt(2.0 * dof2) + 10, "position 2 distribution differs from the target");
    cr_assert_gt(n2, N / 20);
    nf_spec_free(sp);
    nf_sampler_free(smp);
    nf_sampler_free(ref);
    free(c1), free(c2), free(p1), free(p2), free(lg), free(lg2);
    nf_state_free(tmp);
    nf_state_free(base);
    nf_state_free(st);
    nf_backend_free(be);
    nf_model_free(m);
}

/* ---- admission controller -------------------------------------------------------------------------------- */

Test(spec, controller_parks_probes_and_stays) {
    nf_spec_params p = nf_spec_defaults();
    p.window = 8, p.min_cycles = 4, p.warmup = 3, p.backoff_min = 4, p.backoff_max = 16, p.margin = 0.05;
    nf_spec_ctl c;
    nf_spec_ctl_init(&c, &p);
    /* warm-up: serial first */
    for (int i = 0; i < 3; i++) {
        cr_assert(!nf_spec_ctl_admit(&c, false));
        nf_spec_ctl_serial(&c, 0.010); /* 100 tok/s */
    }
    cr_assert(nf_spec_ctl_admit(&c, false));
    cr_assert(!nf_spec_ctl_admit(&c, true), "reasoning is serial by default");
    /* cycles that commit 1 token in 15 ms: worse than serial → parked after min_cycles */
    int parks_seen = 0, expect_park = 4;
    for (int round = 0; round < 4; round++) {
        for (int k = 0; k < 4; k++) {
            cr_assert(nf_spec_ctl_admit(&c, false), "round %d cycle %d", round, k);
            nf_spec_ctl_cycle(&c, 0.015, 1);
        }
        parks_seen++;
        cr_assert_eq(c.parks, parks_seen);
        int n = 0;
        while (!nf_spec_ctl_admit(&c, false)) {
            nf_spec_ctl_serial(&c, 0.010);
            n++;
            cr_assert_lt(n, 100);
        }
        cr_assert_eq(n, expect_park, "round %d: parked %d tokens, expected %d", round, n, expect_park);
        expect_park = expect_park * 2 > 16 ? 16 : expect_park * 2;
    }
    cr_assert_eq(c.probes, 4);
    /* now it pays: 3 tokens per 15 ms = 200 tok/s → stays on, back-off reset after a full window */
    for (int k = 0; k < 40; k++) {
        cr_assert(nf_spec_ctl_admit(&c, false), "paying cycle %d refused", k);
        nf_spec_ctl_cycle(&c, 0.015, 3);
    }
    cr_assert_eq(c.parks, 4);
    cr_assert_eq(c.backoff, 4);
    cr_assert_gt(nf_spec_ctl_rate_spec(&c), 150);
    cr_assert_lt(fabs(nf_spec_ctl_rate_serial(&c) - 100), 1);
    nf_spec_ctl_free(&c);
    /* modes */
    p.mode = NF_SPEC_SERIAL;
    nf_spec_ctl_init(&c, &p);
    cr_assert(!nf_spec_ctl_admit(&c, false));
    nf_spec_ctl_free(&c);
    p.mode = NF_SPEC_SPECULATIVE;
    nf_spec_ctl_init(&c, &p);
    cr_assert(nf_spec_ctl_admit(&c, false));
    cr_assert(!nf_spec_ctl_admit(&c, true));
    p.reasoning = true;
    nf_spec_ctl_free(&c);
    nf_spec_ctl_init(&c, &p);
    cr_assert(nf_spec_ctl_admit(&c, true));
    nf_spec_ctl_free(&c);
}

Test(spec, lookup_drafts) {
    nf_drafter *d = nf_drafter_lookup(NULL);
    int32_t out[8];
    int32_t ctx1[] = {1, 2, 3, 4, 5, 9, 2, 3};
    cr_assert_eq(d->draft(d, ctx1, 8, out, 3), 3);
    cr_assert(out[0] == 4 && out[1] == 5 && out[2] == 9);
    int32_t ctx2[] = {7, 8, 7, 8}; /* periodic: continues the period */
    cr_assert_eq(d->draft(d, ctx2, 4, out, 5), 5);
    cr_assert(out[0] == 7 && out[1] == 8 && out[2] == 7 && out[3] == 8 && out[4] == 7);
    int32_t ctx3[] = {1, 2, 3, 4};
    cr_assert_eq(d->draft(d, ctx3, 4, out, 4), 0, "no repeated n-gram: no draft");
    int32_t ctx4[] = {5, 6, 1, 5, 6, 2, 5, 6}; /* most recent occurrence wins */
    cr_assert_eq(d->draft(d, ctx4, 8, out, 1), 1);
    cr_assert_eq(out[0], 2);
    nf_drafter_free(d);
    cr_assert_null(nf_drafter_from_spec("bogus", NULL, 1));
    cr_assert_null(nf_drafter_from_spec("model:/nonexistent.gguf", NULL, 1));
    cr_assert_null(nf_drafter_model(alt_path, 999, 1, NULL), "vocabulary mismatch must be refused");
}

/* ---- the embedded model (trained, real tokenizer) -------------------------------------------------------- */

Test(spec, greedy_exact_tiny_model, .timeout = 3600) {
    if (access(TINY, R_OK) != 0) {
        cr_log_warn("%s not present: skipped", TINY);
        return;
    }
    nf_spec_stats t;
    int np = long_mode() ? 20 : 2;
    int64_t nt = long_mode() ? 256 : 48;
    exactness(TINY, mk_lookup, NULL, np, nt, 6, &t);
    report("lookup (tiny)", &t);
    exactness(TINY, mk_model, (void *)TINY, long_mode() ? 20 : 1, nt, 4, &t);
    report("model:self (tiny)", &t);
    cr_assert_eq(t.accepted, t.drafted);
}

/* ---- MTP drafter -------------------------------------------------------------------------------------------
 * No reference exists for MTP numerics (HF never runs the block): the checks are that the block is bound, that
 * it produces drafts, that its cache follows the target through verify / rollback / re-run, and that greedy
 * output is identical to serial whatever the drafts are. Models: tests/data/convert/fused converted with --mtp
 * (F32), and a synthetic tiny-preset model with one MTP block. */

#include "model/recipe.h"
#include "model/synth.h"

static nf_drafter *mk_mtp(void *arg) {
    nf_session *target = arg;
    nf_drafter *d = nf_drafter_mtp(nf_session_model(target), 1);
    cr_assert_not_null(d, "%s", nf_error());
    return d;
}

/* like exactness(), but the MTP drafter must be built on the speculative session's own model */
static void exactness_mtp(const char *path, int n_prompts, int64_t n_tok, int K, nf_spec_stats *total) {
    nf_session *ser = open_s(path, 0), *spc = open_s(path, 0);
    int32_t V = nf_session_model(ser)->hp.n_vocab;
    cr_assert_gt(nf_session_model(spc)->n_mtp_bound, 0, "MTP block not bound");
    memset(total, 0, sizeof *total);
    nf_session_set_spec(spc, nf_spec_new(mk_mtp(spc), &(nf_spec_params){.mode = NF_SPEC_SPECULATIVE, .draft_max = K,
                                                                        .window = 16, .min_cycles = 4}));
    nf_spec *sp = nf_session_spec(spc);
    for (int i = 0; i < n_prompts; i++) {
        int32_t prompt[64];
        size_t np = make_prompt(i, V, prompt);
        nf_session_reset(ser);
        nf_session_reset(spc);
        size_t n1, n2;
        int32_t *a = run_gen(ser, prompt, np, n_tok, &n1, -1, NULL);
        int32_t *b = run_gen(spc, prompt, np, n_tok, &n2, -1, NULL);
        cr_assert_eq(n2, n1);
        for (size_t k = 0; k < n1; k++)
            cr_assert_eq(a[k], b[k], "mtp prompt %d: token %zu differs (%d vs %d)", i, k, b[k], a[k]);
        const nf_spec_stats *st = nf_spec_stats_get(sp);
        cr_assert_eq(st->no_draft, 0, "prompt %d: the MTP drafter fell out of step with the target", i);
        total->cycles += st->cycles, total->drafted += st->drafted, total->accepted += st->accepted;
        total->serial += st->serial, total->rollbacks += st->rollbacks;
        free(a);
        free(b);
    }
    assert_same_state(ser, spc);
    nf_session_free(ser);
    nf_session_free(spc);
}

Test(spec, mtp_drafter_consistency, .timeout = 1800) {
    char fused[128], synth[128];
    snprintf(fused, sizeof fused, "/tmp/nf-test-spec-%d-mtp-fused.gguf", (int)getpid());
    nf_convert_opts o = {.hf_dir = "tests/data/convert/fused", .out_path = fused, .recipe = "f32", .n_threads = 2,
                         .quiet = true, .no_tokenizer = true, .mtp = true};
    cr_assert_eq(nf_convert(&o, NULL), 0, "%s", nf_error());
    nf_spec_stats t;
    exactness_mtp(fused, long_mode() ? 20 : 6, long_mode() ? 256 : 64, 3, &t);
    report("mtp (convert/fused)", &t);
    cr_assert_gt(t.cycles, 0);
    unlink(fused);

    nf_hparams hp;
    cr_assert_eq(nf_synth_preset("tiny", &hp), 0);
    hp.n_nextn = 1;
    hp.n_vocab = 512;
    nf_synth_derive(&hp, 0);
    snprintf(synth, sizeof synth, "/tmp/nf-test-spec-%d-mtp-synth.gguf", (int)getpid());
    cr_assert_eq(nf_synth_write(synth, &hp, nf_recipe_find("f32"), 7, NULL, NULL, NULL), 0, "%s", nf_error());
    exactness_mtp(synth, long_mode() ? 20 : 3, long_mode() ? 256 : 48, 4, &t);
    report("mtp (synth tiny)", &t);
    cr_assert_gt(t.cycles, 0);
    unlink(synth);

    /* no MTP block: a clear refusal */
    nf_model *m = nf_model_load(base_path);
    cr_assert_not_null(m);
    cr_assert_null(nf_drafter_mtp(m, 1));
    cr_assert(strstr(nf_error(), "no MTP block"), "%s", nf_error());
    nf_model_free(m);
}

/* The MTP block's cache does not depend on how the target's forwards were chunked: drafts after a prompt fed
 * in one call, in chunks of 3, and token by token are identical (and some are produced). */
Test(spec, mtp_chunk_invariance) {
    char fused[128];
    snprintf(fused, sizeof fused, "/tmp/nf-test-spec-%d-mtp-chunk.gguf", (int)getpid());
    nf_convert_opts o = {.hf_dir = "tests/data/convert/fused", .out_path = fused, .recipe = "f32", .n_threads = 2,
                         .quiet = true, .no_tokenizer = true, .mtp = true};
    cr_assert_eq(nf_convert(&o, NULL), 0, "%s", nf_error());
    nf_model *m = nf_model_load(fused);
    cr_assert_not_null(m, "%s", nf_error());
    nf_backend *be = nf_cpu_backend_create(m, 1);
    const int V = m->hp.n_vocab;
    int32_t prompt[64];
    size_t np = make_prompt(2, V, prompt);
    int32_t drafts[3][6];
    const int chunks[3] = {(int)np, 3, 1};
    float *lg = malloc((size_t)V * sizeof(float));
    for (int c = 0; c < 3; c++) {
        nf_spec *sp = nf_spec_new(nf_drafter_mtp(m, 1), &(nf_spec_params){.mode = NF_SPEC_SPECULATIVE, .draft_max = 6});
        cr_assert_not_null(sp, "%s", nf_error());
        nf_state *st = nf_state_create(&m->hp, 64);
        for (size_t i = 0; i < np - 1; i += (size_t)chunks[c]) {
            int T = (int)(np - 1 - i < (size_t)chunks[c] ? np - 1 - i : (size_t)chunks[c]);
            cr_assert_eq(nf_spec_target_forward(sp, be, st, prompt + i, T, lg, 0), 0, "%s", nf_error());
        }
        /* the drafter sees prompt[0..np) with the last token not yet fed */
        nf_drafter *d = nf_spec_drafter(sp);
        cr_assert_eq(d->draft(d, prompt, np, drafts[c], 6), 6, "chunk %d: no drafts", chunks[c]);
        nf_state_free(st);
        nf_spec_free(sp);
    }
    for (int c = 1; c < 3; c++)
        cr_assert(!memcmp(drafts[0], drafts[c], sizeof drafts[0]), "drafts differ with chunk %d", chunks[c]);
    free(lg);
    nf_backend_free(be);
    nf_model_free(m);
    unlink(fused);
}

Test(spec, params_set) {
    nf_spec_params p = nf_spec_defaults();
    cr_assert_eq(nf_spec_params_set(&p, "mode=speculative"), 0);
    cr_assert_eq(p.mode, NF_SPEC_SPECULATIVE);
    cr_assert_eq(nf_spec_params_set(&p, "reasoning=1"), 0);
    cr_assert(p.reasoning);
    cr_assert_eq(nf_spec_params_set(&p, "margin=0.1"), 0);
    cr_assert_float_eq(p.margin, 0.1, 1e-12);
    cr_assert_eq(nf_spec_params_set(&p, "window=32"), 0);
    cr_assert_eq(p.window, 32);
    cr_assert_eq(nf_spec_params_set(&p, "no_defer=true"), 0);
    cr_assert(p.no_defer);
    const char *bad[] = {"window", "=3", "window=", "window=-1", "window=3x", "nope=1", "reasoning=maybe",
                         "mode=fast", "margin=abc"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(nf_spec_params_set(&p, bad[i]), -1, "'%s' accepted", bad[i]);
    cr_assert_eq(p.window, 32, "a refused option changed nothing");
}

/* Sampled drafts from a draft model's own distribution q (accept with min(1, p/q), reject into max(0, p - q)):
 * the committed tokens still follow the target. Draft model = the fixture `nondefault` (q far from p). Position
 * 1 over all cycles, position 2 given that the first draft a was accepted, against nf_sampler_probs. The draft
 * model is the fixture converted with the Q8 recipe: close to the target but not equal (q != p). */
Test(spec, sampling_with_draft_distribution) {
    char q8[128];
    snprintf(q8, sizeof q8, "/tmp/nf-test-spec-%d-base-q8.gguf", (int)getpid());
    nf_convert_opts co = {.hf_dir = "tests/data/fixtures/base", .out_path = q8, .recipe = "q8", .n_threads = 2,
                          .quiet = true, .no_tokenizer = true};
    cr_assert_eq(nf_convert(&co, NULL), 0, "%s", nf_error());
    nf_model *m = nf_model_load(base_path);
    cr_assert_not_null(m, "%s", nf_error());
    nf_backend *be = nf_cpu_backend_create(m, 2);
    const int V = m->hp.n_vocab;
    nf_state *st = nf_state_create(&m->hp, 64);
    int32_t prompt[64];
    size_t np = make_prompt(7, V, prompt);
    float *lg = malloc((size_t)V * sizeof(float)), *lg2 = malloc((size_t)2 * V * sizeof(float));
    cr_assert_eq(nf_prefill(be, st, prompt, (int64_t)np, 0, lg, 0, NULL), 0, "%s", nf_error());
    nf_state *base = nf_state_snapshot(st);
    int32_t t = 5;
    nf_sampler_params spar = nf_sampler_defaults();
    spar.min_p = 0;
    spar.temperature = 0.2f;
    float *p1 = malloc((size_t)V * sizeof(float)), *p2 = malloc((size_t)V * sizeof(float));
    nf_sampler *ref = nf_sampler_new(&spar, V);
    nf_state *tmp = nf_state_snapshot(base);
    int32_t two[2] = {t, 0};
    cr_assert_eq(nf_forward(be, tmp, two, 1, lg2, 1, NULL), 0);
    nf_sampler_probs(ref, lg2, p1);
    nf_drafter *dr = nf_drafter_model(q8, V, 1, NULL);
    cr_assert_not_null(dr, "%s", nf_error());
    cr_assert_not_null(dr->draft_sampled);
    nf_spec *sp = nf_spec_new(dr, &(nf_spec_params){.mode = NF_SPEC_SPECULATIVE, .draft_max = 2,
                                                    .seed = getenv("NF_SPEC_SEED") ? strtoull(getenv("NF_SPEC_SEED"), NULL, 10) : 7});
    const int N = getenv("NF_SPEC_N") ? atoi(getenv("NF_SPEC_N")) : 6000;
    int *c1 = calloc((size_t)V, sizeof(int));
    int32_t *acc_a = malloc((size_t)N * sizeof(int32_t)), *acc_x2 = malloc((size_t)N * sizeof(int32_t));
    int n_acc = 0;
    nf_sampler *smp = nf_sampler_new(&spar, V);
    for (int it = 0; it < N; it++) {
        nf_state_restore(st, base);
        nf_sampler_reset(smp);
        nf_spec_begin(sp);
        nf_spec_io io = {.be = be, .st = st, .hist = prompt, .n_hist = np, .logits = lg, .smp = smp, .sp = &spar};
        int32_t extra[4];
        int ne;
        cr_assert_eq(nf_spec_feed(sp, &io, t, 2, extra, &ne), 0, "%s", nf_error());
        int32_t x1 = ne >= 1 ? extra[0] : nf_spec_take_pending(sp);
        cr_assert(x1 >= 0 && x1 < V);
        c1[x1]++;
        if (ne >= 1) {
            int32_t x2 = ne >= 2 ? extra[1] : nf_spec_take_pending(sp);
            cr_assert(x2 >= 0 && x2 < V);
            acc_a[n_acc] = x1, acc_x2[n_acc] = x2, n_acc++;
        }
        nf_spec_take_pending(sp);
    }
    const nf_spec_stats *ss = nf_spec_stats_get(sp);
    (void)ss;
    /* the most frequent accepted first draft */
    int *ca = calloc((size_t)V, sizeof(int));
    for (int i = 0; i < n_acc; i++) ca[acc_a[i]]++;
    int32_t a = 0;
    for (int i = 1; i < V; i++)
        if (ca[i] > ca[a]) a = i;
    two[1] = a;
    nf_state_restore(tmp, base);
    cr_assert_eq(nf_forward(be, tmp, two, 2, lg2, 1, NULL), 0);
    nf_sampler_probs(ref, lg2 + V, p2);
    int *c2 = calloc((size_t)V, sizeof(int));
    int n2 = 0;
    for (int i = 0; i < n_acc; i++)
        if (acc_a[i] == a) c2[acc_x2[i]]++, n2++;
    int dof1, dof2;
    double x1s = chi2(c1, p1, V, N, &dof1), x2s = chi2(c2, p2, V, n2, &dof2);
    fprintf(stderr, "spec sampled drafts (q = draft model): first draft accepted in %d/%d cycles; chi2 pos1 %.1f (dof %d), "
                    "pos2|a=%d %.1f (dof %d, n %d)\n", n_acc, N, x1s, dof1, a, x2s, dof2, n2);
    cr_assert_lt(x1s, dof1 + 5 * sqrt(2.0 * dof1) + 10, "position 1 distribution differs from the target");
    cr_assert_lt(x2s, dof2 + 5 * sqrt(2.0 * dof2) + 10, "position 2 distribution differs from the target");
    cr_assert_gt(n2, 200, "too few accepted first drafts to test position 2");
    nf_spec_free(sp);
    nf_sampler_free(smp);
    nf_sampler_free(ref);
    free(c1), free(c2), free(ca), free(acc_a), free(acc_x2), free(p1), free(p2), free(lg), free(lg2);
    nf_state_free(tmp);
    nf_state_free(base);
    nf_state_free(st);
    nf_backend_free(be);
    nf_model_free(m);
    unlink(q8);
}

/* Reasoning tokens decode serially by default: inside <think>…</think> (ids set by nf_spec_set_think_ids) no cycle
 * is started; after </think> (or with reasoning=1) cycles resume. */
Test(spec, reasoning_is_serial) {
    nf_model *m = nf_model_load(base_path);
    cr_assert_not_null(m, "%s", nf_error());
    nf_backend *be = nf_cpu_backend_create(m, 2);
    const int V = m->hp.n_vocab;
    const int32_t OPEN = 10, CLOSE = 11;
    float *lg = malloc((size_t)V * sizeof(float));
    nf_sampler_params spar = nf_sampler_defaults();
    spar.temperature = 0;
    nf_sampler *smp = nf_sampler_new(&spar, V);
    for (int allow = 0; allow < 2; allow++) {
        for (int closed = 0; closed < 2; closed++) {
            /* a periodic context (lookup always has a draft), with <think> (and </think>) inside */
            int32_t h[40];
            for (int i = 0; i < 40; i++) h[i] = 20 + i % 5;
            h[3] = OPEN;
            if (closed) h[8] = CLOSE;
            nf_state *st = nf_state_create(&m->hp, 64);
            cr_assert_eq(nf_prefill(be, st, h, 39, 0, lg, 0, NULL), 0);
            nf_spec *sp = nf_spec_new(nf_drafter_lookup(NULL),
                                      &(nf_spec_params){.mode = NF_SPEC_SPECULATIVE, .draft_max = 3, .reasoning = allow});
            nf_spec_set_think_ids(sp, OPEN, CLOSE);
            nf_spec_begin(sp);
            nf_spec_io io = {.be = be, .st = st, .hist = h, .n_hist = 39, .logits = lg, .smp = smp, .sp = &spar};
            int32_t extra[4];
            int ne;
            cr_assert_eq(nf_spec_feed(sp, &io, h[39], 3, extra, &ne), 0, "%s", nf_error());
            const nf_spec_stats *s = nf_spec_stats_get(sp);
            bool expect_cycle = allow || closed;
            cr_assert_eq(s->cycles, expect_cycle ? 1 : 0, "allow=%d closed=%d: cycles %lld", allow, closed,
                         (long long)s->cycles);
            nf_spec_io fio = io;
            fio.n_hist = 40 + (size_t)ne;
            cr_assert_eq(nf_spec_flush(sp, &fio), 0);
            nf_spec_free(sp);
            nf_state_free(st);
        }
    }
    nf_sampler_free(smp);
    free(lg);
    nf_backend_free(be);
    nf_model_free(m);
}
