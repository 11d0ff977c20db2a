/* cuda_gemv.cu — decode products (cuda_gemv.h): each weight byte streamed once through shared memory, the f32
 * activation held in registers, f32 accumulation.
 *
 * Streaming kernel gemv_stream<TY, R>. A row of the matrix is cut into `units` (a fixed set of columns per format:
 * 8 interleaved 16-byte chunks of f32/f16/bf16, a pair of Q8_0 blocks, a 64-value quarter of a Q4_K/Q6_K/Q2_K
 * block, a 32-value IQ2_XXS group); thread u of a row group owns unit u of every row, so it loads its activation
 * values once and keeps them in registers for all the rows it meets. A CTA holds G row groups; it walks batches of
 * G*R consecutive rows (one contiguous byte range), copied into shared memory with 16-byte cp.async in a pipeline
 * of 3..8 stages (all but one in flight while one is decoded; sized per shape, see plan_stream), so the global
 * loads are fully coalesced whatever the block size and alignment of the format. Every thread then reads its unit
 * of R rows from shared memory, decodes it in registers and accumulates R partial sums; a warp reduces them by a
 * transposing butterfly (one row per lane group), the warps of a row group add theirs in a fixed order. A
 * persistent grid (one wave of CTAs) takes batches round-robin; a job of several vectors/matrices is one launch
 * with blockIdx.y = problem.
 * The per-row summation order depends only on (format, row length), not on the grid, batch size or nvec.
 *
 * Arithmetic (why it is dequantize-then-dot): every dequantized weight of these formats is a block scale times a
 * small integer code (minus a scaled min), and those products are exact in f32 (d*sc*q has at most 21 significant
 * bits for Q8_0, Q4_K, Q2_K, IQ2_XXS). So sum_e w_e x_e = d*sc * sum q_e x_e - dmin*m * sum x_e in real arithmetic,
 * and the kernels sum the codes against x and apply each scale once per sub-block; only the rounding of partial
 * sums differs from the CPU, except for the rare weight nf_dequantize itself rounds (Q6_K's d*sc*(q-32) can need 25
 * bits; Q4_K/Q2_K's d*sc*q - dmin*m when the two exponents are far apart): there the kernel uses the exact value,
 * one ulp away. Codes of 2 and 4 bits are turned into floats by one AND: code bits left in the mantissa of a zero-
 * exponent word are the denormal q * 2^(pos-149), and the activation is stored pre-multiplied by 2^(149-pos-E) (E:
 * a per-thread exponent from its largest |x|, undone once per row), so one FFMA multiplies q by x exactly as a
 * float q would. This needs denormals honoured (no --use_fast_math / -ftz=true). Signed 8-bit and 6-bit codes go
 * through the 2^23 magic number (byte_perm + one FADD, exact).
 *
 * Shapes the streaming kernel does not take (nf_cuda_gemv_streams) run on gemv_plain: a group of up to 32 lanes
 * per row, lane l of the group owns blocks l, l+lanes, ..., activations read through the cache. */
#include "cuda/cuda_gemv.h"
#include "cuda/cuda_act.h"
#include "cuda/cuda_launch.h"
#include "cuda/cuda_rowsum.h"

#include <cuda_fp16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The formats table, the IQ2_XXS tables (src/formats/iq2_tables.c) and the error helper are C. */
extern "C" {
#include "formats/formats.h"

extern const uint64_t nf_iq2xxs_grid[256];
extern const uint8_t nf_iq2_ksigns[128];
int nf_fail(const char *fmt, ...);
}

#ifdef __USE_FAST_MATH__
#error "cuda_gemv.cu decodes codes as f32 denormals: build it without --use_fast_math (no flush to zero)"
#endif

#define GEMV_MAX_STAGES 8          /* shared-memory stages of the streaming pipeline (3 .. 8, chosen per shape) */
#define GEMV_MAX_THREADS 512       /* per CTA (launch bound: up to 128 registers per thread) */
#define GEMV_STAGE_MAX 65536       /* largest batch: one row group of one row must fit (with 3 stages) */
/* bytes in flight per SM the plan asks for before it prefers more CTAs, then larger batches: 96 KiB (2 CTAs x 3
 * stages of R = 2 Q8_0 rows) was faster than 192 KiB on every model shape of the H200 sweep (q/k/v 38.5 -> 31.2 us,
 * routed Q8_0 gate+up 49.7 -> 39.9 us: docs/benchmarks.md, session 6); more CTAs or rows beat deeper pipelines */
#define GEMV_FLIGHT_GOAL 98304
/* IQ2_XXS tables, copied to shared memory per CTA at the start of the dynamic shared memory (a constant address,
 * so a lookup needs no base register arithmetic): the grid rows (256 x 8 bytes), the 8-bit sign patterns (128
 * bytes, each stored with the bits of either nibble reversed: see iq2_sign_lo). The patterns stay bytes: 128
 * bytes are one word per bank, so a warp's lookup is one conflict-free shared wavefront. A table of the patterns
 * already spread to 0x80 bytes (8 bytes each) saves 4 more issue slots per warp and 8 weights but, like the grid's
 * random 8-byte rows, costs ~4 wavefronts per lookup instead of 1 (~5.4 -> ~8.4 wavefronts, at one per clock per
 * SM, against ~32 issue slots / 4 schedulers = ~8 clocks), so shared memory would become the limit (branch
 * h/gemvlowbit-signmask has that variant for a GPU A/B). */
#define IQ2_GRID_AT 0
#define IQ2_SIGNS_AT 2048
#define IQ2_TABLE_BYTES 2176
/* A sign pattern s (bit c: weight c negative) as the two words the decode needs, bit c at bit 8c+7 of word c/4
 * (0x80 in byte c%4), from its nibble-reversed form e: one multiply and one AND per word, as the products' only
 * terms at bits 7, 15, 23, 31 are the wanted ones and no carries reach them (checked below for all 256 s). With
 * s itself it takes an AND or a shift more per word (s & 15, s >> 4: the high nibble's copies would collide). */
__host__ __device__ constexpr uint32_t iq2_nibble_rev(uint32_t s) {
    return ((s & 0x11u) << 3) | ((s & 0x22u) << 1) | ((s & 0x44u) >> 1) | ((s & 0x88u) >> 3);
}
__host__ __device__ constexpr uint32_t iq2_sign_lo(uint32_t e) { return (e * 0x80402010u) & 0x80808080u; }
__host__ __device__ constexpr uint32_t iq2_sign_hi(uint32_t e) { return (e * 0x08040201u) & 0x80808080u; }
constexpr uint32_t spread_nibble(uint32_t n) { return (n & 1u) << 7 | (n & 2u) << 14 | (n & 4u) << 21 | (n & 8u) << 28; }
constexpr bool iq2_sign_words_exact() {
    for (uint32_t s = 0; s < 256; s++)
        if (iq2_sign_lo(iq2_nibble_rev(s)) != spread_nibble(s & 15) || iq2_sign_hi(iq2_nibble_rev(s)) != spread_nibble(s >> 4))
            return false;
    return true;
}
static_assert(iq2_sign_words_exact(), "IQ2_XXS sign words: the multiply trick does not reproduce every pattern");
/* shared bytes before the stages: the tables of the format, if any */
__host__ __device__ constexpr int table_bytes(uint32_t type) { return type == NF_TYPE_IQ2_XXS ? IQ2_TABLE_BYTES : 0; }

__device__ uint64_t g_iq2_grid[256];
__device__ uint8_t g_iq2_signs[128];

/* ---- scalar helpers ---- */

/* 2^k for -126 <= k <= 127 */
__device__ __forceinline__ float pow2f(int k) { return __uint_as_float((uint32_t)(k + 127) << 23); }
/* v * 2^k, exact while the result is a normal float; -252 <= k <= 254 */
__device__ __forceinline__ float ldexp2(float v, int k) {
    const int a = k / 2;
    return v * pow2f(a) * pow2f(k - a);
}
/* E for the denormal code trick: |x| * 2^(149 - E) < 2^127 for every |x| <= amax (amax >= 0 or nan) */
__device__ __forceinline__ int code_exp(float amax) {
    const int ex = (int)(__float_as_uint(amax) >> 23);
    return (ex == 0 ? -126 : ex - 126) + 22;
}
__device__ __forceinline__ float h2f(uint32_t bits) { return __half2float(__ushort_as_half((unsigned short)(bits & 0xffffu))); }
/* byte k of w as the float 2^23 + byte, minus bias */
template <int K> __device__ __forceinline__ float byte_f(uint32_t w, float bias) {
    return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7650 + K)) - bias;
}
#define MAGIC_U8 8388608.0f         /* 2^23: byte value */
#define MAGIC_S8 8388736.0f         /* 2^23 + 128: (q ^ 0x80) -> q */
#define MAGIC_Q6 8388640.0f         /* 2^23 + 32: q6 -> q6 - 32 */
__device__ __forceinline__ float bits_f(uint32_t b) { return __uint_as_float(b); }
/* PTX prmt (default mode): like __byte_perm, and bit 3 of a selector nibble replicates the sign of that byte */
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
#ifdef __CUDA_ARCH__
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
#else /* the CPU emulation (scripts/cuemu) */
    const uint64_t v = ((uint64_t)b << 32) | a;
    uint32_t d = 0;
    for (int n = 0; n < 4; n++) {
        const uint32_t c = (sel >> (4 * n)) & 15, byte = (uint32_t)(v >> (8 * (c & 7))) & 0xFFu;
        d |= (c & 8 ? (byte & 0x80u ? 0xFFu : 0u) : byte) << (8 * n);
    }
    return d;
#endif
}
/* 32 bits at a 2-byte-aligned shared address p, as 16-bit halves of the aligned words around it (odd = p % 4 != 0) */
__device__ __forceinline__ uint32_t ld32_at(const uint8_t *p4, int i, int sh) {
    const uint32_t *w = (const uint32_t *)p4;
    return __funnelshift_r(w[i], w[i + 1], sh);
}

/* ---- where a thread's activation values come from ---- */
/* The quantized units hold 32 or 64 activation values of their own columns: thread u reads 256 (128) contiguous
 * bytes, so the threads of a warp read 32 rows of a 8 KiB window at once. Read straight from global memory that
 * is one L1 wavefront per thread and value (16K wavefronts per CTA: ~8 us of L1 time per CTA, the largest part of
 * a 10-35 us Q8_0 launch on the H200). So the CTA first copies the activation row into shared memory with
 * coalesced 16-byte loads, in 16-byte chunks stored at chunk c ^ ((c >> shift) & 7), and each thread then reads its
 * chunks from there: consecutive threads' chunks land in different banks (shift = log2 of the chunks per unit). */
struct xsrc {
    const float *g;   /* the activation row in global memory (used when s is NULL) */
    const float4 *s;  /* its swizzled shared copy, or NULL */
    int shift;
    __device__ __forceinline__ float4 chunk(int c) const {
        if (s) return s[c ^ ((c >> shift) & 7)];
        return make_float4(g[4 * c], g[4 * c + 1], g[4 * c + 2], g[4 * c + 3]);
    }
    /* values [4*c0, 4*c0 + 4*N) into v */
    template <int N> __device__ __forceinline__ void run(int c0, float *v) const {
#pragma unroll
        for (int j = 0; j < N; j++) {
            const float4 f = chunk(c0 + j);
            v[4 * j] = f.x;
            v[4 * j + 1] = f.y;
            v[4 * j + 2] = f.z;
            v[4 * j + 3] = f.w;
        }
    }
};

/* ---- units: what one thread decodes of one row ---- */
template <int TY> struct unit;

template <> struct unit<NF_TYPE_F32> {
    /* 8 chunks of 4 columns: chunk j is u + j*units (consecutive threads read consecutive 16 bytes) */
    static constexpr int COLS = 32;
    float X[32];
    int off, stride;
    static constexpr int XSHIFT = -1; /* consecutive threads read consecutive chunks: no staging */
    __device__ void init(const xsrc &xs, int u, int units) {
        const float *x = xs.g;
        off = 16 * u;
        stride = 16 * units;
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) X[4 * j + i] = x[4 * (u + j * units) + i];
    }
    /* The RMSNorm of the activation row in the kernel (gemv_params.xnorm): the sums of squares of the two threads
     * u and u + units of rmsnorm_kernel's block of 2 * units threads over a row of 32 * units columns, which load
     * the float4 chunks u + 2m * units and u + (2m + 1) * units (m < 4): this thread's chunks j = 0, 2, 4, 6 and
     * 1, 3, 5, 7, added in nf_d_row_sumsq_part's order. */
    __device__ void sumsq_pair(double &s0, double &s1) const {
#pragma unroll
        for (int j = 0; j < 8; j++) {
            double &ss = j & 1 ? s1 : s0;
#pragma unroll
            for (int i = 0; i < 4; i++) ss += (double)X[4 * j + i] * (double)X[4 * j + i];
        }
    }
    __device__ void scale(float r) {
#pragma unroll
        for (int i = 0; i < 32; i++) X[i] = __fmul_rn(X[i], r);
    }
    __device__ float dot(const uint8_t *row, const uint8_t *) const {
        float a[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const uint4 w = *(const uint4 *)(row + off + j * stride);
            float &s = a[j & 3];
            s = fmaf(bits_f(w.x), X[4 * j], s);
            s = fmaf(bits_f(w.y), X[4 * j + 1], s);
            s = fmaf(bits_f(w.z), X[4 * j + 2], s);
            s = fmaf(bits_f(w.w), X[4 * j + 3], s);
        }
        return (a[0] + a[1]) + (a[2] + a[3]);
    }
};

/* f16 / bf16: 8 chunks of 8 columns, chunk j is u + j*units */
template <int TY> struct unit_half {
    static constexpr int COLS = 64;
    float X[64];
    int off, stride;
    static constexpr int XSHIFT = -1;
    __device__ void init(const xsrc &xs, int u, int units) {
        const float *x = xs.g;
        off = 16 * u;
        stride = 16 * units;
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int i = 0; i < 8; i++) X[8 * j + i] = x[8 * (u + j * units) + i];
    }
    static __device__ __forceinline__ float lo(uint32_t w) {
        if constexpr (TY == NF_TYPE_BF16) return __uint_as_float(w << 16);
        else return h2f(w);
    }
    static __device__ __forceinline__ float hi(uint32_t w) {
        if constexpr (TY == NF_TYPE_BF16) return __uint_as_float(w & 0xffff0000u);
        else return h2f(w >> 16);
    }
    __device__ float dot(const uint8_t *row, const uint8_t *) const {
        float a[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const uint4 w = *(const uint4 *)(row + off + j * stride);
            const uint32_t v[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float &s = a[k];
                s = fmaf(lo(v[k]), X[8 * j + 2 * k], s);
                s = fmaf(hi(v[k]), X[8 * j + 2 * k + 1], s);
            }
        }
        return (a[0] + a[1]) + (a[2] + a[3]);
    }
};
template <> struct unit<NF_TYPE_F16> : unit_half<NF_TYPE_F16> {};
template <> struct unit<NF_TYPE_BF16> : unit_half<NF_TYPE_BF16> {};

template <> struct unit<NF_TYPE_Q8_0> {
    /* blocks 2u and 2u+1: 68 bytes = 17 aligned words (f16 d, 32 x i8; f16 d, 32 x i8) */
    static constexpr int COLS = 64;
    float X[64];
    int off;
    static constexpr int XSHIFT = 4;
    __device__ void init(const xsrc &xs, int u, int) {
        off = 68 * u;
        xs.run<16>(16 * u, X);
    }
    /* the 4 bytes of word w hold values e .. e+3 */
    template <int E0, int K0, int K1>
    __device__ __forceinline__ void word(uint32_t w, float &s0, float &s1) const {
        const uint32_t t = w ^ 0x80808080u;
        if constexpr (K0 <= 0 && K1 >= 0) s0 = fmaf(byte_f<0>(t, MAGIC_S8), X[E0], s0);
        if constexpr (K0 <= 1 && K1 >= 1) s1 = fmaf(byte_f<1>(t, MAGIC_S8), X[E0 + 1], s1);
        if constexpr (K0 <= 2 && K1 >= 2) s0 = fmaf(byte_f<2>(t, MAGIC_S8), X[E0 + 2], s0);
        if constexpr (K0 <= 3 && K1 >= 3) s1 = fmaf(byte_f<3>(t, MAGIC_S8), X[E0 + 3], s1);
    }
    __device__ float dot(const uint8_t *row, const uint8_t *) const {
        const uint32_t *p = (const uint32_t *)(row + off);
        uint32_t w[17];
#pragma unroll
        for (int i = 0; i < 17; i++) w[i] = p[i];
        float a0 = 0.f, a1 = 0.f, b0 = 0.f, b1 = 0.f;
        word<-2, 2, 3>(w[0], a0, a1);   /* bytes 2, 3: values 0, 1 */
        word<2, 0, 3>(w[1], a0, a1);
        word<6, 0, 3>(w[2], a0, a1);
        word<10, 0, 3>(w[3], a0, a1);
        word<14, 0, 3>(w[4], a0, a1);
        word<18, 0, 3>(w[5], a0, a1);
        word<22, 0, 3>(w[6], a0, a1);
        word<26, 0, 3>(w[7], a0, a1);
        word<30, 0, 1>(w[8], a0, a1);   /* bytes 0, 1: values 30, 31; bytes 2, 3: the next d */
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t t = w[9 + i] ^ 0x80808080u;
            b0 = fmaf(byte_f<0>(t, MAGIC_S8), X[32 + 4 * i], b0);
            b1 = fmaf(byte_f<1>(t, MAGIC_S8), X[33 + 4 * i], b1);
            b0 = fmaf(byte_f<2>(t, MAGIC_S8), X[34 + 4 * i], b0);
            b1 = fmaf(byte_f<3>(t, MAGIC_S8), X[35 + 4 * i], b1);
        }
        return fmaf(h2f(w[0]), a0 + a1, h2f(w[8] >> 16) * (b0 + b1));
    }
};

template <> struct unit<NF_TYPE_Q4_K> {
    /* block u/4 (144 bytes: f16 d, f16 dmin, 12 scale bytes, 128 qs), pair p = u%4: qs[32p .. 32p+31], low
     * nibbles are values 64p + l (sub-block 2p), high nibbles 64p + 32 + l (sub-block 2p+1). Codes as denormals:
     * word w of the qs gives bytes 0,1 from w and bytes 2,3 from w >> 16, low nibble at bit 0 or 8, high at 4 or 12. */
    static constexpr int COLS = 64;
    float XL[32], XH[32];
    float sum_lo, sum_hi, pw0, pw1;
    int off, p;
    static constexpr int XSHIFT = 4;
    __device__ void init(const xsrc &src, int u, int) {
        const int b = u >> 2;
        p = u & 3;
        off = 144 * b;
        float xs[64]; /* values 256b + 64p + l = 64u + l */
        src.run<16>(16 * u, xs);
        float amax = 0.f;
#pragma unroll
        for (int l = 0; l < 64; l++) amax = fmaxf(amax, fabsf(xs[l]));
        const int E = code_exp(amax);
        pw0 = pow2f(E / 2);
        pw1 = pow2f(E - E / 2);
        sum_lo = 0.f;
        sum_hi = 0.f;
#pragma unroll
        for (int l = 0; l < 32; l++) {
            XL[l] = ldexp2(xs[l], 149 - 8 * (l & 1) - E);
            XH[l] = ldexp2(xs[32 + l], 149 - 8 * (l & 1) - 4 - E);
            sum_lo += xs[l];
            sum_hi += xs[32 + l];
        }
    }
    __device__ float dot(const uint8_t *row, const uint8_t *) const {
        const uint8_t *blk = row + off;
        const uint4 hd = *(const uint4 *)blk;
        const uint4 q0 = *(const uint4 *)(blk + 16 + 32 * p), q1 = *(const uint4 *)(blk + 32 + 32 * p);
        const uint32_t q[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
        float l0 = 0.f, l1 = 0.f, h0 = 0.f, h1 = 0.f;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t w = q[i], ws = w >> 16;
            l0 = fmaf(bits_f(w & 0xFu), XL[4 * i], l0);
            h0 = fmaf(bits_f(w & 0xF0u), XH[4 * i], h0);
            l1 = fmaf(bits_f(w & 0xF00u), XL[4 * i + 1], l1);
            h1 = fmaf(bits_f(w & 0xF000u), XH[4 * i + 1], h1);
            l0 = fmaf(bits_f(ws & 0xFu), XL[4 * i + 2], l0);
            h0 = fmaf(bits_f(ws & 0xF0u), XH[4 * i + 2], h0);
            l1 = fmaf(bits_f(ws & 0xF00u), XL[4 * i + 3], l1);
            h1 = fmaf(bits_f(ws & 0xF000u), XH[4 * i + 3], h1);
        }
        /* 6-bit scales and mins of sub-blocks 2p, 2p+1 (ggml's get_scale_min_k4), as two bytes of a half word */
        const int hi_case = p >= 2, sh = 16 * (p & 1);
        const uint32_t A = (hi_case ? hd.z : hd.y) >> sh, B = (hi_case ? hd.w : hd.z) >> sh, C = hd.y >> sh;
        const uint32_t sc = hi_case ? ((B & 0x0F0Fu) | ((C >> 2) & 0x3030u)) : (A & 0x3F3Fu);
        const uint32_t mn = hi_case ? (((B >> 4) & 0x0F0Fu) | ((A >> 2) & 0x3030u)) : (B & 0x3F3Fu);
        const float P = fmaf((float)(sc & 0xFFu), l0 + l1, (float)((sc >> 8) & 0xFFu) * (h0 + h1));
        const float M = fmaf((float)(mn & 0xFFu), sum_lo, (float)((mn >> 8) & 0xFFu) * sum_hi);
        return fmaf(-h2f(hd.x >> 16), M, h2f(hd.x) * P * pw0 * pw1);
    }
};

template <> struct unit<NF_TYPE_Q6_K> {
    /* block u/4 (210 bytes: ql[128], qh[64], i8 scales[16], f16 d), half n = (u/2)%2, h = u%2: values
     * 128n + 32qq + 16h + i (qq < 4, i < 16) from ql[64n + 16h + i] (qq 0 low, 2 high nibble),
     * ql[64n + 32 + 16h + i] (qq 1, 3), qh[32n + 16h + i] bits 2qq; scale of (qq) scales[8n + 2qq + h].
     * Blocks are 2-byte aligned: odd blocks read through funnel shifts of the aligned words. */
    static constexpr int COLS = 64;
    float X[64];
    int base, sh, n, h;
    static constexpr int XSHIFT = 4;
    __device__ void init(const xsrc &xs, int u, int) {
        const int b = u >> 2;
        n = (u >> 1) & 1;
        h = u & 1;
        sh = 16 * (b & 1);
        base = 210 * b - 2 * (b & 1); /* the aligned word at or 2 bytes before the block */
        /* values 256b + 128n + 16h + 32qq + i: 4 chunks at chunk 64b + 32n + 4h + 8qq */
#pragma unroll
        for (int qq = 0; qq < 4; qq++) xs.run<4>(64 * b + 32 * n + 4 * h + 8 * qq, X + 16 * qq);
    }
    __device__ float dot(const uint8_t *row, const uint8_t *) const {
        const uint8_t *blk = row + base; /* 4-byte aligned, 0 or 2 bytes before the block */
        const uint8_t *pa = blk + 64 * n + 16 * h, *pb = pa + 32, *ph = blk + 128 + 32 * n + 16 * h;
        const uint8_t *ps = blk + 192 + 8 * n;
        uint32_t A[4], B[4], H[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            A[i] = ld32_at(pa, i, sh);
            B[i] = ld32_at(pb, i, sh);
            H[i] = ld32_at(ph, i, sh);
        }
        const uint32_t s01 = ld32_at(ps, 0, sh), s23 = ld32_at(ps, 1, sh);
        const uint32_t dw = *(const uint16_t *)(blk + 208 + sh / 8);
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t Q[4] = {(A[i] & 0x0F0F0F0Fu) | ((H[i] << 4) & 0x30303030u),
                                   (B[i] & 0x0F0F0F0Fu) | ((H[i] << 2) & 0x30303030u),
                                   ((A[i] >> 4) & 0x0F0F0F0Fu) | (H[i] & 0x30303030u),
                                   ((B[i] >> 4) & 0x0F0F0F0Fu) | ((H[i] >> 2) & 0x30303030u)};
#pragma unroll
            for (int qq = 0; qq < 4; qq++) {
                float &s = acc[qq];
                s = fmaf(byte_f<0>(Q[qq], MAGIC_Q6), X[16 * qq + 4 * i], s);
                s = fmaf(byte_f<1>(Q[qq], MAGIC_Q6), X[16 * qq + 4 * i + 1], s);
                s = fmaf(byte_f<2>(Q[qq], MAGIC_Q6), X[16 * qq + 4 * i + 2], s);
                s = fmaf(byte_f<3>(Q[qq], MAGIC_Q6), X[16 * qq + 4 * i + 3], s);
            }
        }
        /* scales[8n + 2qq + h]: bytes h and 2+h of s01 (qq 0, 1), of s23 (qq 2, 3) */
        const int b0 = 8 * h, b1 = 16 + 8 * h;
        float r = (float)(int8_t)(s01 >> b0) * acc[0];
        r = fmaf((float)(int8_t)(s01 >> b1), acc[1], r);
        r = fmaf((float)(int8_t)(s23 >> b0), acc[2], r);
        r = fmaf((float)(int8_t)(s23 >> b1), acc[3], r);
        return h2f(dw) * r;
    }
};

template <> struct unit<NF_TYPE_Q2_K> {
    /* block u/4 (84 bytes: scales[16], qs[64], f16 d, f16 dmin), half n = (u/2)%2, h = u%2: values
     * 128n + 32k + 16h + i (bit pair k < 4, i < 16) from qs[32n + 16h + i] >> 2k; sub-block (k) has scale byte
     * scales[8n + 2k + h] (low nibble scale, high nibble min). Codes as denormals: bytes 0,1 of a qs word from
     * w, bytes 2,3 from w >> 16, at bit 2k or 8 + 2k; the mins likewise from the gathered scale word. */
    static constexpr int COLS = 64;
    float X[64], XS[4];
    float pw0, pw1;
    /* byte offsets in the row of this unit's 16 qs bytes, its 8 scale bytes and d, dmin; the byte_perm selector
     * of its 4 scale bytes: fixed per thread, so a row costs one add per address (recomputing them from b, n, h
     * cost ~10 integer operations per row) */
    int qoff, soff, doff;
    uint32_t ssel;
    static constexpr int XSHIFT = 4;
    __device__ void init(const xsrc &src, int u, int) {
        const int b = u >> 2, n = (u >> 1) & 1, h = u & 1;
        qoff = 84 * b + 16 + 32 * n + 16 * h;
        soff = 84 * b + 8 * n;
        doff = 84 * b + 80;
        ssel = h ? 0x7531 : 0x6420;
        /* values 256b + 128n + 16h + 32k + i (k < 4, i < 16): v[16k + i] */
        float v[64];
#pragma unroll
        for (int k = 0; k < 4; k++) src.run<4>(64 * b + 32 * n + 4 * h + 8 * k, v + 16 * k);
        float amax = 0.f;
#pragma unroll
        for (int k = 0; k < 4; k++)
#pragma unroll
            for (int i = 0; i < 16; i++) amax = fmaxf(amax, fabsf(v[16 * k + i]));
        const int E = code_exp(amax);
        pw0 = pow2f(E / 2);
        pw1 = pow2f(E - E / 2);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float s = 0.f;
#pragma unroll
            for (int i = 0; i < 16; i++) {
                X[16 * k + i] = ldexp2(v[16 * k + i], 149 - 2 * k - 8 * (i & 1) - E);
                s += v[16 * k + i];
            }
            XS[k] = ldexp2(s, 149 - 4 - 8 * (k & 1) - E);
        }
    }
    __device__ float dot(const uint8_t *row, const uint8_t *) const {
        const uint32_t *q = (const uint32_t *)(row + qoff);
        const uint32_t *sp = (const uint32_t *)(row + soff);
        const uint32_t s0 = sp[0], s1 = sp[1], dd = *(const uint32_t *)(row + doff);
        float a[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const uint32_t w = q[j], ws = w >> 16;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float &s = a[k];
                s = fmaf(bits_f(w & (3u << (2 * k))), X[16 * k + 4 * j], s);
                s = fmaf(bits_f(w & (3u << (8 + 2 * k))), X[16 * k + 4 * j + 1], s);
                s = fmaf(bits_f(ws & (3u << (2 * k))), X[16 * k + 4 * j + 2], s);
                s = fmaf(bits_f(ws & (3u << (8 + 2 * k))), X[16 * k + 4 * j + 3], s);
            }
        }
        /* scale bytes of k = 0..3: scales[8n + h], [8n + 2 + h], [8n + 4 + h], [8n + 6 + h] */
        const uint32_t G = __byte_perm(s0, s1, ssel), Gs = G >> 16;
        const uint32_t sc = G & 0x0F0F0F0Fu;
        float P = byte_f<0>(sc, MAGIC_U8) * a[0];
        P = fmaf(byte_f<1>(sc, MAGIC_U8), a[1], P);
        P = fmaf(byte_f<2>(sc, MAGIC_U8), a[2], P);
        P = fmaf(byte_f<3>(sc, MAGIC_U8), a[3], P);
        float M = bits_f(G & 0xF0u) * XS[0];
        M = fmaf(bits_f(G & 0xF000u), XS[1], M);
        M = fmaf(bits_f(Gs & 0xF0u), XS[2], M);
        M = fmaf(bits_f(Gs & 0xF000u), XS[3], M);
        return fmaf(h2f(dd), P, -h2f(dd >> 16) * M) * pw0 * pw1;
    }
};

template <> struct unit<NF_TYPE_IQ2_XXS> {
    /* block u/8 (66 bytes: f16 d, 8 groups of 8 bytes), group g = u%8 (values 32g .. 32g+31): a u32 of four grid
     * indices, a u32 of four 7-bit sign indices (top 4 bits: scale s, db = d * (0.5 + s) / 4). A value is the
     * denormal sign * grid byte * 2^-149, built by one prmt: grid byte (8, 25 or 43) into byte 0, zeros (the
     * replicated sign of that byte) into bytes 1 and 2, the weight's byte of a sign word (0x80 or 0) into byte 3.
     * The sign words come from the table's nibble-reversed pattern by one multiply and one AND per 4 weights. */
    static constexpr int COLS = 32;
    float X[32];
    float pw0, pw1;
    int blk, base, sh;
    static constexpr int XSHIFT = 3;
    __device__ void init(const xsrc &src, int u, int) {
        const int b = u >> 3, g = u & 7;
        const int odd = !(b & 1); /* group bytes start at 66b + 2 + 8g: 4-aligned for odd b */
        sh = 16 * odd;
        blk = 66 * b;
        base = blk + 2 + 8 * g - 2 * odd;
        float xs[32]; /* values 256b + 32g + i = 32u + i */
        src.run<8>(8 * u, xs);
        float amax = 0.f;
#pragma unroll
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(xs[i]));
        const int E = code_exp(amax);
        pw0 = pow2f(E / 2);
        pw1 = pow2f(E - E / 2);
#pragma unroll
        for (int i = 0; i < 32; i++) X[i] = ldexp2(xs[i], 149 - E);
    }
    __device__ float dot(const uint8_t *row, const uint8_t *tab) const {
        const uint8_t *p = row + base;
        const uint32_t idx = ld32_at(p, 0, sh), aux = ld32_at(p, 1, sh);
        const uint32_t dbits = *(const uint16_t *)(row + blk);
        float acc[4];
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const uint2 gv = *(const uint2 *)(tab + IQ2_GRID_AT + 8 * __byte_perm(idx, 0, 0x4440 + l));
            const uint32_t e = tab[IQ2_SIGNS_AT + ((aux >> (7 * l)) & 127)];
            const uint32_t slo = iq2_sign_lo(e), shi = iq2_sign_hi(e);
            float a = 0.f;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const uint32_t sel = k | ((8 | k) << 4) | ((8 | k) << 8) | ((4 + k) << 12);
                a = fmaf(bits_f(prmt(gv.x, slo, sel)), X[8 * l + k], a);
                a = fmaf(bits_f(prmt(gv.y, shi, sel)), X[8 * l + 4 + k], a);
            }
            acc[l] = a;
        }
        const float db = h2f(dbits) * (0.5f + (float)(aux >> 28)) * 0.25f;
        return db * ((acc[0] + acc[1]) + (acc[2] + acc[3])) * pw0 * pw1;
    }
};

/* ---- the streaming kernel ---- */
struct gemv_params {
    const uint8_t *w[NF_CUDA_GEMV_MAX_MATS];
    float *y[NF_CUDA_GEMV_MAX_MATS];
    size_t row_bytes, slice_bytes;
    int64_t rows;
    const float *x[NF_CUDA_GEMV_MAX_MATS]; /* activations of matrix m */
    const float *xup;        /* SwiGLU(x, xup) as the row is staged (see nf_gemv_job) */
    float act_limit;
    int xnorm;               /* f32: RMS-normalise the activation row first (see nf_gemv_job) */
    float xnorm_eps;
    int64_t ldx, ldy;
    const int32_t *ids;
    int ids_settled;         /* see nf_gemv_job */
    int wait_first;          /* NF_CUDA_GEMV_EARLY=off: wait for the predecessor before any copy (A/B) */
    int xdiv, smod, nvec;
    int units, tpr, wpr;     /* units per row, threads per row group (a multiple of 32), its warps */
    int batch_rows;          /* G * R */
    int64_t nbatches;
    int stage_bytes;         /* batch_rows * row_bytes */
    int nst;                 /* stages: nst - 1 batches in flight while one is decoded */
    /* matrices of different heights on one vector (nf_gemv_job.mrows): nflat > 0 matrices, matrix m's batches
     * are [bstart[m], bstart[m + 1]) of the one sequence, its rows mrows[m]; 0: every problem has `rows` rows */
    int nflat;
    int64_t bstart[NF_CUDA_GEMV_MAX_MATS], mrows[NF_CUDA_GEMV_MAX_MATS];
    int stage_x, xchunks;    /* copy the activation row (xchunks 16-byte chunks) through the last stage */
    size_t ring_bytes;       /* the stages, the last one extended to hold the activation row when it is longer */
};

/* Where batch b of a CTA's problem lies: its matrix's weights and output, its first row and the matrix's rows.
 * A flat job numbers the batches of all its matrices in one sequence (gemv_params.nflat). */
struct batch_at {
    const uint8_t *w;
    float *y;
    int64_t r0, rows;
};
__device__ __forceinline__ batch_at locate(const gemv_params &p, const uint8_t *W, float *y, int64_t b) {
    if (!p.nflat) return {W, y, b * p.batch_rows, p.rows};
    int m = 0;
#pragma unroll
    for (int i = 1; i < NF_CUDA_GEMV_MAX_MATS; i++) m += i < p.nflat && b >= p.bstart[i];
    return {p.w[m], p.y[m], (b - p.bstart[m]) * p.batch_rows, p.mrows[m]};
}

/* The R partial sums of a warp, reduced across its 32 lanes: afterwards lane l holds the sum of row
 * l >> (5 - log2 R). The additions form the plain xor butterfly (16, 8, 4, 2, 1) for every R. */
template <int R> __device__ __forceinline__ float warp_rows(float (&a)[R], int lane) {
    int n = R;
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1) {
        if (n > 1) {
            const bool up = lane & o;
            const int hn = n / 2;
#pragma unroll
            for (int i = 0; i < R / 2; i++) {
                if (i < hn) {
                    const float send = up ? a[i] : a[i + hn], keep = up ? a[i + hn] : a[i];
                    a[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
                }
            }
            n = hn;
        } else {
            a[0] += __shfl_xor_sync(0xffffffffu, a[0], o);
        }
    }
    return a[0];
}

/* The CTA's share of a job: problem `prob`, batches b0, b0 + bstep, ... (gemv_stream: blockIdx.y, blockIdx.x,
 * gridDim.x; gemv_pair: its part's numbering). smem: the dynamic shared memory. */
template <int TY, int R>
__device__ __forceinline__ void stream_job(const gemv_params &p, uint8_t *smem, int prob, int64_t b0, int64_t bstep) {
    uint8_t *tab = smem;
    uint8_t *stage = tab + table_bytes(TY);
    float *red = (float *)(stage + p.ring_bytes); /* [warps][R] */
    const int tid = threadIdx.x, nthreads = blockDim.x, lane = tid & 31, warp = tid >> 5;
    const int mat = prob / p.nvec, v = prob % p.nvec;
    /* PDL (cuda_launch.h): the routed experts' ids come from the router kernel, so those jobs wait first unless
     * the router ran two or more launches earlier (ids_settled: it has completed, the ids are read through L2);
     * the others read only weights until the wait below, and the first stages of their copies overlap the
     * kernels before them */
    const bool early = (!p.ids || p.ids_settled) && !p.wait_first;
    if (!early) nf_pdl_wait();
    const int slice = p.ids ? (p.ids_settled ? __ldcg(p.ids + v) : p.ids[v]) : v % p.smod;
    const uint8_t *W = p.w[mat] + (size_t)slice * p.slice_bytes;
    float *y = p.y[mat] + (size_t)v * p.ldy;

    /* batch b -> its stage: rows [b * batch_rows, ...) are one contiguous byte range */
    auto issue = [&](int64_t b, int st) {
        if (b < p.nbatches) {
            const batch_at a = locate(p, W, y, b);
            const int64_t nr = a.rows - a.r0 < p.batch_rows ? a.rows - a.r0 : p.batch_rows;
            const uint8_t *src = a.w + (size_t)a.r0 * p.row_bytes;
            uint8_t *dst = stage + (size_t)st * p.stage_bytes;
            const int chunks = (int)((size_t)nr * p.row_bytes / 16);
            for (int c = tid; c < chunks; c += nthreads) __pipeline_memcpy_async(dst + 16 * c, src + 16 * (size_t)c, 16);
        }
        __pipeline_commit();
    };
    const int nst = p.nst;
    for (int i = 0; i < nst - 1; i++) issue(b0 + i * bstep, i);

    if constexpr (TY == NF_TYPE_IQ2_XXS) {
        for (int i = tid; i < 256; i += nthreads) ((uint64_t *)(tab + IQ2_GRID_AT))[i] = g_iq2_grid[i];
        for (int i = tid; i < 128; i += nthreads) tab[IQ2_SIGNS_AT + i] = (uint8_t)iq2_nibble_rev(g_iq2_signs[i]);
    }
    if (early) nf_pdl_wait();
    nf_pdl_release();
    const int g = tid / p.tpr, u = tid % p.tpr;
    const bool active = u < p.units;
    unit<TY> U;
    const size_t xoff = (size_t)(v / p.xdiv) * p.ldx;
    xsrc xs = {p.x[mat] + xoff, nullptr, unit<TY>::XSHIFT};
    /* the activation row through shared memory (see xsrc), in the last stage (extended past the ring's end when
     * the row is longer than a stage: see ring_bytes): the loop below fills that stage first */
    const bool stage_x = unit<TY>::XSHIFT >= 0 && p.stage_x;
    constexpr int XS = unit<TY>::XSHIFT >= 0 ? unit<TY>::XSHIFT : 0; /* the swizzle's shift (float formats never stage) */
    if (stage_x) {
        float4 *dst = (float4 *)(stage + (size_t)(nst - 1) * p.stage_bytes);
        const float4 *src = (const float4 *)xs.g;
        if (p.xup) {
            const float4 *up = (const float4 *)(p.xup + xoff);
            for (int c = tid; c < p.xchunks; c += nthreads) {
                const float4 a = src[c], b = up[c];
                dst[c ^ ((c >> XS) & 7)] =
                    make_float4(nf_d_swiglu(a.x, b.x, p.act_limit), nf_d_swiglu(a.y, b.y, p.act_limit),
                                nf_d_swiglu(a.z, b.z, p.act_limit), nf_d_swiglu(a.w, b.w, p.act_limit));
            }
        } else {
            for (int c = tid; c < p.xchunks; c += nthreads) dst[c ^ ((c >> XS) & 7)] = src[c];
        }
        xs.s = dst;
        __syncthreads();
    }
    if (active) U.init(xs, u, p.units);
    if (stage_x) __syncthreads(); /* every thread has its values before the stage is refilled */
    if constexpr (TY == NF_TYPE_F32) {
        if (p.xnorm) { /* one row group of `units` threads (nf_cuda_gemv_norms_x) */
            /* the 32 doubles of the sum in the row-reduction area (>= 512 bytes, 8-byte aligned, unused until the
             * first batch): a static __shared__ array would push the kernel past the opt-in limit that
             * nf_cuda_gemv_init gives every kernel as dynamic shared memory (cudaFuncSetAttribute failed) */
            double ss[2] = {0.0, 0.0}; /* the sums of rmsnorm_kernel's threads u and u + units */
            if (active) U.sumsq_pair(ss[0], ss[1]);
            const float r = nf_d_rms_inv(nf_d_block_sum_k<2>(ss, (double *)red), p.units * unit<TY>::COLS, p.xnorm_eps);
            if (active) U.scale(r);
        }
    }

    int k = 0;
    for (int64_t b = b0; b < p.nbatches; b += bstep, k++) {
        issue(b + (nst - 1) * bstep, (k + nst - 1) % nst);
        switch (nst) { /* this batch's copies have landed: at most nst - 1 younger groups pending */
        case 3: __pipeline_wait_prior(2); break;
        case 4: __pipeline_wait_prior(3); break;
        case 5: __pipeline_wait_prior(4); break;
        case 6: __pipeline_wait_prior(5); break;
        case 7: __pipeline_wait_prior(6); break;
        default: __pipeline_wait_prior(7); break;
        }
        __syncthreads();
        const uint8_t *mine = stage + (size_t)(k % nst) * p.stage_bytes + (size_t)g * R * p.row_bytes;
        /* one branch per batch, not per row: the R rows' decodes form one block the compiler can interleave */
        float acc[R];
        if (active) {
#pragma unroll
            for (int r = 0; r < R; r++) acc[r] = U.dot(mine + (size_t)r * p.row_bytes, tab);
        } else {
#pragma unroll
            for (int r = 0; r < R; r++) acc[r] = 0.f;
        }
        const float s = warp_rows<R>(acc, lane);
        constexpr int LR = R == 8 ? 3 : R == 4 ? 2 : R == 2 ? 1 : 0;
        if ((lane & ((32 >> LR) - 1)) == 0) red[warp * R + (lane >> (5 - LR))] = s;
        __syncthreads();
        if (tid < p.batch_rows) {
            const int gg = tid / R, r = tid % R;
            float t = red[gg * p.wpr * R + r];
            for (int w = 1; w < p.wpr; w++) t += red[(gg * p.wpr + w) * R + r];
            const batch_at a = locate(p, W, y, b);
            const int64_t row = a.r0 + tid;
            if (row < a.rows) a.y[row] = t;
        }
    }
    __pipeline_wait_prior(0);
}

template <int TY, int R>
__global__ void __launch_bounds__(GEMV_MAX_THREADS) gemv_stream(const gemv_params p) {
    extern __shared__ float sh[];
    stream_job<TY, R>(p, (uint8_t *)sh, (int)blockIdx.y, blockIdx.x, gridDim.x);
}

/* Two jobs in one launch (nf_cuda_gemv_run_pair), of formats TA and TB: `total` CTAs of which nb run job b,
 * spread evenly over the grid (CTA i is b's when floor((i + 1) nb / total) > floor(i nb / total), so the block
 * scheduler puts CTAs of both kinds on every SM: a 2-bit job that is bound by its decode instructions and a Q8_0
 * job that is bound by its loads overlap there). Each job's problems get per_a (per_b) CTAs each, numbered as
 * gemv_stream's grid would number them, so every row has the bits of the job's own launch. */
struct pair_grid {
    int64_t total, nb;
    int per_a, per_b;
};
template <int TA, int RA, int TB, int RB>
__global__ void __launch_bounds__(GEMV_MAX_THREADS) gemv_pair(const gemv_params a, const gemv_params b, const pair_grid g) {
    extern __shared__ float sh[];
    const int64_t i = blockIdx.x, before = i * g.nb / g.total; /* b's CTAs before this one */
    if ((i + 1) * g.nb / g.total > before)
        stream_job<TB, RB>(b, (uint8_t *)sh, (int)(before / g.per_b), before % g.per_b, g.per_b);
    else
        stream_job<TA, RA>(a, (uint8_t *)sh, (int)((i - before) / g.per_a), (i - before) % g.per_a, g.per_a);
}

/* ---- the plain kernel: one warp per row, any shape the format allows ---- */
template <int TY> __device__ float plain_block(const uint8_t *row, int64_t i, const float *x);

template <> __device__ float plain_block<NF_TYPE_F32>(const uint8_t *row, int64_t i, const float *x) {
    return ((const float *)row)[i] * __ldg(x + i);
}
template <> __device__ float plain_block<NF_TYPE_F16>(const uint8_t *row, int64_t i, const float *x) {
    return h2f(((const uint16_t *)row)[i]) * __ldg(x + i);
}
template <> __device__ float plain_block<NF_TYPE_BF16>(const uint8_t *row, int64_t i, const float *x) {
    return __uint_as_float((uint32_t)((const uint16_t *)row)[i] << 16) * __ldg(x + i);
}
__device__ __forceinline__ float ld_h(const uint8_t *p) { return h2f((uint32_t)p[0] | ((uint32_t)p[1] << 8)); }
template <> __device__ float plain_block<NF_TYPE_Q8_0>(const uint8_t *row, int64_t i, const float *x) {
    const uint8_t *b = row + (size_t)i * 34;
    const float *xs = x + 32 * i;
    float s = 0.f;
    for (int l = 0; l < 32; l++) s = fmaf((float)(int8_t)b[2 + l], __ldg(xs + l), s);
    return ld_h(b) * s;
}
template <> __device__ float plain_block<NF_TYPE_Q4_K>(const uint8_t *row, int64_t i, const float *x) {
    const uint8_t *b = row + (size_t)i * 144, *q = b + 4;
    const float *xs = x + 256 * i;
    float r = 0.f;
    for (int j = 0; j < 8; j++) {
        int sc, m;
        if (j < 4) {
            sc = q[j] & 63;
            m = q[j + 4] & 63;
        } else {
            sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
            m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
        }
        const uint8_t *qs = b + 16 + 32 * (j / 2);
        float s = 0.f, sx = 0.f;
        for (int l = 0; l < 32; l++) {
            const float xv = __ldg(xs + 32 * j + l);
            s = fmaf((float)((qs[l] >> (4 * (j & 1))) & 0xF), xv, s);
            sx += xv;
        }
        r += ld_h(b) * (float)sc * s - ld_h(b + 2) * (float)m * sx;
    }
    return r;
}
template <> __device__ float plain_block<NF_TYPE_Q6_K>(const uint8_t *row, int64_t i, const float *x) {
    const uint8_t *b = row + (size_t)i * 210;
    const float *xs = x + 256 * i;
    float r = 0.f;
    for (int j = 0; j < 16; j++) {
        const int n = j / 8, qq = (j % 8) / 2, h = j % 2;
        float s = 0.f;
        for (int l = 16 * h; l < 16 * h + 16; l++) {
            const uint8_t lo = b[64 * n + l + 32 * (qq & 1)];
            const int q = ((qq >= 2 ? lo >> 4 : lo & 0xF) | (((b[128 + 32 * n + l] >> (2 * qq)) & 3) << 4)) - 32;
            s = fmaf((float)q, __ldg(xs + 128 * n + 32 * qq + l), s);
        }
        r = fmaf((float)(int8_t)b[192 + 8 * n + 2 * qq + h], s, r);
    }
    return ld_h(b + 208) * r;
}
template <> __device__ float plain_block<NF_TYPE_Q2_K>(const uint8_t *row, int64_t i, const float *x) {
    const uint8_t *b = row + (size_t)i * 84;
    const float *xs = x + 256 * i;
    float a = 0.f, mx = 0.f;
    for (int j = 0; j < 16; j++) {
        const int n = j / 8, k = (j % 8) / 2, h = j % 2;
        float s = 0.f, sx = 0.f;
        for (int l = 16 * h; l < 16 * h + 16; l++) {
            const float xv = __ldg(xs + 128 * n + 32 * k + l);
            s = fmaf((float)((b[16 + 32 * n + l] >> (2 * k)) & 3), xv, s);
            sx += xv;
        }
        a = fmaf((float)(b[j] & 0xF), s, a);
        mx = fmaf((float)(b[j] >> 4), sx, mx);
    }
    return ld_h(b + 80) * a - ld_h(b + 82) * mx;
}
template <> __device__ float plain_block<NF_TYPE_IQ2_XXS>(const uint8_t *row, int64_t i, const float *x) {
    const uint8_t *b = row + (size_t)i * 66;
    const float *xs = x + 256 * i;
    float r = 0.f;
    for (int g = 0; g < 8; g++) {
        const uint8_t *q = b + 2 + 8 * g;
        const uint32_t idx = (uint32_t)q[0] | ((uint32_t)q[1] << 8) | ((uint32_t)q[2] << 16) | ((uint32_t)q[3] << 24);
        const uint32_t aux = (uint32_t)q[4] | ((uint32_t)q[5] << 8) | ((uint32_t)q[6] << 16) | ((uint32_t)q[7] << 24);
        float s = 0.f;
        for (int l = 0; l < 4; l++) {
            const uint64_t grid = g_iq2_grid[(idx >> (8 * l)) & 0xff];
            const uint8_t sg = g_iq2_signs[(aux >> (7 * l)) & 127];
            for (int k = 0; k < 8; k++) {
                const float w = (float)((grid >> (8 * k)) & 0xff);
                s = fmaf((sg >> k) & 1 ? -w : w, __ldg(xs + 32 * g + 8 * l + k), s);
            }
        }
        r = fmaf(ld_h(b) * (0.5f + (float)(aux >> 28)) * 0.25f, s, r);
    }
    return r;
}

/* A group of `lanes` lanes (a power of two, 1..32) per row, 32 / lanes rows per warp: rows of fewer than 32 blocks
 * (e.g. a 128-wide Q8_0 row, 4 blocks) keep every lane busy. The butterfly runs over the group only; the lanes it
 * leaves out would only have added zeros, so a row's sum is the same as with 32 lanes. */
template <int TY>
__global__ void gemv_plain(const gemv_params p, int64_t nblocks, int lanes) {
    NF_PDL_ENTER();
    const int lane = threadIdx.x, l = lane & (lanes - 1);
    const int64_t r = ((int64_t)blockIdx.x * 4 + threadIdx.y) * (32 / lanes) + lane / lanes;
    const int prob = blockIdx.y, mat = prob / p.nvec, v = prob % p.nvec;
    float s = 0.f;
    if (r < p.rows) {
        const int slice = p.ids ? p.ids[v] : v % p.smod;
        const uint8_t *row = p.w[mat] + (size_t)slice * p.slice_bytes + (size_t)r * p.row_bytes;
        const float *x = p.x[mat] + (size_t)(v / p.xdiv) * p.ldx;
        for (int64_t i = l; i < nblocks; i += lanes) s += plain_block<TY>(row, i, x);
    }
    for (int o = lanes / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (l == 0 && r < p.rows) p.y[mat][(size_t)v * p.ldy + r] = s;
}

/* ---- host side ---- */
typedef void (*stream_fn)(const gemv_params);
struct stream_kernels {
    uint32_t type;
    int cols;                 /* per unit */
    int stages_x;             /* its units read the activation through the shared copy (XSHIFT >= 0) */
    stream_fn k[4];           /* R = 1, 2, 4, 8 */
};
#define KSET(T) {T, unit<T>::COLS, unit<T>::XSHIFT >= 0, {gemv_stream<T, 1>, gemv_stream<T, 2>, gemv_stream<T, 4>, gemv_stream<T, 8>}}
static const stream_kernels k_stream[] = {KSET(NF_TYPE_F32),  KSET(NF_TYPE_F16),  KSET(NF_TYPE_BF16),
                                          KSET(NF_TYPE_Q8_0), KSET(NF_TYPE_Q4_K), KSET(NF_TYPE_Q6_K),
                                          KSET(NF_TYPE_Q2_K), KSET(NF_TYPE_IQ2_XXS)};
#define N_STREAM ((int)(sizeof k_stream / sizeof k_stream[0]))

static long g_pair_bshare = 0; /* NF_GEMV_PAIR_BSHARE, read by nf_cuda_gemv_init */

typedef void (*pair_fn)(const gemv_params, const gemv_params, const pair_grid);
/* R of either job in a pair: 1, 2 or 4 (a pair's plans are capped at 4 rows) */
#define PAIR_R(TA, TB, RA) {gemv_pair<TA, RA, TB, 1>, gemv_pair<TA, RA, TB, 2>, gemv_pair<TA, RA, TB, 4>}
#define PSET(TA, TB) {TA, TB, {PAIR_R(TA, TB, 1), PAIR_R(TA, TB, 2), PAIR_R(TA, TB, 4)}}
struct pair_kernels {
    uint32_t ta, tb;
    pair_fn k[3][3]; /* [log2 RA][log2 RB] */
};
/* the MoE's pairs (a: routed experts, b: the shared expert) of the q2, q4 and q8 recipes */
static const pair_kernels k_pair[] = {PSET(NF_TYPE_IQ2_XXS, NF_TYPE_Q8_0), PSET(NF_TYPE_Q2_K, NF_TYPE_Q8_0),
                                      PSET(NF_TYPE_Q4_K, NF_TYPE_Q8_0), PSET(NF_TYPE_Q8_0, NF_TYPE_Q8_0)};
#define N_PAIR ((int)(sizeof k_pair / sizeof k_pair[0]))
#define PAIR_RMAX 4

static int g_sms = 0, g_smem_optin = 0; /* set by nf_cuda_gemv_init */
/* Plan overrides for tuning runs on the GPU (read by nf_cuda_gemv_init; 0 = the built-in choice):
 * NF_GEMV_FLIGHT bytes in flight per SM (4096 .. 1048576), NF_GEMV_CTA threads per CTA (64 .. 512, a multiple
 * of 32), NF_GEMV_RMAX the largest rows per row group and batch (1, 2, 4 or 8). */
static long g_flight_goal = GEMV_FLIGHT_GOAL;
static int g_cta_override = 0, g_rmax_override = 0;
static int env_int(const char *name, long lo, long hi, long *out) {
    const char *e = getenv(name);
    if (!e || !*e) return 0;
    char *end = nullptr;
    const long v = strtol(e, &end, 10);
    if (*end || v < lo || v > hi) return nf_fail("cuda gemv: %s=%s is not an integer in %ld..%ld", name, e, lo, hi);
    *out = v;
    return 0;
}

/* NF_GEMV_STAGE_X=off reads the activations straight from global memory (A/B of the staging) */
static int getenv_stage_x(void) {
    static int cache = -1;
    return nf_cuda_env_switch(&cache, "NF_GEMV_STAGE_X", "off");
}
/* NF_GEMV_XRING=off stages the activation row only when it fits one stage (the plans before the ring extension,
 * for an A/B): rows of 8192+ columns (KDA's and MLA's output projections, the dense FFN's down) then read it
 * from global memory, one L1 wavefront per value */
static int getenv_xring(void) {
    static int cache = -1;
    return nf_cuda_env_switch(&cache, "NF_GEMV_XRING", "off");
}
/* NF_CUDA_GEMV_EARLY=off: every streaming GEMV waits for its predecessor before its first weight copy. From
 * c909661 (session 4) to session 18 the kernel began with NF_PDL_ENTER(), a wait, so the copies the comments
 * describe as overlapping the kernels before never did; the switch keeps that order for the A/B. Measured on the H100
 * (session 18, glm53@32:q2): decode 135.33 t/s with the early copies, 127.55 without (+6.1% by the medians of three
 * alternating runs, the same greedy tokens; docs/benchmarks.md). */
static int getenv_early(void) {
    static int cache = -1;
    return nf_cuda_env_switch(&cache, "NF_CUDA_GEMV_EARLY", "off");
}
/* NF_GEMV_PLAN=1 prints each distinct job shape's plan once to stderr (tuning runs) */
static int getenv_plan_log(void) {
    static int cache = -1;
    if (cache < 0) {
        const char *e = getenv("NF_GEMV_PLAN");
        cache = e && *e && strcmp(e, "0") != 0;
    }
    return cache;
}

static const stream_kernels *kernels_of(uint32_t type) {
    for (int i = 0; i < N_STREAM; i++)
        if (k_stream[i].type == type) return &k_stream[i];
    return nullptr;
}

extern "C" int nf_cuda_gemv_init(void) {
    if (nf_cuda_gemv_iq2_init() < 0) return -1;
    cudaError_t e = cudaMemcpyToSymbol(g_iq2_grid, nf_iq2xxs_grid, sizeof(g_iq2_grid));
    if (e == cudaSuccess) e = cudaMemcpyToSymbol(g_iq2_signs, nf_iq2_ksigns, sizeof(g_iq2_signs));
    int dev = 0;
    if (e == cudaSuccess) e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, dev);
    int smem_max = 0;
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    /* all of the SM's L1/shared storage as shared memory: the kernels use no L1 to speak of, and a smaller
     * carveout could hold fewer CTAs than the occupancy the grid is sized for */
    auto full_smem = [&](const void *k) {
        if (e == cudaSuccess) e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_max);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
    };
    for (int i = 0; i < N_STREAM; i++)
        for (int r = 0; r < 4; r++) full_smem((const void *)k_stream[i].k[r]);
    for (int i = 0; i < N_PAIR; i++)
        for (int ra = 0; ra < 3; ra++)
            for (int rb = 0; rb < 3; rb++) full_smem((const void *)k_pair[i].k[ra][rb]);
    g_smem_optin = smem_max;
    long cta = 0, rmax = 0;
    if (env_int("NF_GEMV_FLIGHT", 4096, 1048576, &g_flight_goal) < 0 || env_int("NF_GEMV_CTA", 64, GEMV_MAX_THREADS, &cta) < 0 ||
        env_int("NF_GEMV_RMAX", 1, 8, &rmax) < 0 || env_int("NF_GEMV_PAIR_BSHARE", 1, 99, &g_pair_bshare) < 0)
        return -1;
    if (cta % 32 || (rmax & (rmax - 1))) return nf_fail("cuda gemv: NF_GEMV_CTA must be a multiple of 32, NF_GEMV_RMAX 1, 2, 4 or 8");
    g_cta_override = (int)cta;
    g_rmax_override = (int)rmax;
    if (e != cudaSuccess) return nf_fail("cuda gemv init: %s", cudaGetErrorString(e));
    if (g_sms <= 0) g_sms = 1;
    return 0;
}

extern "C" int nf_cuda_gemv_supports(uint32_t type) { return kernels_of(type) != nullptr; }

/* Geometry of the streaming kernel for a job, or 0 when it does not take it. Batch rows (R per row group) and
 * stages are chosen, for each (format, row length, largest R the job's size allows), to keep at least
 * GEMV_FLIGHT_GOAL (or NF_GEMV_FLIGHT) bytes in flight per SM at the occupancy the runtime computes (registers, shared memory),
 * then to hold the most CTAs per SM, then to take the largest batches (fewer barriers per byte). */
/* matrices of a job: the leading non-NULL w[] */

/* a flat job: matrices of different heights on one vector (nf_gemv_job.mrows) */
static bool is_flat(const nf_gemv_job *j) { return j->mrows[0] > 0; }
/* batches of batch_rows rows the job's launch walks, over all its problems */
static int64_t job_batches(const nf_gemv_job *j, int64_t batch_rows) {
    const int nmat = nf_gemv_job_mats(j);
    if (!is_flat(j)) return (int64_t)nmat * j->nvec * ((j->rows + batch_rows - 1) / batch_rows);
    int64_t n = 0;
    for (int m = 0; m < nmat; m++) n += (j->mrows[m] + batch_rows - 1) / batch_rows;
    return n;
}

struct stream_plan {
    int units, tpr, G, R, threads, nst, per_sm;
    size_t stage, xbytes, ring, smem;
    stream_fn k;
};
/* The stage ring: nst stages, the last one long enough for the staged activation row (xbytes, 0 if none). */
static size_t stream_ring(int nst, size_t stage, size_t xbytes) {
    const size_t ring = (size_t)nst * stage, with_x = (size_t)(nst - 1) * stage + xbytes;
    return with_x > ring ? with_x : ring;
}
static_assert((GEMV_MAX_THREADS / 32) * 8 * sizeof(float) >= 32 * sizeof(double),
              "the row-reduction area holds nf_d_block_sum_k's 32 doubles");
static size_t stream_smem(uint32_t type, int nst, size_t stage, size_t xbytes) {
    return (size_t)table_bytes(type) + stream_ring(nst, stage, xbytes) + (GEMV_MAX_THREADS / 32) * 8 * sizeof(float);
}
static int plan_stream(const nf_gemv_job *j, stream_plan *pl, int rcap = 8) {
    const stream_kernels *ks = kernels_of(j->type);
    const size_t rb = nf_row_bytes(j->type, j->cols);
    if (!ks || rb == 0 || j->cols % ks->cols) return 0;
    if (rb % 16 || j->slice_bytes % 16) return 0;
    for (int m = 0; m < NF_CUDA_GEMV_MAX_MATS && j->w[m]; m++)
        if ((uintptr_t)j->w[m] % 16) return 0;
    pl->units = (int)(j->cols / ks->cols);
    if (pl->units > GEMV_MAX_THREADS) return 0;
    pl->tpr = (pl->units + 31) / 32 * 32;
    const int cta = g_cta_override ? g_cta_override : 256;
    pl->G = pl->tpr >= cta ? 1 : cta / pl->tpr;
    pl->threads = pl->G * pl->tpr;
    if ((size_t)pl->G * rb > GEMV_STAGE_MAX) return 0;
    /* a small job keeps at least two batches per SM where it can (more CTAs busy, a shorter tail) */
    const int64_t sms = g_sms > 0 ? g_sms : 132;
    /* the activation row is staged (when the job's pointers allow it, see nf_cuda_gemv_run) in a last stage
     * extended to its length: the plan counts those bytes, so a long row never falls back to global reads */
    pl->xbytes = ks->stages_x && getenv_stage_x() && getenv_xring() ? (size_t)j->cols * sizeof(float) : 0;
    int rmax = g_rmax_override ? g_rmax_override : 8;
    if (rmax > rcap) rmax = rcap;
    while (rmax > 1 && job_batches(j, pl->G * rmax) < 2 * sms) rmax /= 2;
    static struct {
        uint32_t type;
        int64_t cols;
        int rmax, R, nst, per_sm;
        size_t xbytes;
    } memo[64];
    static int n_memo = 0;
    for (int i = 0; i < n_memo; i++)
        if (memo[i].type == j->type && memo[i].cols == j->cols && memo[i].rmax == rmax) {
            pl->R = memo[i].R;
            pl->nst = memo[i].nst;
            pl->per_sm = memo[i].per_sm;
            pl->xbytes = memo[i].xbytes;
            goto planned;
        }
    for (;;) {
        size_t best_flight = 0;
        int best = 0;
        for (int ri = 0; ri < 4 && (1 << ri) <= rmax; ri++) {
            const size_t stage = (size_t)pl->G * (1 << ri) * rb;
            for (int nst = 3; nst <= GEMV_MAX_STAGES; nst++) {
                const size_t smem = stream_smem(j->type, nst, stage, pl->xbytes);
                if (g_smem_optin > 0 && smem > (size_t)g_smem_optin) break;
                int ctas = 0;
                if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, ks->k[ri], pl->threads, smem) != cudaSuccess) {
                    (void)cudaGetLastError();
                    ctas = 0;
                }
                if (ctas < 1) continue;
                size_t flight = (size_t)ctas * (nst - 1) * stage;
                if (flight > (size_t)g_flight_goal) flight = (size_t)g_flight_goal;
                /* more in flight; then more CTAs; then larger batches (later ri); then fewer stages (earlier nst) */
                if (!best || flight > best_flight || (flight == best_flight && ctas > pl->per_sm) ||
                    (flight == best_flight && ctas == pl->per_sm && (1 << ri) > pl->R)) {
                    best = 1;
                    best_flight = flight;
                    pl->R = 1 << ri;
                    pl->nst = nst;
                    pl->per_sm = ctas;
                }
            }
        }
        /* a row too long to stage with any plan streams with its activations read from global memory */
        if (!best && pl->xbytes) {
            pl->xbytes = 0;
            continue;
        }
        if (!best) return 0;
        if (n_memo < 64) {
            memo[n_memo].type = j->type;
            memo[n_memo].cols = j->cols;
            memo[n_memo].rmax = rmax;
            memo[n_memo].R = pl->R;
            memo[n_memo].nst = pl->nst;
            memo[n_memo].xbytes = pl->xbytes;
            memo[n_memo++].per_sm = pl->per_sm;
        }
        break;
    }
planned:
    pl->stage = (size_t)pl->G * pl->R * rb;
    pl->ring = stream_ring(pl->nst, pl->stage, pl->xbytes);
    pl->smem = stream_smem(j->type, pl->nst, pl->stage, pl->xbytes);
    pl->k = ks->k[pl->R == 1 ? 0 : pl->R == 2 ? 1 : pl->R == 4 ? 2 : 3];
    return 1;
}

extern "C" int nf_cuda_gemv_streams(const nf_gemv_job *j) {
    stream_plan pl;
    return plan_stream(j, &pl);
}

/* NF_GEMV_PLAN: one line per distinct (type, rows, cols, matrices, vectors) */
static void log_plan(const nf_gemv_job *j, int nmat, const stream_plan *pl, int stage_x, int64_t per_prob) {
    static struct { uint32_t type; int64_t rows, cols; int nmat, nvec; } seen[128];
    static int n_seen = 0;
    for (int i = 0; i < n_seen; i++)
        if (seen[i].type == j->type && seen[i].rows == j->rows && seen[i].cols == j->cols && seen[i].nmat == nmat &&
            seen[i].nvec == j->nvec)
            return;
    if (n_seen < 128) {
        seen[n_seen].type = j->type;
        seen[n_seen].rows = j->rows;
        seen[n_seen].cols = j->cols;
        seen[n_seen].nmat = nmat;
        seen[n_seen++].nvec = j->nvec;
    }
    fprintf(stderr,
            "gemv plan: %s %lldx%lld nmat %d nvec %d: units %d G %d R %d threads %d stages %d stage %zu ring %zu smem %zu "
            "ctas/sm %d grid %lldx%d stage_x %d\n",
            nf_type_get(j->type)->name, (long long)j->rows, (long long)j->cols, nmat, j->nvec, pl->units, pl->G, pl->R,
            pl->threads, pl->nst, pl->stage, pl->ring, pl->smem, pl->per_sm, (long long)per_prob, nmat * j->nvec, stage_x);
}

/* the job gives some matrix its own activation rows */

/* The activation row is staged in shared memory (see xsrc): a format that reads it so, the row in the stage ring
 * (one stage, or the extended last one), 16-byte aligned activation rows of every matrix. */
static int stages_x(const nf_gemv_job *j, const stream_plan *pl) {
    const stream_kernels *ks = kernels_of(j->type);
    if (!ks || !ks->stages_x || !getenv_stage_x()) return 0;
    if ((size_t)j->cols * sizeof(float) > pl->stage && !pl->xbytes) return 0;
    if ((j->ldx * (int64_t)sizeof(float)) % 16 || (uintptr_t)j->x % 16 || (uintptr_t)j->xup % 16) return 0;
    for (int m = 0; m < NF_CUDA_GEMV_MAX_MATS; m++)
        if ((uintptr_t)j->xm[m] % 16) return 0;
    return 1;
}

/* The kernel can normalise the job's activation rows itself, bit for bit as rmsnorm_kernel (nf_d_block_sum_k<2>,
 * unit<F32>::sumsq_pair): f32 weights, one row group of `units` threads per CTA, rmsnorm_kernel's block twice
 * that and one pass of its float4 loads (16 x its threads = 32 * units columns: 16384 with 1024 threads, glm53's
 * 4 x 4096 streams), and 16-byte aligned rows (its vec4 sums). */
static int norms_x(const nf_gemv_job *j, const stream_plan *pl) {
    if (j->type != NF_TYPE_F32 || pl->G != 1 || pl->units != pl->threads) return 0;
    const int64_t rt = nf_cuda_row_threads(j->cols);
    if (2 * (int64_t)pl->units != rt || j->cols != 16 * rt) return 0;
    return (uintptr_t)j->x % 16 == 0 && j->ldx % 4 == 0 && !j->xup && !nf_gemv_job_has_xm(j);
}

extern "C" int nf_cuda_gemv_norms_x(const nf_gemv_job *j) {
    if (!g_sms && nf_cuda_gemv_init() < 0) return 0;
    stream_plan pl;
    return plan_stream(j, &pl) && norms_x(j, &pl);
}

extern "C" int nf_cuda_gemv_stages_x(const nf_gemv_job *j) {
    if (!g_sms && nf_cuda_gemv_init() < 0) return 0;
    stream_plan pl;
    return plan_stream(j, &pl) && stages_x(j, &pl);
}

extern "C" nf_gemv_job nf_cuda_gemv_one_of(const nf_gemv_job *flat, int m) {
    nf_gemv_job one = *flat;
    memset(one.w, 0, sizeof one.w);
    memset(one.y, 0, sizeof one.y);
    memset(one.mrows, 0, sizeof one.mrows);
    one.w[0] = flat->w[m];
    one.y[0] = flat->y[m];
    one.rows = flat->mrows[m];
    return one;
}

/* The checks every job passes: 0 to run it, 1 when it has nothing to do, -1 (nf_error) when it is malformed. */
static int job_check(const nf_gemv_job *j) {
    const stream_kernels *ks = kernels_of(j->type);
    const nf_type_info *ti = nf_type_get(j->type);
    if (!ks) return nf_fail("cuda gemv: type %s unsupported", ti->name ? ti->name : "?");
    if (j->cols <= 0 || j->cols % ti->block_size) return nf_fail("cuda gemv: row length %lld does not fit %s", (long long)j->cols, ti->name);
    if (j->nvec <= 0 || (j->rows <= 0 && !is_flat(j))) return 1;
    const int nmat = nf_gemv_job_mats(j);
    if (!nmat || !j->x) return nf_fail("cuda gemv: missing pointer");
    /* the swizzled staging holds one activation row per launch position: no per-matrix rows with it */
    if (j->xup && nf_gemv_job_has_xm(j)) return nf_fail("cuda gemv: a SwiGLU activation with per-matrix activations");
    for (int m = 0; m < nmat; m++)
        if (!j->y[m]) return nf_fail("cuda gemv: missing output %d", m);
    if (!g_sms && nf_cuda_gemv_init() < 0) return -1;
    if ((int64_t)nmat * j->nvec > 65535) return nf_fail("cuda gemv: %d vectors x %d matrices is too many for one launch", j->nvec, nmat);
    if (is_flat(j)) {
        if (j->nvec != 1 || j->ids || j->smod > 1 || j->xup || j->xnorm || nf_gemv_job_has_xm(j))
            return nf_fail("cuda gemv: matrices of different heights take one vector and no ids, xm, xup or xnorm");
        for (int m = 0; m < nmat; m++)
            if (j->mrows[m] <= 0) return nf_fail("cuda gemv: matrix %d of a flat job has %lld rows", m, (long long)j->mrows[m]);
    }
    return 0;
}

/* the kernel arguments of a job that do not depend on the kernel */
static void job_params(const nf_gemv_job *j, gemv_params *p) {
    const int nmat = nf_gemv_job_mats(j);
    memset(p, 0, sizeof *p);
    for (int m = 0; m < NF_CUDA_GEMV_MAX_MATS; m++) {
        p->w[m] = (const uint8_t *)j->w[m < nmat ? m : 0];
        p->y[m] = j->y[m < nmat ? m : 0];
        p->x[m] = m < nmat && j->xm[m] ? j->xm[m] : j->x;
    }
    p->xup = j->xup;
    p->act_limit = j->act_limit;
    p->row_bytes = nf_row_bytes(j->type, j->cols);
    p->slice_bytes = j->slice_bytes;
    p->rows = j->rows;
    p->ldx = j->ldx;
    p->ldy = j->ldy;
    p->ids = j->ids;
    p->ids_settled = j->ids && j->ids_settled;
    p->wait_first = !getenv_early();
    p->xdiv = j->xdiv > 1 ? j->xdiv : 1;
    p->smod = j->smod > 1 ? j->smod : 1;
    p->nvec = j->nvec;
}

/* the streaming kernel's arguments of a job under plan pl; -1 (nf_error) when a fused operation of the job
 * does not fit the plan */
static int stream_params(const nf_gemv_job *j, const stream_plan *pl, gemv_params *p) {
    const int nmat = nf_gemv_job_mats(j);
    p->units = pl->units;
    p->tpr = pl->tpr;
    p->wpr = pl->tpr / 32;
    p->batch_rows = pl->G * pl->R;
    p->nbatches = (j->rows + p->batch_rows - 1) / p->batch_rows;
    if (is_flat(j)) {
        p->nflat = nmat;
        p->rows = 0;
        for (int m = 0; m < nmat; m++) {
            p->mrows[m] = j->mrows[m];
            if (m + 1 < NF_CUDA_GEMV_MAX_MATS) p->bstart[m + 1] = p->bstart[m] + (j->mrows[m] + p->batch_rows - 1) / p->batch_rows;
        }
        p->nbatches = job_batches(j, p->batch_rows);
    }
    p->stage_bytes = (int)pl->stage;
    p->nst = pl->nst;
    p->xchunks = (int)(j->cols / 4);
    p->stage_x = stages_x(j, pl);
    if (j->xup && !p->stage_x) return nf_fail("cuda gemv: a SwiGLU activation needs a job whose row is staged");
    if (j->xnorm && !norms_x(j, pl)) return nf_fail("cuda gemv: this job cannot normalise its activations (nf_cuda_gemv_norms_x)");
    p->xnorm = j->xnorm;
    p->xnorm_eps = j->xnorm_eps;
    p->ring_bytes = pl->ring;
    return 0;
}

/* problems of a streaming job's grid: a flat job's matrices share one */
static int grid_problems(const nf_gemv_job *j) { return is_flat(j) ? 1 : nf_gemv_job_mats(j) * j->nvec; }

/* CTAs per problem when `ctas` are shared by the job's problems: at least one, at most its batches */
static int64_t ctas_per_problem(const gemv_params &p, int64_t ctas, int nprob) {
    int64_t per = ctas / nprob;
    if (per > p.nbatches) per = p.nbatches;
    return per < 1 ? 1 : per;
}

extern "C" int nf_cuda_gemv_run(const nf_gemv_job *j, void *stream) {
    const int chk = job_check(j);
    if (chk) return chk < 0 ? -1 : 0;
    if (nf_cuda_gemv_iq2_takes(j)) return nf_cuda_gemv_iq2_run(j, stream, g_sms, getenv_plan_log());
    if (nf_cuda_gemv_q2k_takes(j)) return nf_cuda_gemv_q2k_run(j, stream, g_sms, getenv_plan_log());
    const nf_type_info *ti = nf_type_get(j->type);
    const int nmat = nf_gemv_job_mats(j);
    if (is_flat(j)) {
        stream_plan pl;
        if (!plan_stream(j, &pl)) { /* the plain kernel takes one height per launch: one launch per matrix */
            for (int m = 0; m < nmat; m++) {
                const nf_gemv_job one = nf_cuda_gemv_one_of(j, m);
                if (nf_cuda_gemv_run(&one, stream) < 0) return -1;
            }
            return 0;
        }
    }
    gemv_params p;
    job_params(j, &p);
    const int nprob = nmat * j->nvec;
    cudaStream_t s = (cudaStream_t)stream;
    stream_plan pl;
    if (plan_stream(j, &pl)) {
        if (stream_params(j, &pl, &p) < 0) return -1;
        /* one wave: as many CTAs as fit on the device at once, shared among the problems (a flat job is one) */
        const int nprob_grid = grid_problems(j);
        const int64_t per_prob = ctas_per_problem(p, (int64_t)g_sms * pl.per_sm, nprob_grid);
        if (getenv_plan_log()) log_plan(j, nmat, &pl, p.stage_x, per_prob);
        nf_launch(pl.k, dim3((unsigned)per_prob, (unsigned)nprob_grid), dim3((unsigned)pl.threads), pl.smem, s, p);
    } else {
        if (j->xup || j->xnorm) return nf_fail("cuda gemv: SwiGLU or normalised activations need the streaming kernel");
        const int64_t nb = j->cols / ti->block_size;
        int lanes = 1;
        while (lanes < 32 && lanes < nb) lanes *= 2;
        const int64_t rows_per_cta = 4 * (32 / lanes);
        const dim3 block(32, 4), grid((unsigned)((j->rows + rows_per_cta - 1) / rows_per_cta), (unsigned)nprob);
        switch (j->type) {
        case NF_TYPE_F32: nf_launch(gemv_plain<NF_TYPE_F32>, grid, block, 0, s, p, nb, lanes); break;
        case NF_TYPE_F16: nf_launch(gemv_plain<NF_TYPE_F16>, grid, block, 0, s, p, nb, lanes); break;
        case NF_TYPE_BF16: nf_launch(gemv_plain<NF_TYPE_BF16>, grid, block, 0, s, p, nb, lanes); break;
        case NF_TYPE_Q8_0: nf_launch(gemv_plain<NF_TYPE_Q8_0>, grid, block, 0, s, p, nb, lanes); break;
        case NF_TYPE_Q4_K: nf_launch(gemv_plain<NF_TYPE_Q4_K>, grid, block, 0, s, p, nb, lanes); break;
        case NF_TYPE_Q6_K: nf_launch(gemv_plain<NF_TYPE_Q6_K>, grid, block, 0, s, p, nb, lanes); break;
        case NF_TYPE_Q2_K: nf_launch(gemv_plain<NF_TYPE_Q2_K>, grid, block, 0, s, p, nb, lanes); break;
        case NF_TYPE_IQ2_XXS: nf_launch(gemv_plain<NF_TYPE_IQ2_XXS>, grid, block, 0, s, p, nb, lanes); break;
        }
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return nf_fail("cuda gemv launch: %s", cudaGetErrorString(e));
    return 0;
}

/* ---- two jobs in one launch ---- */
/* A decode weight cost per byte of each format relative to Q8_0, from the H100 decode table (docs/benchmarks.md,
 * ddeaf23: the routed IQ2_XXS gate+up 876 GB/s, the Q2_K down 1006 GB/s, the large Q8_0 matrices 1900-2500 GB/s):
 * the pair shares its CTAs by bytes times this, so that both jobs end together. NF_GEMV_PAIR_BSHARE=N (1..99)
 * gives job b N% of the CTAs instead (tuning runs). */
static double pair_cost(uint32_t type) {
    switch (type) {
    case NF_TYPE_IQ2_XXS: return 2.5;
    case NF_TYPE_Q2_K: return 2.2;
    case NF_TYPE_Q4_K: case NF_TYPE_Q6_K: return 1.5;
    default: return 1.0;
    }
}

static int log2_r(int r) { return r == 1 ? 0 : r == 2 ? 1 : 2; }

/* How a pair runs as one launch: both jobs streamed (plans capped at PAIR_RMAX rows), with the same threads per
 * CTA, formats with a pair kernel, the larger of their shared memory within the opt-in limit. 0 when not. */
struct pair_plan {
    stream_plan a, b;
    pair_fn k;
    size_t smem;
};
static int plan_pair(const nf_gemv_job *a, const nf_gemv_job *b, pair_plan *pp) {
    if (!plan_stream(a, &pp->a, PAIR_RMAX) || !plan_stream(b, &pp->b, PAIR_RMAX)) return 0;
    if (pp->a.threads != pp->b.threads) return 0;
    pp->k = nullptr;
    for (int i = 0; i < N_PAIR; i++)
        if (k_pair[i].ta == a->type && k_pair[i].tb == b->type) pp->k = k_pair[i].k[log2_r(pp->a.R)][log2_r(pp->b.R)];
    if (!pp->k) return 0;
    pp->smem = pp->a.smem > pp->b.smem ? pp->a.smem : pp->b.smem;
    return g_smem_optin <= 0 || pp->smem <= (size_t)g_smem_optin;
}

/* CTAs of the pair's kernel per SM, asked of the runtime once per (kernel, threads, shared memory): a decode step
 * launches the same few pairs at every MoE layer, and the query is host time on that path (as plan_stream's memo) */
static int pair_occupancy(const pair_plan &pp) {
    static struct {
        pair_fn k;
        int threads, per_sm;
        size_t smem;
    } memo[32];
    static int n_memo = 0;
    for (int i = 0; i < n_memo; i++)
        if (memo[i].k == pp.k && memo[i].threads == pp.a.threads && memo[i].smem == pp.smem) return memo[i].per_sm;
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, pp.k, pp.a.threads, pp.smem) != cudaSuccess || per_sm < 1) {
        (void)cudaGetLastError();
        per_sm = 1;
    }
    if (n_memo < 32) memo[n_memo++] = {pp.k, pp.a.threads, per_sm, pp.smem};
    return per_sm;
}

/* 1 when a warp-per-row kernel (cuda_gemv_iq2.cu, cuda_gemv_q2k.cu) takes the job */
static int nf_cuda_gemv_rows_takes(const nf_gemv_job *j) { return nf_cuda_gemv_iq2_takes(j) || nf_cuda_gemv_q2k_takes(j); }

extern "C" int nf_cuda_gemv_pairs(const nf_gemv_job *a, const nf_gemv_job *b) {
    if (!g_sms && nf_cuda_gemv_init() < 0) return 0;
    if (job_check(a) || job_check(b) || nf_cuda_gemv_rows_takes(a) || nf_cuda_gemv_rows_takes(b)) return 0;
    pair_plan pp;
    return plan_pair(a, b, &pp);
}

extern "C" int nf_cuda_gemv_run_pair(const nf_gemv_job *a, const nf_gemv_job *b, void *stream) {
    const int ca = job_check(a), cb = job_check(b);
    if (ca < 0 || cb < 0) return -1;
    pair_plan pp;
    /* a job of a warp-per-row kernel has no pair kernel: two launches */
    if (ca || cb || nf_cuda_gemv_rows_takes(a) || nf_cuda_gemv_rows_takes(b) || !plan_pair(a, b, &pp))
        return (!ca && nf_cuda_gemv_run(a, stream) < 0) || (!cb && nf_cuda_gemv_run(b, stream) < 0) ? -1 : 0;
    gemv_params pa, pb;
    job_params(a, &pa);
    job_params(b, &pb);
    if (stream_params(a, &pp.a, &pa) < 0 || stream_params(b, &pp.b, &pb) < 0) return -1;
    const int per_sm = pair_occupancy(pp);
    /* one wave shared by cost (pair_cost), each problem of either job at least one CTA */
    const int npa = grid_problems(a), npb = grid_problems(b);
    const int64_t wave = (int64_t)g_sms * per_sm;
    const double costa = pair_cost(a->type) * (double)pa.nbatches * pa.stage_bytes * npa,
                 costb = pair_cost(b->type) * (double)pb.nbatches * pb.stage_bytes * npb;
    const double share = g_pair_bshare ? (double)g_pair_bshare / 100.0 : costb / (costa + costb);
    pair_grid g;
    g.per_b = (int)ctas_per_problem(pb, (int64_t)(share * (double)wave + 0.5), npb);
    g.per_a = (int)ctas_per_problem(pa, wave - (int64_t)g.per_b * npb, npa);
    g.nb = (int64_t)g.per_b * npb;
    g.total = g.nb + (int64_t)g.per_a * npa;
    if (getenv_plan_log()) {
        log_plan(a, nf_gemv_job_mats(a), &pp.a, pa.stage_x, g.per_a);
        log_plan(b, nf_gemv_job_mats(b), &pp.b, pb.stage_x, g.per_b);
        fprintf(stderr, "gemv pair: %s + %s: %lld CTAs (%d x %d, %d x %d), %d per SM, smem %zu\n", nf_type_get(a->type)->name,
                nf_type_get(b->type)->name, (long long)g.total, npa, g.per_a, npb, g.per_b, per_sm, pp.smem);
    }
    nf_launch(pp.k, dim3((unsigned)g.total), dim3((unsigned)pp.a.threads), pp.smem, (cudaStream_t)stream, pa, pb, g);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return nf_fail("cuda gemv pair launch: %s", cudaGetErrorString(e));
    return 0;
}

extern "C" int nf_cuda_gemv_ex(uint32_t type, const void *w, int64_t rows, int64_t cols, size_t slice_bytes,
                               const float *x, int64_t ldx, int xdiv, int smod, const int32_t *ids, float *y,
                               int64_t ldy, int nvec, void *stream) {
    nf_gemv_job j;
    memset(&j, 0, sizeof j);
    j.type = type;
    j.rows = rows;
    j.cols = cols;
    j.slice_bytes = slice_bytes;
    j.w[0] = w;
    j.y[0] = y;
    j.x = x;
    j.ldx = ldx;
    j.xdiv = xdiv;
    j.smod = smod;
    j.ids = ids;
    j.ldy = ldy;
    j.nvec = nvec;
    return nf_cuda_gemv_run(&j, stream);
}

extern "C" int nf_cuda_gemv(uint32_t type, const void *w, const float *x, float *y, int64_t rows, int64_t cols,
                            void *stream) {
    return nf_cuda_gemv_ex(type, w, rows, cols, 0, x, cols, 1, 1, nullptr, y, rows, 1, stream);
}
