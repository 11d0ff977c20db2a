/* state.h — everything one sequence carries between forward calls (host memory, fp32).
 *
 * Per KDA layer: the conv window (the last conv-1 PRE-conv q|k|v projections) and the recurrent state
 * S[head][key][value]. Per MLA layer: the latent cache (kv_lora values per token, after kv_a_norm), and the
 * indexer cache: the key and gate rows (idx_head_dim each) of the tokens of the still-open pool, and one pooled
 * key per completed pool. Plus the position (tokens consumed so far).
 *
 *   layer l (KDA):  conv[(conv-1)][3*inner]  oldest row first     S[n_head][head_dim][head_dim]
 *   layer l (MLA):  latent[pos][kv_lora]      pool_key[pos/kpool][idx_head_dim]
 *                   open_key[kpool][idx_head_dim], open_gate[kpool][idx_head_dim]  (slot = token % kpool)
 *
 * A state may hold only a range of the layers (a pipeline stage's state, model/pipeline.h): the others have kind
 * NF_STATE_LAYER_ABSENT and no arrays, so a stage's memory holds no cache of another stage's layers. Every
 * operation below skips absent layers; restore and rollback require both sides to hold the same layers.
 *
 * The latent cache and the pooled keys only ever grow (append-only); the KDA state, conv windows and the
 * open-pool rows are overwritten in place. That split gives three save/restore operations:
 *
 * - snapshot / restore: a complete deep copy (caches up to pos included). Restore works in any direction.
 * - checkpoint at position p (nf_state_checkpoint while st->pos == p): a copy of only the fixed-size part
 *   (KDA S, conv windows, open-pool rows) plus p. nf_state_rollback(st, ck) sets every fixed-size part back
 *   and truncates the caches to p (latent rows [0,p), pooled keys [0, p/kpool)). Valid as long as the state
 *   only moved forward from p (pos >= p) since the checkpoint and was not restored to another history — the
 *   rows below p of append-only caches are then unchanged. This is what speculative decoding and prefix
 *   reuse need: cost independent of the context length.
 */
#ifndef NF_MODEL_STATE_H
#define NF_MODEL_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

/* nf_layer_state.kind of a layer the state does not hold (nf_state_create_layers) */
enum { NF_STATE_LAYER_ABSENT = -1 };

typedef struct {
    int kind;               /* nf_layer_kind, or NF_STATE_LAYER_ABSENT */
    /* KDA */
    float *conv;            /* [(conv-1) * 3*inner] */
    float *S;               /* [n_head * head_dim * head_dim] */
    /* MLA */
    float *latent;          /* [cap * kv_lora] */
    float *pool_key;        /* [(cap / kpool + 1) * idx_hd] */
    float *open_key;        /* [kpool * idx_hd] */
    float *open_gate;       /* [kpool * idx_hd] */
} nf_layer_state;

struct nf_state;
struct nf_state_ckpt;
struct nf_state_fill_scales;

/* A state whose arrays live on a device (backend.h's state_create) carries hooks: every nf_state_* function
 * below hands a hooked state to its hook. The layout is the same nf_state, but the L[] array pointers (and a
 * checkpoint's data) are the backend's device pointers; `device` is the backend's own bookkeeping. A host state
 * has hooks == NULL. nf_state_restore also accepts one host and one hooked state (the hook copies across). */
typedef struct nf_state_hooks {
    void (*free)(struct nf_state *st);
    void (*reset)(struct nf_state *st);
    int (*reserve)(struct nf_state *st, int64_t n);
    struct nf_state *(*snapshot)(const struct nf_state *st);
    int (*restore)(struct nf_state *dst, const struct nf_state *src);
    int (*checkpoint)(const struct nf_state *st, struct nf_state_ckpt *ck);
    int (*rollback)(struct nf_state *st, const struct nf_state_ckpt *ck);
    void (*ckpt_free)(struct nf_state_ckpt *ck);
    /* optional: nf_state_fill's writes (state_fill.h) in device memory; pos is set by the caller */
    int (*fill)(struct nf_state *st, int64_t to, uint64_t seed, const struct nf_state_fill_scales *sc);
} nf_state_hooks;

typedef struct nf_state {
    int n_layer;
    int64_t pos;            /* tokens consumed */
    int64_t cap;            /* allocated token capacity of the MLA caches (grows on demand) */
    int64_t limit;          /* the most tokens the caches may ever hold (the context size, --ctx); 0: none */
    /* dims copied from the hyperparameters */
    int conv_rows, conv_width, kda_heads, kda_hd, kv_lora, idx_hd, kpool;
    nf_layer_state *L;
    const nf_state_hooks *hooks;  /* NULL for host memory */
    void *device;                 /* owned by the hooks' backend */
} nf_state;

/* Fixed-size part of the state at one position (see the header comment). */
typedef struct nf_state_ckpt {
    int64_t pos;
    size_t bytes;
    float *data;            /* all fixed-size arrays, concatenated in layer order */
    const nf_state_hooks *hooks; /* set by a hooked state's checkpoint (data is then device memory) */
} nf_state_ckpt;

/* A fresh state (pos 0, zero KDA state/conv, empty caches) for the model's hyperparameters. `cap` is the
 * initial token capacity (grown on demand). NULL on failure. */
nf_state *nf_state_create(const nf_hparams *hp, int64_t cap);
/* nf_state_create holding only layers [layer_begin, layer_end) (0 <= begin < end <= n_layer; the others are
 * absent). NULL with nf_error() for a bad range. */
nf_state *nf_state_create_layers(const nf_hparams *hp, int64_t cap, int layer_begin, int layer_end);
/* A fresh host state with st's dimensions and layer kinds (absent layers included; st may be a device state),
 * capacity cap. */
nf_state *nf_state_create_like(const nf_state *st, int64_t cap);
void nf_state_free(nf_state *st);
/* Back to position 0 (zeroes the fixed-size arrays). */
void nf_state_reset(nf_state *st);
/* Make room for `n` tokens in total in the MLA caches (growth doubles the capacity, clamped to the limit).
 * 0, or -1 with nf_error(): n beyond the state's limit (nothing allocated), or out of (device) memory, the bytes
 * named. */
int nf_state_reserve(nf_state *st, int64_t n);
/* Set the context limit (0: none): every later reserve, and so every forward, beyond it is refused. */
void nf_state_set_limit(nf_state *st, int64_t limit);
/* The capacity a reserve of n tokens grows st to: doubled from st->cap until it holds n, clamped to the limit
 * (for the hooks' reserve). */
int64_t nf_state_grown_cap(const nf_state *st, int64_t n);

/* Deep copies. nf_state_snapshot returns a new state equal to st; nf_state_restore copies src into dst
 * (same model). */
nf_state *nf_state_snapshot(const nf_state *st);
int nf_state_restore(nf_state *dst, const nf_state *src);

/* Host states: copy every layer held by both (a pipeline stage's layers into a whole-model state, or a whole-model
 * state's into a stage's), growing dst to src->pos; then dst->pos = src->pos. Layers only one holds are left as
 * they are. 0, or -1 with nf_error() (other dims, a layer of different kinds, a hooked state, out of memory). */
int nf_state_copy_layers(nf_state *dst, const nf_state *src);

/* Checkpoint at the current position / roll back to it (see the header comment). */
int nf_state_checkpoint(const nf_state *st, nf_state_ckpt *ck);
int nf_state_rollback(nf_state *st, const nf_state_ckpt *ck);
void nf_state_ckpt_free(nf_state_ckpt *ck);

/* Bytes held by the state (fixed part + caches at the current capacity). */
size_t nf_state_bytes(const nf_state *st);

#endif
