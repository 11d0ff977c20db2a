/* cuda_hc.cu — manifold-constrained hyper-connections on the GPU: hc_pre (RMSNorm of the flattened streams,
 * the mixing projection, pre/post weights and the Sinkhorn-projected combination matrix, the collapse of the
 * streams) and hc_post (expand the block output and mix the streams). Same operations and orders as
 * src/cpu/hc.c; the Sinkhorn iterations of one token (hc x hc) run in one thread's registers when hc = 4 (else
 * in registers of one warp when hc * hc <= 32, else on hc * hc threads of one block), in the same launch as the
 * collapse. hc_pre_norm also applies the sub-layer's RMSNorm to the collapsed row in that launch (one kernel less
 * per site, bit-identical), the row held as float4s in registers for hc = 4 (collapse_norm_row4).
 * Decode's mixing projection (24 x 16384 f32 for glm53) is split over the row (hc_proj_part_kernel: 128 CTAs, one
 * 128-column slice each) and its partial sums are added by the mixing kernel that reads them: a 24-row product on
 * the GEMV engine kept at most 24 CTAs busy and cost ~7 us per site (docs/benchmarks.md, H100 table). */
#include "cuda/cuda_internal.h"
#include "cuda/cuda_gemv.h"
#include "cuda/cuda_launch.h"

#define HC_MAX 16
enum { HC_SINKHORN_BLOCK, HC_SINKHORN_WARP, HC_SINKHORN_REGS };

/* hc_pre's weights from the projection m[(2 + hc) * hc] (after the 1 / rms scale) and the site's scale[3] and
 * base[(2 + hc) * hc], as src/cpu/hc.c computes them: pre[k] (the collapse), post[k] and the combination's logit
 * (i, j) before the Sinkhorn projection (element c = i hc + j). One definition for the mixing kernel's blocks and the
 * split projection's tail (hc_part_tail), which must give the same bits. */
__device__ __forceinline__ float hc_pre_weight(const float *m, const float *scale, const float *base, int k, float eps) {
    return __fadd_rn(nf_d_sigmoid(__fadd_rn(__fmul_rn(m[k], scale[0]), base[k])), eps);
}
__device__ __forceinline__ float hc_post_weight(const float *m, const float *scale, const float *base, int hc, int k) {
    return __fmul_rn(2.0f, nf_d_sigmoid(__fadd_rn(__fmul_rn(m[hc + k], scale[1]), base[hc + k])));
}
__device__ __forceinline__ float hc_comb_logit(const float *m, const float *scale, const float *base, int hc, int c) {
    return __fadd_rn(__fmul_rn(m[2 * hc + c], scale[2]), base[2 * hc + c]);
}

/* The Sinkhorn projection of one token's combination matrix comb[hc][hc] (shared memory) by its first hc * hc
 * threads, thread i * hc + j owning element (i, j); every thread of the block calls it (it synchronises). Each
 * row or column sum is read by its owners in the CPU's sequential order (src/cpu/hc.c: nf_hc_sinkhorn, the row
 * softmax as nf_softmax_row), so the result is the CPU's bit for bit up to expf ulps; the divisions of all
 * elements run in parallel instead of one thread's chain of ~1300 dependent divisions (~54 us). */
__device__ void sinkhorn_block(float *comb, int hc, int iters, float eps) {
    const int tid = threadIdx.x, own = tid < hc * hc, i = tid / hc, j = tid % hc;
    float v = own ? comb[tid] : 0.0f;
    if (own) {
        float mx = comb[i * hc];
        for (int q = 1; q < hc; q++)
            if (comb[i * hc + q] > mx) mx = comb[i * hc + q];
        v = expf(__fsub_rn(v, mx));
    }
    __syncthreads();
    if (own) comb[tid] = v;
    __syncthreads();
    if (own) {
        double s = 0.0;
        for (int q = 0; q < hc; q++) s += comb[i * hc + q];
        v = __fadd_rn(__fmul_rn(v, (float)(1.0 / s)), eps);
    }
    __syncthreads();
    if (own) comb[tid] = v;
    __syncthreads();
    for (int it = 0; it < iters; it++) {
        for (int pass = it > 0 ? 0 : 1; pass < 2; pass++) {  /* 0: rows (not on the first iteration), 1: columns */
            if (own) {
                float s = 0.0f;
                for (int q = 0; q < hc; q++) s = __fadd_rn(s, pass == 0 ? comb[i * hc + q] : comb[q * hc + j]);
                v = __fdiv_rn(v, __fadd_rn(s, eps));
            }
            __syncthreads();
            if (own) comb[tid] = v;
            __syncthreads();
        }
    }
}

/* x / d correctly rounded without the IEEE division's branches: r = RN(1/d) from the hardware reciprocal (within an
 * ulp) and one Newton step, q = x r, then one FMA correction q + (x - d q) r (Markstein), which gives the correctly
 * rounded quotient for d and x far from over- and underflow (here: sums of positive values above eps). The same
 * values as __fdiv_rn (checked against x / d on 2e8 random pairs with the reciprocal off by up to an ulp, and by
 * byte-identical step dumps on the GPU: docs/benchmarks.md). */
__device__ __forceinline__ float rcp_nr(float d) {
#ifdef __CUDA_ARCH__
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
#else
    float r = 1.0f / d; /* the CPU emulation (scripts/cuemu) */
#endif
    return __fmaf_rn(__fmaf_rn(-d, r, 1.0f), r, r);
}
__device__ __forceinline__ float div_by(float x, float d, float r) {
    const float q = __fmul_rn(x, r);
    return __fmaf_rn(__fmaf_rn(-d, q, x), r, q);
}

/* The same projection by one warp when hc * hc <= 32 (glm53: 4 x 4): lane i * hc + j owns element (i, j) in a
 * register, and reads the row or column it sums with shuffles in the same sequential order, so the values equal
 * sinkhorn_block's; without a block barrier between the 2 x iters passes the serial chain is about half as long
 * (the block version's barriers were most of hc_pre's ~12 us). Called by the 32 lanes of one warp. HC > 0: hc
 * known at compile time (glm53: 4), the sums unrolled so that a pass's shuffles issue back to back instead of one
 * shuffle-add round trip per element (the same additions in the same order); HC = 0: any hc. */
template <int HC>
__device__ void sinkhorn_warp(float *comb, int hc_rt, int iters, float eps) {
    const int hc = HC > 0 ? HC : hc_rt;
    constexpr int QMAX = HC > 0 ? HC : HC_MAX;
    const int lane = threadIdx.x & 31, own = lane < hc * hc, i = lane / hc, j = lane % hc;
    const unsigned all = 0xffffffffu;
    float v = own ? comb[lane] : 0.0f;
    float mx = __shfl_sync(all, v, i * hc);
#pragma unroll
    for (int q = 1; q < QMAX; q++) {
        if (HC == 0 && q >= hc) break;
        const float c = __shfl_sync(all, v, i * hc + q);
        if (c > mx) mx = c;
    }
    if (own) v = expf(__fsub_rn(v, mx));
    double rs = 0.0;
#pragma unroll
    for (int q = 0; q < QMAX; q++) {
        if (HC == 0 && q >= hc) break;
        rs += __shfl_sync(all, v, i * hc + q);
    }
    if (own) v = __fadd_rn(__fmul_rn(v, (float)(1.0 / rs)), eps);
    for (int it = 0; it < iters; it++) {
        for (int pass = it > 0 ? 0 : 1; pass < 2; pass++) { /* 0: rows (not on the first iteration), 1: columns */
            float t[QMAX];
#pragma unroll
            for (int q = 0; q < QMAX; q++)
                if (HC > 0 || q < hc) t[q] = __shfl_sync(all, v, pass == 0 ? i * hc + q : q * hc + j);
            float s = 0.0f;
#pragma unroll
            for (int q = 0; q < QMAX; q++)
                if (HC > 0 || q < hc) s = __fadd_rn(s, t[q]);
            if (own) v = __fdiv_rn(v, __fadd_rn(s, eps));
        }
    }
    if (own) comb[lane] = v;
}

/* The same projection by one thread with the hc x hc matrix in registers (HC known at compile time; glm53: 4): no
 * shuffles, no barriers, one reciprocal per row or column sum and independent FMAs for its elements (div_by). Why:
 * once the collapse + norm beside it got faster (collapse_norm_row4), the warp version's chain of 39 shuffle round
 * trips and IEEE divisions was hc_pre's critical path; in interleaved runs this one decoded 1.2% faster by the
 * medians (3 pairs, 2 of them faster; docs/benchmarks.md), with byte-identical step dumps. (A first version with
 * __frcp_rn per sum was 3.8 us per site slower than the warp's: that reciprocal's branchy sequence.) */
template <int HC>
__device__ void sinkhorn_regs(float *comb, int iters, float eps) {
    float m[HC][HC];
#pragma unroll
    for (int i = 0; i < HC; i++) {
#pragma unroll
        for (int j = 0; j < HC; j++) m[i][j] = comb[i * HC + j];
        float mx = m[i][0];
#pragma unroll
        for (int q = 1; q < HC; q++)
            if (m[i][q] > mx) mx = m[i][q];
        double rs = 0.0;
#pragma unroll
        for (int j = 0; j < HC; j++) {
            m[i][j] = expf(__fsub_rn(m[i][j], mx));
            rs += m[i][j];
        }
        const float inv = (float)(1.0 / rs);
#pragma unroll
        for (int j = 0; j < HC; j++) m[i][j] = __fadd_rn(__fmul_rn(m[i][j], inv), eps);
    }
    /* line a of a pass is a row (rows: at(a, b) = m[a][b]) or a column (m[b][a]): its sum in order, then each
     * element divided by sum + eps */
    auto pass = [&](auto at) {
#pragma unroll
        for (int a = 0; a < HC; a++) {
            float s = 0.0f;
#pragma unroll
            for (int b = 0; b < HC; b++) s = __fadd_rn(s, at(a, b));
            const float d = __fadd_rn(s, eps), r = rcp_nr(d);
#pragma unroll
            for (int b = 0; b < HC; b++) at(a, b) = div_by(at(a, b), d, r);
        }
    };
    for (int it = 0; it < iters; it++) {
        if (it > 0) pass([&](int a, int b) -> float & { return m[a][b]; });
        pass([&](int a, int b) -> float & { return m[b][a]; });
    }
#pragma unroll
    for (int i = 0; i < HC; i++)
#pragma unroll
        for (int j = 0; j < HC; j++) comb[i * HC + j] = m[i][j];
}

#define HC_THREADS 256

/* The collapse of token t's streams, h[i] = sum_k pre[k] X[t][k][i], by one block into shared memory, then its
 * RMSNorm times norm_w into x[t] exactly as rmsnorm_kernel computes it with this blockDim (nf_cuda_row_threads(n))
 * on a 16-byte-aligned row: the same values bit for bit as the collapse kernel's h then nf_cuda_rmsnorm_rows. */
__device__ void collapse_norm_row(const float *pre, const float *x, int hc, int n, float eps, const float *norm_w,
                                  float *out) {
    extern __shared__ __align__(16) float sh[];
    __shared__ double red[32];
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float s = 0.0f;
        for (int k = 0; k < hc; k++) s = __fadd_rn(s, __fmul_rn(pre[k], x[(size_t)k * n + i]));
        sh[i] = s;
    }
    __syncthreads();
    const float r = nf_d_rms_inv(nf_d_block_sum(nf_d_row_sumsq_part(sh, n, n % 4 == 0), red), n, eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = __fmul_rn(norm_w[i], __fmul_rn(sh[i], r));
}

/* collapse_norm_row for hc = 4 with the row held in registers: thread i owns the float4s i + k blockDim (k < K) of
 * the row (n <= 4 K blockDim, 16-byte aligned rows), so the four streams' loads of a thread and its norm weights are
 * in flight together and nothing goes through shared memory; the same operations in the same order (the pre weights
 * per thread as block x >= 1 computes them, the sum of squares as nf_d_row_sumsq_part's vec4 path with one float4
 * per thread), so the same bits. Why: collapse_norm_row's strided loops paid a memory round trip per element group
 * (four for the streams, four for the weights): ~9 us per site; here the streams, the weights and the mixing values
 * are one round of loads. K = 4 on 256 threads (the split projection's tail, hc_part_tail) computes what K = 1 on
 * 1024 threads does bit for bit: float4 i + 256 k is "thread" i + 256 k's, whose warp is w + 8 k, and
 * nf_d_block_sum_k<4> adds the warps' sums in that order (virtual threads past the row add +0.0, as the lanes of a
 * narrower block do). The streams are read through L2 (__ldcg): in the tail other CTAs of the same launch wrote them. */
template <int K>
__device__ void collapse_norm_row4(const float *m, const float *base, const float *scale, float hc_eps, const float *x,
                                   int n, float eps, const float *norm_w, float *out, double *red) {
    const int n4 = n / 4;
    float4 nw[K], h[K];
    float4 v[K][4];
#pragma unroll
    for (int q = 0; q < K; q++) {
        const int i = (int)threadIdx.x + q * (int)blockDim.x;
        const bool own = i < n4;
        nw[q] = own ? ((const float4 *)norm_w)[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int k = 0; k < 4; k++)
            v[q][k] = own ? __ldcg((const float4 *)(x + (size_t)k * n) + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    float pre[4];
#pragma unroll
    for (int k = 0; k < 4; k++) pre[k] = hc_pre_weight(m, scale, base, k, hc_eps);
    double ss[K];
#pragma unroll
    for (int q = 0; q < K; q++) {
        h[q] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            h[q].x = __fadd_rn(h[q].x, __fmul_rn(pre[k], v[q][k].x));
            h[q].y = __fadd_rn(h[q].y, __fmul_rn(pre[k], v[q][k].y));
            h[q].z = __fadd_rn(h[q].z, __fmul_rn(pre[k], v[q][k].z));
            h[q].w = __fadd_rn(h[q].w, __fmul_rn(pre[k], v[q][k].w));
        }
        ss[q] = nf_d_sumsq_add4(0.0, h[q]);
    }
    const float r = nf_d_rms_inv(nf_d_block_sum_k<K>(ss, red), n, eps);
#pragma unroll
    for (int q = 0; q < K; q++) {
        const int i = (int)threadIdx.x + q * (int)blockDim.x;
        if (i < n4)
            ((float4 *)out)[i] = make_float4(__fmul_rn(nw[q].x, __fmul_rn(h[q].x, r)), __fmul_rn(nw[q].y, __fmul_rn(h[q].y, r)),
                                             __fmul_rn(nw[q].z, __fmul_rn(h[q].z, r)), __fmul_rn(nw[q].w, __fmul_rn(h[q].w, r)));
    }
}

/* stream j's updated value at one element: post[j] y + sum_i comb[i][j] x_i, the products added in stream order
 * from 0.0f, then the post term: the one definition for hc_post_kernel and the split projection's fold, which
 * must give the same bits. HC > 0: the stream count known at compile time */
template <int HC>
__device__ __forceinline__ float hc_post_value(const float *post, const float *comb, int hc_rt, int j, float yv,
                                               const float *xi) {
    const int hc = HC > 0 ? HC : hc_rt;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < (HC > 0 ? HC : HC_MAX); i++)
        if (HC > 0 || i < hc) s = __fadd_rn(s, __fmul_rn(comb[i * hc + j], xi[i]));
    return __fadd_rn(__fmul_rn(post[j], yv), s);
}

/* ---- the split projection (decode) ----
 * The norm has no weight, so the projection of the normalised streams is r * (W x), r = 1 / rms(x): each CTA s forms,
 * for token t = blockIdx.y, the dot products of its slice of the flattened row with the nm rows (one warp per up to
 * HCP_ROWS_PER_WARP rows, an xor butterfly) and the slice's sum of squares in double; hc_reduce_parts adds the S
 * slices in order and scales by r. The same real number as the GEMV's product of the normalised row, rounded
 * differently (the CPU reference normalises first: agreement to f32 rounding). hc = 4 only: slice s holds the
 * elements 32 s .. 32 s + 31 of all four streams (lane l: stream l / 8, elements 32 s + 4 (l % 8) .. + 3), so
 * that with POST the CTA can first apply the previous sub-layer's hc_post to exactly the columns it reads: every
 * output element of that update needs the four streams at the same element, and no other CTA touches them. That
 * saves hc_post's launch per site (~4 us on the H100: docs/benchmarks.md); the updated streams are the values
 * hc_post_kernel<4> computes (the same operations in the same order), written back by warp 0. */
#define HCP_ELEMS 32 /* elements of each stream per slice: 128 columns of the flattened row */
#define HCP_ROWS_PER_WARP 4
#define HCP_THREADS 256
#define HCP_MAX_ROWS (HCP_ROWS_PER_WARP * HCP_THREADS / 32)
/* NF_CUDA_HC_TAIL=on (decode, hc = 4, with the sub-layer's norm): the split projection's last CTA of a token does what
 * hc_mix_collapse_kernel would do next (the slices' reduction, the post weights and the Sinkhorn-projected
 * combination, the collapse and its RMSNorm), the same values bit for bit: one launch per site instead of two.
 * Why: each kernel boundary of decode's dependent chain costs a drain and a ramp (~4 us on the H100 for hc_post's,
 * docs/benchmarks.md), and the mixing kernel of ~10 us per site (64 sites: 8.8% of a glm53@32 step) does ~2 us of
 * work on 2 SMs. The last CTA is found by a count per token (done[t], zero between launches: the last CTA resets
 * it), the router's pattern (cuda_router.cu). Opt-in until a paired A/B measures it. */
struct hc_tail_args {
    const float *base, *scale, *norm_w; /* the site's hc params, the sub-layer's RMSNorm weight */
    float *mix, *h;                     /* out: (post, comb) [T][20]; RMSNorm(collapse) * norm_w [T][n] */
    unsigned int *done;                 /* [T] CTAs finished, per token */
    int iters;
    float hc_eps, norm_eps, xeps;       /* hc_eps; the sub-layer norm's and the flat norm's eps */
};
__device__ void hc_reduce_parts(const float *part, const double *ssq, int S, int nm, int64_t flat, float eps, float *mmv);
/* the tail of token t in its last CTA (HCP_THREADS threads): the reduction of the S slices, then the collapse + norm
 * (collapse_norm_row4<4>: block 1's values), then thread 0 the post weights and the Sinkhorn projection (block 0's
 * operations in its order); mix and h are read by later launches only */
__device__ void hc_part_tail(const hc_tail_args &a, const float *part_t, const double *ssq_t, int S, int nm,
                             int64_t flat, const float *xt, int n, int t) {
    __shared__ float mmv[(2 + 4) * 4];
    __shared__ float w[4 * 4];
    __shared__ double red[32];
    hc_reduce_parts(part_t, ssq_t, S, nm, flat, a.xeps, mmv); /* ends with a barrier */
    collapse_norm_row4<4>(mmv, a.base, a.scale, a.hc_eps, xt, n, a.norm_eps, a.norm_w, a.h + (size_t)t * n, red);
    if (threadIdx.x == 0) {
        float *post = a.mix + (size_t)t * 20;
#pragma unroll
        for (int i = 0; i < 4; i++) post[i] = hc_post_weight(mmv, a.scale, a.base, 4, i);
#pragma unroll
        for (int i = 0; i < 16; i++) w[i] = hc_comb_logit(mmv, a.scale, a.base, 4, i);
        sinkhorn_regs<4>(w, a.iters, a.hc_eps);
#pragma unroll
        for (int i = 0; i < 16; i++) post[4 + i] = w[i];
    }
}

/* a pending MoE combine for the POST update (nf_cuda::pending): y[t][e] = the slots' out[t][slot][e] times their
 * weights added in ascending expert order, then shared[t][e], as moe_combine_kernel computes it; out NULL: y given */
struct hc_combine_in {
    const float *out, *weight_of, *shared;
    const int32_t *expert_of;
    int k;
};
template <bool POST, bool TAIL>
__global__ void __launch_bounds__(HCP_THREADS) hc_proj_part_kernel(const float *W, int n, int nm, float *X, int64_t ldx,
                                                                   const float *y, const float *mix, float *part,
                                                                   double *ssq, const hc_combine_in cb,
                                                                   const hc_tail_args tl) {
    const int s = (int)blockIdx.x, S = (int)gridDim.x, t = (int)blockIdx.y;
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5, j = lane >> 3;
    const int64_t flat = 4 * (int64_t)n, e = (int64_t)HCP_ELEMS * s + 4 * (lane & 7), k = j * (int64_t)n + e;
    /* the weights are never written during a forward: loaded before the wait (cuda_launch.h) */
    float4 w[HCP_ROWS_PER_WARP];
#pragma unroll
    for (int i = 0; i < HCP_ROWS_PER_WARP; i++) {
        const int row = warp * HCP_ROWS_PER_WARP + i;
        w[i] = row < nm ? __ldg((const float4 *)(W + (size_t)row * flat + k)) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    nf_pdl_wait();
    nf_pdl_release();
    float *xt = X + (size_t)t * ldx;
    float4 x = *(const float4 *)(xt + k);
    if constexpr (POST) {
        /* X[j][e] = post[j] y[e] + sum_i comb[i][j] X[i][e], as hc_post_kernel<4>; stream i's values at this lane's
         * elements are lane (l % 8) + 8 i's */
        const float *post = mix + (size_t)t * 20, *comb = post + 4;
        float4 xi[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int from = (lane & 7) + 8 * i;
            xi[i] = make_float4(__shfl_sync(0xffffffffu, x.x, from), __shfl_sync(0xffffffffu, x.y, from),
                                __shfl_sync(0xffffffffu, x.z, from), __shfl_sync(0xffffffffu, x.w, from));
        }
        float4 yv;
        if (cb.out) {
            /* the combine at this lane's elements: the slots' ascending order as moe_combine_kernel finds it (slot
             * q's place = the number of smaller experts, the k experts of a token distinct), then the same products
             * and additions in the same order */
            __shared__ int order[NF_CUDA_COMBINE_FOLD_KMAX];
            __shared__ float wgt[NF_CUDA_COMBINE_FOLD_KMAX];
            const int k = cb.k;
            if ((int)threadIdx.x < k) {
                const int32_t *ex = cb.expert_of + (size_t)t * k;
                const int32_t mine = ex[threadIdx.x];
                int place = 0;
#pragma unroll
                for (int q = 0; q < NF_CUDA_COMBINE_FOLD_KMAX; q++) {
                    const int32_t eq = q < k ? ex[q] : 0;
                    place += q < k && (eq < mine || (eq == mine && q < (int)threadIdx.x));
                }
                order[place] = threadIdx.x;
                wgt[place] = cb.weight_of[(size_t)t * k + threadIdx.x];
            }
            __syncthreads();
            float4 v[NF_CUDA_COMBINE_FOLD_KMAX];
#pragma unroll
            for (int r = 0; r < NF_CUDA_COMBINE_FOLD_KMAX; r++)
                if (r < k) v[r] = *(const float4 *)(cb.out + ((size_t)t * k + order[r]) * n + e);
            yv = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (int r = 0; r < NF_CUDA_COMBINE_FOLD_KMAX; r++)
                if (r < k) {
                    yv.x = __fadd_rn(yv.x, __fmul_rn(v[r].x, wgt[r]));
                    yv.y = __fadd_rn(yv.y, __fmul_rn(v[r].y, wgt[r]));
                    yv.z = __fadd_rn(yv.z, __fmul_rn(v[r].z, wgt[r]));
                    yv.w = __fadd_rn(yv.w, __fmul_rn(v[r].w, wgt[r]));
                }
            if (cb.shared) {
                const float4 sv = *(const float4 *)(cb.shared + (size_t)t * n + e);
                yv = make_float4(__fadd_rn(yv.x, sv.x), __fadd_rn(yv.y, sv.y), __fadd_rn(yv.z, sv.z), __fadd_rn(yv.w, sv.w));
            }
        } else {
            yv = *(const float4 *)(y + (size_t)t * n + e);
        }
        const float vx[4] = {xi[0].x, xi[1].x, xi[2].x, xi[3].x}, vy[4] = {xi[0].y, xi[1].y, xi[2].y, xi[3].y},
                    vz[4] = {xi[0].z, xi[1].z, xi[2].z, xi[3].z}, vw[4] = {xi[0].w, xi[1].w, xi[2].w, xi[3].w};
        x = make_float4(hc_post_value<4>(post, comb, 4, j, yv.x, vx), hc_post_value<4>(post, comb, 4, j, yv.y, vy),
                        hc_post_value<4>(post, comb, 4, j, yv.z, vz), hc_post_value<4>(post, comb, 4, j, yv.w, vw));
        __syncthreads(); /* every warp has read the old streams before warp 0 overwrites them */
        if (warp == 0) *(float4 *)(xt + k) = x;
    }
    float *pt = part + ((size_t)t * S + s) * nm;
#pragma unroll
    for (int i = 0; i < HCP_ROWS_PER_WARP; i++) {
        const int row = warp * HCP_ROWS_PER_WARP + i;
        if (row >= nm) break; /* warp-uniform */
        float a = __fmul_rn(x.x, w[i].x);
        a = fmaf(x.y, w[i].y, a);
        a = fmaf(x.z, w[i].z, a);
        a = fmaf(x.w, w[i].w, a);
        for (int o = 16; o >= 1; o >>= 1) a = __fadd_rn(a, __shfl_xor_sync(0xffffffffu, a, o));
        if (lane == 0) pt[row] = a;
    }
    if (warp == 0) {
        double q = nf_d_sumsq_add4(0.0, x);
        for (int o = 16; o >= 1; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
        if (lane == 0) ssq[(size_t)t * S + s] = q;
    }
    if constexpr (TAIL) {
        __shared__ int last;
        __threadfence(); /* this CTA's slices and streams visible to the device before it counts */
        __syncthreads();
        if (threadIdx.x == 0) last = atomicAdd(tl.done + t, 1u) == (unsigned)(S - 1);
        __syncthreads();
        if (!last) return;
        __threadfence(); /* the other CTAs' writes: read through L2 (slice_sum's and collapse_norm_row4's __ldcg) */
        hc_part_tail(tl, part + (size_t)t * S * nm, ssq + (size_t)t * S, S, nm, flat, xt, n, t);
        if (threadIdx.x == 0) tl.done[t] = 0u;
    }
}

/* ---- the prefill projection ----
 * mm[t][o] = r_t * (W_o . x_t), r_t = 1 / rms(x_t), for T > NF_CUDA_GEMV_MAX_VECTORS tokens: the product of the
 * normalised streams as in decode (the same real number as normalising first, rounded differently), in one pass
 * over X. Why: normalising into a scratch copy and running the tiled GEMM on a 24-row matrix read and wrote the
 * 268 MB of a 4096-token chunk's streams twice and left most of each GEMM tile empty: 1.25 ms per site on the H100
 * (docs/benchmarks.md, prefill kernel table), ~20x the time to read X once. A CTA takes HPP_TOK tokens and all nm <=
 * HPP_OUT outputs; per HPP_K-column chunk it stages those rows of X and W in shared memory (the next chunk's loads
 * in flight while this one is multiplied); thread (token tok, group g) accumulates outputs g, g + 8, g + 16 in
 * column order and the sum of squares of columns 8g .. 8g + 7 of every chunk in double, the 8 groups' sums added
 * by an xor butterfly. Every value depends only on its token's row, so a token gives the same bits whatever chunk
 * or CTA it is in (chunked prefill stays bit-identical to one-shot). */
#define HPP_TOK 32
#define HPP_OUT 24
#define HPP_K 64
#define HPP_THREADS 256
#define HPP_LD (HPP_K + 4) /* row stride of the shared tiles in floats: the 4 tokens of a warp in distinct banks */
/* IL (NF_CUDA_HC_PREFILL_FOLD, default on; hc = 4, n a multiple of 16): chunk c holds elements 16c .. 16c + 15 of
 * all four streams (columns 16 j + u = flat j n + 16 c + u), so that with the previous sub-layer's output y (non-null) the
 * CTA can first apply hc_post to exactly the columns it stages (every updated element needs the four streams at
 * that element, and no other CTA touches its tokens), write them back to X and project the updated values: the
 * separate hc_post pass over X (read and write) and its launch disappear. The same order with or without y, so a
 * folded call and hc_post then the projection give the same bits. Threads 0..127 stage X (token tid / 4, elements
 * 4 (tid % 4) .. + 3 of the chunk, all four streams), 128..255 the W rows. */
template <bool IL>
__global__ void __launch_bounds__(HPP_THREADS) hc_proj_prefill_kernel(const float *W, int64_t flat, int nm, float *X,
                                                                      int64_t ldx, int T, float eps, float *mm,
                                                                      const float *y, const float *mix, int n) {
    NF_PDL_ENTER(); /* X is written only with IL and y: the streams' update */
    __shared__ __align__(16) float xs[HPP_TOK * HPP_LD];
    __shared__ __align__(16) float ws[HPP_OUT * HPP_LD];
    const int tid = (int)threadIdx.x, tok = tid >> 3, g = tid & 7;
    const int t0 = (int)blockIdx.x * HPP_TOK;
    constexpr int Q = HPP_K / 4; /* float4s per staged row */
    /* this thread's loads of a chunk: X float4s tid and tid + 256 (32 rows x 16), W float4s tid and tid + 256 (24 x 16);
     * IL: threads < 128 four X float4s (the streams) and y's, threads >= 128 three W float4s */
    float4 xr[4], wr[3], yr = make_float4(0.f, 0.f, 0.f, 0.f);
    float pm[20]; /* IL with y: mix[t] (post[4], comb[16]) */
    const float4 z4 = make_float4(0.f, 0.f, 0.f, 0.f);
    auto load = [&](int64_t k0) {
        if constexpr (IL) {
            const int64_t e0 = k0 / 4; /* chunk k0 / HPP_K: elements 16 (k0 / 64) .. */
            if (tid < 128) {
                const int row = tid >> 2, e4 = tid & 3;
                const bool ok = t0 + row < T;
                const float *xp = X + (size_t)(t0 + row) * ldx + e0 + 4 * e4;
#pragma unroll
                for (int j = 0; j < 4; j++) xr[j] = ok ? *(const float4 *)(xp + (size_t)j * n) : z4;
                if (y) yr = ok ? *(const float4 *)(y + (size_t)(t0 + row) * n + e0 + 4 * e4) : z4;
            } else {
#pragma unroll
                for (int u = 0; u < 3; u++) {
                    const int i = tid - 128 + u * 128, row = i / Q, q = i % Q, j = q >> 2, e4 = q & 3;
                    wr[u] = row < nm ? __ldg((const float4 *)(W + (size_t)row * flat + (size_t)j * n + e0 + 4 * e4)) : z4;
                }
            }
        } else {
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const int i = tid + u * HPP_THREADS, row = i / Q, q = i % Q;
                xr[u] = t0 + row < T ? *(const float4 *)(X + (size_t)(t0 + row) * ldx + k0 + 4 * q) : z4;
                wr[u] = row < nm ? __ldg((const float4 *)(W + (size_t)row * flat + k0 + 4 * q)) : z4;
            }
        }
    };
    auto store = [&](int64_t k0) {
        if constexpr (IL) {
            if (tid < 128) {
                const int row = tid >> 2, e4 = tid & 3;
                if (y && t0 + row < T) { /* hc_post_kernel<4>'s operations on these 4 elements of the 4 streams */
                    const float *post = pm, *comb = pm + 4;
                    const float4 o = xr[0], p1 = xr[1], p2 = xr[2], p3 = xr[3];
                    const float vx[4] = {o.x, p1.x, p2.x, p3.x}, vy[4] = {o.y, p1.y, p2.y, p3.y},
                                vz[4] = {o.z, p1.z, p2.z, p3.z}, vw[4] = {o.w, p1.w, p2.w, p3.w};
                    float *xp = X + (size_t)(t0 + row) * ldx + k0 / 4 + 4 * e4;
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        xr[j] = make_float4(hc_post_value<4>(post, comb, 4, j, yr.x, vx),
                                            hc_post_value<4>(post, comb, 4, j, yr.y, vy),
                                            hc_post_value<4>(post, comb, 4, j, yr.z, vz),
                                            hc_post_value<4>(post, comb, 4, j, yr.w, vw));
                        *(float4 *)(xp + (size_t)j * n) = xr[j];
                    }
                }
#pragma unroll
                for (int j = 0; j < 4; j++) *(float4 *)(xs + row * HPP_LD + 16 * j + 4 * e4) = xr[j];
            } else {
#pragma unroll
                for (int u = 0; u < 3; u++) {
                    const int i = tid - 128 + u * 128, row = i / Q, q = i % Q;
                    if (row < HPP_OUT) *(float4 *)(ws + row * HPP_LD + 4 * q) = wr[u];
                }
            }
        } else {
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const int i = tid + u * HPP_THREADS, row = i / Q, q = i % Q;
                *(float4 *)(xs + row * HPP_LD + 4 * q) = xr[u];
                if (row < HPP_OUT) *(float4 *)(ws + row * HPP_LD + 4 * q) = wr[u];
            }
        }
    };
    float a0 = 0.f, a1 = 0.f, a2 = 0.f;
    double ss = 0.0;
    load(0);
    if (IL && y && tid < 128 && t0 + (tid >> 2) < T) /* the token's post weights and combination, for every chunk */
#pragma unroll
        for (int i = 0; i < 20; i++) pm[i] = mix[(size_t)(t0 + (tid >> 2)) * 20 + i];
    for (int64_t k0 = 0; k0 < flat; k0 += HPP_K) {
        __syncthreads(); /* the previous chunk's reads are done */
        store(k0);
        __syncthreads();
        if (k0 + HPP_K < flat) load(k0 + HPP_K);
        const float *xt = xs + tok * HPP_LD, *w0 = ws + g * HPP_LD, *w1 = w0 + 8 * HPP_LD, *w2 = w1 + 8 * HPP_LD;
#pragma unroll 4
        for (int q = 0; q < Q; q++) {
            const float4 x = *(const float4 *)(xt + 4 * q), u0 = *(const float4 *)(w0 + 4 * q),
                         u1 = *(const float4 *)(w1 + 4 * q), u2 = *(const float4 *)(w2 + 4 * q);
            a0 = fmaf(x.x, u0.x, a0); a0 = fmaf(x.y, u0.y, a0); a0 = fmaf(x.z, u0.z, a0); a0 = fmaf(x.w, u0.w, a0);
            a1 = fmaf(x.x, u1.x, a1); a1 = fmaf(x.y, u1.y, a1); a1 = fmaf(x.z, u1.z, a1); a1 = fmaf(x.w, u1.w, a1);
            a2 = fmaf(x.x, u2.x, a2); a2 = fmaf(x.y, u2.y, a2); a2 = fmaf(x.z, u2.z, a2); a2 = fmaf(x.w, u2.w, a2);
        }
        ss = nf_d_sumsq_add4(ss, *(const float4 *)(xt + 8 * g));
        ss = nf_d_sumsq_add4(ss, *(const float4 *)(xt + 8 * g + 4));
    }
    /* the token's 8 groups are lanes 8 (tok % 4) .. + 7 of one warp */
    for (int o = 4; o >= 1; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const int t = t0 + tok;
    if (t < T) {
        const float r = nf_d_rms_inv(ss, flat, eps);
        float *mt = mm + (size_t)t * nm;
        if (g < nm) mt[g] = __fmul_rn(a0, r);
        if (g + 8 < nm) mt[g + 8] = __fmul_rn(a1, r);
        if (g + 16 < nm) mt[g + 16] = __fmul_rn(a2, r);
    }
}

/* NF_CUDA_HC_PROJ_PREFILL=off: prefill's projection as an RMSNorm into a copy + the tiled GEMM (A/B). Default since
 * session 18: 5.8% faster 8192-token prefills on the H100 (3451 vs 3261 t/s, docs/benchmarks.md) */
static bool hc_proj_prefill_on(void) {
    static int cache = -1;
    return nf_cuda_env_switch(&cache, "NF_CUDA_HC_PROJ_PREFILL", "off");
}

/* NF_CUDA_HC_PREFILL_FOLD (default on; =off for hc_post then the projection in column order): prefill's projection
 * stages the four streams element-interleaved and takes the previous sub-layer's hc_post into the same pass
 * (hc_proj_prefill_kernel<true>). Other roundings of the projection than off (the columns summed in another order;
 * folded or not, the same bits). 1.75 ms per site at 16384 tokens on the H100 (session 22). */
static bool hc_prefill_fold_on(void) {
    static int cache = -1;
    return nf_cuda_env_switch(&cache, "NF_CUDA_HC_PREFILL_FOLD", "off");
}

/* prefill's projection into mm[T][nm] by hc_proj_prefill_kernel, post_y's hc_post applied to X first (folded into
 * the projection, or launched before it): 1 when it ran, 0 when off or the shape does not suit it (nothing launched,
 * hc_post not applied), -1 on error */
static int hc_proj_prefill(nf_backend *be, nf_cuda *c, const nf_cuda_mat &w, float *X, int T, int64_t flat, int nm,
                           float eps, float *mm, int hc, int n, const float *post_y, const float *mix) {
    if (!hc_proj_prefill_on() || T <= NF_CUDA_GEMV_MAX_VECTORS || w.type != NF_TYPE_F32 || !w.w || nm > HPP_OUT ||
        flat % HPP_K || w.n != flat || w.rows != nm || ((uintptr_t)w.w & 15) || ((uintptr_t)X & 15))
        return 0;
    const unsigned blocks = (unsigned)((T + HPP_TOK - 1) / HPP_TOK);
    if (hc == 4 && n % 16 == 0 && hc_prefill_fold_on() && ((uintptr_t)post_y & 15) == 0) {
        nf_launch(hc_proj_prefill_kernel<true>, blocks, HPP_THREADS, 0, c->stream, (const float *)w.w, flat, nm, X,
                  flat, T, eps, mm, post_y, mix, n);
        NF_LAUNCHED();
        return 1;
    }
    if (post_y && nf_cuda_hc_post(be, X, post_y, mix, T) < 0) return -1;
    nf_launch(hc_proj_prefill_kernel<false>, blocks, HPP_THREADS, 0, c->stream, (const float *)w.w, flat, nm, X, flat,
              T, eps, mm, (const float *)nullptr, (const float *)nullptr, n);
    NF_LAUNCHED();
    return 1;
}

/* token t's projection mm[nm] from its S slices' partial sums (hc_proj_part_kernel) into shared memory: every
 * thread of the block calls it (it synchronises). Item j < nm is output j's sum, item nm the sum of squares; lane
 * l of the warp that owns an item loads slices l, l + 32, ... all at once (one memory round trip: ncu put the
 * version that loaded them one after the other, with the sum of squares in a phase of its own, at +6 us per site)
 * and lane 0 adds them in a fixed order. */
#define HCP_MAX_SLICES 128
/* the sum over slices i < S of p[i * stride] by one warp: lane l loads slices l, l + 32, ... together (through L2:
 * in hc_part_tail the other CTAs of the same launch wrote them), adds them in that order, then the xor butterfly
 * (only additions of loaded values: nothing for the compiler to fuse) */
template <typename V> __device__ __forceinline__ V slice_sum(const V *p, int stride, int S, int lane) {
    V v[HCP_MAX_SLICES / 32];
#pragma unroll
    for (int u = 0; u < HCP_MAX_SLICES / 32; u++) v[u] = lane + 32 * u < S ? __ldcg(p + (size_t)(lane + 32 * u) * stride) : V(0);
    V a = v[0];
#pragma unroll
    for (int u = 1; u < HCP_MAX_SLICES / 32; u++) a += v[u];
    for (int o = 16; o >= 1; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
    return a;
}
__device__ void hc_reduce_parts(const float *part, const double *ssq, int S, int nm, int64_t flat, float eps,
                                float *mmv) {
    __shared__ float raw[(2 + HC_MAX) * HC_MAX];
    __shared__ double q_sh;
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5, nw = (int)blockDim.x >> 5;
    for (int j = warp; j <= nm; j += nw) {
        if (j == nm) {
            const double q = slice_sum(ssq, 1, S, lane);
            if (lane == 0) q_sh = q;
        } else {
            const float a = slice_sum(part + j, nm, S, lane);
            if (lane == 0) raw[j] = a;
        }
    }
    __syncthreads();
    if ((int)threadIdx.x < nm) mmv[threadIdx.x] = __fmul_rn(raw[threadIdx.x], nf_d_rms_inv(q_sh, flat, eps));
    __syncthreads();
}

/* hc_pre after the projection mm[T][(2+hc)*hc], for token t = blockIdx.y (+ multiples of gridDim.y):
 *  block x = 0: post weights and the Sinkhorn-projected combination matrix into mix[t][hc + hc*hc];
 *  blocks x >= 1: the collapse h[t][i] = sum_k pre[k] X[t][k][i] (pre recomputed per block: hc sigmoids);
 *  with norm_w, block 1 alone: the collapse and its RMSNorm (collapse_norm_row), h then holding RMSNorm(h) * norm_w.
 * One launch, the parts running side by side (the Sinkhorn block and the collapse + norm take similar times). */
/* __launch_bounds__(1024): the fused norm runs on nf_cuda_row_threads(n) threads (1024 at n_embd 4096, as
 * rmsnorm_kernel, for the same sums), which needs <= 64 registers per thread (without the bound: 96, and the launch
 * failed with "too many resources requested" on the H200) */
/* the mixing kernel's arguments: one struct instead of a list that grew with each fused step */
struct hc_mix_args {
    const float *mm, *base, *scale, *X; /* the projection [T][nm] (unused with part), the site's params, the streams */
    int T, hc, n, iters;
    float eps;                          /* hc_eps */
    float *mix, *h;                     /* out: (post, comb) [T][hc + hc*hc]; the collapse (normalised with norm_w) */
    int sinkhorn_mode;
    const float *norm_w;                /* the sub-layer's RMSNorm weight, or NULL */
    float norm_eps;
    int row4;                           /* block 1 normalises through collapse_norm_row4 */
    const float *part;                  /* the split projection's slices [T][nparts][nm] and sums of squares, or NULL */
    const double *ssq;
    int nparts;
    int64_t flat;
    float xeps;                         /* the eps of the streams' norm (the split projection's r) */
};
__global__ void __launch_bounds__(1024, 1) hc_mix_collapse_kernel(const hc_mix_args a) {
    const float *mm = a.mm, *base = a.base, *scale = a.scale, *X = a.X, *norm_w = a.norm_w, *part = a.part;
    const int T = a.T, hc = a.hc, n = a.n, iters = a.iters, sinkhorn_mode = a.sinkhorn_mode, row4 = a.row4;
    const float eps = a.eps, norm_eps = a.norm_eps;
    float *mix = a.mix, *h = a.h;
    /* row4 (hc = 4, n <= 4 x blockDim, aligned rows): block 1 normalises through collapse_norm_row4 */
    const int tid = threadIdx.x;
    const bool r4 = row4 && norm_w && blockIdx.x == 1;
    NF_PDL_ENTER();
    __shared__ float w[HC_MAX * HC_MAX];
    __shared__ double red4[32];
    __shared__ float mmv[(2 + HC_MAX) * HC_MAX];
    const int nm = (2 + hc) * hc;
    for (int t = blockIdx.y; t < T; t += gridDim.y) {
        const float *m = mm + (size_t)t * nm;
        /* with part: the split projection's slices (mm unused) */
        if (part) {
            hc_reduce_parts(part + (size_t)t * a.nparts * nm, a.ssq + (size_t)t * a.nparts, a.nparts, nm, a.flat, a.xeps, mmv);
            m = mmv;
        }
        if (blockIdx.x == 0) {
            float *post = mix + (size_t)t * (hc + hc * hc);
            if (tid < hc) post[tid] = hc_post_weight(m, scale, base, hc, tid);
            if (tid < hc * hc) w[tid] = hc_comb_logit(m, scale, base, hc, tid);
            __syncthreads();
            if (hc == 4 && sinkhorn_mode == HC_SINKHORN_REGS) {
                if (tid == 0) sinkhorn_regs<4>(w, iters, eps);
                __syncthreads();
            } else if (hc * hc <= 32 && sinkhorn_mode != HC_SINKHORN_BLOCK) {
                if (tid < 32) {
                    if (hc == 4) sinkhorn_warp<4>(w, hc, iters, eps);
                    else sinkhorn_warp<0>(w, hc, iters, eps);
                }
                __syncthreads();
            } else {
                sinkhorn_block(w, hc, iters, eps);
            }
            if (tid < hc * hc) post[hc + tid] = w[tid];
        } else if (r4) {
            collapse_norm_row4<1>(m, base, scale, eps, X + (size_t)t * hc * n, n, norm_eps, norm_w, h + (size_t)t * n, red4);
            continue; /* nf_d_block_sum ended with a barrier: red4 is free for the next token */
        } else {
            if (tid < hc) w[tid] = hc_pre_weight(m, scale, base, tid, eps);
            __syncthreads();
            const float *x = X + (size_t)t * hc * n;
            if (norm_w) {
                collapse_norm_row(w, x, hc, n, norm_eps, norm_w, h + (size_t)t * n);
                __syncthreads();
                continue;
            }
            for (int i = (blockIdx.x - 1) * HC_THREADS + tid; i < n; i += (gridDim.x - 1) * HC_THREADS) {
                float s = 0.0f;
                for (int k = 0; k < hc; k++) s = __fadd_rn(s, __fmul_rn(w[k], x[(size_t)k * n + i]));
                h[(size_t)t * n + i] = s;
            }
        }
        __syncthreads();
    }
}

static unsigned blocks_for(int64_t n) {
    int64_t b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

/* NF_CUDA_HC_SINKHORN=warp|block: the one-warp or the block-wide projection instead of one thread's registers (the
 * default for hc = 4); A/B, the same values */
static int hc_sinkhorn_mode(void) {
    static int cache = -1;
    static const char *const names[] = {"block", "warp"}; /* HC_SINKHORN_BLOCK, HC_SINKHORN_WARP */
    return nf_cuda_env_choice(&cache, "NF_CUDA_HC_SINKHORN", names, 2, HC_SINKHORN_REGS);
}

/* NF_CUDA_NORM_ROW4=off: the norms' strided loops instead of a row held as float4s in registers (A/B; the same
 * values; cuda_norm.cu reads it too) */
int nf_cuda_norm_row4_enabled(void) {
    static int cache = -1;
    return nf_cuda_env_switch(&cache, "NF_CUDA_NORM_ROW4", "off");
}

/* NF_CUDA_HC_NORM=off normalises in a separate launch (A/B; the same values) */
static bool hc_norm_fused(void) {
    static int cache = -1;
    return nf_cuda_env_switch(&cache, "NF_CUDA_HC_NORM", "off");
}

/* NF_CUDA_HC_SPLIT=off: decode's projection on the GEMV engine (the normalised row times the matrix; the same real
 * numbers, rounded differently) and hc_post as its own launch (A/B). The split is the default since session 18:
 * with the one-round-trip reduction and the hc_post fold, 1.4% faster decode on the H100 (135.33 vs 133.51 t/s by
 * the medians, the same greedy tokens; docs/benchmarks.md) */
static bool hc_split_enabled(void) {
    static int cache = -1;
    return nf_cuda_env_switch(&cache, "NF_CUDA_HC_SPLIT", "off");
}

/* the split projection's partial sums for T decode tokens into part[T][S][nm] and ssq[T][S] (S = n / HCP_ELEMS);
 * with post_y, the streams X first updated by hc_post(X, post_y, mix) in the same launch. 1 when it ran, 0 when it
 * is off or the shape does not suit it (nothing launched: the caller uses the GEMV), -1 on error (no memory) */
static int hc_proj_split(nf_cuda *c, const nf_cuda_mat &w, float *X, int T, int hc, int n, int nm, const float *post_y,
                         const float *mix, const nf_cuda::nf_cuda_combine *cmb, const hc_tail_args *tail,
                         nf_cuda_scratch &sc, float **part, double **ssq, int *S) {
    const int64_t flat = (int64_t)hc * n;
    if (!hc_split_enabled() || hc != 4 || T > NF_CUDA_GEMV_MAX_VECTORS || w.type != NF_TYPE_F32 || !w.w ||
        nm > HCP_MAX_ROWS || n % HCP_ELEMS || n / HCP_ELEMS > HCP_MAX_SLICES || w.n != flat || w.rows != nm ||
        ((uintptr_t)w.w & 15) || ((uintptr_t)X & 15) || ((uintptr_t)post_y & 15))
        return 0;
    *S = n / HCP_ELEMS;
    *part = sc.get<float>((size_t)T * *S * nm);
    *ssq = sc.get<double>((size_t)T * *S);
    if (!*part || !*ssq) return nf_fail("cuda hc_pre: out of device memory");
    const dim3 grid((unsigned)*S, (unsigned)T);
    hc_combine_in cb = {};
    if (cmb) cb = {cmb->out, cmb->weight_of, cmb->shared, cmb->expert_of, cmb->k};
    const hc_tail_args tl = tail ? *tail : hc_tail_args{};
    void (*const kernels[2][2])(const float *, int, int, float *, int64_t, const float *, const float *, float *,
                                double *, const hc_combine_in, const hc_tail_args) = {
        {hc_proj_part_kernel<false, false>, hc_proj_part_kernel<false, true>},
        {hc_proj_part_kernel<true, false>, hc_proj_part_kernel<true, true>}};
    nf_launch(kernels[post_y != nullptr][tail != nullptr], grid, HCP_THREADS, 0, c->stream, (const float *)w.w, n, nm, X,
              flat, post_y, post_y ? mix : (const float *)nullptr, *part, *ssq, cb, tl);
    if (tail) c->hc_tails++;
    NF_LAUNCHED();
    return 1;
}

/* collapse_norm_row4 takes the row: hc = 4, at most 4 floats per one of `threads` (thread, or thread and float4 slot
 * of collapse_norm_row4<K>: 4 K x blockDim), 16-byte aligned rows, NF_CUDA_NORM_ROW4 not off */
static bool row4_fits(int hc, int n, int64_t threads, const float *X, const float *out, const float *norm_w) {
    return hc == 4 && n % 4 == 0 && (int64_t)n <= 4 * threads && ((uintptr_t)X & 15) == 0 && ((uintptr_t)out & 15) == 0 &&
           ((uintptr_t)norm_w & 15) == 0 && nf_cuda_norm_row4_enabled();
}

/* hc_pre; with norm (the sub-layer's RMSNorm weight) out = RMSNorm(h) * norm in the same launch when the collapse
 * fits one block's shared memory, else through nf_cuda_rmsnorm_rows (same values either way). With post_y, X is
 * first updated by hc_post(X, post_y, mix) (mix: the previous site's, then this site's): inside the split
 * projection's launch when it runs, else by hc_post's own launch. X is written only then. */
static int hc_pre(nf_backend *be, int il, int site, float *X, int T, float *out, float *mix, const nf_tensor *norm,
                  const float *post_y) {
    nf_cuda *c = nf_cuda_of_keep(be);
    /* a pending MoE combine into post_y (cuda_moe.cu: finish) goes into the split projection's update; any other
     * pending combine is written out first */
    const nf_cuda::nf_cuda_combine *cmb = nullptr;
    if (c->pending.y) {
        if (post_y && c->pending.y == post_y && c->pending.T == T) cmb = &c->pending;
        else if (nf_cuda_combine_flush(c) < 0) return -1;
    }
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
    nf_cuda_mat w = nf_cuda_mat_of(c, fn);
    float *part = nullptr, *mm = nullptr;
    double *ssq = nullptr;
    int nparts = 0;
    const float *norm_w = norm ? nf_cuda_vec(c, norm) : nullptr;
    if (norm && !norm_w) return nf_fail_prefix("layer %d norm", il);
    /* the mixing kernel's work in the split projection's last CTA (NF_CUDA_HC_TAIL=on): the row4 collapse + norm's
     * conditions below, a row of at most 4 float4s per thread of the CTA */
    const hc_tail_args tail = {base, scale, norm_w, mix, out, c->hc_done, hp->hc_sinkhorn_iters, hp->hc_eps,
                               hp->rms_eps, hp->rms_eps};
    const bool use_tail = c->hc_tail && c->hc_done && norm && T <= NF_CUDA_GEMV_MAX_VECTORS && hc_norm_fused() &&
                          row4_fits(hc, n, 4 * HCP_THREADS, X, out, norm_w);
    const int split = hc_proj_split(c, w, X, T, hc, n, nm, post_y, mix, cmb, use_tail ? &tail : nullptr, sc, &part,
                                    &ssq, &nparts);
    if (cmb) {
        if (split == 1) { /* launched: the kernel has the inputs, y stays unwritten */
            nf_cuda_combine_done(c);
            c->combines_folded++;
        }
        else if (nf_cuda_combine_flush(c) < 0) return -1;
    }
    if (split < 0) return -1;
    if (split == 1 && use_tail) return 0; /* the projection's tail wrote mix and out */
    if (!split) {
        if (!(mm = sc.get<float>((size_t)T * nm))) return nf_fail("cuda hc_pre: out of device memory");
        /* hc_post of post_y first, unless the prefill projection takes it */
        const int pp = hc_proj_prefill(be, c, w, X, T, flat, nm, hp->rms_eps, mm, hc, n, post_y, mix);
        if (pp < 0) return -1;
        if (!pp && ((post_y && nf_cuda_hc_post(be, X, post_y, mix, T) < 0) ||
                    nf_cuda_matmul_rmsnormed(c, &w, X, T, flat, hp->rms_eps, mm, nm) < 0))
            return -1;
    }
    const unsigned norm_threads = nf_cuda_row_threads(n);
    const size_t row_bytes = (size_t)n * sizeof(float);
    static int max_threads = -1; /* what the compiled kernel can launch with (registers per thread) */
    if (max_threads < 0) {
        cudaFuncAttributes fa;
        max_threads = cudaFuncGetAttributes(&fa, hc_mix_collapse_kernel) == cudaSuccess ? fa.maxThreadsPerBlock : 0;
    }
    if (norm && norm_threads >= (unsigned)(hc * hc) && norm_threads <= (unsigned)max_threads && row_bytes <= 48 * 1024 &&
        hc_norm_fused()) {
        const dim3 grid(2, T < 65535 ? T : 65535);
        const int row4 = row4_fits(hc, n, norm_threads, X, out, norm_w);
        const hc_mix_args a = {mm, base, scale, X, T, hc, n, hp->hc_sinkhorn_iters, hp->hc_eps, mix, out,
                               hc_sinkhorn_mode(), norm_w, hp->rms_eps, row4, part, ssq, nparts, flat, hp->rms_eps};
        nf_launch(hc_mix_collapse_kernel, grid, norm_threads, row_bytes, c->stream, a);
        NF_LAUNCHED();
        return 0;
    }
    float *h = out;
    if (norm && !(h = sc.get<float>((size_t)T * n))) return nf_fail("cuda hc_pre: out of device memory");
    const int collapse_blocks = (int)((n + HC_THREADS - 1) / HC_THREADS < 64 ? (n + HC_THREADS - 1) / HC_THREADS : 64);
    const dim3 grid(1 + collapse_blocks, T < 65535 ? T : 65535);
    const hc_mix_args a = {mm, base, scale, X, T, hc, n, hp->hc_sinkhorn_iters, hp->hc_eps, mix, h, hc_sinkhorn_mode(),
                           nullptr, 0.0f, 0, part, ssq, nparts, flat, hp->rms_eps};
    nf_launch(hc_mix_collapse_kernel, grid, HC_THREADS, 0, c->stream, a);
    NF_LAUNCHED();
    return norm ? nf_cuda_rmsnorm_rows(c, h, n, T, n, hp->rms_eps, norm_w, out, n) : 0;
}

/* without post_y hc_pre only reads X: the casts drop a const it keeps */
int nf_cuda_hc_pre(nf_backend *be, int il, int site, const float *X, int T, float *h, float *mix) {
    return hc_pre(be, il, site, (float *)X, T, h, mix, nullptr, nullptr);
}

int nf_cuda_hc_pre_norm(nf_backend *be, int il, int site, const float *X, int T, const nf_tensor *w, float *x,
                        float *mix) {
    return hc_pre(be, il, site, (float *)X, T, x, mix, w, nullptr);
}

int nf_cuda_hc_post_pre_norm(nf_backend *be, float *X, const float *y, int il, int site, int T, const nf_tensor *w,
                             float *x, float *mix) {
    return hc_pre(be, il, site, X, T, x, mix, w, y);
}

/* X[t][j][e] = post[j] y[t][e] + sum_i comb[i][j] X[t][i][e] (each thread owns one (t, e) column of X). HC > 0: the
 * stream count known at compile time (glm53: 4), so the column's streams stay in registers (with a run-time count
 * they went through a 64-byte local-memory array); HC = 0: any count up to HC_MAX. */
template <int HC>
__global__ void hc_post_kernel(float *X, const float *y, const float *mix, int T, int hc_rt, int n) {
    NF_PDL_ENTER();
    const int hc = HC > 0 ? HC : hc_rt;
    const int64_t total = (int64_t)T * n;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int t = (int)(idx / n), e = (int)(idx % n);
        float *x = X + (size_t)t * hc * n;
        const float *post = mix + (size_t)t * (hc + hc * hc), *comb = post + hc;
        float xi[HC > 0 ? HC : HC_MAX];
#pragma unroll
        for (int i = 0; i < (HC > 0 ? HC : HC_MAX); i++)
            if (HC > 0 || i < hc) xi[i] = x[(size_t)i * n + e];
        const float yv = y[idx];
#pragma unroll
        for (int j = 0; j < (HC > 0 ? HC : HC_MAX); j++) {
            if (HC == 0 && j >= hc) break;
            x[(size_t)j * n + e] = hc_post_value<HC>(post, comb, hc, j, yv, xi);
        }
    }
}

int nf_cuda_hc_post(nf_backend *be, float *X, const float *y, const float *mix, int T) {
    nf_cuda *c = nf_cuda_of(be);
    const int hc = c->m->hp.hc_count, n = c->m->hp.n_embd;
    if (hc > HC_MAX) return nf_fail("cuda hc: hc_count %d > %d", hc, HC_MAX);
    if (hc == 4)
        nf_launch(hc_post_kernel<4>, blocks_for((int64_t)T * n), 256, 0, c->stream, X, y, mix, T, hc, n);
    else
        nf_launch(hc_post_kernel<0>, blocks_for((int64_t)T * n), 256, 0, c->stream, X, y, mix, T, hc, n);
    NF_LAUNCHED();
    return 0;
}
