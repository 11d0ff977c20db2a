/* cuda_router.cu — the MoE router on the GPU (contract: cuda_router.h; the CPU's rules: src/cpu/moe.c).
 *
 * Top-k by rank counting: every expert's (choice, index) becomes one 64-bit key whose integer order is the
 * ranking (choice descending, index ascending), and each expert's rank is the number of keys above its own, all
 * experts in parallel; the expert of rank r < k goes to slot r. Why: the former k rounds of a block-wide arg-max
 * (two barriers and a scan of the taken slots per round) made the router ~12 us per MoE layer at 288 experts,
 * top-8, all latency; counting is one pass over keys in shared memory and one barrier, and it picks exactly the
 * same experts in the same order (a strict total order has one ranking). With one expert per thread and k <= 32
 * the count is narrowed first (router_narrow): an expert of global rank < k has fewer than k experts above it in
 * its own warp of 32, so each warp keeps its top k by a 32-way count over shuffles, and ranking those candidates
 * among themselves gives every kept expert its global rank (everything above a top-k expert is kept too): the same
 * selection, for about a third of the comparisons (288 experts: 32 + 72 per thread instead of 288). */
#include "cuda/cuda_internal.h"
#include "cuda/cuda_launch.h"
#include "cuda/cuda_router.h"

#define ROUTER_THREADS_MAX 1024

/* NF_CUDA_ROUTER_NARROW=on: the narrowed count (the same selection). Opt-in: on the H100 (session 18) the kernel
 * took 6.59 us instead of 6.94 (ncu), but decode with it was 1.3% slower by the medians of two and three runs (within
 * what separates runs of one arm there): no measured gain to make it the default (docs/benchmarks.md) */
static int router_narrow_on(void) {
    static int cache = -1;
    return !nf_cuda_env_switch(&cache, "NF_CUDA_ROUTER_NARROW", "on"); /* the switch is 0 exactly when it is "on" */
}

/* The ranking key of a choice value: larger keys rank first; floats in their numeric order (-0 as +0, so the two
 * zeros tie as they compare equal), NaN below -inf; the expert index in the low half, inverted so that among
 * equal choices the lower index ranks first. */
__device__ __forceinline__ unsigned long long router_key(float v, int e) {
    unsigned int b = __float_as_uint(v == 0.0f ? 0.0f : v);
    b = v != v ? 0u : (b & 0x80000000u) ? ~b : b | 0x80000000u;
    return ((unsigned long long)b << 32) | (unsigned int)(0xFFFFFFFFu - (unsigned int)e);
}

/* one token's routing by the whole block (every thread calls it; it synchronises): scores and keys of all
 * experts, each expert's rank, then the weights in rank order (thread 0, the CPU's sum and division order). sh:
 * the keys (E, then with narrow the candidates) and the scores; logits read with __ldcg (L2), which the fused
 * kernel's last CTA needs for the other CTAs' logits and costs the plain router nothing. */
__device__ void route_token(const float *logit, const float *bias, int E, int k, int norm, float scale,
                            int32_t *expert_of, float *weight_of, int narrow, float *sh) {
    unsigned long long *key = (unsigned long long *)sh;
    float *s = (float *)(key + (narrow ? E + ((E + 31) / 32) * k : E)); /* narrow: the candidates after the keys */
    __shared__ int32_t sel[NF_ROUTER_TOPK_MAX];
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        const float v = nf_d_sigmoid(__ldcg(logit + e));
        s[e] = v;
        key[e] = router_key(__fadd_rn(v, bias ? bias[e] : 0.0f), e);
    }
    __syncthreads();
    if (narrow) { /* E <= blockDim.x, k <= 32 (nf_cuda_router) */
        const int e = threadIdx.x, warp = e >> 5, nwarps = (E + 31) >> 5;
        /* candidates of warp w: cand[w * k + r] = its expert of warp rank r, r < min(k, experts in the warp) */
        unsigned long long *cand = key + E;
        const unsigned long long mine = e < E ? key[e] : 0ull; /* 0 is below every key (its low half >= 1) */
        int wr = 0;
#pragma unroll 8
        for (int q = 0; q < 32; q++) wr += __shfl_sync(0xffffffffu, mine, q) > mine;
        if (e < E && wr < k) cand[warp * k + wr] = mine;
        __syncthreads();
        /* warp w's candidates: its experts, at most k */
        auto kept = [&](int w) { const int m = E - 32 * w < 32 ? E - 32 * w : 32; return m < k ? m : k; };
        const int c = threadIdx.x, cw = c / k, cr = c % k;
        if (cw < nwarps && cr < kept(cw)) {
            const unsigned long long my = cand[c];
            int rank = 0;
            for (int w = 0; w < nwarps; w++)
                for (int r = 0; r < kept(w); r++) rank += cand[w * k + r] > my;
            if (rank < k) sel[rank] = (int32_t)(0xFFFFFFFFu - (unsigned int)my);
        }
    } else {
        for (int e = threadIdx.x; e < E; e += blockDim.x) {
            const unsigned long long mine = key[e];
            int rank = 0;
            for (int j = 0; j < E; j++) rank += key[j] > mine; /* every thread reads key[j] at once: a broadcast */
            if (rank < k) sel[rank] = e;
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float sum = 0.0f;
        for (int i = 0; i < k; i++) sum = __fadd_rn(sum, s[sel[i]]);
        for (int i = 0; i < k; i++) {
            float w = s[sel[i]];
            if (norm) w = __fdiv_rn(w, __fadd_rn(sum, 1e-20f));
            expert_of[i] = sel[i];
            weight_of[i] = __fmul_rn(w, scale);
        }
    }
    __syncthreads(); /* sel and sh are free for the next token */
}

/* block = token */
__global__ void router_kernel(const float *logit, const float *bias, int E, int k, int norm, float scale,
                              int32_t *expert_of, float *weight_of, int narrow) {
    NF_PDL_ENTER();
    extern __shared__ __align__(16) float sh[];
    const int t = blockIdx.x;
    route_token(logit + (size_t)t * E, bias, E, k, norm, scale, expert_of + (size_t)t * k, weight_of + (size_t)t * k,
                narrow, sh);
}

/* ---- the router product and the routing in one launch (decode) ----
 * CTA b computes the logits of experts RF_ROWS b .. + RF_ROWS - 1 for all T tokens: thread i owns the float4 columns
 * i, i + RF_THREADS, ... of each row (the first RF_V of them loaded before the PDL wait: the weights are never
 * written during a forward, so their copy overlaps the kernels before), dots them in column order with fmaf, the
 * warp adds its 32 lanes by an xor butterfly and thread 0 the 8 warps in order: every logit is the same function
 * of its row and token in whatever launch. The CTA then publishes its logits (__threadfence, one atomicAdd on the
 * backend's counter); the CTA that counts last routes every token (route_token, the router kernel's code) and sets
 * the counter back to 0 for the next launch (which cannot pass its PDL wait before this grid has completed). Why:
 * the f32 router product (4.8 MB at glm53) kept ~0.7 TB/s on the GEMV engine (6.8 us) and the router kernel behind it
 * cost 6.9 us, nearly all latency (docs/benchmarks.md, H100 decode table); one launch pays one ramp-up and one
 * dependency edge instead of two. */
#define RF_THREADS 256
#define RF_ROWS 2
#define RF_V 4 /* float4s per thread and row held from before the wait: 4096 columns per pass */
#define RF_TMAX 8
__global__ void __launch_bounds__(RF_THREADS) router_fused_kernel(const float *W, int n, const float *x, int64_t ldx, int T,
                                                                  const float *bias, int E, int k, int norm, float scale,
                                                                  float *logit, int32_t *expert_of, float *weight_of,
                                                                  unsigned int *done) {
    extern __shared__ __align__(16) float sh[];
    __shared__ float red[RF_TMAX][RF_ROWS][RF_THREADS / 32];
    __shared__ int last;
    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5, r0 = (int)blockIdx.x * RF_ROWS;
    const int n4 = n / 4;
    float4 w[RF_ROWS][RF_V];
#pragma unroll
    for (int r = 0; r < RF_ROWS; r++)
#pragma unroll
        for (int v = 0; v < RF_V; v++) {
            const int q = tid + v * RF_THREADS;
            w[r][v] = r0 + r < E && q < n4 ? __ldg((const float4 *)(W + (size_t)(r0 + r) * n) + q)
                                           : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    NF_PDL_ENTER();
    float acc[RF_TMAX][RF_ROWS];
#pragma unroll
    for (int t = 0; t < RF_TMAX; t++)
#pragma unroll
        for (int r = 0; r < RF_ROWS; r++) acc[t][r] = 0.0f;
    for (int q0 = 0; q0 < n4; q0 += RF_V * RF_THREADS) {
        if (q0) /* beyond the first 4096 columns: the next pass's weights */
#pragma unroll
            for (int r = 0; r < RF_ROWS; r++)
#pragma unroll
                for (int v = 0; v < RF_V; v++) {
                    const int q = q0 + tid + v * RF_THREADS;
                    w[r][v] = r0 + r < E && q < n4 ? __ldg((const float4 *)(W + (size_t)(r0 + r) * n) + q)
                                                   : make_float4(0.f, 0.f, 0.f, 0.f);
                }
#pragma unroll
        for (int t = 0; t < RF_TMAX; t++) {
            if (t >= T) break;
#pragma unroll
            for (int v = 0; v < RF_V; v++) {
                const int q = q0 + tid + v * RF_THREADS;
                if (q >= n4) break;
                const float4 xv = *((const float4 *)(x + (size_t)t * ldx) + q);
#pragma unroll
                for (int r = 0; r < RF_ROWS; r++) {
                    acc[t][r] = fmaf(w[r][v].x, xv.x, acc[t][r]);
                    acc[t][r] = fmaf(w[r][v].y, xv.y, acc[t][r]);
                    acc[t][r] = fmaf(w[r][v].z, xv.z, acc[t][r]);
                    acc[t][r] = fmaf(w[r][v].w, xv.w, acc[t][r]);
                }
            }
        }
    }
#pragma unroll
    for (int t = 0; t < RF_TMAX; t++) {
        if (t >= T) break;
#pragma unroll
        for (int r = 0; r < RF_ROWS; r++) {
            float a = acc[t][r];
            for (int o = 16; o >= 1; o >>= 1) a = __fadd_rn(a, __shfl_xor_sync(0xffffffffu, a, o));
            if (lane == 0) red[t][r][warp] = a;
        }
    }
    __syncthreads();
    if (tid < T * RF_ROWS) {
        const int t = tid / RF_ROWS, r = tid % RF_ROWS;
        if (r0 + r < E) {
            float a = red[t][r][0];
            for (int u = 1; u < RF_THREADS / 32; u++) a = __fadd_rn(a, red[t][r][u]);
            logit[(size_t)t * E + r0 + r] = a;
        }
    }
    __threadfence(); /* this CTA's logits visible to the device before it counts */
    __syncthreads();
    if (tid == 0) last = atomicAdd(done, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence(); /* the other CTAs' logits: read through L2 (route_token's __ldcg) */
    for (int t = 0; t < T; t++)
        route_token(logit + (size_t)t * E, bias, E, k, norm, scale, expert_of + (size_t)t * k, weight_of + (size_t)t * k,
                    0, sh);
    if (tid == 0) *done = 0u;
}

extern "C" int nf_cuda_router(cudaStream_t stream, const float *logit, const float *bias, int T, int E, int k, int norm,
                              float scale, int32_t *expert_of, float *weight_of) {
    if (T <= 0) return 0;
    if (k < 1 || k > NF_ROUTER_TOPK_MAX || k > E)
        return nf_fail("cuda router: %d experts per token of %d unsupported (1..%d)", k, E, NF_ROUTER_TOPK_MAX);
    const size_t smem = (size_t)E * (sizeof(unsigned long long) + sizeof(float));
    if (smem > 48 * 1024) return nf_fail("cuda router: %d experts exceed the router's shared memory", E);
    const int threads = E < ROUTER_THREADS_MAX ? (E + 31) / 32 * 32 : ROUTER_THREADS_MAX;
    const size_t cand_bytes = (size_t)threads / 32 * k * sizeof(unsigned long long);
    /* narrowing needs one expert per thread, k <= 32 and the candidates beside the keys */
    const int narrow = E <= threads && k <= 32 && smem + cand_bytes <= 48 * 1024 && router_narrow_on();
    nf_launch(router_kernel, T, threads, smem + (narrow ? cand_bytes : 0), stream, logit, bias, E, k, norm, scale,
              expert_of, weight_of, narrow);
    NF_LAUNCHED();
    return 0;
}

extern "C" int nf_cuda_router_fused(cudaStream_t stream, const float *W, int n, const float *x, int64_t ldx, int T,
                                    const float *bias, int E, int k, int norm, float scale, float *logit,
                                    int32_t *expert_of, float *weight_of, unsigned int *done) {
    const size_t smem = (size_t)E * (sizeof(unsigned long long) + sizeof(float));
    if (T < 1 || T > RF_TMAX || n < 4 || n % 4 || ldx % 4 || ((uintptr_t)W & 15) || ((uintptr_t)x & 15) || !done ||
        k < 1 || k > NF_ROUTER_TOPK_MAX || k > E || smem > 48 * 1024)
        return 0;
    nf_launch(router_fused_kernel, (unsigned)((E + RF_ROWS - 1) / RF_ROWS), RF_THREADS, smem, stream, W, n, x, ldx, T,
              bias, E, k, norm, scale, logit, expert_of, weight_of, done);
    NF_LAUNCHED();
    return 1;
}
