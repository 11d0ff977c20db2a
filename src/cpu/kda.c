/* kda.c — Kimi Delta Attention (the 34 linear-attention layers) on the CPU (spec §2.3, HF
 * Glm5NextTextLinearAttention).
 *
 * For T tokens: q|k|v projections, the causal depthwise conv (kernel `conv`) over the pre-conv values with
 * the state's window prepended, SiLU, per-head L2 norm of q and k (q then scaled by 1/sqrt(head_dim)), the
 * forget gate g (per key channel) and beta (per head), then the exact delta-rule recurrence token by token
 * in fp32 (HF uses a chunked form for multi-token calls; both are the same mathematics, and the per-token
 * recurrence makes prefill, chunked prefill and decode bit-identical), the gated per-head RMSNorm and the
 * output projection. Heads run in parallel on the pool.
 *
 * Gate: with a negative lower bound lb (the release: -5) g = lb * sigmoid(exp(A_log) * f); a bound >= 0 means
 * "none" and selects HF's other branch g = -exp(A_log) * softplus(f). exp(A_log) is read as -ssm_a (the
 * GGUF stores ssm_a = -exp(A_log)). */
#include "cpu/cpu.h"

#include <stdlib.h>
#include <string.h>

#include "util/error.h"

void nf_kda_step(float *S, int dk, int dv, const float *q, const float *k, const float *v, const float *g,
                 float beta, float *o) {
    float pred[512], d[512];
    for (int j = 0; j < dv; j++) pred[j] = 0.0f;
    for (int i = 0; i < dk; i++) {
        float *row = S + (size_t)i * dv;
        float e = expf(g[i]);
        float ki = k[i];
        for (int j = 0; j < dv; j++) {
            row[j] *= e;
            pred[j] += row[j] * ki;
        }
    }
    for (int j = 0; j < dv; j++) {
        d[j] = (v[j] - pred[j]) * beta;
        o[j] = 0.0f;
    }
    for (int i = 0; i < dk; i++) {
        float *row = S + (size_t)i * dv;
        float ki = k[i], qi = q[i];
        for (int j = 0; j < dv; j++) {
            row[j] += ki * d[j];
            o[j] += row[j] * qi;
        }
    }
}

typedef struct {
    float *S;            /* state of the layer [H][dk][dv] */
    const float *qkv;    /* [T][3*inner] after conv+silu, q/k normalised */
    const float *g;      /* [T][inner] */
    const float *beta;   /* [T][H] */
    float *o;            /* [T][inner] */
    int T, H, hd;
} kda_job;

static void kda_head_task(void *ctx, int64_t h, int thread) {
    (void)thread;
    const kda_job *j = ctx;
    const int inner = j->H * j->hd;
    float *S = j->S + (size_t)h * j->hd * j->hd;
    for (int t = 0; t < j->T; t++) {
        const float *row = j->qkv + (size_t)t * 3 * inner;
        nf_kda_step(S, j->hd, j->hd, row + h * j->hd, row + inner + h * j->hd, row + 2 * inner + h * j->hd,
                    j->g + (size_t)t * inner + h * j->hd, j->beta[(size_t)t * j->H + h],
                    j->o + (size_t)t * inner + h * j->hd);
    }
}

/* conv over one channel range [c0, c0+nc) of the 3*inner channels with taps w[(c - c0) * K + j] */
static void conv_range(const float *hist, int T, int K, int width, int c0, int nc, const float *w, float *out) {
    for (int t = 0; t < T; t++) {
        for (int c = 0; c < nc; c++) {
            float s = 0.0f;
            for (int j = 0; j < K; j++) s += w[(size_t)c * K + j] * hist[(size_t)(t + j) * width + c0 + c];
            out[(size_t)t * width + c0 + c] = s;
        }
    }
}

int nf_cpu_kda_block(nf_backend *be, int il, nf_state *st, const float *x, int T, float *y) {
    nf_cpu *c = nf_cpu_of(be);
    const nf_hparams *hp = &c->m->hp;
    const nf_layer *L = &c->m->layers[il];
    nf_layer_state *LS = &st->L[il];
    const int n = hp->n_embd, H = hp->kda_n_head, hd = hp->kda_head_dim, inner = H * hd, width = 3 * inner;
    const int K = hp->kda_conv, rank = hp->kda_gate_rank > 0 ? hp->kda_gate_rank : (int)L->kda_f_a.ne[1];
    if (hd > 512) return nf_fail("kda: head_dim %d > 512 unsupported", hd);

    const float *wq = nf_cpu_vec(c, &L->kda_conv_q), *wk = nf_cpu_vec(c, &L->kda_conv_k),
                *wv = nf_cpu_vec(c, &L->kda_conv_v), *dt = nf_cpu_vec(c, &L->kda_dt_bias),
                *ssm_a = nf_cpu_vec(c, &L->kda_a), *onorm = nf_cpu_vec(c, &L->kda_norm);
    if (!wq || !wk || !wv || !dt || !ssm_a || !onorm) return nf_fail_prefix("layer %d kda", il);

    const int rows = K - 1;
    float *hist = malloc((size_t)(rows + T) * width * sizeof(float)); /* conv window ++ new pre-conv rows */
    float *qkv = malloc((size_t)T * width * sizeof(float));
    float *tmp = malloc((size_t)T * (rank > H ? rank : H) * sizeof(float));
    float *g = malloc((size_t)T * inner * sizeof(float));
    float *beta = malloc((size_t)T * H * sizeof(float));
    float *o = malloc((size_t)T * inner * sizeof(float));
    float *gate = malloc((size_t)T * inner * sizeof(float));
    int rc = -1;
    if (!hist || !qkv || !tmp || !g || !beta || !o || !gate) {
        nf_fail("kda: out of memory");
        goto out;
    }

    /* projections, written after the conv window rows */
    float *u = hist + (size_t)rows * width;
    nf_mat mq = nf_mat_of(&L->kda_q), mk = nf_mat_of(&L->kda_k), mv = nf_mat_of(&L->kda_v);
    nf_matmul(c->pool, &mq, x, T, n, u, width);
    nf_matmul(c->pool, &mk, x, T, n, u + inner, width);
    nf_matmul(c->pool, &mv, x, T, n, u + 2 * inner, width);
    if (rows > 0) memcpy(hist, LS->conv, (size_t)rows * width * sizeof(float));

    /* causal depthwise conv + SiLU; then keep the last K-1 pre-conv rows as the new window */
    conv_range(hist, T, K, width, 0, inner, wq, qkv);
    conv_range(hist, T, K, width, inner, inner, wk, qkv);
    conv_range(hist, T, K, width, 2 * inner, inner, wv, qkv);
    for (size_t i = 0; i < (size_t)T * width; i++) qkv[i] = nf_silu(qkv[i]);
    if (rows > 0) memcpy(LS->conv, hist + (size_t)T * width, (size_t)rows * width * sizeof(float));

    /* L2 norm of q and k per head; q scaled by 1/sqrt(hd) */
    const float qscale = 1.0f / sqrtf((float)hd);
    for (int t = 0; t < T; t++) {
        float *row = qkv + (size_t)t * width;
        for (int h = 0; h < H; h++) {
            nf_l2norm_row(row + h * hd, hd, 1e-6f);
            nf_l2norm_row(row + inner + h * hd, hd, 1e-6f);
            for (int i = 0; i < hd; i++) row[h * hd + i] *= qscale;
        }
    }

    /* forget gate: g = lb * sigmoid(exp(A_log) * (f + dt_bias)), exp(A_log) = -ssm_a */
    nf_mat fa = nf_mat_of(&L->kda_f_a), fb = nf_mat_of(&L->kda_f_b);
    nf_matmul(c->pool, &fa, x, T, n, tmp, rank);
    nf_matmul(c->pool, &fb, tmp, T, rank, g, inner);
    const float lb = hp->kda_gate_lower_bound;
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < H; h++) {
            float rate = -ssm_a[h];
            float *gr = g + (size_t)t * inner + h * hd;
            for (int i = 0; i < hd; i++) {
                float f = gr[i] + dt[h * hd + i];
                gr[i] = lb < 0.0f ? lb * nf_sigmoidf(rate * f) : -rate * nf_softplus(f);
            }
        }
    }
    /* beta = sigmoid(Wb x) */
    nf_mat mb = nf_mat_of(&L->kda_beta);
    nf_matmul(c->pool, &mb, x, T, n, beta, H);
    for (int i = 0; i < T * H; i++) beta[i] = nf_sigmoidf(beta[i]);

    kda_job job = {.S = LS->S, .qkv = qkv, .g = g, .beta = beta, .o = o, .T = T, .H = H, .hd = hd};
    nf_pool_run(c->pool, H, kda_head_task, &job);

    /* output gate and gated per-head RMSNorm */
    nf_mat ga = nf_mat_of(&L->kda_g_a), gb = nf_mat_of(&L->kda_g_b);
    nf_matmul(c->pool, &ga, x, T, n, tmp, rank);
    nf_matmul(c->pool, &gb, tmp, T, rank, gate, inner);
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < H; h++) {
            float *oh = o + (size_t)t * inner + h * hd;
            const float *gh = gate + (size_t)t * inner + h * hd;
            nf_rmsnorm_row(oh, hd, hp->rms_eps, onorm, oh);
            for (int i = 0; i < hd; i++) oh[i] *= nf_sigmoidf(gh[i]);
        }
    }
    nf_mat wo = nf_mat_of(&L->attn_output);
    nf_matmul(c->pool, &wo, o, T, inner, y, n);
    rc = 0;
out:
    free(hist);
    free(qkv);
    free(tmp);
    free(g);
    free(beta);
    free(o);
    free(gate);
    return rc;
}
