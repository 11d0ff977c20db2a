/* forward.h — the ONE definition of the GLM-5.3-Flash text forward pass, over any backend (backend.h).
 *
 *   embed → X[hc streams] → for each trunk layer:
 *       [hc_pre → RMSNorm(attn_norm) → KDA | (MLA projections → DSA indexer → sparse MLA) → hc_post]
 *       [hc_pre → RMSNorm(ffn_norm)  → dense MLP | MoE → hc_post]
 *   → mean of streams → RMSNorm(output_norm) → lm_head
 *
 * Prefill and decode are the same call: T tokens continuing the sequence held in `st` (T = 1 is decode). */
#ifndef NF_MODEL_FORWARD_H
#define NF_MODEL_FORWARD_H

#include <stdint.h>

#include "model/backend.h"
#include "model/state.h"

/* Optional dump of the indexer's selections: buf is [n_mla_layers][n_pos][width] int32 (width =
 * nf_topk_width), indexed by ABSOLUTE position (the state's pos + t); rows for positions >= n_pos are not
 * written. MLA layers are numbered in layer order (0 = the first MLA layer). Shared-indexer layers get the
 * selection they reused. */
typedef struct nf_topk_dump {
    int32_t *buf;
    int64_t n_pos;
} nf_topk_dump;

/* Run T tokens through the model, advancing st->pos by T. logits (host memory) receives [T][n_vocab] when
 * `all_logits`, else only the last token's [n_vocab] row; NULL skips the head. dump may be NULL. */
int nf_forward(nf_backend *be, nf_state *st, const int32_t *tokens, int T, float *logits, int all_logits,
               nf_topk_dump *dump);

/* nf_forward that also writes the trunk's final hidden state of every token to hidden[T][n_embd] (host memory;
 * RMSNorm(mean of the streams) * output_norm, the vector the lm_head multiplies and the MTP block reads).
 * hidden NULL = nf_forward. Fails when the backend has no final_hidden op. */
int nf_forward_ex(nf_backend *be, nf_state *st, const int32_t *tokens, int T, float *logits, int all_logits,
                  nf_topk_dump *dump, float *hidden);

/* One part of a forward: layers [layer_begin, layer_end) — what a pipeline stage runs (pipeline.h). The part
 * starting at layer 0 embeds the tokens, a later one starts from the streams X_in; a part ending before the
 * last layer copies its streams out to X_out, the last one runs the head (logits / hidden as in nf_forward_ex).
 * sel_in / sel_out carry the latest full indexer layer's selection across parts, for a shared-indexer layer
 * whose full layer ran in an earlier part. All of them are host buffers.
 *
 * Or the streams and the selection stay in the backend's memory (a hand-over between devices, pipeline.h): X_dev
 * is the part's stream buffer itself — it holds the incoming streams on entry (a part after the first; the first
 * embeds into it) and the outgoing ones on return — and sel_dev its selection buffer (an incoming selection on
 * entry when sel_dev_in, the latest selection on return). X_in / X_out / sel_in / sel_out are then NULL. */
typedef struct {
    int layer_begin, layer_end;
    const float *X_in;      /* [T][hc][n_embd] entering layer_begin; NULL: embed the tokens (layer_begin 0) */
    float *X_out;           /* [T][hc][n_embd] after layer_end-1; NULL: run the head (layer_end = n_layer) */
    const int32_t *sel_in;  /* [T][nf_topk_width] entering the part; NULL: none */
    int32_t *sel_out;       /* [T][nf_topk_width] the latest selection after the part; NULL: not needed */
    float *X_dev;           /* backend memory [T][hc][n_embd], in and out (see above); NULL: X_in / X_out */
    int32_t *sel_dev;       /* backend memory [T][nf_topk_width]; NULL: sel_in / sel_out (needs X_dev) */
    int sel_dev_in;         /* sel_dev holds an earlier part's selection on entry */
    int sel_dev_out;        /* a later part needs the latest selection in sel_dev on return */
} nf_forward_part;

/* Run T tokens through one part, advancing st->pos by T (st holds at least the part's layers). The caller
 * checks the token ids (nf_forward_ex does it for the whole forward). */
int nf_forward_part_run(nf_backend *be, nf_state *st, const int32_t *tokens, int T, const nf_forward_part *part,
                        float *logits, int all_logits, nf_topk_dump *dump, float *hidden);

/* Prefill n tokens in chunks of `chunk` (<= 0: one call). logits as in nf_forward over all n tokens
 * ([n][n_vocab] when all_logits). */
int nf_prefill(nf_backend *be, nf_state *st, const int32_t *tokens, int64_t n, int chunk, float *logits,
               int all_logits, nf_topk_dump *dump);

/* Number of MLA layers among the trunk layers. */
int nf_mla_layer_count(const nf_hparams *hp);

#endif
