/* cuda_launch.h — how the CUDA backend launches its kernels: programmatic dependent launch (PDL, sm_90).
 *
 * Why: a decode step is ~1400 kernels on one stream, most of them a few microseconds long. With plain stream
 * order each kernel starts only after the previous one has fully drained, and the GPU then pays the launch, the
 * ramp-up of its CTAs and (for the weight-streaming GEMVs) the first DRAM round trip, with most SMs idle. With PDL
 * a kernel is launched while its predecessor still runs; it waits (griddepcontrol.wait) for the predecessor to
 * complete, with its memory visible, before it touches anything the predecessor may produce or read. Kernels that
 * stream weights issue their first weight loads before that wait (weights are never written during a forward), so
 * the copy of the next matrix overlaps the small kernels before it.
 *
 * The rules every kernel launched by nf_launch follows (NF_PDL_ENTER at the top does both):
 *  - nf_pdl_wait() before its first read of anything but the model's weights, and before its first global write
 *    (a predecessor may still read the buffer);
 *  - nf_pdl_release() (griddepcontrol.launch_dependents) after that wait: the successor may then be launched
 *    and wait in turn. Because each kernel waits for its predecessor's completion before completing itself, a
 *    kernel that passed its wait sees every earlier kernel of the stream complete, not just the last one.
 * Kernels launched without the attribute (nf_launch with PDL off, the bench kernels) see both as no-ops.
 * Copies, memsets and stream-ordered allocations between kernels keep plain stream order.
 *
 * NF_CUDA_PDL=off launches every kernel in plain stream order (for A/B runs and bisecting); the default, decode,
 * uses PDL in forwards of up to NF_CUDA_GEMV_MAX_VECTORS tokens only (on the H200 it made decode faster and
 * prefill slower: docs/benchmarks.md). */
#ifndef NF_CUDA_LAUNCH_H
#define NF_CUDA_LAUNCH_H

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>
#include <utility>

/* 1 when the next launches may use PDL (NF_CUDA_PDL and the current forward's size; cuda_launch.cu) */
int nf_cuda_pdl_enabled(void);
/* a forward of T tokens starts (NF_CUDA_PDL=decode uses PDL for decode-sized forwards only) */
void nf_cuda_pdl_forward(int T);

/* The A/B switches of kernel variants (NF_GEMV_STAGE_X, NF_CUDA_MLA_SPLIT,
 * NF_CUDA_MLA_TWOPASS, NF_CUDA_KDA_PREP): 1 unless the environment variable `name` equals `off_value`; read once
 * per call site, which passes its own cache (-1 = not read yet). */
static inline int nf_cuda_env_switch(int *cache, const char *name, const char *off_value) {
    if (*cache < 0) {
        const char *e = getenv(name);
        *cache = !(e && !strcmp(e, off_value));
    }
    return *cache;
}

/* The same switch read at every call, uncached, where a test flips it between calls in one process
 * (NF_CUDA_KDA_CHUNK, the chunked KDA's and the decode-once GEMM's switches) */
static inline int nf_cuda_env_now(const char *name, const char *off_value) {
    const char *e = getenv(name);
    return !(e && !strcmp(e, off_value));
}

/* A switch of more than two settings (NF_CUDA_HC_SINKHORN, NF_CUDA_MOE_PAIR, NF_CUDA_GEMM_BN128): i when the
 * environment variable `name` equals values[i] (i < n), else dflt; read once per call site (cache as above). */
static inline int nf_cuda_env_choice(int *cache, const char *name, const char *const *values, int n, int dflt) {
    if (*cache < 0) {
        const char *e = getenv(name);
        *cache = dflt;
        for (int i = 0; e && i < n; i++)
            if (!strcmp(e, values[i])) *cache = i;
    }
    return *cache;
}

__device__ __forceinline__ void nf_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void nf_pdl_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
/* the first statement of a kernel that reads no weights before its inputs */
#define NF_PDL_ENTER()                                                                                       \
    do {                                                                                                     \
        nf_pdl_wait();                                                                                       \
        nf_pdl_release();                                                                                    \
    } while (0)

/* k<<<grid, block, smem, stream>>>(args...), allowed to overlap its predecessor when PDL is on. Returns the
 * launch's error (also left for cudaGetLastError, as a <<<>>> launch does). */
template <typename... P, typename... A>
static inline cudaError_t nf_launch(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, A &&...args) {
#ifdef NF_CUEMU
    cuemu_cfg(grid, block, smem, s).run(k, std::forward<A>(args)...);
    return cudaSuccess;
#else
    if (nf_cuda_pdl_enabled()) {
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = grid;
        cfg.blockDim = block;
        cfg.dynamicSmemBytes = smem;
        cfg.stream = s;
        cfg.attrs = at;
        cfg.numAttrs = 1;
        return cudaLaunchKernelEx(&cfg, k, std::forward<A>(args)...);
    }
    k<<<grid, block, smem, s>>>(std::forward<A>(args)...);
    return cudaGetLastError();
#endif
}

#endif
