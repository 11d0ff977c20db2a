/* cuda_kda.cu — Kimi Delta Attention on the GPU (the CPU reference and the mathematics: src/cpu/kda.c).
 *
 * q|k|v projections written after the layer's conv window (device state), the causal depthwise conv + SiLU,
 * the new window copied back, then the delta-rule recurrence in fp32 (nf_cuda_kda_recurrence, cuda_kda.h: the
 * fused kernel below for a few tokens, the prepared path of cuda_kda_scan.cu for prefill, bit-identical to it;
 * in the default bf16 mode prefill calls of >= 64 tokens take the chunked form of cuda_kda_chunk.cu, which rounds
 * differently), then the per-head RMSNorm times the output gate (one launch) and the output projection. */
#include "cuda/cuda_internal.h"
#include "cuda/cuda_kda.h"
#include "cuda/cuda_launch.h"

static unsigned blocks_for(int64_t n) {
    int64_t b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

/* One output of the causal conv, before its SiLU: sum over taps j < K of w[j] * h(t + j), in index order with
 * unfused products, the taps in groups of 4 whose loads are issued together (glm53: K = 4, one round trip instead
 * of K). Both conv kernels use it, so they produce the same bits. */
template <class H> __device__ __forceinline__ float conv_taps(const float *w, int K, int t, H h) {
    float s = 0.0f;
    for (int j0 = 0; j0 < K; j0 += 4) {
        float wv[4], hv[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            wv[u] = j0 + u < K ? w[j0 + u] : 0.0f;
            hv[u] = j0 + u < K ? h(t + j0 + u) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (j0 + u < K) s = __fadd_rn(s, __fmul_rn(wv[u], hv[u]));
    }
    return s;
}

/* the conv weights (K taps) of channel ch of q, k, v */
__device__ __forceinline__ const float *conv_weights(int ch, int inner, int K, const float *wq, const float *wk, const float *wv) {
    const int part = ch / inner, cc = ch % inner;
    return (part == 0 ? wq : part == 1 ? wk : wv) + (size_t)cc * K;
}

/* qkv[t][c] = silu(sum_j w[c][j] hist[t + j][c]) over the 3 * inner channels */
__global__ void kda_conv_kernel(const float *hist, int T, int K, int inner, const float *wq, const float *wk,
                                const float *wv, float *qkv) {
    NF_PDL_ENTER();
    const int width = 3 * inner;
    const int64_t total = (int64_t)T * width;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int t = (int)(idx / width), ch = (int)(idx % width);
        const float *w = conv_weights(ch, inner, K, wq, wk, wv);
        qkv[idx] = nf_d_silu(conv_taps(w, K, t, [&](int r) { return hist[(size_t)r * width + ch]; }));
    }
}

/* The same outputs (conv_taps: the same bits) for a fixed kernel size K, a thread per channel and KDA_CONV_ROWS
 * consecutive tokens: the rows' K - 1 + KDA_CONV_ROWS history values are loaded once into registers (the
 * grid-stride kernel above loaded K per output and paid a 64-bit division per element: ~1/3 of the H100's
 * bandwidth on a 16384-token prefill chunk). Grid (channel blocks of 256, token blocks). */
#define KDA_CONV_ROWS 32
template <int K>
__global__ void __launch_bounds__(256) kda_conv_rows_kernel(const float *hist, int T, int inner, const float *wq,
                                                            const float *wk, const float *wv, float *qkv) {
    NF_PDL_ENTER();
    const int width = 3 * inner, ch = blockIdx.x * 256 + threadIdx.x, t0 = blockIdx.y * KDA_CONV_ROWS;
    if (ch >= width) return;
    const float *w = conv_weights(ch, inner, K, wq, wk, wv);
    float hv[KDA_CONV_ROWS + K - 1];
#pragma unroll
    for (int r = 0; r < KDA_CONV_ROWS + K - 1; r++)
        hv[r] = t0 + r < T + K - 1 ? hist[(size_t)(t0 + r) * width + ch] : 0.0f;
#pragma unroll
    for (int t = 0; t < KDA_CONV_ROWS; t++)
        if (t0 + t < T) qkv[(size_t)(t0 + t) * width + ch] = nf_d_silu(conv_taps(w, K, t, [&](int r) { return hv[r]; }));
}

/* The same convolution for a few tokens (decode, short verify blocks) on the layer's conv state in place: one thread
 * per channel reads its K - 1 history values and its T new values, writes the T outputs (conv_taps, so the same
 * bits as kda_conv_kernel) and then the channel's new state, the last K - 1 of those values.
 * No copies of the state through a scratch history: stream copies keep plain stream order and so cut the
 * programmatic launch chain (cuda_launch.h) twice per KDA layer. */
#define KDA_CONV_STEP_MAX 16 /* K - 1 + T at most: decode and short verify blocks */
__global__ void kda_conv_step_kernel(float *conv, const float *u, int T, int K, int inner, const float *wq,
                                     const float *wk, const float *wv, float *qkv) {
    NF_PDL_ENTER();
    const int width = 3 * inner, rows = K - 1;
    for (int ch = blockIdx.x * blockDim.x + threadIdx.x; ch < width; ch += gridDim.x * blockDim.x) {
        const float *w = conv_weights(ch, inner, K, wq, wk, wv);
        /* value r of the channel's history: the state's rows, then the new tokens */
        auto hist = [&](int r) { return r < rows ? conv[(size_t)r * width + ch] : u[(size_t)(r - rows) * width + ch]; };
        for (int t = 0; t < T; t++) qkv[(size_t)t * width + ch] = nf_d_silu(conv_taps(w, K, t, hist));
        /* the new state: values T .. T + rows - 1; row r reads value r + T > r, not yet overwritten */
        for (int r = 0; r < rows; r++) conv[(size_t)r * width + ch] = hist(r + T);
    }
}

/* The fused path of nf_cuda_kda_recurrence (cuda_kda.h): the delta-rule recurrence with its per-token inputs
 * prepared on the fly (in the CPU's operations, src/cpu/kda.c):
 * q and k L2-normalised (q times qscale), e = exp(gate(g_raw + dt)), beta = sigmoid(beta_raw). Block
 * (column group blockIdx.x, head blockIdx.y), 32 * ry threads: lane tx owns value column j = 32 * blockIdx.x + tx
 * (columns are independent), warp ty owns key rows [NF_KDA_ROWS * ty, NF_KDA_ROWS * (ty + 1)) of that column in
 * registers. The two key reductions per token (pred and the output) are each thread's sum over its rows in double,
 * then the warps' partial sums added in warp order, rounded to f32 once: a fixed order, so a token's values do not
 * depend on T (chunked prefill and decode stay bit-identical to one-shot prefill on the GPU); the CPU adds in f32
 * sequentially, which this matches within a few f32 ulps of the sum of |terms|. */
__global__ void kda_recurrence_kernel(float *S, const float *qkv, const float *graw, const float *dt,
                                      const float *ssm_a, float lb, const float *braw, float qscale, float *o, int T,
                                      int H, int hd) {
    NF_PDL_ENTER();
    extern __shared__ float sh[];
    __shared__ double red[2][32][33];
    __shared__ double rsh[32];
    float *sq = sh, *sk = sh + hd, *se = sh + 2 * hd;
    const int h = blockIdx.y, tid = threadIdx.x, tx = tid % 32, ty = tid / 32, ry = blockDim.x / 32;
    const int j = blockIdx.x * 32 + tx, inner = H * hd, i0 = ty * NF_KDA_ROWS;
    const bool col = j < hd;
    float *Sh = S + (size_t)h * hd * hd;
    float Sr[NF_KDA_ROWS];
#pragma unroll
    for (int r = 0; r < NF_KDA_ROWS; r++) Sr[r] = col && i0 + r < hd ? Sh[(size_t)(i0 + r) * hd + j] : 0.0f;
    const float rate = -ssm_a[h];
    for (int t = 0; t < T; t++) {
        const float *row = qkv + (size_t)t * 3 * inner;
        double pq = 0.0, pk = 0.0;
        for (int i = tid; i < hd; i += blockDim.x) {
            const float qv = row[h * hd + i], kv = row[inner + h * hd + i];
            sq[i] = qv;
            sk[i] = kv;
            pq += (double)qv * (double)qv;
            pk += (double)kv * (double)kv;
            se[i] = nf_d_kda_decay(graw[(size_t)t * inner + h * hd + i], dt[h * hd + i], rate, lb);
        }
        const float dq = sqrtf(__fadd_rn((float)nf_d_block_sum(pq, rsh), 1e-6f));
        const float dk = sqrtf(__fadd_rn((float)nf_d_block_sum(pk, rsh), 1e-6f));
        for (int i = tid; i < hd; i += blockDim.x) {
            sq[i] = __fmul_rn(__fdiv_rn(sq[i], dq), qscale);
            sk[i] = __fdiv_rn(sk[i], dk);
        }
        __syncthreads();
        const float beta = nf_d_sigmoid(braw[(size_t)t * H + h]);
        double p = 0.0;
#pragma unroll
        for (int r = 0; r < NF_KDA_ROWS; r++) {
            if (i0 + r < hd) {
                const float s = __fmul_rn(Sr[r], se[i0 + r]);
                Sr[r] = s;
                p += (double)__fmul_rn(s, sk[i0 + r]);
            }
        }
        red[0][ty][tx] = p;
        __syncthreads();
        double pred = 0.0;
        for (int y = 0; y < ry; y++) pred += red[0][y][tx];
        const float v = col ? row[2 * inner + h * hd + j] : 0.0f;
        const float d = __fmul_rn(__fsub_rn(v, (float)pred), beta);
        double acc = 0.0;
#pragma unroll
        for (int r = 0; r < NF_KDA_ROWS; r++) {
            if (i0 + r < hd) {
                const float s = __fadd_rn(Sr[r], __fmul_rn(sk[i0 + r], d));
                Sr[r] = s;
                acc += (double)__fmul_rn(s, sq[i0 + r]);
            }
        }
        red[1][ty][tx] = acc;
        __syncthreads();
        if (ty == 0 && col) {
            double a = 0.0;
            for (int y = 0; y < ry; y++) a += red[1][y][tx];
            o[(size_t)t * inner + h * hd + j] = (float)a;
        }
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < NF_KDA_ROWS; r++)
        if (col && i0 + r < hd) Sh[(size_t)(i0 + r) * hd + j] = Sr[r];
}

static bool prepared_allowed(void) {
    static int cache = -1;
    return nf_cuda_env_switch(&cache, "NF_CUDA_KDA_PREP", "off");
}

/* NF_CUDA_KDA_CHUNK=off: prefill keeps the bit-exact serial paths in the default mode too. Read at each call (not
 * cached) so that the GPU tests can turn it off around their bit-exactness checks of arbitrary chunkings. */
static bool chunked_allowed(void) { return nf_cuda_env_now("NF_CUDA_KDA_CHUNK", "off"); }

extern "C" int nf_cuda_kda_recurrence(cudaStream_t s, int path, float *S, float *qkv, float *g, const float *dt,
                                      const float *ssm_a, float lb, float *beta, float qscale, float *o, int T, int H,
                                      int hd, float *work) {
    if (H < 1 || hd < 1 || hd > NF_KDA_MAX_HEAD_DIM)
        return nf_fail("cuda kda: %d heads of head_dim %d unsupported (head_dim <= %d)", H, hd, NF_KDA_MAX_HEAD_DIM);
    if (T <= 0) return 0;
    if (path == NF_KDA_AUTO) {
        if (work && T >= NF_KDA_CHUNKED_MIN_T && nf_cuda_kda_chunked_supported(hd) && nf_cuda_gemm_mode() == 1 &&
            chunked_allowed())
            path = NF_KDA_CHUNKED;
        else
            path = prepared_allowed() && T >= NF_KDA_PREPARED_MIN_T && nf_cuda_kda_prepared_supported(hd)
                       ? NF_KDA_PREPARED
                       : NF_KDA_FUSED;
    }
    if (path == NF_KDA_CHUNKED)
        return nf_cuda_kda_chunked(s, S, qkv, g, dt, ssm_a, lb, beta, qscale, o, T, H, hd, work);
    if (path == NF_KDA_PREPARED) return nf_cuda_kda_prepared(s, S, qkv, g, dt, ssm_a, lb, beta, qscale, o, T, H, hd);
    if (path != NF_KDA_FUSED) return nf_fail("cuda kda: unknown recurrence path %d", path);
    const int ry = (hd + NF_KDA_ROWS - 1) / NF_KDA_ROWS;
    const dim3 grid((hd + 31) / 32, H);
    nf_launch(kda_recurrence_kernel, grid, 32 * ry, 3 * hd * sizeof(float), s, S, (const float *)qkv,
              (const float *)g, dt, ssm_a, lb, (const float *)beta, qscale, o, T, H, hd);
    NF_LAUNCHED();
    return 0;
}

/* NF_CUDA_KDA_CONV_STEP=off: decode convolves through the scratch history and two state copies, as prefill does (A/B) */
static bool conv_step_on(void) {
    static int cache = -1;
    return nf_cuda_env_switch(&cache, "NF_CUDA_KDA_CONV_STEP", "off");
}

/* NF_CUDA_KDA_CONV_ROWS (default on; =off for the grid-stride kernel): prefill's conv on the row kernel (the same
 * bits either way): 1.07 ms per 16384-token layer call on the H100 against 2.87 (session 22). */
static bool conv_rows_on(void) { return nf_cuda_env_now("NF_CUDA_KDA_CONV_ROWS", "off"); } /* test_backend: both */

int nf_cuda_kda_block(nf_backend *be, int il, nf_state *st, const float *x, int T, float *y) {
    nf_cuda *c = nf_cuda_of(be);
    if (nf_cuda_state_check(st) < 0) return -1;
    const nf_hparams *hp = &c->m->hp;
    const nf_layer *L = &c->m->layers[il];
    nf_layer_state *LS = &st->L[il];
    const int n = hp->n_embd, H = hp->kda_n_head, hd = hp->kda_head_dim, inner = H * hd, width = 3 * inner;
    const int K = hp->kda_conv, rank = hp->kda_gate_rank > 0 ? hp->kda_gate_rank : (int)L->kda_f_a.ne[1];
    if (hd > NF_KDA_MAX_HEAD_DIM) return nf_fail("cuda kda: head_dim %d > %d unsupported", hd, NF_KDA_MAX_HEAD_DIM);
    const float *wq = nf_cuda_vec(c, &L->kda_conv_q), *wk = nf_cuda_vec(c, &L->kda_conv_k),
                *wv = nf_cuda_vec(c, &L->kda_conv_v), *dt = nf_cuda_vec(c, &L->kda_dt_bias),
                *ssm_a = nf_cuda_vec(c, &L->kda_a), *onorm = nf_cuda_vec(c, &L->kda_norm);
    if (!wq || !wk || !wv || !dt || !ssm_a || !onorm) return nf_fail_prefix("layer %d kda", il);

    const int rows = K - 1;
    nf_cuda_scratch sc(c);
    float *hist = sc.get<float>((size_t)(rows + T) * width), *qkv = sc.get<float>((size_t)T * width),
          *tmp = sc.get<float>((size_t)T * rank), *tmpg = sc.get<float>((size_t)T * rank),
          *g = sc.get<float>((size_t)T * inner),
          *beta = sc.get<float>((size_t)T * H), *o = sc.get<float>((size_t)T * inner),
          *gate = sc.get<float>((size_t)T * inner);
    if (!hist || !qkv || !tmp || !tmpg || !g || !beta || !o || !gate) return nf_fail("cuda kda: out of device memory");
    /* the chunked recurrence's per-chunk decays (T / 64 x inner: 1/64 of one row buffer), for prefill calls only */
    float *work = T >= NF_KDA_CHUNKED_MIN_T ? sc.get<float>(nf_cuda_kda_work_floats(T, H, hd)) : nullptr;
    cudaStream_t s = c->stream;

    float *u = hist + (size_t)rows * width;
    nf_cuda_mat mq = nf_cuda_mat_of(c, &L->kda_q), mk = nf_cuda_mat_of(c, &L->kda_k), mv = nf_cuda_mat_of(c, &L->kda_v);
    nf_cuda_mat fa = nf_cuda_mat_of(c, &L->kda_f_a), fb = nf_cuda_mat_of(c, &L->kda_f_b);
    nf_cuda_mat ga = nf_cuda_mat_of(c, &L->kda_g_a), gb = nf_cuda_mat_of(c, &L->kda_g_b);
    nf_cuda_mat mb = nf_cuda_mat_of(c, &L->kda_beta);
    const nf_cuda_mat *wqkv[3] = {&mq, &mk, &mv};
    float *yqkv[3] = {u, u + inner, u + 2 * inner};
    /* decode: every projection of x in one launch (q, k, v, the decay's and output gate's down-projections, beta;
     * each of the small ones alone cost a launch's fixed time for a few hundred KB); prefill: q, k, v together
     * here, the others below */
    if (T == 1) {
        const nf_cuda_mat *wx[6] = {&mq, &mk, &mv, &fa, &ga, &mb};
        float *yx[6] = {u, u + inner, u + 2 * inner, tmp, tmpg, beta};
        if (nf_cuda_matvec_many(c, wx, 6, x, yx) < 0) return -1;
    } else if (nf_cuda_matmul_same(c, wqkv, 3, x, n, 1, nullptr, yqkv, width, T) < 0) {
        return -1;
    }
    if (rows + T <= KDA_CONV_STEP_MAX && conv_step_on()) {
        nf_launch(kda_conv_step_kernel, blocks_for(width), 256, 0, s, LS->conv, u, T, K, inner, wq, wk, wv, qkv);
        NF_LAUNCHED();
    } else {
        if (rows > 0) NF_CU(cudaMemcpyAsync(hist, LS->conv, (size_t)rows * width * sizeof(float), cudaMemcpyDeviceToDevice, s));
        if (K == 4 && conv_rows_on())
            nf_launch(kda_conv_rows_kernel<4>, dim3((width + 255) / 256, (T + KDA_CONV_ROWS - 1) / KDA_CONV_ROWS), 256,
                      0, s, (const float *)hist, T, inner, wq, wk, wv, qkv);
        else
            nf_launch(kda_conv_kernel, blocks_for((int64_t)T * width), 256, 0, s, hist, T, K, inner, wq, wk, wv, qkv);
        NF_LAUNCHED();
        if (rows > 0)
            NF_CU(cudaMemcpyAsync(LS->conv, hist + (size_t)T * width, (size_t)rows * width * sizeof(float),
                                  cudaMemcpyDeviceToDevice, s));
    }
    /* the decay's and the output gate's low-rank pairs: both down projections in one launch, both up projections
     * in another (decode; one product each in prefill) */
    const nf_cuda_mat *down[2] = {&fa, &ga}, *up[2] = {&fb, &gb};
    float *low[2] = {tmp, tmpg}, *full[2] = {g, gate};
    const float *low_in[2] = {tmp, tmpg};
    if (T > 1 && (nf_cuda_matmul_same(c, down, 2, x, n, 1, nullptr, low, rank, T) < 0 ||
                  nf_cuda_matmul(c, &mb, x, T, n, beta, H) < 0))
        return -1;
    if (nf_cuda_matmul_same_x(c, up, 2, low_in, rank, full, inner, T) < 0) return -1;

    if (nf_cuda_kda_recurrence(s, NF_KDA_AUTO, LS->S, qkv, g, dt, ssm_a, hp->kda_gate_lower_bound, beta,
                               1.0f / sqrtf((float)hd), o, T, H, hd, work) < 0)
        return nf_fail_prefix("layer %d kda", il);

    if (nf_cuda_rmsnorm_gated_rows(c, o, hd, T * H, hd, hp->rms_eps, onorm, gate, hd, o, hd) < 0) return -1;
    nf_cuda_mat wo = nf_cuda_mat_of(c, &L->attn_output);
    return nf_cuda_matmul(c, &wo, o, T, inner, y, n);
}
