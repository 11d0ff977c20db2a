/* backend.h — the block interface the forward pass is written against.
 *
 * The forward pass (forward.c) says WHAT happens for a batch of T consecutive tokens of one sequence; a
 * backend says HOW each block is computed. The CPU backend (src/cpu) is the reference; a CUDA backend will
 * implement the same table. The forward never reads or writes activation memory itself: it asks the backend
 * for buffers (which may live on a device), hands them to the blocks, and copies only the final logits (and
 * optional indexer selections) back with to_host.
 *
 * Conventions: every activation is f32; a "T-row" buffer is T rows of the given width, token-major. X (the
 * hyper-connection streams) is [T][hc][n_embd]. A mixing buffer `mix` holds per token the site's post weights
 * and combination matrix: [T][hc + hc*hc] (post[hc], then comb[i][j] row-major, i = source stream,
 * j = destination). The state's position `st->pos` is the position of the first of the T tokens; blocks
 * append to the state's caches at [pos, pos+T) and the forward advances pos after the last layer.
 * Every op returns 0, or -1 with nf_fail(). */
#ifndef NF_MODEL_BACKEND_H
#define NF_MODEL_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "model/state.h"

typedef struct nf_backend nf_backend;
struct nf_topk_dump;

struct nf_backend {
    const char *name;
    const nf_model *model;
    void *impl;
    /* the layers whose weights the backend holds: [layer_begin, layer_end), the embedding only when layer_begin is
     * 0, the head only when layer_end is n_layer; both 0: the whole model (every backend but a CUDA backend made
     * for a pipeline stage, backend_cuda.h) */
    int layer_begin, layer_end;
    /* tokens per forward call a session prefills with when its options name none (0: the session's 256). A GPU
     * prefill gets faster with longer chunks (more tokens per routed expert in each GEMM): the CUDA backend asks
     * for 4096 (glm53:q2's cold 62k prefill on the H200: 38.7 s at 2048, 34.7 s at 4096, 32.1 s at 8192) */
    int prefill_chunk;

    /* memory for activations */
    void *(*alloc)(nf_backend *be, size_t bytes);
    void (*release)(nf_backend *be, void *p);
    int (*to_host)(nf_backend *be, void *dst, const void *src, size_t bytes);
    /* host → backend memory, ordered before the blocks called after it (a pipeline stage's incoming streams;
     * the host buffer may be reused as soon as it returns) */
    int (*from_host)(nf_backend *be, void *dst, const void *src, size_t bytes);

    /* X[t][s][:] = token_embd[tokens[t]] for every stream s */
    int (*embed)(nf_backend *be, const int32_t *tokens, int T, float *X);
    /* hyper-connection site (site 0 = attn, 1 = ffn) of layer il: h[T][n_embd] = sum_s pre[s] X[s],
     * mix[T][hc + hc*hc] = (post, comb) for hc_post */
    int (*hc_pre)(nf_backend *be, int il, int site, const float *X, int T, float *h, float *mix);
    /* X[j] = post[j] * y + sum_i comb[i][j] X[i] */
    int (*hc_post)(nf_backend *be, float *X, const float *y, const float *mix, int T);
    /* out = RMSNorm(x) * w, rows of w->ne[0] */
    int (*rmsnorm)(nf_backend *be, const nf_tensor *w, const float *x, int T, float *out);
    /* Optional (NULL: hc_pre, then rmsnorm of its h): x = RMSNorm(h) * w and mix as hc_pre makes them, in one
     * call that does not return h; the same values bit for bit as the two calls (a backend fuses them to save
     * a launch per site: 90 per decoded token on glm53) */
    int (*hc_pre_norm)(nf_backend *be, int il, int site, const float *X, int T, const nf_tensor *w, float *x,
                       float *mix);
    /* Optional (NULL: hc_post, then the site's hc_pre_norm): hc_post(X, y, mix) after a sub-layer and the next
     * site's x = RMSNorm(hc_pre(X)) * w in one call; X, x and mix (read as the post's input, then replaced by the
     * new site's) as the two calls leave them, bit for bit (a backend folds the streams' update into the next
     * projection's launch: one launch less per site on the CUDA backend's decode) */
    int (*hc_post_pre_norm)(nf_backend *be, float *X, const float *y, int il, int site, int T, const nf_tensor *w,
                            float *x, float *mix);

    /* KDA block: y[T][n_embd] from the attn-normed x; updates the layer's conv window and recurrent state */
    int (*kda_block)(nf_backend *be, int il, nf_state *st, const float *x, int T, float *y);
    /* MLA projections: qr[T][q_lora] (normalised q latent), q[T][n_head*qk_nope]; appends the normalised kv
     * latent of the T tokens to the layer's latent cache */
    int (*mla_project)(nf_backend *be, int il, nf_state *st, const float *x, int T, float *qr, float *q);
    /* DSA indexer: caches the T tokens' keys/gates (pooling completed pools), then selects the attended
     * positions of each query: sel[T][width] (absolute positions, -1 padded), width = nf_topk_width() */
    int (*indexer_select)(nf_backend *be, int il, nf_state *st, const float *x, const float *qr, int T,
                          int32_t *sel);
    /* sparse MLA attention over the selected positions, then the output projection: y[T][n_embd] */
    int (*mla_attend)(nf_backend *be, int il, nf_state *st, const float *q, const int32_t *sel, int T, float *y);

    int (*dense_mlp)(nf_backend *be, int il, const float *x, int T, float *y);
    int (*moe_block)(nf_backend *be, int il, const float *x, int T, float *y);
    /* logits[T][n_vocab] = output · (RMSNorm(mean_s X[s]) * output_norm) */
    int (*head)(nf_backend *be, const float *X, int T, float *logits);

    void (*destroy)(nf_backend *be);

    /* Optional: a fresh sequence state in the backend's memory (a hooked nf_state, state.h) holding layers
     * [layer_begin, layer_end). NULL: the blocks work on a host state (nf_state_create_layers). Use
     * nf_backend_state_create / nf_backend_state_create_layers. */
    nf_state *(*state_create)(nf_backend *be, int64_t cap, int layer_begin, int layer_end);

    /* Optional (speculative decoding with the MTP block; NULL where a backend has not implemented them):
     * final_hidden: hidden[T][n_embd] = RMSNorm(mean_s X[s]) * output_norm — what the head multiplies by the
     *               lm_head, and what the MTP block reads as h_t;
     * linear:       y[T][rows] = W · x[T][W->ne[0]] for any 2-D weight tensor. */
    int (*final_hidden)(nf_backend *be, const float *X, int T, float *hidden);
    int (*linear)(nf_backend *be, const nf_tensor *w, const float *x, int T, float *y);

    /* Optional (NULL: blocks run as they are called): the forward brackets a one-token step's blocks, from the
     * embedding to the logits in backend memory, with graph_begin / graph_end, so a backend can record the step
     * and run it as one unit (CUDA graphs: one launch instead of ~1700). Between them the blocks only record
     * work: nothing runs and no device value may be read. graph_end runs the recorded step; it returns 1 when
     * the recording could not be used (e.g. out of recording memory) — nothing ran and the state is unchanged,
     * so the forward redoes the step with the blocks called directly. graph_abort discards a recording after a
     * block failed while recording; the forward then also redoes the step directly (a real error reproduces there
     * and is reported). */
    int (*graph_begin)(nf_backend *be);
    int (*graph_end)(nf_backend *be);
    void (*graph_abort)(nf_backend *be);

    /* Optional (a pipeline's hand-over between stages without the host, pipeline.h; NULL: through the host):
     * dst (this backend's memory) = src (memory of src_be, a backend of the same kind: from_peer is the same
     * function in both), ordered after the work src_be has enqueued and before the work this backend enqueues
     * later; src_be's later work waits for the copy to have read src, so src_be may release src right after. */
    int (*from_peer)(nf_backend *be, void *dst, nf_backend *src_be, const void *src, size_t bytes);

    /* Optional: a backend that runs whole forwards itself instead of being driven block by block (a pipeline of
     * backends presented as one, pipeline.h nf_pipeline_backend_create): nf_forward_ex hands it every call. */
    int (*forward)(nf_backend *be, nf_state *st, const int32_t *tokens, int T, float *logits, int all_logits,
                   struct nf_topk_dump *dump, float *hidden);
};

/* Destroy a backend made by any backend's create function (NULL is fine). */
void nf_backend_free(nf_backend *be);

/* A fresh state for this backend: be->state_create when set, else a host state. NULL on failure. */
nf_state *nf_backend_state_create(nf_backend *be, int64_t cap);
/* The same, holding only layers [layer_begin, layer_end) (a pipeline stage's state, pipeline.h). */
nf_state *nf_backend_state_create_layers(nf_backend *be, int64_t cap, int layer_begin, int layer_end);

/* Width of one query's selection row: index_topk + (kpool - 1 when the tail is force-selected). This is
 * HF's top-k row width. */
int nf_topk_width(const nf_hparams *hp);

#endif
