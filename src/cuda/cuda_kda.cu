/* cuda_kda.cu — Kimi Delta Attention on the GPU (the CPU reference and the mathematics: src/cpu/kda.c).
 *
 * q|k|v projections written after the layer's conv window (device state), the causal depthwise conv + SiLU,
 * the new window copied back, per-head L2 norms (q scaled by 1/sqrt(hd)), the forget gate and beta, then the
 * exact per-token delta-rule recurrence in fp32: one thread block per head, thread j owning column j of
 * S[head][key][value] (the column's update depends on no other column), accumulating over keys in the CPU's
 * order with unfused multiply/add, so prefill, chunked prefill and decode are bit-identical on the GPU too.
 * Then the gated per-head RMSNorm and the output projection. */
#include "cuda/cuda_internal.h"

static unsigned blocks_for(int64_t n) {
    int64_t b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

/* qkv[t][c] = silu(sum_j w[c][j] hist[t + j][c]) over the 3 * inner channels */
__global__ void kda_conv_kernel(const float *hist, int T, int K, int inner, const float *wq, const float *wk,
                                const float *wv, float *qkv) {
    const int width = 3 * inner;
    const int64_t total = (int64_t)T * width;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int t = (int)(idx / width), ch = (int)(idx % width);
        const int part = ch / inner, cc = ch % inner;
        const float *w = (part == 0 ? wq : part == 1 ? wk : wv) + (size_t)cc * K;
        float s = 0.0f;
        for (int j = 0; j < K; j++) s = __fadd_rn(s, __fmul_rn(w[j], hist[(size_t)(t + j) * width + ch]));
        qkv[idx] = nf_d_silu(s);
    }
}

/* one warp per (t, head, q|k): x / sqrt(sum x^2 + 1e-6); q then times qscale */
__global__ void kda_l2norm_kernel(float *qkv, int T, int H, int hd, float qscale) {
    const int w = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (w >= T * H * 2) return;
    const int t = w / (2 * H), h = (w / 2) % H, isk = w % 2;
    const int inner = H * hd;
    float *x = qkv + (size_t)t * 3 * inner + (size_t)isk * inner + (size_t)h * hd;
    double ss = 0.0;
    for (int i = lane; i < hd; i += 32) ss += (double)x[i] * (double)x[i];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float d = sqrtf(__fadd_rn((float)ss, 1e-6f));
    for (int i = lane; i < hd; i += 32) {
        float v = __fdiv_rn(x[i], d);
        if (!isk) v = __fmul_rn(v, qscale);
        x[i] = v;
    }
}

__global__ void kda_gate_kernel(float *g, const float *dt, const float *ssm_a, int T, int H, int hd, float lb) {
    const int inner = H * hd;
    const int64_t total = (int64_t)T * inner;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int c = (int)(idx % inner), h = c / hd;
        const float rate = -ssm_a[h];
        const float f = __fadd_rn(g[idx], dt[c]);
        g[idx] = lb < 0.0f ? __fmul_rn(lb, nf_d_sigmoid(__fmul_rn(rate, f))) : __fmul_rn(-rate, nf_d_softplus(f));
    }
}

/* the delta-rule recurrence: block = head, thread j = value column j */
__global__ void kda_recurrence_kernel(float *S, const float *qkv, const float *g, const float *beta, float *o, int T,
                                      int H, int hd) {
    extern __shared__ float sh[];
    float *sq = sh, *sk = sh + hd, *se = sh + 2 * hd;
    const int h = blockIdx.x, j = threadIdx.x;
    const int inner = H * hd;
    float *Sh = S + (size_t)h * hd * hd;
    for (int t = 0; t < T; t++) {
        const float *row = qkv + (size_t)t * 3 * inner;
        for (int i = threadIdx.x; i < hd; i += blockDim.x) {
            sq[i] = row[h * hd + i];
            sk[i] = row[inner + h * hd + i];
            se[i] = expf(g[(size_t)t * inner + h * hd + i]);
        }
        __syncthreads();
        if (j < hd) {
            float pred = 0.0f;
            for (int i = 0; i < hd; i++) {
                const float s = __fmul_rn(Sh[(size_t)i * hd + j], se[i]);
                Sh[(size_t)i * hd + j] = s;
                pred = __fadd_rn(pred, __fmul_rn(s, sk[i]));
            }
            const float v = row[2 * inner + h * hd + j];
            const float d = __fmul_rn(__fsub_rn(v, pred), beta[(size_t)t * H + h]);
            float acc = 0.0f;
            for (int i = 0; i < hd; i++) {
                const float s = __fadd_rn(Sh[(size_t)i * hd + j], __fmul_rn(sk[i], d));
                Sh[(size_t)i * hd + j] = s;
                acc = __fadd_rn(acc, __fmul_rn(s, sq[i]));
            }
            o[(size_t)t * inner + h * hd + j] = acc;
        }
        __syncthreads();
    }
}

__global__ void mul_sigmoid_kernel(float *o, const float *gate, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        o[i] = __fmul_rn(o[i], nf_d_sigmoid(gate[i]));
}

int nf_cuda_kda_block(nf_backend *be, int il, nf_state *st, const float *x, int T, float *y) {
    nf_cuda *c = nf_cuda_of(be);
    if (nf_cuda_state_check(st) < 0) return -1;
    const nf_hparams *hp = &c->m->hp;
    const nf_layer *L = &c->m->layers[il];
    nf_layer_state *LS = &st->L[il];
    const int n = hp->n_embd, H = hp->kda_n_head, hd = hp->kda_head_dim, inner = H * hd, width = 3 * inner;
    const int K = hp->kda_conv, rank = hp->kda_gate_rank > 0 ? hp->kda_gate_rank : (int)L->kda_f_a.ne[1];
    if (hd > 1024) return nf_fail("cuda kda: head_dim %d > 1024 unsupported", hd);
    const float *wq = nf_cuda_vec(c, &L->kda_conv_q), *wk = nf_cuda_vec(c, &L->kda_conv_k),
                *wv = nf_cuda_vec(c, &L->kda_conv_v), *dt = nf_cuda_vec(c, &L->kda_dt_bias),
                *ssm_a = nf_cuda_vec(c, &L->kda_a), *onorm = nf_cuda_vec(c, &L->kda_norm);
    if (!wq || !wk || !wv || !dt || !ssm_a || !onorm) return nf_fail_prefix("layer %d kda", il);

    const int rows = K - 1;
    nf_cuda_scratch sc(c);
    float *hist = sc.get<float>((size_t)(rows + T) * width), *qkv = sc.get<float>((size_t)T * width),
          *tmp = sc.get<float>((size_t)T * (rank > H ? rank : H)), *g = sc.get<float>((size_t)T * inner),
          *beta = sc.get<float>((size_t)T * H), *o = sc.get<float>((size_t)T * inner),
          *gate = sc.get<float>((size_t)T * inner);
    if (!hist || !qkv || !tmp || !g || !beta || !o || !gate) return nf_fail("cuda kda: out of device memory");
    cudaStream_t s = c->stream;

    float *u = hist + (size_t)rows * width;
    nf_cuda_mat mq = nf_cuda_mat_of(c, &L->kda_q), mk = nf_cuda_mat_of(c, &L->kda_k), mv = nf_cuda_mat_of(c, &L->kda_v);
    if (nf_cuda_matmul(c, &mq, x, T, n, u, width) < 0 || nf_cuda_matmul(c, &mk, x, T, n, u + inner, width) < 0 ||
        nf_cuda_matmul(c, &mv, x, T, n, u + 2 * inner, width) < 0)
        return -1;
    if (rows > 0) NF_CU(cudaMemcpyAsync(hist, LS->conv, (size_t)rows * width * sizeof(float), cudaMemcpyDeviceToDevice, s));
    kda_conv_kernel<<<blocks_for((int64_t)T * width), 256, 0, s>>>(hist, T, K, inner, wq, wk, wv, qkv);
    NF_LAUNCHED();
    if (rows > 0)
        NF_CU(cudaMemcpyAsync(LS->conv, hist + (size_t)T * width, (size_t)rows * width * sizeof(float),
                              cudaMemcpyDeviceToDevice, s));
    const int warps = T * H * 2;
    kda_l2norm_kernel<<<(warps + 7) / 8, 256, 0, s>>>(qkv, T, H, hd, 1.0f / sqrtf((float)hd));
    NF_LAUNCHED();

    nf_cuda_mat fa = nf_cuda_mat_of(c, &L->kda_f_a), fb = nf_cuda_mat_of(c, &L->kda_f_b);
    if (nf_cuda_matmul(c, &fa, x, T, n, tmp, rank) < 0 || nf_cuda_matmul(c, &fb, tmp, T, rank, g, inner) < 0) return -1;
    kda_gate_kernel<<<blocks_for((int64_t)T * inner), 256, 0, s>>>(g, dt, ssm_a, T, H, hd, hp->kda_gate_lower_bound);
    NF_LAUNCHED();
    nf_cuda_mat mb = nf_cuda_mat_of(c, &L->kda_beta);
    if (nf_cuda_matmul(c, &mb, x, T, n, beta, H) < 0 || nf_cuda_sigmoid(c, beta, (int64_t)T * H) < 0) return -1;

    const int threads = ((hd + 31) / 32) * 32;
    kda_recurrence_kernel<<<H, threads, 3 * hd * sizeof(float), s>>>(LS->S, qkv, g, beta, o, T, H, hd);
    NF_LAUNCHED();

    nf_cuda_mat ga = nf_cuda_mat_of(c, &L->kda_g_a), gb = nf_cuda_mat_of(c, &L->kda_g_b);
    if (nf_cuda_matmul(c, &ga, x, T, n, tmp, rank) < 0 || nf_cuda_matmul(c, &gb, tmp, T, rank, gate, inner) < 0)
        return -1;
    if (nf_cuda_rmsnorm_rows(c, o, hd, T * H, hd, hp->rms_eps, onorm, o, hd) < 0) return -1;
    mul_sigmoid_kernel<<<blocks_for((int64_t)T * inner), 256, 0, s>>>(o, gate, (int64_t)T * inner);
    NF_LAUNCHED();
    nf_cuda_mat wo = nf_cuda_mat_of(c, &L->attn_output);
    return nf_cuda_matmul(c, &wo, o, T, inner, y, n);
}
