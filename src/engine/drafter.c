/* drafter.c — the drafters of speculative decoding (interface in spec.h):
 *
 *   lookup  prompt lookup / n-gram matching against the context itself: no model, no file. Strong where the
 *           output repeats the context (code edits, SQL, JSON, quoting).
 *   model   a separate, smaller GGUF with the same vocabulary: it keeps its own sequence state in step with
 *           the context (one checkpoint at the end of the last context it saw; rollback + batched re-feed of
 *           whatever changed) and drafts greedily, one token per forward.
 *   mtp     the target's own MTP/NextN block: drafter_mtp.c.
 *
 * A drafter only proposes tokens; the verification in spec.c decides, so no drafter can change the output. */
#include <stdlib.h>
#include <string.h>

#include "cpu/backend_cpu.h"
#include "engine/spec.h"
#include "model/forward.h"
#include "util/error.h"

/* ---- lookup ---------------------------------------------------------------------------------------------- */

typedef struct {
    nf_lookup_params p;
} lookup_impl;

nf_lookup_params nf_lookup_defaults(void) {
    nf_lookup_params p = {.min_ngram = 2, .max_ngram = 4, .window = 0};
    return p;
}

/* For the longest suffix ctx[n-g..n) (g = max..min) that also ends earlier at some e < n, take the most recent
 * such e and propose ctx[e..] (up to max tokens, never past n). */
static int lookup_draft(nf_drafter *d, const int32_t *ctx, size_t n, int32_t *out, int max) {
    lookup_impl *L = d->impl;
    size_t lo = 0;
    if (L->p.window > 0 && n > (size_t)L->p.window) lo = n - (size_t)L->p.window;
    for (int g = L->p.max_ngram; g >= L->p.min_ngram; g--) {
        if ((size_t)g >= n) continue;
        const int32_t *suf = ctx + n - g;
        /* candidate ends e (exclusive) with ctx[e-g..e) == suffix, e <= n-1, most recent first */
        for (size_t e = n - 1; e >= lo + (size_t)g; e--) {
            if (ctx[e - 1] == suf[g - 1] && !memcmp(ctx + e - g, suf, (size_t)g * sizeof *ctx)) {
                /* out[k] guesses ctx[n+k]; with the match, ctx[n+k] ~ ctx[e+k], and past the end of the context
                 * the pattern is taken as periodic (period n-e): ctx[e+k] = out[k-(n-e)] */
                size_t period = n - e;
                for (int k = 0; k < max; k++) out[k] = e + (size_t)k < n ? ctx[e + (size_t)k] : out[(size_t)k - period];
                int k = max;
                return k;
            }
            if (e == lo + (size_t)g) break;
        }
    }
    return 0;
}

static void lookup_destroy(nf_drafter *d) {
    free(d->impl);
    free(d);
}

nf_drafter *nf_drafter_lookup(const nf_lookup_params *p) {
    lookup_impl *L = nf_xcalloc(1, sizeof *L);
    L->p = p ? *p : nf_lookup_defaults();
    if (L->p.min_ngram < 1) L->p.min_ngram = 1;
    if (L->p.max_ngram < L->p.min_ngram) L->p.max_ngram = L->p.min_ngram;
    nf_drafter *d = nf_xcalloc(1, sizeof *d);
    d->name = "lookup";
    d->impl = L;
    d->draft = lookup_draft;
    d->destroy = lookup_destroy;
    return d;
}

/* ---- draft model ------------------------------------------------------------------------------------------ */

typedef struct {
    nf_model *m;
    nf_backend *be;
    nf_state *st;
    int32_t V;
    int32_t *h;          /* tokens the draft state has consumed */
    size_t n_h, cap_h;
    nf_state_ckpt ck;    /* at position ck_pos (a prefix of h) */
    bool have_ck;
    float *logits;       /* after h[n_h-1] */
    bool have_logits;
    float *ck_logits;    /* the logits at the checkpoint */
} model_impl;

static void mh_push(model_impl *M, const int32_t *ids, size_t n) {
    if (M->n_h + n > M->cap_h) {
        size_t c = M->cap_h ? M->cap_h : 256;
        while (c < M->n_h + n) c *= 2;
        M->h = nf_xrealloc(M->h, c * sizeof *M->h);
        M->cap_h = c;
    }
    memcpy(M->h + M->n_h, ids, n * sizeof *ids);
    M->n_h += n;
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static void model_reset(model_impl *M) {
    nf_state_reset(M->st);
    M->n_h = 0;
    M->have_logits = false;
    if (M->have_ck) nf_state_ckpt_free(&M->ck);
    M->have_ck = false;
}

/* Greedy (smp NULL) or sampled drafts: the draft state is brought to exactly ctx, checkpointed, then drafts are
 * chosen one per forward (the last one is not fed). */
static int model_draft_any(nf_drafter *d, const int32_t *ctx, size_t n, int32_t *out, int max, nf_sampler *smp,
                           nf_rng *rng, float *q) {
    model_impl *M = d->impl;
    size_t c = 0;
    while (c < n && c < M->n_h && M->h[c] == ctx[c]) c++;
    if (c < M->n_h) {
        if (M->have_ck && (size_t)M->ck.pos <= c) {
            if (nf_state_rollback(M->st, &M->ck) < 0) goto fail;
            M->n_h = (size_t)M->ck.pos;
            memcpy(M->logits, M->ck_logits, (size_t)M->V * sizeof(float));
            M->have_logits = M->n_h > 0;
        } else {
            model_reset(M);
        }
    }
    for (size_t i = 0; i < n; i++)
        if (ctx[i] < 0 || ctx[i] >= M->V) return nf_fail("draft model: token %d out of its vocabulary", ctx[i]);
    while (M->n_h < n) {
        size_t T = n - M->n_h > 256 ? 256 : n - M->n_h;
        if (nf_forward(M->be, M->st, ctx + M->n_h, (int)T, M->logits, 0, NULL) < 0) goto fail;
        mh_push(M, ctx + M->n_h, T);
        M->have_logits = true;
    }
    if (M->have_ck) nf_state_ckpt_free(&M->ck);
    M->have_ck = false;
    if (nf_state_checkpoint(M->st, &M->ck) < 0) goto fail;
    M->have_ck = true;
    memcpy(M->ck_logits, M->logits, (size_t)M->V * sizeof(float));
    for (int k = 0; k < max; k++) {
        if (smp) {
            float *qk = q + (size_t)k * M->V;
            nf_sampler_probs(smp, M->logits, qk);
            out[k] = nf_draw(qk, M->V, rng);
        } else {
            out[k] = argmax(M->logits, M->V);
        }
        if (k + 1 == max) break;
        if (nf_forward(M->be, M->st, &out[k], 1, M->logits, 0, NULL) < 0) goto fail;
        mh_push(M, &out[k], 1);
    }
    /* the logits now follow the last fed draft: the next call rolls back to the checkpoint */
    return max;
fail:
    nf_fail_prefix("draft model");
    model_reset(M);
    return -1;
}

static int model_draft(nf_drafter *d, const int32_t *ctx, size_t n, int32_t *out, int max) {
    return model_draft_any(d, ctx, n, out, max, NULL, NULL, NULL);
}

static int model_draft_sampled(nf_drafter *d, const int32_t *ctx, size_t n, int32_t *out, int max, nf_sampler *smp,
                               nf_rng *rng, float *q) {
    return model_draft_any(d, ctx, n, out, max, smp, rng, q);
}

static void model_destroy(nf_drafter *d) {
    model_impl *M = d->impl;
    if (M) {
        if (M->have_ck) nf_state_ckpt_free(&M->ck);
        nf_state_free(M->st);
        nf_backend_free(M->be);
        nf_model_free(M->m);
        free(M->h);
        free(M->logits);
        free(M->ck_logits);
        free(M);
    }
    free(d);
}

nf_drafter *nf_drafter_model(const char *path, int32_t n_vocab, int n_threads, nf_drafter_backend_fn backend) {
    nf_model *m = nf_model_load(path);
    if (!m) {
        nf_fail_prefix("draft model %s", path);
        return NULL;
    }
    if (n_vocab > 0 && m->hp.n_vocab != n_vocab) {
        nf_fail("draft model %s: vocabulary of %d tokens, the target has %d (the tokenizer must be shared)", path,
                m->hp.n_vocab, n_vocab);
        nf_model_free(m);
        return NULL;
    }
    model_impl *M = nf_xcalloc(1, sizeof *M);
    M->m = m;
    M->V = m->hp.n_vocab;
    nf_drafter *d = nf_xcalloc(1, sizeof *d);
    d->name = "model";
    d->impl = M;
    d->draft = model_draft;
    d->draft_sampled = model_draft_sampled;
    d->destroy = model_destroy;
    M->be = (backend ? backend : nf_cpu_backend_create)(m, n_threads);
    if (!M->be) goto fail;
    M->st = nf_backend_state_create(M->be, 1024);
    if (!M->st) goto fail;
    M->logits = nf_xmalloc((size_t)M->V * sizeof(float));
    M->ck_logits = nf_xmalloc((size_t)M->V * sizeof(float));
    return d;
fail:
    nf_fail_prefix("draft model %s", path);
    model_destroy(d);
    return NULL;
}

nf_drafter *nf_drafter_from_spec(const char *spec, const nf_model *target, int n_threads) {
    if (!spec) {
        nf_fail("draft: no drafter given");
        return NULL;
    }
    if (!strcmp(spec, "lookup")) return nf_drafter_lookup(NULL);
    if (!strcmp(spec, "mtp")) {
        if (!target) {
            nf_fail("draft: mtp needs the target model");
            return NULL;
        }
        return nf_drafter_mtp(target, n_threads);
    }
    if (!strncmp(spec, "model:", 6) && spec[6])
        return nf_drafter_model(spec + 6, target ? target->hp.n_vocab : 0, n_threads, NULL);
    nf_fail("draft: expected lookup, mtp or model:FILE, got '%s'", spec);
    return NULL;
}
