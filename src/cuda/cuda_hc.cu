/* cuda_hc.cu — manifold-constrained hyper-connections on the GPU: hc_pre (RMSNorm of the flattened streams,
 * the mixing projection, pre/post weights and the Sinkhorn-projected combination matrix, the collapse of the
 * streams) and hc_post (expand the block output and mix the streams). Same operations and orders as
 * src/cpu/hc.c; the Sinkhorn iterations of one token are tiny (hc x hc) and run in one thread. */
#include "cuda/cuda_internal.h"

#define HC_MAX 16

__device__ void softmax_row_d(float *x, int n) {
    float mx = x[0];
    for (int i = 1; i < n; i++) if (x[i] > mx) mx = x[i];
    double s = 0.0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(__fsub_rn(x[i], mx));
        s += x[i];
    }
    const float inv = (float)(1.0 / s);
    for (int i = 0; i < n; i++) x[i] = __fmul_rn(x[i], inv);
}

__device__ void sinkhorn_d(float *comb, int hc, int iters, float eps) {
    for (int i = 0; i < hc; i++) {
        softmax_row_d(comb + i * hc, hc);
        for (int j = 0; j < hc; j++) comb[i * hc + j] = __fadd_rn(comb[i * hc + j], eps);
    }
    for (int it = 0; it < iters; it++) {
        if (it > 0) {
            for (int i = 0; i < hc; i++) {
                float s = 0.0f;
                for (int j = 0; j < hc; j++) s = __fadd_rn(s, comb[i * hc + j]);
                s = __fadd_rn(s, eps);
                for (int j = 0; j < hc; j++) comb[i * hc + j] = __fdiv_rn(comb[i * hc + j], s);
            }
        }
        for (int j = 0; j < hc; j++) {
            float s = 0.0f;
            for (int i = 0; i < hc; i++) s = __fadd_rn(s, comb[i * hc + j]);
            s = __fadd_rn(s, eps);
            for (int i = 0; i < hc; i++) comb[i * hc + j] = __fdiv_rn(comb[i * hc + j], s);
        }
    }
}

/* one thread per token: pre[T][hc], mix[T][hc + hc*hc] from the projection mm[T][(2+hc)*hc] */
__global__ void hc_mix_kernel(const float *mm, const float *base, const float *scale, int T, int hc, int iters,
                              float eps, float *pre, float *mix) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    const int nm = (2 + hc) * hc;
    const float *m = mm + (size_t)t * nm;
    float *post = mix + (size_t)t * (hc + hc * hc);
    float comb[HC_MAX * HC_MAX];
    for (int s = 0; s < hc; s++) {
        pre[(size_t)t * hc + s] = __fadd_rn(nf_d_sigmoid(__fadd_rn(__fmul_rn(m[s], scale[0]), base[s])), eps);
        post[s] = __fmul_rn(2.0f, nf_d_sigmoid(__fadd_rn(__fmul_rn(m[hc + s], scale[1]), base[hc + s])));
    }
    for (int k = 0; k < hc * hc; k++) comb[k] = __fadd_rn(__fmul_rn(m[2 * hc + k], scale[2]), base[2 * hc + k]);
    sinkhorn_d(comb, hc, iters, eps);
    for (int k = 0; k < hc * hc; k++) post[hc + k] = comb[k];
}

/* h[t][i] = sum_k pre[t][k] X[t][k][i] */
__global__ void hc_collapse_kernel(const float *X, const float *pre, int T, int hc, int n, float *h) {
    const int64_t total = (int64_t)T * n;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int t = (int)(idx / n), i = (int)(idx % n);
        const float *x = X + (size_t)t * hc * n;
        float s = 0.0f;
        for (int k = 0; k < hc; k++) s = __fadd_rn(s, __fmul_rn(pre[(size_t)t * hc + k], x[(size_t)k * n + i]));
        h[idx] = s;
    }
}

static unsigned blocks_for(int64_t n) {
    int64_t b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

int nf_cuda_hc_pre(nf_backend *be, int il, int site, const float *X, int T, float *h, float *mix) {
    nf_cuda *c = nf_cuda_of(be);
    const nf_hparams *hp = &c->m->hp;
    const nf_layer *L = &c->m->layers[il];
    const nf_tensor *fn = site == 0 ? &L->hc_attn_fn : &L->hc_ffn_fn;
    const float *base = nf_cuda_vec(c, site == 0 ? &L->hc_attn_base : &L->hc_ffn_base);
    const float *scale = nf_cuda_vec(c, site == 0 ? &L->hc_attn_scale : &L->hc_ffn_scale);
    if (!base || !scale) return nf_fail_prefix("layer %d hc", il);
    const int hc = hp->hc_count, n = hp->n_embd, nm = (2 + hc) * hc;
    if (hc > HC_MAX) return nf_fail("cuda hc: hc_count %d > %d", hc, HC_MAX);
    const int64_t flat = (int64_t)hc * n;
    nf_cuda_scratch sc(c);
    float *r = sc.get<float>((size_t)T * flat), *mm = sc.get<float>((size_t)T * nm), *pre = sc.get<float>((size_t)T * hc);
    if (!r || !mm || !pre) return nf_fail("cuda hc_pre: out of device memory");
    if (nf_cuda_rmsnorm_rows(c, X, flat, T, flat, hp->rms_eps, nullptr, r, flat) < 0) return -1;
    nf_cuda_mat w = nf_cuda_mat_of(c, fn);
    if (nf_cuda_matmul(c, &w, r, T, flat, mm, nm) < 0) return -1;
    hc_mix_kernel<<<(T + 63) / 64, 64, 0, c->stream>>>(mm, base, scale, T, hc, hp->hc_sinkhorn_iters, hp->hc_eps, pre, mix);
    NF_LAUNCHED();
    hc_collapse_kernel<<<blocks_for((int64_t)T * n), 256, 0, c->stream>>>(X, pre, T, hc, n, h);
    NF_LAUNCHED();
    return 0;
}

/* X[t][j][e] = post[j] y[t][e] + sum_i comb[i][j] X[t][i][e] (each thread owns one (t, e) column of X) */
__global__ void hc_post_kernel(float *X, const float *y, const float *mix, int T, int hc, int n) {
    const int64_t total = (int64_t)T * n;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int t = (int)(idx / n), e = (int)(idx % n);
        float *x = X + (size_t)t * hc * n;
        const float *post = mix + (size_t)t * (hc + hc * hc), *comb = post + hc;
        float xi[HC_MAX];
        for (int i = 0; i < hc; i++) xi[i] = x[(size_t)i * n + e];
        const float yv = y[idx];
        for (int j = 0; j < hc; j++) {
            float s = 0.0f;
            for (int i = 0; i < hc; i++) s = __fadd_rn(s, __fmul_rn(comb[i * hc + j], xi[i]));
            x[(size_t)j * n + e] = __fadd_rn(__fmul_rn(post[j], yv), s);
        }
    }
}

int nf_cuda_hc_post(nf_backend *be, float *X, const float *y, const float *mix, int T) {
    nf_cuda *c = nf_cuda_of(be);
    const int hc = c->m->hp.hc_count, n = c->m->hp.n_embd;
    if (hc > HC_MAX) return nf_fail("cuda hc: hc_count %d > %d", hc, HC_MAX);
    hc_post_kernel<<<blocks_for((int64_t)T * n), 256, 0, c->stream>>>(X, y, mix, T, hc, n);
    NF_LAUNCHED();
    return 0;
}
