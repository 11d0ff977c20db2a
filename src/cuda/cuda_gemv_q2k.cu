/* cuda_gemv_q2k.cu — the decode product of Q2_K matrices with rows of 2048 columns (glm53's routed down projection
 * in the q2 recipe, SwiGLU of its activation included) with a warp per row, integer dot products and no shared
 * memory (NF_CUDA_Q2K_ROWS=on; opt-in until measured in the engine).
 *
 * Why: the streaming kernel (cuda_gemv.cu) ran the routed down at ~0.45 of a read of its bytes (19 us for 22.2 MB
 * on the H100, 8% of the decode step); the warp-per-row IQ2_XXS kernel (cuda_gemv_iq2.cu) showed what dropping the
 * cp.async stages and their barriers does for a 2-bit format (37.5 -> 27.0 us). This is the same idea for Q2_K:
 *  - A row of 2048 columns is 8 blocks of 84 bytes (scales[16], qs[64], f16 d, f16 dmin); lane l owns block l / 4,
 *    half n = (l / 2) % 2 of it, and h = l % 2: the 16 qs bytes 16 + 32 n + 16 h, which hold the half's columns
 *    32 j + 16 h + t (t < 16) at bits 2 j, i.e. the four 16-weight sub-blocks 8 n + 2 j + h. Per row a lane reads
 *    7 aligned words (4 of qs, 2 of scales, d and dmin), with no repacking.
 *  - A lane's 64 columns lie in one 128-column half block, so the lane's activation is one chunk of the 24-bit
 *    fixed point (cuda_gemv_rows.h; amax over the half, shared with the neighbour lane l ^ 1) and stays in 48
 *    registers for every row of the same vector: a warp takes a contiguous range of (matrix, vector, rows) steps
 *    and quantizes again only when the vector changes. SwiGLU (xup) is applied while loading, by nf_d_swiglu.
 *  - q * sc fits a byte (3 * 15), so four weights times their sub-block's scale are one multiply of the masked qs
 *    word; three dp4a against the planes give exact integers. The row's value per lane is
 *    unit * (d * sum_j sc_j sum q code - dmin * sum_j m_j sum code), the integer sums exact in 64 bits and rounded
 *    once to f32; then the warp's xor butterfly.
 * The rounding differs from the streaming kernel's f32 products of the f32 activation (test_gemv bounds each row by
 * one activation unit per value on top of f32 rounding). Which jobs it takes: nf_cuda_gemv_q2k_takes. */
#include "cuda/cuda_act.h"
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
int nf_fail(const char *fmt, ...);
}

#define Q2R_THREADS 256
#define Q2R_COLS 2048
#define Q2R_BLOCK 84 /* bytes of a Q2_K block */

struct q2r_params : nf_rows_params {
    const float *xup; /* with x, the activation rows (xup: SwiGLU(x, xup) is the activation) */
    float act_limit;
    int64_t ldx;
    int xdiv;
};

/* a lane's activation: the 24-bit codes of its 64 columns as byte planes, xq[plane][j][k] = the codes of columns
 * 32 j + 16 h + 4 k .. + 3 of its half block; xs[j] = the sum of sub-block j's 16 codes; unit = one code's value */
struct q2r_act {
    uint32_t xq[3][4][4];
    int32_t xs[4];
    float unit;
};

/* lane's activation of vector row xr (and xup row ur when SWIGLU) */
template <bool SWIGLU>
__device__ __forceinline__ void q2r_quantize(q2r_act &a, const float *xr, const float *ur, float limit, int lane) {
    const int b = lane >> 2, n = (lane >> 1) & 1, h = lane & 1;
    const int base = 256 * b + 128 * n + 16 * h;
    float v[4][16];
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float4 g = *(const float4 *)(xr + base + 32 * j + 4 * i);
            v[j][4 * i] = g.x; v[j][4 * i + 1] = g.y; v[j][4 * i + 2] = g.z; v[j][4 * i + 3] = g.w;
            if (SWIGLU) {
                const float4 u = *(const float4 *)(ur + base + 32 * j + 4 * i);
                v[j][4 * i] = nf_d_swiglu(g.x, u.x, limit);
                v[j][4 * i + 1] = nf_d_swiglu(g.y, u.y, limit);
                v[j][4 * i + 2] = nf_d_swiglu(g.z, u.z, limit);
                v[j][4 * i + 3] = nf_d_swiglu(g.w, u.w, limit);
            }
        }
    float amax = 0.f;
    int bad = 0; /* an inf or a nan: the rows become nan (nf_rows_fold) */
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int t = 0; t < 16; t++) nf_rows_fold(v[j][t], amax, bad);
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    bad |= __shfl_xor_sync(0xffffffffu, bad, 1);
    float pre, inv;
    nf_rows_scale(amax, &pre, &inv);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        int s = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint32_t p0 = 0, p1 = 0, p2 = 0;
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int q = nf_rows_code(v[j][4 * k + e], pre, inv);
                s += q;
                p0 |= (uint32_t)(q & 0xFF) << (8 * e);
                p1 |= (uint32_t)((q >> 8) & 0xFF) << (8 * e);
                p2 |= (uint32_t)((q >> 16) & 0xFF) << (8 * e);
            }
            a.xq[0][j][k] = p0;
            a.xq[1][j][k] = p1;
            a.xq[2][j][k] = p2;
        }
        a.xs[j] = s;
    }
    a.unit = nf_rows_unit(amax, bad);
}

/* a lane's bytes of one row: 4 qs words, the 2 scale words of its half, d and dmin */
struct q2r_row {
    uint32_t q[4], sc[2], dd;
    __device__ __forceinline__ void load(const uint8_t *row, int lane) {
        const uint8_t *blk = row + Q2R_BLOCK * (lane >> 2);
        const int n = (lane >> 1) & 1, h = lane & 1;
        const uint32_t *qs = (const uint32_t *)(blk + 16 + 32 * n + 16 * h), *scp = (const uint32_t *)(blk + 8 * n);
#pragma unroll
        for (int k = 0; k < 4; k++) q[k] = __ldg(qs + k);
        sc[0] = __ldg(scp);
        sc[1] = __ldg(scp + 1);
        dd = __ldg((const uint32_t *)(blk + 80));
    }
};

/* the lane's part of one row's product */
__device__ __forceinline__ float q2r_row_dot(const q2r_row &w, const q2r_act &a, int lane) {
    /* the scale bytes of sub-blocks 8n + 2j + h, j = 0..3: bytes h, 2 + h, 4 + h, 6 + h of the half's 8 */
    const uint32_t sel = (lane & 1) ? 0x7531u : 0x6420u;
    const uint32_t s4 = __byte_perm(w.sc[0], w.sc[1], sel);
    const uint32_t scl = s4 & 0x0F0F0F0Fu, mn = (s4 >> 4) & 0x0F0F0F0Fu;
    int s0 = 0, s1 = 0, s2 = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const uint32_t sc = (scl >> (8 * j)) & 0xFF;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint32_t qv = ((w.q[k] >> (2 * j)) & 0x03030303u) * sc; /* bytes q * sc <= 45: no carries */
            s0 = nf_dp4a_uu(qv, a.xq[0][j][k], s0);
            s1 = nf_dp4a_uu(qv, a.xq[1][j][k], s1);
            s2 = nf_dp4a_us(qv, a.xq[2][j][k], s2);
        }
    }
    /* |s0|, |s1| <= 64 * 45 * 255, |s2| <= 64 * 45 * 128: the sum of q * sc * code exact in 64 bits */
    const long long sq = (long long)s2 * 65536 + (long long)s1 * 256 + s0;
    long long sm = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) sm += (long long)((mn >> (8 * j)) & 0xFF) * a.xs[j];
    const float d = __half2float(__ushort_as_half((unsigned short)(w.dd & 0xFFFF)));
    const float dmin = __half2float(__ushort_as_half((unsigned short)(w.dd >> 16)));
    return __fmul_rn(a.unit, fmaf(d, (float)sq, -__fmul_rn(dmin, (float)sm)));
}

/* Grid: a persistent set of CTAs; the job's steps of R consecutive rows numbered (matrix, vector, row) in that
 * order, warp gw taking the contiguous range [gw * steps / nw, (gw + 1) * steps / nw). */
template <int R, bool SWIGLU>
__global__ void __launch_bounds__(Q2R_THREADS, 2) q2k_rows_kernel(const q2r_params p) {
    const int lane = threadIdx.x & 31;
    const int64_t spm = p.rows / R; /* steps per (matrix, vector) */
    const int64_t steps = (int64_t)p.nmat * p.nvec * spm;
    const int64_t nw = (int64_t)gridDim.x * (Q2R_THREADS / 32);
    const int64_t gw = (int64_t)blockIdx.x * (Q2R_THREADS / 32) + (threadIdx.x >> 5);
    const int64_t s_begin = gw * steps / nw, s_end = (gw + 1) * steps / nw;
    /* PDL (cuda_launch.h): ids from a kernel two or more launches back (ids_settled) are read before the wait, and
     * then the first step's weights are loaded before it too; fresh ids wait first */
    const bool early = !p.ids || p.ids_settled;
    if (!early) nf_pdl_wait();
    auto row_of = [&](int64_t step, int &m, int &v, int64_t &r0) -> const uint8_t * {
        const int64_t prob = step / spm;
        r0 = (step % spm) * R;
        m = (int)(prob / p.nvec);
        v = (int)(prob % p.nvec);
        const int64_t sl = p.ids ? (p.ids_settled ? __ldcg(p.ids + v) : p.ids[v]) : v % p.smod;
        return p.w[m] + (size_t)sl * p.slice_bytes + (size_t)r0 * p.row_bytes;
    };
    q2r_row W[R];
    bool have = false;
    if (early && s_begin < s_end) {
        int m, v;
        int64_t r0;
        const uint8_t *row0 = row_of(s_begin, m, v, r0);
#pragma unroll
        for (int r = 0; r < R; r++) W[r].load(row0 + (size_t)r * p.row_bytes, lane);
        have = true;
    }
    if (early) nf_pdl_wait();
    nf_pdl_release();
    q2r_act A;
    int cur_v = -1;
    for (int64_t step = s_begin; step < s_end; step++) {
        int m, v;
        int64_t r0;
        const uint8_t *row0 = row_of(step, m, v, r0);
        if (!have) {
#pragma unroll
            for (int r = 0; r < R; r++) W[r].load(row0 + (size_t)r * p.row_bytes, lane);
        }
        have = false;
        if (v != cur_v) { /* a warp-uniform branch: the whole warp's range is the same */
            const int64_t xrow = (int64_t)(p.xdiv > 1 ? v / p.xdiv : v) * p.ldx;
            q2r_quantize<SWIGLU>(A, p.x + xrow, SWIGLU ? p.xup + xrow : nullptr, p.act_limit, lane);
            cur_v = v;
        }
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] = q2r_row_dot(W[r], A, lane);
#pragma unroll
        for (int r = 0; r < R; r++) {
            float s = acc[r];
#pragma unroll
            for (int o = 16; o >= 1; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            acc[r] = s;
        }
        if (lane < R) {
            float out = acc[0];
#pragma unroll
            for (int r = 1; r < R; r++)
                if (lane == r) out = acc[r];
            p.y[m][(size_t)v * p.ldy + r0 + lane] = out;
        }
    }
}

/* ---- host ---- */
static int g_force = -1; /* nf_cuda_gemv_q2k_force */
static int q2k_rows_on(void) {
    if (g_force >= 0) return g_force;
    static int cache = -1;
    return !nf_cuda_env_switch(&cache, "NF_CUDA_Q2K_ROWS", "on"); /* 0 exactly when it is "on" */
}
extern "C" void nf_cuda_gemv_q2k_force(int on) { g_force = on < 0 ? -1 : !!on; }

/* NF_CUDA_Q2K_R=2: two rows per warp step instead of four (A/B of the kernel's shape) */
static int q2k_rows_per_step(void) {
    static int cache = -1;
    static const char *const names[] = {"2", "4"};
    return nf_cuda_env_choice(&cache, "NF_CUDA_Q2K_R", names, 2, 1) == 0 ? 2 : 4;
}

extern "C" int nf_cuda_gemv_q2k_takes(const nf_gemv_job *j) {
    if (!q2k_rows_on() || j->type != NF_TYPE_Q2_K || j->cols != Q2R_COLS) return 0;
    /* float4 loads of every activation row (x's alignment: nf_rows_job_common) */
    if ((j->xup && (uintptr_t)j->xup % 16) || j->ldx % 4) return 0;
    return nf_rows_job_common(j, 4) > 0; /* 4: a multiple of both R */
}

extern "C" int nf_cuda_gemv_q2k_run(const nf_gemv_job *j, void *stream, int sms, int plan_log) {
    q2r_params p;
    memset(&p, 0, sizeof p);
    nf_rows_params_of(j, &p);
    p.xup = j->xup;
    p.act_limit = j->act_limit;
    p.ldx = j->ldx;
    p.xdiv = j->xdiv;
    const int R = q2k_rows_per_step();
    const int64_t ctas = nf_rows_ctas((int64_t)p.nmat * p.nvec * p.rows / R, Q2R_THREADS, sms);
    if (plan_log)
        fprintf(stderr, "gemv q2krows: %lld x %lld, %d matrices x %d vectors%s, R %d, %lld CTAs of %d\n",
                (long long)p.rows, (long long)j->cols, p.nmat, p.nvec, p.xup ? " (SwiGLU)" : "", R, (long long)ctas,
                Q2R_THREADS);
    const dim3 grid((unsigned)ctas), block(Q2R_THREADS);
    cudaStream_t s = (cudaStream_t)stream;
    if (R == 2) {
        if (p.xup) nf_launch(q2k_rows_kernel<2, true>, grid, block, 0, s, p);
        else nf_launch(q2k_rows_kernel<2, false>, grid, block, 0, s, p);
    } else {
        if (p.xup) nf_launch(q2k_rows_kernel<4, true>, grid, block, 0, s, p);
        else nf_launch(q2k_rows_kernel<4, false>, grid, block, 0, s, p);
    }
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return nf_fail("cuda gemv q2k launch: %s", cudaGetErrorString(e));
    return 0;
}
