/* cuda_gemv.h — matrix × few-vectors products on the GPU (decode: one token, the k routed experts of a token,
 * a short speculative verify) for every weight format we store.
 *
 * y = W x for row-major weight matrices in any supported nf_type (rows stored as the GGUF stores them), f32
 * activations and outputs. The products are the dot of the DEQUANTIZED weights with the f32 activation in f32
 * (no activation quantization): every block scale is exact in f32 times its code, so the kernels take the scales
 * out of the block sums (d * sc * sum q x - dmin * m * sum x) — the same real number as summing
 * nf_dequantize(w) * x, rounded differently only (see cuda_gemv.cu).
 *
 * A job is up to NF_CUDA_GEMV_MAX_MATS matrices of one shape (gate and up; KDA's q, k and v) times nvec vectors in
 * ONE launch; vector v uses matrix ids[v] (routed experts) or v % smod (per-head matrices of a 3-D tensor) and
 * activation row v / xdiv. One vector may also meet matrices of different heights in one launch (mrows).
 *
 * C API (callable from the C library and the tests). Returns 0, or -1 with nf_error(). */
#ifndef NF_CUDA_GEMV_H
#define NF_CUDA_GEMV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA backend sends products of at most this many vectors here (decode, the routed experts of a token, a
 * short verify); more go to its prefill kernels. */
#define NF_CUDA_GEMV_MAX_VECTORS 8
/* matrices in one job */
#define NF_CUDA_GEMV_MAX_MATS 8

typedef struct nf_gemv_job {
    uint32_t type;          /* nf_type of the weights */
    int64_t rows, cols;     /* of one matrix */
    size_t slice_bytes;     /* bytes between the matrices of a 3-D tensor (used with ids or smod > 1) */
    const void *w[NF_CUDA_GEMV_MAX_MATS]; /* device weights, the used ones first, then NULL; same type and shape */
    float *y[NF_CUDA_GEMV_MAX_MATS];       /* outputs of w[0], w[1], ... */
    const float *x;         /* device activations, row r at x + r * ldx */
    const float *xm[NF_CUDA_GEMV_MAX_MATS]; /* when set: matrix m's activations instead of x (same ldx, xdiv) */
    /* when set: the activation row is SwiGLU(x row, xup row) (clamped at act_limit > 0, as nf_cuda_swiglu), made
     * while the row is staged in shared memory: one launch instead of two (the down projections). Only for jobs
     * nf_cuda_gemv_stages_x() accepts; xup row r at xup + r * ldx, no xm. */
    const float *xup;
    float act_limit;
    /* when set: each activation row is RMS-normalised first (no weight; eps xnorm_eps), bit for bit as
     * nf_cuda_rmsnorm_rows would: only for jobs nf_cuda_gemv_norms_x() accepts (the hc projection of glm53) */
    int xnorm;
    float xnorm_eps;
    int64_t ldx;
    int xdiv;               /* vector v reads activation row v / xdiv (<= 1: row v) */
    int smod;               /* without ids: vector v uses matrix v % smod (<= 1: matrix 0) */
    const int32_t *ids;     /* device, nvec entries, or NULL: vector v uses matrix ids[v] */
    /* set when ids were written by a kernel two or more launches before this job's on its stream: under PDL
     * (cuda_launch.h) that kernel has completed by the time this one starts, so the job reads the ids (through L2)
     * and starts its weight copies before its wait, as jobs without ids do; unset, it waits first */
    int ids_settled;
    int64_t ldy;            /* y[m][v * ldy + r] = W_m(v)[r, :] . x(v) */
    int nvec;
    /* when mrows[0] > 0: matrix m has mrows[m] rows (rows is not used), all on the one activation row x: matrices of
     * one type and row length but of different heights (KDA's q, k, v, its two gate down-projections and beta) in
     * one launch, their batches numbered in one sequence over one grid, each row computed exactly as in a job of its
     * matrix alone. Only with nvec 1, no ids, smod <= 1, no xm, xup or xnorm. */
    int64_t mrows[NF_CUDA_GEMV_MAX_MATS];
} nf_gemv_job;

/* the job's matrices (the used ones first, then NULL) */
static inline int nf_gemv_job_mats(const nf_gemv_job *j) {
    int n = 0;
    while (n < NF_CUDA_GEMV_MAX_MATS && j->w[n]) n++;
    return n;
}
/* 1 when some matrix has its own activation rows (xm) */
static inline int nf_gemv_job_has_xm(const nf_gemv_job *j) {
    for (int m = 0; m < NF_CUDA_GEMV_MAX_MATS; m++)
        if (j->xm[m]) return 1;
    return 0;
}

/* Copy the IQ2_XXS tables to the device and prepare the kernels (shared memory limits, SM count) for the
 * current device; call once before any product (the first product calls it otherwise, which a CUDA graph
 * capture does not allow). */
int nf_cuda_gemv_init(void);
/* True if nf_cuda_gemv can run weights of this type. */
int nf_cuda_gemv_supports(uint32_t type);
/* Launch a job on `stream` (a cudaStream_t, NULL for the default stream). Any shape the format allows runs;
 * shapes nf_cuda_gemv_streams() accepts take the streaming kernels, the others a plain warp-per-row kernel. */
int nf_cuda_gemv_run(const nf_gemv_job *job, void *stream);
/* Two jobs in ONE launch, possibly of different formats (the routed experts and the shared expert of a MoE
 * layer: a 2-bit job bound by its decode instructions beside a Q8_0 job bound by its loads). Every row has the bits
 * it has in a launch of its own job (nf_cuda_gemv_run); when the pair cannot share a launch (nf_cuda_gemv_pairs
 * says why not: formats without a pair kernel, a job off the streaming kernels, different CTA sizes) the two run
 * as two launches, a then b. Each job keeps its own PDL rule (ids, ids_settled). */
int nf_cuda_gemv_run_pair(const nf_gemv_job *a, const nf_gemv_job *b, void *stream);
/* 1 when nf_cuda_gemv_run_pair runs a and b as one launch */
int nf_cuda_gemv_pairs(const nf_gemv_job *a, const nf_gemv_job *b);
/* Matrix m of a flat job (mrows) as a job of its own: the same row values, one launch per matrix. */
nf_gemv_job nf_cuda_gemv_one_of(const nf_gemv_job *flat, int m);
/* 1 when the job takes the streaming kernels: a supported type, weights, row and slice bytes 16-byte aligned,
 * the row length a multiple of the kernel's unit (256 for Q8_0, Q6_K, Q2_K, IQ2_XXS at the alignment above)
 * and rows of at most ~48 KiB. */
int nf_cuda_gemv_streams(const nf_gemv_job *job);
/* 1 when the job runs on the streaming kernels with its activation row staged in shared memory (what xup needs):
 * nf_cuda_gemv_streams(), a quantized format and 16-byte aligned activation rows. */
int nf_cuda_gemv_stages_x(const nf_gemv_job *job);
/* 1 when the job can normalise its activation rows in the kernel (xnorm). */
int nf_cuda_gemv_norms_x(const nf_gemv_job *job);
/* The job of nf_cuda_matmul_ex's arguments (one matrix or 3-D tensor; see nf_gemv_job). */
int nf_cuda_gemv_ex(uint32_t type, const void *w, int64_t rows, int64_t cols, size_t slice_bytes, const float *x,
                    int64_t ldx, int xdiv, int smod, const int32_t *ids, float *y, int64_t ldy, int nvec, void *stream);
/* The warp-per-row IQ2_XXS kernel (cuda_gemv_iq2.cu; default, NF_CUDA_IQ2_ROWS=off: the streaming kernel): 1 when nf_cuda_gemv_run gives it
 * this job (IQ2_XXS rows of 2048 or 4096 columns, rows a multiple of 4, one activation row for every
 * vector, no fused activation). Its products use a 24-bit fixed-point activation per 64 columns (error at most
 * 2^-24 of the chunk's largest |x| per value), not the f32 activation of the streaming kernel. */
int nf_cuda_gemv_iq2_takes(const nf_gemv_job *job);
/* Tests: 1 forces the kernel on, 0 off, -1 back to NF_CUDA_IQ2_ROWS. */
void nf_cuda_gemv_iq2_force(int on);
/* nf_cuda_gemv_init's and nf_cuda_gemv_run's parts for it: sms = the device's SM count (one wave of CTAs), plan_log
 * = NF_GEMV_PLAN=1 (a line per launch) */
int nf_cuda_gemv_iq2_init(void);
int nf_cuda_gemv_iq2_run(const nf_gemv_job *job, void *stream, int sms, int plan_log);
/* The warp-per-row Q2_K kernel (cuda_gemv_q2k.cu; NF_CUDA_Q2K_ROWS=on): 1 when nf_cuda_gemv_run gives it this job
 * (Q2_K rows of 2048 columns, rows a multiple of 4, SwiGLU (xup) or not, no xm, xnorm or mrows, 16-byte aligned
 * activation rows). Its products use a 24-bit fixed-point activation per 128-column half block (error at most
 * 2^-24 of the half's largest |x| per value). force and run as for the IQ2_XXS kernel. */
int nf_cuda_gemv_q2k_takes(const nf_gemv_job *job);
void nf_cuda_gemv_q2k_force(int on);
int nf_cuda_gemv_q2k_run(const nf_gemv_job *job, void *stream, int sms, int plan_log);
/* One matrix times one vector: y[r] = W[r, :] . x (rows x cols). */
int nf_cuda_gemv(uint32_t type, const void *w, const float *x, float *y, int64_t rows, int64_t cols, void *stream);

#ifdef __cplusplus
}
#endif

#endif
