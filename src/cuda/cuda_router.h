/* cuda_router.h — the MoE router on the GPU (the CPU reference: src/cpu/moe.c): sigmoid scores, the biased
 * choice, the top-k experts and their weights, on raw device buffers and one stream. The backend's MoE block
 * (cuda_moe.cu) calls it after the router product (or, in decode, the fused product + routing); tests/gpu/test_router.c checks it against the CPU's rules. */
#ifndef NF_CUDA_ROUTER_H
#define NF_CUDA_ROUTER_H

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest k (experts per token) the router takes. */
#define NF_ROUTER_TOPK_MAX 64

/* For each of T tokens with router logits logit[t][E]: s = sigmoid(logit), choice = s + bias (bias may be NULL);
 * expert_of[t][r] = the expert of rank r by (choice descending, expert index ascending), r < k (nf_topk_desc's
 * order); weight_of[t][r] = s of that expert, divided by (sum of the k chosen s + 1e-20) when norm, times scale,
 * with the CPU's f32 operations in its order. 1 <= k <= min(E, NF_ROUTER_TOPK_MAX). A NaN choice ranks last
 * (below -inf, ties by index), so the k experts are always distinct. */
int nf_cuda_router(cudaStream_t stream, const float *logit, const float *bias, int T, int E, int k, int norm, float scale,
                   int32_t *expert_of, float *weight_of);

/* The router product and the routing in one launch, for decode: logit[t][e] = W[e] . x[t] (W: E rows of n f32, x:
 * T rows at stride ldx; each logit a fixed function of its row and token: the same bits in every launch), written
 * to logit, then expert_of / weight_of as nf_cuda_router computes them from those logits. done: a zeroed device
 * counter owned by the stream (the kernel leaves it zero). 1 when launched, 0 when the shape does not suit it
 * (T > 8, n or ldx not a multiple of 4, W or x not 16-byte aligned, k out of range, too many experts): nothing
 * launched, the caller runs the product and nf_cuda_router. */
int nf_cuda_router_fused(cudaStream_t stream, const float *W, int n, const float *x, int64_t ldx, int T, const float *bias,
                         int E, int k, int norm, float scale, float *logit, int32_t *expert_of, float *weight_of,
                         unsigned int *done);

#ifdef __cplusplus
}
#endif

#endif
