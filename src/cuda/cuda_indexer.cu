/* cuda_indexer.cu — the DSA lightning indexer with k-pool compression and forced tail, on the GPU (the CPU
 * reference and the rules: src/cpu/indexer.c; the kernel-level API: cuda_attn.h).
 *
 * Caching: the keys (LayerNorm) and gate logits of the T new tokens fill the pools they complete, one thread
 * per (completed pool, channel), members read from the new rows or, for the pool that was open before the
 * call, from the open-pool rows; then each open-pool slot takes the newest of the new tokens that map to it.
 *
 * Scoring: at depth this is the expensive part of a decode step (every visible pool, every head), so it is a
 * tiled product: a CTA stages a tile of pooled keys and the queries' per-head rows in shared memory, chunk by
 * chunk over the head dimension, and each thread keeps one pool's dot products for a batch of heads (and one
 * or two queries) in registers. A dot is accumulated over the head dimension in index order with fused
 * multiply-adds, and the heads are summed in order with unfused operations as the CPU writes them, so a score
 * does not depend on the tile shape: decode (one query: 128 pools per CTA) and prefill (8 queries x 64 pools
 * per CTA) give the same bits. The score is stored as an order-preserving 32-bit key, and the CTA counts each
 * key's top 12 bits in the query's histogram (warp-aggregated atomics), the first pass of the selection.
 *
 * Selection (one CTA per query): a radix select. The histogram gives the bin that holds the budget-th best
 * key; while that bin holds more than TK_CAP keys, a pass over the query's keys histograms the next digit
 * inside it. One pass then collects the keys above the threshold prefix (certainly selected) and the ones on
 * it (candidates, now few) into shared memory, where further digit histograms narrow the candidates to the
 * exact threshold key; exact ties at the threshold go to the lowest pool indices. Only the `budget` survivors
 * are sorted (bitonic, by score descending then index ascending: the CPU's order). Nothing here is quadratic
 * in the number of pools. Queries run in chunks so that the key buffer stays bounded at long contexts. */
#include <math.h>

#include "cuda/cuda_attn.h"
#include "cuda/cuda_internal.h"
#include "cuda/cuda_launch.h"

static __host__ __device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

/* ---- caching ---------------------------------------------------------------------------------------- */

/* thread = (pool, channel) for pools pool0 .. pool0+npools-1, all completed by the tokens pos0 .. */
__global__ void idx_pool_kernel(const float *ik, const float *ig, const float *ape, const float *open_key,
                                const float *open_gate, int64_t pos0, int kpool, int hd, int64_t pool0, int64_t npools,
                                float *pool_key) {
    NF_PDL_ENTER();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= npools * hd) return;
    const int64_t pool = pool0 + i / hd;
    const int ch = (int)(i % hd);
    float key[64], wts[64];
    for (int m = 0; m < kpool; m++) {
        const int64_t a = pool * kpool + m;
        float g;
        if (a >= pos0) {
            key[m] = ik[(a - pos0) * hd + ch];
            g = ig ? ig[(a - pos0) * hd + ch] : 0.0f;
        } else { /* a member cached by an earlier call: still in its open-pool slot (slot = a % kpool = m) */
            key[m] = open_key[(size_t)m * hd + ch];
            g = open_gate[(size_t)m * hd + ch];
        }
        wts[m] = __fadd_rn(g, ape ? ape[(size_t)m * hd + ch] : 0.0f);
    }
    /* softmax over the members as src/cpu/vec.c nf_softmax_row, then the weighted sum in member order */
    float mx = wts[0];
    for (int m = 1; m < kpool; m++) if (wts[m] > mx) mx = wts[m];
    double s = 0.0;
    for (int m = 0; m < kpool; m++) {
        wts[m] = expf(__fsub_rn(wts[m], mx));
        s += wts[m];
    }
    const float inv = (float)(1.0 / s);
    float P = 0.0f;
    for (int m = 0; m < kpool; m++) P = __fadd_rn(P, __fmul_rn(__fmul_rn(wts[m], inv), key[m]));
    pool_key[pool * hd + ch] = P;
}

/* thread = (slot, channel): the slot keeps the newest new token that maps to it (as the CPU's writes leave it) */
__global__ void idx_open_kernel(const float *ik, const float *ig, int64_t pos0, int T, int kpool, int hd,
                                float *open_key, float *open_gate) {
    NF_PDL_ENTER();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= kpool * hd) return;
    const int slot = i / hd, ch = i % hd;
    const int64_t last = pos0 + T - 1;
    const int64_t a = last - (((last - slot) % kpool) + kpool) % kpool;
    if (a < pos0) return;
    open_key[(size_t)slot * hd + ch] = ik[(a - pos0) * hd + ch];
    open_gate[(size_t)slot * hd + ch] = ig ? ig[(a - pos0) * hd + ch] : 0.0f;
}

/* ---- scoring ---------------------------------------------------------------------------------------- */

#define SC_KC 32 /* head dims staged per step */

/* Order-preserving key: a larger score gives a larger key; -0 ranks as +0 (the CPU compares floats); NaN last. */
__device__ __forceinline__ uint32_t score_key(float s) {
    if (s != s) return 0u;
    uint32_t u = s == 0.0f ? 0u : __float_as_uint(s);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* CTA = PB pools x (QG groups x QPT queries); thread = one pool, QPT queries, NHB heads at a time. */
template <int PB, int QG, int QPT, int NHB>
__global__ void __launch_bounds__(PB *QG) idx_score_kernel(const float *__restrict__ pool_key, const float *__restrict__ iq,
                                                          const float *__restrict__ w, int64_t pos0, int T, int nh,
                                                          int hd, int kpool, int budget, float sc,
                                                          uint32_t *__restrict__ keys, int64_t ld,
                                                          uint32_t *__restrict__ hist) {
    NF_PDL_ENTER();
    constexpr int QB = QG * QPT, NT = PB * QG, KC4 = SC_KC / 4;
    __shared__ float4 Ps[KC4 * PB];        /* [dim/4][pool] */
    __shared__ float4 Qs[QB * NHB * KC4];  /* [query][head][dim/4] */
    const int tid = threadIdx.x, pl = tid % PB, g = tid / PB;
    const int q_first = blockIdx.y * QB;
    const int64_t p0 = (int64_t)blockIdx.x * PB, p = p0 + pl;
    const int q_last = imin(q_first + QB, T) - 1;
    const int64_t nv_max = (pos0 + q_last + 1) / kpool; /* pools visible to the tile's last query */
    if (nv_max <= budget || p0 >= nv_max) return;
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float s[QPT];
#pragma unroll
    for (int i = 0; i < QPT; i++) s[i] = 0.0f;
    for (int hb = 0; hb < nh; hb += NHB) {
        float acc[QPT][NHB];
#pragma unroll
        for (int i = 0; i < QPT; i++)
#pragma unroll
            for (int h = 0; h < NHB; h++) acc[i][h] = 0.0f;
        for (int kc = 0; kc < hd; kc += SC_KC) {
            const int kw4 = imin(SC_KC, hd - kc) / 4;
            __syncthreads();
            for (int e = tid; e < PB * kw4; e += NT) {
                const int j = e / kw4, d4 = e % kw4;
                Ps[d4 * PB + j] = p0 + j < nv_max ? *(const float4 *)(pool_key + (p0 + j) * hd + kc + 4 * d4) : zero;
            }
            for (int e = tid; e < QB * NHB * kw4; e += NT) {
                const int d4 = e % kw4, r = e / kw4, h = r % NHB, qi = r / NHB, q = q_first + qi;
                Qs[(qi * NHB + h) * KC4 + d4] =
                    q < T && hb + h < nh ? *(const float4 *)(iq + ((int64_t)q * nh + hb + h) * hd + kc + 4 * d4) : zero;
            }
            __syncthreads();
            for (int d4 = 0; d4 < kw4; d4++) {
                const float4 pv = Ps[d4 * PB + pl];
#pragma unroll
                for (int i = 0; i < QPT; i++)
#pragma unroll
                    for (int h = 0; h < NHB; h++) {
                        const float4 qv = Qs[((g * QPT + i) * NHB + h) * KC4 + d4];
                        float a = acc[i][h];
                        a = fmaf(qv.x, pv.x, a);
                        a = fmaf(qv.y, pv.y, a);
                        a = fmaf(qv.z, pv.z, a);
                        a = fmaf(qv.w, pv.w, a);
                        acc[i][h] = a;
                    }
            }
        }
#pragma unroll
        for (int i = 0; i < QPT; i++) {
            const int q = q_first + g * QPT + i;
            if (q >= T) continue;
#pragma unroll
            for (int h = 0; h < NHB; h++) {
                if (hb + h >= nh) continue;
                const float d = __fmul_rn(acc[i][h], sc);
                s[i] = __fadd_rn(s[i], __fmul_rn(w[(int64_t)q * nh + hb + h], d > 0.0f ? d : 0.0f));
            }
        }
    }
#pragma unroll
    for (int i = 0; i < QPT; i++) {
        const int q = q_first + g * QPT + i;
        const int64_t nv = q < T ? (pos0 + q + 1) / kpool : 0;
        const bool valid = q < T && nv > budget && p < nv;
        const uint32_t key = score_key(s[i]);
        if (valid) keys[(int64_t)q * ld + p] = key;
        /* a warp's lanes share the query (PB >= 32): one atomic per distinct bin */
        const uint32_t bin = valid ? key >> 20 : 0xffffffffu;
        const unsigned peers = __match_any_sync(0xffffffffu, bin);
        if (valid && (tid & 31) == __ffs((int)peers) - 1)
            atomicAdd(&hist[(int64_t)q * NF_IDX_HIST_BINS + bin], (uint32_t)__popc(peers));
    }
}

template <int PB, int QG, int QPT, int NHB>
static void launch_score(cudaStream_t s, const float *pool_key, const float *iq, const float *w, int64_t pos0, int T,
                         int nh, int hd, int kpool, int budget, float sc, uint32_t *keys, int64_t ld, uint32_t *hist) {
    const int64_t nv = (pos0 + T) / kpool;
    dim3 grid((unsigned)((nv + PB - 1) / PB), (unsigned)((T + QG * QPT - 1) / (QG * QPT)));
    nf_launch(idx_score_kernel<PB, QG, QPT, NHB>, grid, PB * QG, 0, s, pool_key, iq, w, pos0, T, nh, hd, kpool, budget, sc,
              keys, ld, hist);
}

template <int NHB>
static void launch_score_cfg(cudaStream_t s, const float *pool_key, const float *iq, const float *w, int64_t pos0,
                             int T, int nh, int hd, int kpool, int budget, float sc, uint32_t *keys, int64_t ld,
                             uint32_t *hist) {
    if (T <= 4) /* decode: one query per CTA row; 128 pools per CTA, so that the CTAs spread evenly over the SMs */
        launch_score<128, 1, 1, NHB>(s, pool_key, iq, w, pos0, T, nh, hd, kpool, budget, sc, keys, ld, hist);
    else
        launch_score<64, 4, 2, NHB>(s, pool_key, iq, w, pos0, T, nh, hd, kpool, budget, sc, keys, ld, hist);
}

extern "C" int nf_cuda_idx_score(cudaStream_t stream, const float *pool_key, const float *iq, const float *w,
                                 int64_t pos0, int T, int nh, int hd, int kpool, int budget, uint32_t *keys, int64_t ld,
                                 uint32_t *hist) {
    if (T <= 0) return 0;
    if (hd % 4 != 0 || hd <= 0) return nf_fail("cuda indexer: head dim %d is not a multiple of 4", hd);
    if (kpool < 1 || nh < 1 || budget < 1) return nf_fail("cuda indexer: bad dims (kpool %d, heads %d, budget %d)", kpool, nh, budget);
    if ((T + 7) / 8 > 65535) return nf_fail("cuda indexer: %d queries in one scoring call", T);
    if ((pos0 + T) / kpool <= budget) return 0; /* every query takes all its pools */
    const float sc = 1.0f / sqrtf((float)hd);
    if (nh % 32 == 0) launch_score_cfg<32>(stream, pool_key, iq, w, pos0, T, nh, hd, kpool, budget, sc, keys, ld, hist);
    else if (nh % 8 == 0) launch_score_cfg<8>(stream, pool_key, iq, w, pos0, T, nh, hd, kpool, budget, sc, keys, ld, hist);
    else launch_score_cfg<1>(stream, pool_key, iq, w, pos0, T, nh, hd, kpool, budget, sc, keys, ld, hist);
    NF_LAUNCHED();
    return 0;
}

/* ---- selection -------------------------------------------------------------------------------------- */

#define TK_THREADS 1024
#define TK_CAP 4096 /* candidates held in shared memory */
#define TK_MAX_BUDGET 4096

/* inclusive prefix sum over the block in thread order; *total = the block's sum. Ends with a barrier. */
__device__ uint32_t tk_scan(uint32_t v, uint32_t *warp_tot, uint32_t *total) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    uint32_t x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const uint32_t y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) warp_tot[wid] = x;
    __syncthreads();
    if (wid == 0) {
        uint32_t t = lane < nw ? warp_tot[lane] : 0u;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const uint32_t y = __shfl_up_sync(0xffffffffu, t, o);
            if (lane >= o) t += y;
        }
        if (lane < nw) warp_tot[lane] = t;
    }
    __syncthreads();
    if (wid > 0) x += warp_tot[wid - 1];
    *total = warp_tot[nw - 1];
    __syncthreads();
    return x;
}

/* The largest bin B with sum_{b >= B} hist[b] >= need (need >= 1 and <= the total): *bin = B, *above = the
 * count in the bins above B. Ends with a barrier; every thread then reads the results. */
__device__ void tk_threshold(const uint32_t *hist, int nb, uint32_t need, uint32_t *warp_tot, int *bin, uint32_t *above) {
    const int per = (nb + (int)blockDim.x - 1) / (int)blockDim.x;
    const int hi = nb - (int)threadIdx.x * per, lo = hi - per > 0 ? hi - per : 0;
    uint32_t local = 0, total;
    for (int b = hi - 1; b >= lo; b--) local += hist[b];
    const uint32_t incl = tk_scan(local, warp_tot, &total), excl = incl - local;
    if (local > 0 && excl < need && incl >= need) {
        uint32_t c = excl;
        for (int b = hi - 1; b >= lo; b--) {
            if (c + hist[b] >= need) {
                *bin = b;
                *above = c;
                break;
            }
            c += hist[b];
        }
    }
    __syncthreads();
}

/* in-place bitonic sort of n (a power of two) entries, descending or ascending */
template <class T, bool DESC>
__device__ void tk_bitonic(T *a, int n) {
    for (int k = 2; k <= n; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < n / 2; i += blockDim.x) {
                const int lo = (i / j) * 2 * j + (i % j), hi = lo + j;
                const bool desc = ((lo & k) == 0) == DESC;
                const T x = a[lo], y = a[hi];
                if (desc ? x < y : x > y) {
                    a[lo] = y;
                    a[hi] = x;
                }
            }
            __syncthreads();
        }
}

/* Warp-collective append (every lane calls it): a slot in the list counted by *counter for each lane whose
 * pred holds, one shared atomic per warp. */
__device__ __forceinline__ uint32_t tk_append(uint32_t *counter, bool pred) {
    const unsigned m = __ballot_sync(0xffffffffu, pred);
    const int lane = threadIdx.x & 31, leader = m ? __ffs((int)m) - 1 : 0;
    uint32_t base = 0;
    if (m && lane == leader) base = atomicAdd(counter, (uint32_t)__popc(m));
    base = __shfl_sync(0xffffffffu, base, leader);
    return base + (uint32_t)__popc(m & ((1u << lane) - 1u));
}

/* a selected pool: score key in the high word, then the pool index reversed, so that a descending sort of the
 * 64-bit values is the CPU's rank order (score descending, index ascending); 0 never occurs */
__device__ __forceinline__ uint64_t tk_pack(uint32_t key, uint32_t pool) {
    return ((uint64_t)key << 32) | (uint64_t)(0xffffffffu - pool);
}

static int pow2_at_least(int n) {
    int p = 1;
    while (p < n) p <<= 1;
    return p;
}

static size_t tk_smem_bytes(int nsort) {
    return ((size_t)NF_IDX_HIST_BINS + 2 * TK_CAP) * sizeof(uint32_t) + (size_t)nsort * sizeof(uint64_t);
}

/* CTA = query */
__global__ void __launch_bounds__(TK_THREADS) idx_topk_kernel(const uint32_t *__restrict__ keys, int64_t ld,
                                                              const uint32_t *__restrict__ hist0, int64_t pos0,
                                                              int kpool, int budget, int width, int tail, int nsort,
                                                              int32_t *__restrict__ sel) {
    NF_PDL_ENTER();
    extern __shared__ float sh[];
    uint32_t *hist = (uint32_t *)sh;
    uint32_t *ck = hist + NF_IDX_HIST_BINS, *ci = ck + TK_CAP;
    uint64_t *out = (uint64_t *)(ci + TK_CAP);
    __shared__ uint32_t warp_tot[32];
    __shared__ int s_bin;
    __shared__ uint32_t s_above, s_nout, s_ncand;
    const int q = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
    const int64_t a = pos0 + q, n = (a + 1) / kpool;
    int32_t *row = sel + (int64_t)q * width;
    int64_t wpos;
    if (n <= budget) {
        for (int64_t i = tid; i < n * kpool; i += nt) row[i] = (int32_t)i;
        wpos = n * kpool;
    } else {
        const uint32_t *K = keys + (int64_t)q * ld;
        for (int b = tid; b < NF_IDX_HIST_BINS; b += nt) hist[b] = hist0[(int64_t)q * NF_IDX_HIST_BINS + b];
        __syncthreads();
        /* the threshold prefix: the top (32 - shift) bits of the budget-th best key */
        uint32_t need = (uint32_t)budget;
        tk_threshold(hist, NF_IDX_HIST_BINS, need, warp_tot, &s_bin, &s_above);
        uint32_t prefix = (uint32_t)s_bin, eq = hist[s_bin];
        need -= s_above;
        int shift = 20;
        __syncthreads();
        /* too many keys share the prefix for shared memory: histogram the next digit inside it */
        while (eq > TK_CAP && shift > 0) {
            const int d = shift >= 12 ? 12 : shift, nb = 1 << d;
            for (int b = tid; b < nb; b += nt) hist[b] = 0;
            __syncthreads();
            for (int64_t p = tid; p < n; p += nt) {
                const uint32_t k = K[p];
                if ((k >> shift) == prefix) atomicAdd(&hist[(k >> (shift - d)) & (nb - 1)], 1u);
            }
            __syncthreads();
            tk_threshold(hist, nb, need, warp_tot, &s_bin, &s_above);
            eq = hist[s_bin];
            need -= s_above;
            prefix = (prefix << d) | (uint32_t)s_bin;
            shift -= d;
            __syncthreads();
        }
        /* collect: above the prefix = selected; on it = candidates */
        if (tid == 0) s_nout = s_ncand = 0;
        __syncthreads();
        const bool gather = eq <= TK_CAP;
        for (int64_t base = 0; base < n; base += nt) { /* uniform trip count: tk_append is warp-collective */
            const int64_t p = base + tid;
            const uint32_t k = p < n ? K[p] : 0u, hi = k >> shift;
            const bool sel_it = p < n && hi > prefix, cand = p < n && hi == prefix && gather;
            if (!__ballot_sync(0xffffffffu, sel_it || cand)) continue; /* most keys are below the prefix */
            const uint32_t o = tk_append(&s_nout, sel_it), c = tk_append(&s_ncand, cand);
            if (sel_it) out[o] = tk_pack(k, (uint32_t)p);
            if (cand) {
                ck[c] = k;
                ci[c] = (uint32_t)p;
            }
        }
        __syncthreads();
        if (!gather) {
            /* more than TK_CAP keys equal to the threshold key (shift is 0): the lowest pool indices win, taken
             * by a scan in index order */
            uint32_t taken = 0;
            for (int64_t base = 0; base < n && taken < need; base += nt) {
                const int64_t p = base + tid;
                const uint32_t f = p < n && K[p] == prefix;
                uint32_t tot;
                const uint32_t excl = tk_scan(f, warp_tot, &tot) - f;
                const bool take = f && taken + excl < need;
                const uint32_t o = tk_append(&s_nout, take);
                if (take) out[o] = tk_pack(prefix, (uint32_t)p);
                taken += tot;
            }
        } else {
            uint32_t m = eq;
            while (m > need && shift > 0) {
                const int d = shift >= 12 ? 12 : shift, nb = 1 << d, sh_lo = shift - d;
                for (int b = tid; b < nb; b += nt) hist[b] = 0;
                __syncthreads();
                for (uint32_t c = tid; c < m; c += nt) atomicAdd(&hist[(ck[c] >> sh_lo) & (nb - 1)], 1u);
                __syncthreads();
                tk_threshold(hist, nb, need, warp_tot, &s_bin, &s_above);
                const uint32_t B = (uint32_t)s_bin;
                need -= s_above;
                /* partition in place: hold this thread's candidates in registers, then re-append */
                constexpr int R = TK_CAP / TK_THREADS;
                uint32_t rk[R], ri[R];
#pragma unroll
                for (int j = 0; j < R; j++) {
                    const uint32_t c = (uint32_t)(j * nt + tid);
                    rk[j] = c < m ? ck[c] : 0u;
                    ri[j] = c < m ? ci[c] : 0u;
                }
                __syncthreads();
                if (tid == 0) s_ncand = 0;
                __syncthreads();
#pragma unroll
                for (int j = 0; j < R; j++) {
                    const bool live = (uint32_t)(j * nt + tid) < m;
                    const uint32_t dg = (rk[j] >> sh_lo) & (nb - 1);
                    const bool up = live && dg > B, keep = live && dg == B;
                    const uint32_t o = tk_append(&s_nout, up), c = tk_append(&s_ncand, keep);
                    if (up) out[o] = tk_pack(rk[j], ri[j]);
                    if (keep) {
                        ck[c] = rk[j];
                        ci[c] = ri[j];
                    }
                }
                __syncthreads();
                m = s_ncand;
                shift = sh_lo;
                __syncthreads();
            }
            if (m <= need) {
                for (uint32_t base = 0; base < m; base += nt) {
                    const uint32_t c = base + tid;
                    const uint32_t o = tk_append(&s_nout, c < m);
                    if (c < m) out[o] = tk_pack(ck[c], ci[c]);
                }
            } else {
                /* m > need keys all equal the threshold key: the lowest pool indices win */
                int np2 = 1;
                while (np2 < (int)m) np2 <<= 1;
                for (int c = (int)m + tid; c < np2; c += nt) ci[c] = 0xffffffffu;
                __syncthreads();
                tk_bitonic<uint32_t, false>(ci, np2);
                for (uint32_t c = tid; c < need; c += nt) out[s_nout + c] = tk_pack(ck[0], ci[c]);
                __syncthreads();
                if (tid == 0) s_nout += need;
            }
        }
        __syncthreads();
        for (int i = (int)s_nout + tid; i < nsort; i += nt) out[i] = 0;
        __syncthreads();
        tk_bitonic<uint64_t, true>(out, nsort);
        for (int64_t i = tid; i < (int64_t)budget * kpool; i += nt) {
            const uint32_t pool = 0xffffffffu - (uint32_t)out[i / kpool];
            row[i] = (int32_t)((int64_t)pool * kpool + i % kpool);
        }
        wpos = (int64_t)budget * kpool;
    }
    if (tail) {
        const int64_t first = n * kpool;
        for (int64_t p = first + tid; p <= a; p += nt) row[wpos + (p - first)] = (int32_t)p;
        wpos += a + 1 - first;
    }
    for (int64_t i = wpos + tid; i < width; i += nt) row[i] = -1;
}

extern "C" int nf_cuda_idx_topk(cudaStream_t stream, const uint32_t *keys, int64_t ld, const uint32_t *hist,
                                int64_t pos0, int T, int kpool, int budget, int width, int tail, int32_t *sel) {
    if (T <= 0) return 0;
    if (budget < 1 || budget > TK_MAX_BUDGET)
        return nf_fail("cuda indexer: top-k budget of %d pools unsupported (1..%d)", budget, TK_MAX_BUDGET);
    if ((int64_t)budget * kpool + (tail ? kpool - 1 : 0) > width)
        return nf_fail("cuda indexer: selection row width %d < %d", width, budget * kpool + (tail ? kpool - 1 : 0));
    const int nsort = pow2_at_least(budget);
    const size_t smem = tk_smem_bytes(nsort);
    static size_t smem_set[NF_CUDA_MAX_DEVICES]; /* a function attribute is per device */
    const int dev = nf_cuda_device_now();
    if (dev >= NF_CUDA_MAX_DEVICES || smem > smem_set[dev]) {
        NF_CU(cudaFuncSetAttribute(idx_topk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        if (dev < NF_CUDA_MAX_DEVICES) smem_set[dev] = smem;
    }
    nf_launch(idx_topk_kernel, T, TK_THREADS, smem, stream, keys, ld, hist, pos0, kpool, budget, width, tail, nsort, sel);
    NF_LAUNCHED();
    return 0;
}

/* ---- the block -------------------------------------------------------------------------------------- */

/* bytes of per-chunk scoring buffers (keys, histograms) that a prefill may hold at once */
#define IDX_CHUNK_BYTES ((size_t)256 << 20)

int nf_cuda_indexer_select(nf_backend *be, int il, nf_state *st, const float *x, const float *qr, int T,
                           int32_t *sel) {
    nf_cuda *c = nf_cuda_of(be);
    if (nf_cuda_state_check(st) < 0) return -1;
    const nf_hparams *hp = &c->m->hp;
    const nf_layer *L = &c->m->layers[il];
    nf_layer_state *LS = &st->L[il];
    const int n = hp->n_embd, hd = hp->idx_head_dim, nh = hp->idx_n_head, kpool = st->kpool;
    if (kpool > 64) return nf_fail("cuda indexer: kpool %d > 64 unsupported", kpool);
    if (hd % 4 != 0) return nf_fail("cuda indexer: head dim %d is not a multiple of 4", hd);
    const float *knw = nf_cuda_vec(c, &L->idx_k_norm_w), *knb = nf_cuda_vec(c, &L->idx_k_norm_b);
    const float *ape = L->idx_ape.data ? nf_cuda_vec(c, &L->idx_ape) : nullptr;
    if (!knw || !knb || (L->idx_ape.data && !ape)) return nf_fail_prefix("layer %d indexer", il);
    const int budget = hp->idx_topk / kpool, width = nf_topk_width(hp);
    const int tail = hp->idx_select_tail && kpool > 1;
    const int64_t pos = st->pos, vis_max = (pos + T) / kpool; /* pools visible to the last query */

    nf_cuda_scratch sc(c);
    float *ik = sc.get<float>((size_t)T * hd), *ig = L->idx_gate.data ? sc.get<float>((size_t)T * hd) : nullptr,
          *iq = sc.get<float>((size_t)T * nh * hd), *w = sc.get<float>((size_t)T * nh);
    if (!ik || !iq || !w || (L->idx_gate.data && !ig)) return nf_fail("cuda indexer: out of device memory");
    nf_cuda_mat mk = nf_cuda_mat_of(c, &L->idx_k), mq = nf_cuda_mat_of(c, &L->idx_q_b), mp = nf_cuda_mat_of(c, &L->idx_proj);
    if (nf_cuda_matmul(c, &mk, x, T, n, ik, hd) < 0) return -1;
    if (nf_cuda_layernorm_rows(c, ik, T, hd, hp->indexer_ln_eps, knw, knb, ik) < 0) return -1;
    /* decode: the gate's and the head weights' projections of x (both f32 in every recipe) in one launch */
    const bool one_launch = T == 1 && ig;
    if (one_launch) {
        nf_cuda_mat mg = nf_cuda_mat_of(c, &L->idx_gate);
        const nf_cuda_mat *wx[2] = {&mg, &mp};
        float *yx[2] = {ig, w};
        if (nf_cuda_matvec_many(c, wx, 2, x, yx) < 0) return -1;
    } else if (ig) {
        nf_cuda_mat mg = nf_cuda_mat_of(c, &L->idx_gate);
        if (nf_cuda_matmul(c, &mg, x, T, n, ig, hd) < 0) return -1;
    }
    /* pools completed by these tokens (reading the open rows first), then the open rows */
    const int64_t pool0 = pos / kpool, npools = vis_max - pool0;
    if (npools > 0) {
        nf_launch(idx_pool_kernel, (unsigned)((npools * hd + 127) / 128), 128, 0, c->stream,
            ik, ig, ape, LS->open_key, LS->open_gate, pos, kpool, hd, pool0, npools, LS->pool_key);
        NF_LAUNCHED();
    }
    nf_launch(idx_open_kernel, (kpool * hd + 127) / 128, 128, 0, c->stream, ik, ig, pos, T, kpool, hd, LS->open_key,
              LS->open_gate);
    NF_LAUNCHED();
    if (nf_cuda_matmul(c, &mq, qr, T, hp->q_lora_rank, iq, (int64_t)nh * hd) < 0) return -1;
    if (!one_launch && nf_cuda_matmul(c, &mp, x, T, n, w, nh) < 0) return -1;
    if (nf_cuda_scale(c, w, (int64_t)T * nh, 1.0f / sqrtf((float)nh)) < 0) return -1;

    /* scoring and selection over query chunks: keys [chunk][vis_max] stay within IDX_CHUNK_BYTES */
    const int scored = vis_max > budget;
    int chunk = T;
    uint32_t *keys = nullptr, *hist = nullptr;
    if (scored) {
        const size_t per_query = (size_t)vis_max * sizeof(uint32_t) + NF_IDX_HIST_BINS * sizeof(uint32_t);
        const size_t fit = IDX_CHUNK_BYTES / per_query;
        if ((size_t)chunk > fit) chunk = fit > 0 ? (int)fit : 1;
        keys = sc.get<uint32_t>((size_t)chunk * vis_max);
        hist = sc.get<uint32_t>((size_t)chunk * NF_IDX_HIST_BINS);
        if (!keys || !hist) return nf_fail("cuda indexer: out of device memory (%d queries x %lld pools)", chunk,
                                           (long long)vis_max);
    }
    for (int t0 = 0; t0 < T; t0 += chunk) {
        const int tc = imin(chunk, T - t0);
        if (scored) {
            NF_CU(cudaMemsetAsync(hist, 0, (size_t)tc * NF_IDX_HIST_BINS * sizeof(uint32_t), c->stream));
            if (nf_cuda_idx_score(c->stream, LS->pool_key, iq + (size_t)t0 * nh * hd, w + (size_t)t0 * nh, pos + t0, tc,
                                  nh, hd, kpool, budget, keys, vis_max, hist) < 0)
                return -1;
        }
        if (nf_cuda_idx_topk(c->stream, keys, vis_max, hist, pos + t0, tc, kpool, budget, width, tail,
                             sel + (size_t)t0 * width) < 0)
            return -1;
    }
    return 0;
}
