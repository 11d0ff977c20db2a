/* cuda_gemm.cu — the tiled matrix product for prefill (many activation vectors per weight matrix): cuda_gemm.h.
 *
 * Why: the per-vector kernel of cuda_matmul.cu reads and decodes every weight row once per vector, so a prefill
 * chunk of T tokens pays T times the weight traffic and decode work on CUDA cores. Here a thread block takes a
 * tile of BM = 128 weight rows and BN = 64 (or 32) vectors that use the same matrix, and walks the reduction in
 * steps of BK = 64: the weight tile is dequantized once per step into shared memory as bf16 (nf_wgroup of
 * cuda_dequant.h: 8 consecutive weights per thread and group, the same arithmetic as the CPU dequantizer), the
 * activation tile is rounded to bf16 beside it, and the warps multiply them with tensor-core mma.sync
 * (m16n8k16, bf16 in, f32 accumulate), fragments loaded by ldmatrix. The next step's raw weight bits and
 * activations are fetched into registers before the current step is multiplied (double-buffered shared memory,
 * one barrier per step), so global latency hides behind the tensor-core work. Every weight byte is read once per
 * vector tile instead of once per vector.
 *
 * Which vectors share a tile: a 2-D matrix: all of them (tiles of consecutive vectors); per-head matrices of a
 * 3-D tensor (matrix = v % smod): the vectors of head g, v = j * smod + g (grid z = head); routed experts
 * (matrix = ids[v]): the vectors are grouped by expert on the device by a stable counting sort (one block per
 * expert counts, then places its vectors in ascending order after the experts before it), and each thread block
 * finds its (expert, vector tile) from the per-expert tile offsets by binary search, so nothing waits for the
 * host and empty experts cost nothing. Results are written straight to y[v * ldy + r]: the (token, slot) order of
 * the per-vector kernel.
 *
 * Numerics (NF_GEMM_BF16): rounding a weight and an activation to bf16 (8 significant bits, round to nearest)
 * changes each product by at most 2^-7 relative (typically ~2^-9, with random signs), and a dot's error relative
 * to sum |w x| averages well below that; accumulation is f32. F32 weights (the recipes keep the router, the
 * hyper-connection and the indexer's small matrices in F32 because they are precision-sensitive) use
 * NF_GEMM_F32 instead: the same tiles in f32 on the CUDA cores (BK = 32), exact up to the order of additions.
 *
 * On the CPU emulation (scripts/cuemu) the tensor-core instructions are emulated with the same fragment layouts
 * (cuemu_dev.h), so the tiling and fragment indexing run there too. */
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_dequant.h"
#include "cuda/cuda_gemm.h"
#include "cuda/cuda_internal.h"
#include "cuda/cuda_launch.h"
#include "cuda/cuda_mma.h"

namespace {

constexpr int BM = 128;        /* weight rows per block */
constexpr int BK = 64;         /* reduction step (bf16 path) */
constexpr int KP = BK + 8;     /* padded shared row (bf16 elements): 144 bytes keeps ldmatrix conflict-free */
constexpr int NT = 256;        /* threads per block: 8 warps, 4 along the rows x 2 along the vectors */
constexpr int SBK = 32;        /* reduction step of the f32 path */
constexpr int SBN = 64;        /* vectors per block of the f32 path */
constexpr int TAB_BYTES = 256 * 8 + 128;

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

/* ---- tensor-core primitives: cuda_mma.h ---- */

struct gemm_args {
    const uint8_t *w;
    size_t row_bytes, slice_bytes;
    int64_t rows, n;
    const float *x;
    int64_t ldx;
    int xdiv, smod, nvec;
    float *y;
    int64_t ldy;
    bool wvec;                /* float formats: row starts 16-byte aligned and n % 8 == 0 (vector loads) */
    bool xvec;                /* activation rows 16-byte aligned (float4 loads) */
    /* routed vectors (perm != NULL): the vectors of matrix e are perm[off[e] .. off[e+1]) in ascending order;
     * its vector tiles are numbered tile0[e] .. tile0[e+1] - 1 */
    const int32_t *perm, *off, *tile0;
    int nmat;
    int e0, e1;               /* routed: only experts [e0, e1), their weights at w + (s - e0) * slice_bytes (0, nmat) */
    int ny;                   /* vector tiles to visit along grid y (an upper bound for routed vectors) */
};

/* The vector tile `ty` of this block: its matrix s, the index of its first member and the member count.
 * False when the tile is empty (then so is every later tile). Uniform across the block. */
__device__ __forceinline__ bool resolve_tile(const gemm_args &a, int ty, int bn, int &s, int &base, int &cnt) {
    if (a.perm) {
        ty += a.tile0[a.e0];
        if (ty >= a.tile0[a.e1]) return false;
        int lo = a.e0, hi = a.e1 - 1;
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (a.tile0[mid] <= ty) lo = mid;
            else hi = mid - 1;
        }
        s = lo;
        base = a.off[lo] + (ty - a.tile0[lo]) * bn;
        cnt = imin(bn, a.off[lo + 1] - base);
        return true;
    }
    const int g = (int)blockIdx.z;
    const int count = (a.nvec - g + a.smod - 1) / a.smod;
    s = g;
    base = ty * bn;
    cnt = imin(bn, count - base);
    return cnt > 0;
}

/* member j of the tile -> vector index */
__device__ __forceinline__ int member_vec(const gemm_args &a, int s, int base, int j) {
    return a.perm ? a.perm[base + j] : (base + j) * a.smod + s;
}

/* Fill the tile's vector table: vec[j] (-1 past the members) and the activation row offset of each column (an
 * absent member reads member 0's row: its results are never stored). */
__device__ __forceinline__ void fill_vectors(const gemm_args &a, int s, int base, int cnt, int bn, int *vec,
                                             int64_t *xoff) {
    const int j = (int)threadIdx.x;
    if (j < bn) {
        const int v = member_vec(a, s, base, j < cnt ? j : 0);
        vec[j] = j < cnt ? v : -1;
        xoff[j] = (int64_t)(v / a.xdiv) * a.ldx;
    }
}

template <int TY, int WG>
__device__ __forceinline__ void load_weights(const gemm_args &a, const uint8_t *const (&wrow)[WG], int64_t i0,
                                             nf_wgroup<TY> (&wg)[WG]) {
#pragma unroll
    for (int i = 0; i < WG; i++) {
        if (i0 < a.n) wg[i].load(wrow[i], i0, a.n, a.wvec && i0 + 8 <= a.n);
        else wg[i].zero();
    }
}

template <int XG>
__device__ __forceinline__ void load_acts(const gemm_args &a, const float *const (&xrow)[XG], int64_t k, float4 (&xv)[XG]) {
#pragma unroll
    for (int i = 0; i < XG; i++) {
        const float *p = xrow[i] + k;
        if (a.xvec && k + 4 <= a.n) {
            xv[i] = *(const float4 *)p;
        } else {
            xv[i].x = k < a.n ? p[0] : 0.0f;
            xv[i].y = k + 1 < a.n ? p[1] : 0.0f;
            xv[i].z = k + 2 < a.n ? p[2] : 0.0f;
            xv[i].w = k + 3 < a.n ? p[3] : 0.0f;
        }
    }
}

/* ---- tensor-core kernel: block = (row tile, vector tiles ty = blockIdx.y + i * gridDim.y, head) ---- */
template <int BN> constexpr size_t bf16_smem_bytes() { return (size_t)2 * (BM + BN) * KP * 2 + TAB_BYTES; }

template <int TY, int BN>
__global__ void __launch_bounds__(NT, BN == 128 ? 1 : 2) gemm_bf16_kernel(gemm_args a) {
    NF_PDL_ENTER();
    constexpr int WG = BM * BK / 8 / NT;      /* weight groups (8 values) per thread and step */
    constexpr int WROWS = NT / (BK / 8);      /* rows covered by one pass of the threads */
    constexpr int XG = BN * BK / 4 / NT;      /* float4 of activations per thread and step */
    constexpr int XROWS = NT / (BK / 4);
    constexpr int WN = BN / 2;                /* vectors per warp */
    constexpr int NTL = WN / 8;               /* n8 tiles per warp */
    extern __shared__ __align__(16) float sh[];
    uint16_t *Ws = (uint16_t *)sh;                   /* [2][BM][KP] */
    uint16_t *Xs = Ws + 2 * BM * KP;                 /* [2][BN][KP] */
    uint64_t *tgrid = (uint64_t *)(Xs + 2 * BN * KP);
    uint8_t *tsigns = (uint8_t *)(tgrid + 256);
    __shared__ int s_vec[BN];
    __shared__ int64_t s_xoff[BN];

    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp & 3, wn = warp >> 2;
    if (TY == NF_TYPE_IQ2_XXS) {
        for (int i = tid; i < 256; i += NT) tgrid[i] = nf_c_iq2_grid[i];
        for (int i = tid; i < 128; i += NT) tsigns[i] = nf_c_iq2_signs[i];
    }
    const nf_iq2_tables tabs = {tgrid, tsigns};
    const int64_t r0 = (int64_t)blockIdx.x * BM;
    const int kg = tid % (BK / 8), xc = tid % (BK / 4);
    const int nk = (int)((a.n + BK - 1) / BK);

    for (int ty = (int)blockIdx.y; ty < a.ny; ty += (int)gridDim.y) {
        int s, base, cnt;
        if (!resolve_tile(a, ty, BN, s, base, cnt)) break;
        fill_vectors(a, s, base, cnt, BN, s_vec, s_xoff);
        __syncthreads();
        const uint8_t *wrow[WG];
        const float *xrow[XG];
#pragma unroll
        for (int i = 0; i < WG; i++) {
            int64_t r = r0 + tid / (BK / 8) + i * WROWS;
            if (r >= a.rows) r = a.rows - 1; /* rows past the end: computed, never stored */
            wrow[i] = a.w + (size_t)(s - a.e0) * a.slice_bytes + (size_t)r * a.row_bytes;
        }
#pragma unroll
        for (int i = 0; i < XG; i++) xrow[i] = a.x + s_xoff[tid / (BK / 4) + i * XROWS];

        nf_wgroup<TY> wg[WG];
        float4 xv[XG];
        float acc[2][NTL][4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int nt = 0; nt < NTL; nt++)
#pragma unroll
                for (int q = 0; q < 4; q++) acc[mt][nt][q] = 0.0f;

        auto store = [&](int st) {
#pragma unroll
            for (int i = 0; i < WG; i++) {
                float f[8];
                wg[i].decode(f, tabs);
                uint4 u;
                u.x = pack_bf16x2(f[0], f[1]);
                u.y = pack_bf16x2(f[2], f[3]);
                u.z = pack_bf16x2(f[4], f[5]);
                u.w = pack_bf16x2(f[6], f[7]);
                *(uint4 *)&Ws[(st * BM + tid / (BK / 8) + i * WROWS) * KP + kg * 8] = u;
            }
#pragma unroll
            for (int i = 0; i < XG; i++) {
                uint2 u;
                u.x = pack_bf16x2(xv[i].x, xv[i].y);
                u.y = pack_bf16x2(xv[i].z, xv[i].w);
                *(uint2 *)&Xs[(st * BN + tid / (BK / 4) + i * XROWS) * KP + xc * 4] = u;
            }
        };

        load_weights<TY, WG>(a, wrow, (int64_t)kg * 8, wg);
        load_acts<XG>(a, xrow, (int64_t)xc * 4, xv);
        store(0);
        __syncthreads();
        for (int kt = 0; kt < nk; kt++) {
            const int st = kt & 1;
            if (kt + 1 < nk) {
                const int64_t k0 = (int64_t)(kt + 1) * BK;
                load_weights<TY, WG>(a, wrow, k0 + kg * 8, wg);
                load_acts<XG>(a, xrow, k0 + xc * 4, xv);
            }
            const uint16_t *A = Ws + st * BM * KP, *B = Xs + st * BN * KP;
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) {
                uint32_t af[2][4], bfr[NTL][2];
#pragma unroll
                for (int mt = 0; mt < 2; mt++)
                    ldsm_x4(af[mt], A + (wm * 32 + mt * 16 + (lane & 15)) * KP + kk * 16 + (lane >> 4) * 8);
#pragma unroll
                for (int np = 0; np < NTL / 2; np++) {
                    uint32_t r[4];
                    ldsm_x4(r, B + (wn * WN + np * 16 + (lane & 7) + ((lane >> 4) << 3)) * KP + kk * 16 +
                                   ((lane >> 3) & 1) * 8);
                    bfr[2 * np][0] = r[0];
                    bfr[2 * np][1] = r[1];
                    bfr[2 * np + 1][0] = r[2];
                    bfr[2 * np + 1][1] = r[3];
                }
#pragma unroll
                for (int mt = 0; mt < 2; mt++)
#pragma unroll
                    for (int nt = 0; nt < NTL; nt++) mma_bf16(acc[mt][nt], af[mt], bfr[nt]);
            }
            if (kt + 1 < nk) store(st ^ 1);
            __syncthreads();
        }

        /* accumulator (mt, nt): rows g and g + 8 of the m16 tile, columns 2t and 2t + 1 of the n8 tile */
        const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int64_t r = r0 + wm * 32 + mt * 16 + g + 8 * h;
                if (r >= a.rows) continue;
#pragma unroll
                for (int nt = 0; nt < NTL; nt++)
#pragma unroll
                    for (int c = 0; c < 2; c++) {
                        const int v = s_vec[wn * WN + nt * 8 + 2 * t4 + c];
                        if (v >= 0) a.y[(size_t)v * a.ldy + r] = acc[mt][nt][2 * h + c];
                    }
            }
        __syncthreads();
    }
}

/* ---- f32 kernel: the same blocks on CUDA cores; thread (tm, tn) owns rows tm + 16 i and vectors tn + 16 j ---- */
constexpr int SWP = BM + 1, SXP = SBN + 1; /* transposed shared tiles, padded against bank conflicts */
constexpr size_t f32_smem_bytes() { return (size_t)SBK * (SWP + SXP) * 4 + TAB_BYTES; }

template <int TY>
__global__ void __launch_bounds__(NT) gemm_f32_kernel(gemm_args a) {
    NF_PDL_ENTER();
    constexpr int WG = BM * SBK / 8 / NT, WROWS = NT / (SBK / 8);
    constexpr int XG = SBN * SBK / 4 / NT, XROWS = NT / (SBK / 4);
    extern __shared__ __align__(16) float sh[];
    float *Wt = sh;                       /* [SBK][SWP]: Wt[k][m] */
    float *Xt = Wt + SBK * SWP;           /* [SBK][SXP]: Xt[k][n] */
    uint64_t *tgrid = (uint64_t *)(Xt + SBK * SXP);
    uint8_t *tsigns = (uint8_t *)(tgrid + 256);
    __shared__ int s_vec[SBN];
    __shared__ int64_t s_xoff[SBN];

    const int tid = (int)threadIdx.x, tm = tid % 16, tn = tid / 16;
    if (TY == NF_TYPE_IQ2_XXS) {
        for (int i = tid; i < 256; i += NT) tgrid[i] = nf_c_iq2_grid[i];
        for (int i = tid; i < 128; i += NT) tsigns[i] = nf_c_iq2_signs[i];
    }
    const nf_iq2_tables tabs = {tgrid, tsigns};
    const int64_t r0 = (int64_t)blockIdx.x * BM;
    const int kg = tid % (SBK / 8), xc = tid % (SBK / 4);
    const int nk = (int)((a.n + SBK - 1) / SBK);

    for (int ty = (int)blockIdx.y; ty < a.ny; ty += (int)gridDim.y) {
        int s, base, cnt;
        if (!resolve_tile(a, ty, SBN, s, base, cnt)) break;
        fill_vectors(a, s, base, cnt, SBN, s_vec, s_xoff);
        __syncthreads();
        const uint8_t *wrow[WG];
        const float *xrow[XG];
#pragma unroll
        for (int i = 0; i < WG; i++) {
            int64_t r = r0 + tid / (SBK / 8) + i * WROWS;
            if (r >= a.rows) r = a.rows - 1;
            wrow[i] = a.w + (size_t)(s - a.e0) * a.slice_bytes + (size_t)r * a.row_bytes;
        }
#pragma unroll
        for (int i = 0; i < XG; i++) xrow[i] = a.x + s_xoff[tid / (SBK / 4) + i * XROWS];
        nf_wgroup<TY> wg[WG];
        float4 xv[XG];
        float acc[8][4];
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
        load_weights<TY, WG>(a, wrow, (int64_t)kg * 8, wg);
        load_acts<XG>(a, xrow, (int64_t)xc * 4, xv);
        for (int kt = 0; kt < nk; kt++) {
#pragma unroll
            for (int i = 0; i < WG; i++) {
                float f[8];
                wg[i].decode(f, tabs);
                const int m = tid / (SBK / 8) + i * WROWS;
#pragma unroll
                for (int e = 0; e < 8; e++) Wt[(kg * 8 + e) * SWP + m] = f[e];
            }
#pragma unroll
            for (int i = 0; i < XG; i++) {
                const int nn = tid / (SBK / 4) + i * XROWS;
                Xt[(xc * 4 + 0) * SXP + nn] = xv[i].x;
                Xt[(xc * 4 + 1) * SXP + nn] = xv[i].y;
                Xt[(xc * 4 + 2) * SXP + nn] = xv[i].z;
                Xt[(xc * 4 + 3) * SXP + nn] = xv[i].w;
            }
            __syncthreads();
            if (kt + 1 < nk) {
                const int64_t k0 = (int64_t)(kt + 1) * SBK;
                load_weights<TY, WG>(a, wrow, k0 + kg * 8, wg);
                load_acts<XG>(a, xrow, k0 + xc * 4, xv);
            }
#pragma unroll 4
            for (int k = 0; k < SBK; k++) {
                float wv[8], xk[4];
#pragma unroll
                for (int i = 0; i < 8; i++) wv[i] = Wt[k * SWP + tm + 16 * i];
#pragma unroll
                for (int j = 0; j < 4; j++) xk[j] = Xt[k * SXP + tn + 16 * j];
#pragma unroll
                for (int i = 0; i < 8; i++)
#pragma unroll
                    for (int j = 0; j < 4; j++) acc[i][j] = fmaf(wv[i], xk[j], acc[i][j]);
            }
            __syncthreads();
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int v = s_vec[tn + 16 * j];
            if (v < 0) continue;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const int64_t r = r0 + tm + 16 * i;
                if (r < a.rows) a.y[(size_t)v * a.ldy + r] = acc[i][j];
            }
        }
        __syncthreads();
    }
}

/* ---- grouping of routed vectors by matrix (stable counting sort, one block per matrix) ---- */
constexpr int GT = 256; /* threads of the grouping kernels */

__device__ __forceinline__ int block_sum(int v, int *red) {
    const int tid = (int)threadIdx.x;
    red[tid] = v;
    __syncthreads();
    for (int st = GT / 2; st > 0; st >>= 1) {
        if (tid < st) red[tid] += red[tid + st];
        __syncthreads();
    }
    const int r = red[0];
    __syncthreads();
    return r;
}

__global__ void __launch_bounds__(GT) group_count_kernel(const int32_t *ids, int nvec, int *counts) {
    NF_PDL_ENTER();
    __shared__ int red[GT];
    const int e = (int)blockIdx.x;
    int c = 0;
    for (int v = (int)threadIdx.x; v < nvec; v += GT) c += ids[v] == e;
    c = block_sum(c, red);
    if (threadIdx.x == 0) counts[e] = c;
}

/* matrix e: its offset and first tile (sums over the matrices before it), then its vectors in ascending order */
__global__ void __launch_bounds__(GT) group_place_kernel(const int32_t *ids, int nvec, int nmat, int bn,
                                                         const int *counts, int *off, int *tile0, int32_t *perm) {
    NF_PDL_ENTER();
    __shared__ int red[GT];
    __shared__ int s_warp[GT / 32];
    const int e = (int)blockIdx.x, tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int o = 0, t = 0;
    for (int i = tid; i < e; i += GT) {
        o += counts[i];
        t += (counts[i] + bn - 1) / bn;
    }
    o = block_sum(o, red);
    t = block_sum(t, red);
    const int ce = counts[e];
    if (tid == 0) {
        off[e] = o;
        tile0[e] = t;
        if (e == nmat - 1) {
            off[nmat] = o + ce;
            tile0[nmat] = t + (ce + bn - 1) / bn;
        }
    }
    if (ce == 0) return;
    int at = o;
    for (int c = 0; c < nvec; c += GT) {
        const int v = c + tid;
        const bool mine = v < nvec && ids[v] == e;
        const unsigned m = __ballot_sync(0xffffffffu, mine);
        if (lane == 0) s_warp[warp] = __popc(m);
        __syncthreads();
        int before = 0, total = 0;
        for (int w = 0; w < GT / 32; w++) {
            before += w < warp ? s_warp[w] : 0;
            total += s_warp[w];
        }
        if (mine) perm[at + before + __popc(m & ((1u << lane) - 1u))] = v;
        at += total;
        __syncthreads();
    }
}

/* ---- the weights decoded once (NF_CUDA_GEMM_PREDEQ) ----
 * out[r][k] = bf16 of the weight the tiled kernel would stage for (r, k): the same nf_wgroup decode and rounding
 * (pack_bf16x2), so a product over `out` as BF16 weights gives the bits of the product over the quantized rows. */
template <int TY>
__global__ void __launch_bounds__(NT) dequant_bf16_kernel(const uint8_t *w, size_t row_bytes, size_t slice_bytes,
                                                           int64_t rows, int64_t n, int64_t total_rows, uint4 *out) {
    NF_PDL_ENTER();
    __shared__ uint64_t tgrid[256];
    __shared__ uint8_t tsigns[128];
    if (TY == NF_TYPE_IQ2_XXS) {
        for (int i = (int)threadIdx.x; i < 256; i += NT) tgrid[i] = nf_c_iq2_grid[i];
        for (int i = (int)threadIdx.x; i < 128; i += NT) tsigns[i] = nf_c_iq2_signs[i];
        __syncthreads();
    }
    const nf_iq2_tables tabs = {tgrid, tsigns};
    const int64_t gpr = n / 8, total = total_rows * gpr;
    for (int64_t idx = (int64_t)blockIdx.x * NT + threadIdx.x; idx < total; idx += (int64_t)gridDim.x * NT) {
        const int64_t r = idx / gpr, gi = idx % gpr;
        const uint8_t *row = w + (size_t)(r / rows) * slice_bytes + (size_t)(r % rows) * row_bytes;
        nf_wgroup<TY> wg;
        wg.load(row, gi * 8, n, false);
        float f[8];
        wg.decode(f, tabs);
        out[idx] = make_uint4(pack_bf16x2(f[0], f[1]), pack_bf16x2(f[2], f[3]), pack_bf16x2(f[4], f[5]),
                              pack_bf16x2(f[6], f[7]));
    }
}

/* NF_CUDA_GEMM_PREDEQ (default on; =off decodes per tile): a quantized matrix that NF_GEMM_PREDEQ_MIN_VECTORS or
 * more vectors per matrix use (a 16384-token prefill chunk's dense projections: 256 vector tiles, so the tiled kernel decodes every weight 256
 * times) is decoded once into a bf16 copy in the stream's pool, and the product runs on the copy as BF16 weights:
 * the same bits (above). Costs one pass of reads and a 2-byte write per weight (~1% of such a product) and the
 * copy's memory while it runs. Routed experts never (a copy of all of them would be gigabytes). The 4096x4096 Q8_0
 * product at T = 16384 on the H100: 2.76 ms against 3.95 (199 vs 139 TFLOPS; bf16 weights: 2.75 ms; session 22). */
int predeq_count; /* products that ran on a decoded copy (nf_cuda_gemm_predeq_count: test_gemm) */
bool predeq_on(void) { return nf_cuda_env_now("NF_CUDA_GEMM_PREDEQ", "off"); } /* test_gemm: both */
template <int TY> void launch_dequant(const uint8_t *w, size_t row_bytes, size_t slice_bytes, int64_t rows, int64_t n,
                                      int64_t total_rows, uint4 *out, cudaStream_t st) {
    const int64_t groups = total_rows * (n / 8);
    const int64_t blocks = (groups + NT - 1) / NT;
    nf_launch(dequant_bf16_kernel<TY>, (unsigned)(blocks < 132 * 16 ? blocks : 132 * 16), NT, 0, st, w, row_bytes,
              slice_bytes, rows, n, total_rows, out);
}

/* launch_dequant for a quantized format: false (nothing launched) for a float or unhandled one */
bool dequant_any(uint32_t type, const uint8_t *w, size_t row_bytes, size_t slice_bytes, int64_t rows, int64_t n,
                 int64_t total_rows, void *out, cudaStream_t st) {
    uint4 *o = (uint4 *)out;
    switch (type) {
    case NF_TYPE_Q8_0: launch_dequant<NF_TYPE_Q8_0>(w, row_bytes, slice_bytes, rows, n, total_rows, o, st); return true;
    case NF_TYPE_Q4_K: launch_dequant<NF_TYPE_Q4_K>(w, row_bytes, slice_bytes, rows, n, total_rows, o, st); return true;
    case NF_TYPE_Q6_K: launch_dequant<NF_TYPE_Q6_K>(w, row_bytes, slice_bytes, rows, n, total_rows, o, st); return true;
    case NF_TYPE_Q2_K: launch_dequant<NF_TYPE_Q2_K>(w, row_bytes, slice_bytes, rows, n, total_rows, o, st); return true;
    case NF_TYPE_IQ2_XXS:
        launch_dequant<NF_TYPE_IQ2_XXS>(w, row_bytes, slice_bytes, rows, n, total_rows, o, st);
        return true;
    default: return false;
    }
}

/* ---- host side ---- */
bool type_handled(uint32_t t) {
    switch (t) {
    case NF_TYPE_F32: case NF_TYPE_F16: case NF_TYPE_BF16: case NF_TYPE_Q8_0:
    case NF_TYPE_Q4_K: case NF_TYPE_Q6_K: case NF_TYPE_Q2_K: case NF_TYPE_IQ2_XXS:
        return true;
    default:
        return false;
    }
}

int row_align_needed(uint32_t t) {
    switch (t) {
    case NF_TYPE_Q4_K: return nf_wgroup_align<NF_TYPE_Q4_K>();
    case NF_TYPE_Q2_K: return nf_wgroup_align<NF_TYPE_Q2_K>();
    case NF_TYPE_F32: return 4;
    default: return 2;
    }
}

template <int TY, int BN> cudaError_t launch_bf16(const gemm_args &a, dim3 grid, cudaStream_t st) {
    const size_t smem = bf16_smem_bytes<BN>();
    cudaError_t e = cudaFuncSetAttribute(gemm_bf16_kernel<TY, BN>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    nf_launch(gemm_bf16_kernel<TY, BN>, grid, NT, smem, st, a);
    return cudaGetLastError();
}
template <int TY> cudaError_t launch_f32(const gemm_args &a, dim3 grid, cudaStream_t st) {
    nf_launch(gemm_f32_kernel<TY>, grid, NT, f32_smem_bytes(), st, a);
    return cudaGetLastError();
}
template <int TY> cudaError_t launch(const gemm_args &a, dim3 grid, nf_gemm_mode mode, int bn, cudaStream_t st) {
    if (mode == NF_GEMM_F32) return launch_f32<TY>(a, grid, st);
    return bn == 32 ? launch_bf16<TY, 32>(a, grid, st) : bn == 128 ? launch_bf16<TY, 128>(a, grid, st) : launch_bf16<TY, 64>(a, grid, st);
}

/* NF_CUDA_GEMM_BN128=ids|all: vector tiles of 128 for the routed experts (ids: glm53's ~114 tokens per expert in a
 * 4096-token chunk then share one tile, so each weight tile is dequantized once instead of twice) or for every
 * product of >= 96 vectors per matrix; off (default) 64 at most. Opt-in until measured on a GPU (session 18). */
int bn128_mode(void) {
    static int cache = -1;
    static const char *const names[] = {"off", "ids", "all"};
    return nf_cuda_env_choice(&cache, "NF_CUDA_GEMM_BN128", names, 3, 0);
}

/* IQ2_XXS tables: this file's constant copy, loaded once per device */
int tables_ready(void) {
    static int done[64];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return nf_fail("cuda gemm: no device");
    if (!done[dev]) {
        cudaError_t e = nf_dequant_tables_init();
        if (e != cudaSuccess) return nf_fail("cuda gemm: tables: %s", cudaGetErrorString(e));
        done[dev] = 1;
    }
    return 0;
}

/* NF_CUDA_GEMM_PREDEQ_EXPERTS (default on, =off): routed experts of >= NF_GEMM_PREDEQ_EXPERT_MIN_VECTORS vectors per expert on
 * average (a 16384-token chunk: ~455 at glm53's top 8 of 288, ~7 vector tiles, each decoding every weight again)
 * in batches of experts decoded once into a bf16 copy of PREDEQ_EXPERT_BYTES at most (the same decode and rounding:
 * the same bits), each batch's tiles multiplied from the copy. Default since session 25: prefill at 65536 +4.1% on
 * the H100 (2 of 2 alternating pairs faster, docs/benchmarks.md), +0.19 GB of pool. */
#define PREDEQ_EXPERT_BYTES ((size_t)256 << 20)
bool predeq_experts_on(void) { return nf_cuda_env_now("NF_CUDA_GEMM_PREDEQ_EXPERTS", "off"); } /* test_gemm: both */

/* the routed product of `a` (perm, off, tile0 set; a.w the quantized experts) batch by batch; 0, or -1 / 1 with
 * nothing launched past the first failure */
int experts_decoded_once(const gemm_args &a, const nf_gemm_weights *w, int bn, dim3 grid, cudaStream_t st) {
    const size_t per_bytes = (size_t)w->rows * w->n * 2;
    int eb = (int)(PREDEQ_EXPERT_BYTES / per_bytes);
    const char *force = getenv("NF_CUDA_GEMM_PREDEQ_EXPERT_BATCH"); /* experts per batch (test_gemm: several batches) */
    if (force && atoi(force) > 0) eb = atoi(force);
    if (eb < 1) eb = 1;
    if (eb > a.nmat) eb = a.nmat;
    void *copy = nullptr;
    if (cudaMallocAsync(&copy, per_bytes * eb, st) != cudaSuccess) {
        (void)cudaGetLastError();
        return 1;
    }
    cudaError_t e = cudaSuccess;
    /* blocks along y per batch: twice the batch's share of the tiles (hot experts: the blocks loop over ty) */
    const int64_t share = 2 * ((int64_t)a.ny * eb / a.nmat) + eb;
    const dim3 gb(grid.x, (unsigned)(share < grid.y ? share : grid.y), 1);
    for (int e0 = 0; e0 < a.nmat && e == cudaSuccess; e0 += eb) {
        const int e1 = e0 + eb < a.nmat ? e0 + eb : a.nmat;
        const uint8_t *src = (const uint8_t *)w->w + (size_t)e0 * w->slice_bytes;
        const int64_t rows = (int64_t)(e1 - e0) * w->rows;
        if (!dequant_any(w->type, src, w->row_bytes, w->slice_bytes, w->rows, w->n, rows, copy, st)) {
            cudaFreeAsync(copy, st);
            return 1;
        }
        gemm_args b = a;
        b.w = (const uint8_t *)copy;
        b.row_bytes = (size_t)w->n * 2;
        b.slice_bytes = per_bytes;
        b.wvec = true;
        b.e0 = e0, b.e1 = e1;
        e = launch<NF_TYPE_BF16>(b, gb, NF_GEMM_BF16, bn, st);
    }
    cudaFreeAsync(copy, st);
    if (e != cudaSuccess) return nf_fail("cuda gemm: launch: %s", cudaGetErrorString(e));
    predeq_count++;
    return 0;
}

} // namespace

extern "C" int nf_cuda_gemm(const nf_gemm_weights *w, const float *x, int64_t ldx, int xdiv, int smod,
                            const int32_t *ids, float *y, int64_t ldy, int nvec, nf_gemm_mode mode, void *stream) {
    if (nvec <= 0 || w->rows <= 0) return 0;
    if (!type_handled(w->type)) return 1;
    const nf_type_info *ti = nf_type_get(w->type);
    if (w->n <= 0 || w->n % ti->block_size) return nf_fail("cuda gemm: row length %lld", (long long)w->n);
    if (!w->w || !x || !y) return nf_fail("cuda gemm: missing operand");
    if (xdiv < 1) xdiv = 1;
    if (smod < 1) smod = 1;
    if (ids && w->nmat < 1) return nf_fail("cuda gemm: routed product without a matrix count");
    if (!ids && smod > 65535) return 1;
    if (w->rows > (int64_t)BM * 0x7fffffff) return 1;
    const uintptr_t al = (uintptr_t)w->w | (uintptr_t)w->row_bytes | (uintptr_t)w->slice_bytes;
    if (al % (uintptr_t)row_align_needed(w->type)) return 1;
    if (tables_ready() < 0) return -1;
    if (mode == NF_GEMM_AUTO) mode = w->type == NF_TYPE_F32 ? NF_GEMM_F32 : NF_GEMM_BF16;
    cudaStream_t st = (cudaStream_t)stream;

    gemm_args a;
    memset(&a, 0, sizeof a);
    a.w = (const uint8_t *)w->w;
    a.row_bytes = w->row_bytes;
    a.slice_bytes = w->slice_bytes;
    a.rows = w->rows;
    a.n = w->n;
    a.x = x;
    a.ldx = ldx;
    a.xdiv = xdiv;
    a.smod = ids ? 1 : smod;
    a.nvec = nvec;
    a.y = y;
    a.ldy = ldy;
    a.wvec = (w->type == NF_TYPE_F32 || w->type == NF_TYPE_F16 || w->type == NF_TYPE_BF16) && al % 16 == 0 &&
             w->n % 8 == 0;
    a.xvec = (uintptr_t)x % 16 == 0 && ldx % 4 == 0;

    /* vectors per matrix decide the vector tile: a small tile wastes less on lightly loaded experts */
    const int64_t groups = ids ? (w->nmat < nvec ? w->nmat : nvec) : smod;
    const int64_t per = (nvec + groups - 1) / groups;
    const int wide = bn128_mode() == 2 || (bn128_mode() == 1 && ids);
    const int bn = mode == NF_GEMM_F32 ? SBN : wide && per >= 96 ? 128 : per >= 48 ? 64 : 32;
    const unsigned gx = (unsigned)((w->rows + BM - 1) / BM);
    dim3 grid;
    void *scratch = nullptr;
    if (ids) {
        if (w->nmat > 0x7fffffff) return 1;
        const int nmat = (int)w->nmat;
        const size_t ints = (size_t)nmat + 2 * ((size_t)nmat + 1) + (size_t)nvec;
        cudaError_t e = cudaMallocAsync(&scratch, ints * sizeof(int32_t), st);
        if (e != cudaSuccess) return nf_fail("cuda gemm: out of device memory (%s)", cudaGetErrorString(e));
        int *counts = (int *)scratch, *off = counts + nmat, *tile0 = off + nmat + 1;
        int32_t *perm = tile0 + nmat + 1;
        nf_launch(group_count_kernel, nmat, GT, 0, st, ids, nvec, counts);
        nf_launch(group_place_kernel, nmat, GT, 0, st, ids, nvec, nmat, bn, counts, off, tile0, perm);
        a.perm = perm;
        a.off = off;
        a.tile0 = tile0;
        a.nmat = nmat;
        a.e0 = 0, a.e1 = nmat;
        a.ny = (int)((nvec + bn - 1) / bn + groups);
        grid = dim3(gx, (unsigned)(a.ny < 65535 ? a.ny : 65535), 1);
    } else {
        const int per_group = (nvec + smod - 1) / smod;
        a.ny = (per_group + bn - 1) / bn;
        grid = dim3(gx, (unsigned)(a.ny < 65535 ? a.ny : 65535), (unsigned)smod);
    }
    uint32_t type = w->type;
    void *copy = nullptr;
    /* a quantized matrix in the bf16 mode: may be decoded once (below) */
    const bool decodable = mode == NF_GEMM_BF16 && w->n % 8 == 0 && type != NF_TYPE_F32 && type != NF_TYPE_F16 &&
                           type != NF_TYPE_BF16;
    if (ids && decodable && per >= NF_GEMM_PREDEQ_EXPERT_MIN_VECTORS && predeq_experts_on()) {
        const int r = experts_decoded_once(a, w, bn, grid, st);
        if (r <= 0) { /* done, or failed past its first launch */
            cudaFreeAsync(scratch, st);
            return r;
        }
        /* 1: no room for a batch's copy: the product decodes as it goes */
    }
    if (!ids && decodable && per >= NF_GEMM_PREDEQ_MIN_VECTORS && predeq_on()) {
        const int64_t total_rows = w->rows * smod;
        if (cudaMallocAsync(&copy, (size_t)total_rows * w->n * 2, st) == cudaSuccess) {
            dequant_any(type, a.w, a.row_bytes, a.slice_bytes, w->rows, w->n, total_rows, copy, st); /* quantized */
            a.w = (const uint8_t *)copy;
            a.row_bytes = (size_t)w->n * 2;
            a.slice_bytes = (size_t)w->rows * w->n * 2;
            a.wvec = true;
            type = NF_TYPE_BF16;
            predeq_count++;
        } else {
            copy = nullptr;           /* (whatever the failed call left there) */
            (void)cudaGetLastError(); /* no room for the copy: the product decodes as it goes */
        }
    }
    cudaError_t e = cudaSuccess;
    switch (type) {
    case NF_TYPE_F32: e = launch<NF_TYPE_F32>(a, grid, mode, bn, st); break;
    case NF_TYPE_F16: e = launch<NF_TYPE_F16>(a, grid, mode, bn, st); break;
    case NF_TYPE_BF16: e = launch<NF_TYPE_BF16>(a, grid, mode, bn, st); break;
    case NF_TYPE_Q8_0: e = launch<NF_TYPE_Q8_0>(a, grid, mode, bn, st); break;
    case NF_TYPE_Q4_K: e = launch<NF_TYPE_Q4_K>(a, grid, mode, bn, st); break;
    case NF_TYPE_Q6_K: e = launch<NF_TYPE_Q6_K>(a, grid, mode, bn, st); break;
    case NF_TYPE_Q2_K: e = launch<NF_TYPE_Q2_K>(a, grid, mode, bn, st); break;
    case NF_TYPE_IQ2_XXS: e = launch<NF_TYPE_IQ2_XXS>(a, grid, mode, bn, st); break;
    }
    if (scratch) cudaFreeAsync(scratch, st);
    if (copy) cudaFreeAsync(copy, st);
    if (e != cudaSuccess) return nf_fail("cuda gemm: launch: %s", cudaGetErrorString(e));
    return 0;
}

extern "C" int nf_cuda_gemm_predeq_count(void) { return predeq_count; }

/* ---- the backend's entry (cuda_internal.h) ---- */
int nf_cuda_gemm_mode(void) {
    /* read per call, not once, so a test can switch it between runs */
    const char *e = getenv("NF_CUDA_GEMM");
    return e && !strcmp(e, "off") ? 0 : e && !strcmp(e, "f32") ? 2 : 1;
}

int nf_cuda_gemm_try(nf_cuda *c, const nf_cuda_mat *w, const float *x, int64_t ldx, int xdiv, int smod,
                     const int32_t *ids, float *y, int64_t ldy, int nvec) {
    const int per_matrix = ids || smod <= 1 ? nvec : nvec / smod;
    if (per_matrix < NF_CUDA_GEMM_MIN_VECTORS) return 1; /* decode-sized products never read the mode */
    const int mode = nf_cuda_gemm_mode();
    if (!mode) return 1;
    const nf_gemm_weights gw = {w->w, w->type, w->n, w->rows, w->nmat, w->row_bytes, w->slice_bytes};
    return nf_cuda_gemm(&gw, x, ldx, xdiv, smod, ids, y, ldy, nvec, mode == 2 ? NF_GEMM_F32 : NF_GEMM_AUTO,
                        c->stream);
}
