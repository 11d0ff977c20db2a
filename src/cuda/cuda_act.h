/* cuda_act.h — the elementwise activations of the CUDA kernels (sigmoid, SiLU, the clamped SwiGLU), one definition
 * for every kernel that applies them: the SwiGLU kernel (cuda_norm.cu) and the decode GEMV that applies SwiGLU while
 * it stages its activation row (cuda_gemv.cu) must produce the same bits. Built without fast math (accurate expf). */
#ifndef NF_CUDA_ACT_H
#define NF_CUDA_ACT_H

#include <cuda_runtime.h>

__device__ __forceinline__ float nf_d_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float nf_d_silu(float x) { return x / (1.0f + expf(-x)); }
/* silu(min(g, lim)) * clamp(u, -lim, lim) (lim <= 0: no clamp), as src/cpu's SwiGLU */
__device__ __forceinline__ float nf_d_swiglu(float g, float u, float limit) {
    if (limit > 0.0f) {
        if (g > limit) g = limit;
        if (u > limit) u = limit;
        if (u < -limit) u = -limit;
    }
    return __fmul_rn(nf_d_silu(g), u);
}

#endif
