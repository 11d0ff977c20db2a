/* cuda_rowsum.h — block-wide sums of a row in double (RMSNorm's sum of squares) for the kernels that normalise a
 * row: RMSNorm (cuda_norm.cu), the hc collapse with its norm (cuda_hc.cu) and the hc projection GEMV that normalises
 * its activation row itself (cuda_gemv.cu). One definition, so the sums are formed the same way everywhere. */
#ifndef NF_CUDA_ROWSUM_H
#define NF_CUDA_ROWSUM_H

#include <cuda_runtime.h>
#include <stdint.h>

/* The sum over a block of K * blockDim.x (virtual) threads, returned to every thread: thread t holds the values of
 * threads t, t + blockDim.x, ..., in v[0..K). Warp trees, then warp 0 adds the warps' sums (warp w + k * nw of the
 * virtual block in slot w + k * nw) with a tree: a fixed order, so the result does not depend on timing, and a block
 * of blockDim.x threads with K values each gives the sum of the K * blockDim.x-thread block bit for bit (the hc
 * projection GEMV forms rmsnorm_kernel's 1024-thread sum with 512 threads so). K * blockDim.x / 32 <= 32, every
 * thread calls it; sh: 32 doubles of shared memory, reusable right after the call returns. */
template <int K> __device__ __forceinline__ double nf_d_block_sum_k(double (&v)[K], double *sh) {
#pragma unroll
    for (int k = 0; k < K; k++)
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v[k] += __shfl_xor_sync(0xffffffffu, v[k], o);
    const int w = threadIdx.x / 32, l = threadIdx.x % 32, nw = blockDim.x / 32;
    __syncthreads();
    if (l == 0)
#pragma unroll
        for (int k = 0; k < K; k++) sh[w + k * nw] = v[k];
    __syncthreads();
    if (w == 0) {
        double s = l < K * nw ? sh[l] : 0.0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        __syncwarp(); /* lane 31 read sh[31] above (32 warps): order that read before lane 0 overwrites it (the
                         shuffles already do, by data dependence; compute-sanitizer racecheck wants the barrier) */
        if (l == 0) sh[32 - 1] = s;
    }
    __syncthreads();
    const double r = sh[32 - 1];
    __syncthreads();
    return r;
}
/* the sum of v over the block (nf_d_block_sum_k with one value per thread) */
__device__ __forceinline__ double nf_d_block_sum(double v, double *sh) {
    double a[1] = {v};
    return nf_d_block_sum_k<1>(a, sh);
}

/* ---- RMSNorm's row reduction, shared by the kernels that normalise a row (cuda_norm.cu, cuda_hc.cu) ---- */
/* Threads of a row's block: one float4 per thread, up to 1024 threads (a 16384-wide row then has four per thread,
 * loaded together). With one block per row the loads of a thread must be in flight together: the former serial
 * chain of dependent loads cost ~18 us per decode-token norm on the H200. */
static inline unsigned nf_cuda_row_threads(int64_t n) {
    int64_t t = ((n + 3) / 4 + 31) / 32 * 32;
    return (unsigned)(t < 32 ? 32 : t > 1024 ? 1024 : t);
}

/* ss + v.x^2 + v.y^2 + v.z^2 + v.w^2 in double, in that order: one float4 of nf_d_row_sumsq_part's vec4 path, which
 * the norms that hold their row in registers (cuda_norm.cu, cuda_hc.cu) share so that their sums are its bits */
__device__ __forceinline__ double nf_d_sumsq_add4(double ss, float4 v) {
    ss += (double)v.x * (double)v.x;
    ss += (double)v.y * (double)v.y;
    ss += (double)v.z * (double)v.z;
    ss += (double)v.w * (double)v.w;
    return ss;
}

/* this thread's part of the row's sum of squares, in double (the block adds the parts: nf_d_block_sum); four
 * loads are issued before their adds. vec4: the row start is 16-byte aligned and n % 4 == 0. Every RMSNorm of
 * the backend (rmsnorm_kernel, the fused hc collapse + norm) sums this way, so with the same blockDim a row gives
 * the same sum bit for bit whichever kernel normalises it. */
__device__ __forceinline__ double nf_d_row_sumsq_part(const float *xr, int64_t n, int vec4) {
    double ss = 0.0;
    const int64_t bd = blockDim.x;
    if (vec4) {
        const float4 *x4 = (const float4 *)xr;
        const int64_t n4 = n / 4;
        for (int64_t b = threadIdx.x; b < n4; b += 4 * bd) {
            float4 v[4];
#pragma unroll
            for (int u = 0; u < 4; u++) v[u] = b + u * bd < n4 ? x4[b + u * bd] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (int u = 0; u < 4; u++) ss = nf_d_sumsq_add4(ss, v[u]);
        }
    } else {
        for (int64_t b = threadIdx.x; b < n; b += 4 * bd) {
            float v[4];
#pragma unroll
            for (int u = 0; u < 4; u++) v[u] = b + u * bd < n ? xr[b + u * bd] : 0.0f;
#pragma unroll
            for (int u = 0; u < 4; u++) ss += (double)v[u] * (double)v[u];
        }
    }
    return ss;
}

/* 1 / rms from the block's sum of squares, in the CPU's operation order (src/cpu/vec.c) */
__device__ __forceinline__ float nf_d_rms_inv(double ss, int64_t n, float eps) {
    const float mean = (float)(ss / (double)n);
    return 1.0f / sqrtf(__fadd_rn(mean, eps));
}

#endif
