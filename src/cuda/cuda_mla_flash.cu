/* cuda_mla_flash.cu — the sparse MLA core (cuda_attn.h) for prefill in one kernel: NF_MLA_PATH_FLASH.
 *
 * Why: the tensor-core path of cuda_mla.cu runs the core as three kernels with the scores in global memory
 * between them: a token's 2048 selected latent rows are read twice (once per product), its 64 x 2048 score
 * matrix is written, read and written by the softmax and read again by the value kernel, and each of the value
 * kernel's 8 column tiles reloads all of it: ~17 MB of traffic per token and MLA layer, ~12% of a 65536-token
 * prefill. Here one CTA takes one token and 32 heads and walks the selection in tiles of 64 rows: each tile is
 * read from the cache once (f32, rounded to bf16 as it is staged), the 32 x 64 scores come from mma.sync
 * (qt . c), an online softmax (running max and sum per head, the running values rescaled when the max grows)
 * turns them into p in shared memory, and mma.sync adds p c into the 32 x kl values held in registers. Nothing
 * but U is written; the two CTAs of a token's 64 heads read the same rows at about the same time (L2).
 *
 * Rounding: qt, the latent rows and p in bf16 (as NF_MLA_PATH_TC), f32 accumulation; the softmax in f32 with the
 * flash form's order (the sum of each tile's exponentials against the running max). A token's values depend only
 * on its own rows, so like every other path it is independent of how many tokens share a call. */
#include <cuda_pipeline.h>

#include "cuda/cuda_attn.h"
#include "cuda/cuda_internal.h"
#include "cuda/cuda_launch.h"
#include "cuda/cuda_mma.h"

#define FL_HT 32       /* heads per CTA */
#define FL_ST 64       /* selected rows per tile */
#define FL_THREADS 256 /* 8 warps: 2 head groups of 16 x 4 column (or slot) groups */
#define FL_SP (FL_ST + 4)  /* f32 score row */
#define FL_PP (FL_ST + 8)  /* bf16 p row: 144 bytes, ldmatrix without bank conflicts */

template <int KL> struct fl_layout {
    static constexpr int KP = KL + 8; /* bf16 row of qt and of a latent row: (KL + 8) * 2 bytes, 16-byte aligned */
    static constexpr size_t q_off = 0, c_off = q_off + (size_t)FL_HT * KP * 2, s_off = c_off + (size_t)FL_ST * KP * 2,
                            p_off = s_off + (size_t)FL_HT * FL_SP * 4, st_off = p_off + (size_t)FL_HT * FL_PP * 2,
                            pos_off = st_off + (size_t)4 * FL_HT * 4, bytes = pos_off + (size_t)FL_ST * 4;
};

/* ROWS rows of KL floats to bf16 rows of KP at dst, by the block's FL_THREADS threads: row r from src_of(r), or
 * zeros where that is NULL. Each thread loads its (up to) 8 float4s of a round before it stores any, so that 8 loads
 * per thread are in flight (one at a time, a 64-row tile took 64 round trips). */
template <int ROWS, int KL, int KP, class F> __device__ __forceinline__ void fl_stage(uint16_t *dst, F src_of, int tid) {
    constexpr int Q = KL / 4, N = ROWS * Q, B = N / FL_THREADS < 8 ? N / FL_THREADS : 8;
    static_assert(B >= 1 && N % (FL_THREADS * B) == 0, "whole rounds");
#pragma unroll 1
    for (int e0 = 0; e0 < N; e0 += FL_THREADS * B) {
        float4 v[B];
#pragma unroll
        for (int b = 0; b < B; b++) {
            const int e = e0 + b * FL_THREADS + tid;
            const float *src = src_of(e / Q);
            v[b] = src ? *(const float4 *)(src + 4 * (e % Q)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int b = 0; b < B; b++) {
            const int e = e0 + b * FL_THREADS + tid;
            uint2 u;
            u.x = pack_bf16x2(v[b].x, v[b].y);
            u.y = pack_bf16x2(v[b].z, v[b].w);
            *(uint2 *)(dst + (e / Q) * KP + 4 * (e % Q)) = u;
        }
    }
}

/* ROWS rows of KL bf16 (already rounded: nf_mla_latent_bf16) to rows of KP at dst by cp.async, 16 bytes a copy,
 * row r from src_of(r) or zeros where that is NULL: no register round trip, no conversion */
template <int ROWS, int KL, int KP, class F> __device__ __forceinline__ void fl_stage16(uint16_t *dst, F src_of, int tid) {
    constexpr int Q = KL / 8, N = ROWS * Q; /* 16-byte pieces per row, in all */
    static_assert(N % FL_THREADS == 0, "whole rounds");
#pragma unroll 4
    for (int e = tid; e < N; e += FL_THREADS) {
        const uint16_t *src = src_of(e / Q);
        uint16_t *d = dst + (e / Q) * KP + 8 * (e % Q);
        if (src) __pipeline_memcpy_async(d, src + 8 * (e % Q), 16);
        else *(uint4 *)d = make_uint4(0u, 0u, 0u, 0u);
    }
    __pipeline_commit();
    __pipeline_wait_prior(0);
}

/* CTA = (token blockIdx.x, heads [32 blockIdx.y, +32)); U [T][H][KL]. B16: the latent rows as bf16 (latent16,
 * nf_mla_latent_bf16's copy of the cache) staged by cp.async; otherwise f32 rows (latent), rounded as staged: the
 * same bf16 values either way, so the same bits. */
template <int KL, bool B16>
__global__ void __launch_bounds__(FL_THREADS, 2) mla_flash_kernel(const float *__restrict__ latent,
                                                                  const uint16_t *__restrict__ latent16,
                                                                  const float *__restrict__ qt,
                                                                  const int32_t *__restrict__ sel, int H, int width,
                                                                  float scale, float *__restrict__ U) {
    NF_PDL_ENTER();
    using L = fl_layout<KL>;
    constexpr int KP = L::KP, NT = KL / 32; /* n8 tiles of a warp's value columns (KL / 4 of them) */
    static_assert(KL % 64 == 0 && KL <= 512, "value columns per warp: pairs of n8 tiles");
    extern __shared__ __align__(16) float sh[];
    uint8_t *base = (uint8_t *)sh;
    uint16_t *Qs = (uint16_t *)(base + L::q_off), *Cs = (uint16_t *)(base + L::c_off), *Ps = (uint16_t *)(base + L::p_off);
    float *Ss = (float *)(base + L::s_off), *Ms = (float *)(base + L::st_off), *Ls = Ms + FL_HT, *As = Ls + FL_HT;
    int32_t *pos = (int32_t *)(base + L::pos_off);
    const int t = blockIdx.x, h0 = blockIdx.y * FL_HT, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp & 1, wn = warp >> 1, g = lane >> 2, t4 = lane & 3;
    const int32_t *row = sel + (int64_t)t * width;

    fl_stage<FL_HT, KL, KP>(Qs, [&](int r) { return h0 + r < H ? qt + ((int64_t)t * H + h0 + r) * KL : nullptr; }, tid);
    if (tid < FL_HT) Ms[tid] = -INFINITY, Ls[tid] = 0.0f;
    float acc[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

    for (int s0 = 0; s0 < width; s0 += FL_ST) {
        /* positions (a barrier: the tile before is done with Cs, Ps, the statistics) */
        int valid = 0;
        for (int j = tid; j < FL_ST; j += FL_THREADS) {
            const int32_t p = s0 + j < width ? row[s0 + j] : -1;
            pos[j] = p;
            valid |= p >= 0;
        }
        if (!__syncthreads_or(valid)) continue; /* a tile without a selected row adds nothing */
        if (B16)
            fl_stage16<FL_ST, KL, KP>(Cs, [&](int r) { return pos[r] >= 0 ? latent16 + (int64_t)pos[r] * KL : nullptr; },
                                      tid);
        else
            fl_stage<FL_ST, KL, KP>(Cs, [&](int r) { return pos[r] >= 0 ? latent + (int64_t)pos[r] * KL : nullptr; }, tid);
        __syncthreads();
        /* scores: warp (wm, wn) takes heads 16 wm .., slots 16 wn .. (two n8 tiles), k = the latent dims */
        {
            float sc[2][4] = {};
#pragma unroll 8
            for (int kk = 0; kk < KL / 16; kk++) {
                uint32_t af[4], r[4];
                ldsm_x4(af, Qs + (wm * 16 + (lane & 15)) * KP + kk * 16 + (lane >> 4) * 8);
                ldsm_x4(r, Cs + (wn * 16 + (lane & 7) + ((lane >> 4) << 3)) * KP + kk * 16 + ((lane >> 3) & 1) * 8);
                const uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
                mma_bf16(sc[0], af, b0);
                mma_bf16(sc[1], af, b1);
            }
#pragma unroll
            for (int n = 0; n < 2; n++)
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const int hr = wm * 16 + g + 8 * (q >> 1), sl = wn * 16 + n * 8 + 2 * t4 + (q & 1);
                    Ss[hr * FL_SP + sl] = pos[sl] >= 0 ? __fmul_rn(sc[n][q], scale) : -INFINITY;
                }
        }
        __syncthreads();
        /* online softmax: 8 threads per head row, 8 slots each */
        {
            const int hr = tid >> 3, part = tid & 7;
            float v[8], mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                v[j] = Ss[hr * FL_SP + part * 8 + j];
                mx = fmaxf(mx, v[j]);
            }
#pragma unroll
            for (int o = 1; o < 8; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            const float mold = Ms[hr], mnew = fmaxf(mold, mx); /* finite: the tile has a selected row */
            float sum = 0.0f;
            uint32_t pk[4];
#pragma unroll
            for (int j = 0; j < 8; j += 2) {
                const float e0 = pos[part * 8 + j] >= 0 ? expf(__fsub_rn(v[j], mnew)) : 0.0f;
                const float e1 = pos[part * 8 + j + 1] >= 0 ? expf(__fsub_rn(v[j + 1], mnew)) : 0.0f;
                sum = __fadd_rn(__fadd_rn(sum, e0), e1);
                pk[j / 2] = pack_bf16x2(e0, e1);
            }
            *(uint4 *)(Ps + hr * FL_PP + part * 8) = make_uint4(pk[0], pk[1], pk[2], pk[3]);
#pragma unroll
            for (int o = 1; o < 8; o <<= 1) sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, o));
            __syncwarp();
            if (part == 0) {
                const float alpha = expf(__fsub_rn(mold, mnew)); /* 0 for the first tile (mold = -inf) */
                Ms[hr] = mnew;
                Ls[hr] = __fmaf_rn(Ls[hr], alpha, sum);
                As[hr] = alpha;
            }
        }
        __syncthreads();
        /* values: warp (wm, wn) takes heads 16 wm .., columns KL / 4 wn ..; rescale, then += p c */
        {
            const float a0 = As[wm * 16 + g], a1 = As[wm * 16 + g + 8];
#pragma unroll
            for (int n = 0; n < NT; n++) {
                acc[n][0] = __fmul_rn(acc[n][0], a0), acc[n][1] = __fmul_rn(acc[n][1], a0);
                acc[n][2] = __fmul_rn(acc[n][2], a1), acc[n][3] = __fmul_rn(acc[n][3], a1);
            }
#pragma unroll
            for (int kk = 0; kk < FL_ST / 16; kk++) {
                uint32_t af[4];
                ldsm_x4(af, Ps + (wm * 16 + (lane & 15)) * FL_PP + kk * 16 + (lane >> 4) * 8);
#pragma unroll
                for (int np = 0; np < NT / 2; np++) {
                    /* slots kk 16 + (j & 1) 8 + l % 8 (the k rows), columns c0 + (j >> 1) 8 (two n8 tiles) */
                    const int j = lane >> 3, c0 = wn * (KL / 4) + np * 16;
                    uint32_t r[4];
                    ldsm_x4_trans(r, Cs + (kk * 16 + (j & 1) * 8 + (lane & 7)) * KP + c0 + (j >> 1) * 8);
                    const uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
                    mma_bf16(acc[2 * np], af, b0);
                    mma_bf16(acc[2 * np + 1], af, b1);
                }
            }
        }
    }
    __syncthreads();
    const float l0 = Ls[wm * 16 + g], l1 = Ls[wm * 16 + g + 8];
    const float i0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, i1 = l1 > 0.0f ? 1.0f / l1 : 0.0f; /* no selected row: U = 0 */
    const int ha = h0 + wm * 16 + g, hb = ha + 8;
#pragma unroll
    for (int n = 0; n < NT; n++) {
        const int col = wn * (KL / 4) + n * 8 + 2 * t4;
        if (ha < H) {
            float *u = U + ((int64_t)t * H + ha) * KL + col;
            u[0] = __fmul_rn(acc[n][0], i0), u[1] = __fmul_rn(acc[n][1], i0);
        }
        if (hb < H) {
            float *u = U + ((int64_t)t * H + hb) * KL + col;
            u[0] = __fmul_rn(acc[n][2], i1), u[1] = __fmul_rn(acc[n][3], i1);
        }
    }
}

extern "C" int nf_mla_flash_supported(int kl) { return kl == 64 || kl == 128 || kl == 256 || kl == 512; }

template <int KL>
static int flash_launch(cudaStream_t stream, const float *latent, const uint16_t *latent16, const float *qt,
                        const int32_t *sel, int T, int H, int width, float scale, float *U) {
    static bool smem_set[NF_CUDA_MAX_DEVICES]; /* over 48 KiB of dynamic shared memory needs the opt-in */
    if (nf_cuda_once_per_device(smem_set, [] {
            NF_CU(cudaFuncSetAttribute(mla_flash_kernel<KL, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)fl_layout<KL>::bytes));
            NF_CU(cudaFuncSetAttribute(mla_flash_kernel<KL, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)fl_layout<KL>::bytes));
            return 0;
        }) < 0)
        return -1;
    nf_launch(latent16 ? mla_flash_kernel<KL, true> : mla_flash_kernel<KL, false>, dim3(T, (H + FL_HT - 1) / FL_HT),
              FL_THREADS, fl_layout<KL>::bytes, stream, latent, latent16, qt, sel, H, width, scale, U);
    NF_LAUNCHED();
    return 0;
}

static int flash_any(cudaStream_t stream, const float *latent, const uint16_t *latent16, const float *qt,
                     const int32_t *sel, int T, int H, int kl, int width, float scale, float *U) {
    switch (kl) {
    case 64: return flash_launch<64>(stream, latent, latent16, qt, sel, T, H, width, scale, U);
    case 128: return flash_launch<128>(stream, latent, latent16, qt, sel, T, H, width, scale, U);
    case 256: return flash_launch<256>(stream, latent, latent16, qt, sel, T, H, width, scale, U);
    case 512: return flash_launch<512>(stream, latent, latent16, qt, sel, T, H, width, scale, U);
    default: return nf_fail("cuda mla: the one-kernel prefill core takes kv_lora_rank 64, 128, 256 or 512, not %d", kl);
    }
}

extern "C" int nf_mla_flash(cudaStream_t stream, const float *latent, const float *qt, const int32_t *sel, int T, int H,
                            int kl, int width, float scale, float *U) {
    return flash_any(stream, latent, nullptr, qt, sel, T, H, kl, width, scale, U);
}

extern "C" int nf_mla_flash16(cudaStream_t stream, const uint16_t *latent16, const float *qt, const int32_t *sel, int T,
                              int H, int kl, int width, float scale, float *U) {
    if (!latent16 || ((uintptr_t)latent16 & 15)) return nf_fail("cuda mla: the bf16 latent copy must be 16-byte aligned");
    return flash_any(stream, nullptr, latent16, qt, sel, T, H, kl, width, scale, U);
}

/* out[i] = bf16(latent[i]) for i < n (n a multiple of 4), pack_bf16x2's rounding, as fl_stage rounds */
__global__ void mla_latent_bf16_kernel(const float4 *__restrict__ in, uint2 *__restrict__ out, int64_t n4) {
    NF_PDL_ENTER();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        const float4 v = in[i];
        uint2 u;
        u.x = pack_bf16x2(v.x, v.y);
        u.y = pack_bf16x2(v.z, v.w);
        out[i] = u;
    }
}

extern "C" int nf_mla_latent_bf16(cudaStream_t stream, const float *latent, int64_t rows, int kl, uint16_t *out) {
    const int64_t n = rows * kl;
    if (n <= 0) return 0;
    if (n % 4 || ((uintptr_t)latent & 15) || ((uintptr_t)out & 7))
        return nf_fail("cuda mla: the latent's bf16 copy needs 16-byte aligned rows of a multiple of 4");
    const int64_t n4 = n / 4, blocks = (n4 + 255) / 256;
    nf_launch(mla_latent_bf16_kernel, (unsigned)(blocks < 132 * 8 ? blocks : 132 * 8), 256, 0, stream,
              (const float4 *)latent, (uint2 *)out, n4);
    NF_LAUNCHED();
    return 0;
}
