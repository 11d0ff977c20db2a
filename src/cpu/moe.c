/* moe.c — the feed-forward blocks on the CPU: the dense SwiGLU MLP (leading layers) and the MoE (sigmoid
 * router with selection bias, top-k, normalised and scaled weights, routed experts + shared expert), both with
 * the asymmetric SwiGLU clamp (gate <= limit, -limit <= up <= limit) (spec §2.5, HF Glm5NextTextMoE).
 *
 * Routed experts: tokens are grouped by expert so each expert's weights are read once per call; experts run
 * as parallel tasks, and their weighted outputs are summed in ascending expert order (as HF's index_add_
 * loop does) so the result does not depend on the thread count. */
#include "cpu/cpu.h"

#include <stdlib.h>
#include <string.h>

#include "util/error.h"

/* y[T][n] = down(swiglu(gate x, up x)) for 2-D (or one slice of 3-D) weights, single-threaded or pooled */
static void mlp(nf_pool *pool, const nf_mat *g, const nf_mat *u, const nf_mat *d, const float *x, int T, float limit,
                float *y) {
    const int64_t n = g->n, I = g->rows;
    float *a = malloc((size_t)T * I * sizeof(float) * 2);
    if (!a) abort();
    float *b = a + (size_t)T * I;
    if (pool) {
        nf_matmul(pool, g, x, T, n, a, I);
        nf_matmul(pool, u, x, T, n, b, I);
    } else {
        nf_matmul_serial(g, x, T, n, a, I);
        nf_matmul_serial(u, x, T, n, b, I);
    }
    nf_swiglu_clamped(a, b, (int64_t)T * I, limit, a);
    if (pool) nf_matmul(pool, d, a, T, I, y, d->rows);
    else nf_matmul_serial(d, a, T, I, y, d->rows);
    free(a);
}

int nf_cpu_dense_mlp(nf_backend *be, int il, const float *x, int T, float *y) {
    nf_cpu *c = nf_cpu_of(be);
    const nf_layer *L = &c->m->layers[il];
    nf_mat g = nf_mat_of(&L->ffn_gate), u = nf_mat_of(&L->ffn_up), d = nf_mat_of(&L->ffn_down);
    mlp(c->pool, &g, &u, &d, x, T, c->m->hp.swiglu_limit, y);
    return 0;
}

typedef struct {
    const nf_layer *L;
    const float *x;
    int n, T, k;
    float limit;
    const int32_t *expert_of;   /* [T][k] chosen experts */
    const float *weight_of;     /* [T][k] their weights */
    const int32_t *active;      /* active expert ids, ascending */
    const int32_t *start, *count; /* per active expert: range in `tok` */
    const int32_t *tok;         /* token ids grouped by expert */
    const int32_t *slot;        /* matching top-k slot */
    float *out;                 /* per active expert: count rows of n (weighted), at start*n */
} moe_job;

static void expert_task(void *ctx, int64_t ai, int thread) {
    (void)thread;
    const moe_job *j = ctx;
    int e = j->active[ai], s0 = j->start[ai], cnt = j->count[ai];
    float *xe = malloc((size_t)cnt * j->n * sizeof(float));
    if (!xe) abort();
    for (int r = 0; r < cnt; r++) memcpy(xe + (size_t)r * j->n, j->x + (size_t)j->tok[s0 + r] * j->n, (size_t)j->n * sizeof(float));
    nf_mat g = nf_mat_slice(&j->L->gate_exps, e), u = nf_mat_slice(&j->L->up_exps, e),
           d = nf_mat_slice(&j->L->down_exps, e);
    float *ye = j->out + (size_t)s0 * j->n;
    mlp(NULL, &g, &u, &d, xe, cnt, j->limit, ye);
    for (int r = 0; r < cnt; r++) {
        float w = j->weight_of[(size_t)j->tok[s0 + r] * j->k + j->slot[s0 + r]];
        for (int i = 0; i < j->n; i++) ye[(size_t)r * j->n + i] *= w;
    }
    free(xe);
}

int nf_cpu_moe_block(nf_backend *be, int il, const float *x, int T, float *y) {
    nf_cpu *c = nf_cpu_of(be);
    const nf_hparams *hp = &c->m->hp;
    const nf_layer *L = &c->m->layers[il];
    const int n = hp->n_embd, E = hp->n_expert, k = hp->n_expert_used;
    const float *bias = L->router_bias.data ? nf_cpu_vec(c, &L->router_bias) : NULL;
    if (L->router_bias.data && !bias) return nf_fail_prefix("layer %d router bias", il);

    float *logit = malloc((size_t)T * E * sizeof(float));
    float *choice = malloc((size_t)E * sizeof(float));
    int32_t *expert_of = malloc((size_t)T * k * sizeof(int32_t));
    float *weight_of = malloc((size_t)T * k * sizeof(float));
    int32_t *count_e = calloc((size_t)E, sizeof(int32_t));
    int32_t *active = malloc((size_t)E * sizeof(int32_t));
    int32_t *start = malloc((size_t)E * sizeof(int32_t));
    int32_t *count = malloc((size_t)E * sizeof(int32_t));
    int32_t *tok = malloc((size_t)T * k * sizeof(int32_t));
    int32_t *slot = malloc((size_t)T * k * sizeof(int32_t));
    float *out = malloc((size_t)T * k * n * sizeof(float));
    float *shared = malloc((size_t)T * n * sizeof(float));
    int rc = -1;
    if (!logit || !choice || !expert_of || !weight_of || !count_e || !active || !start || !count || !tok || !slot ||
        !out || !shared) {
        nf_fail("moe: out of memory");
        goto done;
    }

    /* router (fp32): sigmoid scores, biased choice, top-k, weights */
    nf_mat r = nf_mat_of(&L->router);
    nf_matmul(c->pool, &r, x, T, n, logit, E);
    for (int t = 0; t < T; t++) {
        float *s = logit + (size_t)t * E;
        for (int e = 0; e < E; e++) {
            s[e] = nf_sigmoidf(s[e]);
            choice[e] = s[e] + (bias ? bias[e] : 0.0f);
        }
        int32_t *sel = expert_of + (size_t)t * k;
        nf_topk_desc(choice, E, k, sel);
        float sum = 0.0f;
        for (int i = 0; i < k; i++) sum += s[sel[i]];
        for (int i = 0; i < k; i++) {
            float w = s[sel[i]];
            if (hp->expert_weights_norm) w /= sum + 1e-20f;
            weight_of[(size_t)t * k + i] = w * hp->expert_weights_scale;
            count_e[sel[i]]++;
        }
    }
    /* group token slots by expert (ascending expert, ascending token) */
    int na = 0, off = 0;
    for (int e = 0; e < E; e++) {
        if (!count_e[e]) continue;
        active[na] = e;
        start[na] = off;
        count[na] = 0;
        off += count_e[e];
        count_e[e] = na++; /* reuse as the expert's active index */
    }
    for (int t = 0; t < T; t++)
        for (int i = 0; i < k; i++) {
            int a = count_e[expert_of[(size_t)t * k + i]];
            int p = start[a] + count[a]++;
            tok[p] = t;
            slot[p] = i;
        }
    moe_job j = {.L = L, .x = x, .n = n, .T = T, .k = k, .limit = hp->swiglu_limit, .expert_of = expert_of,
                 .weight_of = weight_of, .active = active, .start = start, .count = count, .tok = tok, .slot = slot,
                 .out = out};
    nf_pool_run(c->pool, na, expert_task, &j);

    memset(y, 0, (size_t)T * n * sizeof(float));
    for (int a = 0; a < na; a++)
        for (int r2 = 0; r2 < count[a]; r2++) {
            float *yt = y + (size_t)tok[start[a] + r2] * n;
            const float *src = out + (size_t)(start[a] + r2) * n;
            for (int i = 0; i < n; i++) yt[i] += src[i];
        }
    if (hp->n_expert_shared > 0 && L->gate_shexp.data) {
        nf_mat g = nf_mat_of(&L->gate_shexp), u = nf_mat_of(&L->up_shexp), d = nf_mat_of(&L->down_shexp);
        mlp(c->pool, &g, &u, &d, x, T, hp->swiglu_limit, shared);
        for (size_t i = 0; i < (size_t)T * n; i++) y[i] += shared[i];
    }
    rc = 0;
done:
    free(logit);
    free(choice);
    free(expert_of);
    free(weight_of);
    free(count_e);
    free(active);
    free(start);
    free(count);
    free(tok);
    free(slot);
    free(out);
    free(shared);
    return rc;
}
