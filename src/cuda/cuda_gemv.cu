/* cuda_gemv.cu — baseline GEMV kernels for every stored weight format (see cuda_gemv.h).
 *
 * Work split: one warp per output row; the row is cut into 32-element chunks (a Q8_0 block, a K-quant
 * sub-block, an IQ2_XXS 32-group) and lane l takes chunks l, l+32, ... so consecutive lanes read neighbouring
 * bytes. Each chunk is decoded to f32 in registers and dotted with x (read through the read-only cache), the
 * warp reduces with shuffles. The block layouts are ggml's (docs/gguf.md, "Tensor formats"). */
#include "cuda/cuda_gemv.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

/* The formats table, the IQ2_XXS tables (src/formats/iq2_tables.c) and the error helper are C. */
extern "C" {
#include "formats/formats.h"

extern const uint64_t nf_iq2xxs_grid[256];
extern const uint8_t nf_iq2_ksigns[128];
int nf_fail(const char *fmt, ...);
}

#define WARPS_PER_BLOCK 4

__constant__ uint64_t d_iq2xxs_grid[256];
__constant__ uint8_t d_iq2_signs[128];

__device__ __forceinline__ float f16_at(const uint8_t *p) {
    __half h;
    memcpy(&h, p, 2);
    return __half2float(h);
}

/* ---- per-format dot of chunk `c` (32 elements) of a row with x[32*c ...] ---- */

template <int T> struct fmt;

template <> struct fmt<NF_TYPE_F32> {
    static __device__ __forceinline__ float chunk(const uint8_t *row, int c, const float *x) {
        const float4 *w = (const float4 *)(row + (size_t)c * 128);
        const float4 *xv = (const float4 *)(x + 32 * c);
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            float4 a = __ldg(w + i), b = __ldg(xv + i);
            s += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
        }
        return s;
    }
};

template <> struct fmt<NF_TYPE_F16> {
    static __device__ __forceinline__ float chunk(const uint8_t *row, int c, const float *x) {
        const uint4 *w = (const uint4 *)(row + (size_t)c * 64);
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint4 v = __ldg(w + i);
            const __half2 *h = (const __half2 *)&v;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float2 f = __half22float2(h[k]);
                s += f.x * __ldg(x + 32 * c + 8 * i + 2 * k) + f.y * __ldg(x + 32 * c + 8 * i + 2 * k + 1);
            }
        }
        return s;
    }
};

template <> struct fmt<NF_TYPE_BF16> {
    static __device__ __forceinline__ float chunk(const uint8_t *row, int c, const float *x) {
        const uint4 *w = (const uint4 *)(row + (size_t)c * 64);
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint4 v = __ldg(w + i);
            const uint32_t *u = (const uint32_t *)&v;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float lo = __uint_as_float(u[k] << 16), hi = __uint_as_float(u[k] & 0xffff0000u);
                s += lo * __ldg(x + 32 * c + 8 * i + 2 * k) + hi * __ldg(x + 32 * c + 8 * i + 2 * k + 1);
            }
        }
        return s;
    }
};

template <> struct fmt<NF_TYPE_Q8_0> {
    /* block: f16 d, int8 qs[32] (34 bytes: only 2-byte aligned) */
    static __device__ __forceinline__ float chunk(const uint8_t *row, int c, const float *x) {
        const uint8_t *b = row + (size_t)c * 34;
        const float *xs = x + 32 * c;
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < 16; i++) {
            uint16_t v = *(const uint16_t *)(b + 2 + 2 * i);
            s += (float)(int8_t)(v & 0xff) * __ldg(xs + 2 * i) + (float)(int8_t)(v >> 8) * __ldg(xs + 2 * i + 1);
        }
        return s * f16_at(b);
    }
};

__device__ __forceinline__ void q4k_scale_min(int j, const uint8_t *q, int &sc, int &m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

template <> struct fmt<NF_TYPE_Q4_K> {
    /* block (256): f16 d, f16 dmin, u8 scales[12], u8 qs[128]; sub-block j uses the low (j even) or high
     * (j odd) nibbles of qs[32*(j/2) ...]. */
    static __device__ __forceinline__ float chunk(const uint8_t *row, int c, const float *x) {
        const uint8_t *b = row + (size_t)(c >> 3) * 144;
        int j = c & 7, sc, m;
        q4k_scale_min(j, b + 4, sc, m);
        const uint4 *qs = (const uint4 *)(b + 16 + 32 * (j >> 1));
        const int shift = (j & 1) * 4;
        const float *xs = x + 32 * c;
        float s = 0.f, sx = 0.f;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            uint4 v = qs[i];
            const uint8_t *q = (const uint8_t *)&v;
#pragma unroll
            for (int k = 0; k < 16; k++) {
                float xv = __ldg(xs + 16 * i + k);
                s += (float)((q[k] >> shift) & 0xF) * xv;
                sx += xv;
            }
        }
        return f16_at(b) * sc * s - f16_at(b + 2) * m * sx;
    }
};

template <> struct fmt<NF_TYPE_Q6_K> {
    /* block (256): u8 ql[128], u8 qh[64], i8 scales[16], f16 d. Chunk j: half n = j/4, quarter k = j%4. */
    static __device__ __forceinline__ float chunk(const uint8_t *row, int c, const float *x) {
        const uint8_t *b = row + (size_t)(c >> 3) * 210;
        const int j = c & 7, n = j >> 2, k = j & 3;
        const uint8_t *ql = b + 64 * n + 32 * (k & 1);
        const uint8_t *qh = b + 128 + 32 * n;
        const int8_t *sc = (const int8_t *)(b + 192) + 8 * n + 2 * k;
        const int lshift = (k >> 1) * 4, hshift = 2 * k;
        const float *xs = x + 32 * c;
        float s0 = 0.f, s1 = 0.f;
#pragma unroll
        for (int l = 0; l < 32; l++) {
            int q = ((ql[l] >> lshift) & 0xF) | (((qh[l] >> hshift) & 3) << 4);
            float v = (float)(q - 32) * __ldg(xs + l);
            if (l < 16) s0 += v; else s1 += v;
        }
        return f16_at(b + 208) * (sc[0] * s0 + sc[1] * s1);
    }
};

template <> struct fmt<NF_TYPE_Q2_K> {
    /* block (256): u8 scales[16], u8 qs[64], f16 d, f16 dmin. Chunk j: half n = j/4, shift 2*(j%4);
     * its two 16-element halves use scales[8n + 2(j%4)] and the next one (low nibble scale, high nibble min). */
    static __device__ __forceinline__ float chunk(const uint8_t *row, int c, const float *x) {
        const uint8_t *b = row + (size_t)(c >> 3) * 84;
        const int j = c & 7, n = j >> 2, shift = 2 * (j & 3);
        const uint8_t *q = b + 16 + 32 * n;
        const uint8_t s0 = b[8 * n + 2 * (j & 3)], s1 = b[8 * n + 2 * (j & 3) + 1];
        const float *xs = x + 32 * c;
        float a0 = 0.f, a1 = 0.f, x0 = 0.f, x1 = 0.f;
#pragma unroll
        for (int l = 0; l < 16; l++) {
            float xv0 = __ldg(xs + l), xv1 = __ldg(xs + 16 + l);
            a0 += (float)((q[l] >> shift) & 3) * xv0;
            a1 += (float)((q[l + 16] >> shift) & 3) * xv1;
            x0 += xv0;
            x1 += xv1;
        }
        const float d = f16_at(b + 80), dmin = f16_at(b + 82);
        return d * ((s0 & 0xF) * a0 + (s1 & 0xF) * a1) - dmin * ((s0 >> 4) * x0 + (s1 >> 4) * x1);
    }
};

template <> struct fmt<NF_TYPE_IQ2_XXS> {
    /* block (256): f16 d, u16 qs[32]. Group g (32 values) = 8 bytes: 4 grid indices, then a u32 whose top 4
     * bits are the scale and whose 4 x 7 low bits index the sign patterns. */
    static __device__ __forceinline__ float chunk(const uint8_t *row, int c, const float *x) {
        const uint8_t *b = row + (size_t)(c >> 3) * 66;
        const int g = c & 7;
        const uint16_t *q16 = (const uint16_t *)(b + 2 + 8 * g);
        const uint32_t idx = (uint32_t)q16[0] | ((uint32_t)q16[1] << 16);
        const uint32_t aux = (uint32_t)q16[2] | ((uint32_t)q16[3] << 16);
        const float db = f16_at(b) * (0.5f + (float)(aux >> 28)) * 0.25f;
        const float *xs = x + 32 * c;
        float s = 0.f;
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const uint64_t grid = d_iq2xxs_grid[(idx >> (8 * l)) & 0xff];
            const uint8_t signs = d_iq2_signs[(aux >> (7 * l)) & 127];
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float w = (float)((grid >> (8 * k)) & 0xff);
                s += ((signs >> k) & 1 ? -w : w) * __ldg(xs + 8 * l + k);
            }
        }
        return db * s;
    }
};

template <int T>
__global__ void gemv_kernel(const uint8_t *__restrict__ w, const float *__restrict__ x, float *__restrict__ y,
                            int64_t rows, int chunks, size_t row_bytes) {
    const int64_t r = (int64_t)blockIdx.x * WARPS_PER_BLOCK + threadIdx.y;
    if (r >= rows) return;
    const uint8_t *row = w + (size_t)r * row_bytes;
    float s = 0.f;
    for (int c = threadIdx.x; c < chunks; c += 32) s += fmt<T>::chunk(row, c, x);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (threadIdx.x == 0) y[r] = s;
}

extern "C" int nf_cuda_gemv_init(void) {
    cudaError_t e = cudaMemcpyToSymbol(d_iq2xxs_grid, nf_iq2xxs_grid, sizeof(d_iq2xxs_grid));
    if (e == cudaSuccess) e = cudaMemcpyToSymbol(d_iq2_signs, nf_iq2_ksigns, sizeof(d_iq2_signs));
    if (e != cudaSuccess) return nf_fail("cuda: copying format tables: %s", cudaGetErrorString(e));
    return 0;
}

extern "C" int nf_cuda_gemv_supports(uint32_t type) {
    switch (type) {
    case NF_TYPE_F32: case NF_TYPE_F16: case NF_TYPE_BF16: case NF_TYPE_Q8_0:
    case NF_TYPE_Q4_K: case NF_TYPE_Q6_K: case NF_TYPE_Q2_K: case NF_TYPE_IQ2_XXS:
        return 1;
    default:
        return 0;
    }
}

extern "C" int nf_cuda_gemv(uint32_t type, const void *w, const float *x, float *y, int64_t rows, int64_t cols,
                            void *stream) {
    const size_t row_bytes = nf_row_bytes(type, cols);
    if (!nf_cuda_gemv_supports(type) || row_bytes == 0 || cols % 32)
        return nf_fail("cuda gemv: unsupported type %s or row length %lld", nf_type_get(type)->name ? nf_type_get(type)->name : "?",
                       (long long)cols);
    const dim3 block(32, WARPS_PER_BLOCK), grid((unsigned)((rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK));
    const int chunks = (int)(cols / 32);
    cudaStream_t s = (cudaStream_t)stream;
    const uint8_t *wb = (const uint8_t *)w;
    switch (type) {
    case NF_TYPE_F32: gemv_kernel<NF_TYPE_F32><<<grid, block, 0, s>>>(wb, x, y, rows, chunks, row_bytes); break;
    case NF_TYPE_F16: gemv_kernel<NF_TYPE_F16><<<grid, block, 0, s>>>(wb, x, y, rows, chunks, row_bytes); break;
    case NF_TYPE_BF16: gemv_kernel<NF_TYPE_BF16><<<grid, block, 0, s>>>(wb, x, y, rows, chunks, row_bytes); break;
    case NF_TYPE_Q8_0: gemv_kernel<NF_TYPE_Q8_0><<<grid, block, 0, s>>>(wb, x, y, rows, chunks, row_bytes); break;
    case NF_TYPE_Q4_K: gemv_kernel<NF_TYPE_Q4_K><<<grid, block, 0, s>>>(wb, x, y, rows, chunks, row_bytes); break;
    case NF_TYPE_Q6_K: gemv_kernel<NF_TYPE_Q6_K><<<grid, block, 0, s>>>(wb, x, y, rows, chunks, row_bytes); break;
    case NF_TYPE_Q2_K: gemv_kernel<NF_TYPE_Q2_K><<<grid, block, 0, s>>>(wb, x, y, rows, chunks, row_bytes); break;
    case NF_TYPE_IQ2_XXS: gemv_kernel<NF_TYPE_IQ2_XXS><<<grid, block, 0, s>>>(wb, x, y, rows, chunks, row_bytes); break;
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return nf_fail("cuda gemv launch: %s", cudaGetErrorString(e));
    return 0;
}
