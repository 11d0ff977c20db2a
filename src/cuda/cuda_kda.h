/* cuda_kda.h — kernel-level entry of the KDA delta-rule recurrence on raw device buffers and one stream: the
 * backend's KDA block (cuda_kda.cu) calls it, and tests/gpu/test_kda.c calls it directly to check that its two
 * paths are bit-identical and to time them at glm53's shapes without a model.
 *
 * Two paths compute the same float operations in the same order for every (token, head, column), so their
 * outputs and final states are equal bit for bit, whatever T is and however a sequence is cut into calls
 * (chunked prefill == decode == one-shot prefill on the GPU, which speculative decoding relies on):
 *  - fused (cuda_kda.cu): one launch; each block prepares a token's inputs (L2 norms, gates) itself, inside the
 *    token-serial loop. Best for a few tokens (one launch).
 *  - prepared (cuda_kda_scan.cu): a parallel launch over every (token, head) prepares the inputs in place first,
 *    then the serial scan only reads them, prefetched into shared memory ahead of the token it works on, with one
 *    barrier per token. Best for prefill: the serial chain no longer waits on global memory or the norms.
 *
 * A third path is not bit-identical to these two, and is only taken where a prefill already rounds differently:
 *  - chunked (cuda_kda_chunk.cu): the same recurrence in its chunked form (NF_KDA_CHUNK tokens at a time: the
 *    in-chunk interactions as small dense products computed in parallel over every chunk, then a serial pass
 *    over the chunks that carries S), in f32 with other summation orders. NF_KDA_AUTO takes it for prefill
 *    calls of >= NF_KDA_CHUNKED_MIN_T tokens in the default bf16 GEMM mode (nf_cuda_gemm_mode() == 1) when the
 *    caller gives a work buffer, unless NF_CUDA_KDA_CHUNK=off (read at each call, so that a test can turn it
 *    off around a bit-exactness check). Its result depends on where calls start (its chunks start at each
 *    call's first token): a prefill cut into calls at multiples of NF_KDA_CHUNK tokens equals the one-shot bit
 *    for bit, other cuts agree within f32 rounding. test_kda bounds it against the CPU reference. */
#ifndef NF_CUDA_KDA_H
#define NF_CUDA_KDA_H

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { NF_KDA_AUTO = 0, NF_KDA_FUSED = 1, NF_KDA_PREPARED = 2, NF_KDA_CHUNKED = 3 };

/* Tokens per chunk of the chunked path, the fewest tokens for which NF_KDA_AUTO takes it, and its largest
 * head_dim (one thread per key and per value column of a head in a 256-thread block). */
#define NF_KDA_CHUNK 64
#define NF_KDA_CHUNKED_MIN_T 64
#define NF_KDA_CHUNKED_MAX_HEAD_DIM 128

/* NF_KDA_AUTO takes the prepared path from this many tokens on (decode and speculative verification, <= 8 tokens,
 * keep the one-launch fused path), unless NF_CUDA_KDA_PREP=off (the A/B switch: fused always). */
#define NF_KDA_PREPARED_MIN_T 9

/* Key rows of S per thread (kept in registers over the tokens). Part of the summation order both paths share:
 * warp y of a column owns rows [NF_KDA_ROWS * y, NF_KDA_ROWS * (y + 1)), adds its rows' terms in row order in
 * double, and the warps' partial sums are added in warp order. */
#define NF_KDA_ROWS 16
/* Largest head_dim of either path (32 warps of NF_KDA_ROWS rows). */
#define NF_KDA_MAX_HEAD_DIM 512

/* 1 when the prepared path supports head_dim hd (its shared memory fits the default 48 KiB: hd <= 256) */
int nf_cuda_kda_prepared_supported(int hd);

/* 1 when the chunked path supports head_dim hd (hd <= NF_KDA_CHUNKED_MAX_HEAD_DIM) */
int nf_cuda_kda_chunked_supported(int hd);
/* floats of the work buffer the chunked path needs for T tokens (the per-chunk decay of each head's channels) */
size_t nf_cuda_kda_work_floats(int T, int H, int hd);

/* T tokens of the recurrence of H heads of head_dim hd, S [H][hd][hd] updated in place:
 *   q, k = per-head L2-normalised rows of qkv [T][3*H*hd] (q|k|v), q times qscale;
 *   e = exp(gate(g + dt)) per key channel with gate(f) = lb * sigmoid(-ssm_a[h] * f) when lb < 0, else
 *   ssm_a[h] * softplus(f) (g [T][H*hd], dt [H*hd], ssm_a [H]); b = sigmoid(beta) (beta [T][H]);
 *   S = diag(e) S;  d = (v - S^T k) b;  S += k d^T;  o[t][h] = S^T q  (o [T][H*hd]).
 * The prepared and chunked paths overwrite qkv, g and beta with intermediate values (scratch of the caller).
 * work: nf_cuda_kda_work_floats(T, H, hd) floats for the chunked path, or NULL (then NF_KDA_AUTO never takes it).
 * path: NF_KDA_AUTO, NF_KDA_FUSED, NF_KDA_PREPARED or NF_KDA_CHUNKED (hd must be supported). Only enqueues work;
 * returns 0, or -1 with nf_fail (unsupported dims, no work buffer for the chunked path, a launch error). */
int nf_cuda_kda_recurrence(cudaStream_t stream, int path, float *S, float *qkv, float *g, const float *dt,
                           const float *ssm_a, float lb, float *beta, float qscale, float *o, int T, int H, int hd,
                           float *work);

/* The prepared path itself (cuda_kda_scan.cu), without the checks and the choice of nf_cuda_kda_recurrence. */
int nf_cuda_kda_prepared(cudaStream_t stream, float *S, float *qkv, float *g, const float *dt, const float *ssm_a,
                         float lb, float *beta, float qscale, float *o, int T, int H, int hd);

/* The prepared path's parallel preparation alone (cuda_kda_scan.cu): q, k L2-normalised in place (q times qscale),
 * beta = sigmoid(beta), g = the decay exp(gate), or with log2_gate its log2, gate / ln 2 (the chunked path). */
int nf_cuda_kda_prep(cudaStream_t stream, float *qkv, float *g, const float *dt, const float *ssm_a, float lb,
                     float *beta, float qscale, int T, int H, int hd, int log2_gate);

/* The chunked path itself (cuda_kda_chunk.cu), without the checks and the choice of nf_cuda_kda_recurrence. */
int nf_cuda_kda_chunked(cudaStream_t stream, float *S, float *qkv, float *g, const float *dt, const float *ssm_a,
                        float lb, float *beta, float qscale, float *o, int T, int H, int hd, float *work);

#ifdef __cplusplus
}
#endif

#endif
