/* cuda_splitk.cu — decode products of a few f32 rows with long columns, split over the columns across CTAs
 * (the hyper-connection projection: 24 rows of 4 x 4096 values, its input RMS-normalised).
 *
 * Why: the streaming GEMV (cuda_gemv.cu) gives each row to one CTA, so 24 rows keep 24 SMs busy: ~6.6 us per
 * launch (90 per token) to read 1.6 MB, latency and not bandwidth. Here CTA s of token t takes the column slice
 * [s * slice, (s + 1) * slice) of every row: it loads its weights (before the PDL wait: weights are never written)
 * and its activations, writes one partial dot product per row and the slice's sum of squares, and the last CTA of
 * the token (a ticket counter) adds the partials in slice order and applies the norm: y_r = inv_rms(x) * sum_s
 * part[s][r]. The result is deterministic (fixed shapes, fixed orders); it is not the GEMV's bit pattern (the
 * norm is applied to the sums instead of to x, and the sums run in another order), both within f32 rounding of
 * the CPU reference.
 *
 * The tickets and partials live in a small per-backend buffer (allocated on first use, outside graph capture);
 * the last CTA resets its token's ticket, so consecutive launches in stream order reuse it. */
#include "cuda/cuda_internal.h"
#include "cuda/cuda_launch.h"
#include "cuda/cuda_splitk.h"

#define SK_THREADS 256
#define SK_WARPS (SK_THREADS / 32)
#define SK_COL4 1 /* float4 columns per lane: a slice is 32 lanes x 4 = 128 columns (128 CTAs for 16384) */
#define SK_SLICE (32 * SK_COL4 * 4)

struct nf_cuda_splitk {
    unsigned *tickets; /* [NF_SPLITK_MAX_T] */
    float *part;       /* [NF_SPLITK_MAX_T][NF_SPLITK_MAX_SLICES][NF_SPLITK_MAX_ROWS + 1] */
};

#define SK_RW (NF_SPLITK_MAX_ROWS / SK_WARPS) /* rows per warp: warp w owns rows w, w + 8, ... */

/* The CTA's partials into part[t][s]: acc[k] is the lane's share of row warp + 8k, q2 its share of the slice's sum
 * of squares (warp 0's is used); each reduced by the xor butterfly of its warp. */
__device__ __forceinline__ void splitk_store(float *pt, int rows, const float acc[SK_RW], float q2) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int k = 0; k < SK_RW; k++) {
        float a = acc[k];
#pragma unroll
        for (int o = 16; o; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
        const int r = warp + SK_WARPS * k;
        if (lane == 0 && r < rows) pt[r] = a;
    }
    if (warp == 0) {
#pragma unroll
        for (int o = 16; o; o >>= 1) q2 += __shfl_xor_sync(0xffffffffu, q2, o);
        if (lane == 0) pt[NF_SPLITK_MAX_ROWS] = q2;
    }
}

/* After splitk_store: the last CTA of token t to arrive (the ticket; every CTA fences its partials before taking
 * one) adds the S partials of each row, lane l slices l, l + 32, ... in order then the xor butterfly (fixed orders:
 * the same bits every run), applies the norm and resets the ticket for the next launch. */
__device__ __forceinline__ void splitk_reduce(const float *part, unsigned *tickets, int t, int S, int rows, int64_t n,
                                              int norm, float eps, float *y, int64_t ldy) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __shared__ int last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(&tickets[t], 1u) == (unsigned)(S - 1);
    __syncthreads();
    if (!last) return;
    __threadfence();
    const float *p0 = part + (size_t)t * NF_SPLITK_MAX_SLICES * (NF_SPLITK_MAX_ROWS + 1);
    __shared__ float red[NF_SPLITK_MAX_ROWS + 1];
    for (int r = warp; r <= NF_SPLITK_MAX_ROWS; r += SK_WARPS) {
        if (r >= rows && r != NF_SPLITK_MAX_ROWS) continue;
        float a = 0.0f;
        for (int i = lane; i < S; i += 32) a += __ldcg(p0 + (size_t)i * (NF_SPLITK_MAX_ROWS + 1) + r);
#pragma unroll
        for (int o = 16; o; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
        if (lane == 0) red[r] = a;
    }
    __syncthreads();
    if (threadIdx.x < rows) {
        const float inv = norm ? nf_d_rms_inv((double)red[NF_SPLITK_MAX_ROWS], n, eps) : 1.0f;
        y[(size_t)t * ldy + threadIdx.x] = red[threadIdx.x] * inv;
    }
    if (threadIdx.x == 0) tickets[t] = 0;
}

/* y = (norm ? inv_rms(x) : 1) W x; CTA s of token t: columns [128 s, 128 s + 128), lane l float4 column l */
__global__ void __launch_bounds__(SK_THREADS) splitk_f32_kernel(const float *W, int rows, int64_t n, const float *x,
                                                                 int64_t ldx, float eps, int norm, float *part,
                                                                 unsigned *tickets, float *y, int64_t ldy) {
    const int t = blockIdx.y, s = blockIdx.x;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t c0 = (int64_t)s * SK_SLICE + 4 * lane;
    float4 wv[SK_RW];
#pragma unroll
    for (int k = 0; k < SK_RW; k++) {
        const int r = warp + SK_WARPS * k;
        wv[k] = r < rows ? __ldg((const float4 *)(W + (size_t)r * n + c0)) : make_float4(0, 0, 0, 0);
    }
    NF_PDL_ENTER();
    const float4 xv = *(const float4 *)(x + (size_t)t * ldx + c0);
    float acc[SK_RW];
#pragma unroll
    for (int k = 0; k < SK_RW; k++)
        acc[k] = fmaf(wv[k].w, xv.w, fmaf(wv[k].z, xv.z, fmaf(wv[k].y, xv.y, wv[k].x * xv.x)));
    const float q2 = fmaf(xv.w, xv.w, fmaf(xv.z, xv.z, fmaf(xv.y, xv.y, xv.x * xv.x)));
    splitk_store(part + ((size_t)t * NF_SPLITK_MAX_SLICES + s) * (NF_SPLITK_MAX_ROWS + 1), rows, acc, q2);
    splitk_reduce(part, tickets, t, gridDim.x, rows, n, norm, eps, y, ldy);
}

/* hc_post of token t's streams X[t][HC][n] (as hc_post_kernel: X[j][e] = post[j] y[e] + sum_i comb[i][j] X[i][e],
 * the same operations, so the same bits), then mm = inv_rms(X) W X of the new streams: CTA s takes the elements
 * [32 s, 32 s + 32) of every stream (128 of the flattened columns), warp j < HC computes stream j's new values. */
template <int HC>
__global__ void __launch_bounds__(SK_THREADS) hc_post_proj_kernel(float *X, const float *y, const float *mix, int n,
                                                                   const float *W, int rows, float eps, float *part,
                                                                   unsigned *tickets, float *mm, int64_t ldm) {
    const int t = blockIdx.y, s = blockIdx.x;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, e = 32 * s + lane;
    const int64_t flat = (int64_t)HC * n;
    float wv[SK_RW][HC];
#pragma unroll
    for (int k = 0; k < SK_RW; k++) {
        const int r = warp + SK_WARPS * k;
#pragma unroll
        for (int j = 0; j < HC; j++) wv[k][j] = r < rows ? __ldg(W + (size_t)r * flat + (size_t)j * n + e) : 0.0f;
    }
    NF_PDL_ENTER();
    __shared__ float xs[HC][32];
    float *Xt = X + (size_t)t * flat;
    if (warp < HC) {
        const float *post = mix + (size_t)t * (HC + HC * HC), *comb = post + HC;
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < HC; i++) sum = __fadd_rn(sum, __fmul_rn(comb[i * HC + warp], Xt[(size_t)i * n + e]));
        xs[warp][lane] = __fadd_rn(__fmul_rn(post[warp], y[(size_t)t * n + e]), sum);
    }
    __syncthreads(); /* every warp has read the old streams at these elements */
    if (warp < HC) Xt[(size_t)warp * n + e] = xs[warp][lane];
    float xv[HC], q2 = 0.0f;
#pragma unroll
    for (int j = 0; j < HC; j++) {
        xv[j] = xs[j][lane];
        q2 = fmaf(xv[j], xv[j], q2);
    }
    float acc[SK_RW];
#pragma unroll
    for (int k = 0; k < SK_RW; k++) {
        float a = 0.0f;
#pragma unroll
        for (int j = 0; j < HC; j++) a = fmaf(wv[k][j], xv[j], a);
        acc[k] = a;
    }
    splitk_store(part + ((size_t)t * NF_SPLITK_MAX_SLICES + s) * (NF_SPLITK_MAX_ROWS + 1), rows, acc, q2);
    splitk_reduce(part, tickets, t, gridDim.x, rows, flat, 1, eps, mm, ldm);
}

int nf_cuda_splitk_fits(const nf_cuda_mat *w, int T, int64_t ldx, const float *x) {
    return w->type == NF_TYPE_F32 && w->w && w->nmat <= 1 && T >= 1 && T <= NF_SPLITK_MAX_T && w->rows >= 1 &&
           w->rows <= NF_SPLITK_MAX_ROWS && w->n % SK_SLICE == 0 && w->n / SK_SLICE <= NF_SPLITK_MAX_SLICES &&
           w->n / SK_SLICE >= 2 && ldx % 4 == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)w->w & 15) == 0;
}

static int splitk_buffers(nf_cuda *c) {
    if (c->splitk) return 0;
    if (c->capturing) return -1; /* no driver allocation inside a capture: the caller takes the GEMV */
    nf_cuda_splitk *sk = (nf_cuda_splitk *)calloc(1, sizeof *sk);
    if (!sk) return -1;
    const size_t np = (size_t)NF_SPLITK_MAX_T * NF_SPLITK_MAX_SLICES * (NF_SPLITK_MAX_ROWS + 1);
    if (cudaMalloc((void **)&sk->tickets, NF_SPLITK_MAX_T * sizeof(unsigned)) != cudaSuccess ||
        cudaMalloc((void **)&sk->part, np * sizeof(float)) != cudaSuccess ||
        cudaMemset(sk->tickets, 0, NF_SPLITK_MAX_T * sizeof(unsigned)) != cudaSuccess) {
        cudaFree(sk->tickets);
        cudaFree(sk->part);
        free(sk);
        cudaGetLastError();
        return -1;
    }
    c->splitk = sk;
    return 0;
}

int nf_cuda_matmul_splitk(nf_cuda *c, const nf_cuda_mat *w, const float *x, int T, int64_t ldx, int norm, float eps,
                          float *y, int64_t ldy) {
    if (!nf_cuda_splitk_fits(w, T, ldx, x)) return 1;
    if (splitk_buffers(c) < 0) return 1;
    const dim3 grid((unsigned)(w->n / SK_SLICE), (unsigned)T);
    nf_launch(splitk_f32_kernel, grid, SK_THREADS, 0, c->stream, (const float *)w->w, (int)w->rows, w->n, x, ldx, eps,
              norm, c->splitk->part, c->splitk->tickets, y, ldy);
    NF_LAUNCHED();
    return 0;
}

int nf_cuda_hc_post_project(nf_cuda *c, float *X, const float *y, const float *mix, int T, int hc, int64_t n,
                            const nf_cuda_mat *w, float eps, float *mm, int64_t ldm) {
    if (hc != 4 || w->type != NF_TYPE_F32 || !w->w || w->nmat > 1 || w->n != hc * n || w->rows < 1 ||
        w->rows > NF_SPLITK_MAX_ROWS || T < 1 || T > NF_SPLITK_MAX_T || n % 32 || n / 32 < 2 ||
        n / 32 > NF_SPLITK_MAX_SLICES)
        return 1;
    if (splitk_buffers(c) < 0) return 1;
    const dim3 grid((unsigned)(n / 32), (unsigned)T);
    nf_launch(hc_post_proj_kernel<4>, grid, SK_THREADS, 0, c->stream, X, y, mix, (int)n, (const float *)w->w,
              (int)w->rows, eps, c->splitk->part, c->splitk->tickets, mm, ldm);
    NF_LAUNCHED();
    return 0;
}

void nf_cuda_splitk_free(nf_cuda *c) {
    if (!c->splitk) return;
    cudaFree(c->splitk->tickets);
    cudaFree(c->splitk->part);
    free(c->splitk);
    c->splitk = nullptr;
}
