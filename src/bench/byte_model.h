/* byte_model.h — how many bytes one decode token reads, from the model's shapes and stored types.
 *
 * nf-bench divides these bytes by the measured time per token (decode_gbps) and compares the result with a
 * read-bandwidth probe (bw_fraction): a decode step of a model this size is bound by memory bandwidth, so the
 * fraction says how close a build gets to the limit. The model, documented in docs/performance.md, counts what
 * the algorithm must read once per token at query position `pos` (0-based; the state holds pos tokens before the
 * step, pos + 1 after it):
 *
 *   weights  every trunk tensor once (MTP blocks excluded: plain decode does not run them), except the routed
 *            experts — n_expert_used of n_expert per MoE layer, shared expert in full — and the embedding, of
 *            which one row is read; the lm_head in full; all in their stored types;
 *   state    per KDA layer the recurrent state S and the conv window (f32);
 *            per MLA layer the latent rows attention reads (f32): every position 0..pos while the query still
 *            sees every token (the dense regime: (pos+1)/kpool complete pools <= index_topk/kpool), beyond it
 *            the index_topk selected rows plus the forced open-pool tail;
 *            per MLA layer with its own indexer, beyond the dense regime: every complete pooled key (f32), which
 *            the indexer scores to select.
 *
 * Not counted: writes (the KDA state written back, the appended latent row and indexer rows), the open-pool
 * rows read when a pool completes (kpool rows every kpool tokens), activations and logits. */
#ifndef NF_BENCH_BYTE_MODEL_H
#define NF_BENCH_BYTE_MODEL_H

#include <stdint.h>

#include "model/model.h"

typedef struct {
    double weights;      /* bytes of weights read */
    double kda_state;    /* KDA recurrent states + conv windows */
    double latent;       /* MLA latent rows attended */
    double index_keys;   /* pooled indexer keys scored */
} nf_decode_bytes;

/* Bytes read by the decode step at query position pos. -1 with nf_error() if the model's layout does not
 * describe it (never for a loaded model). */
int nf_decode_bytes_at(const nf_model *m, int64_t pos, nf_decode_bytes *out);
/* Sum of the four parts. */
double nf_decode_bytes_total(const nf_decode_bytes *b);

/* The two parts separately: the weights (independent of the position; -1 with nf_error() as above) and the
 * state reads at pos (fills kda_state, latent and index_keys, sets weights to 0). */
int nf_decode_weight_bytes(const nf_model *m, double *out);
void nf_decode_state_reads(const nf_hparams *hp, int64_t pos, nf_decode_bytes *out);

/* Bytes of sequence state in use after `pos` tokens: what a snapshot copies — per KDA layer S and the conv
 * window; per MLA layer pos latent rows, pos/kpool pooled keys and the open-pool key and gate rows (f32). */
double nf_state_bytes_at(const nf_hparams *hp, int64_t pos);

#endif
