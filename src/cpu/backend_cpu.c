/* backend_cpu.c — assembles the CPU reference backend: the nf_backend table (blocks from hc.c, kda.c,
 * mla.c, indexer.c, moe.c), host memory for activations, the embedding lookup, the RMSNorm block, the
 * output head, and the cache of small tensors converted to f32 (nf_cpu_vec). */
#include "cpu/backend_cpu.h"
#include "model/synth.h"

#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "formats/formats.h"
#include "util/error.h"

static size_t hash_ptr(const void *p, size_t cap) {
    uintptr_t v = (uintptr_t)p;
    v ^= v >> 17;
    v *= 0x9E3779B97F4A7C15ull;
    return (size_t)(v >> 7) & (cap - 1);
}

const float *nf_cpu_vec(nf_cpu *c, const nf_tensor *t) {
    if (!t->data) return (void)nf_fail("missing tensor %s", t->name ? t->name : "(unnamed)"), NULL;
    if (t->type == NF_TYPE_F32) return t->data;
    if (c->vecs_n * 2 + 2 > c->vecs_cap) {
        size_t cap = c->vecs_cap ? c->vecs_cap * 2 : 256;
        nf_vec_entry *nv = calloc(cap, sizeof *nv);
        if (!nv) return (void)nf_fail("out of memory"), NULL;
        for (size_t i = 0; i < c->vecs_cap; i++) {
            if (!c->vecs[i].key) continue;
            size_t h = hash_ptr(c->vecs[i].key, cap);
            while (nv[h].key) h = (h + 1) & (cap - 1);
            nv[h] = c->vecs[i];
        }
        free(c->vecs);
        c->vecs = nv;
        c->vecs_cap = cap;
    }
    size_t h = hash_ptr(t->data, c->vecs_cap);
    while (c->vecs[h].key) {
        if (c->vecs[h].key == t->data) return c->vecs[h].val;
        h = (h + 1) & (c->vecs_cap - 1);
    }
    int64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims && d < 4; d++) n *= t->ne[d];
    float *v = malloc((size_t)n * sizeof(float) + 4);
    if (!v) return (void)nf_fail("out of memory"), NULL;
    if (nf_dequantize(t->type, t->data, v, n) < 0) {
        free(v);
        return (void)nf_fail("tensor %s: type %u cannot be read as f32", t->name ? t->name : "?", t->type), NULL;
    }
    c->vecs[h].key = t->data;
    c->vecs[h].val = v;
    c->vecs_n++;
    return v;
}

static void *cpu_alloc(nf_backend *be, size_t bytes) {
    (void)be;
    return malloc(bytes ? bytes : 1);
}
static void cpu_release(nf_backend *be, void *p) {
    (void)be;
    free(p);
}
static int cpu_to_host(nf_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    memcpy(dst, src, bytes);
    return 0;
}

static int cpu_from_host(nf_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    memcpy(dst, src, bytes);
    return 0;
}

/* a pipeline's hand-over between CPU stages: both live in host memory and run in the caller's order */
static int cpu_from_peer(nf_backend *be, void *dst, nf_backend *src_be, const void *src, size_t bytes) {
    (void)be;
    (void)src_be;
    memcpy(dst, src, bytes);
    return 0;
}

static int cpu_embed(nf_backend *be, const int32_t *tokens, int T, float *X) {
    nf_cpu *c = nf_cpu_of(be);
    const nf_hparams *hp = &c->m->hp;
    nf_mat e = nf_mat_of(&c->m->token_embd);
    const int n = hp->n_embd, hc = hp->hc_count;
    for (int t = 0; t < T; t++) {
        float *x = X + (size_t)t * hc * n;
        nf_mat_row_f32(&e, tokens[t], x);
        for (int s = 1; s < hc; s++) memcpy(x + (size_t)s * n, x, (size_t)n * sizeof(float));
    }
    return 0;
}

static int cpu_rmsnorm(nf_backend *be, const nf_tensor *w, const float *x, int T, float *out) {
    nf_cpu *c = nf_cpu_of(be);
    const float *wv = nf_cpu_vec(c, w);
    if (!wv) return -1;
    const int64_t n = w->ne[0];
    for (int t = 0; t < T; t++) nf_rmsnorm_row(x + t * n, n, c->m->hp.rms_eps, wv, out + t * n);
    return 0;
}

static int cpu_head(nf_backend *be, const float *X, int T, float *logits) {
    nf_cpu *c = nf_cpu_of(be);
    const nf_hparams *hp = &c->m->hp;
    const int n = hp->n_embd, hc = hp->hc_count;
    const float *wn = nf_cpu_vec(c, &c->m->output_norm);
    if (!wn) return -1;
    float *z = malloc((size_t)T * n * sizeof(float));
    if (!z) return nf_fail("head: out of memory");
    for (int t = 0; t < T; t++) {
        const float *x = X + (size_t)t * hc * n;
        float *zt = z + (size_t)t * n;
        for (int i = 0; i < n; i++) {
            float s = 0.0f;
            for (int k = 0; k < hc; k++) s += x[(size_t)k * n + i];
            zt[i] = s / (float)hc;
        }
        nf_rmsnorm_row(zt, n, hp->rms_eps, wn, zt);
    }
    nf_mat w = nf_mat_of(&c->m->output);
    nf_matmul(c->pool, &w, z, T, n, logits, hp->n_vocab);
    free(z);
    return 0;
}

static int cpu_final_hidden(nf_backend *be, const float *X, int T, float *hidden) {
    nf_cpu *c = nf_cpu_of(be);
    const nf_hparams *hp = &c->m->hp;
    const int n = hp->n_embd, hc = hp->hc_count;
    const float *wn = nf_cpu_vec(c, &c->m->output_norm);
    if (!wn) return -1;
    for (int t = 0; t < T; t++) { /* the same arithmetic as cpu_head */
        const float *x = X + (size_t)t * hc * n;
        float *zt = hidden + (size_t)t * n;
        for (int i = 0; i < n; i++) {
            float s = 0.0f;
            for (int k = 0; k < hc; k++) s += x[(size_t)k * n + i];
            zt[i] = s / (float)hc;
        }
        nf_rmsnorm_row(zt, n, hp->rms_eps, wn, zt);
    }
    return 0;
}

static int cpu_linear(nf_backend *be, const nf_tensor *w, const float *x, int T, float *y) {
    nf_cpu *c = nf_cpu_of(be);
    if (!w->data) return nf_fail("linear: tensor %s is not bound", w->name ? w->name : "?");
    nf_mat m = nf_mat_of(w);
    nf_matmul(c->pool, &m, x, T, m.n, y, m.rows);
    return 0;
}

static void cpu_destroy(nf_backend *be) {
    if (!be) return;
    nf_cpu *c = be->impl;
    if (c) {
        nf_pool_free(c->pool);
        for (size_t i = 0; i < c->vecs_cap; i++) free(c->vecs[i].val);
        free(c->vecs);
        free(c);
    }
    free(be);
}

nf_backend *nf_cpu_backend_create(const nf_model *m, int n_threads) {
    const nf_hparams *hp = &m->hp;
    if (hp->hc_count < 1 || hp->hc_count > 16) return (void)nf_fail("cpu backend: hc_count %d unsupported", hp->hc_count), NULL;
    if (m->synth && m->synth->n_virtual)   /* their host pages hold no weights (model/synth.h DEVICE mode) */
        return (void)nf_fail("cpu backend: this synthetic model has %d tensors made only on the GPU (make it in "
                             "NF_SYNTH_HOST mode, or materialize it, to run it on the CPU)", m->synth->n_virtual), NULL;
    nf_backend *be = calloc(1, sizeof *be);
    nf_cpu *c = calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        nf_fail("cpu backend: out of memory");
        return NULL;
    }
    c->m = m;
    c->pool = nf_pool_create(n_threads);
    if (!c->pool) {
        free(be);
        free(c);
        return NULL;
    }
    be->name = "cpu";
    be->model = m;
    be->impl = c;
    be->alloc = cpu_alloc;
    be->release = cpu_release;
    be->to_host = cpu_to_host;
    be->from_host = cpu_from_host;
    be->from_peer = cpu_from_peer;
    be->embed = cpu_embed;
    be->hc_pre = nf_cpu_hc_pre;
    be->hc_post = nf_cpu_hc_post;
    be->rmsnorm = cpu_rmsnorm;
    be->kda_block = nf_cpu_kda_block;
    be->mla_project = nf_cpu_mla_project;
    be->indexer_select = nf_cpu_indexer_select;
    be->mla_attend = nf_cpu_mla_attend;
    be->dense_mlp = nf_cpu_dense_mlp;
    be->moe_block = nf_cpu_moe_block;
    be->head = cpu_head;
    be->final_hidden = cpu_final_hidden;
    be->linear = cpu_linear;
    be->destroy = cpu_destroy;
    return be;
}
