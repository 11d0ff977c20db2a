/* flop_model.h — the arithmetic of a prefill, from the model's hyperparameters: what nf-bench divides by the
 * prefill time (prefill_tflops) and compares with a measured tensor-core GEMM ceiling (docs/performance.md
 * "Prefill against the tensor-core ceiling" states the formula).
 *
 * FLOPs of the token at position p (0-based; the state holds p tokens before it):
 *
 *   matmul     2 x the active matrix parameters: every trunk matrix (KDA, MLA including the absorbed k_b and v_b,
 *              indexer, hyper-connection mixers, router, dense FFN, shared expert) once, the routed experts at
 *              n_expert_used of n_expert. Not counted: the embedding (a row lookup), the lm_head (a prefill runs
 *              it once per chunk, not per token), MTP blocks, 1-D parameters and element-wise work;
 *   attention  per MLA layer 4 x n_head x kv_lora_rank per attended latent row (score and value accumulation in the
 *              absorbed form), rows as the indexer selects them at p (byte_model.h: every row while dense, then
 *              index_topk plus the forced open-pool tail);
 *   indexer    per MLA layer with its own indexer, beyond the dense regime: 2 x idx_n_head x idx_head_dim per
 *              complete pooled key scored;
 *   kda        per KDA layer 6 x kda_n_head x kda_head_dim^2 (the recurrent state read by the key, its rank-1
 *              update, and its read by the query). */
#ifndef NF_BENCH_FLOP_MODEL_H
#define NF_BENCH_FLOP_MODEL_H

#include <stdint.h>

#include "model/model.h"

typedef struct {
    double matmul, attention, indexer, kda;
} nf_prefill_flops;

/* Active matrix parameters per token (the matmul part / 2). -1 with nf_error() if the layout cannot be built. */
int nf_active_matrix_params(const nf_hparams *hp, double *out);

/* FLOPs of prefilling positions [from, to), summed over the positions (parts as above). 0 or -1 (as above). */
int nf_prefill_flops_span(const nf_hparams *hp, int64_t from, int64_t to, nf_prefill_flops *out);

double nf_prefill_flops_total(const nf_prefill_flops *f);

#endif
