/* cuda_mla_decode.cu — the sparse MLA core (cuda_attn.h) for a few tokens (T <= 4: decode, short verify blocks).
 *
 * Why not the tiled kernels of cuda_mla.cu: each of their outputs is one register summing up to 2051 terms in
 * order, which for one token leaves most of the GPU idle (~115 us per layer at the release dims: 64 heads,
 * latent kl = 512, 2051-wide selection rows). One token is 67 M multiply-adds for the scores and 67 M for the
 * values over 4.2 MB of latent rows: a few microseconds on 132 SMs if every SM has work, each row is read
 * from L2 only a few times, the intermediate data stays small and a CTA waits on few memory round trips.
 *
 * Two-pass path (the default):
 *   pass 1, scores   CTA = (16 selected rows, token), all heads (129 CTAs at T = 1). The rows are staged once in
 *                    shared memory; a warp holds the queries of 4 heads in registers (a lane has kl/32 of the
 *                    dims) and forms 4 heads x 8 rows of lane partial dots, which one transposed butterfly (31
 *                    shuffles, not 32 x 5) turns into the 32 finished scores, one per lane. Scores go to scratch
 *                    as S[token][row][head], so that pass 2 reads a range's scores for all heads contiguously.
 *   pass 2, values   CTA = (64 latent columns, range of 128 selected rows, token x 64 heads): 8 x 17 = 136 CTAs
 *                    at T = 1 (the 17th range holds the 3 tail rows: its CTAs come last and are short). The
 *                    range's scores and latent columns are staged in shared memory (64 KB, two round trips), the
 *                    softmax is taken over the range per head (m = max, e = exp(s - m), l = sum e, in place),
 *                    and each thread accumulates 4 heads x 4 columns of u = sum e c over the range's rows.
 *                    Splitting the columns across CTAs (not just the rows) is what keeps the ranges few: the
 *                    partials are 17 x 64 x 512 floats (2.2 MB), against 65 x 64 x 514 (8.5 MB) in the online path.
 *   combine          CTA = (token, head), a thread per 4 columns: M = max m_r, w_r = e^(m_r - M),
 *                    L = sum l_r w_r, U = sum u_r w_r / L (ranges without a selected row skipped; U = 0 if none).
 * Every value is summed in a fixed order (dims per lane in order then a fixed butterfly; rows in index order;
 * ranges in order), and a token's work never depends on the other tokens of the call: results are deterministic
 * and the same for T = 1 .. 4. They equal the tiled path's to f32 rounding, not bit for bit.
 *
 * Online path (NF_CUDA_MLA_TWOPASS=off; kept for A/B timing, and for kl = 1024, whose queries do not fit the
 * two-pass register tile): flash-decoding, CTA = (32 selected rows, token, 8 heads), a warp per head with a
 * running max and sum (online softmax) over its rows, 4 rows' loads in flight; a combine merges the 65 ranges of
 * (kl + 2)-float partials per head: M = max m_i, L = sum l_i e^(m_i - M), U = sum acc_i e^(m_i - M) / L. It
 * reads every latent row once per group of 8 heads (8 times) and writes and reads 8.5 MB of partials per layer
 * (39.4 + 16.3 us per layer on the H200 under ncu, docs/benchmarks.md). */
#include <math.h>

#include "cuda/cuda_internal.h"
#include "cuda/cuda_launch.h"
#include "cuda/cuda_mla_decode.h"

static __host__ __device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

/* kl / 32 latent dims per lane: both paths keep a query's lane share in registers */
static bool lane_dims_ok(int kl, int max_per_lane) {
    const int kpl = kl / 32;
    return kl % 32 == 0 && kpl >= 1 && kpl <= max_per_lane && (kpl & (kpl - 1)) == 0;
}

/* ==== two-pass path ======================================================================================== */

#define TP_THREADS 256
#define TP_WARPS (TP_THREADS / 32)
#define TP_SROWS 16   /* pass 1: selected rows per CTA */
#define TP_HG 4       /* pass 1: heads whose queries a warp holds at once */
#define TP_RG 8       /* pass 1: rows per transposed butterfly: TP_HG x TP_RG = 32, one finished score per lane */
#define TP_VROWS 128  /* pass 2: selected rows per range */
#define TP_VCOLS 64   /* pass 2: latent columns per CTA */
#define TP_VHEADS 64  /* pass 2: heads per CTA */
#define TP_MAX_KPL 16 /* kl <= 512: 4 heads x 16 query dims per lane in registers */
static_assert(TP_HG * TP_RG == 32, "one butterfly output per lane");
static_assert(TP_VHEADS == 16 * 4 && TP_VCOLS == 16 * 4 && TP_THREADS == 256, "pass 2: 16 x 16 threads, 4 x 4 each");
static_assert(TP_VROWS % (TP_THREADS / TP_VHEADS) == 0, "pass 2 softmax: equal row shares");
static_assert(TP_VROWS * TP_VHEADS % (4 * TP_THREADS) == 0 && TP_VROWS * TP_VCOLS % (4 * TP_THREADS) == 0,
              "pass 2: whole float4s per thread");

static inline int tp_ranges(int width) { return (width + TP_VROWS - 1) / TP_VROWS; }
/* S row stride: the heads rounded up to 4, so that pass 2's float4 loads are aligned */
static inline int tp_head_stride(int H) { return (H + 3) & ~3; }
static inline size_t tp_smem_bytes(void) { return sizeof(float) * TP_VROWS * (TP_VHEADS + TP_VCOLS); }

/* A lane's KPL latent dims: vectors of KV = min(KPL, 4) floats at (k * 32 + lane) * KV, k < KPL / KV, so that a
 * warp's loads of one row are contiguous (coalesced in global memory, conflict-free in shared memory). */
template <int KPL>
__device__ __forceinline__ void tp_lane_dims(float (&r)[KPL], const float *p, int lane) {
    constexpr int KV = KPL < 4 ? KPL : 4;
#pragma unroll
    for (int k = 0; k < KPL / KV; k++) {
        const float *a = p + (k * 32 + lane) * KV;
        if constexpr (KV == 4) {
            const float4 v = *(const float4 *)a;
            r[4 * k] = v.x;
            r[4 * k + 1] = v.y;
            r[4 * k + 2] = v.z;
            r[4 * k + 3] = v.w;
        } else {
#pragma unroll
            for (int i = 0; i < KV; i++) r[KV * k + i] = a[i];
        }
    }
}

/* Each lane holds 32 partial sums v[0..31]; returns, in lane i, the sum of v[i] over the 32 lanes. At every step a
 * lane keeps the half of its values that its partner gives away and adds the partner's copy of that half: 31
 * shuffles for 32 sums (a butterfly per sum would take 160). The order of the additions is fixed. */
template <int O>
__device__ __forceinline__ void tp_fold(float (&v)[32], int lane) {
    const bool upper = lane & O;
#pragma unroll
    for (int i = 0; i < O; i++) {
        const float keep = upper ? v[i + O] : v[i], give = upper ? v[i] : v[i + O];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, give, O);
    }
}
__device__ __forceinline__ float tp_warp_sum_transposed(float (&v)[32], int lane) {
    /* the steps as template arguments: every index is a constant, so v stays in registers */
    tp_fold<16>(v, lane);
    tp_fold<8>(v, lane);
    tp_fold<4>(v, lane);
    tp_fold<2>(v, lane);
    tp_fold<1>(v, lane);
    return v[0];
}

/* the lane's dims of the queries of heads h0 .. h0 + TP_HG - 1 of one token (0 for heads from H on) */
template <int KPL>
__device__ __forceinline__ void tp_queries(float (&q)[TP_HG][KPL], const float *qt_token, int H, int h0, int lane) {
#pragma unroll
    for (int hb = 0; hb < TP_HG; hb++) {
        if (h0 + hb < H) {
            tp_lane_dims<KPL>(q[hb], qt_token + (int64_t)(h0 + hb) * 32 * KPL, lane);
        } else {
#pragma unroll
            for (int k = 0; k < KPL; k++) q[hb][k] = 0.0f;
        }
    }
}

/* pass 1: S[t][s][h] = (qt[t][h] . latent[sel[t][s]]) * scale for the selected entries (others not written) */
template <int KPL>
__global__ void __launch_bounds__(TP_THREADS) mla_twopass_score_kernel(const float *__restrict__ latent,
                                                                       const float *__restrict__ qt,
                                                                       const int32_t *__restrict__ sel, int H, int width,
                                                                       int hs, float scale, float *__restrict__ S) {
    NF_PDL_ENTER();
    constexpr int kl = 32 * KPL;
    __shared__ __align__(16) float rows[TP_SROWS][kl];
    __shared__ int32_t pos[TP_SROWS];
    const int t = blockIdx.y, s0 = blockIdx.x * TP_SROWS, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int32_t *row = sel + (int64_t)t * width;
    float q[TP_HG][KPL];
    tp_queries<KPL>(q, qt + (int64_t)t * H * kl, H, warp * TP_HG, lane); /* in flight with the row loads */
    int valid = 0;
    if (tid < TP_SROWS) {
        const int32_t p = s0 + tid < width ? row[s0 + tid] : -1;
        pos[tid] = p;
        valid = p >= 0;
    }
    if (!__syncthreads_or(valid)) return; /* pass 2 reads no score of an unselected row */
    constexpr int NE = TP_SROWS * (kl / 4), NL = (NE + TP_THREADS - 1) / TP_THREADS;
#pragma unroll
    for (int i = 0; i < NL; i++) { /* unrolled: every load in flight at once */
        const int e = tid + i * TP_THREADS, r = e / (kl / 4), c4 = e % (kl / 4);
        if (NE % TP_THREADS != 0 && e >= NE) break;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (pos[r] >= 0) v = __ldg((const float4 *)(latent + (int64_t)pos[r] * kl) + c4);
        *(float4 *)&rows[r][4 * c4] = v;
    }
    __syncthreads();
    float *St = S + (int64_t)t * width * hs;
    for (int h0 = warp * TP_HG; h0 < H; h0 += TP_WARPS * TP_HG) {
        if (h0 != warp * TP_HG) tp_queries<KPL>(q, qt + (int64_t)t * H * kl, H, h0, lane);
#pragma unroll
        for (int r0 = 0; r0 < TP_SROWS; r0 += TP_RG) {
            float d[TP_RG * TP_HG]; /* [row][head] */
#pragma unroll
            for (int r = 0; r < TP_RG; r++) {
                float c[KPL];
                tp_lane_dims<KPL>(c, rows[r0 + r], lane);
#pragma unroll
                for (int hb = 0; hb < TP_HG; hb++) {
                    float a = 0.0f;
#pragma unroll
                    for (int k = 0; k < KPL; k++) a = fmaf(q[hb][k], c[k], a);
                    d[r * TP_HG + hb] = a;
                }
            }
            const float dot = tp_warp_sum_transposed(d, lane);
            const int r = r0 + lane / TP_HG, h = h0 + lane % TP_HG;
            if (h < H && pos[r] >= 0) St[(int64_t)(s0 + r) * hs + h] = dot * scale;
        }
    }
}

/* pass 2: per (range, head) m, l -> stats[t][range][h][2], u -> part[t][range][h][kl] (see the file comment) */
__global__ void __launch_bounds__(TP_THREADS) mla_twopass_value_kernel(const float *__restrict__ latent,
                                                                       const float *__restrict__ S,
                                                                       const int32_t *__restrict__ sel, int H, int kl,
                                                                       int width, int hs, int nrange,
                                                                       float *__restrict__ part, float *__restrict__ stats) {
    NF_PDL_ENTER();
    extern __shared__ __align__(16) float sh[];
    float(*P)[TP_VHEADS] = reinterpret_cast<float(*)[TP_VHEADS]>(sh);                    /* [row][head] */
    float(*C)[TP_VCOLS] = reinterpret_cast<float(*)[TP_VCOLS]>(sh + TP_VROWS * TP_VHEADS); /* [row][column] */
    constexpr int NQ = TP_THREADS / TP_VHEADS, QROWS = TP_VROWS / NQ; /* softmax: NQ threads per head */
    __shared__ int32_t pos[TP_VROWS];
    __shared__ float red[NQ][TP_VHEADS];
    const int nht = (H + TP_VHEADS - 1) / TP_VHEADS;
    const int c0 = blockIdx.x * TP_VCOLS, range = blockIdx.y, t = blockIdx.z / nht, h0 = blockIdx.z % nht * TP_VHEADS;
    const int s0 = range * TP_VROWS, tid = threadIdx.x;
    const int32_t *row = sel + (int64_t)t * width;
    float *st = stats + ((int64_t)t * nrange + range) * H * 2;
    const int nrows = imin(TP_VROWS, width - s0);
    /* the range's scores (contiguous) are loaded with the selection entries, its rows' column slices next: two
     * round trips. Scores of unselected rows (never written) and of heads from H on are replaced by 0 below. */
    constexpr int NSV = TP_VROWS * (TP_VHEADS / 4) / TP_THREADS;
    const float *Sr = S + ((int64_t)t * width + s0) * hs;
    float4 sv[NSV];
#pragma unroll
    for (int i = 0; i < NSV; i++) {
        const int e = tid + i * TP_THREADS, j = e / (TP_VHEADS / 4), h = h0 + 4 * (e % (TP_VHEADS / 4));
        sv[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (j < nrows && h < H) sv[i] = *(const float4 *)(Sr + (int64_t)j * hs + h); /* h + 3 < hs */
    }
    int valid = 0;
    if (tid < TP_VROWS) {
        const int32_t p = tid < nrows ? row[s0 + tid] : -1;
        pos[tid] = p;
        valid = p >= 0;
    }
    if (!__syncthreads_or(valid)) { /* nothing selected in the range: l = 0 tells the combine to skip it */
        if (blockIdx.x == 0)
            for (int h = tid; h < TP_VHEADS && h0 + h < H; h += TP_THREADS) {
                st[2 * (h0 + h)] = -INFINITY;
                st[2 * (h0 + h) + 1] = 0.0f;
            }
        return;
    }
#pragma unroll
    for (int i = 0; i < NSV; i++) {
        const int e = tid + i * TP_THREADS, j = e / (TP_VHEADS / 4), h = h0 + 4 * (e % (TP_VHEADS / 4));
        float4 v = sv[i];
        if (pos[j] < 0) v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (h + 1 >= H) v.y = 0.0f;
        if (h + 2 >= H) v.z = 0.0f;
        if (h + 3 >= H) v.w = 0.0f;
        *(float4 *)&P[j][h - h0] = v;
    }
    constexpr int NCV = TP_VROWS * (TP_VCOLS / 4) / TP_THREADS;
#pragma unroll
    for (int i = 0; i < NCV; i++) { /* unrolled: every load in flight at once */
        const int e = tid + i * TP_THREADS, j = e / (TP_VCOLS / 4), c = c0 + 4 * (e % (TP_VCOLS / 4));
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (pos[j] >= 0 && c < kl) v = __ldg((const float4 *)(latent + (int64_t)pos[j] * kl + c));
        *(float4 *)&C[j][c - c0] = v;
    }
    __syncthreads();
    { /* softmax over the range: thread = (head, quarter of the rows); max, then e and l in row order */
        const int h = tid % TP_VHEADS, qi = tid / TP_VHEADS, j0 = qi * QROWS;
        float m = -INFINITY;
        for (int j = j0; j < j0 + QROWS; j++)
            if (pos[j] >= 0) m = fmaxf(m, P[j][h]);
        red[qi][h] = m;
        __syncthreads();
        m = red[0][h];
#pragma unroll
        for (int i = 1; i < NQ; i++) m = fmaxf(m, red[i][h]); /* finite: the range has a selected row */
        float l = 0.0f;
        for (int j = j0; j < j0 + QROWS; j++) {
            const float e = pos[j] >= 0 ? expf(P[j][h] - m) : 0.0f;
            P[j][h] = e;
            l += e;
        }
        __syncthreads(); /* every thread has read the maxima */
        red[qi][h] = l;
        __syncthreads();
        if (qi == 0 && blockIdx.x == 0 && h0 + h < H) {
            l = red[0][h];
#pragma unroll
            for (int i = 1; i < NQ; i++) l += red[i][h];
            st[2 * (h0 + h)] = m;
            st[2 * (h0 + h) + 1] = l;
        }
    }
    const int ty = tid / 16, tx = tid % 16; /* heads 4 ty .. 4 ty + 3, columns 4 tx .. 4 tx + 3 of the tile */
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int k = 0; k < 4; k++) acc[i][k] = 0.0f;
#pragma unroll 4
    for (int j = 0; j < nrows; j++) {
        if (pos[j] < 0) continue; /* the same for the whole CTA */
        const float4 p4 = *(const float4 *)&P[j][4 * ty], c4 = *(const float4 *)&C[j][4 * tx];
        const float p[4] = {p4.x, p4.y, p4.z, p4.w}, c[4] = {c4.x, c4.y, c4.z, c4.w};
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int k = 0; k < 4; k++) acc[i][k] = fmaf(p[i], c[k], acc[i][k]);
    }
    float *o = part + ((int64_t)t * nrange + range) * H * kl;
    const int c = c0 + 4 * tx;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int h = h0 + 4 * ty + i;
        if (h < H && c < kl) *(float4 *)(o + (int64_t)h * kl + c) = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    }
}

/* combine: CTA = (token, head), thread = 4 latent columns (strided). The ranges' m and l are gathered in shared
 * memory first, and the partials are loaded TP_CBATCH ranges at a time, so that a thread waits on a few memory
 * round trips, not on one per range. */
#define TP_CBATCH 8
__global__ void __launch_bounds__(128) mla_twopass_combine_kernel(const float *__restrict__ part,
                                                                  const float *__restrict__ stats, int H, int kl,
                                                                  int nrange, float *__restrict__ U) {
    NF_PDL_ENTER();
    extern __shared__ __align__(16) float sh[]; /* [nrange][2]: m, l */
    const int64_t th = blockIdx.x, t = th / H, h = th % H;
    const float *st = stats + (t * nrange * H + h) * 2; /* range r: st[2 H r], st[2 H r + 1] */
    const float *pp = part + (t * nrange * H + h) * kl; /* range r: pp + H kl r */
    const int64_t sst = 2 * (int64_t)H, spp = (int64_t)H * kl;
    for (int r = threadIdx.x; r < nrange; r += blockDim.x) {
        sh[2 * r] = st[r * sst];
        sh[2 * r + 1] = st[r * sst + 1];
    }
    __syncthreads();
    float M = -INFINITY;
    for (int r = 0; r < nrange; r++) M = fmaxf(M, sh[2 * r]);
    float L = 0.0f;
    for (int r = 0; r < nrange; r++)
        if (sh[2 * r + 1] > 0.0f) L = fmaf(sh[2 * r + 1], expf(sh[2 * r] - M), L);
    for (int c = 4 * threadIdx.x; c < kl; c += 4 * blockDim.x) {
        float u[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int r0 = 0; r0 < nrange; r0 += TP_CBATCH) {
            float4 v[TP_CBATCH];
            float w[TP_CBATCH];
            unsigned has = 0;
#pragma unroll
            for (int i = 0; i < TP_CBATCH; i++) {
                const int r = r0 + i;
                /* a range without a selected row (l = 0) is skipped: its partial was not written */
                v[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                w[i] = 0.0f;
                if (r < nrange && sh[2 * r + 1] > 0.0f) {
                    has |= 1u << i;
                    w[i] = expf(sh[2 * r] - M);
                    v[i] = *(const float4 *)(pp + r * spp + c);
                }
            }
#pragma unroll
            for (int i = 0; i < TP_CBATCH; i++) {
                if (!(has >> i & 1u)) continue;
                u[0] = fmaf(v[i].x, w[i], u[0]);
                u[1] = fmaf(v[i].y, w[i], u[1]);
                u[2] = fmaf(v[i].z, w[i], u[2]);
                u[3] = fmaf(v[i].w, w[i], u[3]);
            }
        }
        float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f); /* no selected entry at all: U = 0 */
        if (L > 0.0f) o = make_float4(u[0] / L, u[1] / L, u[2] / L, u[3] / L);
        *(float4 *)(U + th * kl + c) = o;
    }
}

bool nf_mla_twopass_supported(int T, int kl) { return T <= 4 && lane_dims_ok(kl, TP_MAX_KPL); }

size_t nf_mla_twopass_scratch_floats(int T, int H, int kl, int width) {
    const size_t nr = (size_t)tp_ranges(width);
    return (size_t)T * nr * H * kl + (size_t)T * width * tp_head_stride(H) + (size_t)T * nr * H * 2;
}

template <int KPL>
static void tp_score_launch(cudaStream_t stream, const float *latent, const float *qt, const int32_t *sel, int T, int H,
                            int width, int hs, float scale, float *S) {
    dim3 g((width + TP_SROWS - 1) / TP_SROWS, T);
    nf_launch(mla_twopass_score_kernel<KPL>, g, TP_THREADS, 0, stream, latent, qt, sel, H, width, hs, scale, S);
}

int nf_mla_twopass(cudaStream_t stream, const float *latent, const float *qt, const int32_t *sel, int T, int H, int kl,
                   int width, float scale, float *scratch, float *U) {
    const int nrange = tp_ranges(width), hs = tp_head_stride(H);
    /* scratch: partials [T][nrange][H][kl], scores [T][width][hs], stats [T][nrange][H][2] (16-byte aligned parts) */
    float *part = scratch, *S = part + (size_t)T * nrange * H * kl, *stats = S + (size_t)T * width * hs;
    switch (kl / 32) {
    case 1: tp_score_launch<1>(stream, latent, qt, sel, T, H, width, hs, scale, S); break;
    case 2: tp_score_launch<2>(stream, latent, qt, sel, T, H, width, hs, scale, S); break;
    case 4: tp_score_launch<4>(stream, latent, qt, sel, T, H, width, hs, scale, S); break;
    case 8: tp_score_launch<8>(stream, latent, qt, sel, T, H, width, hs, scale, S); break;
    default: tp_score_launch<16>(stream, latent, qt, sel, T, H, width, hs, scale, S); break;
    }
    NF_LAUNCHED();
    static bool smem_set[NF_CUDA_MAX_DEVICES]; /* 64 KB of dynamic shared memory needs the opt-in */
    if (nf_cuda_once_per_device(smem_set, [] {
            NF_CU(cudaFuncSetAttribute(mla_twopass_value_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)tp_smem_bytes()));
            return 0;
        }) < 0)
        return -1;
    const int nht = (H + TP_VHEADS - 1) / TP_VHEADS;
    dim3 g((kl + TP_VCOLS - 1) / TP_VCOLS, nrange, T * nht);
    nf_launch(mla_twopass_value_kernel, g, TP_THREADS, tp_smem_bytes(), stream, latent, S, sel, H, kl, width, hs, nrange,
              part, stats);
    NF_LAUNCHED();
    nf_launch(mla_twopass_combine_kernel, (unsigned)(T * H), imin(128, kl / 4), sizeof(float) * 2 * nrange, stream, part,
              stats, H, kl, nrange, U);
    NF_LAUNCHED();
    return 0;
}

/* ==== online path ========================================================================================== */

#define MD_ROWS 32  /* selected rows per CTA: 65 ranges x 8 head groups = 520 CTAs for one token at the release dims */
#define MD_HEADS 8
#define MD_BATCH 4  /* rows whose loads a warp keeps in flight together */

static inline int md_splits(int width) { return (width + MD_ROWS - 1) / MD_ROWS; }

template <int KPL>
__device__ __forceinline__ void md_load(float (&r)[KPL], const float *p) {
    if constexpr (KPL % 4 == 0) {
#pragma unroll
        for (int i = 0; i < KPL; i += 4) {
            const float4 v = __ldg((const float4 *)(p + i));
            r[i] = v.x;
            r[i + 1] = v.y;
            r[i + 2] = v.z;
            r[i + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < KPL; i++) r[i] = __ldg(p + i);
    }
}

/* part[((t*H + h)*nsplit + split)*(kl + 2) + ...] = acc[kl], m, l */
template <int KPL>
__global__ void __launch_bounds__(256) mla_decode_split_kernel(const float *__restrict__ latent, const float *__restrict__ qt,
                                                               const int32_t *__restrict__ sel, int H, int kl, int width,
                                                               float scale, int nsplit, float *__restrict__ part) {
    NF_PDL_ENTER();
    const int split = blockIdx.x, t = blockIdx.y, h = blockIdx.z * MD_HEADS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (h >= H) return;
    float q[KPL], acc[KPL];
    md_load<KPL>(q, qt + ((int64_t)t * H + h) * kl + lane * KPL);
#pragma unroll
    for (int k = 0; k < KPL; k++) acc[k] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int32_t *row = sel + (int64_t)t * width;
    const int s1 = imin(width, (split + 1) * MD_ROWS);
    /* MD_BATCH rows at a time: their loads are in flight together (one row per step left the warp waiting on
     * one load latency per row); then the rows are folded in index order */
    for (int s0 = split * MD_ROWS; s0 < s1; s0 += MD_BATCH) {
        int32_t p[MD_BATCH];
        float cv[MD_BATCH][KPL], d[MD_BATCH];
#pragma unroll
        for (int j = 0; j < MD_BATCH; j++) {
            p[j] = s0 + j < s1 ? __ldg(row + s0 + j) : -1; /* the same for the whole warp: uniform */
            if (p[j] >= 0) md_load<KPL>(cv[j], latent + (int64_t)p[j] * kl + lane * KPL);
        }
#pragma unroll
        for (int j = 0; j < MD_BATCH; j++) {
            d[j] = 0.0f;
            if (p[j] >= 0) {
#pragma unroll
                for (int k = 0; k < KPL; k++) d[j] = fmaf(q[k], cv[j][k], d[j]);
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
#pragma unroll
            for (int j = 0; j < MD_BATCH; j++) d[j] += __shfl_xor_sync(0xffffffffu, d[j], o);
#pragma unroll
        for (int j = 0; j < MD_BATCH; j++) {
            if (p[j] < 0) continue;
            const float sc = d[j] * scale, mn = fmaxf(m, sc);
            const float corr = expf(m - mn), e = expf(sc - mn);
            l = fmaf(l, corr, e);
#pragma unroll
            for (int k = 0; k < KPL; k++) acc[k] = fmaf(e, cv[j][k], acc[k] * corr);
            m = mn;
        }
    }
    float *o = part + (((int64_t)t * H + h) * nsplit + split) * (kl + 2);
#pragma unroll
    for (int k = 0; k < KPL; k++) o[lane * KPL + k] = acc[k];
    if (lane == 0) {
        o[kl] = m;
        o[kl + 1] = l;
    }
}

/* CTA = (token, head); thread = latent dims d, d + blockDim, ... */
__global__ void mla_decode_combine_kernel(const float *__restrict__ part, int kl, int nsplit, float *__restrict__ U) {
    NF_PDL_ENTER();
    const int64_t th = blockIdx.x;
    const float *pp = part + th * nsplit * (kl + 2);
    float M = -INFINITY;
    for (int i = 0; i < nsplit; i++) M = fmaxf(M, pp[(int64_t)i * (kl + 2) + kl]);
    float L = 0.0f;
    for (int i = 0; i < nsplit; i++) {
        const float *pi = pp + (int64_t)i * (kl + 2);
        if (pi[kl + 1] > 0.0f) L = fmaf(pi[kl + 1], expf(pi[kl] - M), L);
    }
    for (int d = threadIdx.x; d < kl; d += blockDim.x) {
        float u = 0.0f;
        for (int i = 0; i < nsplit; i++) {
            const float *pi = pp + (int64_t)i * (kl + 2);
            if (pi[kl + 1] > 0.0f) u = fmaf(pi[d], expf(pi[kl] - M), u);
        }
        U[th * kl + d] = L > 0.0f ? u / L : 0.0f; /* no valid entry: U = 0 */
    }
}

template <int KPL>
static void md_launch(cudaStream_t stream, const float *latent, const float *qt, const int32_t *sel, int T, int H, int kl,
                      int width, float scale, float *part) {
    dim3 g(md_splits(width), T, (H + MD_HEADS - 1) / MD_HEADS);
    nf_launch(mla_decode_split_kernel<KPL>, g, 32 * MD_HEADS, 0, stream, latent, qt, sel, H, kl, width, scale, md_splits(width), part);
}

bool nf_mla_online_supported(int T, int kl) { return T <= 4 && lane_dims_ok(kl, 32); }

size_t nf_mla_online_scratch_floats(int T, int H, int kl, int width) {
    return (size_t)T * H * md_splits(width) * (kl + 2);
}

int nf_mla_online(cudaStream_t stream, const float *latent, const float *qt, const int32_t *sel, int T, int H, int kl,
                  int width, float scale, float *scratch, float *U) {
    switch (kl / 32) {
    case 1: md_launch<1>(stream, latent, qt, sel, T, H, kl, width, scale, scratch); break;
    case 2: md_launch<2>(stream, latent, qt, sel, T, H, kl, width, scale, scratch); break;
    case 4: md_launch<4>(stream, latent, qt, sel, T, H, kl, width, scale, scratch); break;
    case 8: md_launch<8>(stream, latent, qt, sel, T, H, kl, width, scale, scratch); break;
    case 16: md_launch<16>(stream, latent, qt, sel, T, H, kl, width, scale, scratch); break;
    default: md_launch<32>(stream, latent, qt, sel, T, H, kl, width, scale, scratch); break;
    }
    NF_LAUNCHED();
    nf_launch(mla_decode_combine_kernel, (unsigned)((int64_t)T * H), 128, 0, stream, scratch, kl, md_splits(width), U);
    NF_LAUNCHED();
    return 0;
}
