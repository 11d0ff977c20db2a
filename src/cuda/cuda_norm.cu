/* cuda_norm.cu — row-wise helpers of the CUDA backend: RMSNorm, LayerNorm, the clamped SwiGLU, sigmoid and
 * scaling. Reductions of squares and sums are accumulated in double and the final steps use the CPU's exact
 * operation order (src/cpu/vec.c: mean = (float)(ss/n), r = 1/sqrtf(mean+eps), out = w*(x*r)), so a norm
 * of the same input gives the same f32 result on both backends up to the rounding of the double sum. */
#include "cuda/cuda_internal.h"
#include "cuda/cuda_launch.h"

/* one block per row: out = w * (x * r), then times sigmoid(gate) when given (the KDA output gate, as
 * src/cpu/kda.c applies it after the norm) */
/* row4: the row held in registers, thread i owning float4 i (rows of up to 4 x blockDim values: every norm of
 * glm53's decode; 16-byte aligned x, w, gate, out and strides), x, w and gate in one round of loads; the same
 * operations in the same order as the loops below (the sum of squares as nf_d_row_sumsq_part's vec4 path with one
 * float4 per thread), so the same bits. Why: the loops below re-read x, w and gate after the reduction, one memory
 * round trip per group of elements (~5.4 us per launch on the H200). */
__device__ __forceinline__ void rmsnorm_row4(const float4 *x4, int64_t n, float eps, const float4 *w4, const float4 *g4,
                                             float4 *o4, double *sh) {
    const int i = threadIdx.x;
    const bool own = i < n / 4;
    const float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float4 v = own ? x4[i] : z, wv = own && w4 ? w4[i] : z, g = own && g4 ? g4[i] : z;
    const float r = nf_d_rms_inv(nf_d_block_sum(nf_d_sumsq_add4(0.0, v), sh), n, eps);
    if (!own) return;
    float e[4] = {v.x, v.y, v.z, v.w};
    const float we[4] = {wv.x, wv.y, wv.z, wv.w}, ge[4] = {g.x, g.y, g.z, g.w};
#pragma unroll
    for (int q = 0; q < 4; q++) {
        e[q] = __fmul_rn(e[q], r);
        if (w4) e[q] = __fmul_rn(we[q], e[q]);
        if (g4) e[q] = __fmul_rn(e[q], nf_d_sigmoid(ge[q]));
    }
    o4[i] = make_float4(e[0], e[1], e[2], e[3]);
}

/* __launch_bounds__(1024): a 4096-wide row runs on 1024 threads (nf_cuda_row_threads), which allows <= 64 registers
 * per thread */
__global__ void __launch_bounds__(1024) rmsnorm_kernel(const float *x, int64_t ldx, int64_t n, float eps,
                                                      const float *w, const float *gate, int64_t ldg, float *out,
                                                      int64_t ldo, int vec4, int row4) {
    if (row4) {
        NF_PDL_ENTER();
        __shared__ double sh4[32];
        rmsnorm_row4((const float4 *)(x + (size_t)blockIdx.x * ldx), n, eps, (const float4 *)w,
                     gate ? (const float4 *)(gate + (size_t)blockIdx.x * ldg) : nullptr,
                     (float4 *)(out + (size_t)blockIdx.x * ldo), sh4);
        return;
    }
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
    const unsigned threads = nf_cuda_row_threads(n);
    const int row4 = vec4 && n <= 4 * (int64_t)threads && ((uintptr_t)w & 15) == 0 && ((uintptr_t)gate & 15) == 0 &&
                     ldg % 4 == 0 && ((uintptr_t)out & 15) == 0 && ldo % 4 == 0 && nf_cuda_norm_row4_enabled();
    nf_launch(rmsnorm_kernel, rows, threads, 0, c->stream, x, ldx, n, eps, w, gate, ldg, out, ldo, vec4, row4);
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
