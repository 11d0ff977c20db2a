/* cuda_router.cu — the MoE router on the GPU (contract: cuda_router.h; the CPU's rules: src/cpu/moe.c).
 *
 * Top-k by rank counting: every expert's (choice, index) becomes one 64-bit key whose integer order is the
 * ranking (choice descending, index ascending), and each expert's rank is the number of keys above its own, all
 * experts in parallel; the expert of rank r < k goes to slot r. Why: the former k rounds of a block-wide arg-max
 * (two barriers and a scan of the taken slots per round) made the router ~12 us per MoE layer at 288 experts,
 * top-8, all latency; counting is one pass over keys in shared memory and one barrier, and it picks exactly the
 * same experts in the same order (a strict total order has one ranking). */
#include "cuda/cuda_internal.h"
#include "cuda/cuda_launch.h"
#include "cuda/cuda_router.h"

#define ROUTER_THREADS_MAX 1024

/* The ranking key of a choice value: larger keys rank first; floats in their numeric order (-0 as +0, so the two
 * zeros tie as they compare equal), NaN below -inf; the expert index in the low half, inverted so that among
 * equal choices the lower index ranks first. */
__device__ __forceinline__ unsigned long long router_key(float v, int e) {
    unsigned int b = __float_as_uint(v == 0.0f ? 0.0f : v);
    b = v != v ? 0u : (b & 0x80000000u) ? ~b : b | 0x80000000u;
    return ((unsigned long long)b << 32) | (unsigned int)(0xFFFFFFFFu - (unsigned int)e);
}

/* block = token: scores and keys of all experts, each expert's rank, then the weights in rank order (thread 0,
 * the CPU's sum and division order) */
__global__ void router_kernel(const float *logit, const float *bias, int E, int k, int norm, float scale,
                              int32_t *expert_of, float *weight_of) {
    NF_PDL_ENTER();
    extern __shared__ __align__(16) float sh[];
    unsigned long long *key = (unsigned long long *)sh;
    float *s = (float *)(key + E);
    __shared__ int32_t sel[NF_ROUTER_TOPK_MAX];
    const int t = blockIdx.x;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        const float v = nf_d_sigmoid(logit[(size_t)t * E + e]);
        s[e] = v;
        key[e] = router_key(__fadd_rn(v, bias ? bias[e] : 0.0f), e);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        const unsigned long long mine = key[e];
        int rank = 0;
        for (int j = 0; j < E; j++) rank += key[j] > mine; /* every thread reads key[j] at once: a broadcast */
        if (rank < k) sel[rank] = e;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float sum = 0.0f;
        for (int i = 0; i < k; i++) sum = __fadd_rn(sum, s[sel[i]]);
        for (int i = 0; i < k; i++) {
            float w = s[sel[i]];
            if (norm) w = __fdiv_rn(w, __fadd_rn(sum, 1e-20f));
            expert_of[(size_t)t * k + i] = sel[i];
            weight_of[(size_t)t * k + i] = __fmul_rn(w, scale);
        }
    }
}

extern "C" int nf_cuda_router(cudaStream_t stream, const float *logit, const float *bias, int T, int E, int k, int norm,
                              float scale, int32_t *expert_of, float *weight_of) {
    if (T <= 0) return 0;
    if (k < 1 || k > NF_ROUTER_TOPK_MAX || k > E)
        return nf_fail("cuda router: %d experts per token of %d unsupported (1..%d)", k, E, NF_ROUTER_TOPK_MAX);
    const size_t smem = (size_t)E * (sizeof(unsigned long long) + sizeof(float));
    if (smem > 48 * 1024) return nf_fail("cuda router: %d experts exceed the router's shared memory", E);
    const int threads = E < ROUTER_THREADS_MAX ? (E + 31) / 32 * 32 : ROUTER_THREADS_MAX;
    nf_launch(router_kernel, T, threads, smem, stream, logit, bias, E, k, norm, scale, expert_of, weight_of);
    NF_LAUNCHED();
    return 0;
}
