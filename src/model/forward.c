/* forward.c — the forward pass of GLM-5.3-Flash, written once against the backend block interface
 * (see forward.h for the sequence and backend.h for the blocks' contracts). This file owns the order of
 * operations, the buffers that flow between blocks, and the hand-off of indexer selections to shared DSA
 * layers, over all layers or over the layer range of one pipeline stage (nf_forward_part_run, pipeline.h); it
 * never touches activation values itself. */
#include "model/forward.h"

#include <stdlib.h>
#include <string.h>

#include "util/error.h"

void nf_backend_free(nf_backend *be) {
    if (be && be->destroy) be->destroy(be);
}

nf_state *nf_backend_state_create(nf_backend *be, int64_t cap) {
    if (be->layer_end) return nf_backend_state_create_layers(be, cap, be->layer_begin, be->layer_end);
    return nf_backend_state_create_layers(be, cap, 0, be->model->hp.n_layer);
}

/* 0 when the backend holds the weights of layers [l0, l1) (backend.h layer_begin / layer_end) */
static int check_holds(const nf_backend *be, int l0, int l1) {
    if (be->layer_end && (l0 < be->layer_begin || l1 > be->layer_end))
        return nf_fail("forward: layers [%d, %d) asked of a %s backend that holds only layers [%d, %d)", l0, l1,
                       be->name, be->layer_begin, be->layer_end);
    return 0;
}

nf_state *nf_backend_state_create_layers(nf_backend *be, int64_t cap, int layer_begin, int layer_end) {
    if (be->state_create) return be->state_create(be, cap, layer_begin, layer_end);
    return nf_state_create_layers(&be->model->hp, cap, layer_begin, layer_end);
}

int nf_topk_width(const nf_hparams *hp) {
    int w = hp->idx_topk;
    if (hp->idx_select_tail && hp->idx_kpool > 1) w += hp->idx_kpool - 1;
    return w;
}

int nf_mla_layer_count(const nf_hparams *hp) {
    int n = 0;
    for (int l = 0; l < hp->n_layer; l++) n += hp->layer_kind[l] == NF_LAYER_MLA;
    return n;
}

typedef struct {
    float *X, *h, *x, *y, *mix, *qr, *q, *logits;
    int32_t *sel;
} fw_bufs;

#define CHECK(call)                                                                                          \
    do {                                                                                                     \
        if ((call) < 0) goto fail;                                                                           \
    } while (0)

/* the sub-layer's input x = RMSNorm(hc_pre's collapse of the streams) * w: one backend call where the backend
 * fuses the two, else hc_pre then rmsnorm through b->h */
static int hc_pre_normed(nf_backend *be, int il, int site, fw_bufs *b, int T, const nf_tensor *w) {
    if (be->hc_pre_norm) return be->hc_pre_norm(be, il, site, b->X, T, w, b->x, b->mix);
    if (be->hc_pre(be, il, site, b->X, T, b->h, b->mix) < 0) return -1;
    return be->rmsnorm(be, w, b->h, T, b->x);
}

/* the streams' update by the sub-layer just run (hc_post of b->y) and the next site's input: one backend call
 * where the backend fuses them, else hc_post then hc_pre_normed */
static int hc_post_then_pre(nf_backend *be, int il, int site, fw_bufs *b, int T, const nf_tensor *w) {
    if (be->hc_post_pre_norm) return be->hc_post_pre_norm(be, b->X, b->y, il, site, T, w, b->x, b->mix);
    if (be->hc_post(be, b->X, b->y, b->mix, T) < 0) return -1;
    return hc_pre_normed(be, il, site, b, T, w);
}

/* the part's own buffers (X and sel are the caller's when they came with the part: X_dev / sel_dev) */
static void release_all(nf_backend *be, fw_bufs *b, const nf_forward_part *part) {
    void *ps[] = {part->X_dev ? NULL : b->X, b->h, b->x, b->y, b->mix, b->qr, b->q, b->logits,
                  part->sel_dev ? NULL : b->sel};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        if (ps[i]) be->release(be, ps[i]);
}

int nf_forward(nf_backend *be, nf_state *st, const int32_t *tokens, int T, float *logits, int all_logits,
               nf_topk_dump *dump) {
    return nf_forward_ex(be, st, tokens, T, logits, all_logits, dump, NULL);
}

static int forward_blocks(nf_backend *be, nf_state *st, const int32_t *tokens, int T, const nf_forward_part *part,
                          float *logits, int all_logits, nf_topk_dump *dump, float *hidden, int graph);

int nf_forward_ex(nf_backend *be, nf_state *st, const int32_t *tokens, int T, float *logits, int all_logits,
                  nf_topk_dump *dump, float *hidden) {
    if (be->forward) return be->forward(be, st, tokens, T, logits, all_logits, dump, hidden);
    const nf_hparams *hp = &be->model->hp;
    if (T <= 0) return nf_fail("forward: no tokens");
    if (hidden && !be->final_hidden) return nf_fail("forward: the %s backend cannot return hidden states", be->name);
    if (check_holds(be, 0, hp->n_layer) < 0) return -1;
    for (int t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= hp->n_vocab)
            return nf_fail("forward: token id %d out of range [0, %d)", tokens[t], hp->n_vocab);
    if (nf_state_reserve(st, st->pos + T) < 0) return -1;
    const nf_forward_part whole = {.layer_begin = 0, .layer_end = hp->n_layer};
    /* a decode step as one recorded unit: only when nothing has to be read back in the middle of it */
    int graph = be->graph_begin && T == 1 && logits && !hidden && !(dump && dump->buf);
    if (graph) {
        int r = forward_blocks(be, st, tokens, T, &whole, logits, all_logits, dump, hidden, 1);
        if (r <= 0) return r;
        /* r == 1: the recording was not usable; nothing ran */
    }
    return forward_blocks(be, st, tokens, T, &whole, logits, all_logits, dump, hidden, 0);
}

int nf_forward_part_run(nf_backend *be, nf_state *st, const int32_t *tokens, int T, const nf_forward_part *part,
                        float *logits, int all_logits, nf_topk_dump *dump, float *hidden) {
    const nf_hparams *hp = &be->model->hp;
    if (T <= 0) return nf_fail("forward: no tokens");
    if (part->layer_begin < 0 || part->layer_end > hp->n_layer || part->layer_begin >= part->layer_end)
        return nf_fail("forward: layer range [%d, %d) is not a non-empty part of the model's %d layers",
                       part->layer_begin, part->layer_end, hp->n_layer);
    const int dev = part->X_dev != NULL;
    if (dev && (part->X_in || part->X_out || part->sel_in || part->sel_out))
        return nf_fail("forward: a part's streams are either in backend memory (X_dev) or host buffers, not both");
    if (!dev && part->sel_dev) return nf_fail("forward: a part's selection in backend memory needs its streams there");
    if (!part->X_in && !dev && part->layer_begin != 0)
        return nf_fail("forward: a part starting at layer %d needs its incoming streams", part->layer_begin);
    if (!part->X_out && !dev && part->layer_end != hp->n_layer)
        return nf_fail("forward: a part ending before the last layer (%d) must hand its streams on", part->layer_end);
    if ((part->sel_dev_in || part->sel_dev_out) && !part->sel_dev && nf_mla_layer_count(hp) > 0)
        return nf_fail("forward: a part handing a selection over in backend memory needs sel_dev");
    if (check_holds(be, part->layer_begin, part->layer_end) < 0) return -1;
    if (part->X_in && !be->from_host)
        return nf_fail("forward: the %s backend cannot take streams from the host (no from_host op)", be->name);
    if (hidden && !be->final_hidden) return nf_fail("forward: the %s backend cannot return hidden states", be->name);
    if (nf_state_reserve(st, st->pos + T) < 0) return -1;
    return forward_blocks(be, st, tokens, T, part, logits, all_logits, dump, hidden, 0);
}

/* The blocks of one forward, or of one part of it (layers part->layer_begin..layer_end-1). graph: bracket them
 * with the backend's graph_begin / graph_end (returns 1 when the backend could not use the recording: nothing
 * ran, the caller redoes the step directly); only for the whole forward. */
static int forward_blocks(nf_backend *be, nf_state *st, const int32_t *tokens, int T, const nf_forward_part *part,
                          float *logits, int all_logits, nf_topk_dump *dump, float *hidden, int graph) {
    const nf_model *m = be->model;
    const nf_hparams *hp = &m->hp;
    if (graph && be->graph_begin(be) < 0) return 1; /* not recording: the caller runs the step directly */

    const int n = hp->n_embd, hc = hp->hc_count;
    const int width = nf_topk_width(hp);
    const size_t f = sizeof(float);
    fw_bufs b;
    memset(&b, 0, sizeof b);
    b.X = part->X_dev ? part->X_dev : be->alloc(be, (size_t)T * hc * n * f);
    b.h = be->alloc(be, (size_t)T * n * f);
    b.x = be->alloc(be, (size_t)T * n * f);
    b.y = be->alloc(be, (size_t)T * n * f);
    b.mix = be->alloc(be, (size_t)T * (hc + hc * hc) * f);
    int has_mla = nf_mla_layer_count(hp) > 0;
    if (has_mla) {
        b.qr = be->alloc(be, (size_t)T * hp->q_lora_rank * f);
        b.q = be->alloc(be, (size_t)T * hp->n_head * hp->qk_nope_dim * f);
        b.sel = part->sel_dev ? part->sel_dev : be->alloc(be, (size_t)T * width * sizeof(int32_t));
    }
    if (!b.X || !b.h || !b.x || !b.y || !b.mix || (has_mla && (!b.qr || !b.q || !b.sel))) {
        nf_fail("forward: out of memory for %d tokens", T);
        goto fail;
    }

    const size_t x_bytes = (size_t)T * hc * n * f, sel_bytes = (size_t)T * width * sizeof(int32_t);
    int mla_index = 0, have_sel = 0;
    for (int il = 0; il < part->layer_begin; il++) mla_index += hp->layer_kind[il] == NF_LAYER_MLA;
    if (part->X_dev && part->layer_begin > 0) { /* the incoming streams (and selection) are in place */
        have_sel = part->sel_dev_in && has_mla;
    } else if (part->X_in) {
        CHECK(be->from_host(be, b.X, part->X_in, x_bytes));
        if (part->sel_in && has_mla) {
            CHECK(be->from_host(be, b.sel, part->sel_in, sel_bytes));
            have_sel = 1;
        }
    } else {
        CHECK(be->embed(be, tokens, T, b.X));
    }
    for (int il = part->layer_begin; il < part->layer_end; il++) {
        const nf_layer *L = &m->layers[il];
        /* attention site (after the first layer, the previous FFN's hc_post goes with its hc_pre) */
        if (il == part->layer_begin) CHECK(hc_pre_normed(be, il, 0, &b, T, &L->attn_norm));
        else CHECK(hc_post_then_pre(be, il, 0, &b, T, &L->attn_norm));
        if (hp->layer_kind[il] == NF_LAYER_KDA) {
            CHECK(be->kda_block(be, il, st, b.x, T, b.y));
        } else {
            CHECK(be->mla_project(be, il, st, b.x, T, b.qr, b.q));
            if (!hp->indexer_shared[il]) {
                CHECK(be->indexer_select(be, il, st, b.x, b.qr, T, b.sel));
                have_sel = 1;
            } else if (!have_sel) {
                nf_fail("forward: layer %d shares the indexer selection but no full indexer layer precedes it", il);
                goto fail;
            }
            if (dump && dump->buf) {
                for (int t = 0; t < T; t++) {
                    int64_t p = st->pos + t;
                    if (p >= dump->n_pos) break;
                    CHECK(be->to_host(be, dump->buf + ((size_t)mla_index * dump->n_pos + (size_t)p) * width,
                                      b.sel + (size_t)t * width, (size_t)width * sizeof(int32_t)));
                }
            }
            CHECK(be->mla_attend(be, il, st, b.q, b.sel, T, b.y));
            mla_index++;
        }
        /* FFN site, with the attention's hc_post */
        CHECK(hc_post_then_pre(be, il, 1, &b, T, &L->ffn_norm));
        if (hp->layer_moe[il]) CHECK(be->moe_block(be, il, b.x, T, b.y));
        else CHECK(be->dense_mlp(be, il, b.x, T, b.y));
        if (il + 1 == part->layer_end) CHECK(be->hc_post(be, b.X, b.y, b.mix, T));
    }

    if (part->X_out || (part->X_dev && part->layer_end < hp->n_layer)) {
        /* a pipeline stage before the last: the streams (and selection) go on to the next */
        if ((part->sel_out || part->sel_dev_out) && has_mla && !have_sel) {
            nf_fail("forward: layers from %d on share an indexer selection that no layer before produces",
                    part->layer_end);
            goto fail;
        }
        if (part->X_out) {
            CHECK(be->to_host(be, part->X_out, b.X, x_bytes));
            if (part->sel_out && has_mla) CHECK(be->to_host(be, part->sel_out, b.sel, sel_bytes));
        }
        st->pos += T;
        release_all(be, &b, part);
        return 0;
    }
    if (hidden) { /* the trunk's final hidden states (speculative decoding: the MTP block's input) */
        float *hb = be->alloc(be, (size_t)T * n * f);
        if (!hb) {
            nf_fail("forward: out of memory for %d hidden rows", T);
            goto fail;
        }
        int r = be->final_hidden(be, b.X, T, hb);
        if (r == 0) r = be->to_host(be, hidden, hb, (size_t)T * n * f);
        be->release(be, hb);
        if (r < 0) goto fail;
    }
    if (logits) {
        int first = all_logits ? 0 : T - 1;
        int rows = T - first;
        b.logits = be->alloc(be, (size_t)rows * hp->n_vocab * f);
        if (!b.logits) {
            nf_fail("forward: out of memory for %d rows of logits", rows);
            goto fail;
        }
        CHECK(be->head(be, b.X + (size_t)first * hc * n, rows, b.logits));
        if (graph) {
            int r = be->graph_end(be);
            graph = 0; /* ended: nothing to abort from here on */
            if (r != 0) {
                release_all(be, &b, part);
                return r;
            }
        }
        CHECK(be->to_host(be, logits, b.logits, (size_t)rows * hp->n_vocab * f));
    }
    st->pos += T;
    release_all(be, &b, part);
    return 0;
fail:
    release_all(be, &b, part);
    if (graph) {
        /* nothing ran: redo the step with direct calls, where a real error reproduces and is reported */
        be->graph_abort(be);
        return 1;
    }
    return -1;
}

int nf_prefill(nf_backend *be, nf_state *st, const int32_t *tokens, int64_t n, int chunk, float *logits,
               int all_logits, nf_topk_dump *dump) {
    if (n <= 0) return nf_fail("prefill: no tokens");
    if (chunk <= 0 || chunk > n) chunk = (int)(n > 1 << 20 ? 1 << 20 : n);
    const int64_t V = be->model->hp.n_vocab;
    for (int64_t i = 0; i < n; i += chunk) {
        int T = (int)(n - i < chunk ? n - i : chunk);
        int last = i + T == n;
        float *out = NULL;
        if (logits && all_logits) out = logits + (size_t)i * V;
        else if (logits && last) out = logits;
        if (nf_forward(be, st, tokens + i, T, out, all_logits, dump) < 0) return -1;
    }
    return 0;
}
