/* cuda_mla.cu — multi-head latent attention (NoPE, absorbed form) over the DSA selection, on the GPU (the
 * CPU reference and the mathematics: src/cpu/mla.c).
 *
 * mla_project: q latent (RMSNorm), per-head queries, and the normalised kv latent appended to the device latent
 * cache at [pos, pos+T). mla_attend: qt = Kb_h^T q_h for every (token, head) in one batched product over the 3-D
 * k_b tensor, then one thread block per (token, head): scores against the cached latents of the selected
 * positions, softmax (double sum, selection order, as the CPU), u = sum p c in selection order; then o = Vb_h u
 * (batched over v_b) and the output projection. */
#include <math.h>

#include "cuda/cuda_internal.h"

int nf_cuda_mla_project(nf_backend *be, int il, nf_state *st, const float *x, int T, float *qr, float *q) {
    nf_cuda *c = nf_cuda_of(be);
    if (nf_cuda_state_check(st) < 0) return -1;
    const nf_hparams *hp = &c->m->hp;
    const nf_layer *L = &c->m->layers[il];
    nf_layer_state *LS = &st->L[il];
    const int n = hp->n_embd, ql = hp->q_lora_rank, kl = hp->kv_lora_rank;
    const float *qan = nf_cuda_vec(c, &L->q_a_norm), *kvn = nf_cuda_vec(c, &L->kv_a_norm);
    if (!qan || !kvn) return nf_fail_prefix("layer %d mla", il);
    const int kv_rows = (int)L->kv_a.ne[1];
    nf_cuda_scratch sc(c);
    float *kv = sc.get<float>((size_t)T * kv_rows);
    if (!kv) return nf_fail("cuda mla: out of device memory");
    nf_cuda_mat qa = nf_cuda_mat_of(c, &L->q_a), qb = nf_cuda_mat_of(c, &L->q_b), ka = nf_cuda_mat_of(c, &L->kv_a);
    if (nf_cuda_matmul(c, &qa, x, T, n, qr, ql) < 0) return -1;
    if (nf_cuda_rmsnorm_rows(c, qr, ql, T, ql, hp->rms_eps, qan, qr, ql) < 0) return -1;
    if (nf_cuda_matmul(c, &qb, qr, T, ql, q, (int64_t)hp->n_head * hp->qk_nope_dim) < 0) return -1;
    if (nf_cuda_matmul(c, &ka, x, T, n, kv, kv_rows) < 0) return -1;
    return nf_cuda_rmsnorm_rows(c, kv, kv_rows, T, kl, hp->rms_eps, kvn, LS->latent + (size_t)st->pos * kl, kl);
}

#define ATT_THREADS 256

/* block = (t, h): p[width] scratch row, u[kl] output row */
__global__ void mla_attend_kernel(const float *latent, const float *qt, const int32_t *sel, int width, int H, int kl,
                                  float scale, float *P, float *U) {
    __shared__ float s_inv;
    __shared__ int s_ns;
    const int v = blockIdx.x, t = v / H;
    const int32_t *row = sel + (size_t)t * width;
    const float *q = qt + (size_t)v * kl;
    float *p = P + (size_t)v * width;
    float *u = U + (size_t)v * kl;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
    for (int s = warp; s < width; s += nw) {
        const int32_t pos = row[s];
        if (pos < 0) continue;
        const float *cl = latent + (size_t)pos * kl;
        float d = 0.0f;
        for (int r = lane; r < kl; r += 32) d += q[r] * cl[r];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
        if (lane == 0) p[s] = __fmul_rn(d, scale);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        /* softmax over the valid entries in selection order (src/cpu/vec.c nf_softmax_row) */
        int ns = 0;
        float mx = 0.0f;
        for (int s = 0; s < width; s++) {
            if (row[s] < 0) continue;
            if (ns == 0 || p[s] > mx) mx = p[s];
            ns++;
        }
        double sum = 0.0;
        for (int s = 0; s < width; s++) {
            if (row[s] < 0) continue;
            const float e = expf(__fsub_rn(p[s], mx));
            p[s] = e;
            sum += e;
        }
        s_ns = ns;
        s_inv = ns ? (float)(1.0 / sum) : 0.0f;
    }
    __syncthreads();
    const float inv = s_inv;
    for (int r = threadIdx.x; r < kl; r += blockDim.x) {
        float acc = 0.0f;
        if (s_ns) {
            for (int s = 0; s < width; s++) {
                const int32_t pos = row[s];
                if (pos < 0) continue;
                acc = __fadd_rn(acc, __fmul_rn(__fmul_rn(p[s], inv), latent[(size_t)pos * kl + r]));
            }
        }
        u[r] = acc;
    }
}

int nf_cuda_mla_attend(nf_backend *be, int il, nf_state *st, const float *q, const int32_t *sel, int T, float *y) {
    nf_cuda *c = nf_cuda_of(be);
    if (nf_cuda_state_check(st) < 0) return -1;
    const nf_hparams *hp = &c->m->hp;
    const nf_layer *L = &c->m->layers[il];
    const int H = hp->n_head, dk = hp->qk_nope_dim, dv = hp->v_head_dim, kl = hp->kv_lora_rank;
    const int width = nf_topk_width(hp);
    nf_cuda_scratch sc(c);
    float *qt = sc.get<float>((size_t)T * H * kl), *P = sc.get<float>((size_t)T * H * width),
          *U = sc.get<float>((size_t)T * H * kl), *o = sc.get<float>((size_t)T * H * dv);
    if (!qt || !P || !U || !o) return nf_fail("cuda mla: out of device memory");
    nf_cuda_mat kb = nf_cuda_mat_of(c, &L->k_b), vb = nf_cuda_mat_of(c, &L->v_b);
    if (nf_cuda_matmul_ex(c, &kb, q, dk, 1, H, nullptr, qt, kl, T * H) < 0) return -1;
    mla_attend_kernel<<<T * H, ATT_THREADS, 0, c->stream>>>(st->L[il].latent, qt, sel, width, H, kl,
                                                             1.0f / sqrtf((float)dk), P, U);
    NF_LAUNCHED();
    if (nf_cuda_matmul_ex(c, &vb, U, kl, 1, H, nullptr, o, dv, T * H) < 0) return -1;
    nf_cuda_mat wo = nf_cuda_mat_of(c, &L->attn_output);
    return nf_cuda_matmul(c, &wo, o, T, (int64_t)H * dv, y, hp->n_embd);
}
