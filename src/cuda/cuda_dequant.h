/* cuda_dequant.h — device decoding of the stored weight formats, shared by the CUDA product kernels
 * (cuda_matmul.cu: the per-vector products and the embedding lookup; cuda_gemm.cu: the tiled prefill GEMM).
 *
 * Two granularities with the same arithmetic (the expressions of src/formats' dequantizers, unfused, so a
 * decoded weight is bit-identical to the CPU's nf_dequantize):
 *  - nf_deq_elem<TY>(row, i): element i of a row (byte loads; any alignment);
 *  - nf_wgroup<TY>: 8 consecutive elements of a row (i0 % 8 == 0), which share one scale in every format, in two
 *    steps: load() fetches the raw bits into registers and decode() does the arithmetic, so that a kernel can
 *    issue the loads of its next tile before it multiplies the current one (software pipelining). Raw loads use
 *    the widest access the format's block layout allows for rows whose start is aligned as nf_wgroup_align<TY>
 *    says (the caller checks).
 * The IQ2_XXS grid and sign tables live in constant memory, one copy per translation unit (no relocatable
 * device code in this build): every .cu file that decodes IQ2_XXS calls nf_dequant_tables_init() once per
 * device. */
#ifndef NF_CUDA_DEQUANT_H
#define NF_CUDA_DEQUANT_H

#include <cuda_fp16.h>
#include <stdint.h>

extern "C" {
#include "formats/formats.h"
extern const uint64_t nf_iq2xxs_grid[256];
extern const uint8_t nf_iq2_ksigns[128];
}

static __constant__ uint64_t nf_c_iq2_grid[256];
static __constant__ uint8_t nf_c_iq2_signs[128];

/* Copies the IQ2_XXS tables into this translation unit's constant memory (current device). */
static inline cudaError_t nf_dequant_tables_init(void) {
    cudaError_t e = cudaMemcpyToSymbol(nf_c_iq2_grid, nf_iq2xxs_grid, sizeof(nf_c_iq2_grid));
    if (e == cudaSuccess) e = cudaMemcpyToSymbol(nf_c_iq2_signs, nf_iq2_ksigns, sizeof(nf_c_iq2_signs));
    return e;
}

/* ---- loads (quantized blocks are only 2-byte aligned) ---- */
__device__ __forceinline__ float nf_ld_h(const uint8_t *p) {
    return __half2float(__ushort_as_half((unsigned short)(p[0] | (p[1] << 8))));
}
__device__ __forceinline__ uint32_t nf_ld_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
/* 16/32-bit loads at addresses aligned to 2 / 4 */
__device__ __forceinline__ uint32_t nf_ld2(const uint8_t *p) { return *(const uint16_t *)p; }
__device__ __forceinline__ uint32_t nf_ld4(const uint8_t *p) { return *(const uint32_t *)p; }
__device__ __forceinline__ float nf_h2f(uint32_t bits) { return __half2float(__ushort_as_half((unsigned short)bits)); }

__device__ __forceinline__ void nf_scale_min_k4(int j, const uint8_t *q, int &sc, int &m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* ---- element i of a row ---- */
template <int TY> __device__ __forceinline__ float nf_deq_elem(const uint8_t *row, int64_t i);
template <> __device__ __forceinline__ float nf_deq_elem<NF_TYPE_F32>(const uint8_t *row, int64_t i) {
    return ((const float *)row)[i];
}
template <> __device__ __forceinline__ float nf_deq_elem<NF_TYPE_F16>(const uint8_t *row, int64_t i) {
    return __half2float(((const __half *)row)[i]);
}
template <> __device__ __forceinline__ float nf_deq_elem<NF_TYPE_BF16>(const uint8_t *row, int64_t i) {
    return __uint_as_float((uint32_t)((const uint16_t *)row)[i] << 16);
}
template <> __device__ __forceinline__ float nf_deq_elem<NF_TYPE_Q8_0>(const uint8_t *row, int64_t i) {
    const uint8_t *b = row + (size_t)(i / 32) * 34;
    return __fmul_rn((float)(int8_t)b[2 + i % 32], nf_ld_h(b));
}
template <> __device__ __forceinline__ float nf_deq_elem<NF_TYPE_Q4_K>(const uint8_t *row, int64_t i) {
    const uint8_t *b = row + (size_t)(i / 256) * 144;
    const int e = (int)(i % 256), J = e / 32, l = e % 32;
    int sc, m;
    nf_scale_min_k4(J, b + 4, sc, m);
    const int q = (b[16 + 32 * (J / 2) + l] >> (4 * (J & 1))) & 0xF;
    return __fsub_rn(__fmul_rn(__fmul_rn(nf_ld_h(b), (float)sc), (float)q), __fmul_rn(nf_ld_h(b + 2), (float)m));
}
template <> __device__ __forceinline__ float nf_deq_elem<NF_TYPE_Q2_K>(const uint8_t *row, int64_t i) {
    const uint8_t *b = row + (size_t)(i / 256) * 84;
    const int e = (int)(i % 256), n = e / 128, k = (e % 128) / 32, l = e % 32;
    const int q = (b[16 + 32 * n + l] >> (2 * k)) & 3;
    const uint8_t sc = b[e / 16];
    return __fsub_rn(__fmul_rn(__fmul_rn(nf_ld_h(b + 80), (float)(sc & 0xF)), (float)q),
                     __fmul_rn(nf_ld_h(b + 82), (float)(sc >> 4)));
}
__device__ __forceinline__ int nf_q6_value(const uint8_t *b, int e) {
    const int n = e / 128, r = e % 128, qq = r / 32, l = r % 32;
    const uint8_t lo = b[64 * n + l + 32 * (qq & 1)];
    const int nib = qq >= 2 ? lo >> 4 : lo & 0xF;
    const int hi = (b[128 + 32 * n + l] >> (2 * qq)) & 3;
    return (nib | (hi << 4)) - 32;
}
template <> __device__ __forceinline__ float nf_deq_elem<NF_TYPE_Q6_K>(const uint8_t *row, int64_t i) {
    const uint8_t *b = row + (size_t)(i / 256) * 210;
    const int e = (int)(i % 256);
    return __fmul_rn(__fmul_rn(nf_ld_h(b + 208), (float)(int8_t)b[192 + e / 16]), (float)nf_q6_value(b, e));
}
template <> __device__ __forceinline__ float nf_deq_elem<NF_TYPE_IQ2_XXS>(const uint8_t *row, int64_t i) {
    const uint8_t *b = row + (size_t)(i / 256) * 66;
    const int e = (int)(i % 256), ib = e / 32, l = (e % 32) / 8, k = e % 8;
    const uint32_t ga = nf_ld_u32(b + 2 + 8 * ib), s = nf_ld_u32(b + 2 + 8 * ib + 4);
    const float db = __fmul_rn(__fmul_rn(nf_ld_h(b), 0.5f + (float)(s >> 28)), 0.25f);
    const float g = (float)((nf_c_iq2_grid[(ga >> (8 * l)) & 0xFF] >> (8 * k)) & 0xFF);
    const int neg = (nf_c_iq2_signs[(s >> (7 * l)) & 127] >> k) & 1;
    return __fmul_rn(db, neg ? -g : g);
}

/* ---- 8 consecutive elements [i0, i0 + 8) of a row: raw load, then decode ---- */
/* IQ2_XXS decoding reads its tables through these pointers (a kernel may copy them to shared memory). */
struct nf_iq2_tables {
    const uint64_t *grid;
    const uint8_t *signs;
};

/* Alignment in bytes that load() needs of a row's start address (row bases are at least 2-byte aligned). */
template <int TY> constexpr int nf_wgroup_align() {
    return TY == NF_TYPE_Q4_K || TY == NF_TYPE_Q2_K ? 4 : 2;
}

template <int TY> struct nf_wgroup;

/* Float formats: `full` = the 8 elements exist and the row start is 16-byte aligned (one or two vector loads);
 * otherwise element loads, zero past n. */
template <> struct nf_wgroup<NF_TYPE_F32> {
    float v[8];
    __device__ __forceinline__ void load(const uint8_t *row, int64_t i0, int64_t n, bool full) {
        const float *p = (const float *)row + i0;
        if (full) {
            const float4 a = ((const float4 *)p)[0], b = ((const float4 *)p)[1];
            v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
        } else {
#pragma unroll
            for (int e = 0; e < 8; e++) v[e] = i0 + e < n ? p[e] : 0.0f;
        }
    }
    __device__ __forceinline__ void zero() {
#pragma unroll
        for (int e = 0; e < 8; e++) v[e] = 0.0f;
    }
    __device__ __forceinline__ void decode(float o[8], nf_iq2_tables) const {
#pragma unroll
        for (int e = 0; e < 8; e++) o[e] = v[e];
    }
};

/* F16 and BF16: the 16 raw bits of each element, two per word */
template <int TY> struct nf_wgroup_half {
    uint32_t u[4];
    __device__ __forceinline__ void load(const uint8_t *row, int64_t i0, int64_t n, bool full) {
        const uint16_t *p = (const uint16_t *)row + i0;
        if (full) {
            const uint4 a = *(const uint4 *)p;
            u[0] = a.x; u[1] = a.y; u[2] = a.z; u[3] = a.w;
        } else {
#pragma unroll
            for (int j = 0; j < 4; j++)
                u[j] = (i0 + 2 * j < n ? (uint32_t)p[2 * j] : 0u) | (i0 + 2 * j + 1 < n ? (uint32_t)p[2 * j + 1] << 16 : 0u);
        }
    }
    __device__ __forceinline__ void zero() { u[0] = u[1] = u[2] = u[3] = 0; }
    __device__ __forceinline__ void decode(float o[8], nf_iq2_tables) const {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            if (TY == NF_TYPE_BF16) {
                o[2 * j] = __uint_as_float(u[j] << 16);
                o[2 * j + 1] = __uint_as_float(u[j] & 0xFFFF0000u);
            } else {
                o[2 * j] = nf_h2f(u[j] & 0xFFFF);
                o[2 * j + 1] = nf_h2f(u[j] >> 16);
            }
        }
    }
};
template <> struct nf_wgroup<NF_TYPE_F16> : nf_wgroup_half<NF_TYPE_F16> {};
template <> struct nf_wgroup<NF_TYPE_BF16> : nf_wgroup_half<NF_TYPE_BF16> {};

/* Q8_0: 34-byte blocks (f16 scale, 32 int8); the group is a quarter block */
template <> struct nf_wgroup<NF_TYPE_Q8_0> {
    uint32_t d, q[4];
    __device__ __forceinline__ void load(const uint8_t *row, int64_t i0, int64_t, bool) {
        const uint8_t *b = row + (size_t)(i0 / 32) * 34;
        const uint8_t *p = b + 2 + i0 % 32;
        d = nf_ld2(b);
#pragma unroll
        for (int j = 0; j < 4; j++) q[j] = nf_ld2(p + 2 * j);
    }
    __device__ __forceinline__ void zero() { d = q[0] = q[1] = q[2] = q[3] = 0; }
    __device__ __forceinline__ void decode(float o[8], nf_iq2_tables) const {
        const float s = nf_h2f(d);
#pragma unroll
        for (int e = 0; e < 8; e++) o[e] = __fmul_rn((float)(int8_t)(q[e / 2] >> (8 * (e & 1))), s);
    }
};

/* Q4_K: 144-byte superblocks of 256 (f16 d, dmin; 12 bytes of 6-bit scales/mins; 128 bytes of nibbles) */
template <> struct nf_wgroup<NF_TYPE_Q4_K> {
    uint32_t dm, s[3], q[2];
    int J;
    __device__ __forceinline__ void load(const uint8_t *row, int64_t i0, int64_t, bool) {
        const uint8_t *b = row + (size_t)(i0 / 256) * 144;
        const int e = (int)(i0 % 256);
        J = e / 32;
        dm = nf_ld4(b);
#pragma unroll
        for (int j = 0; j < 3; j++) s[j] = nf_ld4(b + 4 + 4 * j);
        const uint8_t *p = b + 16 + 32 * (J / 2) + e % 32;
        q[0] = nf_ld4(p);
        q[1] = nf_ld4(p + 4);
    }
    __device__ __forceinline__ void zero() { dm = s[0] = s[1] = s[2] = q[0] = q[1] = 0; J = 0; }
    __device__ __forceinline__ void decode(float o[8], nf_iq2_tables) const {
        /* the 6-bit scale and min of sub-block J (scale_min_k4) from the three scale words, without indexing a
         * register array by J */
        const int sb = 8 * (J & 3);
        const int b0 = (int)(s[0] >> sb) & 0xFF, b1 = (int)(s[1] >> sb) & 0xFF, b2 = (int)(s[2] >> sb) & 0xFF;
        const int sc = J < 4 ? b0 & 63 : (b2 & 0xF) | ((b0 >> 6) << 4);
        const int m = J < 4 ? b1 & 63 : (b2 >> 4) | ((b1 >> 6) << 4);
        const float ds = __fmul_rn(nf_h2f(dm & 0xFFFF), (float)sc), dmin = __fmul_rn(nf_h2f(dm >> 16), (float)m);
        const int sh = 4 * (J & 1);
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const int qv = (q[e / 4] >> (8 * (e % 4) + sh)) & 0xF;
            o[e] = __fsub_rn(__fmul_rn(ds, (float)qv), dmin);
        }
    }
};

/* Q6_K: 210-byte superblocks (128 bytes low nibbles, 64 bytes high 2-bit pairs, 16 int8 scales, f16 d) */
template <> struct nf_wgroup<NF_TYPE_Q6_K> {
    uint32_t lo[4], hi[4], d, sc;
    int qq;
    __device__ __forceinline__ void load(const uint8_t *row, int64_t i0, int64_t, bool) {
        const uint8_t *b = row + (size_t)(i0 / 256) * 210;
        const int e = (int)(i0 % 256), n = e / 128, r = e % 128, l = r % 32;
        qq = r / 32;
        const uint8_t *pl = b + 64 * n + l + 32 * (qq & 1), *ph = b + 128 + 32 * n + l;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            lo[j] = nf_ld2(pl + 2 * j);
            hi[j] = nf_ld2(ph + 2 * j);
        }
        d = nf_ld2(b + 208);
        sc = b[192 + e / 16];
    }
    __device__ __forceinline__ void zero() {
#pragma unroll
        for (int j = 0; j < 4; j++) lo[j] = hi[j] = 0;
        d = sc = 0;
        qq = 0;
    }
    __device__ __forceinline__ void decode(float o[8], nf_iq2_tables) const {
        const float ds = __fmul_rn(nf_h2f(d), (float)(int8_t)sc);
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const int l8 = (lo[e / 2] >> (8 * (e & 1))) & 0xFF, h8 = (hi[e / 2] >> (8 * (e & 1))) & 0xFF;
            const int nib = qq >= 2 ? l8 >> 4 : l8 & 0xF;
            const int v = (nib | (((h8 >> (2 * qq)) & 3) << 4)) - 32;
            o[e] = __fmul_rn(ds, (float)v);
        }
    }
};

/* Q2_K: 84-byte superblocks (16 scale/min bytes, 64 bytes of 2-bit values, f16 d, dmin) */
template <> struct nf_wgroup<NF_TYPE_Q2_K> {
    uint32_t q[2], dm, sc;
    int k;
    __device__ __forceinline__ void load(const uint8_t *row, int64_t i0, int64_t, bool) {
        const uint8_t *b = row + (size_t)(i0 / 256) * 84;
        const int e = (int)(i0 % 256), n = e / 128, l = e % 32;
        k = (e % 128) / 32;
        const uint8_t *p = b + 16 + 32 * n + l;
        q[0] = nf_ld4(p);
        q[1] = nf_ld4(p + 4);
        dm = nf_ld4(b + 80);
        sc = b[e / 16];
    }
    __device__ __forceinline__ void zero() { q[0] = q[1] = dm = sc = 0; k = 0; }
    __device__ __forceinline__ void decode(float o[8], nf_iq2_tables) const {
        const float ds = __fmul_rn(nf_h2f(dm & 0xFFFF), (float)(sc & 0xF));
        const float dmin = __fmul_rn(nf_h2f(dm >> 16), (float)(sc >> 4));
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const int qv = (q[e / 4] >> (8 * (e % 4) + 2 * k)) & 3;
            o[e] = __fsub_rn(__fmul_rn(ds, (float)qv), dmin);
        }
    }
};

/* IQ2_XXS: 66-byte superblocks (f16 d; per 32: 4 grid indices and a word of 4 x 7 sign bits + 4-bit scale); the
 * group of 8 is one grid entry */
template <> struct nf_wgroup<NF_TYPE_IQ2_XXS> {
    uint32_t d, gi, s0, s1;
    int l;
    __device__ __forceinline__ void load(const uint8_t *row, int64_t i0, int64_t, bool) {
        const uint8_t *b = row + (size_t)(i0 / 256) * 66;
        const int e = (int)(i0 % 256), ib = e / 32;
        l = (e % 32) / 8;
        d = nf_ld2(b);
        gi = b[2 + 8 * ib + l];
        s0 = nf_ld2(b + 2 + 8 * ib + 4);
        s1 = nf_ld2(b + 2 + 8 * ib + 6);
    }
    __device__ __forceinline__ void zero() { d = gi = s0 = s1 = 0; l = 0; }
    __device__ __forceinline__ void decode(float o[8], nf_iq2_tables t) const {
        const uint32_t s = s0 | (s1 << 16);
        const float db = __fmul_rn(__fmul_rn(nf_h2f(d), 0.5f + (float)(s >> 28)), 0.25f);
        const uint64_t g = t.grid[gi];
        const uint32_t sg = t.signs[(s >> (7 * l)) & 127];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float gv = (float)((g >> (8 * k)) & 0xFF);
            o[k] = __fmul_rn(db, (sg >> k) & 1 ? -gv : gv);
        }
    }
};

#endif
