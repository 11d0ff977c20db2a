/* mla.c — multi-head latent attention (NoPE) over the DSA selection, on the CPU (spec §2.4, HF
 * Glm5NextTextAttention).
 *
 * mla_project: q_resid = RMSNorm(Wqa x) * q_a_norm, q = Wqb q_resid, and the normalised kv latent
 * RMSNorm(Wkva x) * kv_a_norm appended to the latent cache. mla_attend uses the absorbed form: per head,
 * qt = Kb^T q (kv_lora values), scores against the cached latents of the selected positions scaled by
 * 1/sqrt(qk_head_dim), softmax, u = sum p c, o = Vb u; then the output projection. The absorbed form is the
 * same mathematics as HF's expanded keys/values (agreement ~1e-6 relative in fp32). (query, head) pairs run
 * in parallel on the pool. */
#include "cpu/cpu.h"

#include <stdlib.h>
#include <string.h>

#include "util/error.h"

int nf_cpu_mla_project(nf_backend *be, int il, nf_state *st, const float *x, int T, float *qr, float *q) {
    nf_cpu *c = nf_cpu_of(be);
    const nf_hparams *hp = &c->m->hp;
    const nf_layer *L = &c->m->layers[il];
    nf_layer_state *LS = &st->L[il];
    const int n = hp->n_embd, ql = hp->q_lora_rank, kl = hp->kv_lora_rank;
    const float *qan = nf_cpu_vec(c, &L->q_a_norm), *kvn = nf_cpu_vec(c, &L->kv_a_norm);
    if (!qan || !kvn) return nf_fail_prefix("layer %d mla", il);
    const int kv_rows = (int)L->kv_a.ne[1];
    float *kv = malloc((size_t)T * kv_rows * sizeof(float));
    if (!kv) return nf_fail("mla: out of memory");

    nf_mat qa = nf_mat_of(&L->q_a), qb = nf_mat_of(&L->q_b), ka = nf_mat_of(&L->kv_a);
    nf_matmul(c->pool, &qa, x, T, n, qr, ql);
    for (int t = 0; t < T; t++) nf_rmsnorm_row(qr + (size_t)t * ql, ql, hp->rms_eps, qan, qr + (size_t)t * ql);
    nf_matmul(c->pool, &qb, qr, T, ql, q, (int64_t)hp->n_head * hp->qk_nope_dim);

    nf_matmul(c->pool, &ka, x, T, n, kv, kv_rows);
    for (int t = 0; t < T; t++)
        nf_rmsnorm_row(kv + (size_t)t * kv_rows, kl, hp->rms_eps, kvn, LS->latent + (size_t)(st->pos + t) * kl);
    free(kv);
    return 0;
}

typedef struct {
    const nf_model *m;
    const nf_layer *L;
    const float *latent;
    const float *q;        /* [T][H*dk] */
    const int32_t *sel;    /* [T][width] */
    int width, T, H, dk, dv, kl;
    float scale;
    float *o;              /* [T][H*dv] */
} att_job;

static void att_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    const att_job *j = ctx;
    int t = (int)(task / j->H), h = (int)(task % j->H);
    const int32_t *sel = j->sel + (size_t)t * j->width;
    float *qt = malloc(((size_t)j->kl * 2 + (size_t)j->width) * sizeof(float));
    if (!qt) abort();
    float *u = qt + j->kl, *p = u + j->kl;
    nf_mat kb = nf_mat_slice(&j->L->k_b, h); /* kv_lora rows of dk */
    nf_matmul_serial(&kb, j->q + (size_t)t * j->H * j->dk + (size_t)h * j->dk, 1, j->dk, qt, j->kl);
    int ns = 0;
    for (int s = 0; s < j->width; s++) {
        int32_t pos = sel[s];
        if (pos < 0) continue;
        p[ns++] = nf_dot_f32(qt, j->latent + (size_t)pos * j->kl, j->kl) * j->scale;
    }
    float *oh = j->o + (size_t)t * j->H * j->dv + (size_t)h * j->dv;
    if (ns == 0) {
        memset(oh, 0, (size_t)j->dv * sizeof(float));
        free(qt);
        return;
    }
    nf_softmax_row(p, ns);
    memset(u, 0, (size_t)j->kl * sizeof(float));
    ns = 0;
    for (int s = 0; s < j->width; s++) {
        int32_t pos = sel[s];
        if (pos < 0) continue;
        const float *cl = j->latent + (size_t)pos * j->kl;
        float w = p[ns++];
        for (int r = 0; r < j->kl; r++) u[r] += w * cl[r];
    }
    nf_mat vb = nf_mat_slice(&j->L->v_b, h); /* dv rows of kv_lora */
    nf_matmul_serial(&vb, u, 1, j->kl, oh, j->dv);
    free(qt);
}

int nf_cpu_mla_attend(nf_backend *be, int il, nf_state *st, const float *q, const int32_t *sel, int T, float *y) {
    nf_cpu *c = nf_cpu_of(be);
    const nf_hparams *hp = &c->m->hp;
    const nf_layer *L = &c->m->layers[il];
    const int H = hp->n_head, dv = hp->v_head_dim;
    float *o = malloc((size_t)T * H * dv * sizeof(float));
    if (!o) return nf_fail("mla: out of memory");
    att_job j = {.m = c->m, .L = L, .latent = st->L[il].latent, .q = q, .sel = sel, .width = nf_topk_width(hp),
                 .T = T, .H = H, .dk = hp->qk_nope_dim, .dv = dv, .kl = hp->kv_lora_rank,
                 .scale = 1.0f / sqrtf((float)hp->qk_nope_dim), .o = o};
    nf_pool_run(c->pool, (int64_t)T * H, att_task, &j);
    nf_mat wo = nf_mat_of(&L->attn_output);
    nf_matmul(c->pool, &wo, o, T, (int64_t)H * dv, y, hp->n_embd);
    free(o);
    return 0;
}
