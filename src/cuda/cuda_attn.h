/* cuda_attn.h — kernel-level entry points of the DSA indexer (pool scoring, exact top-k) and of the sparse MLA
 * attention core, on raw device buffers and one stream. The backend's blocks (cuda_indexer.cu, cuda_mla.cu)
 * are built from them; tests/gpu/test_attn.c calls them directly to check exactness on synthetic data and to
 * time each phase at long contexts without a model.
 *
 * Every function only enqueues work on `stream` and returns 0, or -1 with nf_fail (unsupported dims, a CUDA
 * error). Per-query / per-token results never depend on how many queries or tokens one call covers (each
 * value is computed in the same order whatever T is), so chunked prefill and decode are bit-identical. */
#ifndef NF_CUDA_ATTN_H
#define NF_CUDA_ATTN_H

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bins of the first radix digit of a score key (its top 12 bits): hist rows have this many entries. */
#define NF_IDX_HIST_BINS 4096

/* Score the visible pooled keys of T queries at absolute positions pos0 .. pos0+T-1:
 *   score(t, p) = sum over heads h in order of  w[t][h] * relu((iq[t][h] . pool_key[p]) * hd^-1/2)
 * (fp32; w already includes the nh^-1/2 factor; the same formula as src/cpu/indexer.c) for p < n_vis(t) =
 * (pos0+t+1)/kpool, only for queries with n_vis(t) > budget (the others take every pool unscored). Writes
 * the order-preserving key of each score to keys[t*ld + p] and counts it in hist[t][key >> 20], which the
 * caller zeroes first. iq [T][nh][hd], w [T][nh], pool_key [pools][hd]; hd % 4 == 0. */
int nf_cuda_idx_score(cudaStream_t stream, const float *pool_key, const float *iq, const float *w, int64_t pos0, int T,
                      int nh, int hd, int kpool, int budget, uint32_t *keys, int64_t ld, uint32_t *hist);

/* Selection rows of T queries from nf_cuda_idx_score's keys and histograms: the top `budget` pools by
 * (score descending, pool index ascending), in that order, each expanded to its kpool token positions; every
 * pool in ascending order when n_vis <= budget; then, when `tail`, the open tail positions
 * kpool*n_vis .. pos; then -1 up to `width`. Exact radix select (histogram narrowing, then a sort of the
 * survivors only). budget <= 4096. */
int nf_cuda_idx_topk(cudaStream_t stream, const uint32_t *keys, int64_t ld, const uint32_t *hist, int64_t pos0, int T,
                     int kpool, int budget, int width, int tail, int32_t *sel);

/* Sparse absorbed MLA core for T tokens and H heads: with s over the valid (>= 0) entries of sel[t][width],
 *   S[t][h][s] = (qt[t][h] . latent[sel[t][s]]) * scale,  p = softmax_s(S),  U[t][h] = sum_s p[t][h][s] latent[sel[t][s]]
 * qt [T][H][kl], U [T][H][kl]; S is caller scratch of nf_cuda_mla_scratch_floats(T, H, kl, width) floats. A token
 * with no valid entry gets U = 0. A few tokens (T <= 4, kl a power-of-two multiple of 32) take a decode path
 * (cuda_mla_decode.cu): the two-pass kernels (kl <= 512), else the online-softmax split kernels (kl <= 1024); the
 * same values to f32 rounding, not bit-identical to the tiled path that more tokens take, but the same for any
 * T <= 4. NF_CUDA_MLA_TWOPASS=off picks the online kernels, NF_CUDA_MLA_SPLIT=off the tiled path for every T. */
size_t nf_cuda_mla_scratch_floats(int T, int H, int kl, int width);
int nf_cuda_mla_core(cudaStream_t stream, const float *latent, const float *qt, const int32_t *sel, int T, int H, int kl,
                     int width, float scale, float *S, float *U);

/* The core with its path forced, for tests and for timing the paths against each other in one process (the
 * environment switches are read once); NF_MLA_PATH_AUTO is nf_cuda_mla_core. A decode path forced on sizes it
 * does not take fails. */
typedef enum {
    NF_MLA_PATH_AUTO,
    NF_MLA_PATH_TILED,
    NF_MLA_PATH_ONLINE,
    NF_MLA_PATH_TWOPASS,
    NF_MLA_PATH_TC,
    NF_MLA_PATH_FLASH
} nf_mla_path;
/* NF_MLA_PATH_FLASH (cuda_mla_flash.cu; never chosen by AUTO: the backend takes it where it would take
 * NF_MLA_PATH_TC, for kl 64 / 128 / 256 / 512, unless NF_CUDA_MLA_FLASH=off): the same bf16 products in one kernel
 * with an online softmax, no score scratch (S unused); ~2^-8 relative to the f32 paths, independent of T. */
int nf_mla_flash_supported(int kl);
int nf_mla_flash(cudaStream_t stream, const float *latent, const float *qt, const int32_t *sel, int T, int H, int kl,
                 int width, float scale, float *U);
/* The same core over a bf16 copy of the latent cache (nf_mla_latent_bf16 of rows 0 .. every selected position;
 * 16-byte aligned): rows copied to shared memory by cp.async instead of loaded, rounded and stored; the same bits
 * as nf_mla_flash. The backend's prefill takes it unless NF_CUDA_MLA_FLASH16=off (one copy per layer and forward). */
int nf_mla_flash16(cudaStream_t stream, const uint16_t *latent16, const float *qt, const int32_t *sel, int T, int H,
                   int kl, int width, float scale, float *U);
int nf_mla_latent_bf16(cudaStream_t stream, const float *latent, int64_t rows, int kl, uint16_t *out);
/* 1 when the backend's prefill attention takes NF_MLA_PATH_FLASH (nf_cuda_mla_tc_wanted(T), kl supported,
 * NF_CUDA_MLA_FLASH not off) */
int nf_cuda_mla_flash_wanted(int T, int kl);
/* NF_MLA_PATH_TC (never chosen by AUTO: the backend takes it for prefill in its default bf16 mode, see
 * nf_cuda_mla_tc_wanted): the scores and the values as bf16 tensor-core products (qt, the latent rows and p
 * rounded to bf16, f32 accumulation), the same two-pass softmax in f32 between them; ~2^-8 relative to the f32
 * paths, and like them independent of T (fixed tiles, every sum in index order). kl % 4 == 0. */
/* 1 when the backend's prefill attention of T tokens takes NF_MLA_PATH_TC: T >= NF_CUDA_GEMM_MIN_VECTORS (the
 * products beside it are bf16 GEMMs too), NF_CUDA_GEMM neither off nor f32 (the exact modes the tests use), and
 * NF_CUDA_MLA_TC not off */
int nf_cuda_mla_tc_wanted(int T);
int nf_cuda_mla_core_path(nf_mla_path path, cudaStream_t stream, const float *latent, const float *qt, const int32_t *sel,
                          int T, int H, int kl, int width, float scale, float *S, float *U);

#ifdef __cplusplus
}
#endif

#endif
