/* prefix_cache.c — in-RAM copies of given-up conversations (see prefix_cache.h). */
#include "server/prefix_cache.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/session_io.h"
#include "util/error.h"

typedef struct {
    int32_t *toks;
    size_t n;
    nf_state *st;        /* state after toks[0..n) */
    float *logits;       /* after toks[n-1] */
    nf_state_ckpt ck;    /* at ck.pos < n (pos 0: none) */
    float *ck_logits;
    uint64_t bytes;
    uint64_t used;       /* LRU clock */
} pentry;

struct nf_prefix_cache {
    pentry *e;
    int n, cap;
    uint64_t budget, total, clock;
};

nf_prefix_cache *nf_prefix_cache_new(uint64_t budget_bytes) {
    nf_prefix_cache *c = nf_xcalloc(1, sizeof *c);
    c->budget = budget_bytes;
    return c;
}

static void entry_free(pentry *e) {
    free(e->toks);
    nf_state_free(e->st);
    free(e->logits);
    if (e->ck.pos > 0) nf_state_ckpt_free(&e->ck);
    free(e->ck_logits);
    memset(e, 0, sizeof *e);
}

static void remove_at(nf_prefix_cache *c, int i) {
    c->total -= c->e[i].bytes;
    entry_free(&c->e[i]);
    memmove(c->e + i, c->e + i + 1, (size_t)(c->n - i - 1) * sizeof *c->e);
    c->n--;
}

void nf_prefix_cache_free(nf_prefix_cache *c) {
    if (!c) return;
    while (c->n) remove_at(c, c->n - 1);
    free(c->e);
    free(c);
}

int nf_prefix_cache_count(const nf_prefix_cache *c) { return c ? c->n : 0; }

static void drop_ck(nf_state_ckpt *ck, float *ck_logits) {
    if (ck) nf_state_ckpt_free(ck);
    free(ck_logits);
}

int nf_prefix_cache_put(nf_prefix_cache *c, nf_session *s, nf_state_ckpt *ck, float *ck_logits) {
    size_t n;
    const int32_t *ids = nf_session_tokens(s, &n);
    const float *logits = nf_session_logits(s);
    const nf_state *live = nf_session_state(s);
    bool have_ck = ck && (ck->data || ck->hooks) && ck->pos > 0 && ck->pos < (int64_t)n && ck_logits;
    if (!n || !logits || live->pos != (int64_t)n) {
        drop_ck(ck, ck_logits);
        return 0;
    }
    int64_t n_vocab = nf_session_model(s)->hp.n_vocab;
    uint64_t bytes = nf_state_bytes(live) + n * sizeof(int32_t) + (uint64_t)n_vocab * sizeof(float) * 2 +
                     (have_ck ? ck->bytes : 0);
    if (bytes > c->budget) {
        drop_ck(ck, ck_logits);
        return 0;
    }
    /* already held, or superseding an older part of the same conversation */
    for (int i = 0; i < c->n; i++) {
        pentry *e = &c->e[i];
        if (e->n <= n && !memcmp(e->toks, ids, e->n * sizeof *ids)) {
            if (e->n == n) {
                e->used = ++c->clock;
                drop_ck(ck, ck_logits);
                return 0;
            }
            remove_at(c, i--);
        }
    }
    while (c->n && c->total + bytes > c->budget) { /* least recently used first */
        int lru = 0;
        for (int i = 1; i < c->n; i++)
            if (c->e[i].used < c->e[lru].used) lru = i;
        remove_at(c, lru);
    }
    pentry e;
    memset(&e, 0, sizeof e);
    e.st = nf_state_snapshot(live);
    if (!e.st) {
        drop_ck(ck, ck_logits);
        return -1;
    }
    e.toks = nf_xmalloc(n * sizeof *ids);
    memcpy(e.toks, ids, n * sizeof *ids);
    e.n = n;
    e.logits = nf_xmalloc((size_t)n_vocab * sizeof(float));
    memcpy(e.logits, logits, (size_t)n_vocab * sizeof(float));
    if (have_ck) {
        e.ck = *ck;
        memset(ck, 0, sizeof *ck);
        e.ck_logits = ck_logits;
    } else {
        drop_ck(ck, ck_logits);
    }
    e.bytes = bytes;
    e.used = ++c->clock;
    if (c->n == c->cap) c->e = nf_xrealloc(c->e, (size_t)(c->cap = c->cap ? c->cap * 2 : 4) * sizeof *c->e);
    c->e[c->n++] = e;
    c->total += bytes;
    return 1;
}

int64_t nf_prefix_cache_get(nf_prefix_cache *c, nf_session *s, const int32_t *ids, size_t n, int64_t better_than) {
    int best = -1;
    int64_t best_len = better_than;
    bool best_ck = false;
    for (int i = 0; i < c->n; i++) {
        pentry *e = &c->e[i];
        if (e->n <= n && (int64_t)e->n > best_len && !memcmp(e->toks, ids, e->n * sizeof *ids)) {
            best = i, best_len = (int64_t)e->n, best_ck = false;
        } else if (e->ck.pos > 0 && e->ck.pos > best_len && (size_t)e->ck.pos <= n &&
                   !memcmp(e->toks, ids, (size_t)e->ck.pos * sizeof *ids)) {
            best = i, best_len = e->ck.pos, best_ck = true;
        }
    }
    if (best < 0) return 0;
    pentry *e = &c->e[best];
    e->used = ++c->clock;
    if (best_ck) { /* the entry becomes its prompt-end prefix (rollback is valid: the state only moved forward) */
        if (nf_state_rollback(e->st, &e->ck) < 0) {
            remove_at(c, best);
            return 0;
        }
        e->n = (size_t)e->ck.pos;
        memcpy(e->logits, e->ck_logits, (size_t)nf_session_model(s)->hp.n_vocab * sizeof(float));
        nf_state_ckpt_free(&e->ck);
        memset(&e->ck, 0, sizeof e->ck);
        free(e->ck_logits);
        e->ck_logits = NULL;
    }
    if (nf_session_adopt(s, e->toks, e->n, e->st, e->logits) < 0) {
        remove_at(c, best);
        return 0;
    }
    return (int64_t)e->n;
}
