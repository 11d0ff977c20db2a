/* state.c — the per-sequence state: allocation, growth, snapshot/restore and checkpoint/rollback
 * (layout and semantics in state.h). */
#include "model/state.h"

#include <stdlib.h>
#include <string.h>

#include "util/error.h"

static size_t conv_len(const nf_state *st) { return (size_t)st->conv_rows * (size_t)st->conv_width; }
static size_t s_len(const nf_state *st) { return (size_t)st->kda_heads * st->kda_hd * st->kda_hd; }
static size_t open_len(const nf_state *st) { return (size_t)st->kpool * st->idx_hd; }
static int64_t pool_cap(const nf_state *st, int64_t cap) { return cap / st->kpool + 1; }

nf_state *nf_state_create(const nf_hparams *hp, int64_t cap) { return nf_state_create_layers(hp, cap, 0, hp->n_layer); }

nf_state *nf_state_create_layers(const nf_hparams *hp, int64_t cap, int layer_begin, int layer_end) {
    if (layer_begin < 0 || layer_end > hp->n_layer || layer_begin >= layer_end) {
        nf_fail("state: layer range [%d, %d) is not a non-empty part of the model's %d layers", layer_begin, layer_end,
                hp->n_layer);
        return NULL;
    }
    if (cap < 16) cap = 16;
    nf_state *st = calloc(1, sizeof *st);
    if (!st) { nf_fail("state: out of memory"); return NULL; }
    st->n_layer = hp->n_layer;
    st->conv_rows = hp->kda_conv > 1 ? hp->kda_conv - 1 : 0;
    st->conv_width = 3 * hp->kda_n_head * hp->kda_head_dim;
    st->kda_heads = hp->kda_n_head;
    st->kda_hd = hp->kda_head_dim;
    st->kv_lora = hp->kv_lora_rank;
    st->idx_hd = hp->idx_head_dim;
    st->kpool = hp->idx_kpool > 0 ? hp->idx_kpool : 1;
    st->cap = cap;
    st->L = calloc((size_t)st->n_layer, sizeof *st->L);
    if (!st->L) goto oom;
    for (int l = 0; l < st->n_layer; l++) {
        nf_layer_state *L = &st->L[l];
        L->kind = l >= layer_begin && l < layer_end ? hp->layer_kind[l] : NF_STATE_LAYER_ABSENT;
        if (L->kind == NF_STATE_LAYER_ABSENT) continue;
        if (L->kind == NF_LAYER_KDA) {
            L->conv = calloc(conv_len(st) + 1, sizeof(float));
            L->S = calloc(s_len(st), sizeof(float));
            if (!L->conv || !L->S) goto oom;
        } else {
            L->latent = malloc((size_t)cap * st->kv_lora * sizeof(float));
            L->pool_key = malloc((size_t)pool_cap(st, cap) * st->idx_hd * sizeof(float));
            L->open_key = calloc(open_len(st), sizeof(float));
            L->open_gate = calloc(open_len(st), sizeof(float));
            if (!L->latent || !L->pool_key || !L->open_key || !L->open_gate) goto oom;
        }
    }
    return st;
oom:
    nf_state_free(st);
    nf_fail("state: out of memory (capacity %lld tokens)", (long long)cap);
    return NULL;
}

void nf_state_free(nf_state *st) {
    if (!st) return;
    if (st->hooks) { st->hooks->free(st); return; }
    if (st->L) {
        for (int l = 0; l < st->n_layer; l++) {
            nf_layer_state *L = &st->L[l];
            free(L->conv);
            free(L->S);
            free(L->latent);
            free(L->pool_key);
            free(L->open_key);
            free(L->open_gate);
        }
        free(st->L);
    }
    free(st);
}

void nf_state_reset(nf_state *st) {
    if (st->hooks) { st->hooks->reset(st); return; }
    st->pos = 0;
    for (int l = 0; l < st->n_layer; l++) {
        nf_layer_state *L = &st->L[l];
        if (L->kind == NF_LAYER_KDA) {
            memset(L->conv, 0, conv_len(st) * sizeof(float));
            memset(L->S, 0, s_len(st) * sizeof(float));
        } else if (L->kind == NF_LAYER_MLA) {
            memset(L->open_key, 0, open_len(st) * sizeof(float));
            memset(L->open_gate, 0, open_len(st) * sizeof(float));
        }
    }
}

void nf_state_set_limit(nf_state *st, int64_t limit) { st->limit = limit > 0 ? limit : 0; }

int64_t nf_state_grown_cap(const nf_state *st, int64_t n) {
    int64_t cap = st->cap;
    while (cap < n) cap *= 2;
    if (st->limit > 0 && cap > st->limit) cap = st->limit > n ? st->limit : n;
    return cap;
}

/* bytes of the MLA caches at capacity cap, over all layers */
static double cache_bytes(const nf_state *st, int64_t cap) {
    int n_mla = 0;
    for (int l = 0; l < st->n_layer; l++) n_mla += st->L[l].kind == NF_LAYER_MLA;
    return (double)n_mla * ((double)cap * st->kv_lora + (double)pool_cap(st, cap) * st->idx_hd) * sizeof(float);
}

int nf_state_reserve(nf_state *st, int64_t n) {
    if (st->limit > 0 && n > st->limit)
        return nf_fail("state: %lld tokens exceed the context size of %lld tokens (--ctx)", (long long)n,
                       (long long)st->limit);
    if (st->hooks) return st->hooks->reserve(st, n);
    if (n <= st->cap) return 0;
    const int64_t cap = nf_state_grown_cap(st, n);
    for (int l = 0; l < st->n_layer; l++) {
        nf_layer_state *L = &st->L[l];
        if (L->kind != NF_LAYER_MLA) continue;
        float *lat = realloc(L->latent, (size_t)cap * st->kv_lora * sizeof(float));
        if (!lat) goto oom;
        L->latent = lat;
        float *pk = realloc(L->pool_key, (size_t)pool_cap(st, cap) * st->idx_hd * sizeof(float));
        if (!pk) goto oom;
        L->pool_key = pk;
    }
    st->cap = cap;
    return 0;
oom:
    return nf_fail("state: out of memory growing the caches to %lld tokens (%.2f GB of latent rows and pooled keys)",
                   (long long)cap, cache_bytes(st, cap) / 1e9);
}

/* host states: copy the layers both hold (every layer must be held alike when `same_layers`) */
static int copy_host(nf_state *dst, const nf_state *src, int same_layers, const char *what) {
    if (dst->n_layer != src->n_layer || dst->conv_width != src->conv_width || dst->kv_lora != src->kv_lora ||
        dst->kpool != src->kpool || dst->idx_hd != src->idx_hd || dst->kda_heads != src->kda_heads)
        return nf_fail("%s: states belong to different models", what);
    for (int l = 0; l < src->n_layer; l++) {
        const int sa = src->L[l].kind == NF_STATE_LAYER_ABSENT, da = dst->L[l].kind == NF_STATE_LAYER_ABSENT;
        if (same_layers ? sa != da : !sa && !da && src->L[l].kind != dst->L[l].kind)
            return nf_fail("%s: layer %d is %s in one state and %s in the other", what, l, sa ? "absent" : "held",
                           da ? "absent" : "held");
    }
    if (nf_state_reserve(dst, src->pos) < 0) return -1;
    for (int l = 0; l < src->n_layer; l++) {
        const nf_layer_state *S = &src->L[l];
        nf_layer_state *D = &dst->L[l];
        if (S->kind == NF_STATE_LAYER_ABSENT || D->kind == NF_STATE_LAYER_ABSENT) continue;
        if (S->kind == NF_LAYER_KDA) {
            memcpy(D->conv, S->conv, conv_len(src) * sizeof(float));
            memcpy(D->S, S->S, s_len(src) * sizeof(float));
        } else {
            memcpy(D->latent, S->latent, (size_t)src->pos * src->kv_lora * sizeof(float));
            memcpy(D->pool_key, S->pool_key, (size_t)(src->pos / src->kpool) * src->idx_hd * sizeof(float));
            memcpy(D->open_key, S->open_key, open_len(src) * sizeof(float));
            memcpy(D->open_gate, S->open_gate, open_len(src) * sizeof(float));
        }
    }
    dst->pos = src->pos;
    return 0;
}

int nf_state_restore(nf_state *dst, const nf_state *src) {
    if (dst->hooks) return dst->hooks->restore(dst, src);
    if (src->hooks) return src->hooks->restore(dst, src);
    return copy_host(dst, src, 1, "state restore");
}

int nf_state_copy_layers(nf_state *dst, const nf_state *src) {
    if (dst->hooks || src->hooks) return nf_fail("state copy: host states only");
    return copy_host(dst, src, 0, "state copy");
}

nf_state *nf_state_create_like(const nf_state *st, int64_t cap) {
    nf_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_layer = st->n_layer;
    hp.kda_conv = st->conv_rows + 1;
    hp.kda_n_head = st->kda_heads;
    hp.kda_head_dim = st->kda_hd;
    hp.kv_lora_rank = st->kv_lora;
    hp.idx_head_dim = st->idx_hd;
    hp.idx_kpool = st->kpool;
    int lo = st->n_layer, hi = 0; /* a state holds one contiguous range (nf_state_create_layers) */
    for (int l = 0; l < st->n_layer; l++) {
        if (st->L[l].kind == NF_STATE_LAYER_ABSENT) continue;
        hp.layer_kind[l] = (uint8_t)st->L[l].kind;
        if (l < lo) lo = l;
        hi = l + 1;
    }
    return nf_state_create_layers(&hp, cap, lo, hi);
}

nf_state *nf_state_snapshot(const nf_state *st) {
    if (st->hooks) return st->hooks->snapshot(st);
    nf_state *c = nf_state_create_like(st, st->pos > 16 ? st->pos : 16);
    if (!c) return NULL;
    if (nf_state_restore(c, st) < 0) {
        nf_state_free(c);
        return NULL;
    }
    return c;
}

static size_t fixed_len(const nf_state *st) {
    size_t n = 0;
    for (int l = 0; l < st->n_layer; l++)
        n += st->L[l].kind == NF_LAYER_KDA ? conv_len(st) + s_len(st)
             : st->L[l].kind == NF_LAYER_MLA ? 2 * open_len(st) : 0;
    return n;
}

int nf_state_checkpoint(const nf_state *st, nf_state_ckpt *ck) {
    if (st->hooks) return st->hooks->checkpoint(st, ck);
    size_t n = fixed_len(st);
    float *d = malloc((n + 1) * sizeof(float));
    if (!d) return nf_fail("state checkpoint: out of memory (%zu bytes)", n * sizeof(float));
    float *p = d;
    for (int l = 0; l < st->n_layer; l++) {
        const nf_layer_state *L = &st->L[l];
        if (L->kind == NF_LAYER_KDA) {
            memcpy(p, L->conv, conv_len(st) * sizeof(float)); p += conv_len(st);
            memcpy(p, L->S, s_len(st) * sizeof(float)); p += s_len(st);
        } else if (L->kind == NF_LAYER_MLA) {
            memcpy(p, L->open_key, open_len(st) * sizeof(float)); p += open_len(st);
            memcpy(p, L->open_gate, open_len(st) * sizeof(float)); p += open_len(st);
        }
    }
    ck->pos = st->pos;
    ck->bytes = n * sizeof(float);
    ck->data = d;
    ck->hooks = NULL;
    return 0;
}

int nf_state_rollback(nf_state *st, const nf_state_ckpt *ck) {
    if (st->hooks) return st->hooks->rollback(st, ck);
    if (ck->hooks) return nf_fail("state rollback: a device checkpoint cannot roll back a host state");
    if (!ck->data || ck->bytes != fixed_len(st) * sizeof(float))
        return nf_fail("state rollback: checkpoint does not belong to this model");
    if (ck->pos > st->pos)
        return nf_fail("state rollback: checkpoint at %lld is ahead of the state (%lld)", (long long)ck->pos,
                       (long long)st->pos);
    const float *p = ck->data;
    for (int l = 0; l < st->n_layer; l++) {
        nf_layer_state *L = &st->L[l];
        if (L->kind == NF_LAYER_KDA) {
            memcpy(L->conv, p, conv_len(st) * sizeof(float)); p += conv_len(st);
            memcpy(L->S, p, s_len(st) * sizeof(float)); p += s_len(st);
        } else if (L->kind == NF_LAYER_MLA) {
            memcpy(L->open_key, p, open_len(st) * sizeof(float)); p += open_len(st);
            memcpy(L->open_gate, p, open_len(st) * sizeof(float)); p += open_len(st);
        }
    }
    st->pos = ck->pos;
    return 0;
}

void nf_state_ckpt_free(nf_state_ckpt *ck) {
    if (ck->hooks) { ck->hooks->ckpt_free(ck); return; }
    free(ck->data);
    ck->data = NULL;
    ck->bytes = 0;
}

size_t nf_state_bytes(const nf_state *st) {
    size_t n = fixed_len(st) * sizeof(float);
    for (int l = 0; l < st->n_layer; l++)
        if (st->L[l].kind == NF_LAYER_MLA)
            n += (size_t)st->cap * st->kv_lora * sizeof(float) + (size_t)pool_cap(st, st->cap) * st->idx_hd * sizeof(float);
    return n;
}
