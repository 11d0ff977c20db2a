/* cuda_matmul.cu — the stored weight formats on the GPU: the general matrix × activations product of the CUDA
 * backend, the activation quantizers it needs, and row dequantization (the embedding lookup).
 *
 * Same arithmetic as the CPU reference (src/cpu/matmul.c with src/formats): F32/F16/BF16 weights are widened
 * and dotted in f32 against the f32 activation; quantized weights are dotted against the activation quantized
 * to their dot partner (Q8_0 for Q8_0, Q8_K for the K-quants and IQ2_XXS) by kernels that reproduce the CPU
 * quantizers bit for bit; each block's integer sums are exact and its float scale step is written as the
 * scalar C dot does (no contraction), so the two backends differ only by the order in which the per-block
 * values are added.
 *
 * Work split (the correctness baseline; speed is later work): one warp per (output row, activation vector);
 * float rows are read element-wise by the lanes, quantized rows one block per lane. Prefill (T > 1) is the same
 * kernel over T vectors. The "ex" form covers every product of the forward: per-head matrices of a 3-D tensor
 * (matrix = vector % heads) and routed experts (matrix = ids[vector], the activation row shared by the k
 * slots of a token). */
#include <cuda_fp16.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda/backend_cuda.h"
#include "cuda/cuda_internal.h"

/* NF_CUDA_QDOT=f32 (diagnostic): dot quantized weights against the f32 activation (dequantize-and-dot)
 * instead of the CPU's quantized activation. */
static int g_qdot_f32 = -1;
/* NF_CUDA_SYNC=1 (diagnostic): wait for the stream after every product */
static int g_sync = 0;

extern "C" {
extern const uint64_t nf_iq2xxs_grid[256];
extern const uint8_t nf_iq2_ksigns[128];
}

__constant__ uint64_t c_iq2_grid[256];
__constant__ uint8_t c_iq2_signs[128];

int nf_cuda_formats_init(void) {
    if (g_qdot_f32 < 0) {
        const char *e = getenv("NF_CUDA_QDOT");
        g_qdot_f32 = e && !strcmp(e, "f32");
        g_sync = getenv("NF_CUDA_SYNC") != nullptr;
    }
    NF_CU(cudaMemcpyToSymbol(c_iq2_grid, nf_iq2xxs_grid, sizeof(c_iq2_grid)));
    NF_CU(cudaMemcpyToSymbol(c_iq2_signs, nf_iq2_ksigns, sizeof(c_iq2_signs)));
    return 0;
}

int nf_cuda_mat_supported(uint32_t type) {
    switch (type) {
    case NF_TYPE_F32: case NF_TYPE_F16: case NF_TYPE_BF16: case NF_TYPE_Q8_0:
    case NF_TYPE_Q4_K: case NF_TYPE_Q6_K: case NF_TYPE_Q2_K: case NF_TYPE_IQ2_XXS:
        return 1;
    default:
        return 0;
    }
}

nf_cuda_mat nf_cuda_mat_of(nf_cuda *c, const nf_tensor *t) {
    nf_cuda_mat m;
    m.w = nf_cuda_dptr(c, t);
    m.type = t->type;
    m.n = t->ne[0];
    m.rows = t->ne[1];
    m.row_bytes = nf_row_bytes(t->type, t->ne[0]);
    m.slice_bytes = m.row_bytes * (size_t)m.rows;
    return m;
}

/* ---- byte-level loads (quantized blocks are only 2-byte aligned) ---- */
__device__ __forceinline__ float ld_h(const uint8_t *p) {
    return __half2float(__ushort_as_half((unsigned short)(p[0] | (p[1] << 8))));
}
__device__ __forceinline__ float ld_f(const uint8_t *p) {
    return __uint_as_float((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24));
}
__device__ __forceinline__ uint32_t ld_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
__device__ __forceinline__ int ld_i16(const uint8_t *p) { return (int)(int16_t)(uint16_t)(p[0] | (p[1] << 8)); }

__device__ __forceinline__ void scale_min_k4(int j, const uint8_t *q, int &sc, int &m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* ---- element i of a row, dequantized (same expressions as src/formats' dequantizers) ---- */
template <int TY> __device__ __forceinline__ float deq_elem(const uint8_t *row, int64_t i);
template <> __device__ __forceinline__ float deq_elem<NF_TYPE_F32>(const uint8_t *row, int64_t i) {
    return ((const float *)row)[i];
}
template <> __device__ __forceinline__ float deq_elem<NF_TYPE_F16>(const uint8_t *row, int64_t i) {
    return __half2float(((const __half *)row)[i]);
}
template <> __device__ __forceinline__ float deq_elem<NF_TYPE_BF16>(const uint8_t *row, int64_t i) {
    return __uint_as_float((uint32_t)((const uint16_t *)row)[i] << 16);
}
template <> __device__ __forceinline__ float deq_elem<NF_TYPE_Q8_0>(const uint8_t *row, int64_t i) {
    const uint8_t *b = row + (size_t)(i / 32) * 34;
    return __fmul_rn((float)(int8_t)b[2 + i % 32], ld_h(b));
}
template <> __device__ __forceinline__ float deq_elem<NF_TYPE_Q4_K>(const uint8_t *row, int64_t i) {
    const uint8_t *b = row + (size_t)(i / 256) * 144;
    const int e = (int)(i % 256), J = e / 32, l = e % 32;
    int sc, m;
    scale_min_k4(J, b + 4, sc, m);
    const int q = (b[16 + 32 * (J / 2) + l] >> (4 * (J & 1))) & 0xF;
    return __fsub_rn(__fmul_rn(__fmul_rn(ld_h(b), (float)sc), (float)q), __fmul_rn(ld_h(b + 2), (float)m));
}
template <> __device__ __forceinline__ float deq_elem<NF_TYPE_Q2_K>(const uint8_t *row, int64_t i) {
    const uint8_t *b = row + (size_t)(i / 256) * 84;
    const int e = (int)(i % 256), n = e / 128, k = (e % 128) / 32, l = e % 32;
    const int q = (b[16 + 32 * n + l] >> (2 * k)) & 3;
    const uint8_t sc = b[e / 16];
    return __fsub_rn(__fmul_rn(__fmul_rn(ld_h(b + 80), (float)(sc & 0xF)), (float)q),
                     __fmul_rn(ld_h(b + 82), (float)(sc >> 4)));
}
__device__ __forceinline__ int q6_value(const uint8_t *b, int e) {
    const int n = e / 128, r = e % 128, qq = r / 32, l = r % 32;
    const uint8_t lo = b[64 * n + l + 32 * (qq & 1)];
    const int nib = qq >= 2 ? lo >> 4 : lo & 0xF;
    const int hi = (b[128 + 32 * n + l] >> (2 * qq)) & 3;
    return (nib | (hi << 4)) - 32;
}
template <> __device__ __forceinline__ float deq_elem<NF_TYPE_Q6_K>(const uint8_t *row, int64_t i) {
    const uint8_t *b = row + (size_t)(i / 256) * 210;
    const int e = (int)(i % 256);
    return __fmul_rn(__fmul_rn(ld_h(b + 208), (float)(int8_t)b[192 + e / 16]), (float)q6_value(b, e));
}
template <> __device__ __forceinline__ float deq_elem<NF_TYPE_IQ2_XXS>(const uint8_t *row, int64_t i) {
    const uint8_t *b = row + (size_t)(i / 256) * 66;
    const int e = (int)(i % 256), ib = e / 32, l = (e % 32) / 8, k = e % 8;
    const uint32_t ga = ld_u32(b + 2 + 8 * ib), s = ld_u32(b + 2 + 8 * ib + 4);
    const float db = __fmul_rn(__fmul_rn(ld_h(b), 0.5f + (float)(s >> 28)), 0.25f);
    const float g = (float)((c_iq2_grid[(ga >> (8 * l)) & 0xFF] >> (8 * k)) & 0xFF);
    const int neg = (c_iq2_signs[(s >> (7 * l)) & 127] >> k) & 1;
    return __fmul_rn(db, neg ? -g : g);
}

/* ---- one block of a quantized row against the quantized activation (bytes xb of the matching block) ---- */
template <int TY> __device__ __forceinline__ float block_dot(const uint8_t *row, int64_t b, const uint8_t *xq);

template <> __device__ __forceinline__ float block_dot<NF_TYPE_Q8_0>(const uint8_t *row, int64_t b, const uint8_t *xq) {
    const uint8_t *a = row + (size_t)b * 34, *x = xq + (size_t)b * 34;
    int s = 0;
#pragma unroll 8
    for (int j = 0; j < 32; j++) s += (int)(int8_t)a[2 + j] * (int)(int8_t)x[2 + j];
    return __fmul_rn((float)s, __fmul_rn(ld_h(a), ld_h(x)));
}

template <> __device__ __forceinline__ float block_dot<NF_TYPE_Q4_K>(const uint8_t *row, int64_t b, const uint8_t *xq) {
    const uint8_t *a = row + (size_t)b * 144, *xb = xq + (size_t)b * 292;
    const int8_t *q8 = (const int8_t *)(xb + 4);
    int sumi = 0, summ = 0;
    for (int J = 0; J < 8; J++) {
        int sc, m;
        scale_min_k4(J, a + 4, sc, m);
        const uint8_t *q = a + 16 + 32 * (J / 2);
        const int sh = 4 * (J & 1);
        int s = 0;
#pragma unroll 8
        for (int l = 0; l < 32; l++) s += ((q[l] >> sh) & 0xF) * (int)q8[32 * J + l];
        sumi += sc * s;
        summ += m * (ld_i16(xb + 260 + 4 * J) + ld_i16(xb + 262 + 4 * J));
    }
    const float dy = ld_f(xb), d = __fmul_rn(ld_h(a), dy);
    return __fsub_rn(__fmul_rn(d, (float)sumi), __fmul_rn(__fmul_rn(ld_h(a + 2), dy), (float)summ));
}

template <> __device__ __forceinline__ float block_dot<NF_TYPE_Q2_K>(const uint8_t *row, int64_t b, const uint8_t *xq) {
    const uint8_t *a = row + (size_t)b * 84, *xb = xq + (size_t)b * 292;
    const int8_t *q8 = (const int8_t *)(xb + 4);
    int sumi = 0, summ = 0;
    for (int j = 0; j < 16; j++) {
        const int e0 = 16 * j, n = e0 / 128, k = (e0 % 128) / 32, l0 = e0 % 32;
        const uint8_t *q = a + 16 + 32 * n + l0;
        int s = 0;
#pragma unroll
        for (int i = 0; i < 16; i++) s += ((q[i] >> (2 * k)) & 3) * (int)q8[e0 + i];
        sumi += (a[j] & 0xF) * s;
        summ += (a[j] >> 4) * ld_i16(xb + 260 + 2 * j);
    }
    const float dy = ld_f(xb), d = __fmul_rn(ld_h(a + 80), dy);
    return __fsub_rn(__fmul_rn(d, (float)sumi), __fmul_rn(__fmul_rn(ld_h(a + 82), dy), (float)summ));
}

template <> __device__ __forceinline__ float block_dot<NF_TYPE_Q6_K>(const uint8_t *row, int64_t b, const uint8_t *xq) {
    const uint8_t *a = row + (size_t)b * 210, *xb = xq + (size_t)b * 292;
    const int8_t *q8 = (const int8_t *)(xb + 4);
    int sumi = 0;
    for (int j = 0; j < 16; j++) {
        int s = 0;
#pragma unroll
        for (int i = 0; i < 16; i++) s += q6_value(a, 16 * j + i) * (int)q8[16 * j + i];
        sumi += (int)(int8_t)a[192 + j] * s;
    }
    return __fmul_rn(__fmul_rn(ld_h(a + 208), ld_f(xb)), (float)sumi);
}

template <>
__device__ __forceinline__ float block_dot<NF_TYPE_IQ2_XXS>(const uint8_t *row, int64_t b, const uint8_t *xq) {
    const uint8_t *a = row + (size_t)b * 66, *xb = xq + (size_t)b * 292;
    const int8_t *q8 = (const int8_t *)(xb + 4);
    int bsum = 0;
    for (int ib = 0; ib < 8; ib++) {
        const uint32_t ga = ld_u32(a + 2 + 8 * ib), s = ld_u32(a + 2 + 8 * ib + 4);
        int acc = 0;
        for (int l = 0; l < 4; l++) {
            const uint64_t g = c_iq2_grid[(ga >> (8 * l)) & 0xFF];
            const uint8_t sg = c_iq2_signs[(s >> (7 * l)) & 127];
#pragma unroll
            for (int k = 0; k < 8; k++) {
                int v = (int)((g >> (8 * k)) & 0xFF);
                if ((sg >> k) & 1) v = -v;
                acc += v * (int)q8[32 * ib + 8 * l + k];
            }
        }
        bsum += (int)(2 * (s >> 28) + 1) * acc;
    }
    /* the CPU multiplies the row total by 0.125; a power of two commutes with the sum */
    return __fmul_rn(__fmul_rn(__fmul_rn(ld_h(a), ld_f(xb)), (float)bsum), 0.125f);
}

/* ---- the product kernel ---- */
struct mm_args {
    const uint8_t *w;
    size_t row_bytes, slice_bytes;
    int64_t rows, n;
    const float *x;         /* float weights */
    int64_t ldx;
    const uint8_t *xq;      /* quantized weights: nx rows of xq_bytes */
    size_t xq_bytes;
    int xdiv, smod;
    const int32_t *ids;
    float *y;
    int64_t ldy;
    int nvec;
};

#define MM_WARPS 4

template <int TY, bool QUANT>
__global__ void __launch_bounds__(32 * MM_WARPS) mm_kernel(mm_args a) {
    const int64_t r = (int64_t)blockIdx.x * MM_WARPS + threadIdx.y;
    if (r >= a.rows) return;
    const int lane = threadIdx.x;
    for (int v = blockIdx.y; v < a.nvec; v += gridDim.y) {
        const int s = a.ids ? a.ids[v] : v % a.smod;
        const uint8_t *row = a.w + (size_t)s * a.slice_bytes + (size_t)r * a.row_bytes;
        const int xr = v / a.xdiv;
        float acc = 0.0f;
        if constexpr (QUANT) {
            const int64_t nb = a.n / (TY == NF_TYPE_Q8_0 ? 32 : 256);
            const uint8_t *xq = a.xq + (size_t)xr * a.xq_bytes;
            for (int64_t b = lane; b < nb; b += 32) acc += block_dot<TY>(row, b, xq);
        } else {
            const float *x = a.x + (size_t)xr * a.ldx;
            for (int64_t i = lane; i < a.n; i += 32) acc += deq_elem<TY>(row, i) * x[i];
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0) a.y[(size_t)v * a.ldy + r] = acc;
    }
}

/* ---- activation quantizers (bit-identical to src/formats/q8_0.c and q8_k.c) ---- */
__global__ void quant_q8_0_kernel(const float *x, int64_t ldx, uint8_t *xq, size_t rb) {
    const int b = blockIdx.x, r = blockIdx.y, l = threadIdx.x;
    const float v = x[(size_t)r * ldx + (size_t)b * 32 + l];
    float amax = fabsf(v);
    if (!(amax == amax)) amax = 0.0f; /* the CPU's `a > amax` never takes a nan */
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t *o = xq + (size_t)r * rb + (size_t)b * 34;
    if (l == 0) {
        /* the f16 bits go through a 32-bit integer register: nvcc 13.0's ptxas compiled a byte store of the
         * converted half as a numeric F2I.U8 conversion (seen in SASS; the low scale byte came out 0 on the H200) */
        unsigned int h = (unsigned int)__half_as_ushort(__float2half_rn(d));
        asm volatile("" : "+r"(h));
        o[0] = (uint8_t)(h & 0xffu);
        o[1] = (uint8_t)(h >> 8);
    }
    const float q = roundf(__fmul_rn(v, id));
    int qi = q >= 127.0f ? 127 : q <= -128.0f ? -128 : (q == q ? (int)q : 0);
    o[2 + l] = (uint8_t)(int8_t)qi;
}

__global__ void quant_q8_k_kernel(const float *x, int64_t ldx, uint8_t *xq, size_t rb) {
    __shared__ float s_a[256];
    __shared__ int s_i[256];
    __shared__ int8_t s_q[256];
    const int b = blockIdx.x, r = blockIdx.y, l = threadIdx.x;
    const float *src = x + (size_t)r * ldx + (size_t)b * 256;
    const float v = src[l];
    float a = fabsf(v);
    if (!(a == a)) a = -1.0f;
    s_a[l] = a;
    s_i[l] = l;
    __syncthreads();
    /* first index of the largest |x| (the CPU's strict `>` scan) */
    for (int st = 128; st > 0; st >>= 1) {
        if (l < st) {
            float a2 = s_a[l + st];
            int i2 = s_i[l + st];
            if (a2 > s_a[l] || (a2 == s_a[l] && i2 < s_i[l])) {
                s_a[l] = a2;
                s_i[l] = i2;
            }
        }
        __syncthreads();
    }
    uint8_t *o = xq + (size_t)r * rb + (size_t)b * 292;
    const float amax = s_a[0] > 0.0f ? s_a[0] : 0.0f;
    if (amax == 0.0f) {
        for (int i = l; i < 292; i += 256) o[i] = 0;
        return;
    }
    const float iscale = -127.0f / src[s_i[0]];
    int q = __float2int_rn(__fmul_rn(iscale, v));
    q = q < -128 ? -128 : q > 127 ? 127 : q;
    s_q[l] = (int8_t)q;
    o[4 + l] = (uint8_t)(int8_t)q;
    __syncthreads();
    if (l < 16) {
        int s = 0;
        for (int j = 0; j < 16; j++) s += s_q[16 * l + j];
        const uint16_t u = (uint16_t)(int16_t)s;
        o[260 + 2 * l] = (uint8_t)(u & 0xff);
        o[261 + 2 * l] = (uint8_t)(u >> 8);
    }
    if (l == 0) {
        const float d = 1.0f / iscale;
        const uint32_t u = __float_as_uint(d);
        o[0] = (uint8_t)u;
        o[1] = (uint8_t)(u >> 8);
        o[2] = (uint8_t)(u >> 16);
        o[3] = (uint8_t)(u >> 24);
    }
}

static unsigned grid_y(int nvec) { return (unsigned)(nvec < 65535 ? nvec : 65535); }

template <int TY, bool QUANT> static void launch_mm(const mm_args &a, cudaStream_t s) {
    dim3 block(32, MM_WARPS), grid((unsigned)((a.rows + MM_WARPS - 1) / MM_WARPS), grid_y(a.nvec));
    mm_kernel<TY, QUANT><<<grid, block, 0, s>>>(a);
}

int nf_cuda_matmul_ex(nf_cuda *c, const nf_cuda_mat *w, const float *x, int64_t ldx, int xdiv, int smod,
                      const int32_t *ids, float *y, int64_t ldy, int nvec) {
    if (nvec <= 0 || w->rows <= 0) return 0;
    if (!w->w) return nf_fail("cuda matmul: missing weight");
    const nf_type_info *ti = nf_type_get(w->type);
    if (!nf_cuda_mat_supported(w->type)) return nf_fail("cuda matmul: type %s unsupported", ti->name ? ti->name : "?");
    if (w->n % ti->block_size) return nf_fail("cuda matmul: row length %lld", (long long)w->n);
    mm_args a;
    a.w = w->w;
    a.row_bytes = w->row_bytes;
    a.slice_bytes = w->slice_bytes;
    a.rows = w->rows;
    a.n = w->n;
    a.x = x;
    a.ldx = ldx;
    a.xq = nullptr;
    a.xq_bytes = 0;
    a.xdiv = xdiv > 0 ? xdiv : 1;
    a.smod = smod > 0 ? smod : 1;
    a.ids = ids;
    a.y = y;
    a.ldy = ldy;
    a.nvec = nvec;
    cudaStream_t s = c->stream;
    nf_cuda_scratch sc(c);
    const bool quant = ti->quantized && g_qdot_f32 != 1;
    if (quant) {
        const int nx = (nvec + a.xdiv - 1) / a.xdiv;
        const uint32_t at = nf_vec_dot_type(w->type);
        a.xq_bytes = nf_row_bytes(at, w->n);
        uint8_t *xq = sc.get<uint8_t>(a.xq_bytes * (size_t)nx);
        if (!xq) return nf_fail("cuda matmul: out of device memory");
        a.xq = xq;
        if (at == NF_TYPE_Q8_0) {
            quant_q8_0_kernel<<<dim3((unsigned)(w->n / 32), (unsigned)nx), 32, 0, s>>>(x, ldx, xq, a.xq_bytes);
        } else {
            quant_q8_k_kernel<<<dim3((unsigned)(w->n / 256), (unsigned)nx), 256, 0, s>>>(x, ldx, xq, a.xq_bytes);
        }
        NF_LAUNCHED();
        if (g_sync) NF_CU(cudaStreamSynchronize(s));
    }
    if (!quant && ti->quantized) {
        switch (w->type) {
        case NF_TYPE_Q8_0: launch_mm<NF_TYPE_Q8_0, false>(a, s); break;
        case NF_TYPE_Q4_K: launch_mm<NF_TYPE_Q4_K, false>(a, s); break;
        case NF_TYPE_Q6_K: launch_mm<NF_TYPE_Q6_K, false>(a, s); break;
        case NF_TYPE_Q2_K: launch_mm<NF_TYPE_Q2_K, false>(a, s); break;
        case NF_TYPE_IQ2_XXS: launch_mm<NF_TYPE_IQ2_XXS, false>(a, s); break;
        }
        NF_LAUNCHED();
        return 0;
    }
    switch (w->type) {
    case NF_TYPE_F32: launch_mm<NF_TYPE_F32, false>(a, s); break;
    case NF_TYPE_F16: launch_mm<NF_TYPE_F16, false>(a, s); break;
    case NF_TYPE_BF16: launch_mm<NF_TYPE_BF16, false>(a, s); break;
    case NF_TYPE_Q8_0: launch_mm<NF_TYPE_Q8_0, true>(a, s); break;
    case NF_TYPE_Q4_K: launch_mm<NF_TYPE_Q4_K, true>(a, s); break;
    case NF_TYPE_Q6_K: launch_mm<NF_TYPE_Q6_K, true>(a, s); break;
    case NF_TYPE_Q2_K: launch_mm<NF_TYPE_Q2_K, true>(a, s); break;
    case NF_TYPE_IQ2_XXS: launch_mm<NF_TYPE_IQ2_XXS, true>(a, s); break;
    }
    NF_LAUNCHED();
    if (g_sync) NF_CU(cudaStreamSynchronize(s));
    return 0;
}

/* ---- embedding rows ---- */
template <int TY>
__global__ void embed_kernel(const uint8_t *w, size_t row_bytes, int64_t n, const int32_t *tokens, int copies, float *X) {
    const int t = blockIdx.x;
    const uint8_t *row = w + (size_t)tokens[t] * row_bytes;
    float *xt = X + (size_t)t * copies * n;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = deq_elem<TY>(row, i);
        for (int s = 0; s < copies; s++) xt[(size_t)s * n + i] = v;
    }
}

int nf_cuda_embed_rows(nf_cuda *c, const nf_cuda_mat *w, const int32_t *tokens, int T, int copies, float *X) {
    if (T <= 0) return 0;
    cudaStream_t s = c->stream;
    const unsigned g = (unsigned)T;
    switch (w->type) {
    case NF_TYPE_F32: embed_kernel<NF_TYPE_F32><<<g, 256, 0, s>>>(w->w, w->row_bytes, w->n, tokens, copies, X); break;
    case NF_TYPE_F16: embed_kernel<NF_TYPE_F16><<<g, 256, 0, s>>>(w->w, w->row_bytes, w->n, tokens, copies, X); break;
    case NF_TYPE_BF16: embed_kernel<NF_TYPE_BF16><<<g, 256, 0, s>>>(w->w, w->row_bytes, w->n, tokens, copies, X); break;
    case NF_TYPE_Q8_0: embed_kernel<NF_TYPE_Q8_0><<<g, 256, 0, s>>>(w->w, w->row_bytes, w->n, tokens, copies, X); break;
    case NF_TYPE_Q4_K: embed_kernel<NF_TYPE_Q4_K><<<g, 256, 0, s>>>(w->w, w->row_bytes, w->n, tokens, copies, X); break;
    case NF_TYPE_Q6_K: embed_kernel<NF_TYPE_Q6_K><<<g, 256, 0, s>>>(w->w, w->row_bytes, w->n, tokens, copies, X); break;
    case NF_TYPE_Q2_K: embed_kernel<NF_TYPE_Q2_K><<<g, 256, 0, s>>>(w->w, w->row_bytes, w->n, tokens, copies, X); break;
    case NF_TYPE_IQ2_XXS: embed_kernel<NF_TYPE_IQ2_XXS><<<g, 256, 0, s>>>(w->w, w->row_bytes, w->n, tokens, copies, X); break;
    default: return nf_fail("cuda embed: type %u unsupported", w->type);
    }
    NF_LAUNCHED();
    return 0;
}

/* ---- self-test (diagnostic): GPU activation quantization and quantized products vs the CPU formats code ---- */
extern "C" int nf_cuda_selftest(void) {
    if (nf_cuda_formats_init() < 0) return 1;
    nf_cuda c;
    memset(&c, 0, sizeof c);
    c.stream = 0;
    const uint32_t types[] = {NF_TYPE_Q8_0, NF_TYPE_Q4_K, NF_TYPE_Q2_K, NF_TYPE_IQ2_XXS};
    const int64_t n = 512, rows = 64;
    const int T = 3;
    int fails = 0;
    srand(7);
    for (int ti = 0; ti < 4; ti++) {
        const uint32_t type = types[ti], at = nf_vec_dot_type(type);
        const size_t rb = nf_row_bytes(type, n), xb = nf_row_bytes(at, n);
        float *w = (float *)malloc(n * sizeof(float)), *x = (float *)malloc(T * n * sizeof(float)),
              *y = (float *)malloc(T * rows * sizeof(float));
        uint8_t *W = (uint8_t *)malloc(rb * rows), *xq = (uint8_t *)malloc(xb * T), *gq = (uint8_t *)malloc(xb * T);
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t i = 0; i < n; i++) w[i] = (float)((rand() % 2001) - 1000) * 1e-4f;
            nf_quantize(type, w, W + r * rb, n, n, NULL);
        }
        for (int64_t i = 0; i < T * n; i++) x[i] = (float)((rand() % 2001) - 1000) * 1e-3f;
        for (int t = 0; t < T; t++) nf_quantize_activation(type, x + t * n, xq + t * xb, n);
        uint8_t *dW, *dq, *dq2;
        float *dx, *dy;
        cudaMalloc((void **)&dW, rb * rows);
        cudaMalloc((void **)&dq, xb * T);
        cudaMalloc((void **)&dq2, xb * T);
        cudaMalloc((void **)&dx, T * n * sizeof(float));
        cudaMalloc((void **)&dy, T * rows * sizeof(float));
        cudaMemcpy(dW, W, rb * rows, cudaMemcpyHostToDevice);
        cudaMemcpy(dx, x, T * n * sizeof(float), cudaMemcpyHostToDevice);
        cudaMemcpy(dq2, xq, xb * T, cudaMemcpyHostToDevice);
        if (at == NF_TYPE_Q8_0) quant_q8_0_kernel<<<dim3((unsigned)(n / 32), T), 32>>>(dx, n, dq, xb);
        else quant_q8_k_kernel<<<dim3((unsigned)(n / 256), T), 256>>>(dx, n, dq, xb);
        cudaError_t e = cudaDeviceSynchronize();
        cudaMemcpy(gq, dq, xb * T, cudaMemcpyDeviceToHost);
        int bad = 0, first = -1;
        for (size_t i = 0; i < xb * T; i++)
            if (gq[i] != xq[i]) {
                if (first < 0) first = (int)i;
                bad++;
            }
        printf("selftest %-8s quantize: %s, %d of %zu bytes differ", nf_type_get(type)->name, cudaGetErrorString(e), bad, xb * T);
        if (first >= 0) printf(" (first at %d: gpu %u cpu %u)", first, gq[first], xq[first]);
        printf("\n");
        /* products: the backend's path, and the product kernel alone on the CPU's quantized activation */
        nf_cuda_mat m;
        m.w = dW;
        m.type = type;
        m.n = n;
        m.rows = rows;
        m.row_bytes = rb;
        m.slice_bytes = rb * rows;
        for (int variant = 0; variant < 2; variant++) {
            cudaMemset(dy, 0xff, T * rows * sizeof(float));
            if (variant == 0) {
                nf_cuda_matmul(&c, &m, dx, T, n, dy, rows);
            } else {
                mm_args a;
                memset(&a, 0, sizeof a);
                a.w = dW; a.row_bytes = rb; a.slice_bytes = rb * rows; a.rows = rows; a.n = n; a.x = dx; a.ldx = n;
                a.xq = dq2; a.xq_bytes = xb; a.xdiv = 1; a.smod = 1; a.ids = nullptr; a.y = dy; a.ldy = rows; a.nvec = T;
                switch (type) {
                case NF_TYPE_Q8_0: launch_mm<NF_TYPE_Q8_0, true>(a, 0); break;
                case NF_TYPE_Q4_K: launch_mm<NF_TYPE_Q4_K, true>(a, 0); break;
                case NF_TYPE_Q2_K: launch_mm<NF_TYPE_Q2_K, true>(a, 0); break;
                case NF_TYPE_IQ2_XXS: launch_mm<NF_TYPE_IQ2_XXS, true>(a, 0); break;
                }
            }
            e = cudaDeviceSynchronize();
            cudaMemcpy(y, dy, T * rows * sizeof(float), cudaMemcpyDeviceToHost);
            double worst = 0;
            int wt = 0, wr = 0;
            for (int t = 0; t < T; t++)
                for (int64_t r = 0; r < rows; r++) {
                    float ref = nf_vec_dot(type, n, W + r * rb, xq + t * xb);
                    double err = fabs((double)y[t * rows + r] - ref) / (fabs(ref) + 1e-3);
                    if (!(err <= worst)) { worst = isnan(err) ? INFINITY : err; wt = t; wr = (int)r; }
                }
            float ref = nf_vec_dot(type, n, W + wr * rb, xq + wt * xb);
            printf("selftest %-8s %s: %s, max rel err %.3g (t %d row %d: gpu %.6g cpu %.6g)\n", nf_type_get(type)->name,
                   variant ? "product kernel on CPU-quantized x" : "backend matmul", cudaGetErrorString(e), worst, wt, wr,
                   y[wt * rows + wr], ref);
            fails += !(worst < 1e-4);
        }
        fails += bad != 0;
        cudaFree(dW); cudaFree(dq); cudaFree(dq2); cudaFree(dx); cudaFree(dy);
        free(w); free(x); free(y); free(W); free(xq); free(gq);
    }
    return fails;
}
