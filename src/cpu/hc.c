/* hc.c — manifold-constrained hyper-connections (mHC) on the CPU: the per-site mixing weights (pre, post and
 * the Sinkhorn-projected combination matrix), the collapse of the streams into the block input (hc_pre) and
 * the expansion + mixing after the block (hc_post). Follows HF Glm5NextTextHyperConnection and the decoder
 * layer's combine step exactly (spec §2.1). */
#include "cpu/cpu.h"

#include <stdlib.h>
#include <string.h>

#include "util/error.h"

void nf_hc_sinkhorn(float *comb, int hc, int iters, float eps) {
    for (int i = 0; i < hc; i++) {
        nf_softmax_row(comb + i * hc, hc);
        for (int j = 0; j < hc; j++) comb[i * hc + j] += eps;
    }
    /* column pass: divide each column j by (sum over i + eps) */
    for (int it = 0; it < iters; it++) {
        if (it > 0) {
            for (int i = 0; i < hc; i++) {
                float s = 0.0f;
                for (int j = 0; j < hc; j++) s += comb[i * hc + j];
                s += eps;
                for (int j = 0; j < hc; j++) comb[i * hc + j] /= s;
            }
        }
        for (int j = 0; j < hc; j++) {
            float s = 0.0f;
            for (int i = 0; i < hc; i++) s += comb[i * hc + j];
            s += eps;
            for (int i = 0; i < hc; i++) comb[i * hc + j] /= s;
        }
    }
}

int nf_cpu_hc_pre(nf_backend *be, int il, int site, const float *X, int T, float *h, float *mix) {
    nf_cpu *c = nf_cpu_of(be);
    const nf_hparams *hp = &c->m->hp;
    const nf_layer *L = &c->m->layers[il];
    const nf_tensor *fn = site == 0 ? &L->hc_attn_fn : &L->hc_ffn_fn;
    const float *base = nf_cpu_vec(c, site == 0 ? &L->hc_attn_base : &L->hc_ffn_base);
    const float *scale = nf_cpu_vec(c, site == 0 ? &L->hc_attn_scale : &L->hc_ffn_scale);
    if (!base || !scale) return nf_fail_prefix("layer %d hc", il);
    const int hc = hp->hc_count, n = hp->n_embd, nm = (2 + hc) * hc;
    const int64_t flat = (int64_t)hc * n;

    float *r = malloc((size_t)T * flat * sizeof(float));
    float *mm = malloc((size_t)T * nm * sizeof(float));
    if (!r || !mm) {
        free(r);
        free(mm);
        return nf_fail("hc_pre: out of memory");
    }
    for (int t = 0; t < T; t++) nf_rmsnorm_row(X + t * flat, flat, hp->rms_eps, NULL, r + t * flat);
    nf_mat w = nf_mat_of(fn);
    nf_matmul(c->pool, &w, r, T, flat, mm, nm);

    float pre[64];
    for (int t = 0; t < T; t++) {
        const float *m = mm + t * nm;
        float *post = mix + (size_t)t * (hc + hc * hc);
        float *comb = post + hc;
        for (int s = 0; s < hc; s++) {
            pre[s] = nf_sigmoidf(m[s] * scale[0] + base[s]) + hp->hc_eps;
            post[s] = 2.0f * nf_sigmoidf(m[hc + s] * scale[1] + base[hc + s]);
        }
        for (int k = 0; k < hc * hc; k++) comb[k] = m[2 * hc + k] * scale[2] + base[2 * hc + k];
        nf_hc_sinkhorn(comb, hc, hp->hc_sinkhorn_iters, hp->hc_eps);
        const float *x = X + t * flat;
        float *out = h + (size_t)t * n;
        for (int i = 0; i < n; i++) {
            float s = 0.0f;
            for (int k = 0; k < hc; k++) s += pre[k] * x[(size_t)k * n + i];
            out[i] = s;
        }
    }
    free(r);
    free(mm);
    return 0;
}

int nf_cpu_hc_post(nf_backend *be, float *X, const float *y, const float *mix, int T) {
    nf_cpu *c = nf_cpu_of(be);
    const int hc = c->m->hp.hc_count, n = c->m->hp.n_embd;
    float *tmp = malloc((size_t)hc * n * sizeof(float));
    if (!tmp) return nf_fail("hc_post: out of memory");
    for (int t = 0; t < T; t++) {
        const float *post = mix + (size_t)t * (hc + hc * hc);
        const float *comb = post + hc;
        float *x = X + (size_t)t * hc * n;
        const float *yt = y + (size_t)t * n;
        for (int j = 0; j < hc; j++) {
            float *o = tmp + (size_t)j * n;
            for (int e = 0; e < n; e++) {
                float s = 0.0f;
                for (int i = 0; i < hc; i++) s += comb[i * hc + j] * x[(size_t)i * n + e];
                o[e] = post[j] * yt[e] + s;
            }
        }
        memcpy(x, tmp, (size_t)hc * n * sizeof(float));
    }
    free(tmp);
    return 0;
}
