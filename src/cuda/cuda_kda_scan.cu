/* cuda_kda_scan.cu — the prepared path of the KDA delta-rule recurrence (cuda_kda.h), for prefill.
 *
 * Why: the fused kernel (cuda_kda.cu) prepares each token's inputs inside its token-serial loop: global loads of
 * q/k/v/gate/beta, two block reductions for the L2 norms, exp/sigmoid, and 12 barriers per token, all on the
 * serial chain (~3.4 us per token on the H200 at glm53's shapes, 19% of a prefill chunk). Here
 *  1. kda_prep_kernel prepares every (token, head) in parallel and in place: q and k L2-normalised (q times
 *     qscale), e = exp(gate), beta = sigmoid(beta) — the fused kernel's operations on the same operands, the
 *     sums of squares included (see the kernel), so the values are bit-identical;
 *  2. kda_scan_kernel runs the recurrence on the prepared rows only. A ring of KDA_RING token slots in shared
 *     memory is filled by cp.async KDA_AHEAD tokens ahead of the token being worked on, so no global load sits on
 *     the serial chain; the output sum of token t (off the state chain) is interleaved with the prediction sum of
 *     token t + 1 (two independent double chains) and both cross-warp reductions share one barrier per token
 *     (double-buffered by token parity). Each value still gets the fused kernel's float operations in its order:
 *     per thread its NF_KDA_ROWS rows in row order, then the warps' partial sums in warp order. */
#include <cuda_pipeline.h>

#include "cuda/cuda_internal.h"
#include "cuda/cuda_kda.h"
#include "cuda/cuda_launch.h"

/* Prepares T x H (token, head) pairs in place, one per block iteration; 32 * ceil(hd / 32) threads, thread i < hd
 * owning channel i. The sums of squares are nf_d_block_sum's over the fused kernel's 32 * ceil(hd / 16) threads,
 * addition for addition: there too each thread holds at most one channel (i = tid), each warp's 32 values are
 * added by the same xor tree, then the warp sums by the same xor tree over 32 slots; the fused kernel's extra
 * warps hold only +0.0, the same value this kernel puts in every slot past its own warps. */
template <bool LOG2>
__global__ void kda_prep_kernel(float *qkv, float *g, const float *dt, const float *ssm_a, float lb, float *beta,
                                float qscale, int T, int H, int hd) {
    NF_PDL_ENTER();
    __shared__ double wsum[2][2][32]; /* [pair parity][q, k][warp] */
    const int tid = threadIdx.x, lane = tid % 32, w = tid / 32, nw = blockDim.x / 32, inner = H * hd;
    const bool own = tid < hd;
    int par = 0;
    for (int64_t pair = blockIdx.x; pair < (int64_t)T * H; pair += gridDim.x, par ^= 1) {
        const int t = (int)(pair / H), h = (int)(pair % H);
        float *qrow = qkv + (size_t)t * 3 * inner + h * hd, *krow = qrow + inner;
        const float qv = own ? qrow[tid] : 0.0f, kv = own ? krow[tid] : 0.0f;
        double pq = 0.0, pk = 0.0;
        if (own) {
            pq += (double)qv * (double)qv;
            pk += (double)kv * (double)kv;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            pq += __shfl_xor_sync(0xffffffffu, pq, o);
            pk += __shfl_xor_sync(0xffffffffu, pk, o);
        }
        if (lane == 0) {
            wsum[par][0][w] = pq;
            wsum[par][1][w] = pk;
        }
        /* one barrier per pair: the next pair writes the other parity, and the one after passes this barrier's
         * successor only when every warp has read this one */
        __syncthreads();
        double sq = lane < nw ? wsum[par][0][lane] : 0.0, sk = lane < nw ? wsum[par][1][lane] : 0.0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            sq += __shfl_xor_sync(0xffffffffu, sq, o);
            sk += __shfl_xor_sync(0xffffffffu, sk, o);
        }
        sq = __shfl_sync(0xffffffffu, sq, 0); /* lane 0's sum, as nf_d_block_sum returns */
        sk = __shfl_sync(0xffffffffu, sk, 0);
        if (own) {
            const float dq = sqrtf(__fadd_rn((float)sq, 1e-6f)), dk = sqrtf(__fadd_rn((float)sk, 1e-6f));
            qrow[tid] = __fmul_rn(__fdiv_rn(qv, dq), qscale);
            krow[tid] = __fdiv_rn(kv, dk);
            float *gr = g + (size_t)t * inner + h * hd;
            if (LOG2) /* the chunked path's log2 of the decay (cuda_kda_chunk.cu) */
                gr[tid] = __fmul_rn(nf_d_kda_gate(gr[tid], dt[h * hd + tid], -ssm_a[h], lb), 1.44269504088896341f);
            else
                gr[tid] = nf_d_kda_decay(gr[tid], dt[h * hd + tid], -ssm_a[h], lb);
        }
        if (tid == 0) beta[(size_t)t * H + h] = nf_d_sigmoid(beta[(size_t)t * H + h]);
    }
}

/* How far ahead of the current token the copies run, for a ring of RING token slots: token u's slot is read in
 * iterations u - 1 and u, and the copy of token t + AHEAD is issued in iteration t after the barrier of
 * iteration t - 1 (every warp done with iteration t - 2), so AHEAD = RING - 2 never writes a slot still read. */
#define KDA_AHEAD(RING) ((RING) - 2)

/* Shared memory of the scan: 4 reduction buffers [4][ry][32] doubles (prediction partial sums of even, odd
 * tokens; output partial sums of even, odd tokens), then RING token slots of q[hd] k[hd] e[hd] v[32] beta and 3
 * floats of padding (16-byte slots when hd % 4 == 0). */
static __host__ __device__ int slot_floats(int hd) { return 3 * hd + 36; }
static size_t scan_smem(int hd, int ring) {
    const int ry = (hd + NF_KDA_ROWS - 1) / NF_KDA_ROWS;
    return (size_t)4 * ry * 32 * sizeof(double) + (size_t)ring * slot_floats(hd) * sizeof(float);
}
static const size_t SCAN_SMEM_MAX = 48 * 1024; /* without the opt-in attribute */

/* x[c] = p[c] for the c < n (>= 1) rows left of a quad: one 16-byte shared load when VEC (hd % 4 == 0 and
 * 16-byte slots, so a quad is all rows or none), else guarded scalar loads */
template <bool VEC> __device__ __forceinline__ void load4(float (&x)[4], const float *p, int n) {
    if (VEC) {
        const float4 v = *(const float4 *)p;
        x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
    } else {
#pragma unroll
        for (int c = 0; c < 4; c++) x[c] = c < n ? p[c] : 0.0f;
    }
}

/* Block (column group blockIdx.x, head blockIdx.y), 32 * ry threads, the fused kernel's layout: lane tx owns value
 * column j = 32 * blockIdx.x + tx, warp ty owns key rows [NF_KDA_ROWS * ty, NF_KDA_ROWS * (ty + 1)) of it in
 * registers. VEC: hd % 4 == 0 and 16-byte aligned rows, so the copies move 16 bytes each. At most 512 threads
 * (hd <= 256): the bound keeps it within 128 registers, so two blocks of glm53's 256 threads share an SM (256
 * blocks, 132 SMs: one wave). */
template <int RING, bool VEC>
__global__ void __launch_bounds__(512) kda_scan_kernel(float *S, const float *qkv, const float *e_all,
                                                       const float *b_all, float *o, int T, int H, int hd) {
    NF_PDL_ENTER();
    extern __shared__ float sh[];
    const int h = blockIdx.y, tid = threadIdx.x, tx = tid % 32, ty = tid / 32, ry = blockDim.x / 32;
    const int nthr = blockDim.x, j0 = blockIdx.x * 32, j = j0 + tx, inner = H * hd, i0 = ty * NF_KDA_ROWS;
    const int nc = hd - j0 < 32 ? hd - j0 : 32, slot = slot_floats(hd);
    const bool col = tx < nc;
    double *red = (double *)sh;
    float *ring = sh + 2 * 4 * ry * 32;

    /* copies of token u's rows into its slot, one commit group per token (an empty one past T keeps the count) */
    auto issue = [&](int u) {
        if (u < T) {
            float *dst = ring + (size_t)(u % RING) * slot;
            const float *q = qkv + (size_t)u * 3 * inner + h * hd, *k = q + inner, *v = q + 2 * inner + j0;
            const float *e = e_all + (size_t)u * inner + h * hd;
            if (VEC) {
                const int n4 = hd / 4, units = 3 * n4 + nc / 4;
                for (int x = tid; x < units; x += nthr) {
                    const float *src = x < n4       ? q + 4 * x
                                       : x < 2 * n4 ? k + 4 * (x - n4)
                                       : x < 3 * n4 ? e + 4 * (x - 2 * n4)
                                                    : v + 4 * (x - 3 * n4);
                    __pipeline_memcpy_async(dst + 4 * x, src, 16);
                }
            } else {
                const int units = 3 * hd + nc;
                for (int x = tid; x < units; x += nthr) {
                    const float *src = x < hd       ? q + x
                                       : x < 2 * hd ? k + (x - hd)
                                       : x < 3 * hd ? e + (x - 2 * hd)
                                                    : v + (x - 3 * hd);
                    __pipeline_memcpy_async(dst + x, src, 4);
                }
            }
            if (tid == nthr - 1) __pipeline_memcpy_async(dst + 3 * hd + 32, b_all + (size_t)u * H + h, 4);
        }
        __pipeline_commit();
    };
    auto slot_of = [&](int u) -> const float * { return ring + (size_t)(u % RING) * slot; };
    float *Sh = S + (size_t)h * hd * hd;
    float Sr[NF_KDA_ROWS];
#pragma unroll
    for (int r = 0; r < NF_KDA_ROWS; r++) Sr[r] = col && i0 + r < hd ? Sh[(size_t)(i0 + r) * hd + j] : 0.0f;

    for (int u = 0; u < KDA_AHEAD(RING); u++) issue(u);
    __pipeline_wait_prior(KDA_AHEAD(RING) - 1); /* token 0 */
    __syncthreads();
    /* token 0's decay and prediction terms; from then on token t + 1's are computed with token t's update */
    const int nrows = hd - i0 < NF_KDA_ROWS ? hd - i0 : NF_KDA_ROWS; /* >= 1: ry = ceil(hd / NF_KDA_ROWS) */
    double p = 0.0;
    {
        const float *k0 = slot_of(0) + hd + i0, *e0 = slot_of(0) + 2 * hd + i0;
#pragma unroll
        for (int g = 0; g < NF_KDA_ROWS / 4; g++) {
            if (4 * g < nrows) {
                float kq[4], eq[4];
                load4<VEC>(kq, k0 + 4 * g, nrows - 4 * g);
                load4<VEC>(eq, e0 + 4 * g, nrows - 4 * g);
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const int r = 4 * g + c;
                    if (VEC || r < nrows) {
                        const float s = __fmul_rn(Sr[r], eq[c]);
                        Sr[r] = s;
                        p += (double)__fmul_rn(s, kq[c]);
                    }
                }
            }
        }
    }
    for (int t = 0; t < T; t++) {
        const int par = t & 1;
        red[(size_t)(par * ry + ty) * 32 + tx] = p;
        issue(t + KDA_AHEAD(RING));
        __pipeline_wait_prior(KDA_AHEAD(RING) - 1); /* this thread's copies of token t + 1 have landed */
        __syncthreads(); /* ... and everyone's; token t's prediction sums and token t - 1's output sums are in */
        /* the prediction sums of token t, and in one warp (turn by turn) the output of token t - 1 in the same
         * loop: two independent chains, so the output costs that warp little latency before the next barrier */
        const bool out = t > 0 && ty == (t - 1) % ry;
        const double *pp = red + (size_t)par * ry * 32 + tx, *pa = red + (size_t)(2 + (par ^ 1)) * ry * 32 + tx;
        double pred = 0.0, a = 0.0;
        for (int y = 0; y < ry; y++) {
            pred += pp[y * 32];
            if (out) a += pa[y * 32];
        }
        if (out && col) o[(size_t)(t - 1) * inner + h * hd + j] = (float)a;
        const float *cur = slot_of(t), *qc = cur + i0, *kc = cur + hd + i0;
        const float v = col ? cur[3 * hd + tx] : 0.0f;
        const float d = __fmul_rn(__fsub_rn(v, (float)pred), cur[3 * hd + 32]);
        double acc = 0.0;
        p = 0.0;
        if (t + 1 < T) {
            const float *kn = slot_of(t + 1) + hd + i0, *en = slot_of(t + 1) + 2 * hd + i0;
#pragma unroll
            for (int g = 0; g < NF_KDA_ROWS / 4; g++) {
                if (4 * g < nrows) {
                    float kq[4], qq[4], enq[4], knq[4];
                    load4<VEC>(kq, kc + 4 * g, nrows - 4 * g);
                    load4<VEC>(qq, qc + 4 * g, nrows - 4 * g);
                    load4<VEC>(enq, en + 4 * g, nrows - 4 * g);
                    load4<VEC>(knq, kn + 4 * g, nrows - 4 * g);
#pragma unroll
                    for (int c = 0; c < 4; c++) {
                        const int r = 4 * g + c;
                        if (VEC || r < nrows) {
                            const float s = __fadd_rn(Sr[r], __fmul_rn(kq[c], d));
                            acc += (double)__fmul_rn(s, qq[c]);
                            const float sn = __fmul_rn(s, enq[c]);
                            Sr[r] = sn;
                            p += (double)__fmul_rn(sn, knq[c]);
                        }
                    }
                }
            }
        } else {
#pragma unroll
            for (int g = 0; g < NF_KDA_ROWS / 4; g++) {
                if (4 * g < nrows) {
                    float kq[4], qq[4];
                    load4<VEC>(kq, kc + 4 * g, nrows - 4 * g);
                    load4<VEC>(qq, qc + 4 * g, nrows - 4 * g);
#pragma unroll
                    for (int c = 0; c < 4; c++) {
                        const int r = 4 * g + c;
                        if (VEC || r < nrows) {
                            const float s = __fadd_rn(Sr[r], __fmul_rn(kq[c], d));
                            Sr[r] = s;
                            acc += (double)__fmul_rn(s, qq[c]);
                        }
                    }
                }
            }
        }
        red[(size_t)((2 + par) * ry + ty) * 32 + tx] = acc;
    }
    __syncthreads();
    if (ty == (T - 1) % ry) { /* the last token's output (the others are summed in the next token's iteration) */
        const double *pa = red + (size_t)(2 + ((T - 1) & 1)) * ry * 32 + tx;
        double a = 0.0;
        for (int y = 0; y < ry; y++) a += pa[y * 32];
        if (col) o[(size_t)(T - 1) * inner + h * hd + j] = (float)a;
    }
#pragma unroll
    for (int r = 0; r < NF_KDA_ROWS; r++)
        if (col && i0 + r < hd) Sh[(size_t)(i0 + r) * hd + j] = Sr[r];
}

/* the deepest ring that fits (16 slots for glm53's hd 128, 8 up to hd 256), 0 when none does */
static int scan_ring(int hd) {
    if (hd < 1 || hd > NF_KDA_MAX_HEAD_DIM) return 0;
    return scan_smem(hd, 16) <= SCAN_SMEM_MAX ? 16 : scan_smem(hd, 8) <= SCAN_SMEM_MAX ? 8 : 0;
}

extern "C" int nf_cuda_kda_prepared_supported(int hd) { return scan_ring(hd) > 0; }

extern "C" int nf_cuda_kda_prep(cudaStream_t stream, float *qkv, float *g, const float *dt, const float *ssm_a,
                                float lb, float *beta, float qscale, int T, int H, int hd, int log2_gate) {
    const int64_t pairs = (int64_t)T * H;
    const unsigned grid = (unsigned)(pairs < 65535 ? pairs : 65535), block = 32 * ((hd + 31) / 32);
    if (log2_gate)
        nf_launch(kda_prep_kernel<true>, grid, block, 0, stream, qkv, g, dt, ssm_a, lb, beta, qscale, T, H, hd);
    else
        nf_launch(kda_prep_kernel<false>, grid, block, 0, stream, qkv, g, dt, ssm_a, lb, beta, qscale, T, H, hd);
    NF_LAUNCHED();
    return 0;
}

extern "C" int nf_cuda_kda_prepared(cudaStream_t stream, float *S, float *qkv, float *g, const float *dt,
                                    const float *ssm_a, float lb, float *beta, float qscale, float *o, int T, int H,
                                    int hd) {
    const int ring = scan_ring(hd);
    if (!ring) return nf_fail("cuda kda: head_dim %d: the prepared recurrence needs hd <= 256", hd);
    if (T <= 0) return 0;
    if (nf_cuda_kda_prep(stream, qkv, g, dt, ssm_a, lb, beta, qscale, T, H, hd, 0) < 0) return -1;
    const int ry = (hd + NF_KDA_ROWS - 1) / NF_KDA_ROWS;
    const dim3 grid((hd + 31) / 32, H);
    const bool vec = hd % 4 == 0 && (uintptr_t)qkv % 16 == 0 && (uintptr_t)g % 16 == 0;
    const size_t smem = scan_smem(hd, ring);
    auto k = ring == 16 ? (vec ? kda_scan_kernel<16, true> : kda_scan_kernel<16, false>)
                        : (vec ? kda_scan_kernel<8, true> : kda_scan_kernel<8, false>);
    nf_launch(k, grid, 32 * ry, smem, stream, S, (const float *)qkv, (const float *)g, (const float *)beta, o, T, H,
              hd);
    NF_LAUNCHED();
    return 0;
}
