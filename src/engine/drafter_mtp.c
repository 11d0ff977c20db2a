/* drafter_mtp.c — the MTP/NextN drafter: the target model's own next-next-token block (spec §2.6), run on the
 * CPU to propose draft tokens for speculative decoding (interface in spec.h).
 *
 * The block (layers[n_layer], bound by the loader when the file has it) is an MLA layer with its own indexer
 * plus a MoE FFN, with a plain residual (no hyper-connection streams). For a token tok_p at position p, with
 * h_{p-1} the target's final hidden state of the previous position (RMSNorm(mean of streams) * output_norm, as
 * vLLM and llama.cpp feed it; zeros at position 0):
 *
 *   e = RMSNorm(embed(tok_p)) * enorm,  g = RMSNorm(h_{p-1}) * hnorm,  x = eh_proj · [e | g]
 *   x += MLA(RMSNorm(x) * attn_norm)          (the block's own latent and indexer cache at position p)
 *   x += MoE(RMSNorm(x) * ffn_norm)
 *   z  = RMSNorm(x) * shared_head_norm,  logits = lm_head · z   → a guess for tok_{p+1}
 *
 * Keeping the block's cache: every target forward is reported through observe(p0, toks, hidden) (the decoder
 * routes them here), and the block appends the entries of those positions (with h_{p-1} from the reported
 * hidden states). Drafting after the context ctx[0..n) (the target has fed ctx[0..n-1); ctx[n-1] was just
 * sampled) runs the block at position n-1 with (h_{n-2}, ctx[n-1]) → d1, then chains: (z, d1) at n → d2, ...,
 * and rolls the block's cache back to n-1 afterwards (the target's verify forward reports the real entries).
 * A target rollback shows up as an observe at a position below the block's: the block rolls back to its
 * checkpoint at the start of the latest observed batch (what speculative verify + re-run does); anything else
 * (the session's prefix reuse to an older checkpoint) cannot be rebuilt without the older hidden states, so
 * the drafter stops proposing until the next prompt starts at position 0.
 *
 * To run the block with the CPU backend's ops unchanged, the drafter views the target model as a one-layer
 * model (layers = target->layers + n_layer, layer 0 = MLA + MoE) with its own backend and a one-layer state.
 * There is no reference for MTP numerics (HF never runs it): tests check that drafts are produced and that the
 * output stays identical to serial decoding whatever they are. */
#include <stdlib.h>
#include <string.h>

#include "cpu/backend_cpu.h"
#include "engine/spec.h"
#include "model/forward.h"
#include "util/error.h"

typedef struct {
    const nf_model *target;
    nf_model mm;          /* the MTP block seen as a one-layer model */
    nf_backend *be;
    nf_state *st;
    int n, hc;
    int32_t V;
    float *last_h;        /* h_{pos-1} (zeros at pos 0) */
    bool synced;
    nf_state_ckpt ck;     /* at the start of the latest observed batch */
    bool have_ck;
    float *ck_h;          /* last_h at ck */
    int32_t *ob_tok;      /* the latest observed batch (tokens, hidden rows), for replays after a rollback */
    float *ob_h;
    int ob_T, ob_cap;
    /* work buffers, grown to T rows */
    int cap_T;
    float *X, *e, *g, *cat, *x, *a, *y, *qr, *q, *z, *hprev, *logits;
    int32_t *sel;
} mtp_impl;

static void grow(mtp_impl *M, int T) {
    if (T <= M->cap_T) return;
    const nf_hparams *hp = &M->mm.hp;
    size_t n = (size_t)M->n, Tz = (size_t)T;
    free(M->X), free(M->e), free(M->g), free(M->cat), free(M->x), free(M->a), free(M->y), free(M->qr), free(M->q);
    free(M->z), free(M->hprev), free(M->sel);
    M->X = nf_xmalloc(Tz * (size_t)M->hc * n * sizeof(float));
    M->e = nf_xmalloc(Tz * n * sizeof(float));
    M->g = nf_xmalloc(Tz * n * sizeof(float));
    M->cat = nf_xmalloc(Tz * 2 * n * sizeof(float));
    M->x = nf_xmalloc(Tz * n * sizeof(float));
    M->a = nf_xmalloc(Tz * n * sizeof(float));
    M->y = nf_xmalloc(Tz * n * sizeof(float));
    M->qr = nf_xmalloc(Tz * (size_t)hp->q_lora_rank * sizeof(float));
    M->q = nf_xmalloc(Tz * (size_t)hp->n_head * hp->qk_nope_dim * sizeof(float));
    M->z = nf_xmalloc(Tz * n * sizeof(float));
    M->hprev = nf_xmalloc(Tz * n * sizeof(float));
    M->sel = nf_xmalloc(Tz * (size_t)nf_topk_width(hp) * sizeof(int32_t));
    M->cap_T = T;
}

#define TRY(call)                                                                                            \
    do {                                                                                                     \
        if ((call) < 0) return -1;                                                                           \
    } while (0)

/* Run the block over T tokens at positions st->pos.. with hprev[T][n] = h_{p-1}; leaves the block output in
 * M->x [T][n] and advances the block's position. */
static int block(mtp_impl *M, const int32_t *toks, const float *hprev, int T) {
    nf_backend *be = M->be;
    const nf_layer *L = &M->mm.layers[0];
    const size_t n = (size_t)M->n;
    grow(M, T);
    TRY(nf_state_reserve(M->st, M->st->pos + T));
    TRY(be->embed(be, toks, T, M->X));
    for (int t = 0; t < T; t++) memcpy(M->a + t * n, M->X + (size_t)t * M->hc * n, n * sizeof(float));
    TRY(be->rmsnorm(be, &L->nextn_enorm, M->a, T, M->e));
    TRY(be->rmsnorm(be, &L->nextn_hnorm, hprev, T, M->g));
    for (int t = 0; t < T; t++) { /* [e | g]: the embedding half first */
        memcpy(M->cat + 2 * t * n, M->e + t * n, n * sizeof(float));
        memcpy(M->cat + 2 * t * n + n, M->g + t * n, n * sizeof(float));
    }
    TRY(be->linear(be, &L->nextn_eh_proj, M->cat, T, M->x));
    TRY(be->rmsnorm(be, &L->attn_norm, M->x, T, M->a));
    TRY(be->mla_project(be, 0, M->st, M->a, T, M->qr, M->q));
    TRY(be->indexer_select(be, 0, M->st, M->a, M->qr, T, M->sel));
    TRY(be->mla_attend(be, 0, M->st, M->q, M->sel, T, M->y));
    for (size_t i = 0; i < (size_t)T * n; i++) M->x[i] += M->y[i];
    TRY(be->rmsnorm(be, &L->ffn_norm, M->x, T, M->a));
    TRY(be->moe_block(be, 0, M->a, T, M->y));
    for (size_t i = 0; i < (size_t)T * n; i++) M->x[i] += M->y[i];
    M->st->pos += T;
    return 0;
}

static void desync(mtp_impl *M) {
    M->synced = false;
    if (M->have_ck) nf_state_ckpt_free(&M->ck);
    M->have_ck = false;
}

static int mtp_observe(nf_drafter *d, int64_t p0, const int32_t *toks, int T, const float *hidden) {
    mtp_impl *M = d->impl;
    const size_t n = (size_t)M->n;
    if (p0 == 0) { /* a new sequence: start over */
        nf_state_reset(M->st);
        memset(M->last_h, 0, n * sizeof(float));
        desync(M);
        M->synced = true;
    } else if (!M->synced) {
        return 0;
    } else if (p0 != M->st->pos) {
        if (M->have_ck && M->ck.pos == p0) {
            if (nf_state_rollback(M->st, &M->ck) < 0) goto fail;
            memcpy(M->last_h, M->ck_h, n * sizeof(float));
        } else {
            desync(M); /* a rollback we cannot replay */
            return 0;
        }
    }
    if (M->have_ck) nf_state_ckpt_free(&M->ck);
    M->have_ck = false;
    if (nf_state_checkpoint(M->st, &M->ck) < 0) goto fail;
    M->have_ck = true;
    memcpy(M->ck_h, M->last_h, n * sizeof(float));
    grow(M, T);
    memcpy(M->hprev, M->last_h, n * sizeof(float));
    if (T > 1) memcpy(M->hprev + n, hidden, (size_t)(T - 1) * n * sizeof(float));
    if (block(M, toks, M->hprev, T) < 0) goto fail;
    memcpy(M->last_h, hidden + (size_t)(T - 1) * n, n * sizeof(float));
    if (T > M->ob_cap) {
        free(M->ob_tok), free(M->ob_h);
        M->ob_tok = nf_xmalloc((size_t)T * sizeof *M->ob_tok);
        M->ob_h = nf_xmalloc((size_t)T * n * sizeof(float));
        M->ob_cap = T;
    }
    memcpy(M->ob_tok, toks, (size_t)T * sizeof *toks);
    memcpy(M->ob_h, hidden, (size_t)T * n * sizeof(float));
    M->ob_T = T;
    return 0;
fail:
    nf_fail_prefix("mtp drafter");
    desync(M);
    return -1;
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static int mtp_draft_any(nf_drafter *d, const int32_t *ctx, size_t n_ctx, int32_t *out, int max, nf_sampler *smp,
                         nf_rng *rng, float *q) {
    mtp_impl *M = d->impl;
    const size_t n = (size_t)M->n;
    if (!M->synced) return 0;
    if (M->st->pos != (int64_t)n_ctx - 1) {
        /* The target rolled back after its latest forward and deferred the accepted tokens (spec.c): when the
         * context continues the block's checkpoint with a prefix of the latest observed batch, replay that
         * prefix from the stored hidden states; otherwise there is no draft. */
        int64_t p0 = M->have_ck ? M->ck.pos : -1;
        int64_t m = (int64_t)n_ctx - 1 - p0;
        if (p0 < 0 || m < 0 || m > M->ob_T || memcmp(ctx + p0, M->ob_tok, (size_t)m * sizeof *ctx)) return 0;
        if (nf_state_rollback(M->st, &M->ck) < 0) goto fail0;
        memcpy(M->last_h, M->ck_h, n * sizeof(float));
        if (m > 0) {
            grow(M, (int)m);
            memcpy(M->hprev, M->ck_h, n * sizeof(float));
            if (m > 1) memcpy(M->hprev + n, M->ob_h, (size_t)(m - 1) * n * sizeof(float));
            if (block(M, ctx + p0, M->hprev, (int)m) < 0) goto fail0;
            memcpy(M->last_h, M->ob_h + (size_t)(m - 1) * n, n * sizeof(float));
        }
    }
    nf_state_ckpt cd;
    if (nf_state_checkpoint(M->st, &cd) < 0) goto fail0;
    grow(M, 1);
    int32_t tok = ctx[n_ctx - 1];
    memcpy(M->hprev, M->last_h, n * sizeof(float));
    const nf_layer *L = &M->mm.layers[0];
    int k = 0;
    for (; k < max; k++) {
        if (block(M, &tok, M->hprev, 1) < 0) goto fail;
        if (M->be->rmsnorm(M->be, &L->nextn_shared_head_norm, M->x, 1, M->z) < 0) goto fail;
        if (M->be->linear(M->be, &M->mm.output, M->z, 1, M->logits) < 0) goto fail;
        if (smp) {
            float *qk = q + (size_t)k * M->V;
            nf_sampler_probs(smp, M->logits, qk);
            out[k] = tok = nf_draw(qk, M->V, rng);
        } else {
            out[k] = tok = argmax(M->logits, M->V);
        }
        memcpy(M->hprev, M->z, n * sizeof(float)); /* chained: the block's own post-norm output */
    }
    if (nf_state_rollback(M->st, &cd) < 0) goto fail;
    nf_state_ckpt_free(&cd);
    return k;
fail:
    nf_state_ckpt_free(&cd);
fail0:
    nf_fail_prefix("mtp drafter");
    desync(M);
    return -1;
}

static int mtp_draft(nf_drafter *d, const int32_t *ctx, size_t n_ctx, int32_t *out, int max) {
    return mtp_draft_any(d, ctx, n_ctx, out, max, NULL, NULL, NULL);
}

static int mtp_draft_sampled(nf_drafter *d, const int32_t *ctx, size_t n_ctx, int32_t *out, int max, nf_sampler *smp,
                             nf_rng *rng, float *q) {
    return mtp_draft_any(d, ctx, n_ctx, out, max, smp, rng, q);
}

static void mtp_destroy(nf_drafter *d) {
    mtp_impl *M = d->impl;
    if (M) {
        if (M->have_ck) nf_state_ckpt_free(&M->ck);
        nf_state_free(M->st);
        nf_backend_free(M->be);
        float *bufs[] = {M->X, M->e, M->g, M->cat, M->x, M->a, M->y, M->qr, M->q, M->z, M->hprev, M->logits,
                         M->last_h, M->ck_h};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
        free(M->sel);
        free(M->ob_tok);
        free(M->ob_h);
        free(M);
    }
    free(d);
}

nf_drafter *nf_drafter_mtp(const nf_model *target, int n_threads) {
    const nf_hparams *hp = &target->hp;
    if (hp->n_nextn <= 0) {
        nf_fail("--draft mtp: the model has no MTP block (nextn_predict_layers = 0)");
        return NULL;
    }
    if (target->n_mtp_bound <= 0) {
        nf_fail("--draft mtp: the model's MTP block is incomplete in the file (convert with nf-convert --mtp)");
        return NULL;
    }
    mtp_impl *M = nf_xcalloc(1, sizeof *M);
    M->target = target;
    M->mm = *target;
    M->mm.layers = target->layers + hp->n_layer;
    nf_hparams *mh = &M->mm.hp;
    mh->n_layer = 1;
    mh->n_nextn = 0;
    mh->n_layer_total = 1;
    mh->layer_kind[0] = NF_LAYER_MLA;
    mh->layer_moe[0] = 1;
    mh->indexer_shared[0] = 0;
    M->n = hp->n_embd;
    M->hc = hp->hc_count;
    M->V = hp->n_vocab;
    nf_drafter *d = nf_xcalloc(1, sizeof *d);
    d->name = "mtp";
    d->impl = M;
    d->draft = mtp_draft;
    d->draft_sampled = mtp_draft_sampled;
    d->observe = mtp_observe;
    d->destroy = mtp_destroy;
    M->be = nf_cpu_backend_create(&M->mm, n_threads);
    if (!M->be) goto fail;
    M->st = nf_state_create(mh, 1024);
    if (!M->st) goto fail;
    M->last_h = nf_xcalloc((size_t)M->n, sizeof(float));
    M->ck_h = nf_xcalloc((size_t)M->n, sizeof(float));
    M->logits = nf_xmalloc((size_t)M->V * sizeof(float));
    return d;
fail:
    nf_fail_prefix("mtp drafter");
    mtp_destroy(d);
    return NULL;
}
