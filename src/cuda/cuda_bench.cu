/* cuda_bench.cu — device description, device-wide sync and the read-bandwidth probe of nf-bench (cuda_bench.h).
 *
 * The probe kernel reads a buffer far larger than L2 (so every byte comes from HBM) with 16-byte loads, four
 * independent loads in flight per thread per iteration, a grid of a few blocks per SM striding over the buffer:
 * the access pattern of a well-written weight-streaming GEMV without its arithmetic. The loaded words are folded
 * into one value that is written only when it equals an impossible sentinel, so the loads stay live and the
 * kernel writes (almost) nothing. Each launch is timed with its own pair of events; the median launch is the
 * figure (robust to one slow launch), the fastest is reported beside it. nf_cuda_read_launch issues the same
 * kernel over any window, for micro-benchmarks that time a read of exactly what a kernel under test reads.
 *
 * The GEMM ceiling runs the project's own prefill GEMM (cuda_gemm.cu) on a large square bf16 problem, where it is
 * compute-bound: the best the prefill's products can do on this GPU with this kernel. */
extern "C" {
#include "cuda/backend_cuda.h"
#include "cuda/cuda_bench.h"
#include "cuda/cuda_gemm.h"
#include "formats/formats.h"
#include "util/error.h"
}

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CU_OK(call)                                                                                          \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess) return nf_fail("cuda: %s (%s:%d)", cudaGetErrorString(e_), __FILE__, __LINE__); \
    } while (0)

extern "C" int nf_cuda_describe(int device, char *buf, size_t n) {
    cudaDeviceProp p;
    int drv = 0, rt = 0;
    CU_OK(cudaGetDeviceProperties(&p, device));
    CU_OK(cudaDriverGetVersion(&drv));
    CU_OK(cudaRuntimeGetVersion(&rt));
    snprintf(buf, n, "%s (device %d), sm_%d%d, %d SMs, %zu MiB, L2 %d MiB; CUDA driver %d.%d, runtime %d.%d",
             p.name, device, p.major, p.minor, p.multiProcessorCount, p.totalGlobalMem >> 20, p.l2CacheSize >> 20,
             drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
    return 0;
}

extern "C" size_t nf_cuda_l2_bytes(int device) {
    int l2 = 0;
    if (cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device) != cudaSuccess) return 0;
    return (size_t)l2;
}

extern "C" int nf_cuda_mem_info(int device, size_t *free_bytes, size_t *total_bytes) {
    if (nf_cuda_set_device(device) < 0) return -1;
    CU_OK(cudaMemGetInfo(free_bytes, total_bytes));
    return 0;
}

extern "C" int nf_cuda_pool_peak(int device, size_t *used_high, size_t *reserved_high) {
    if (nf_cuda_set_device(device) < 0) return -1;
    cudaMemPool_t pool;
    unsigned long long used = 0, reserved = 0; /* the attributes are cuuint64_t (64 bits) */
    CU_OK(cudaDeviceGetDefaultMemPool(&pool, device));
    CU_OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &used));
    CU_OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &reserved));
    *used_high = (size_t)used;
    *reserved_high = (size_t)reserved;
    return 0;
}

extern "C" int nf_cuda_device_sync(int device) {
    if (nf_cuda_set_device(device) < 0) return -1;
    CU_OK(cudaDeviceSynchronize());
    return 0;
}

static __global__ void read_kernel(const uint4 *__restrict__ p, size_t n, unsigned *sink) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned acc = 0;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 a = __ldcs(p + i), b = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride), d = __ldcs(p + i + 3 * stride);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n; i += stride) {
        uint4 a = __ldcs(p + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == 0x9e3779b9u) atomicAdd(sink, 1u);
}

extern "C" int nf_cuda_read_launch(const void *p, size_t bytes, unsigned *sink, void *stream) {
    if (bytes % 16 || (uintptr_t)p % 16) return nf_fail("read launch: %zu bytes at %p are not whole 16-byte units", bytes, p);
    int device = 0, sms = 0;
    CU_OK(cudaGetDevice(&device));
    CU_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    read_kernel<<<sms * 4, 512, 0, (cudaStream_t)stream>>>((const uint4 *)p, bytes / 16, sink);
    CU_OK(cudaGetLastError());
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

extern "C" int nf_cuda_read_bandwidth(int device, size_t bytes, int passes, nf_bw_probe *out) {
    memset(out, 0, sizeof *out);
    if (passes < 1) passes = 1;
    bytes &= ~(size_t)255;
    if (bytes == 0) return nf_fail("bandwidth probe: empty buffer");
    if (nf_cuda_set_device(device) < 0) return -1;
    int sms = 0;
    CU_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    uint4 *buf = nullptr;
    unsigned *sink = nullptr;
    cudaEvent_t *ev = nullptr;
    double *gbps = (double *)nf_xmalloc((size_t)passes * sizeof *gbps);
    int rc = -1, n_ev = 0;
    const size_t n = bytes / sizeof(uint4);
    const int threads = 512, blocks = sms * 4;
    cudaError_t e;
    if ((e = cudaMalloc(&buf, bytes)) != cudaSuccess || (e = cudaMalloc(&sink, sizeof *sink)) != cudaSuccess) {
        nf_fail("bandwidth probe: cannot allocate %zu MiB on the device: %s", bytes >> 20, cudaGetErrorString(e));
        goto done;
    }
    ev = (cudaEvent_t *)nf_xcalloc((size_t)2 * passes, sizeof *ev);
    for (; n_ev < 2 * passes; n_ev++)
        if ((e = cudaEventCreate(&ev[n_ev])) != cudaSuccess) goto cuda_fail;
    if ((e = cudaMemset(buf, 0x5a, bytes)) != cudaSuccess || (e = cudaMemset(sink, 0, sizeof *sink)) != cudaSuccess)
        goto cuda_fail;
    for (int w = 0; w < 3; w++) read_kernel<<<blocks, threads>>>(buf, n, sink);
    if ((e = cudaGetLastError()) != cudaSuccess) goto cuda_fail;
    for (int k = 0; k < passes; k++) {
        cudaEventRecord(ev[2 * k]);
        read_kernel<<<blocks, threads>>>(buf, n, sink);
        cudaEventRecord(ev[2 * k + 1]);
    }
    if ((e = cudaGetLastError()) != cudaSuccess || (e = cudaDeviceSynchronize()) != cudaSuccess) goto cuda_fail;
    for (int k = 0; k < passes; k++) {
        float ms = 0;
        if ((e = cudaEventElapsedTime(&ms, ev[2 * k], ev[2 * k + 1])) != cudaSuccess) goto cuda_fail;
        gbps[k] = (double)bytes / (ms * 1e-3) / 1e9;
    }
    qsort(gbps, (size_t)passes, sizeof *gbps, cmp_double);
    out->gbps = gbps[passes / 2];
    out->best_gbps = gbps[passes - 1];
    out->bytes = bytes;
    out->passes = passes;
    rc = 0;
    goto done;
cuda_fail:
    nf_fail("bandwidth probe: %s", cudaGetErrorString(e));
done:
    for (int k = 0; k < n_ev; k++) cudaEventDestroy(ev[k]);
    free(ev);
    free(gbps);
    if (buf) cudaFree(buf);
    if (sink) cudaFree(sink);
    return rc;
}

extern "C" int nf_cuda_gemm_ceiling(int device, int n, int passes, double *tflops, double *best) {
    if (passes < 1) passes = 1;
    if (n < 256 || n % 256) return nf_fail("gemm ceiling: n = %d (a multiple of 256 expected)", n);
    if (nf_cuda_set_device(device) < 0) return -1;
    void *w = nullptr;
    float *x = nullptr, *y = nullptr;
    cudaStream_t s = nullptr;
    cudaEvent_t ev[2] = {nullptr, nullptr};
    double *t = (double *)nf_xmalloc((size_t)passes * sizeof *t);
    const size_t nn = (size_t)n * n;
    const nf_gemm_weights gw = {nullptr, NF_TYPE_BF16, n, n, 1, (size_t)n * 2, nn * 2};
    nf_gemm_weights g = gw;
    int rc = -1;
    cudaError_t e;
    if ((e = cudaMalloc(&w, nn * 2)) != cudaSuccess || (e = cudaMalloc((void **)&x, nn * 4)) != cudaSuccess ||
        (e = cudaMalloc((void **)&y, nn * 4)) != cudaSuccess || (e = cudaStreamCreate(&s)) != cudaSuccess ||
        (e = cudaEventCreate(&ev[0])) != cudaSuccess || (e = cudaEventCreate(&ev[1])) != cudaSuccess)
        goto cuda_fail;
    /* 0x3c bytes: bf16 0x3c3c and f32 0x3c3c3c3c are small finite normals (no denormal or zero fast paths) */
    if ((e = cudaMemset(w, 0x3c, nn * 2)) != cudaSuccess || (e = cudaMemset(x, 0x3c, nn * 4)) != cudaSuccess)
        goto cuda_fail;
    g.w = w;
    for (int k = -2; k < passes; k++) {
        if (k >= 0) cudaEventRecord(ev[0], s);
        const int r = nf_cuda_gemm(&g, x, n, 1, 1, nullptr, y, n, n, NF_GEMM_BF16, s);
        if (r != 0) {
            if (r > 0) nf_fail("gemm ceiling: the GEMM does not take a %dx%d bf16 product", n, n);
            goto done;
        }
        if (k < 0) continue;
        cudaEventRecord(ev[1], s);
        if ((e = cudaEventSynchronize(ev[1])) != cudaSuccess) goto cuda_fail;
        float ms = 0;
        if ((e = cudaEventElapsedTime(&ms, ev[0], ev[1])) != cudaSuccess) goto cuda_fail;
        t[k] = 2.0 * (double)n * n * n / (ms * 1e-3) / 1e12;
    }
    if ((e = cudaGetLastError()) != cudaSuccess) goto cuda_fail;
    qsort(t, (size_t)passes, sizeof *t, cmp_double);
    *tflops = t[passes / 2];
    *best = t[passes - 1];
    rc = 0;
    goto done;
cuda_fail:
    nf_fail("gemm ceiling: %s", cudaGetErrorString(e));
done:
    free(t);
    for (int k = 0; k < 2; k++)
        if (ev[k]) cudaEventDestroy(ev[k]);
    if (s) cudaStreamDestroy(s);
    if (w) cudaFree(w);
    if (x) cudaFree(x);
    if (y) cudaFree(y);
    return rc;
}
