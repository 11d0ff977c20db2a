/* cuda_norm.cu — row-wise helpers of the CUDA backend: RMSNorm, LayerNorm, the clamped SwiGLU, sigmoid and
 * scaling. Reductions of squares and sums are accumulated in double and the final steps use the CPU's exact
 * operation order (src/cpu/vec.c: mean = (float)(ss/n), r = 1/sqrtf(mean+eps), out = w*(x*r)), so a norm
 * of the same input gives the same f32 result on both backends up to the rounding of the double sum. */
#include "cuda/cuda_internal.h"
#include "cuda/cuda_launch.h"

/* one block per row: out = w * (x * r), then times sigmoid(gate) when given (the KDA output gate, as
 * src/cpu/kda.c applies it after the norm) */
__global__ void rmsnorm_kernel(const float *x, int64_t ldx, int64_t n, float eps, const float *w, const float *gate,
                               int64_t ldg, float *out, int64_t ldo, int vec4) {
    NF_PDL_ENTER();
    __shared__ double sh[32];
    const float *xr = x + (size_t)blockIdx.x * ldx;
    const float *gr = gate ? gate + (size_t)blockIdx.x * ldg : nullptr;
    float *o = out + (size_t)blockIdx.x * ldo;
    const double ss = nf_d_block_sum(nf_d_row_sumsq_part(xr, n, vec4), sh);
    const float r = nf_d_rms_inv(ss, n, eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        float v = __fmul_rn(xr[i], r);
        if (w) v = __fmul_rn(w[i], v);
        if (gr) v = __fmul_rn(v, nf_d_sigmoid(gr[i]));
        o[i] = v;
    }
}

int nf_cuda_rmsnorm_gated_rows(nf_cuda *c, const float *x, int64_t ldx, int rows, int64_t n, float eps,
                               const float *w, const float *gate, int64_t ldg, float *out, int64_t ldo) {
    if (rows <= 0) return 0;
    const int vec4 = n % 4 == 0 && ldx % 4 == 0 && ((uintptr_t)x & 15) == 0;
    nf_launch(rmsnorm_kernel, rows, nf_cuda_row_threads(n), 0, c->stream, x, ldx, n, eps, w, gate, ldg, out, ldo, vec4);
    NF_LAUNCHED();
    return 0;
}

int nf_cuda_rmsnorm_rows(nf_cuda *c, const float *x, int64_t ldx, int rows, int64_t n, float eps, const float *w,
                         float *out, int64_t ldo) {
    return nf_cuda_rmsnorm_gated_rows(c, x, ldx, rows, n, eps, w, nullptr, 0, out, ldo);
}

__global__ void layernorm_kernel(const float *x, int64_t n, float eps, const float *w, const float *b, float *out) {
    NF_PDL_ENTER();
    __shared__ double sh[32];
    const float *xr = x + (size_t)blockIdx.x * n;
    float *o = out + (size_t)blockIdx.x * n;
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += xr[i];
    s = nf_d_block_sum(s, sh);
    const float mean = (float)(s / (double)n);
    double v = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const double d = (double)xr[i] - mean;
        v += d * d;
    }
    v = nf_d_block_sum(v, sh);
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
    nf_launch(layernorm_kernel, rows, nf_cuda_row_threads(n), 0, c->stream, x, n, eps, w, b, out);
    NF_LAUNCHED();
    return 0;
}

__global__ void swiglu_kernel(const float *g, const float *u, int64_t n, float limit, float *y) {
    NF_PDL_ENTER();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        y[i] = nf_d_swiglu(g[i], u[i], limit);
    }
}

static unsigned blocks_for(int64_t n) {
    int64_t b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

int nf_cuda_swiglu(nf_cuda *c, const float *g, const float *u, int64_t n, float limit, float *y) {
    if (n <= 0) return 0;
    nf_launch(swiglu_kernel, blocks_for(n), 256, 0, c->stream, g, u, n, limit, y);
    NF_LAUNCHED();
    return 0;
}

__global__ void sigmoid_kernel(float *x, int64_t n) {
    NF_PDL_ENTER();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = nf_d_sigmoid(x[i]);
}

int nf_cuda_sigmoid(nf_cuda *c, float *x, int64_t n) {
    if (n <= 0) return 0;
    nf_launch(sigmoid_kernel, blocks_for(n), 256, 0, c->stream, x, n);
    NF_LAUNCHED();
    return 0;
}

__global__ void scale_kernel(float *x, int64_t n, float s) {
    NF_PDL_ENTER();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = __fmul_rn(x[i], s);
}

int nf_cuda_scale(nf_cuda *c, float *x, int64_t n, float s) {
    if (n <= 0) return 0;
    nf_launch(scale_kernel, blocks_for(n), 256, 0, c->stream, x, n, s);
    NF_LAUNCHED();
    return 0;
}
