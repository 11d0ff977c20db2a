/* cuda_bench.h — what nf-bench needs from the GPU besides the backend: a description of the device for the log,
 * a device-wide synchronisation before each host clock read, the read-bandwidth probe that bw_fraction is
 * measured against and the GEMM ceiling that prefill_ceiling_fraction is measured against (same process, same
 * GPU, just before the sweep), and the free memory the run's budget is checked against. C interface; CUDA builds
 * only. */
#ifndef NF_CUDA_CUDA_BENCH_H
#define NF_CUDA_CUDA_BENCH_H

#include <stddef.h>

#include "bench/bw_probe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "NVIDIA H200, sm_90, 132 SMs, 143771 MiB, L2 60 MiB; CUDA driver 13.0, runtime 13.0" into buf. 0 or -1. */
int nf_cuda_describe(int device, char *buf, size_t n);
/* L2 size of the device in bytes (0 when unknown). */
size_t nf_cuda_l2_bytes(int device);
/* The dense bf16 tensor-core ceiling nf-bench compares its prefill with: the project's own tiled GEMM
 * (cuda_gemm.h, NF_GEMM_BF16: bf16 weights and activations on tensor cores, f32 accumulation) on an n x n bf16
 * matrix times n vectors, 2 warm-up calls then `passes` calls each timed with CUDA events; *tflops is the median
 * call at 2 n^3 FLOPs (*best the fastest). It is the ceiling of our kernel, not the chip's datasheet peak. 0, or -1
 * with nf_error() (out of memory, the product not handled). */
int nf_cuda_gemm_ceiling(int device, int n, int passes, double *tflops, double *best);
/* Free and total memory of the device in bytes (nf-bench's budget check, before anything is allocated). 0 or -1. */
int nf_cuda_mem_info(int device, size_t *free_bytes, size_t *total_bytes);
/* The high-water marks of the device's default memory pool since the process began, in bytes: used (live
 * stream-ordered allocations: a forward's activations and scratch) and reserved (what the pool holds from the
 * driver). The backend's weights and state are not pool allocations. 0 or -1 with nf_error(). */
int nf_cuda_pool_peak(int device, size_t *used_high, size_t *reserved_high);
/* Wait for all work on the device (every stream). 0 or -1 with nf_error(). */
int nf_cuda_device_sync(int device);
/* Stream `bytes` of device memory through a read kernel `passes` times after warm-up launches, each launch timed
 * with CUDA events; out->gbps is the median launch. 0, or -1 with nf_error() (out of memory, no device). */
int nf_cuda_read_bandwidth(int device, size_t bytes, int passes, nf_bw_probe *out);
/* Launch the probe's read kernel once over `bytes` (a multiple of 16) at the 16-byte-aligned device address p on
 * `stream` (a cudaStream_t; NULL: the default stream); sink is one device word. 0, or -1 with nf_error(). */
int nf_cuda_read_launch(const void *p, size_t bytes, unsigned *sink, void *stream);

#ifdef __cplusplus
}
#endif

#endif
