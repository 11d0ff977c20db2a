/* cuda_norm.cu — row-wise helpers of the CUDA backend: RMSNorm, LayerNorm, the clamped SwiGLU, sigmoid and
 * scaling. Reductions of squares and sums are accumulated in double and the final steps use the CPU's exact
 * operation order (src/cpu/vec.c: mean = (float)(ss/n), r = 1/sqrtf(mean+eps), out = w*(x*r)), so a norm
 * of the same input gives the same f32 result on both backends up to the rounding of the double sum. */
#include "cuda/cuda_internal.h"

#define ROW_THREADS 256

__device__ double block_sum_d(double v, double *sh) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        double s = 0.0;
        for (int i = 0; i < (int)(blockDim.x / 32); i++) s += sh[i];
        sh[0] = s;
    }
    __syncthreads();
    return sh[0];
}

__global__ void rmsnorm_kernel(const float *x, int64_t ldx, int64_t n, float eps, const float *w, float *out,
                               int64_t ldo) {
    __shared__ double sh[32];
    const float *xr = x + (size_t)blockIdx.x * ldx;
    float *o = out + (size_t)blockIdx.x * ldo;
    double ss = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += (double)xr[i] * (double)xr[i];
    ss = block_sum_d(ss, sh);
    const float mean = (float)(ss / (double)n);
    const float r = 1.0f / sqrtf(__fadd_rn(mean, eps));
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = __fmul_rn(xr[i], r);
        o[i] = w ? __fmul_rn(w[i], v) : v;
    }
}

int nf_cuda_rmsnorm_rows(nf_cuda *c, const float *x, int64_t ldx, int rows, int64_t n, float eps, const float *w,
                         float *out, int64_t ldo) {
    if (rows <= 0) return 0;
    rmsnorm_kernel<<<rows, ROW_THREADS, 0, c->stream>>>(x, ldx, n, eps, w, out, ldo);
    NF_LAUNCHED();
    return 0;
}

__global__ void layernorm_kernel(const float *x, int64_t n, float eps, const float *w, const float *b, float *out) {
    __shared__ double sh[32];
    const float *xr = x + (size_t)blockIdx.x * n;
    float *o = out + (size_t)blockIdx.x * n;
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += xr[i];
    s = block_sum_d(s, sh);
    const float mean = (float)(s / (double)n);
    double v = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const double d = (double)xr[i] - mean;
        v += d * d;
    }
    v = block_sum_d(v, sh);
    const float var = (float)(v / (double)n);
    const float r = 1.0f / sqrtf(__fadd_rn(var, eps));
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        float y = __fmul_rn(__fsub_rn(xr[i], mean), r);
        if (w) y = __fmul_rn(y, w[i]);
        if (b) y = __fadd_rn(y, b[i]);
        o[i] = y;
    }
}

int nf_cuda_layernorm_rows(nf_cuda *c, const float *x, int rows, int64_t n, float eps, const float *w,
                           const float *b, float *out) {
    if (rows <= 0) return 0;
    layernorm_kernel<<<rows, ROW_THREADS, 0, c->stream>>>(x, n, eps, w, b, out);
    NF_LAUNCHED();
    return 0;
}

__global__ void swiglu_kernel(const float *g, const float *u, int64_t n, float limit, float *y) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float a = g[i], b = u[i];
        if (limit > 0.0f) {
            if (a > limit) a = limit;
            if (b > limit) b = limit;
            if (b < -limit) b = -limit;
        }
        y[i] = __fmul_rn(nf_d_silu(a), b);
    }
}

static unsigned blocks_for(int64_t n) {
    int64_t b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

int nf_cuda_swiglu(nf_cuda *c, const float *g, const float *u, int64_t n, float limit, float *y) {
    if (n <= 0) return 0;
    swiglu_kernel<<<blocks_for(n), 256, 0, c->stream>>>(g, u, n, limit, y);
    NF_LAUNCHED();
    return 0;
}

__global__ void sigmoid_kernel(float *x, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = nf_d_sigmoid(x[i]);
}

int nf_cuda_sigmoid(nf_cuda *c, float *x, int64_t n) {
    if (n <= 0) return 0;
    sigmoid_kernel<<<blocks_for(n), 256, 0, c->stream>>>(x, n);
    NF_LAUNCHED();
    return 0;
}

__global__ void scale_kernel(float *x, int64_t n, float s) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = __fmul_rn(x[i], s);
}

int nf_cuda_scale(nf_cuda *c, float *x, int64_t n, float s) {
    if (n <= 0) return 0;
    scale_kernel<<<blocks_for(n), 256, 0, c->stream>>>(x, n, s);
    NF_LAUNCHED();
    return 0;
}
