/* cuda_kda_chunk.cu — the chunked path of the KDA delta-rule recurrence (cuda_kda.h), for long prefills.
 *
 * Why: the token-serial scan (cuda_kda_scan.cu) does ~2 x hd^2 flops per token and head between two barriers, so
 * a prefill pays ~1.4-2.3 us per token and KDA layer whatever the GPU could do in parallel: 11.5% of a 4096-token
 * prefill chunk on the H100. This path: 0.94 us (docs/cuda.md, session 21). In its chunked form the recurrence needs one serial step per NF_KDA_CHUNK (C = 64) tokens, and
 * everything inside a chunk that does not depend on the incoming state is computed for all chunks at once.
 *
 * The algebra (one head; S0 the state before a chunk, t, s tokens of the chunk, G_t the cumulative log2 decay of
 * the chunk through token t inclusive, per key channel, so Γ_t = 2^G_t; every exponent below is <= 0):
 *   a_ts = Σ_i k_t[i] k_s[i] 2^(G_t[i] - G_s[i])  (s < t),   P_ts = Σ_i q_t[i] k_s[i] 2^(G_t[i] - G_s[i])  (s <= t)
 *   the recurrence's d_t (the delta rule's β-scaled residual of token t) solves the unit lower-triangular system
 *   d_t + β_t Σ_{s<t} a_ts d_s = β_t (v_t - S0^T Γ_t k_t), so with X = (I + diag(β) a)^-1 diag(β):
 *   d = U0 - M1 S0,                 U0 = X V,  M1 = X (Γ K)
 *   o = O0 + Q' S0,                 O0 = P U0,  Q' = Γ Q - P M1
 *   S_C = Γ_C S0 + Kd^T d,          Kd_s = 2^(G_C - G_s) k_s
 * Kernel 1 (kda_chunk_prep_kernel, one block per chunk and head, all chunks in parallel) takes the inputs as
 * kda_prep_kernel leaves them (or, by default, NF_CUDA_KDA_FUSED_PREP, prepares them itself: the L2 norms of q and k,
 * the log2 decays, sigmoid(β)), computes a and P (the exponent differences are taken per channel, so nothing
 * overflows however fast the decay; by default, NF_CUDA_KDA_PREP_V2, pairs of different 16-token blocks through a
 * per-block reference, so that most exponents are computed once per block instead of once per pair), solves for M1 and U0 (one thread per column, forward substitution over 4-row
 * blocks in shared memory), and writes M1, Q', U0, Kd, O0 and Γ_C in place of the chunk's k, q, v, g, o rows (and
 * the work buffer). Kernel 2 (kda_chunk_scan_kernel, one block per head and 64
 * value columns) walks the chunks in order with S0 in shared memory: per chunk two products with S0 (d and o) and
 * the rank-64 update, ~3 x 64 x hd flops per column instead of 64 serial token steps, the next chunk's operands
 * copied in while it computes.
 *
 * The sums run in other orders than the serial paths' (f32 throughout, no double accumulators), so this path is
 * only taken where a prefill already rounds differently (cuda_kda.h); test_kda bounds it against the CPU. */
#include <cuda_pipeline.h>

#include "cuda/cuda_internal.h"
#include "cuda/cuda_kda.h"
#include "cuda/cuda_launch.h"

#define KC NF_KDA_CHUNK
#define KC_TILE 32  /* key channels per tile of the pair sums */
#define KC_THREADS 256
#define KV2_TILE 16 /* NF_CUDA_KDA_PREP_V2: key channels per tile, and the tile arrays' row length (floats) */
#define KV2_LD 68
#define KS_NC 64    /* value columns per block of the serial pass */
#define KS_THREADS 512

static_assert(KC == 64, "the pair sums map 16 x 16 threads onto 4 x 4 pairs each of a 64-token chunk");
static_assert(2 * NF_KDA_CHUNKED_MAX_HEAD_DIM <= KC_THREADS, "one thread per key and per value column");
static_assert(7 * KV2_TILE * KV2_LD <= 2 * KC * KC && KC * KV2_TILE == 4 * KC_THREADS,
              "the V2 tiles (seven arrays) fit where A^T and P^T go; four elements per thread");

/* the prep kernel's shared memory: A^T and P^T [KC][KC], then the tiles of the pair sums [3][KC][KC_TILE + 1] and
 * later, in the same place, the columns' X [KC][KC_THREADS]; then β [KC], G_C [hd], the norms' factors [2][KC]
 * (100 KiB: two blocks per SM) */
#define KC_XS (KC * KC_THREADS > 3 * KC * (KC_TILE + 1) ? KC * KC_THREADS : 3 * KC * (KC_TILE + 1))
static size_t prep_smem(void) {
    return (size_t)(2 * KC * KC + KC_XS + KC + NF_KDA_CHUNKED_MAX_HEAD_DIM + 2 * KC) * sizeof(float);
}
static __host__ __device__ int pad4(int hd) { return (hd + 3) & ~3; }
/* the serial pass's shared memory: X [2 KC][h4], S [h4][KS_NC], Kd [KC][h4], U0, O0 and d [KC][KS_NC] each, Γ_C [h4];
 * double-buffered (DB): X and U0 twice (d in place of U0, O0 read from global memory), 224.5 KiB at hd 128 */
static __host__ __device__ size_t scan_smem(int hd, bool db) {
    const int h4 = pad4(hd);
    return db ? (size_t)(4 * KC * h4 + h4 * KS_NC + KC * h4 + 2 * KC * KS_NC + h4) * sizeof(float)
              : (size_t)(2 * KC * h4 + h4 * KS_NC + KC * h4 + 3 * KC * KS_NC + h4) * sizeof(float);
}


/* dst[0..n) = src[0..n) by cp.async: 16-byte copies when VEC (n, both addresses multiples of 4 floats) */
template <bool VEC> __device__ __forceinline__ void copy_row(float *dst, const float *src, int n, int lane, int nl) {
    if (VEC) {
        for (int x = lane; x < n / 4; x += nl) __pipeline_memcpy_async(dst + 4 * x, src + 4 * x, 16);
    } else {
        for (int x = lane; x < n; x += nl) __pipeline_memcpy_async(dst + x, src + x, 4);
    }
}

/* Block (chunk blockIdx.x, head blockIdx.y), KC_THREADS threads. In place for the chunk's n <= KC tokens: q rows
 * <- Q', k rows <- M1, v rows <- U0, g rows (log2 decays on entry) <- Kd, o rows <- O0; gam[chunk][h][i] <- Γ_C. */
template <bool PREP, bool V2>
__global__ void __launch_bounds__(KC_THREADS, 2) kda_chunk_prep_kernel(float *qkv, float *g, const float *dt,
                                                                      const float *ssm_a, float lb, const float *beta,
                                                                      float qscale, float *o, float *gam, int T, int H,
                                                                      int hd, bool vec) {
    NF_PDL_ENTER();
    extern __shared__ __align__(16) float sh[];
    float *At = sh;                 /* [s][t]: β_t a_ts for s < t, 0 elsewhere (transposed: 4 rows t in a float4) */
    float *Pt = At + KC * KC;       /* [s][t]: P_ts for s <= t */
    float *tk = Pt + KC * KC;       /* [KC][KC_TILE + 1] key, query and cumulative decay tiles */
    float *tq = tk + KC * (KC_TILE + 1), *tg = tq + KC * (KC_TILE + 1);
    float *Xs = tk;                 /* [KC][KC_THREADS]: after the pair sums, column tid's X at Xs[t][tid] */
    float *bs = tk + KC_XS;         /* [KC] β */
    float *gls = bs + KC;           /* [hd] G_C */
    float *qn = gls + NF_KDA_CHUNKED_MAX_HEAD_DIM, *kn = qn + KC; /* [KC] each: qscale / |q_t|, 1 / |k_t| */
    const int c = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, inner = H * hd;
    const int t0 = c * KC, n = T - t0 < KC ? T - t0 : KC;
    const size_t rs = (size_t)3 * inner; /* qkv's row stride */
    float *q0 = qkv + (size_t)t0 * rs + h * hd, *k0 = q0 + inner, *v0 = q0 + 2 * inner;
    float *g0 = g + (size_t)t0 * inner + h * hd;

    /* The inputs' preparation (the serial paths' kda_prep_kernel, here in this kernel: one pass less over qkv and g):
     * G, the chunk's cumulative log2 decay per channel, in place (thread i < hd keeps its channel's G_C);
     * β = sigmoid; the squares of q and k staged in Xs for the per-token L2 norms */
    float gl = 0.0f;
    if (tid < hd) {
        const float dti = dt[h * hd + tid], rate = -ssm_a[h];
#pragma unroll 1
        for (int tb = 0; tb < KC; tb += 16) {
            float gv[16];
#pragma unroll
            for (int u = 0; u < 16; u++) gv[u] = tb + u < n ? g0[(size_t)(tb + u) * inner + tid] : 0.0f;
#pragma unroll
            for (int u = 0; u < 16; u++)
                if (tb + u < n) {
                    gl = __fadd_rn(gl, PREP ? __fmul_rn(nf_d_kda_gate(gv[u], dti, rate, lb), 1.44269504088896341f) : gv[u]);
                    g0[(size_t)(tb + u) * inner + tid] = gl;
                }
        }
        gls[tid] = gl;
    }
    if (tid < KC) {
        const float b = tid < n ? beta[(size_t)(t0 + tid) * H + h] : 0.0f;
        bs[tid] = tid < n && PREP ? nf_d_sigmoid(b) : b;
    }
    if (!PREP) { /* prepared by kda_prep_kernel: the norms are in q and k already */
        if (tid < KC) qn[tid] = 1.0f, kn[tid] = 1.0f;
    } else if (tid < 2 * hd) { /* thread i < hd: q channel i; hd <= i < 2 hd: k channel i - hd */
        const float *src = tid < hd ? q0 + tid : k0 + (tid - hd);
#pragma unroll 1
        for (int tb = 0; tb < KC; tb += 16) {
            float r[16];
#pragma unroll
            for (int u = 0; u < 16; u++) r[u] = tb + u < n ? src[(size_t)(tb + u) * rs] : 0.0f;
#pragma unroll
            for (int u = 0; u < 16; u++) Xs[(tb + u) * KC_THREADS + tid] = __fmul_rn(r[u], r[u]);
        }
    } else {
        for (int t = 0; t < KC; t++) Xs[t * KC_THREADS + tid] = 0.0f;
    }
    /* (both branches above are block-uniform: PREP is a template parameter) */
    __syncthreads();
    if (PREP) { /* token tid / 4: four threads sum a quarter of its q and k squares each */
        const int t = tid >> 2, part = tid & 3;
        float sq = 0.0f, sk = 0.0f;
        for (int i = part; i < hd; i += 4) {
            sq = __fadd_rn(sq, Xs[t * KC_THREADS + i]);
            sk = __fadd_rn(sk, Xs[t * KC_THREADS + hd + i]);
        }
        sq = __fadd_rn(sq, __shfl_xor_sync(0xffffffffu, sq, 1)), sk = __fadd_rn(sk, __shfl_xor_sync(0xffffffffu, sk, 1));
        sq = __fadd_rn(sq, __shfl_xor_sync(0xffffffffu, sq, 2)), sk = __fadd_rn(sk, __shfl_xor_sync(0xffffffffu, sk, 2));
        if (part == 0) {
            qn[t] = __fdiv_rn(qscale, sqrtf(__fadd_rn(sq, 1e-6f)));
            kn[t] = __fdiv_rn(1.0f, sqrtf(__fadd_rn(sk, 1e-6f)));
        }
    }
    __syncthreads();
    if (V2) { /* the value columns' right-hand side (v; β is applied in place later) straight into Xs, copied while
               * the pair sums run: Xs[t][hd + j] (the squares above are consumed) */
        const int warp = tid / 32, lane = tid % 32;
        for (int r = warp; r < n; r += KC_THREADS / 32) {
            if (vec) copy_row<true>(Xs + r * KC_THREADS + hd, v0 + (size_t)r * rs, hd, lane, 32);
            else copy_row<false>(Xs + r * KC_THREADS + hd, v0 + (size_t)r * rs, hd, lane, 32);
        }
        __pipeline_commit();
    }

    /* the pair sums: thread (ti, si) owns pairs (ti + 16 a, si + 16 b); one exponent serves a and P */
    const int ti = tid >> 4, si = tid & 15;
    float sa[4][4], sp[4][4];
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int b = 0; b < 4; b++) sa[a][b] = sp[a][b] = 0.0f;
    if constexpr (V2) {
        /* Tiles of KV2_TILE channels in the At/Pt space (written only after the last tile), each array [channel][64]
         * with token t at position 4 (t % 16) + t / 16, so that a thread's four tokens ti + 16 a (or si + 16 b) are
         * one float4. A pair in the same 16-token block (a == b) takes its exponent directly; a pair of blocks b < a
         * goes through the reference G_r, r = 16 a (s < r <= t, so both exponents are <= 0):
         *   k_t k_s 2^(G_t - G_s) = [k_t 2^(G_t - G_r)] [k_s 2^(G_r - G_s)],
         * the first factor per token (TKt, TQt), the second per token and reference (RA, RB), each computed once
         * for the block instead of once per pair: 4 exponents per thread and channel instead of 10. A padded token
         * (t >= n) has G = G_C (no decay past the chunk's end), so every exponent a real pair or a padded t meets
         * is finite; the pairs s > t of the diagonal blocks (si > ti) may overflow and are never written. */
        constexpr int W = KV2_TILE, LD = KV2_LD;
        float *TK = sh, *TQ = TK + W * LD, *TG = TQ + W * LD, *TKt = TG + W * LD, *TQt = TKt + W * LD,
              *RA = TQt + W * LD, *RB = RA + W * LD;
        constexpr int PER = KC * W / KC_THREADS;
        /* this thread's element j of a tile, x = tid + 256 j: channel i = (x % 32) / 2, token t = 16 blk + tb with
         * blk = 2 (x / 512) + x % 2 and tb = (x / 32) % 16 (a warp's stores: at most two-way bank conflicts at LD 68) */
        auto elem = [&](int j, int &i, int &blk, int &tb, int &t) {
            const int x = tid + j * KC_THREADS;
            i = (x & 31) >> 1, blk = 2 * (x >> 9) + (x & 1), tb = (x >> 5) & 15, t = 16 * blk + tb;
        };
        for (int i0 = 0; i0 < hd; i0 += W) {
            const int w = hd - i0 < W ? hd - i0 : W;
            float lk[PER], lq[PER], lg[PER];
#pragma unroll
            for (int j = 0; j < PER; j++) {
                int i, blk, tb, t;
                elem(j, i, blk, tb, t);
                const bool ok = t < n && i < w;
                lk[j] = ok ? k0[(size_t)t * rs + i0 + i] : 0.0f;
                lq[j] = ok ? q0[(size_t)t * rs + i0 + i] : 0.0f;
                lg[j] = ok ? g0[(size_t)t * inner + i0 + i] : i < w ? gls[i0 + i] : 0.0f;
            }
#pragma unroll
            for (int j = 0; j < PER; j++) {
                int i, blk, tb, t;
                elem(j, i, blk, tb, t);
                const int pos = i * LD + 4 * tb + blk;
                lk[j] = __fmul_rn(lk[j], kn[t]), lq[j] = __fmul_rn(lq[j], qn[t]);
                TK[pos] = lk[j], TQ[pos] = lq[j], TG[pos] = lg[j];
            }
            __syncthreads();
            /* the elementwise outputs of these channels (q <- Γ q, g <- Kd; the key columns' right-hand side β Γ k
             * into Xs) and the factors of the block pairs */
#pragma unroll
            for (int j = 0; j < PER; j++) {
                int i, blk, tb, t;
                elem(j, i, blk, tb, t);
                const int pos = i * LD + 4 * tb + blk, base = i * LD + 4 * tb;
                const bool ok = t < n && i < w;
                const float gt = lg[j], kt = lk[j], dec = exp2f(gt);
                if (ok) {
                    q0[(size_t)t * rs + i0 + i] = __fmul_rn(dec, lq[j]);
                    g0[(size_t)t * inner + i0 + i] = __fmul_rn(exp2f(__fsub_rn(gls[i0 + i], gt)), kt);
                }
                if (i < w) Xs[t * KC_THREADS + i0 + i] = __fmul_rn(bs[t], __fmul_rn(dec, kt));
                if (blk > 0) {
                    const float f = nf_d_ex2_ftz(__fsub_rn(gt, TG[i * LD + blk]));
                    TKt[pos] = __fmul_rn(kt, f), TQt[pos] = __fmul_rn(lq[j], f);
                }
                /* k_s 2^(G_r - G_s) for the references r = 16 a above the token's block: RA = (a1 b0, a2 b0, a2 b1,
                 * a3 b0), RB = (a3 b1, a3 b2) at the slot of its position in the block */
                const float g1 = TG[i * LD + 1], g2 = TG[i * LD + 2], g3 = TG[i * LD + 3];
                auto f = [&](float gr) { return ok ? __fmul_rn(kt, nf_d_ex2_ftz(__fsub_rn(gr, gt))) : 0.0f; };
                if (blk == 0) RA[base] = f(g1), RA[base + 1] = f(g2), RA[base + 3] = f(g3);
                else if (blk == 1) RA[base + 2] = f(g2), RB[base] = f(g3);
                else if (blk == 2) RB[base + 1] = f(g3);
            }
            __syncthreads();
            for (int i = 0; i < w; i++) {
                const float4 K4 = *(const float4 *)(TK + i * LD + 4 * ti), Q4 = *(const float4 *)(TQ + i * LD + 4 * ti),
                             G4 = *(const float4 *)(TG + i * LD + 4 * ti), KS = *(const float4 *)(TK + i * LD + 4 * si),
                             GS = *(const float4 *)(TG + i * LD + 4 * si), KT = *(const float4 *)(TKt + i * LD + 4 * ti),
                             QT = *(const float4 *)(TQt + i * LD + 4 * ti), A4 = *(const float4 *)(RA + i * LD + 4 * si),
                             B4 = *(const float4 *)(RB + i * LD + 4 * si);
                const float kt[4] = {K4.x, K4.y, K4.z, K4.w}, qt[4] = {Q4.x, Q4.y, Q4.z, Q4.w},
                            gt[4] = {G4.x, G4.y, G4.z, G4.w}, ks[4] = {KS.x, KS.y, KS.z, KS.w},
                            gs[4] = {GS.x, GS.y, GS.z, GS.w}, kf[4] = {KT.x, KT.y, KT.z, KT.w},
                            qf[4] = {QT.x, QT.y, QT.z, QT.w};
#pragma unroll
                for (int a = 0; a < 4; a++) { /* the diagonal blocks */
                    const float e = __fmul_rn(nf_d_ex2_ftz(__fsub_rn(gt[a], gs[a])), ks[a]);
                    sa[a][a] = __fmaf_rn(kt[a], e, sa[a][a]);
                    sp[a][a] = __fmaf_rn(qt[a], e, sp[a][a]);
                }
                const float r[6] = {A4.x, A4.y, A4.z, A4.w, B4.x, B4.y}; /* (1,0) (2,0) (2,1) (3,0) (3,1) (3,2) */
#pragma unroll
                for (int a = 1; a < 4; a++)
#pragma unroll
                    for (int b = 0; b < a; b++) {
                        const float rv = r[a * (a - 1) / 2 + b];
                        sa[a][b] = __fmaf_rn(kf[a], rv, sa[a][b]);
                        sp[a][b] = __fmaf_rn(qf[a], rv, sp[a][b]);
                    }
            }
            __syncthreads();
        }
        __pipeline_wait_prior(0); /* this thread's copies of v (the barrier below shows them to every thread) */
    } else {
        for (int i0 = 0; i0 < hd; i0 += KC_TILE) {
            const int w = hd - i0 < KC_TILE ? hd - i0 : KC_TILE;
            /* the tile: every thread's loads first, then its stores (a load waiting on each store was a round trip
             * per element); then, from the tile, the elementwise outputs of these channels: q <- Γ q, g <- Kd,
             * k <- β Γ k (the right-hand side of the key columns) */
            constexpr int PER = KC * KC_TILE / KC_THREADS;
            float lk[PER], lq[PER], lg[PER];
    #pragma unroll
            for (int j = 0; j < PER; j++) {
                const int x = tid + j * KC_THREADS, t = x / KC_TILE, i = x % KC_TILE;
                const bool ok = t < n && i < w;
                lk[j] = ok ? k0[(size_t)t * rs + i0 + i] : 0.0f;
                lq[j] = ok ? q0[(size_t)t * rs + i0 + i] : 0.0f;
                lg[j] = ok ? g0[(size_t)t * inner + i0 + i] : 0.0f;
            }
    #pragma unroll
            for (int j = 0; j < PER; j++) { /* normalised (q times qscale) */
                const int t = (tid + j * KC_THREADS) / KC_TILE;
                lk[j] = __fmul_rn(lk[j], kn[t]), lq[j] = __fmul_rn(lq[j], qn[t]);
            }
    #pragma unroll
            for (int j = 0; j < PER; j++) {
                const int x = tid + j * KC_THREADS, t = x / KC_TILE, i = x % KC_TILE;
                tk[t * (KC_TILE + 1) + i] = lk[j], tq[t * (KC_TILE + 1) + i] = lq[j], tg[t * (KC_TILE + 1) + i] = lg[j];
                if (t < n && i < w) {
                    const float dec = exp2f(lg[j]);
                    q0[(size_t)t * rs + i0 + i] = __fmul_rn(dec, lq[j]);
                    g0[(size_t)t * inner + i0 + i] = __fmul_rn(exp2f(__fsub_rn(gls[i0 + i], lg[j])), lk[j]);
                    k0[(size_t)t * rs + i0 + i] = __fmul_rn(bs[t], __fmul_rn(dec, lk[j]));
                }
            }
            __syncthreads();
            for (int i = 0; i < w; i++) {
                float ks[4], gs[4];
    #pragma unroll
                for (int b = 0; b < 4; b++) {
                    ks[b] = tk[(si + 16 * b) * (KC_TILE + 1) + i];
                    gs[b] = tg[(si + 16 * b) * (KC_TILE + 1) + i];
                }
    #pragma unroll
                for (int a = 0; a < 4; a++) {
                    const int t = ti + 16 * a;
                    const float kt = tk[t * (KC_TILE + 1) + i], qt = tq[t * (KC_TILE + 1) + i],
                                gt = tg[t * (KC_TILE + 1) + i];
                    /* b <= a only: for b > a, s >= 16 b > t is never a pair (nvcc cannot see that ti < 16, and issued
                     * all 16 exponents per channel, 6 of them predicated off); for b < a always s < t; for b == a,
                     * s <= t when si <= ti. t < n: a padded token's G is 0, above the real ones, and its exponent
                     * would be positive. */
    #pragma unroll
                    for (int b = 0; b <= a; b++) {
                        if ((b < a || si <= ti) && t < n) {
                            const float e = __fmul_rn(exp2f(__fsub_rn(gt, gs[b])), ks[b]);
                            sa[a][b] = __fmaf_rn(kt, e, sa[a][b]);
                            sp[a][b] = __fmaf_rn(qt, e, sp[a][b]);
                        }
                    }
                }
            }
            __syncthreads();
        }
    }
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int b = 0; b < 4; b++) {
            const int t = ti + 16 * a, s = si + 16 * b;
            /* (V2: the padded tokens' and the diagonal blocks' s > t sums are not zeros, and are left out here) */
            At[s * KC + t] = s < t && t < n ? __fmul_rn(bs[t], sa[a][b]) : 0.0f;
            Pt[s * KC + t] = s <= t && t < n ? sp[a][b] : 0.0f;
        }
    __syncthreads();

    /* one column per thread: key channel i = tid (right-hand side β Γ k, written by the tile loop) or value column
     * j = tid - hd (β v); X in shared memory (Xs[t][tid]: a warp's 32 columns in 32 banks). The triangular loops
     * run over 4-row blocks with a loop over the rows before them: fully unrolled 64 x 64 they were ~300 KB of
     * code, and the block waited on instruction fetch (138 us per block on the H100) */
    const bool key = tid < hd, col = tid < 2 * hd;
    const int i = key ? tid : tid - hd;
    float *gcol = key ? k0 + i : v0 + i; /* the column's rows in global memory, stride rs */
    float *xc = Xs + tid;
    if (V2) { /* the key columns' right-hand side is in Xs from the tiles, the value columns' v from the copies */
        if (col && !key)
            for (int t = 0; t < KC; t++) xc[t * KC_THREADS] = t < n ? __fmul_rn(bs[t], xc[t * KC_THREADS]) : 0.0f;
    } else {
#pragma unroll 1
        for (int t0b = 0; t0b < KC; t0b += 16) { /* 16 loads in flight, then their stores */
            float r[16];
#pragma unroll
            for (int u = 0; u < 16; u++) r[u] = col && t0b + u < n ? gcol[(size_t)(t0b + u) * rs] : 0.0f;
#pragma unroll
            for (int u = 0; u < 16; u++) xc[(t0b + u) * KC_THREADS] = key ? r[u] : __fmul_rn(bs[t0b + u], r[u]);
        }
    }
    /* forward substitution: X[t] -= Σ_{s < t} A[t][s] X[s], rows in order, 4 at a time */
#pragma unroll 1
    for (int tb = 0; tb < KC; tb += 4) {
        float x[4];
#pragma unroll
        for (int u = 0; u < 4; u++) x[u] = xc[(tb + u) * KC_THREADS];
        for (int s = 0; s < tb; s++) {
            const float xs = xc[s * KC_THREADS];
            const float4 a4 = *(const float4 *)(At + s * KC + tb);
            x[0] = __fmaf_rn(-a4.x, xs, x[0]), x[1] = __fmaf_rn(-a4.y, xs, x[1]);
            x[2] = __fmaf_rn(-a4.z, xs, x[2]), x[3] = __fmaf_rn(-a4.w, xs, x[3]);
        }
#pragma unroll
        for (int u = 1; u < 4; u++)
#pragma unroll
            for (int v = 0; v < u; v++) x[u] = __fmaf_rn(-At[(tb + v) * KC + tb + u], x[v], x[u]);
#pragma unroll
        for (int u = 0; u < 4; u++) xc[(tb + u) * KC_THREADS] = x[u];
    }
    /* M1 or U0 = X to global; then Y = P X in place, the blocks from the last (block tb needs rows <= tb + 3) */
#pragma unroll 1
    for (int t0b = 0; t0b < KC; t0b += 16)
#pragma unroll
        for (int u = 0; u < 16; u++)
            if (col && t0b + u < n) gcol[(size_t)(t0b + u) * rs] = xc[(t0b + u) * KC_THREADS];
#pragma unroll 1
    for (int tb = KC - 4; tb >= 0; tb -= 4) {
        float y[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int s = 0; s < tb + 4; s++) {
            const float xs = xc[s * KC_THREADS];
            const float4 p4 = *(const float4 *)(Pt + s * KC + tb);
            y[0] = __fmaf_rn(p4.x, xs, y[0]), y[1] = __fmaf_rn(p4.y, xs, y[1]);
            y[2] = __fmaf_rn(p4.z, xs, y[2]), y[3] = __fmaf_rn(p4.w, xs, y[3]);
        }
#pragma unroll
        for (int u = 0; u < 4; u++) xc[(tb + u) * KC_THREADS] = y[u];
    }
    if (!col) return;
    /* Q' = Γ q - P M1 (Γ q from the tile loop) or O0 = P U0 */
    float *ocol = o + (size_t)t0 * inner + h * hd + i;
#pragma unroll 1
    for (int t0b = 0; t0b < KC; t0b += 16) {
        float r[16];
        if (key)
#pragma unroll
            for (int u = 0; u < 16; u++) r[u] = t0b + u < n ? q0[(size_t)(t0b + u) * rs + i] : 0.0f;
#pragma unroll
        for (int u = 0; u < 16; u++) {
            if (t0b + u >= n) continue;
            const float y = xc[(t0b + u) * KC_THREADS];
            if (key)
                q0[(size_t)(t0b + u) * rs + i] = __fsub_rn(r[u], y);
            else
                ocol[(size_t)(t0b + u) * inner] = y;
        }
    }
    if (key) gam[((size_t)c * H + h) * hd + i] = exp2f(gl);
}

/* Block (value columns [64 blockIdx.x, +64), head blockIdx.y), KS_THREADS threads: the chunks in order, S0 in
 * shared memory. Per chunk: (a) [d; o - O0] = [M1; Q'] S0 by 4 x 4 tiles, d = U0 - .., o written; (b) S0 =
 * Γ_C S0 + Kd^T d. Kd and Γ_C are copied in during (a), the next chunk's M1, Q', U0, O0 during (b). */
template <bool VEC, bool DB>
__global__ void __launch_bounds__(KS_THREADS, 1) kda_chunk_scan_kernel(float *S, const float *qkv, const float *kd,
                                                                      const float *gam, float *o, int T, int H,
                                                                      int hd) {
    NF_PDL_ENTER();
    extern __shared__ __align__(16) float sh[];
    const int h = blockIdx.y, j0 = blockIdx.x * KS_NC, tid = threadIdx.x, inner = H * hd, h4 = pad4(hd);
    const int nc = hd - j0 < KS_NC ? hd - j0 : KS_NC, nch = (T + KC - 1) / KC;
    const size_t rs = (size_t)3 * inner;
    /* X [2 KC][h4]: M1 rows, then Q' rows; S [h4][KS_NC] the state's columns; Kd [KC][h4]; U0, O0, d [KC][KS_NC];
     * Γ_C [h4]. DB: X and U0 in two buffers (chunk c in buffer c % 2), d in place of U0, O0 from global memory,
     * so that the next chunk's copies run during both phases, not only during (b). */
    float *const X0 = sh, *const X1 = DB ? X0 + 2 * KC * h4 : X0;
    float *Ss = X1 + 2 * KC * h4; /* (not DB: X1 is X0) */
    float *Ks = Ss + h4 * KS_NC;
    float *const U0 = Ks + KC * h4, *const U1 = DB ? U0 + KC * KS_NC : U0;
    float *O0s = U1 + KC * KS_NC;                 /* not DB */
    float *Dsb = O0s + KC * KS_NC;                /* not DB */
    float *Gs = DB ? U1 + KC * KS_NC : Dsb + KC * KS_NC;
    float *Sh = S + (size_t)h * hd * hd;

    /* zeros where no copy lands: padded key channels and value columns, the rows past a last partial chunk */
    for (int x = tid; x < (int)(scan_smem(hd, DB) / sizeof(float)); x += KS_THREADS) sh[x] = 0.0f;
    __syncthreads();
    for (int x = tid; x < hd * nc; x += KS_THREADS) Ss[(x / nc) * KS_NC + x % nc] = Sh[(size_t)(x / nc) * hd + j0 + x % nc];

    const int warp = tid / 32, lane = tid % 32, nwarp = KS_THREADS / 32;
    auto issue_xuo = [&](int c) {
        if (c < nch) {
            const int t0 = c * KC, n = T - t0 < KC ? T - t0 : KC;
            float *Xs = c & 1 ? X1 : X0, *U0s = c & 1 ? U1 : U0;
            /* one warp per row: 2 n rows of X (hd each), n rows of U0 and (not DB) O0 (nc each) */
            for (int r = warp; r < (DB ? 3 : 4) * n; r += nwarp) {
                const int t = r % n, part = r / n;
                const float *q = qkv + (size_t)(t0 + t) * rs + h * hd;
                if (part == 0) copy_row<VEC>(Xs + t * h4, q + inner, hd, lane, 32);                 /* M1 */
                else if (part == 1) copy_row<VEC>(Xs + (KC + t) * h4, q, hd, lane, 32);         /* Q' */
                else if (part == 2) copy_row<VEC>(U0s + t * KS_NC, q + 2 * inner + j0, nc, lane, 32);
                else copy_row<VEC>(O0s + t * KS_NC, o + (size_t)(t0 + t) * inner + h * hd + j0, nc, lane, 32);
            }
        }
        __pipeline_commit();
    };
    auto issue_kd = [&](int c) {
        const int t0 = c * KC, n = T - t0 < KC ? T - t0 : KC;
        for (int r = warp; r < n; r += nwarp) copy_row<VEC>(Ks + r * h4, kd + (size_t)(t0 + r) * inner + h * hd, hd, lane, 32);
        if (warp == nwarp - 1) copy_row<VEC>(Gs, gam + ((size_t)c * H + h) * hd, hd, lane, 32);
        __pipeline_commit();
    };

    const int rg = tid >> 4, cg = tid & 15; /* (a): rows 4 rg..+3 of [M1; Q'], columns 4 cg..+3; (b): key rows */
    issue_xuo(0);
    for (int c = 0; c < nch; c++) {
        const int t0 = c * KC, n = T - t0 < KC ? T - t0 : KC;
        float *Xs = c & 1 ? X1 : X0, *U0s = c & 1 ? U1 : U0, *Ds = DB ? U0s : Dsb;
        __syncthreads(); /* (b) of the chunk before is done with Ks, d and Ss */
        if (n < KC) /* the last chunk is partial: its missing rows must read as zeros */
            for (int x = tid; x < (KC - n) * h4; x += KS_THREADS) {
                Xs[n * h4 + x] = 0.0f, Xs[(KC + n) * h4 + x] = 0.0f, Ks[n * h4 + x] = 0.0f;
            }
        if (n < KC)
            for (int x = tid; x < (KC - n) * KS_NC; x += KS_THREADS) U0s[n * KS_NC + x] = 0.0f;
        issue_kd(c);
        if (DB) {
            issue_xuo(c + 1);         /* into the other buffers, free since (a) of chunk c - 1 */
            __pipeline_wait_prior(2); /* this thread's copies of chunk c's M1, Q', U0 */
        } else {
            __pipeline_wait_prior(1); /* this thread's copies of M1, Q', U0, O0 */
        }
        __syncthreads();
        {
            float o0[4][4]; /* DB: this thread's O0 values, loaded before the product so that it covers their latency */
            if (DB && rg >= KC / 4)
#pragma unroll
                for (int a = 0; a < 4; a++) {
                    const int t = 4 * (rg - KC / 4) + a;
#pragma unroll
                    for (int b = 0; b < 4; b++)
                        o0[a][b] = t < n && 4 * cg + b < nc ? o[(size_t)(t0 + t) * inner + h * hd + j0 + 4 * cg + b] : 0.0f;
                }
            float acc[4][4];
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int b = 0; b < 4; b++) acc[a][b] = 0.0f;
            const float *xr = Xs + 4 * rg * h4, *sc = Ss + 4 * cg;
            for (int k = 0; k < h4; k += 4) {
                float4 x[4], s[4];
#pragma unroll
                for (int a = 0; a < 4; a++) x[a] = *(const float4 *)(xr + a * h4 + k);
#pragma unroll
                for (int b = 0; b < 4; b++) s[b] = *(const float4 *)(sc + (k + b) * KS_NC);
#pragma unroll
                for (int a = 0; a < 4; a++) {
                    acc[a][0] = __fmaf_rn(x[a].x, s[0].x, acc[a][0]), acc[a][1] = __fmaf_rn(x[a].x, s[0].y, acc[a][1]);
                    acc[a][2] = __fmaf_rn(x[a].x, s[0].z, acc[a][2]), acc[a][3] = __fmaf_rn(x[a].x, s[0].w, acc[a][3]);
                    acc[a][0] = __fmaf_rn(x[a].y, s[1].x, acc[a][0]), acc[a][1] = __fmaf_rn(x[a].y, s[1].y, acc[a][1]);
                    acc[a][2] = __fmaf_rn(x[a].y, s[1].z, acc[a][2]), acc[a][3] = __fmaf_rn(x[a].y, s[1].w, acc[a][3]);
                    acc[a][0] = __fmaf_rn(x[a].z, s[2].x, acc[a][0]), acc[a][1] = __fmaf_rn(x[a].z, s[2].y, acc[a][1]);
                    acc[a][2] = __fmaf_rn(x[a].z, s[2].z, acc[a][2]), acc[a][3] = __fmaf_rn(x[a].z, s[2].w, acc[a][3]);
                    acc[a][0] = __fmaf_rn(x[a].w, s[3].x, acc[a][0]), acc[a][1] = __fmaf_rn(x[a].w, s[3].y, acc[a][1]);
                    acc[a][2] = __fmaf_rn(x[a].w, s[3].z, acc[a][2]), acc[a][3] = __fmaf_rn(x[a].w, s[3].w, acc[a][3]);
                }
            }
            if (rg < KC / 4) { /* d = U0 - M1 S0 */
#pragma unroll
                for (int a = 0; a < 4; a++)
#pragma unroll
                    for (int b = 0; b < 4; b++) {
                        const int x = (4 * rg + a) * KS_NC + 4 * cg + b;
                        Ds[x] = __fsub_rn(U0s[x], acc[a][b]);
                    }
            } else { /* o = O0 + Q' S0 */
#pragma unroll
                for (int a = 0; a < 4; a++) {
                    const int t = 4 * (rg - KC / 4) + a;
                    if (t < n)
#pragma unroll
                        for (int b = 0; b < 4; b++) {
                            const int j = 4 * cg + b;
                            if (j < nc)
                                o[(size_t)(t0 + t) * inner + h * hd + j0 + j] =
                                    __fadd_rn(DB ? o0[a][b] : O0s[t * KS_NC + j], acc[a][b]);
                        }
                }
            }
        }
        if (DB) {
            __pipeline_wait_prior(1); /* Kd and Γ_C (the next chunk's copies may still run) */
            __syncthreads();          /* every d is in */
        } else {
            __pipeline_wait_prior(0); /* Kd and Γ_C */
            __syncthreads();          /* every d is in; X, U0, O0 are free */
            issue_xuo(c + 1);
        }
        if (4 * rg < h4) { /* S0 = Γ_C S0 + Kd^T d for key rows 4 rg..+3 */
            float acc[4][4];
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int b = 0; b < 4; b++) acc[a][b] = 0.0f;
            for (int s = 0; s < KC; s++) {
                const float4 k4 = *(const float4 *)(Ks + s * h4 + 4 * rg), d4 = *(const float4 *)(Ds + s * KS_NC + 4 * cg);
                const float kk[4] = {k4.x, k4.y, k4.z, k4.w}, dd[4] = {d4.x, d4.y, d4.z, d4.w};
#pragma unroll
                for (int a = 0; a < 4; a++)
#pragma unroll
                    for (int b = 0; b < 4; b++) acc[a][b] = __fmaf_rn(kk[a], dd[b], acc[a][b]);
            }
#pragma unroll
            for (int a = 0; a < 4; a++) {
                const int i = 4 * rg + a;
#pragma unroll
                for (int b = 0; b < 4; b++) {
                    float *sv = Ss + i * KS_NC + 4 * cg + b;
                    *sv = __fmaf_rn(Gs[i], *sv, acc[a][b]);
                }
            }
        }
    }
    __pipeline_wait_prior(0);
    __syncthreads();
    for (int x = tid; x < hd * nc; x += KS_THREADS) Sh[(size_t)(x / nc) * hd + j0 + x % nc] = Ss[(x / nc) * KS_NC + x % nc];
}

/* NF_CUDA_KDA_FUSED_PREP (default on; =off for kda_prep_kernel's pass before the prep kernel): the prep kernel
 * prepares the inputs itself (norms, log2 decays, sigmoid(beta)). Measured with the other session-22 defaults
 * (docs/cuda.md, session 22): kda_prep's 1.65 ms per 16384-token layer call gone. */
static bool fused_prep(void) { return nf_cuda_env_now("NF_CUDA_KDA_FUSED_PREP", "off"); }

/* NF_CUDA_KDA_PREP_V2 (default on; =off for the first prep kernel): the prep kernel's pair sums with one exponent
 * per thread and channel for each diagonal 16-token block and factors shared by the block for the others (4
 * exponents per thread and channel instead of 10, float4 tile reads, no branches), and the right-hand sides kept in shared memory (β Γ k from the tiles, v
 * copied in during the pair sums) instead of a round trip through global memory. Other roundings (the factored
 * exponents, 2^x below 2^-126 flushed), within the same bound of the CPU (test_kda). With the fused preparation:
 * 6.05 ms per 16384-token layer call on the H100 against 8.7-9.0 ms plus kda_prep's 1.65 (session 22). */
static bool prep_v2(void) { return nf_cuda_env_now("NF_CUDA_KDA_PREP_V2", "off"); }

/* NF_CUDA_KDA_SCAN_DB (default on; =off for the single-buffered pass): the serial pass with its X and U0
 * double-buffered (the same operations, so the same bits; the next chunk's copies overlap both phases). */
static bool scan_db(void) { return nf_cuda_env_now("NF_CUDA_KDA_SCAN_DB", "off"); }

extern "C" int nf_cuda_kda_chunked_supported(int hd) { return hd >= 1 && hd <= NF_KDA_CHUNKED_MAX_HEAD_DIM; }

extern "C" size_t nf_cuda_kda_work_floats(int T, int H, int hd) {
    return T > 0 ? (size_t)((T + KC - 1) / KC) * H * hd : 0;
}

extern "C" int nf_cuda_kda_chunked(cudaStream_t stream, float *S, float *qkv, float *g, const float *dt,
                                   const float *ssm_a, float lb, float *beta, float qscale, float *o, int T, int H,
                                   int hd, float *work) {
    if (!nf_cuda_kda_chunked_supported(hd))
        return nf_fail("cuda kda: head_dim %d: the chunked recurrence needs hd <= %d", hd, NF_KDA_CHUNKED_MAX_HEAD_DIM);
    if (!work) return nf_fail("cuda kda: the chunked recurrence needs a work buffer");
    if (T <= 0) return 0;
    const bool fprep = fused_prep();
    if (!fprep && nf_cuda_kda_prep(stream, qkv, g, dt, ssm_a, lb, beta, qscale, T, H, hd, 1) < 0) return -1;
    static bool smem_set[NF_CUDA_MAX_DEVICES]; /* over 48 KiB of dynamic shared memory needs the opt-in */
    if (nf_cuda_once_per_device(smem_set, [] {
            const auto a = cudaFuncAttributeMaxDynamicSharedMemorySize;
            const int prep = (int)prep_smem(), most = (int)scan_smem(NF_KDA_CHUNKED_MAX_HEAD_DIM, false),
                      most_db = (int)scan_smem(NF_KDA_CHUNKED_MAX_HEAD_DIM, true);
            NF_CU(cudaFuncSetAttribute(kda_chunk_prep_kernel<true, false>, a, prep));
            NF_CU(cudaFuncSetAttribute(kda_chunk_prep_kernel<false, false>, a, prep));
            NF_CU(cudaFuncSetAttribute(kda_chunk_prep_kernel<true, true>, a, prep));
            NF_CU(cudaFuncSetAttribute(kda_chunk_prep_kernel<false, true>, a, prep));
            NF_CU(cudaFuncSetAttribute(kda_chunk_scan_kernel<true, false>, a, most));
            NF_CU(cudaFuncSetAttribute(kda_chunk_scan_kernel<false, false>, a, most));
            NF_CU(cudaFuncSetAttribute(kda_chunk_scan_kernel<true, true>, a, most_db));
            NF_CU(cudaFuncSetAttribute(kda_chunk_scan_kernel<false, true>, a, most_db));
            return 0;
        }) < 0)
        return -1;
    const int nch = (T + KC - 1) / KC;
    const bool vec = hd % 4 == 0 && (uintptr_t)qkv % 16 == 0 && (uintptr_t)g % 16 == 0 && (uintptr_t)o % 16 == 0 &&
                     (uintptr_t)work % 16 == 0;
    const bool v2 = prep_v2();
    auto pk = fprep ? (v2 ? kda_chunk_prep_kernel<true, true> : kda_chunk_prep_kernel<true, false>)
                    : (v2 ? kda_chunk_prep_kernel<false, true> : kda_chunk_prep_kernel<false, false>);
    nf_launch(pk, dim3(nch, H), KC_THREADS, prep_smem(), stream, qkv, g, dt, ssm_a, lb, (const float *)beta, qscale, o,
              work, T, H, hd, vec);
    NF_LAUNCHED();
    const dim3 grid((hd + KS_NC - 1) / KS_NC, H);
    const bool db = scan_db();
    auto k = vec ? (db ? kda_chunk_scan_kernel<true, true> : kda_chunk_scan_kernel<true, false>)
                 : (db ? kda_chunk_scan_kernel<false, true> : kda_chunk_scan_kernel<false, false>);
    nf_launch(k, grid, KS_THREADS, scan_smem(hd, db), stream, S, (const float *)qkv, (const float *)g,
              (const float *)work, o, T, H, hd);
    NF_LAUNCHED();
    return 0;
}
