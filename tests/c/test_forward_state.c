/* test_forward_state.c — the forward pass and the sequence state on a synthetic tiny model (nf-synth's
 * "tiny" preset, F32): prefill in one call == chunked prefill == token-by-token decode (logits and indexer
 * selections), snapshot/restore and checkpoint/rollback reproduce the same continuation, and bad input is
 * rejected with a message. (Parity with transformers is tests/py/test_forward.py.) */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/backend_cpu.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/recipe.h"
#include "model/state.h"
#include "model/synth.h"
#include "util/error.h"

#define N 44

static nf_model *model;
static nf_backend *be;
static int32_t toks[N];
static char path[128];

static void setup(void) {
    nf_hparams hp;
    cr_assert_eq(nf_synth_preset("tiny", &hp), 0);
    hp.n_nextn = 0;
    hp.n_vocab = 512;
    nf_synth_derive(&hp, 0);
    snprintf(path, sizeof path, "/tmp/nf-test-forward-%d.gguf", (int)getpid());
    cr_assert_eq(nf_synth_write(path, &hp, nf_recipe_find("f32"), 7, NULL, NULL, NULL), 0, "%s", nf_error());
    model = nf_model_load(path);
    cr_assert_not_null(model, "%s", nf_error());
    be = nf_cpu_backend_create(model, 2);
    cr_assert_not_null(be, "%s", nf_error());
    uint64_t s = 3;
    for (int i = 0; i < N; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((s >> 33) % (uint64_t)model->hp.n_vocab);
    }
}

static void teardown(void) {
    nf_backend_free(be);
    nf_model_free(model);
    unlink(path);
}

static float max_rel(const float *a, const float *b, int rows, int V) {
    float worst = 0;
    for (int r = 0; r < rows; r++) {
        float mx = 0, d = 0;
        for (int i = 0; i < V; i++) {
            mx = fmaxf(mx, fabsf(a[(size_t)r * V + i]));
            d = fmaxf(d, fabsf(a[(size_t)r * V + i] - b[(size_t)r * V + i]));
        }
        worst = fmaxf(worst, d / (mx > 0 ? mx : 1));
    }
    return worst;
}

TestSuite(forward_state, .init = setup, .fini = teardown);

Test(forward_state, prefill_chunked_and_decode_agree) {
    const int V = model->hp.n_vocab, W = nf_topk_width(&model->hp), M = nf_mla_layer_count(&model->hp);
    cr_assert_gt(M, 0);
    float *ref = malloc(sizeof(float) * N * V), *got = malloc(sizeof(float) * N * V);
    int32_t *sref = malloc(sizeof(int32_t) * M * N * W), *sgot = malloc(sizeof(int32_t) * M * N * W);
    nf_topk_dump dref = {sref, N}, dgot = {sgot, N};
    nf_state *st = nf_state_create(&model->hp, 8); /* small capacity: exercises growth */
    cr_assert_eq(nf_prefill(be, st, toks, N, 0, ref, 1, &dref), 0, "%s", nf_error());
    cr_assert_eq(st->pos, N);
    for (int i = 0; i < N * V; i++) cr_assert(isfinite(ref[i]));
    /* the last query sees N tokens but attends only index_topk of them plus its tail: the indexer drops some */
    int valid = 0;
    for (int w = 0; w < W; w++) valid += sref[(size_t)(N - 1) * W + w] >= 0;
    int kp = model->hp.idx_kpool;
    cr_assert_eq(valid, model->hp.idx_topk + N % kp, "last query attends %d positions", valid);
    int chunks[] = {1, 5, 17, 43};
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        nf_state_reset(st);
        memset(sgot, 0x7f, sizeof(int32_t) * M * N * W);
        cr_assert_eq(nf_prefill(be, st, toks, N, chunks[c], got, 1, &dgot), 0, "%s", nf_error());
        float r = max_rel(ref, got, N, V);
        cr_assert(r <= 1e-5f, "chunk %d: max relative logit difference %g", chunks[c], r);
        cr_assert(memcmp(sref, sgot, sizeof(int32_t) * M * N * W) == 0, "chunk %d: indexer selections differ", chunks[c]);
    }
    nf_state_free(st);
    free(ref);
    free(got);
    free(sref);
    free(sgot);
}

Test(forward_state, snapshot_restore_and_checkpoint_rollback) {
    const int V = model->hp.n_vocab, a = 21, b = N - a;
    float *ref = malloc(sizeof(float) * N * V), *got = malloc(sizeof(float) * b * V);
    nf_state *st = nf_state_create(&model->hp, 16);
    cr_assert_eq(nf_prefill(be, st, toks, N, 0, ref, 1, NULL), 0, "%s", nf_error());

    /* snapshot at a, wander off on other tokens, restore, continue: same as the straight run */
    nf_state_reset(st);
    cr_assert_eq(nf_prefill(be, st, toks, a, 0, NULL, 0, NULL), 0);
    nf_state *snap = nf_state_snapshot(st);
    cr_assert_not_null(snap, "%s", nf_error());
    int32_t other[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    cr_assert_eq(nf_prefill(be, st, other, 9, 4, NULL, 0, NULL), 0);
    cr_assert_eq(nf_state_restore(st, snap), 0, "%s", nf_error());
    cr_assert_eq(st->pos, a);
    cr_assert_eq(nf_prefill(be, st, toks + a, b, 0, got, 1, NULL), 0);
    cr_assert(max_rel(ref + (size_t)a * V, got, b, V) <= 1e-5f, "after restore");

    /* checkpoint at a (not a pool boundary), decode token by token past several pools, roll back, redo */
    nf_state_reset(st);
    cr_assert_eq(nf_prefill(be, st, toks, a, 0, NULL, 0, NULL), 0);
    nf_state_ckpt ck;
    cr_assert_eq(nf_state_checkpoint(st, &ck), 0);
    cr_assert_eq(nf_prefill(be, st, other, 9, 1, NULL, 0, NULL), 0);
    cr_assert_eq(nf_state_rollback(st, &ck), 0, "%s", nf_error());
    cr_assert_eq(st->pos, a);
    cr_assert_eq(nf_prefill(be, st, toks + a, b, 1, got, 1, NULL), 0);
    cr_assert(max_rel(ref + (size_t)a * V, got, b, V) <= 1e-5f, "after rollback");
    /* a checkpoint ahead of the state is refused */
    nf_state_reset(st);
    cr_assert_eq(nf_state_rollback(st, &ck), -1);
    cr_assert(strstr(nf_error(), "ahead") != NULL, "%s", nf_error());
    nf_state_ckpt_free(&ck);
    nf_state_free(snap);
    nf_state_free(st);
    free(ref);
    free(got);
}

Test(forward_state, bad_tokens_are_rejected) {
    nf_state *st = nf_state_create(&model->hp, 16);
    int32_t bad[2] = {0, model->hp.n_vocab};
    cr_assert_eq(nf_forward(be, st, bad, 2, NULL, 0, NULL), -1);
    cr_assert(strstr(nf_error(), "out of range") != NULL, "%s", nf_error());
    cr_assert_eq(st->pos, 0);
    int32_t neg = -1;
    cr_assert_eq(nf_forward(be, st, &neg, 1, NULL, 0, NULL), -1);
    nf_state_free(st);
}

/* The quantized path end to end on a model without discrete choices (every expert used, indexer budget above
 * the sequence length), where Q8_0 rounding can only move the logits a little: Q8 vs F32 of the same weights. */
Test(forward_state, q8_close_to_f32_without_discrete_choices) {
    nf_hparams hp;
    cr_assert_eq(nf_synth_preset("tiny", &hp), 0);
    hp.n_nextn = 0;
    hp.n_vocab = 512;
    hp.n_expert_used = hp.n_expert;
    hp.idx_topk = 64 * hp.idx_kpool;
    nf_synth_derive(&hp, 0);
    const char *recipes[2] = {"f32", "q8"};
    float *out[2];
    int V = 0;
    for (int r = 0; r < 2; r++) {
        char p[160];
        snprintf(p, sizeof p, "/tmp/nf-test-forward-smooth-%s-%d.gguf", recipes[r], (int)getpid());
        cr_assert_eq(nf_synth_write(p, &hp, nf_recipe_find(recipes[r]), 11, NULL, NULL, NULL), 0, "%s", nf_error());
        nf_model *m = nf_model_load(p);
        cr_assert_not_null(m, "%s", nf_error());
        nf_backend *b = nf_cpu_backend_create(m, 2);
        nf_state *st = nf_state_create(&m->hp, N);
        V = m->hp.n_vocab;
        out[r] = malloc(sizeof(float) * N * V);
        cr_assert_eq(nf_prefill(b, st, toks, N, 0, out[r], 1, NULL), 0, "%s", nf_error());
        nf_state_free(st);
        nf_backend_free(b);
        nf_model_free(m);
        unlink(p);
    }
    double mean = 0, mx = 0, amax = 0;
    for (int i = 0; i < N * V; i++) {
        double d = fabs(out[0][i] - out[1][i]);
        mean += d;
        mx = fmax(mx, d);
        amax = fmax(amax, fabs(out[0][i]));
    }
    mean /= (double)N * V;
    cr_log_info("q8 vs f32 (smooth tiny model): mean |dlogit| %.4g, max %.4g, max |logit| %.4g", mean, mx, amax);
    cr_assert(mx <= 0.05 * amax && mean <= 0.01 * amax, "q8 vs f32: mean %g max %g (max |logit| %g)", mean, mx, amax);
    free(out[0]);
    free(out[1]);
}

Test(forward_state, results_do_not_depend_on_thread_count) {
    const int V = model->hp.n_vocab;
    float *a = malloc(sizeof(float) * N * V), *b = malloc(sizeof(float) * N * V);
    nf_backend *b1 = nf_cpu_backend_create(model, 1), *b3 = nf_cpu_backend_create(model, 3);
    nf_state *st = nf_state_create(&model->hp, N);
    cr_assert_eq(nf_prefill(b1, st, toks, N, 9, a, 1, NULL), 0, "%s", nf_error());
    nf_state_reset(st);
    cr_assert_eq(nf_prefill(b3, st, toks, N, 9, b, 1, NULL), 0, "%s", nf_error());
    cr_assert(memcmp(a, b, sizeof(float) * N * V) == 0, "1 vs 3 threads differ");
    nf_state_free(st);
    nf_backend_free(b1);
    nf_backend_free(b3);
    free(a);
    free(b);
}

/* The forward's use of the optional fused block hc_post_pre_norm (backend.h): a table whose fused block runs the
 * CPU's own hc_post, hc_pre and rmsnorm must give the plain table's logits bit for bit, called once between every
 * two sites in order (layer 0's FFN site first; the last layer's hc_post stays a call of its own). */
static nf_backend *fused_inner;
static int fused_calls, fused_bad_order, fused_next_il, fused_next_site;
static int fused_hc_post_pre_norm(nf_backend *fb, float *X, const float *y, int il, int site, int T, const nf_tensor *w,
                                  float *x, float *mix) {
    (void)fb;
    fused_calls++;
    fused_bad_order += il != fused_next_il || site != fused_next_site;
    fused_next_il = site == 1 ? il + 1 : il;
    fused_next_site = !site;
    nf_backend *b = fused_inner;
    const size_t nx = (size_t)T * model->hp.n_embd * sizeof(float);
    float *h = b->alloc(b, nx);
    const int rc = !h || b->hc_post(b, X, y, mix, T) < 0 || b->hc_pre(b, il, site, X, T, h, mix) < 0 ||
                   b->rmsnorm(b, w, h, T, x) < 0 ? -1 : 0;
    if (h) b->release(b, h);
    return rc;
}

Test(forward_state, fused_hc_post_pre_norm_is_used_between_sites) {
    const int V = model->hp.n_vocab, L = model->hp.n_layer;
    float *a = malloc(sizeof(float) * N * V), *b = malloc(sizeof(float) * N * V);
    nf_backend fused = *be; /* the same implementation, one optional block more */
    fused_inner = be;
    fused.hc_post_pre_norm = fused_hc_post_pre_norm;
    nf_state *st = nf_state_create(&model->hp, N);
    cr_assert_eq(nf_prefill(be, st, toks, N, 11, a, 1, NULL), 0, "%s", nf_error());
    nf_state_reset(st);
    fused_calls = fused_bad_order = 0;
    int forwards = 0;
    for (int t0 = 0; t0 < N; t0 += 11, forwards++) {
        fused_next_il = 0, fused_next_site = 1;
        const int n = N - t0 < 11 ? N - t0 : 11;
        cr_assert_eq(nf_prefill(&fused, st, toks + t0, n, 0, b + (size_t)t0 * V, 1, NULL), 0, "%s", nf_error());
    }
    cr_assert_eq(fused_calls, forwards * (2 * L - 1), "%d fused calls for %d forwards of %d layers", fused_calls, forwards, L);
    cr_assert_eq(fused_bad_order, 0, "fused calls out of site order");
    cr_assert(memcmp(a, b, sizeof(float) * N * V) == 0, "the fused block's forward differs from the plain one");
    nf_state_free(st);
    free(a);
    free(b);
}
