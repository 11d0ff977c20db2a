/* cuda_gemv_iq2.cu — the decode product of IQ2_XXS matrices (glm53's routed gate+up in the q2 recipe) with a
 * warp per row, integer dot products and no shared-memory staging of the weights (default since session 20:
 * decode +1.7% on the H100, 4 of 4 alternating pairs faster, the same greedy tokens, docs/benchmarks.md;
 * NF_CUDA_IQ2_ROWS=off gives these jobs back to the streaming kernel).
 *
 * Why: the streaming kernel (cuda_gemv.cu) decodes IQ2_XXS at ~4.96 instructions per weight behind a pipeline of
 * cp.async stages with two barriers per batch; the routed gate+up ran at ~0.33 of a read of its bytes (37.5 us for
 * 34.7 MB on the H100). The lab kernel bench/lab/iq2_dp4a.cu (sx3_priv0_r4: 27.58 us for the same shape, measured
 * in session 16) shows what a warp-per-row kernel without those limits does; this is that kernel, in the engine:
 *  - A warp owns R = 4 rows per step; lane l owns the 64-column chunks l + 32c (c < CPL = cols / 2048): two
 *    32-weight groups of block (l + 32c) / 4 (rows of 2048 or 4096 columns), whose 16 bytes it reads straight from global memory. The blocks are
 *    66 bytes (f16 d, then 8 groups of 8), so a chunk starts 2 bytes past a word for even blocks: the lane reads
 *    the aligned words around it (5 for even blocks, 4 for odd ones) and funnel-shifts them; no repacking, the
 *    weights stay as the GGUF stores them.
 *  - A weight's signed int8 value is one PRMT per 4 weights: per grid point a word of 8 code nibbles
 *    (8, 25, 43 -> 0, 1, 2), per 7-bit sign index a word with bit 4k + 2 set for a negative weight k; their OR
 *    selects from the byte sets {8, 25, 43} and {-8, -25, -43}.
 *  - The activation row, which every vector of the job shares (decode: the k routed experts of one token), is
 *    quantized per 64-column chunk by the CTA to a 24-bit fixed point v = rint(x * (2^23 - 1) / amax) held as three
 *    byte planes in shared memory; the products are dp4a of the weights against each plane, exact integers,
 *    combined in f32 per 32-weight group. The error is at most 2^-24 * amax per activation value (the order of
 *    f32 rounding of the chunk's largest value; test_gemv bounds every row by it), not the streaming kernel's
 *    exact products of the f32 activation: a different rounding of the same sum, as the prefill GEMM's bf16 is.
 * Which jobs it takes: nf_cuda_gemv_iq2_takes. */
#include "cuda/cuda_gemv.h"
#include "cuda/cuda_gemv_rows.h"
#include "cuda/cuda_launch.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "formats/formats.h"

extern const uint64_t nf_iq2xxs_grid[256];
extern const uint8_t nf_iq2_ksigns[128];
int nf_fail(const char *fmt, ...);
}

#define IQ2R_THREADS 256
#define IQ2R_R 4                /* rows per warp step */
#define IQ2R_VPOS 0x002B1908u   /* bytes 8, 25, 43, 0: PRMT selectors 0..2 */
#define IQ2R_VNEG 0x00D5E7F8u   /* bytes -8, -25, -43, 0: selectors 4..6 */

__device__ uint32_t g_iq2r_grid[256]; /* per grid point: 8 code nibbles */
__device__ uint32_t g_iq2r_sign[128]; /* per sign index: bit 4k + 2 for a negative weight k */

/* ---- arithmetic (the emulation's versions below the #else) ---- */
__device__ __forceinline__ uint32_t iq2r_prmt(uint32_t a, uint32_t b, uint32_t sel) {
    return __byte_perm(a, b, sel); /* the selectors never set bit 3 (sign replication): PRMT's default mode */
}
/* nf_rows_params as they are: x is the activation row every vector reads */
typedef nf_rows_params iq2r_params;

/* one 32-weight group: idx = its 4 grid indices, aux = 4 sign indices and the scale s (top 4 bits); xw = the
 * group's activation words [plane][8] (word w: values 4w .. 4w + 3). Returns (2s + 1) * sum(sign * grid * v) in
 * f32: the three plane sums are exact integers (|s2| < 2^18; s1 * 256 + s0 < 2^27 rounds once). */
__device__ __forceinline__ float iq2r_group(uint32_t idx, uint32_t aux, const uint32_t (&xw)[24], const uint32_t *tg,
                                            const uint32_t *ts) {
    int s0 = 0, s1 = 0, s2 = 0;
#pragma unroll
    for (int l = 0; l < 4; l++) {
        const uint32_t t = tg[(idx >> (8 * l)) & 255] | ts[(aux >> (7 * l)) & 127];
        const uint32_t wl = iq2r_prmt(IQ2R_VPOS, IQ2R_VNEG, t & 0xFFFFu), wh = iq2r_prmt(IQ2R_VPOS, IQ2R_VNEG, t >> 16);
        s0 = nf_dp4a_su(wl, xw[2 * l], s0);
        s0 = nf_dp4a_su(wh, xw[2 * l + 1], s0);
        s1 = nf_dp4a_su(wl, xw[8 + 2 * l], s1);
        s1 = nf_dp4a_su(wh, xw[8 + 2 * l + 1], s1);
        s2 = nf_dp4a_ss(wl, xw[16 + 2 * l], s2);
        s2 = nf_dp4a_ss(wh, xw[16 + 2 * l + 1], s2);
    }
    const float k = (float)(2 * (aux >> 28) + 1);
    return __fmul_rn(fmaf((float)s2, 65536.0f, (float)(s1 * 256 + s0)), k);
}

/* A lane's bytes of R rows (chunks l + 32c): the aligned words around each 16-byte chunk and its block's d. */
template <int CPL> struct iq2r_rows {
    uint32_t q[IQ2R_R][CPL][5];
    uint32_t d[IQ2R_R][CPL];
    __device__ __forceinline__ void load(const uint8_t *row0, size_t row_bytes, int lane) {
#pragma unroll
        for (int r = 0; r < IQ2R_R; r++)
#pragma unroll
            for (int c = 0; c < CPL; c++) {
                const int ci = lane + 32 * c, b = ci >> 2;
                const uint8_t *blk = row0 + (size_t)r * row_bytes + 66 * (size_t)b;
                /* the chunk's bytes start at blk + 2 + 16 (ci & 3): a word boundary for odd b (66b = 2 mod 4), 2
                 * past one for even b, whose 5th word (2 bytes past the chunk) is still inside the row: an even
                 * block is never a row's last (rows have an even number of blocks) */
                const uint32_t *p = (const uint32_t *)(blk + 16 * (ci & 3) + ((b & 1) ? 2 : 0));
#pragma unroll
                for (int i = 0; i < 4; i++) q[r][c][i] = __ldg(p + i);
                q[r][c][4] = (b & 1) ? 0u : __ldg(p + 4);
                d[r][c] = __ldg((const uint16_t *)blk);
            }
    }
};

/* Grid: a persistent set of CTAs; warp steps of R consecutive rows of the job's rows numbered (matrix, vector,
 * row) in that order, steps gw, gw + nw, ... */
template <int CPL>
__global__ void __launch_bounds__(IQ2R_THREADS, 2) iq2_rows_kernel(const iq2r_params p) {
    constexpr int NCH = 32 * CPL; /* 64-column chunks of a row */
    __shared__ uint32_t tg[256], ts[128];
    __shared__ uint4 xq[3 * 4 * NCH]; /* quad (plane, q) of chunk c at (plane * 4 + q) * NCH + c */
    __shared__ float xs8[NCH];        /* the value of one activation unit / 8 (the IQ2_XXS 1/8 folded in) */
    __shared__ int32_t slice_of[NF_CUDA_GEMV_MAX_VECTORS];
    const int tid = threadIdx.x, lane = tid & 31;
    for (int i = tid; i < 256; i += IQ2R_THREADS) tg[i] = g_iq2r_grid[i];
    for (int i = tid; i < 128; i += IQ2R_THREADS) ts[i] = g_iq2r_sign[i];
    /* PDL (cuda_launch.h): ids from a kernel two or more launches back (ids_settled) are read before the wait, and
     * then the first step's weights are loaded before it too; fresh ids wait first */
    const bool early = !p.ids || p.ids_settled;
    if (!early) nf_pdl_wait();
    if (tid < p.nvec) slice_of[tid] = p.ids ? (p.ids_settled ? __ldcg(p.ids + tid) : p.ids[tid]) : tid % p.smod;
    __syncthreads();
    const int64_t steps = (int64_t)p.nmat * p.nvec * p.rows / IQ2R_R;
    const int64_t nw = (int64_t)gridDim.x * (IQ2R_THREADS / 32);
    const int64_t gw = (int64_t)blockIdx.x * (IQ2R_THREADS / 32) + (tid >> 5);
    auto row_of = [&](int64_t step, int &m, int &v, int64_t &r0) -> const uint8_t * {
        const int64_t row = step * IQ2R_R, prob = row / p.rows;
        r0 = row % p.rows;
        m = (int)(prob / p.nvec);
        v = (int)(prob % p.nvec);
        return p.w[m] + (size_t)slice_of[v] * p.slice_bytes + (size_t)r0 * p.row_bytes;
    };
    iq2r_rows<CPL> W;
    bool have = false;
    if (early && gw < steps) {
        int m, v;
        int64_t r0;
        W.load(row_of(gw, m, v, r0), p.row_bytes, lane);
        have = true;
    }
    if (early) nf_pdl_wait();
    /* the activation row: 4 threads per chunk, 16 values each (quad q of the chunk: values 16q .. 16q + 15) */
    for (int t = tid; t < 4 * NCH; t += IQ2R_THREADS) {
        const int c = t >> 2, qd = t & 3;
        const float4 *src = (const float4 *)(p.x + 64 * c + 16 * qd);
        float v[16];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float4 f = src[i];
            v[4 * i] = f.x; v[4 * i + 1] = f.y; v[4 * i + 2] = f.z; v[4 * i + 3] = f.w;
        }
        float amax = 0.f;
        int bad = 0; /* an inf or a nan in the chunk: its rows become nan (nf_rows_fold) */
#pragma unroll
        for (int i = 0; i < 16; i++) nf_rows_fold(v[i], amax, bad);
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
        bad |= __shfl_xor_sync(0xffffffffu, bad, 1);
        bad |= __shfl_xor_sync(0xffffffffu, bad, 2);
        float pre, inv;
        nf_rows_scale(amax, &pre, &inv);
        uint32_t pl[3][4] = {};
#pragma unroll
        for (int i = 0; i < 16; i++) {
            const int qi = nf_rows_code(v[i], pre, inv);
#pragma unroll
            for (int b = 0; b < 3; b++) pl[b][i / 4] |= (uint32_t)((qi >> (8 * b)) & 0xFF) << (8 * (i % 4));
        }
#pragma unroll
        for (int b = 0; b < 3; b++) xq[(b * 4 + qd) * NCH + c] = make_uint4(pl[b][0], pl[b][1], pl[b][2], pl[b][3]);
        if (qd == 0) xs8[c] = __fmul_rn(nf_rows_unit(amax, bad), 0.125f);
    }
    __syncthreads();
    nf_pdl_release();
    for (int64_t step = gw; step < steps; step += nw) {
        int m, v;
        int64_t r0;
        const uint8_t *row0 = row_of(step, m, v, r0);
        if (!have) W.load(row0, p.row_bytes, lane);
        have = false;
        float acc[IQ2R_R];
#pragma unroll
        for (int r = 0; r < IQ2R_R; r++) acc[r] = 0.f;
#pragma unroll
        for (int c = 0; c < CPL; c++) {
            const int ci = lane + 32 * c;
            const float sc = xs8[ci];
            float part[IQ2R_R];
#pragma unroll
            for (int r = 0; r < IQ2R_R; r++) part[r] = 0.f;
#pragma unroll
            for (int g = 0; g < 2; g++) {
                uint32_t xw[24];
#pragma unroll
                for (int b = 0; b < 3; b++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const uint4 a = xq[(b * 4 + 2 * g + h) * NCH + ci];
                        xw[8 * b + 4 * h] = a.x; xw[8 * b + 4 * h + 1] = a.y;
                        xw[8 * b + 4 * h + 2] = a.z; xw[8 * b + 4 * h + 3] = a.w;
                    }
#pragma unroll
                for (int r = 0; r < IQ2R_R; r++) {
                    const uint32_t *q = W.q[r][c];
                    const int sh = (ci >> 2) & 1 ? 0 : 16;
                    const uint32_t idx = __funnelshift_r(q[2 * g], q[2 * g + 1], sh),
                                   aux = __funnelshift_r(q[2 * g + 1], q[2 * g + 2], sh);
                    part[r] = __fadd_rn(part[r], iq2r_group(idx, aux, xw, tg, ts));
                }
            }
#pragma unroll
            for (int r = 0; r < IQ2R_R; r++) {
                const float d = __half2float(__ushort_as_half((unsigned short)W.d[r][c]));
                acc[r] = fmaf(__fmul_rn(d, sc), part[r], acc[r]);
            }
        }
#pragma unroll
        for (int r = 0; r < IQ2R_R; r++) {
            float a = acc[r];
#pragma unroll
            for (int o = 16; o >= 1; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
            acc[r] = a;
        }
        if (lane == 0) {
            float *y = p.y[m] + (size_t)v * p.ldy + r0;
#pragma unroll
            for (int r = 0; r < IQ2R_R; r++) y[r] = acc[r];
        }
    }
}

/* ---- host ---- */
static int g_force = -1; /* nf_cuda_gemv_iq2_force */
static int iq2_rows_on(void) {
    if (g_force >= 0) return g_force;
    static int cache = -1;
    return nf_cuda_env_switch(&cache, "NF_CUDA_IQ2_ROWS", "off");
}
extern "C" void nf_cuda_gemv_iq2_force(int on) { g_force = on < 0 ? -1 : !!on; }

extern "C" int nf_cuda_gemv_iq2_init(void) {
    uint32_t grid[256], sign[128];
    for (int e = 0; e < 256; e++) {
        uint32_t w = 0;
        for (int k = 0; k < 8; k++) {
            const uint32_t g = (uint32_t)(nf_iq2xxs_grid[e] >> (8 * k)) & 0xFF;
            if (g != 8 && g != 25 && g != 43) return nf_fail("cuda gemv iq2: grid value %u not in {8, 25, 43}", g);
            w |= (g == 8 ? 0u : g == 25 ? 1u : 2u) << (4 * k);
        }
        grid[e] = w;
    }
    for (int e = 0; e < 128; e++) {
        uint32_t w = 0;
        for (int k = 0; k < 8; k++)
            if (nf_iq2_ksigns[e] >> k & 1) w |= 4u << (4 * k);
        sign[e] = w;
    }
    cudaError_t e = cudaMemcpyToSymbol(g_iq2r_grid, grid, sizeof grid);
    if (e == cudaSuccess) e = cudaMemcpyToSymbol(g_iq2r_sign, sign, sizeof sign);
    if (e != cudaSuccess) return nf_fail("cuda gemv iq2 init: %s", cudaGetErrorString(e));
    return 0;
}

extern "C" int nf_cuda_gemv_iq2_takes(const nf_gemv_job *j) {
    if (!iq2_rows_on() || j->type != NF_TYPE_IQ2_XXS) return 0;
    /* 2048 or 4096 columns: at 8192 the lane's 4 x 4 chunks of words exceed the 128 registers (spills) */
    if (j->cols != 2048 && j->cols != 4096) return 0;
    if (j->xup) return 0;
    /* one activation row for every vector */
    if (j->nvec > 1 && j->xdiv < j->nvec) return 0;
    return nf_rows_job_common(j, IQ2R_R) > 0;
}

extern "C" int nf_cuda_gemv_iq2_run(const nf_gemv_job *j, void *stream, int sms, int plan_log) {
    iq2r_params p;
    memset(&p, 0, sizeof p);
    nf_rows_params_of(j, &p);
    /* one wave of 2 CTAs per SM (the lab's best: more warps were slower) */
    const int64_t ctas = nf_rows_ctas((int64_t)p.nmat * p.nvec * p.rows / IQ2R_R, IQ2R_THREADS, sms);
    if (plan_log)
        fprintf(stderr, "gemv iq2rows: %lld x %lld, %d matrices x %d vectors, %lld CTAs of %d\n", (long long)p.rows,
                (long long)j->cols, p.nmat, p.nvec, (long long)ctas, IQ2R_THREADS);
    const dim3 grid((unsigned)ctas), block(IQ2R_THREADS);
    cudaStream_t s = (cudaStream_t)stream;
    if (j->cols == 2048) nf_launch(iq2_rows_kernel<1>, grid, block, 0, s, p);
    else nf_launch(iq2_rows_kernel<2>, grid, block, 0, s, p);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return nf_fail("cuda gemv iq2 launch: %s", cudaGetErrorString(e));
    return 0;
}
