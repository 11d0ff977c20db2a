/* pipeline.c — the layer-split forward over several backends (pipeline.h): checking the stages, the per-stage
 * states, and the hand-over of the hidden streams (and a shared indexer selection) between stages: backend to
 * backend (from_peer) or through host buffers. The layers themselves run in forward.c (nf_forward_part_run), the
 * one definition of the forward. */
#include "model/pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "util/error.h"

int nf_pipeline_init(nf_pipeline *p, int n, const nf_stage *stages) {
    memset(p, 0, sizeof *p);
    if (n < 1 || n > NF_MAX_STAGES) return nf_fail("pipeline: %d stages (1 to %d supported)", n, NF_MAX_STAGES);
    if (!stages[0].be) return nf_fail("pipeline: stage 0 has no backend");
    const nf_model *m = stages[0].be->model;
    const int n_layer = m->hp.n_layer;
    for (int k = 0; k < n; k++) {
        const nf_stage *s = &stages[k];
        if (!s->be) return nf_fail("pipeline: stage %d has no backend", k);
        if (s->be->model != m) return nf_fail("pipeline: stage %d's backend runs another model than stage 0's", k);
        if (s->layer_begin < 0 || s->layer_end > n_layer)
            return nf_fail("pipeline: stage %d's layers [%d, %d) are outside the model's layers [0, %d)", k,
                           s->layer_begin, s->layer_end, n_layer);
        if (s->layer_begin >= s->layer_end)
            return nf_fail("pipeline: stage %d is empty (layers [%d, %d))", k, s->layer_begin, s->layer_end);
        const int expect = k == 0 ? 0 : stages[k - 1].layer_end;
        if (s->layer_begin != expect)
            return nf_fail("pipeline: stage %d starts at layer %d but must start at layer %d (stages are contiguous "
                           "and ascending, from layer 0)", k, s->layer_begin, expect);
        if (s->be->layer_end && (s->layer_begin < s->be->layer_begin || s->layer_end > s->be->layer_end))
            return nf_fail("pipeline: stage %d runs layers [%d, %d) but its %s backend holds only layers [%d, %d)", k,
                           s->layer_begin, s->layer_end, s->be->name, s->be->layer_begin, s->be->layer_end);
        if (k > 0 && !s->be->from_host)
            return nf_fail("pipeline: stage %d's %s backend cannot take the streams from the host (no from_host)", k,
                           s->be->name);
    }
    if (stages[n - 1].layer_end != n_layer)
        return nf_fail("pipeline: the stages end at layer %d, but the model has %d layers (not all layers covered)",
                       stages[n - 1].layer_end, n_layer);
    p->model = m;
    p->n_stages = n;
    memcpy(p->stage, stages, (size_t)n * sizeof *stages);
    const char *e = getenv("NF_PIPELINE_HANDOVER");
    if (e && *e && strcmp(e, "host") && strcmp(e, "device"))
        return nf_fail("NF_PIPELINE_HANDOVER=%s: host or device", e);
    p->handover_dev = !(e && !strcmp(e, "host"));
    for (int k = 1; k < n; k++)
        if (!stages[k].be->from_peer || stages[k].be->from_peer != stages[k - 1].be->from_peer) p->handover_dev = 0;
    return 0;
}

int nf_pipeline_ranges(int n_layer, int n_starts, const int *starts, nf_stage *stages) {
    if (n_starts < 0 || n_starts + 1 > NF_MAX_STAGES)
        return nf_fail("pipeline: %d stages (1 to %d supported)", n_starts + 1, NF_MAX_STAGES);
    int prev = 0;
    for (int k = 0; k <= n_starts; k++) {
        const int end = k < n_starts ? starts[k] : n_layer;
        if (end < 0 || end > n_layer)
            return nf_fail("pipeline: split at layer %d is outside the model's layers [0, %d)", end, n_layer);
        if (end <= prev)
            return nf_fail("pipeline: split points must be ascending and leave every stage a layer (stage %d would "
                           "be [%d, %d))", k, prev, end);
        stages[k].layer_begin = prev;
        stages[k].layer_end = end;
        prev = end;
    }
    return 0;
}

nf_pipeline_state *nf_pipeline_state_create(const nf_pipeline *p, int64_t cap) {
    nf_pipeline_state *ps = calloc(1, sizeof *ps);
    if (!ps) return (void)nf_fail("pipeline state: out of memory"), NULL;
    ps->n_stages = p->n_stages;
    for (int k = 0; k < p->n_stages; k++) {
        const nf_stage *s = &p->stage[k];
        ps->st[k] = nf_backend_state_create_layers(s->be, cap, s->layer_begin, s->layer_end);
        if (!ps->st[k]) {
            nf_fail_prefix("pipeline stage %d state", k);
            nf_pipeline_state_free(ps);
            return NULL;
        }
    }
    return ps;
}

void nf_pipeline_state_free(nf_pipeline_state *ps) {
    if (!ps) return;
    for (int k = 0; k < ps->n_stages; k++) nf_state_free(ps->st[k]);
    free(ps);
}

void nf_pipeline_state_reset(nf_pipeline_state *ps) {
    for (int k = 0; k < ps->n_stages; k++) nf_state_reset(ps->st[k]);
}

void nf_pipeline_state_set_limit(nf_pipeline_state *ps, int64_t limit) {
    for (int k = 0; k < ps->n_stages; k++) nf_state_set_limit(ps->st[k], limit);
}

int64_t nf_pipeline_state_pos(const nf_pipeline_state *ps) { return ps->st[0]->pos; }

nf_pipeline_state *nf_pipeline_state_snapshot(const nf_pipeline_state *ps) {
    nf_pipeline_state *c = calloc(1, sizeof *c);
    if (!c) return (void)nf_fail("pipeline state: out of memory"), NULL;
    c->n_stages = ps->n_stages;
    for (int k = 0; k < ps->n_stages; k++)
        if (!(c->st[k] = nf_state_snapshot(ps->st[k]))) {
            nf_fail_prefix("pipeline stage %d snapshot", k);
            nf_pipeline_state_free(c);
            return NULL;
        }
    return c;
}

int nf_pipeline_state_restore(nf_pipeline_state *dst, const nf_pipeline_state *src) {
    if (dst->n_stages != src->n_stages)
        return nf_fail("pipeline state restore: %d stages into %d", src->n_stages, dst->n_stages);
    for (int k = 0; k < src->n_stages; k++)
        if (nf_state_restore(dst->st[k], src->st[k]) < 0) return nf_fail_prefix("pipeline stage %d restore", k);
    return 0;
}

size_t nf_pipeline_state_bytes(const nf_pipeline_state *ps) {
    size_t n = 0;
    for (int k = 0; k < ps->n_stages; k++) n += nf_state_bytes(ps->st[k]);
    return n;
}

/* Does stage k need the selection of an earlier stage: is the first MLA layer at or after its first layer a
 * shared-indexer one? (Then the selection also passes through any MLA-less stages in between.) */
static int needs_selection(const nf_pipeline *p, int k) {
    const nf_hparams *hp = &p->model->hp;
    if (k == 0) return 0;
    for (int l = p->stage[k].layer_begin; l < hp->n_layer; l++)
        if (hp->layer_kind[l] == NF_LAYER_MLA) return hp->indexer_shared[l];
    return 0;
}

/* The stages handing over backend to backend: stage k's streams (and selection) live in its backend's memory;
 * stage k+1 copies them into its own with from_peer, after which stage k's buffers are released (from_peer
 * orders stage k's later work after the copy). */
static int forward_dev(const nf_pipeline *p, nf_pipeline_state *ps, const int32_t *tokens, int T, float *logits,
                       int all_logits, nf_topk_dump *dump, float *hidden) {
    const nf_hparams *hp = &p->model->hp;
    const int has_mla = nf_mla_layer_count(hp) > 0;
    const size_t x_bytes = (size_t)T * hp->hc_count * hp->n_embd * sizeof(float);
    const size_t sel_bytes = (size_t)T * nf_topk_width(hp) * sizeof(int32_t);
    float *X_prev = NULL;
    int32_t *sel_prev = NULL;
    nf_backend *prev = NULL;
    int rc = 0;
    for (int k = 0; k < p->n_stages && rc == 0; k++) {
        const nf_stage *s = &p->stage[k];
        nf_backend *be = s->be;
        const int last = k == p->n_stages - 1, sel_in = needs_selection(p, k) && has_mla;
        float *X = be->alloc(be, x_bytes);
        int32_t *sel = has_mla ? be->alloc(be, sel_bytes) : NULL;
        if (!X || (has_mla && !sel)) {
            rc = nf_fail("pipeline stage %d: out of memory for the hand-over of %d tokens", k, T);
        } else if (k > 0) {
            rc = be->from_peer(be, X, prev, X_prev, x_bytes);
            if (rc == 0 && sel_in) rc = be->from_peer(be, sel, prev, sel_prev, sel_bytes);
            if (rc < 0) nf_fail_prefix("pipeline hand-over from stage %d to stage %d", k - 1, k);
        }
        if (prev) { /* the copy has been ordered: the previous stage's buffers may go */
            prev->release(prev, X_prev);
            if (sel_prev) prev->release(prev, sel_prev);
            X_prev = NULL;
            sel_prev = NULL;
        }
        if (rc == 0) {
            nf_forward_part part = {
                .layer_begin = s->layer_begin,
                .layer_end = s->layer_end,
                .X_dev = X,
                .sel_dev = sel,
                .sel_dev_in = sel_in,
                .sel_dev_out = !last && needs_selection(p, k + 1),
            };
            rc = nf_forward_part_run(be, ps->st[k], tokens, T, &part, last ? logits : NULL, all_logits, dump,
                                     last ? hidden : NULL);
            if (rc < 0) nf_fail_prefix("pipeline stage %d (layers %d..%d, %s)", k, s->layer_begin, s->layer_end - 1,
                                       be->name);
        }
        X_prev = X;
        sel_prev = sel;
        prev = be;
    }
    if (prev) {
        if (X_prev) prev->release(prev, X_prev);
        if (sel_prev) prev->release(prev, sel_prev);
    }
    return rc < 0 ? -1 : 0;
}

int nf_pipeline_forward(const nf_pipeline *p, nf_pipeline_state *ps, const int32_t *tokens, int T, float *logits,
                        int all_logits, nf_topk_dump *dump, float *hidden) {
    const nf_hparams *hp = &p->model->hp;
    if (T <= 0) return nf_fail("forward: no tokens");
    if (ps->n_stages != p->n_stages)
        return nf_fail("pipeline forward: the state has %d stages, the pipeline %d", ps->n_stages, p->n_stages);
    for (int t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= hp->n_vocab)
            return nf_fail("forward: token id %d out of range [0, %d)", tokens[t], hp->n_vocab);
    const int64_t pos = ps->st[0]->pos;
    for (int k = 0; k < p->n_stages; k++) {
        if (ps->st[k]->pos != pos)
            return nf_fail("pipeline forward: stage %d's state is at position %lld, stage 0's at %lld", k,
                           (long long)ps->st[k]->pos, (long long)pos);
        /* every stage makes room first: a context limit or out-of-memory stops the forward before any stage moves */
        if (nf_state_reserve(ps->st[k], pos + T) < 0) return nf_fail_prefix("pipeline stage %d", k);
    }
    if (p->n_stages > 1 && p->handover_dev) return forward_dev(p, ps, tokens, T, logits, all_logits, dump, hidden);
    const size_t x_n = (size_t)T * hp->hc_count * hp->n_embd, sel_n = (size_t)T * nf_topk_width(hp);
    float *X[2] = {NULL, NULL};
    int32_t *sel[2] = {NULL, NULL};
    int rc = 0;
    if (p->n_stages > 1) {
        X[0] = malloc(x_n * sizeof(float));
        X[1] = malloc(x_n * sizeof(float));
        sel[0] = malloc(sel_n * sizeof(int32_t) + 1);
        sel[1] = malloc(sel_n * sizeof(int32_t) + 1);
        if (!X[0] || !X[1] || !sel[0] || !sel[1]) {
            rc = nf_fail("pipeline forward: out of memory for the hand-over of %d tokens", T);
            goto done;
        }
    }
    for (int k = 0; k < p->n_stages && rc == 0; k++) {
        const nf_stage *s = &p->stage[k];
        const int last = k == p->n_stages - 1;
        /* stage k reads buffer k%2 and writes buffer (k+1)%2 */
        nf_forward_part part = {
            .layer_begin = s->layer_begin,
            .layer_end = s->layer_end,
            .X_in = k > 0 ? X[k % 2] : NULL,
            .X_out = last ? NULL : X[(k + 1) % 2],
            .sel_in = needs_selection(p, k) ? sel[k % 2] : NULL,
            .sel_out = !last && needs_selection(p, k + 1) ? sel[(k + 1) % 2] : NULL,
        };
        rc = nf_forward_part_run(s->be, ps->st[k], tokens, T, &part, last ? logits : NULL, all_logits, dump,
                                 last ? hidden : NULL);
        if (rc < 0) nf_fail_prefix("pipeline stage %d (layers %d..%d, %s)", k, s->layer_begin, s->layer_end - 1,
                                   s->be->name);
    }
done:
    free(X[0]);
    free(X[1]);
    free(sel[0]);
    free(sel[1]);
    return rc < 0 ? -1 : 0;
}

int nf_pipeline_prefill(const nf_pipeline *p, nf_pipeline_state *ps, const int32_t *tokens, int64_t n, int chunk,
                        float *logits, int all_logits, nf_topk_dump *dump) {
    if (n <= 0) return nf_fail("prefill: no tokens");
    if (chunk <= 0 || chunk > n) chunk = (int)(n > 1 << 20 ? 1 << 20 : n);
    const int64_t V = p->model->hp.n_vocab;
    for (int64_t i = 0; i < n; i += chunk) { /* the chunking of nf_prefill */
        int T = (int)(n - i < chunk ? n - i : chunk);
        int last = i + T == n;
        float *out = NULL;
        if (logits && all_logits) out = logits + (size_t)i * V;
        else if (logits && last) out = logits;
        if (nf_pipeline_forward(p, ps, tokens + i, T, out, all_logits, dump, NULL) < 0) return -1;
    }
    return 0;
}
