/* state_fill.c — filling a sequence state to a depth without the model, and measuring the per-array RMS a real
 * prefill gives (contracts and the fill's layout in state_fill.h). */
#include "model/state_fill.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

static uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t nf_state_fill_key(uint64_t seed, int layer, int array) {
    return mix64(mix64(seed ^ 0x66696c6c73746174ull) ^ ((uint64_t)(unsigned)layer << 8 | (unsigned)array));
}

void nf_state_fill_scales_unit(const nf_hparams *hp, nf_state_fill_scales *out) {
    memset(out, 0, sizeof *out);
    out->n_layer = hp->n_layer;
    for (int l = 0; l < hp->n_layer; l++) {
        nf_state_fill_rms *r = &out->L[l];
        r->latent = r->pool_key = r->open_key = r->open_gate = r->conv = 1.0f;
        r->kda_S = hp->kda_head_dim > 0 ? 1.0f / sqrtf((float)hp->kda_head_dim) : 0;
        if (hp->indexer_shared[l]) r->pool_key = r->open_key = r->open_gate = 0;
    }
}

static void span(float *dst, uint64_t n, uint64_t first, uint64_t key, float scale,
                 void (*emit)(const nf_state_fill_span *, void *), void *ctx) {
    if (!n || scale == 0) return;
    nf_state_fill_span s = {.dst = dst, .n = n, .first = first, .key = key, .scale = scale};
    emit(&s, ctx);
}

void nf_state_fill_spans(const nf_state *st, int64_t to, uint64_t seed, const nf_state_fill_scales *sc,
                         void (*emit)(const nf_state_fill_span *span, void *ctx), void *ctx) {
    const int64_t pos = st->pos, kpool = st->kpool;
    const uint64_t lora = (uint64_t)st->kv_lora, hd = (uint64_t)st->idx_hd;
    for (int l = 0; l < st->n_layer; l++) {
        const nf_layer_state *L = &st->L[l];
        const nf_state_fill_rms *r = &sc->L[l];
        if (L->kind == NF_STATE_LAYER_ABSENT) continue;
        if (L->kind == NF_LAYER_KDA) {
            const uint64_t s_n = (uint64_t)st->kda_heads * st->kda_hd * st->kda_hd;
            const uint64_t c_n = (uint64_t)st->conv_rows * st->conv_width;
            span(L->S, s_n, 0, nf_state_fill_key(seed, l, NF_FILL_KDA_S), r->kda_S, emit, ctx);
            span(L->conv, c_n, 0, nf_state_fill_key(seed, l, NF_FILL_CONV), r->conv, emit, ctx);
            continue;
        }
        span(L->latent + (uint64_t)pos * lora, (uint64_t)(to - pos) * lora, (uint64_t)pos * lora,
             nf_state_fill_key(seed, l, NF_FILL_LATENT), r->latent, emit, ctx);
        const int64_t p_lo = pos / kpool, p_hi = to / kpool;
        if (p_hi > p_lo)
            span(L->pool_key + (uint64_t)p_lo * hd, (uint64_t)(p_hi - p_lo) * hd, (uint64_t)p_lo * hd,
                 nf_state_fill_key(seed, l, NF_FILL_POOL_KEY), r->pool_key, emit, ctx);
        for (int64_t a = to - kpool > pos ? to - kpool : pos; a < to; a++) {
            const uint64_t slot = (uint64_t)(a % kpool);
            span(L->open_key + slot * hd, hd, (uint64_t)a * hd, nf_state_fill_key(seed, l, NF_FILL_OPEN_KEY),
                 r->open_key, emit, ctx);
            span(L->open_gate + slot * hd, hd, (uint64_t)a * hd, nf_state_fill_key(seed, l, NF_FILL_OPEN_GATE),
                 r->open_gate, emit, ctx);
        }
    }
}

static void host_emit(const nf_state_fill_span *s, void *ctx) {
    (void)ctx;
    for (uint64_t i = 0; i < s->n; i++) s->dst[i] = s->scale * nf_state_fill_unit(s->key, s->first + i);
}

int nf_state_fill(nf_state *st, int64_t to, uint64_t seed, const nf_state_fill_scales *sc) {
    if (to < st->pos)
        return nf_fail("state fill: target %lld is below the state's position %lld", (long long)to, (long long)st->pos);
    if (sc->n_layer != st->n_layer)
        return nf_fail("state fill: scales for %d layers, the state has %d", sc->n_layer, st->n_layer);
    if (nf_state_reserve(st, to) < 0) return nf_fail_prefix("state fill to %lld tokens", (long long)to);
    if (st->hooks) {
        if (!st->hooks->fill) return nf_fail("state fill: this backend's device state cannot be filled");
        if (st->hooks->fill(st, to, seed, sc) < 0) return -1;
    } else {
        nf_state_fill_spans(st, to, seed, sc, host_emit, NULL);
    }
    st->pos = to;
    return 0;
}

static float rms(const float *x, uint64_t n) {
    double s = 0;
    for (uint64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return n ? (float)sqrt(s / (double)n) : 0.0f;
}


int nf_state_fill_measure(const nf_hparams *hp, const nf_state *st, nf_state_fill_scales *out) {
    if (st->pos < st->kpool)
        return nf_fail("state fill: measuring the scales needs one complete indexer pool (%d tokens), the state "
                       "holds %lld", st->kpool, (long long)st->pos);
    if (hp->n_layer != st->n_layer) return nf_fail("state fill: the state does not belong to this model");
    nf_state *h = NULL;
    const nf_state *src = st;
    if (st->hooks) { /* a device state: its rows [0, pos) copied to the host */
        if (!(h = nf_state_create_like(st, st->pos)) || nf_state_restore(h, st) < 0) {
            nf_state_free(h);
            return nf_fail_prefix("state fill: reading the state back");
        }
        src = h;
    }
    memset(out, 0, sizeof *out);
    out->n_layer = st->n_layer;
    const int64_t pos = src->pos, kpool = src->kpool, hd = src->idx_hd;
    const int64_t n_open = pos < kpool ? pos : kpool;
    for (int l = 0; l < src->n_layer; l++) {
        const nf_layer_state *L = &src->L[l];
        nf_state_fill_rms *r = &out->L[l];
        if (L->kind == NF_STATE_LAYER_ABSENT) continue;
        if (L->kind == NF_LAYER_KDA) {
            r->kda_S = rms(L->S, (uint64_t)src->kda_heads * src->kda_hd * src->kda_hd);
            r->conv = rms(L->conv, (uint64_t)src->conv_rows * src->conv_width);
            continue;
        }
        r->latent = rms(L->latent, (uint64_t)pos * src->kv_lora);
        if (hp->indexer_shared[l]) continue; /* never written, never read */
        r->pool_key = rms(L->pool_key, (uint64_t)(pos / kpool) * hd);
        double sk = 0, sg = 0;
        for (int64_t a = pos - n_open; a < pos; a++) {
            const float rk = rms(L->open_key + (a % kpool) * hd, (uint64_t)hd);
            const float rg = rms(L->open_gate + (a % kpool) * hd, (uint64_t)hd);
            sk += (double)rk * rk;
            sg += (double)rg * rg;
        }
        r->open_key = (float)sqrt(sk / (double)n_open);
        r->open_gate = (float)sqrt(sg / (double)n_open);
    }
    nf_state_free(h);
    for (int l = 0; l < out->n_layer; l++) {
        const nf_state_fill_rms *r = &out->L[l];
        if (!isfinite(r->latent) || !isfinite(r->pool_key) || !isfinite(r->open_key) || !isfinite(r->open_gate) ||
            !isfinite(r->kda_S) || !isfinite(r->conv))
            return nf_fail("state fill: layer %d of the measured state holds non-finite values", l);
    }
    return 0;
}
