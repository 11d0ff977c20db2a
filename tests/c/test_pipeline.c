/* test_pipeline.c — the layer-split forward (model/pipeline.h) on CPU stages against one CPU backend.
 *
 * Models: the four transformers fixtures (tests/data/fixtures/{base,shared,kpool16,nondefault}) converted to F32.
 * For 2- and 3-stage pipelines with uneven splits — right before the first MLA layer, right before the first MoE
 * layer, right before a shared-indexer MLA layer (its selection crosses the stage boundary: fixture "shared"),
 * one layer in the first / last stage — a chunked prefill (all logits, indexer selections dumped) and greedy
 * decode steps give bit-identical logits, selections and greedy tokens; a snapshot of the per-stage states
 * restores the same continuation; each stage's state holds only its layers. Bad splits are refused with a
 * message saying what is wrong. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "convert/convert.h"
#include "cpu/backend_cpu.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/pipeline.h"
#include "model/state.h"
#include "model/state_fill.h"
#include "util/error.h"

#define NPROMPT 23
#define CHUNK 7
#define NDECODE 6
#define NTOK (NPROMPT + NDECODE)

static const char *fixtures[] = {"base", "shared", "kpool16", "nondefault"};
#define NFIX 4
static char paths[NFIX][128];

static void setup(void) {
    for (int i = 0; i < NFIX; i++) {
        snprintf(paths[i], sizeof paths[i], "/tmp/nf-test-pipeline-%d-%s.gguf", (int)getpid(), fixtures[i]);
        char dir[128];
        snprintf(dir, sizeof dir, "tests/data/fixtures/%s", fixtures[i]);
        nf_convert_opts o = {.hf_dir = dir, .out_path = paths[i], .recipe = "f32", .n_threads = 2, .quiet = true,
                             .no_tokenizer = true};
        cr_assert_eq(nf_convert(&o, NULL), 0, "convert %s: %s", fixtures[i], nf_error());
    }
}

static void teardown(void) {
    for (int i = 0; i < NFIX; i++) unlink(paths[i]);
}

TestSuite(pipeline, .init = setup, .fini = teardown, .timeout = 600);

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* One run: chunked prefill of the prompt (all logits) then NDECODE greedy steps; logits [NTOK][V], the greedy
 * tokens, the selection dump. A pipeline of one stage [0, n_layer) is the single-backend reference, run through
 * nf_prefill / nf_forward (not the pipeline code) so that the comparison is against the plain forward. */
typedef struct {
    float *logits;
    int32_t greedy[NDECODE];
    int32_t *sel;
} run_out;

static void run_out_init(run_out *o, const nf_model *m) {
    const nf_hparams *hp = &m->hp;
    o->logits = calloc((size_t)NTOK * hp->n_vocab, sizeof(float));
    o->sel = calloc((size_t)(nf_mla_layer_count(hp) + 1) * NTOK * nf_topk_width(hp), sizeof(int32_t));
    cr_assert(o->logits && o->sel);
}

static void run_out_free(run_out *o) {
    free(o->logits);
    free(o->sel);
}

static void run_single(nf_backend *be, const int32_t *prompt, run_out *o) {
    const int V = be->model->hp.n_vocab;
    nf_topk_dump dump = {o->sel, NTOK};
    nf_state *st = nf_backend_state_create(be, 8);
    cr_assert_not_null(st, "%s", nf_error());
    cr_assert_eq(nf_prefill(be, st, prompt, NPROMPT, CHUNK, o->logits, 1, &dump), 0, "%s", nf_error());
    int32_t tok = argmax(o->logits + (size_t)(NPROMPT - 1) * V, V);
    for (int d = 0; d < NDECODE; d++) {
        o->greedy[d] = tok;
        float *row = o->logits + (size_t)(NPROMPT + d) * V;
        cr_assert_eq(nf_forward(be, st, &tok, 1, row, 0, &dump), 0, "%s", nf_error());
        tok = argmax(row, V);
    }
    nf_state_free(st);
}

/* The same through a pipeline; also checks that each stage's state holds only its layers, and that a
 * snapshot taken after the prefill replays the decode steps bit for bit. */
static void run_pipeline(const nf_pipeline *p, const int32_t *prompt, run_out *o) {
    const nf_hparams *hp = &p->model->hp;
    const int V = hp->n_vocab;
    nf_topk_dump dump = {o->sel, NTOK};
    nf_pipeline_state *ps = nf_pipeline_state_create(p, 8);
    cr_assert_not_null(ps, "%s", nf_error());
    for (int k = 0; k < p->n_stages; k++)
        for (int l = 0; l < hp->n_layer; l++) {
            const nf_layer_state *L = &ps->st[k]->L[l];
            const int held = l >= p->stage[k].layer_begin && l < p->stage[k].layer_end;
            cr_assert_eq(L->kind != NF_STATE_LAYER_ABSENT, held, "stage %d layer %d", k, l);
            if (!held) cr_assert(!L->conv && !L->S && !L->latent && !L->pool_key && !L->open_key && !L->open_gate);
        }
    cr_assert_eq(nf_pipeline_prefill(p, ps, prompt, NPROMPT, CHUNK, o->logits, 1, &dump), 0, "%s", nf_error());
    for (int k = 0; k < p->n_stages; k++) cr_assert_eq(ps->st[k]->pos, NPROMPT);
    nf_pipeline_state *snap = nf_pipeline_state_snapshot(ps);
    cr_assert_not_null(snap, "%s", nf_error());
    int32_t tok = argmax(o->logits + (size_t)(NPROMPT - 1) * V, V);
    for (int d = 0; d < NDECODE; d++) {
        o->greedy[d] = tok;
        float *row = o->logits + (size_t)(NPROMPT + d) * V;
        cr_assert_eq(nf_pipeline_forward(p, ps, &tok, 1, row, 0, &dump, NULL), 0, "%s", nf_error());
        tok = argmax(row, V);
    }
    /* replay from the snapshot: the same tokens give the same logits */
    cr_assert_eq(nf_pipeline_state_restore(ps, snap), 0, "%s", nf_error());
    cr_assert_eq(nf_pipeline_state_pos(ps), NPROMPT);
    float *row = malloc((size_t)V * sizeof(float));
    for (int d = 0; d < NDECODE; d++) {
        cr_assert_eq(nf_pipeline_forward(p, ps, &o->greedy[d], 1, row, 0, NULL, NULL), 0, "%s", nf_error());
        cr_assert_eq(memcmp(row, o->logits + (size_t)(NPROMPT + d) * V, (size_t)V * sizeof(float)), 0,
                     "decode step %d after restore differs", d);
    }
    free(row);
    nf_pipeline_state_free(snap);
    nf_pipeline_state_free(ps);
}

static int first_layer(const nf_hparams *hp, int from, int (*pred)(const nf_hparams *, int)) {
    for (int l = from; l < hp->n_layer; l++)
        if (pred(hp, l)) return l;
    return -1;
}
static int is_mla(const nf_hparams *hp, int l) { return hp->layer_kind[l] == NF_LAYER_MLA; }
static int is_moe(const nf_hparams *hp, int l) { return hp->layer_moe[l]; }
static int is_shared_mla(const nf_hparams *hp, int l) { return is_mla(hp, l) && hp->indexer_shared[l]; }

/* the split lists tried on a model: {n_starts, starts...}; a list that is not valid for the model is skipped */
static int splits_for(const nf_hparams *hp, int out[][3]) {
    const int L = hp->n_layer, mla = first_layer(hp, 1, is_mla), moe = first_layer(hp, 1, is_moe),
              shared = first_layer(hp, 1, is_shared_mla);
    int n = 0;
    if (mla > 0) out[n][0] = 1, out[n][1] = mla, n++;
    if (moe > 0) out[n][0] = 1, out[n][1] = moe, n++;
    if (mla > 0 && moe > 0 && mla != moe) {
        out[n][0] = 2, out[n][1] = mla < moe ? mla : moe, out[n][2] = mla < moe ? moe : mla, n++;
    }
    out[n][0] = 2, out[n][1] = 1, out[n][2] = L - 1, n++;
    if (shared > 0) {
        out[n][0] = 1, out[n][1] = shared, n++;
        if (shared + 1 < L) out[n][0] = 2, out[n][1] = shared, out[n][2] = shared + 1, n++;
        /* the last shared layer alone in the last stage */
        int last_shared = shared;
        for (int l = shared; l < L; l++)
            if (is_shared_mla(hp, l)) last_shared = l;
        if (last_shared > 2) out[n][0] = 2, out[n][1] = 2, out[n][2] = last_shared, n++;
    }
    return n;
}

Test(pipeline, cpu_stages_bit_identical_to_one_backend) {
    int shared_crossings = 0;
    for (int fi = 0; fi < NFIX; fi++) {
        nf_model *m = nf_model_load(paths[fi]);
        cr_assert_not_null(m, "%s", nf_error());
        const nf_hparams *hp = &m->hp;
        const int V = hp->n_vocab, W = nf_topk_width(hp), M = nf_mla_layer_count(hp);
        int32_t prompt[NPROMPT];
        uint64_t s = 11 + (uint64_t)fi;
        for (int i = 0; i < NPROMPT; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            prompt[i] = (int32_t)((s >> 33) % (uint64_t)V);
        }
        nf_backend *ref_be = nf_cpu_backend_create(m, 2);
        cr_assert_not_null(ref_be, "%s", nf_error());
        run_out ref;
        run_out_init(&ref, m);
        run_single(ref_be, prompt, &ref);

        int splits[8][3];
        const int n_splits = splits_for(hp, splits);
        cr_assert_geq(n_splits, 2);
        for (int si = 0; si < n_splits; si++) {
            const int n_stages = splits[si][0] + 1;
            nf_stage stages[3];
            cr_assert_eq(nf_pipeline_ranges(hp->n_layer, splits[si][0], &splits[si][1], stages), 0, "%s", nf_error());
            for (int k = 0; k < n_stages; k++) {
                stages[k].be = nf_cpu_backend_create(m, 1 + k % 2);
                cr_assert_not_null(stages[k].be, "%s", nf_error());
            }
            for (int k = 1; k < n_stages; k++)
                if (is_shared_mla(hp, stages[k].layer_begin)) shared_crossings++;
            nf_pipeline p;
            cr_assert_eq(nf_pipeline_init(&p, n_stages, stages), 0, "%s", nf_error());
            cr_assert_eq(p.handover_dev, 1, "CPU stages hand over backend to backend (from_peer) by default");
            for (int dev = 0; dev < 2; dev++) { /* through the host, then backend to backend */
                p.handover_dev = dev;
                run_out got;
                run_out_init(&got, m);
                run_pipeline(&p, prompt, &got);
                char what[128];
                snprintf(what, sizeof what, "fixture %s, %d stages split at %d%s%d, hand-over %s", fixtures[fi],
                         n_stages, splits[si][1], n_stages > 2 ? "," : "", n_stages > 2 ? splits[si][2] : 0,
                         dev ? "backend to backend" : "through the host");
                for (int r = 0; r < NTOK; r++)
                    cr_assert_eq(memcmp(got.logits + (size_t)r * V, ref.logits + (size_t)r * V,
                                        (size_t)V * sizeof(float)), 0, "%s: logits of token %d differ", what, r);
                cr_assert_eq(memcmp(got.greedy, ref.greedy, sizeof got.greedy), 0, "%s: greedy tokens differ", what);
                cr_assert_eq(memcmp(got.sel, ref.sel, (size_t)M * NTOK * W * sizeof(int32_t)), 0,
                             "%s: indexer selections differ", what);
                run_out_free(&got);
            }
            for (int k = 0; k < n_stages; k++) nf_backend_free(stages[k].be);
        }
        run_out_free(&ref);
        nf_backend_free(ref_be);
        nf_model_free(m);
    }
    cr_assert_gt(shared_crossings, 0, "no split put a shared-indexer layer first in a stage");
}

/* A wrong hand-over must show: a pipeline whose second stage gets the streams of another prompt differs. This
 * keeps the identity test above from passing on a pipeline that ignored the hand-over. */
Test(pipeline, hand_over_matters) {
    nf_model *m = nf_model_load(paths[0]);
    cr_assert_not_null(m, "%s", nf_error());
    const nf_hparams *hp = &m->hp;
    nf_backend *be = nf_cpu_backend_create(m, 2);
    const int half = hp->n_layer / 2;
    int32_t a[4] = {1, 2, 3, 4}, b[4] = {9, 8, 7, 6};
    const size_t xn = (size_t)4 * hp->hc_count * hp->n_embd;
    float *Xa = malloc(xn * sizeof(float)), *Xb = malloc(xn * sizeof(float));
    float *la = malloc((size_t)hp->n_vocab * sizeof(float)), *lb = malloc((size_t)hp->n_vocab * sizeof(float));
    nf_state *s0 = nf_state_create_layers(hp, 8, 0, half), *s1 = nf_state_create_layers(hp, 8, half, hp->n_layer);
    nf_forward_part p0 = {.layer_begin = 0, .layer_end = half, .X_out = Xa};
    cr_assert_eq(nf_forward_part_run(be, s0, a, 4, &p0, NULL, 0, NULL, NULL), 0, "%s", nf_error());
    nf_state_reset(s0);
    p0.X_out = Xb;
    cr_assert_eq(nf_forward_part_run(be, s0, b, 4, &p0, NULL, 0, NULL, NULL), 0, "%s", nf_error());
    cr_assert_neq(memcmp(Xa, Xb, xn * sizeof(float)), 0);
    nf_forward_part p1 = {.layer_begin = half, .layer_end = hp->n_layer, .X_in = Xa};
    cr_assert_eq(nf_forward_part_run(be, s1, a, 4, &p1, la, 0, NULL, NULL), 0, "%s", nf_error());
    nf_state_reset(s1);
    p1.X_in = Xb;
    cr_assert_eq(nf_forward_part_run(be, s1, a, 4, &p1, lb, 0, NULL, NULL), 0, "%s", nf_error());
    cr_assert_neq(memcmp(la, lb, (size_t)hp->n_vocab * sizeof(float)), 0);
    /* the same with the streams in backend memory (X_dev, the backend-to-backend hand-over): the part reads the
     * incoming streams from its buffer and gives a's logits from a's streams, b's from b's */
    float *Xd = malloc(xn * sizeof(float)), *lc = malloc((size_t)hp->n_vocab * sizeof(float));
    nf_forward_part pd = {.layer_begin = half, .layer_end = hp->n_layer, .X_dev = Xd};
    for (int i = 0; i < 2; i++) {
        memcpy(Xd, i ? Xb : Xa, xn * sizeof(float));
        nf_state_reset(s1);
        cr_assert_eq(nf_forward_part_run(be, s1, a, 4, &pd, lc, 0, NULL, NULL), 0, "%s", nf_error());
        cr_assert_eq(memcmp(lc, i ? lb : la, (size_t)hp->n_vocab * sizeof(float)), 0, "X_dev part, streams %d", i);
    }
    /* and a first part with X_dev leaves its outgoing streams there */
    nf_state_reset(s0);
    nf_forward_part pd0 = {.layer_begin = 0, .layer_end = half, .X_dev = Xd};
    cr_assert_eq(nf_forward_part_run(be, s0, b, 4, &pd0, NULL, 0, NULL, NULL), 0, "%s", nf_error());
    cr_assert_eq(memcmp(Xd, Xb, xn * sizeof(float)), 0);
    /* host buffers and X_dev together are refused */
    nf_forward_part both = {.layer_begin = half, .layer_end = hp->n_layer, .X_in = Xa, .X_dev = Xd};
    cr_assert_eq(nf_forward_part_run(be, s1, a, 4, &both, lc, 0, NULL, NULL), -1);
    cr_assert(strstr(nf_error(), "not both"), "%s", nf_error());
    free(Xd), free(lc);
    nf_state_free(s0);
    nf_state_free(s1);
    free(Xa), free(Xb), free(la), free(lb);
    nf_backend_free(be);
    nf_model_free(m);
}

static void expect_refused(int n, const nf_stage *stages, const char *needle) {
    nf_pipeline p;
    nf_clear_error();
    cr_assert_eq(nf_pipeline_init(&p, n, stages), -1, "accepted a bad split (expected: %s)", needle);
    cr_assert(strstr(nf_error(), needle), "message '%s' lacks '%s'", nf_error(), needle);
}

static void expect_ranges_refused(int n_layer, int n_starts, const int *starts, const char *needle) {
    nf_stage st[NF_MAX_STAGES];
    nf_clear_error();
    cr_assert_eq(nf_pipeline_ranges(n_layer, n_starts, starts, st), -1, "accepted (expected: %s)", needle);
    cr_assert(strstr(nf_error(), needle), "message '%s' lacks '%s'", nf_error(), needle);
}

Test(pipeline, bad_splits_are_refused) {
    nf_model *m = nf_model_load(paths[0]);
    cr_assert_not_null(m, "%s", nf_error());
    const int L = m->hp.n_layer;
    cr_assert_geq(L, 4);
    nf_backend *be = nf_cpu_backend_create(m, 1);
    nf_stage ok[2] = {{be, 0, 3}, {be, 3, L}};
    nf_pipeline p;
    cr_assert_eq(nf_pipeline_init(&p, 2, ok), 0, "%s", nf_error());

    nf_stage empty[3] = {{be, 0, 3}, {be, 3, 3}, {be, 3, L}};
    expect_refused(3, empty, "stage 1 is empty");
    nf_stage out_of_range[2] = {{be, 0, 3}, {be, 3, L + 1}};
    expect_refused(2, out_of_range, "outside the model's layers");
    nf_stage negative[2] = {{be, -1, 3}, {be, 3, L}};
    expect_refused(2, negative, "outside the model's layers");
    nf_stage descending[2] = {{be, 3, L}, {be, 0, 3}};
    expect_refused(2, descending, "stage 0 starts at layer 3 but must start at layer 0");
    nf_stage gap[2] = {{be, 0, 2}, {be, 3, L}};
    expect_refused(2, gap, "stage 1 starts at layer 3 but must start at layer 2");
    nf_stage overlap[2] = {{be, 0, 3}, {be, 2, L}};
    expect_refused(2, overlap, "must start at layer 3");
    nf_stage short_[2] = {{be, 0, 3}, {be, 3, L - 1}};
    expect_refused(2, short_, "not all layers covered");
    nf_stage nobe[2] = {{be, 0, 3}, {NULL, 3, L}};
    expect_refused(2, nobe, "stage 1 has no backend");
    expect_refused(0, ok, "0 stages");

    int s1[] = {3, 3};
    expect_ranges_refused(L, 2, s1, "ascending");
    int s2[] = {4, 2};
    expect_ranges_refused(L, 2, s2, "ascending");
    int s3[] = {0};
    expect_ranges_refused(L, 1, s3, "ascending");
    int s4[] = {L};
    expect_ranges_refused(L, 1, s4, "ascending");
    int s5[] = {L + 2};
    expect_ranges_refused(L, 1, s5, "outside the model's layers");
    nf_stage st[2];
    int s6[] = {2};
    cr_assert_eq(nf_pipeline_ranges(L, 1, s6, st), 0);
    cr_assert(st[0].layer_begin == 0 && st[0].layer_end == 2 && st[1].layer_begin == 2 && st[1].layer_end == L);

    /* a backend holding only some layers' weights (a CUDA stage backend, backend.h layer_begin/layer_end) is not
     * asked for others, and its states hold only its layers */
    nf_backend *part = nf_cpu_backend_create(m, 1);
    part->layer_begin = 3;
    part->layer_end = L;
    nf_stage held[2] = {{be, 0, 2}, {part, 2, L}};
    expect_refused(2, held, "holds only layers [3, ");
    nf_state *pst = nf_backend_state_create(part, 8);
    cr_assert_not_null(pst, "%s", nf_error());
    cr_assert(pst->L[2].kind == NF_STATE_LAYER_ABSENT && pst->L[3].kind != NF_STATE_LAYER_ABSENT);
    int32_t tok = 1;
    cr_assert_eq(nf_forward(part, pst, &tok, 1, NULL, 0, NULL), -1);
    cr_assert(strstr(nf_error(), "holds only layers [3, "), "%s", nf_error());
    nf_state_free(pst);
    nf_backend_free(part);

    /* a stage state of other layers cannot be restored into another stage's */
    nf_state *a = nf_state_create_layers(&m->hp, 8, 0, 3), *b = nf_state_create_layers(&m->hp, 8, 3, L);
    cr_assert_eq(nf_state_restore(a, b), -1);
    cr_assert(strstr(nf_error(), "absent"), "%s", nf_error());
    cr_assert_null(nf_state_create_layers(&m->hp, 8, 2, 2));
    nf_state_free(a);
    nf_state_free(b);
    nf_backend_free(be);
    nf_model_free(m);
}

/* The pipeline behind the one-backend interfaces (nf_pipeline_backend_create): nf_prefill / nf_forward,
 * checkpoint/rollback, snapshot/restore and the context limit on its hooked state behave as on one backend. */
Test(pipeline, as_one_backend) {
    nf_model *m = nf_model_load(paths[1]); /* shared */
    cr_assert_not_null(m, "%s", nf_error());
    const int V = m->hp.n_vocab;
    int32_t prompt[NPROMPT];
    for (int i = 0; i < NPROMPT; i++) prompt[i] = (int32_t)((i * 37 + 5) % V);
    nf_backend *one = nf_cpu_backend_create(m, 2);
    run_out ref;
    run_out_init(&ref, m);
    run_single(one, prompt, &ref);

    nf_stage stages[3];
    int starts[] = {2, 4};
    cr_assert_eq(nf_pipeline_ranges(m->hp.n_layer, 2, starts, stages), 0);
    for (int k = 0; k < 3; k++) stages[k].be = nf_cpu_backend_create(m, 1);
    nf_pipeline p;
    cr_assert_eq(nf_pipeline_init(&p, 3, stages), 0, "%s", nf_error());
    nf_backend *fb = nf_pipeline_backend_create(&p);
    cr_assert_not_null(fb, "%s", nf_error());
    run_out got;
    run_out_init(&got, m);
    run_single(fb, prompt, &got); /* the same driver code as the reference */
    cr_assert_eq(memcmp(got.logits, ref.logits, (size_t)NTOK * V * sizeof(float)), 0);
    cr_assert_eq(memcmp(got.greedy, ref.greedy, sizeof got.greedy), 0);

    /* checkpoint / rollback and snapshot / restore on the hooked state */
    nf_state *st = nf_backend_state_create(fb, 8);
    cr_assert_not_null(st, "%s", nf_error());
    nf_state_set_limit(st, NPROMPT + 2);
    cr_assert_eq(nf_prefill(fb, st, prompt, NPROMPT, CHUNK, NULL, 0, NULL), 0, "%s", nf_error());
    cr_assert_eq(st->pos, NPROMPT);
    nf_state_ckpt ck = {0};
    cr_assert_eq(nf_state_checkpoint(st, &ck), 0, "%s", nf_error());
    nf_state *snap = nf_state_snapshot(st);
    cr_assert_not_null(snap, "%s", nf_error());
    float *row = malloc((size_t)V * sizeof(float));
    for (int round = 0; round < 3; round++) {
        for (int d = 0; d < 2; d++) {
            cr_assert_eq(nf_forward(fb, st, &ref.greedy[d], 1, row, 0, NULL), 0, "%s", nf_error());
            cr_assert_eq(memcmp(row, ref.logits + (size_t)(NPROMPT + d) * V, (size_t)V * sizeof(float)), 0,
                         "round %d step %d", round, d);
        }
        /* the limit holds on the pipeline's state */
        cr_assert_eq(nf_forward(fb, st, &ref.greedy[2], 1, row, 0, NULL), -1);
        cr_assert(strstr(nf_error(), "context size"), "%s", nf_error());
        if (round == 0) cr_assert_eq(nf_state_rollback(st, &ck), 0, "%s", nf_error());
        else cr_assert_eq(nf_state_restore(st, snap), 0, "%s", nf_error());
        cr_assert_eq(st->pos, NPROMPT);
    }
    free(row);
    nf_state_ckpt_free(&ck);
    nf_state_free(snap);
    nf_state_free(st);
    run_out_free(&got);
    run_out_free(&ref);
    nf_backend_free(fb);
    for (int k = 0; k < 3; k++) nf_backend_free(stages[k].be);
    nf_backend_free(one);
    nf_model_free(m);
}

/* --fill synthetic on a pipeline's state (nf-bench --gpus N --fill synthetic): filling the hooked pipeline state
 * writes what one state's fill writes, layer by layer (read back through restore into a host state), the scales
 * measured through the pipeline state equal those of one state after the same prefill, and decode steps after
 * the fill give the same logits as one backend after the same fill; a host state restores into the pipeline. */
Test(pipeline, synthetic_fill_and_measure) {
    nf_model *m = nf_model_load(paths[1]); /* shared */
    cr_assert_not_null(m, "%s", nf_error());
    const nf_hparams *hp = &m->hp;
    const int V = hp->n_vocab, kpool = hp->idx_kpool;
    const int n_pre = kpool + 3, to = 3 * kpool + 5;
    int32_t *ids = malloc((size_t)n_pre * sizeof(int32_t));
    for (int i = 0; i < n_pre; i++) ids[i] = (int32_t)((i * 29 + 3) % V);
    nf_backend *one = nf_cpu_backend_create(m, 2);
    nf_stage stages[2];
    int starts[] = {hp->n_layer / 2};
    cr_assert_eq(nf_pipeline_ranges(hp->n_layer, 1, starts, stages), 0);
    for (int k = 0; k < 2; k++) stages[k].be = nf_cpu_backend_create(m, 1);
    nf_pipeline p;
    cr_assert_eq(nf_pipeline_init(&p, 2, stages), 0, "%s", nf_error());
    nf_backend *fb = nf_pipeline_backend_create(&p);
    cr_assert_not_null(fb, "%s", nf_error());
    nf_state *s1 = nf_backend_state_create(one, 8), *sp = nf_backend_state_create(fb, 8);
    cr_assert(s1 && sp, "%s", nf_error());
    cr_assert_eq(nf_prefill(one, s1, ids, n_pre, 5, NULL, 0, NULL), 0, "%s", nf_error());
    cr_assert_eq(nf_prefill(fb, sp, ids, n_pre, 5, NULL, 0, NULL), 0, "%s", nf_error());
    nf_state_fill_scales a, b;
    cr_assert_eq(nf_state_fill_measure(hp, s1, &a), 0, "%s", nf_error());
    cr_assert_eq(nf_state_fill_measure(hp, sp, &b), 0, "%s", nf_error());
    cr_assert_eq(memcmp(&a, &b, sizeof a), 0, "the scales measured through the pipeline state differ");
    int nonzero = 0;
    for (int l = 0; l < hp->n_layer; l++) nonzero += a.L[l].latent > 0 || a.L[l].kda_S > 0;
    cr_assert_eq(nonzero, hp->n_layer);
    cr_assert_eq(nf_state_fill(s1, to, 7, &a), 0, "%s", nf_error());
    cr_assert_eq(nf_state_fill(sp, to, 7, &a), 0, "%s", nf_error());
    cr_assert_eq(sp->pos, to);
    /* read back: every layer's arrays equal */
    nf_state *h = nf_state_create_like(s1, to);
    cr_assert_eq(nf_state_restore(h, sp), 0, "%s", nf_error());
    cr_assert_eq(h->pos, to);
    for (int l = 0; l < hp->n_layer; l++) {
        const nf_layer_state *x = &h->L[l], *y = &s1->L[l];
        if (x->kind == NF_LAYER_KDA) {
            cr_assert_eq(memcmp(x->S, y->S, (size_t)h->kda_heads * h->kda_hd * h->kda_hd * sizeof(float)), 0, "S %d", l);
            cr_assert_eq(memcmp(x->conv, y->conv, (size_t)h->conv_rows * h->conv_width * sizeof(float)), 0, "conv %d", l);
        } else {
            cr_assert_eq(memcmp(x->latent, y->latent, (size_t)to * h->kv_lora * sizeof(float)), 0, "latent %d", l);
            if (!hp->indexer_shared[l]) /* a shared layer's pooled keys are never written nor read */
                cr_assert_eq(memcmp(x->pool_key, y->pool_key, (size_t)(to / kpool) * h->idx_hd * sizeof(float)), 0,
                             "pooled keys %d", l);
        }
    }
    /* decode after the fill */
    float *r1 = malloc((size_t)V * sizeof(float)), *r2 = malloc((size_t)V * sizeof(float));
    nf_state *back = nf_backend_state_create(fb, 8);
    cr_assert_not_null(back, "%s", nf_error());
    cr_assert_eq(nf_state_restore(back, h), 0, "%s", nf_error()); /* host -> pipeline */
    cr_assert_eq(back->pos, to);
    for (int d = 0; d < 3; d++) {
        int32_t t = (int32_t)((d * 11 + 1) % V);
        cr_assert_eq(nf_forward(one, s1, &t, 1, r1, 0, NULL), 0, "%s", nf_error());
        cr_assert_eq(nf_forward(fb, sp, &t, 1, r2, 0, NULL), 0, "%s", nf_error());
        cr_assert_eq(memcmp(r1, r2, (size_t)V * sizeof(float)), 0, "decode step %d after the fill", d);
        cr_assert_eq(nf_forward(fb, back, &t, 1, r2, 0, NULL), 0, "%s", nf_error());
        cr_assert_eq(memcmp(r1, r2, (size_t)V * sizeof(float)), 0, "decode step %d after restoring from the host", d);
    }
    free(r1), free(r2), free(ids);
    nf_state_free(back);
    nf_state_free(h);
    nf_state_free(s1);
    nf_state_free(sp);
    nf_backend_free(fb);
    for (int k = 0; k < 2; k++) nf_backend_free(stages[k].be);
    nf_backend_free(one);
    nf_model_free(m);
}
