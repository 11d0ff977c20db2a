/* indexer.c — the DSA lightning indexer with k-pool compression and forced tail, on the CPU (spec §2.4,
 * HF Glm5NextTextIndexer).
 *
 * Per new token: key ik = LayerNorm(Wk x) (weight, bias, eps attention.layer_norm_epsilon) and gate logits
 * ig = Wgate x go into the open-pool rows of the state; when a pool of `kpool` tokens completes, its pooled
 * key P[c] = sum_m softmax_m(ig[m][c] + ape[m][c]) * ik[m][c] is appended to the pooled-key cache (pools are
 * aligned to position 0). Per query at absolute position a: iq = Wq_b q_resid ([heads][hd]), head weights
 * w = (Wproj x) / sqrt(heads); score(p) = sum_h w_h relu(iq_h·P_p / sqrt(hd)) over the (a+1)/kpool complete
 * pools; the top index_topk/kpool pools (descending score, ties by ascending pool index) expand to their
 * token positions, followed by the open tail a - (a+1)%kpool + 1 .. a, then -1 padding to the row width.
 * When every complete pool fits in the budget all are taken (in ascending order). Queries run in parallel.
 * Without the forced tail (kpool_select_tail false) a query before its first complete pool selects nothing and
 * mla_attend outputs zeros for it; HF would then attend uniformly over the whole cache (every score masked to
 * the same minimum), a degenerate case no released config uses. */
#include "cpu/cpu.h"

#include <stdlib.h>
#include <string.h>

#include "util/error.h"

void nf_kpool_compress(const float *key, const float *gate, const float *ape, int kpool, int hd, float *P) {
    float wts[64];
    for (int ch = 0; ch < hd; ch++) {
        for (int m = 0; m < kpool; m++) wts[m] = gate[(size_t)m * hd + ch] + (ape ? ape[(size_t)m * hd + ch] : 0.0f);
        nf_softmax_row(wts, kpool);
        float s = 0.0f;
        for (int m = 0; m < kpool; m++) s += wts[m] * key[(size_t)m * hd + ch];
        P[ch] = s;
    }
}

/* a ranks before b: higher score, then lower index (a strict total order, so the selection is unique) */
static inline int before(const float *s, int32_t a, int32_t b) { return s[a] > s[b] || (s[a] == s[b] && a < b); }

static void sift_down(const float *s, int32_t *h, int n, int i) {
    /* min-heap under `before`: the root is the entry that ranks last */
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && before(s, h[m], h[l])) m = l;
        if (r < n && before(s, h[m], h[r])) m = r;
        if (m == i) return;
        int32_t t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

int nf_topk_desc(const float *score, int n, int k, int32_t *out) {
    if (k > n) k = n;
    if (k <= 0) return 0;
    /* keep the k best in a heap whose root is the worst of them: O(n log k) */
    for (int i = 0; i < k; i++) out[i] = i;
    for (int i = k / 2 - 1; i >= 0; i--) sift_down(score, out, k, i);
    for (int i = k; i < n; i++) {
        if (before(score, i, out[0])) {
            out[0] = i;
            sift_down(score, out, k, 0);
        }
    }
    /* heap sort into descending rank order */
    for (int end = k - 1; end > 0; end--) {
        int32_t t = out[0];
        out[0] = out[end];
        out[end] = t;
        sift_down(score, out, end, 0);
    }
    return k;
}

typedef struct {
    const float *pool_key;  /* [pools][hd] */
    const float *iq;        /* [T][nh*hd] */
    const float *w;         /* [T][nh] (already scaled by nh^-1/2) */
    int32_t *sel;
    int64_t pos0;
    int T, nh, hd, kpool, budget, width, tail;
} sel_job;

static void sel_task(void *ctx, int64_t t, int thread) {
    (void)thread;
    const sel_job *j = ctx;
    int64_t a = j->pos0 + t;
    int64_t n_vis = (a + 1) / j->kpool;
    int32_t *row = j->sel + (size_t)t * j->width;
    int w = 0;
    if (n_vis <= j->budget) {
        for (int64_t p = 0; p < n_vis; p++)
            for (int m = 0; m < j->kpool; m++) row[w++] = (int32_t)(p * j->kpool + m);
    } else {
        float *score = malloc((size_t)n_vis * sizeof(float));
        int32_t *top = malloc((size_t)j->budget * sizeof(int32_t));
        if (!score || !top) abort();
        const float *iq = j->iq + (size_t)t * j->nh * j->hd, *hw = j->w + (size_t)t * j->nh;
        const float sc = 1.0f / sqrtf((float)j->hd);
        for (int64_t p = 0; p < n_vis; p++) {
            const float *P = j->pool_key + (size_t)p * j->hd;
            float s = 0.0f;
            for (int h = 0; h < j->nh; h++) {
                float d = nf_dot_f32(iq + (size_t)h * j->hd, P, j->hd) * sc;
                s += hw[h] * (d > 0.0f ? d : 0.0f);
            }
            score[p] = s;
        }
        int k = nf_topk_desc(score, (int)n_vis, j->budget, top);
        for (int i = 0; i < k; i++)
            for (int m = 0; m < j->kpool; m++) row[w++] = (int32_t)((int64_t)top[i] * j->kpool + m);
        free(score);
        free(top);
    }
    if (j->tail) {
        for (int64_t p = n_vis * j->kpool; p <= a; p++) row[w++] = (int32_t)p;
    }
    while (w < j->width) row[w++] = -1;
}

int nf_cpu_indexer_select(nf_backend *be, int il, nf_state *st, const float *x, const float *qr, int T,
                          int32_t *sel) {
    nf_cpu *c = nf_cpu_of(be);
    const nf_hparams *hp = &c->m->hp;
    const nf_layer *L = &c->m->layers[il];
    nf_layer_state *LS = &st->L[il];
    const int n = hp->n_embd, hd = hp->idx_head_dim, nh = hp->idx_n_head, kpool = st->kpool;
    if (kpool > 64) return nf_fail("indexer: kpool %d > 64 unsupported", kpool);
    const float *knw = nf_cpu_vec(c, &L->idx_k_norm_w), *knb = nf_cpu_vec(c, &L->idx_k_norm_b);
    const float *ape = L->idx_ape.data ? nf_cpu_vec(c, &L->idx_ape) : NULL;
    if (!knw || !knb) return nf_fail_prefix("layer %d indexer", il);

    float *ik = malloc((size_t)T * hd * sizeof(float));
    float *ig = malloc((size_t)T * hd * sizeof(float));
    float *iq = malloc((size_t)T * nh * hd * sizeof(float));
    float *w = malloc((size_t)T * nh * sizeof(float));
    int rc = -1;
    if (!ik || !ig || !iq || !w) {
        nf_fail("indexer: out of memory");
        goto out;
    }
    nf_mat mk = nf_mat_of(&L->idx_k), mg = nf_mat_of(&L->idx_gate), mq = nf_mat_of(&L->idx_q_b),
           mp = nf_mat_of(&L->idx_proj);
    nf_matmul(c->pool, &mk, x, T, n, ik, hd);
    for (int t = 0; t < T; t++) nf_layernorm_row(ik + (size_t)t * hd, hd, hp->indexer_ln_eps, knw, knb, ik + (size_t)t * hd);
    if (L->idx_gate.data) nf_matmul(c->pool, &mg, x, T, n, ig, hd);
    else memset(ig, 0, (size_t)T * hd * sizeof(float));

    /* cache keys/gates; pool every pool completed by these tokens */
    for (int t = 0; t < T; t++) {
        int64_t a = st->pos + t;
        int slot = (int)(a % kpool);
        memcpy(LS->open_key + (size_t)slot * hd, ik + (size_t)t * hd, (size_t)hd * sizeof(float));
        memcpy(LS->open_gate + (size_t)slot * hd, ig + (size_t)t * hd, (size_t)hd * sizeof(float));
        if (slot == kpool - 1)
            nf_kpool_compress(LS->open_key, LS->open_gate, ape, kpool, hd, LS->pool_key + (size_t)(a / kpool) * hd);
    }

    nf_matmul(c->pool, &mq, qr, T, hp->q_lora_rank, iq, (int64_t)nh * hd);
    nf_matmul(c->pool, &mp, x, T, n, w, nh);
    const float ws = 1.0f / sqrtf((float)nh);
    for (int i = 0; i < T * nh; i++) w[i] *= ws;

    sel_job j = {.pool_key = LS->pool_key, .iq = iq, .w = w, .sel = sel, .pos0 = st->pos, .T = T, .nh = nh,
                 .hd = hd, .kpool = kpool, .budget = hp->idx_topk / kpool, .width = nf_topk_width(hp),
                 .tail = hp->idx_select_tail && kpool > 1};
    nf_pool_run(c->pool, T, sel_task, &j);
    rc = 0;
out:
    free(ik);
    free(ig);
    free(iq);
    free(w);
    return rc;
}
