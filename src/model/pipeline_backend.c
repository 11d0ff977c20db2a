/* pipeline_backend.c — a pipeline (pipeline.h) behind the nf_backend / nf_state interfaces, so code written for
 * one backend (nf_prefill, nf_forward, snapshot/restore, checkpoint/rollback: nf-bench's sweep) runs a pipeline
 * unchanged. The backend's `forward` op hands each call to nf_pipeline_forward; its states are hooked nf_states
 * (state.h) whose `device` is the nf_pipeline_state and whose L[] carries the layer kinds without arrays. */
#include "model/pipeline.h"

#include <stdlib.h>

#include "model/state_fill.h"
#include "util/error.h"

static nf_pipeline_state *stages_of(const nf_state *st) { return (nf_pipeline_state *)st->device; }

static void h_free(nf_state *st);
static void h_reset(nf_state *st);
static int h_reserve(nf_state *st, int64_t n);
static nf_state *h_snapshot(const nf_state *st);
static int h_restore(nf_state *dst, const nf_state *src);
static int h_checkpoint(const nf_state *st, nf_state_ckpt *ck);
static int h_rollback(nf_state *st, const nf_state_ckpt *ck);
static void h_ckpt_free(nf_state_ckpt *ck);

static int h_fill(nf_state *st, int64_t to, uint64_t seed, const struct nf_state_fill_scales *sc);

static const nf_state_hooks pipeline_hooks = {h_free, h_reset, h_reserve, h_snapshot, h_restore, h_checkpoint,
                                              h_rollback, h_ckpt_free, h_fill};

/* a hooked state around ps (owned): dims from stage 0's state, layer kinds from the model (hp) or from the state
 * `like` */
static nf_state *wrap(nf_pipeline_state *ps, const nf_hparams *hp, const nf_state *like) {
    const int n_layer = ps->st[0]->n_layer;
    nf_state *st = calloc(1, sizeof *st);
    nf_layer_state *L = calloc((size_t)n_layer, sizeof *L);
    if (!st || !L) {
        free(st);
        free(L);
        nf_pipeline_state_free(ps);
        return (void)nf_fail("pipeline state: out of memory"), NULL;
    }
    *st = *ps->st[0];
    st->L = L;
    for (int l = 0; l < n_layer; l++) L[l].kind = hp ? hp->layer_kind[l] : like->L[l].kind;
    st->pos = ps->st[0]->pos;
    st->cap = ps->st[0]->cap;
    st->limit = 0;
    st->hooks = &pipeline_hooks;
    st->device = ps;
    return st;
}

static void h_free(nf_state *st) {
    nf_pipeline_state_free(stages_of(st));
    free(st->L);
    free(st);
}

static void h_reset(nf_state *st) {
    nf_pipeline_state_reset(stages_of(st));
    st->pos = 0;
}

static int h_reserve(nf_state *st, int64_t n) {
    nf_pipeline_state *ps = stages_of(st);
    for (int k = 0; k < ps->n_stages; k++)
        if (nf_state_reserve(ps->st[k], n) < 0) return nf_fail_prefix("pipeline stage %d", k);
    st->cap = ps->st[0]->cap;
    return 0;
}

static nf_state *h_snapshot(const nf_state *st) {
    nf_pipeline_state *c = nf_pipeline_state_snapshot(stages_of(st));
    if (!c) return NULL;
    nf_state *w = wrap(c, NULL, st);
    if (w) w->limit = st->limit;
    return w;
}

/* a pipeline state and a host state holding every layer: each stage's layers through a host state of its own */
static int restore_across(nf_state *dst, const nf_state *src) {
    const int to_host = src->hooks == &pipeline_hooks;
    const nf_state *pst = to_host ? src : dst, *host = to_host ? dst : src;
    if (host->hooks)
        return nf_fail("state restore: a pipeline state restores from / into a host state or a state of the same "
                       "pipeline");
    nf_pipeline_state *ps = stages_of(pst);
    for (int k = 0; k < ps->n_stages; k++) {
        nf_state *t = nf_state_create_like(ps->st[k], src->pos > 16 ? src->pos : 16);
        int rc = t ? 0 : -1;
        if (rc == 0 && to_host) rc = nf_state_restore(t, ps->st[k]) < 0 || nf_state_copy_layers(dst, t) < 0 ? -1 : 0;
        else if (rc == 0) rc = nf_state_copy_layers(t, src) < 0 || nf_state_restore(ps->st[k], t) < 0 ? -1 : 0;
        nf_state_free(t);
        if (rc < 0) return nf_fail_prefix("pipeline stage %d", k);
    }
    dst->pos = src->pos;
    if (!to_host) dst->cap = ps->st[0]->cap;
    return 0;
}

static int h_restore(nf_state *dst, const nf_state *src) {
    if (dst->hooks != &pipeline_hooks || src->hooks != &pipeline_hooks) return restore_across(dst, src);
    if (nf_pipeline_state_restore(stages_of(dst), stages_of(src)) < 0) return -1;
    dst->pos = src->pos;
    dst->cap = stages_of(dst)->st[0]->cap;
    return 0;
}

/* nf_state_fill of each stage's state (each writes only the layers it holds, with the same keys as one state) */
static int h_fill(nf_state *st, int64_t to, uint64_t seed, const struct nf_state_fill_scales *sc) {
    nf_pipeline_state *ps = stages_of(st);
    for (int k = 0; k < ps->n_stages; k++)
        if (nf_state_fill(ps->st[k], to, seed, sc) < 0) return nf_fail_prefix("pipeline stage %d", k);
    return 0;
}

/* ck->data holds the stages' checkpoints (an array of nf_state_ckpt ended by one without data), opaque as for any
 * hooked state */
static int h_checkpoint(const nf_state *st, nf_state_ckpt *ck) {
    nf_pipeline_state *ps = stages_of(st);
    nf_state_ckpt *parts = calloc((size_t)ps->n_stages + 1, sizeof *parts);
    if (!parts) return nf_fail("pipeline checkpoint: out of memory");
    size_t bytes = 0;
    for (int k = 0; k < ps->n_stages; k++) {
        if (nf_state_checkpoint(ps->st[k], &parts[k]) < 0) {
            for (int j = 0; j < k; j++) nf_state_ckpt_free(&parts[j]);
            free(parts);
            return nf_fail_prefix("pipeline stage %d", k);
        }
        bytes += parts[k].bytes;
    }
    ck->pos = st->pos;
    ck->bytes = bytes;
    ck->data = (float *)(void *)parts;
    ck->hooks = &pipeline_hooks;
    return 0;
}

static int h_rollback(nf_state *st, const nf_state_ckpt *ck) {
    if (ck->hooks != &pipeline_hooks || !ck->data) return nf_fail("state rollback: not a checkpoint of a pipeline state");
    nf_pipeline_state *ps = stages_of(st);
    const nf_state_ckpt *parts = (const nf_state_ckpt *)(const void *)ck->data;
    for (int k = 0; k < ps->n_stages; k++)
        if (nf_state_rollback(ps->st[k], &parts[k]) < 0) return nf_fail_prefix("pipeline stage %d", k);
    st->pos = ck->pos;
    return 0;
}

static void h_ckpt_free(nf_state_ckpt *ck) {
    nf_state_ckpt *parts = (nf_state_ckpt *)(void *)ck->data;
    for (int k = 0; parts && parts[k].data; k++) nf_state_ckpt_free(&parts[k]);
    free(parts);
    ck->data = NULL;
    ck->bytes = 0;
    ck->hooks = NULL;
}

static const nf_pipeline *pipeline_of(nf_backend *be) { return (const nf_pipeline *)be->impl; }

static nf_state *pb_state_create(nf_backend *be, int64_t cap, int layer_begin, int layer_end) {
    const nf_pipeline *p = pipeline_of(be);
    if (layer_begin != 0 || layer_end != p->model->hp.n_layer)
        return (void)nf_fail("pipeline backend: a state holds every layer (asked for [%d, %d))", layer_begin,
                             layer_end), NULL;
    nf_pipeline_state *ps = nf_pipeline_state_create(p, cap);
    return ps ? wrap(ps, &p->model->hp, NULL) : NULL;
}

static int pb_forward(nf_backend *be, nf_state *st, const int32_t *tokens, int T, float *logits, int all_logits,
                      struct nf_topk_dump *dump, float *hidden) {
    if (st->hooks != &pipeline_hooks)
        return nf_fail("pipeline backend: the state is not a pipeline state (create it with nf_backend_state_create)");
    if (nf_state_reserve(st, st->pos + T) < 0) return -1; /* the context limit lives on the wrapping state */
    int rc = nf_pipeline_forward(pipeline_of(be), stages_of(st), tokens, T, logits, all_logits, dump, hidden);
    st->pos = nf_pipeline_state_pos(stages_of(st));
    return rc;
}

static void pb_destroy(nf_backend *be) { free(be); }

nf_backend *nf_pipeline_backend_create(const nf_pipeline *p) {
    if (!p->n_stages) return (void)nf_fail("pipeline backend: the pipeline has no stages"), NULL;
    nf_backend *be = calloc(1, sizeof *be);
    if (!be) return (void)nf_fail("pipeline backend: out of memory"), NULL;
    be->name = "pipeline";
    be->model = p->model;
    be->impl = (void *)p;
    be->prefill_chunk = p->stage[0].be->prefill_chunk; /* the stages' backends are of one kind */
    be->state_create = pb_state_create;
    be->forward = pb_forward;
    be->destroy = pb_destroy;
    return be;
}
