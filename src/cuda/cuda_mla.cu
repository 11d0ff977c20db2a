/* cuda_mla.cu — multi-head latent attention (NoPE, absorbed form) over the DSA selection, on the GPU (the CPU
 * reference and the mathematics: src/cpu/mla.c; the kernel-level API: cuda_attn.h).
 *
 * mla_project: q latent (RMSNorm), per-head queries, and the normalised kv latent appended to the device latent
 * cache at [pos, pos+T). mla_attend: qt = Kb_h^T q_h for every (token, head) in one batched product over the 3-D
 * k_b tensor; the sparse core (below); o = Vb_h u (batched over v_b) and the output projection.
 *
 * The core is three kernels, each a tiled product that stages the selected latent rows in shared memory once
 * for a tile of heads (all 64 heads of the release for the scores) instead of once per head:
 *   scores   S[h][s] = qt_h . c_sel[s] * scale    CTA = token x 64 heads x 64 (decode: 16) selected rows,
 *            K = the latent dim in chunks of 32; each thread holds a 4 x 4 (decode 4 x 1) block of S;
 *   softmax  one CTA per (token, head): max, exp, double sum in a fixed order, p = e / sum, in place;
 *   values   U[h][r] = sum_s p[h][s] c_sel[s][r]  CTA = token x 64 heads x 64 latent columns (decode 16 x 16),
 *            K = the selection in chunks of 64 rows (chunks without a valid entry skipped).
 * Every value is accumulated in one register in index order (fused multiply-add), never split across threads
 * or CTAs, so the tile shapes, which differ between decode (T = 1: more, smaller CTAs to fill the GPU) and
 * prefill, do not change a single bit: chunked prefill and decode stay bit-identical to one-shot prefill.
 * The two-pass softmax (scores in global scratch, [T][H][width rounded up to 4]) is what makes that possible
 * without a split-K combine; prefill runs the core over token chunks so the scratch stays bounded.
 * A few tokens (T <= 4) take a decode path instead (cuda_mla_decode.cu), which splits the selection across CTAs
 * to use the whole GPU and so sums in another order; nf_cuda_mla_core_path below picks the path. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_attn.h"
#include "cuda/cuda_internal.h"
#include "cuda/cuda_launch.h"
#include "cuda/cuda_mla_decode.h"
#include "cuda/cuda_gemm.h"
#include "cuda/cuda_mma.h"

int nf_cuda_mla_project(nf_backend *be, int il, nf_state *st, const float *x, int T, float *qr, float *q) {
    nf_cuda *c = nf_cuda_of(be);
    if (nf_cuda_state_check(st) < 0) return -1;
    const nf_hparams *hp = &c->m->hp;
    const nf_layer *L = &c->m->layers[il];
    nf_layer_state *LS = &st->L[il];
    const int n = hp->n_embd, ql = hp->q_lora_rank, kl = hp->kv_lora_rank;
    const float *qan = nf_cuda_vec(c, &L->q_a_norm), *kvn = nf_cuda_vec(c, &L->kv_a_norm);
    if (!qan || !kvn) return nf_fail_prefix("layer %d mla", il);
    const int kv_rows = (int)L->kv_a.ne[1];
    nf_cuda_scratch sc(c);
    float *kv = sc.get<float>((size_t)T * kv_rows);
    if (!kv) return nf_fail("cuda mla: out of device memory");
    nf_cuda_mat qa = nf_cuda_mat_of(c, &L->q_a), qb = nf_cuda_mat_of(c, &L->q_b), ka = nf_cuda_mat_of(c, &L->kv_a);
    /* decode: both projections of x in one launch */
    if (T == 1) {
        const nf_cuda_mat *wx[2] = {&qa, &ka};
        float *yx[2] = {qr, kv};
        if (nf_cuda_matvec_many(c, wx, 2, x, yx) < 0) return -1;
    } else if (nf_cuda_matmul(c, &qa, x, T, n, qr, ql) < 0) {
        return -1;
    }
    if (nf_cuda_rmsnorm_rows(c, qr, ql, T, ql, hp->rms_eps, qan, qr, ql) < 0) return -1;
    if (nf_cuda_matmul(c, &qb, qr, T, ql, q, (int64_t)hp->n_head * hp->qk_nope_dim) < 0) return -1;
    if (T > 1 && nf_cuda_matmul(c, &ka, x, T, n, kv, kv_rows) < 0) return -1;
    return nf_cuda_rmsnorm_rows(c, kv, kv_rows, T, kl, hp->rms_eps, kvn, LS->latent + (size_t)st->pos * kl, kl);
}

#define MC_K 32 /* latent dims staged per step of the scores */
#define MV_K 64 /* selected rows staged per step of the values (the same for every tile shape: chunks without a
                   * selected row are skipped, and the skip must not depend on the shape) */
#define MC_PAD 4 /* row padding of the transposed shared tiles (keeps float4 alignment) */

static __host__ __device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

/* S row stride: width rounded up to 4 floats so that rows are float4-aligned */
static inline int64_t srow(int width) { return ((int64_t)width + 3) & ~(int64_t)3; }

template <int M>
__device__ __forceinline__ void lds_row(float (&r)[M], const float *p) {
    if constexpr (M % 4 == 0) {
#pragma unroll
        for (int i = 0; i < M; i += 4) {
            const float4 v = *(const float4 *)(p + i);
            r[i] = v.x;
            r[i + 1] = v.y;
            r[i + 2] = v.z;
            r[i + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < M; i++) r[i] = p[i];
    }
}

/* acc[i][j] += sum over d < kw of A[d][ty*MI + i] * B[d][tx*MJ + j], d in order (one fused multiply-add per term):
 * the register tile of the score and value kernels, on rows of shared memory */
template <int MI, int MJ, int LDA, int LDB>
__device__ __forceinline__ void tile_fma(float (&acc)[MI][MJ], const float (*A)[LDA], const float (*B)[LDB], int kw, int ty,
                                         int tx) {
    for (int d = 0; d < kw; d++) {
        float a[MI], b[MJ];
        lds_row<MI>(a, &A[d][ty * MI]);
        lds_row<MJ>(b, &B[d][tx * MJ]);
#pragma unroll
        for (int i = 0; i < MI; i++)
#pragma unroll
            for (int j = 0; j < MJ; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
}

/* pos[j] = row[s0 + j] for j < n (-1 past width), by the block's threads; true when any is a selected entry (a
 * block barrier: every thread calls it, and a chunk or tile without one can be skipped by the whole block) */
__device__ __forceinline__ bool stage_positions(int32_t *pos, const int32_t *row, int s0, int width, int n) {
    int valid = 0;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        const int32_t p = s0 + j < width ? row[s0 + j] : -1;
        pos[j] = p;
        valid |= p >= 0;
    }
    return __syncthreads_or(valid);
}

/* CTA = (slot tile, token, head tile); threads 16 x 16, thread = MH heads x MS slots */
template <int MH, int MS>
__global__ void __launch_bounds__(256) mla_score_kernel(const float *__restrict__ latent, const float *__restrict__ qt,
                                                        const int32_t *__restrict__ sel, int H, int kl, int width,
                                                        int64_t lds, float scale, float *__restrict__ S) {
    NF_PDL_ENTER();
    constexpr int HT = 16 * MH, ST = 16 * MS;
    __shared__ __align__(16) float Qs[MC_K][HT + MC_PAD]; /* [dim][head] */
    __shared__ __align__(16) float Cs[MC_K][ST + MC_PAD]; /* [dim][slot] */
    __shared__ int32_t pos[ST];
    const int t = blockIdx.y, s0 = blockIdx.x * ST, h0 = blockIdx.z * HT;
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int32_t *row = sel + (int64_t)t * width;
    if (!stage_positions(pos, row, s0, width, ST)) return;
    float acc[MH][MS];
#pragma unroll
    for (int i = 0; i < MH; i++)
#pragma unroll
        for (int j = 0; j < MS; j++) acc[i][j] = 0.0f;
    const float *q = qt + ((int64_t)t * H + h0) * kl;
    for (int kc = 0; kc < kl; kc += MC_K) {
        const int kw = imin(MC_K, kl - kc), kw4 = kw / 4;
        /* staging: a thread reads 4 consecutive dims of one row; consecutive threads take consecutive rows, so
         * the transposed shared stores do not conflict */
        for (int e = tid; e < HT * kw4; e += 256) {
            const int r = e % HT, d4 = e / HT;
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (h0 + r < H) v = *(const float4 *)(q + (int64_t)r * kl + kc + 4 * d4);
            Qs[4 * d4][r] = v.x;
            Qs[4 * d4 + 1][r] = v.y;
            Qs[4 * d4 + 2][r] = v.z;
            Qs[4 * d4 + 3][r] = v.w;
        }
        for (int e = tid; e < ST * kw4; e += 256) {
            const int r = e % ST, d4 = e / ST;
            const int32_t p = pos[r];
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (p >= 0) v = *(const float4 *)(latent + (int64_t)p * kl + kc + 4 * d4);
            Cs[4 * d4][r] = v.x;
            Cs[4 * d4 + 1][r] = v.y;
            Cs[4 * d4 + 2][r] = v.z;
            Cs[4 * d4 + 3][r] = v.w;
        }
        __syncthreads();
        tile_fma<MH, MS>(acc, Qs, Cs, kw, ty, tx);
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < MH; i++) {
        const int h = h0 + ty * MH + i;
        if (h >= H) continue;
#pragma unroll
        for (int j = 0; j < MS; j++) {
            const int sl = tx * MS + j;
            if (s0 + sl < width && pos[sl] >= 0) S[((int64_t)t * H + h) * lds + s0 + sl] = __fmul_rn(acc[i][j], scale);
        }
    }
}

/* CTA = (token, head): S row -> p row in place (0 for unselected entries). Max and count are order-free; the
 * sum is in double (as src/cpu/vec.c nf_softmax_row) with a fixed order: each thread's slots in index order,
 * then a fixed butterfly per warp, then the warps in order. */
__global__ void __launch_bounds__(256) mla_softmax_kernel(const int32_t *__restrict__ sel, int H, int width, int64_t lds,
                                                          float *__restrict__ S) {
    NF_PDL_ENTER();
    __shared__ float s_mx[8];
    __shared__ int s_ns[8];
    __shared__ double s_sum[8];
    const int64_t v = blockIdx.x;
    const int tid = threadIdx.x, lane = tid % 32, wid = tid / 32;
    const int32_t *row = sel + (v / H) * width;
    float *x = S + v * lds;
    float mx = -INFINITY;
    int ns = 0;
#pragma unroll 4
    for (int s = tid; s < width; s += 256)
        if (row[s] >= 0) {
            mx = fmaxf(mx, x[s]);
            ns++;
        }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        ns += __shfl_xor_sync(0xffffffffu, ns, o);
    }
    if (lane == 0) {
        s_mx[wid] = mx;
        s_ns[wid] = ns;
    }
    __syncthreads();
    mx = s_mx[0];
    ns = s_ns[0];
    for (int w = 1; w < 8; w++) {
        mx = fmaxf(mx, s_mx[w]);
        ns += s_ns[w];
    }
    double sum = 0.0;
#pragma unroll 4
    for (int s = tid; s < width; s += 256) {
        float e = 0.0f;
        if (row[s] >= 0) {
            e = expf(__fsub_rn(x[s], mx));
            sum += e;
        }
        x[s] = e;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) s_sum[wid] = sum;
    __syncthreads();
    sum = s_sum[0];
    for (int w = 1; w < 8; w++) sum += s_sum[w];
    const float inv = ns ? (float)(1.0 / sum) : 0.0f;
    for (int s = tid; s < width; s += 256) x[s] = __fmul_rn(x[s], inv);
}

/* CTA = (column tile, token, head tile); threads 16 x 16, thread = MH heads x MC latent columns */
template <int MH, int MC>
__global__ void __launch_bounds__(256) mla_value_kernel(const float *__restrict__ latent, const float *__restrict__ P,
                                                        const int32_t *__restrict__ sel, int H, int kl, int width,
                                                        int64_t lds, float *__restrict__ U) {
    NF_PDL_ENTER();
    constexpr int HT = 16 * MH, CT = 16 * MC;
    __shared__ __align__(16) float Ps[MV_K][HT + MC_PAD]; /* [selected row][head] */
    __shared__ __align__(16) float Cs[MV_K][CT + MC_PAD]; /* [selected row][column] */
    __shared__ int32_t pos[MV_K];
    const int t = blockIdx.y, c0 = blockIdx.x * CT, h0 = blockIdx.z * HT;
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int32_t *row = sel + (int64_t)t * width;
    const float *pt = P + ((int64_t)t * H + h0) * lds;
    float acc[MH][MC];
#pragma unroll
    for (int i = 0; i < MH; i++)
#pragma unroll
        for (int j = 0; j < MC; j++) acc[i][j] = 0.0f;
    for (int s0 = 0; s0 < width; s0 += MV_K) {
        if (!stage_positions(pos, row, s0, width, MV_K)) continue; /* a chunk without a selected row adds nothing */
        const int kw = imin(MV_K, width - s0);
        for (int e = tid; e < HT * MV_K; e += 256) {
            const int r = e % HT, j = e / HT;
            Ps[j][r] = h0 + r < H && j < kw ? pt[(int64_t)r * lds + s0 + j] : 0.0f;
        }
        for (int e = tid; e < MV_K * (CT / 4); e += 256) {
            const int j = e / (CT / 4), c4 = e % (CT / 4);
            const int32_t p = pos[j];
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (p >= 0 && c0 + 4 * c4 < kl) v = *(const float4 *)(latent + (int64_t)p * kl + c0 + 4 * c4);
            *(float4 *)&Cs[j][4 * c4] = v;
        }
        __syncthreads();
        tile_fma<MH, MC>(acc, Ps, Cs, kw, ty, tx);
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < MH; i++) {
        const int h = h0 + ty * MH + i;
        if (h >= H) continue;
#pragma unroll
        for (int k = 0; k < MC; k++) {
            const int col = c0 + tx * MC + k;
            if (col < kl) U[((int64_t)t * H + h) * kl + col] = acc[i][k];
        }
    }
}

/* ---- the bf16 tensor-core path (NF_MLA_PATH_TC, prefill) ----
 * Why: the tiled f32 kernels above run the two products of the core on CUDA cores at ~22 TFLOPS: 20% of a
 * 4096-token prefill chunk on the H100 (docs/benchmarks.md, prefill kernel table), more than any GEMM shape. Both
 * are tile products with k contiguous in shared memory on both sides, which is what mma.sync m16n8k16 takes:
 *   scores  S[h][s] = qt_h . c_sel[s]   A = qt (64 heads x kl), B = the 64 selected latent rows (64 x kl);
 *   values  U[h][c] = sum_s p[h][s] c_sel[s][c]   A = p (64 heads x 64 slots), B = the latent tile transposed
 *           while staged (64 columns x 64 slots), over the selection in chunks of 64 (chunks without a valid
 *           entry skipped, as the f32 kernel).
 * CTA = 64 x 64 outputs, 8 warps of 16 x 32 (4 n8 tiles); operands rounded to bf16 as staged (f32 accumulate).
 * A value depends only on its token's rows and the fixed tiles, so chunked prefill stays bit-identical. */
#define TC_T 64           /* heads per tile (M); slots (scores) or latent columns (values) per tile (N) */
#define TC_K 64           /* reduction step */
#define TC_KP (TC_K + 8)  /* padded bf16 row: 144 bytes, ldmatrix without bank conflicts */

/* acc (the warp's 16 x 32 block: rows 16 wm .., columns 32 wn ..) += A[64][TC_K] B[64][TC_K]^T, both bf16 rows of
 * TC_KP elements in shared memory; acc[nt][q]: row g + 8 (q / 2), column 8 nt + 2 t4 + q % 2 (g = lane / 4,
 * t4 = lane % 4), the mma accumulator layout */
__device__ __forceinline__ void tc_tile_mma(float (&acc)[4][4], const uint16_t *A, const uint16_t *B, int wm, int wn,
                                            int lane) {
#pragma unroll
    for (int kk = 0; kk < TC_K / 16; kk++) {
        uint32_t af[4];
        ldsm_x4(af, A + (wm * 16 + (lane & 15)) * TC_KP + kk * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int np = 0; np < 2; np++) {
            uint32_t r[4];
            ldsm_x4(r, B + (wn * 32 + np * 16 + (lane & 7) + ((lane >> 4) << 3)) * TC_KP + kk * 16 + ((lane >> 3) & 1) * 8);
            const uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
            mma_bf16(acc[2 * np], af, b0);
            mma_bf16(acc[2 * np + 1], af, b1);
        }
    }
}

/* f(row, column, value) for each of the warp's accumulator values, row and column within the 64 x 64 tile */
template <typename F> __device__ __forceinline__ void tc_tile_each(const float (&acc)[4][4], int wm, int wn, int lane, F f) {
    const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int nt = 0; nt < 4; nt++)
#pragma unroll
        for (int qd = 0; qd < 4; qd++) f(wm * 16 + g + 8 * (qd >> 1), wn * 32 + nt * 8 + 2 * t4 + (qd & 1), acc[nt][qd]);
}

__device__ __forceinline__ void st_bf16x4(uint16_t *d, float4 v) {
    uint2 u;
    u.x = pack_bf16x2(v.x, v.y);
    u.y = pack_bf16x2(v.z, v.w);
    *(uint2 *)d = u;
}

/* CTA = (slot tile, token, head tile) */
__global__ void __launch_bounds__(256) mla_score_tc_kernel(const float *__restrict__ latent, const float *__restrict__ qt,
                                                           const int32_t *__restrict__ sel, int H, int kl, int width,
                                                           int64_t lds, float scale, float *__restrict__ S) {
    NF_PDL_ENTER();
    __shared__ __align__(16) uint16_t Qs[TC_T * TC_KP];
    __shared__ __align__(16) uint16_t Cs[TC_T * TC_KP];
    __shared__ int32_t pos[TC_T];
    const int t = blockIdx.y, s0 = blockIdx.x * TC_T, h0 = blockIdx.z * TC_T;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp & 3, wn = warp >> 2;
    const int32_t *row = sel + (int64_t)t * width;
    if (!stage_positions(pos, row, s0, width, TC_T)) return;
    float acc[4][4] = {};
    const float *q = qt + ((int64_t)t * H + h0) * kl;
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int kc = 0; kc < kl; kc += TC_K) {
        /* row r, dims kc + 4 c4 .. + 3 of both tiles (kl % 4 == 0: a float4 is wholly inside or outside) */
        for (int e = tid; e < TC_T * (TC_K / 4); e += 256) {
            const int r = e / (TC_K / 4), c4 = e % (TC_K / 4), k = kc + 4 * c4;
            const int32_t p = pos[r];
            st_bf16x4(Qs + r * TC_KP + 4 * c4, h0 + r < H && k < kl ? *(const float4 *)(q + (int64_t)r * kl + k) : zero);
            st_bf16x4(Cs + r * TC_KP + 4 * c4, p >= 0 && k < kl ? *(const float4 *)(latent + (int64_t)p * kl + k) : zero);
        }
        __syncthreads();
        tc_tile_mma(acc, Qs, Cs, wm, wn, lane);
        __syncthreads();
    }
    tc_tile_each(acc, wm, wn, lane, [&](int hr, int sl, float v) {
        const int h = h0 + hr;
        if (h < H && s0 + sl < width && pos[sl] >= 0) S[((int64_t)t * H + h) * lds + s0 + sl] = __fmul_rn(v, scale);
    });
}

/* CTA = (latent column tile, token, head tile) */
__global__ void __launch_bounds__(256) mla_value_tc_kernel(const float *__restrict__ latent, const float *__restrict__ P,
                                                           const int32_t *__restrict__ sel, int H, int kl, int width,
                                                           int64_t lds, float *__restrict__ U) {
    NF_PDL_ENTER();
    __shared__ __align__(16) uint16_t Ps[TC_T * TC_KP]; /* [head][slot] */
    __shared__ __align__(16) uint16_t Ct[TC_T * TC_KP]; /* [latent column][slot] */
    __shared__ int32_t pos[TC_K];
    const int t = blockIdx.y, c0 = blockIdx.x * TC_T, h0 = blockIdx.z * TC_T;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp & 3, wn = warp >> 2;
    const int32_t *row = sel + (int64_t)t * width;
    const float *pt = P + ((int64_t)t * H + h0) * lds;
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float acc[4][4] = {};
    for (int s0 = 0; s0 < width; s0 += TC_K) {
        if (!stage_positions(pos, row, s0, width, TC_K)) continue; /* a chunk without a selected row adds nothing */
        const int kw = imin(TC_K, width - s0);
        for (int e = tid; e < TC_T * (TC_K / 4); e += 256) {
            /* p: head r, slots s0 + j .. + 3: loaded only when j < kw, so the float4 ends within the row (lds is width
             * rounded up to 4, s0 and j are multiples of 4); entries past width are not p: zeroed */
            const int r = e / (TC_K / 4), j = 4 * (e % (TC_K / 4));
            float4 v = h0 + r < H && j < kw ? *(const float4 *)(pt + (int64_t)r * lds + s0 + j) : zero;
            if (j + 0 >= kw) v.x = 0.0f;
            if (j + 1 >= kw) v.y = 0.0f;
            if (j + 2 >= kw) v.z = 0.0f;
            if (j + 3 >= kw) v.w = 0.0f;
            st_bf16x4(Ps + r * TC_KP + j, v);
            /* latent: slot jj, columns c0 + 4 c4 .. + 3, stored transposed (consecutive threads: consecutive
             * slots of one column group, so the 2-byte shared stores do not conflict) */
            const int jj = e % TC_K, c4 = e / TC_K, col = c0 + 4 * c4;
            const int32_t p = pos[jj];
            const float4 c = p >= 0 && col < kl ? *(const float4 *)(latent + (int64_t)p * kl + col) : zero;
            const uint32_t lo = pack_bf16x2(c.x, c.y), hi = pack_bf16x2(c.z, c.w);
            Ct[(4 * c4 + 0) * TC_KP + jj] = (uint16_t)lo;
            Ct[(4 * c4 + 1) * TC_KP + jj] = (uint16_t)(lo >> 16);
            Ct[(4 * c4 + 2) * TC_KP + jj] = (uint16_t)hi;
            Ct[(4 * c4 + 3) * TC_KP + jj] = (uint16_t)(hi >> 16);
        }
        __syncthreads();
        tc_tile_mma(acc, Ps, Ct, wm, wn, lane);
        __syncthreads();
    }
    tc_tile_each(acc, wm, wn, lane, [&](int hr, int cr, float v) {
        const int h = h0 + hr, col = c0 + cr;
        if (h < H && col < kl) U[((int64_t)t * H + h) * kl + col] = v;
    });
}

/* NF_CUDA_MLA_TC=off: prefill's attention core on the f32 tiled kernels in every mode (A/B). On by default since
 * session 18: on the H100 an 8192-token prefill of glm53@32:q2 ran 17.7% faster with it (3451 vs 2932 t/s, three
 * runs each, alternating; the same greedy tokens: docs/benchmarks.md) */
static bool tc_enabled(void) {
    static int cache = -1;
    return nf_cuda_env_switch(&cache, "NF_CUDA_MLA_TC", "off");
}

extern "C" int nf_cuda_mla_tc_wanted(int T) {
    return T >= NF_CUDA_GEMM_MIN_VECTORS && tc_enabled() && nf_cuda_gemm_mode() == 1;
}

/* NF_CUDA_MLA_FLASH=off: prefill keeps the three-kernel tensor-core core (A/B) */
static bool flash_enabled(void) {
    static int cache = -1;
    return nf_cuda_env_switch(&cache, "NF_CUDA_MLA_FLASH", "off");
}

/* NF_CUDA_MLA_FLASH16 (default on; =off stages the f32 rows): the one-kernel core over a bf16 copy of the latent
 * cache (nf_mla_flash16: the same bits). 1.81-1.90 vs 2.26-2.68 us per token and layer on the H100 (session 22). */
static bool flash16_enabled(void) {
    static int cache = -1;
    return nf_cuda_env_switch(&cache, "NF_CUDA_MLA_FLASH16", "off");
}

extern "C" int nf_cuda_mla_flash_wanted(int T, int kl) {
    return nf_cuda_mla_tc_wanted(T) && nf_mla_flash_supported(kl) && flash_enabled();
}

static bool split_enabled(void) {
    static int cache = -1;
    return nf_cuda_env_switch(&cache, "NF_CUDA_MLA_SPLIT", "off");
}
static bool twopass_enabled(void) {
    static int cache = -1;
    return nf_cuda_env_switch(&cache, "NF_CUDA_MLA_TWOPASS", "off");
}

extern "C" size_t nf_cuda_mla_scratch_floats(int T, int H, int kl, int width) {
    size_t n = (size_t)T * H * srow(width);
    if (nf_mla_online_supported(T, kl)) {
        const size_t o = nf_mla_online_scratch_floats(T, H, kl, width);
        n = o > n ? o : n;
    }
    if (nf_mla_twopass_supported(T, kl)) {
        const size_t o = nf_mla_twopass_scratch_floats(T, H, kl, width);
        n = o > n ? o : n;
    }
    return n;
}

extern "C" int nf_cuda_mla_core(cudaStream_t stream, const float *latent, const float *qt, const int32_t *sel, int T,
                                int H, int kl, int width, float scale, float *S, float *U) {
    return nf_cuda_mla_core_path(NF_MLA_PATH_AUTO, stream, latent, qt, sel, T, H, kl, width, scale, S, U);
}

extern "C" int nf_cuda_mla_core_path(nf_mla_path path, cudaStream_t stream, const float *latent, const float *qt,
                                     const int32_t *sel, int T, int H, int kl, int width, float scale, float *S, float *U) {
    if (T <= 0) return 0;
    if (kl % 4 != 0 || kl <= 0) return nf_fail("cuda mla: kv_lora_rank %d is not a multiple of 4", kl);
    if (T > 65535) return nf_fail("cuda mla: %d tokens in one attention call", T);
    if (path == NF_MLA_PATH_AUTO) {
        path = NF_MLA_PATH_TILED;
        if (split_enabled() && nf_mla_online_supported(T, kl)) path = NF_MLA_PATH_ONLINE;
        if (split_enabled() && twopass_enabled() && nf_mla_twopass_supported(T, kl)) path = NF_MLA_PATH_TWOPASS;
    }
    switch (path) {
    case NF_MLA_PATH_TWOPASS:
        if (!nf_mla_twopass_supported(T, kl))
            return nf_fail("cuda mla: the two-pass decode path takes T <= 4, kv_lora_rank 32 x 1..16 (a power of two), "
                           "not T %d, kv_lora_rank %d", T, kl);
        return nf_mla_twopass(stream, latent, qt, sel, T, H, kl, width, scale, S, U);
    case NF_MLA_PATH_ONLINE:
        if (!nf_mla_online_supported(T, kl))
            return nf_fail("cuda mla: the online decode path takes T <= 4, kv_lora_rank 32 x 1..32 (a power of two), "
                           "not T %d, kv_lora_rank %d", T, kl);
        return nf_mla_online(stream, latent, qt, sel, T, H, kl, width, scale, S, U);
    case NF_MLA_PATH_FLASH: return nf_mla_flash(stream, latent, qt, sel, T, H, kl, width, scale, U);
    case NF_MLA_PATH_TC: {
        const int64_t lds = srow(width);
        nf_launch(mla_score_tc_kernel, dim3((width + TC_T - 1) / TC_T, T, (H + TC_T - 1) / TC_T), 256, 0, stream, latent,
                  qt, sel, H, kl, width, lds, scale, S);
        NF_LAUNCHED();
        nf_launch(mla_softmax_kernel, (unsigned)((int64_t)T * H), 256, 0, stream, sel, H, width, lds, S);
        NF_LAUNCHED();
        nf_launch(mla_value_tc_kernel, dim3((kl + TC_T - 1) / TC_T, T, (H + TC_T - 1) / TC_T), 256, 0, stream, latent, S,
                  sel, H, kl, width, lds, U);
        NF_LAUNCHED();
        return 0;
    }
    case NF_MLA_PATH_TILED: break;
    default: return nf_fail("cuda mla: unknown core path %d", (int)path);
    }
    const int64_t lds = srow(width);
    /* decode (few tokens): smaller tiles, so that one token still spreads over most of the GPU */
    const bool few = T <= 4;
    if (few) {
        dim3 g((width + 15) / 16, T, (H + 63) / 64);
        nf_launch(mla_score_kernel<4, 1>, g, 256, 0, stream, latent, qt, sel, H, kl, width, lds, scale, S);
    } else {
        dim3 g((width + 63) / 64, T, (H + 63) / 64);
        nf_launch(mla_score_kernel<4, 4>, g, 256, 0, stream, latent, qt, sel, H, kl, width, lds, scale, S);
    }
    NF_LAUNCHED();
    nf_launch(mla_softmax_kernel, (unsigned)((int64_t)T * H), 256, 0, stream, sel, H, width, lds, S);
    NF_LAUNCHED();
    if (few) {
        dim3 g((kl + 15) / 16, T, (H + 15) / 16);
        nf_launch(mla_value_kernel<1, 1>, g, 256, 0, stream, latent, S, sel, H, kl, width, lds, U);
    } else {
        dim3 g((kl + 63) / 64, T, (H + 63) / 64);
        nf_launch(mla_value_kernel<4, 4>, g, 256, 0, stream, latent, S, sel, H, kl, width, lds, U);
    }
    NF_LAUNCHED();
    return 0;
}

/* score scratch a prefill may hold at once */
#define MLA_CHUNK_BYTES ((size_t)256 << 20)
/* tokens per core call of the one-kernel path */
#define MLA_FLASH_CHUNK 4096

int nf_cuda_mla_attend(nf_backend *be, int il, nf_state *st, const float *q, const int32_t *sel, int T, float *y) {
    nf_cuda *c = nf_cuda_of(be);
    if (nf_cuda_state_check(st) < 0) return -1;
    const nf_hparams *hp = &c->m->hp;
    const nf_layer *L = &c->m->layers[il];
    const int H = hp->n_head, dk = hp->qk_nope_dim, dv = hp->v_head_dim, kl = hp->kv_lora_rank, n = hp->n_embd;
    const int width = nf_topk_width(hp);
    /* by the forward's T, not the chunk's: every chunk of one prefill takes the same path */
    const bool tc_path = nf_cuda_mla_tc_wanted(T), flash = nf_cuda_mla_flash_wanted(T, kl);
    /* the one-kernel core needs no score scratch: chunks of MLA_FLASH_CHUNK tokens (qt and U 0.5 GB each at glm53's
     * dims), so that k_b, v_b and the output projection run as larger GEMMs too */
    const size_t per_token = (size_t)H * srow(width) * sizeof(float);
    const size_t fit = flash ? MLA_FLASH_CHUNK : MLA_CHUNK_BYTES / per_token;
    const int chunk = imin(T, fit < 1 ? 1 : fit > 65535 ? 65535 : (int)fit);
    nf_cuda_scratch sc(c);
    float *qt = sc.get<float>((size_t)chunk * H * kl),
          *S = flash ? nullptr : sc.get<float>(nf_cuda_mla_scratch_floats(chunk, H, kl, width)),
          *U = sc.get<float>((size_t)chunk * H * kl), *o = sc.get<float>((size_t)chunk * H * dv);
    if (!qt || (!S && !flash) || !U || !o) return nf_fail("cuda mla: out of device memory");
    nf_cuda_mat kb = nf_cuda_mat_of(c, &L->k_b), vb = nf_cuda_mat_of(c, &L->v_b), wo = nf_cuda_mat_of(c, &L->attn_output);
    const float scale = 1.0f / sqrtf((float)dk);
    /* NF_CUDA_MLA_FLASH16 (default): the cache's rows 0 .. pos + T (every position this forward's tokens may select) in
     * bf16 once, for the one-kernel core to copy (~0.1 ms at 65536 positions and glm53's rank) */
    uint16_t *lat16 = nullptr;
    if (flash && flash16_enabled()) { /* no room for the copy (it grows with the context): the f32 rows, same bits */
        const int64_t rows = st->pos + T;
        if (!(lat16 = sc.get<uint16_t>((size_t)rows * kl + 8))) (void)cudaGetLastError(); /* the failed allocation */
        else if (nf_mla_latent_bf16(c->stream, st->L[il].latent, rows, kl, lat16) < 0) return -1;
    }
    for (int t0 = 0; t0 < T; t0 += chunk) {
        const int tc = imin(chunk, T - t0);
        if (nf_cuda_matmul_ex(c, &kb, q + (size_t)t0 * H * dk, dk, 1, H, nullptr, qt, kl, tc * H) < 0) return -1;
        const nf_mla_path path = flash ? NF_MLA_PATH_FLASH : tc_path ? NF_MLA_PATH_TC : NF_MLA_PATH_AUTO;
        if (lat16 ? nf_mla_flash16(c->stream, lat16, qt, sel + (size_t)t0 * width, tc, H, kl, width, scale, U) < 0
                  : nf_cuda_mla_core_path(path, c->stream, st->L[il].latent, qt, sel + (size_t)t0 * width, tc, H, kl,
                                          width, scale, S, U) < 0)
            return -1;
        if (nf_cuda_matmul_ex(c, &vb, U, kl, 1, H, nullptr, o, dv, tc * H) < 0) return -1;
        if (nf_cuda_matmul(c, &wo, o, tc, (int64_t)H * dv, y + (size_t)t0 * n, n) < 0) return -1;
    }
    return 0;
}
