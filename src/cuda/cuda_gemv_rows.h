/* cuda_gemv_rows.h — what the warp-per-row decode kernels (cuda_gemv_iq2.cu, cuda_gemv_q2k.cu) share: the dp4a
 * products in their four signedness combinations (with the CPU emulation's versions: scripts/cuemu builds these
 * files without __CUDA_ARCH__), the 24-bit fixed point of their activations, which jobs and grids they take and
 * the parameters every such job gives them.
 *
 * Why a fixed point: the products are exact integer sums of the weights' small integers times the activation's
 * codes, v = rint(x * (2^23 - 1) / amax) over a chunk of columns, as three byte planes (two unsigned low bytes, a
 * signed top byte) so that dp4a can take them. The error is at most half a unit, 2^-24 * amax, per activation
 * value: the order of the f32 rounding of the chunk's largest value. */
#ifndef NF_CUDA_GEMV_ROWS_H
#define NF_CUDA_GEMV_ROWS_H

#include "cuda/cuda_gemv.h"

#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "formats/formats.h" /* nf_row_bytes (a C header) */
}

#define NF_ROWS_TOP 8388607.0f /* 2^23 - 1: the largest activation code */

/* c + sum_k a_k b_k over the four bytes of a and b: a signed (s) or unsigned (u), then b */
__device__ __forceinline__ int nf_dp4a_su(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
    int d;
    asm("dp4a.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
#else
    for (int k = 0; k < 4; k++) c += (int)(int8_t)(a >> (8 * k)) * (int)(uint8_t)(b >> (8 * k));
    return c;
#endif
}
__device__ __forceinline__ int nf_dp4a_ss(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
    return __dp4a((int)a, (int)b, c);
#else
    for (int k = 0; k < 4; k++) c += (int)(int8_t)(a >> (8 * k)) * (int)(int8_t)(b >> (8 * k));
    return c;
#endif
}
__device__ __forceinline__ int nf_dp4a_uu(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
    int d;
    asm("dp4a.u32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
#else
    for (int k = 0; k < 4; k++) c += (int)(uint8_t)(a >> (8 * k)) * (int)(uint8_t)(b >> (8 * k));
    return c;
#endif
}
__device__ __forceinline__ int nf_dp4a_us(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
#else
    for (int k = 0; k < 4; k++) c += (int)(uint8_t)(a >> (8 * k)) * (int)(int8_t)(b >> (8 * k));
    return c;
#endif
}

/* The code of x in a chunk whose scale is inv = TOP / (amax * pre) (pre: 2^64 for chunks of tiny values, whose
 * TOP / amax would overflow near the denormals; exact), clamped to 24 bits. */
__device__ __forceinline__ int nf_rows_code(float x, float pre, float inv) {
    int q = (int)rintf(x * pre * inv);
    return q > 8388607 ? 8388607 : q < -8388608 ? -8388608 : q;
}
/* pre and inv of a chunk of largest magnitude amax (0 for a chunk of zeros, an inf or a nan) */
__device__ __forceinline__ void nf_rows_scale(float amax, float *pre, float *inv) {
    *pre = amax < 1e-20f ? 18446744073709551616.0f : 1.0f;
    *inv = amax > 0.f && amax <= 3.4028235e38f ? NF_ROWS_TOP / (amax * *pre) : 0.f;
}

/* Folds x into a chunk's largest magnitude amax and its flag bad, set by an inf or a nan: fmaxf drops a nan (its
 * chunk would round to finite codes), so the flag carries it, and nf_rows_unit makes the chunk's rows nan, as the
 * f32 products would be (an inf included: its rows are not finite either way). */
__device__ __forceinline__ void nf_rows_fold(float x, float &amax, int &bad) {
    const float m = fabsf(x);
    bad |= !(m <= 3.4028235e38f);
    amax = fmaxf(amax, m);
}
/* the value of one code of a chunk of largest magnitude amax; a nan when the chunk is bad (nf_rows_fold) */
__device__ __forceinline__ float nf_rows_unit(float amax, int bad) {
    return bad ? __int_as_float(0x7fc00000) : amax / NF_ROWS_TOP;
}

/* What both kernels need of a job besides its format and row length: rows a multiple of rmult, 1..MAX_VECTORS
 * vectors, no in-kernel norm, no flat heights, no per-matrix activations, a 16-byte aligned activation x, 4-byte
 * aligned weights and slices, every output set. Returns the job's matrix count, or 0 when it does not qualify. */
static inline int nf_rows_job_common(const nf_gemv_job *j, int rmult) {
    if (j->rows <= 0 || j->rows % rmult || j->nvec < 1 || j->nvec > NF_CUDA_GEMV_MAX_VECTORS) return 0;
    if (j->xnorm || j->mrows[0] > 0 || nf_gemv_job_has_xm(j)) return 0;
    const int nmat = nf_gemv_job_mats(j);
    if (!nmat || (uintptr_t)j->x % 16 || j->slice_bytes % 4) return 0;
    for (int m = 0; m < nmat; m++)
        if ((uintptr_t)j->w[m] % 4 || !j->y[m]) return 0;
    return nmat;
}

/* What both kernels take of a job whatever their format: the matrices and outputs, the row geometry, the first
 * activation row, the routed slices (ids, ids_settled and smod as in nf_gemv_job, smod at least 1), the vectors.
 * Each kernel's parameters derive from it and add their own. */
struct nf_rows_params {
    const uint8_t *w[NF_CUDA_GEMV_MAX_MATS];
    float *y[NF_CUDA_GEMV_MAX_MATS];
    size_t row_bytes, slice_bytes;
    int64_t rows; /* of one matrix (a multiple of the kernel's rows per step) */
    const float *x;
    const int32_t *ids;
    int ids_settled, smod;
    int64_t ldy;
    int nvec, nmat;
};
static inline void nf_rows_params_of(const nf_gemv_job *j, nf_rows_params *p) {
    p->nmat = nf_gemv_job_mats(j);
    for (int m = 0; m < p->nmat; m++) {
        p->w[m] = (const uint8_t *)j->w[m];
        p->y[m] = j->y[m];
    }
    p->row_bytes = nf_row_bytes(j->type, j->cols);
    p->slice_bytes = j->slice_bytes;
    p->rows = j->rows;
    p->x = j->x;
    p->ids = j->ids;
    p->ids_settled = j->ids_settled;
    p->smod = j->smod > 1 ? j->smod : 1;
    p->ldy = j->ldy;
    p->nvec = j->nvec;
}

/* CTAs for `steps` warp steps: one wave of 2 CTAs per SM of `threads`, fewer when the job has fewer steps */
static inline int64_t nf_rows_ctas(int64_t steps, int threads, int sms) {
    const int64_t warps = threads / 32, need = (steps + warps - 1) / warps, wave = 2 * (int64_t)sms;
    return need < wave ? need : wave;
}

#endif
