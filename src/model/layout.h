/* layout.h — the ONE description of the glm5-next GGUF layout: every tensor's name, shape and role, and every
 * hyperparameter metadata key, as functions of nf_hparams.
 *
 * The loader (model_load.c) binds exactly what nf_layout_tensors lists; the converter (src/convert) and
 * nf-synth write exactly that list, in that order, and write the metadata with nf_layout_write_hparams. Keeping
 * the table in one place is what guarantees that a file we write is a file we can load. The layout is
 * llama.cpp's `glm5-next` (spec §4.1, docs/gguf.md "glm5-next layout"). Shapes are ggml order (ne[0] contiguous).
 *
 * Roles group tensors by what they are, so a recipe (recipe.h) can pick a storage type per role. "Param" roles
 * (norm weights/biases, hc base/scale, KDA conv/dt_bias/ssm_a, indexer ape) are always F32; every other role
 * is a matrix and may be stored in any supported type whose block size divides its row length (ne[0]). */
#ifndef NF_MODEL_LAYOUT_H
#define NF_MODEL_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "model/model.h"

typedef enum {
    NF_ROLE_EMBD = 0,       /* token_embd {n_embd, n_vocab} */
    NF_ROLE_OUTPUT,         /* output (lm head) {n_embd, n_vocab} */
    NF_ROLE_NORM,           /* norm weights and biases, router bias (1-D)                     — F32 only */
    NF_ROLE_HC_FN,          /* hc_{attn,ffn}_fn {hc*n_embd, (2+hc)*hc} */
    NF_ROLE_HC_PARAM,       /* hc_{attn,ffn}_{base,scale}                                      — F32 only */
    NF_ROLE_KDA,            /* KDA matrices: attn_q/k/v, ssm_f_a/f_b, ssm_beta, ssm_g_a/g_b, attn_output */
    NF_ROLE_KDA_PARAM,      /* ssm_conv1d_{q,k,v}, ssm_dt.bias, ssm_a                          — F32 only */
    NF_ROLE_MLA,            /* attn_q_a, attn_q_b, attn_kv_a_mqa, attn_k_b, attn_v_b, attn_output (MLA) */
    NF_ROLE_INDEXER,        /* indexer.attn_q_b, indexer.attn_k */
    NF_ROLE_INDEXER_SMALL,  /* indexer.proj, indexer_compressor_gate */
    NF_ROLE_INDEXER_PARAM,  /* indexer_compressor_ape {idx_head_dim, kpool}                    — F32 only */
    NF_ROLE_ROUTER,         /* ffn_gate_inp {n_embd, n_expert} */
    NF_ROLE_DENSE_FFN,      /* ffn_gate/up/down of the leading dense layers */
    NF_ROLE_SHEXP,          /* ffn_{gate,up,down}_shexp */
    NF_ROLE_EXP_GATE,       /* ffn_gate_exps {n_embd, n_ff_exp, n_expert} */
    NF_ROLE_EXP_UP,         /* ffn_up_exps   {n_embd, n_ff_exp, n_expert} */
    NF_ROLE_EXP_DOWN,       /* ffn_down_exps {n_ff_exp, n_embd, n_expert} */
    NF_ROLE_NEXTN_PROJ,     /* nextn.eh_proj {2*n_embd, n_embd} (MTP block only) */
    NF_ROLE_COUNT
} nf_role;

/* Where the loader binds a tensor. */
typedef enum { NF_BIND_MODEL = 0, NF_BIND_LAYER = 1, NF_BIND_NONE = 2 } nf_bind_kind;

typedef struct {
    char name[64];          /* full GGUF name, e.g. "blk.7.attn_q_b.weight" */
    int layer;              /* block index, -1 for global tensors */
    nf_role role;
    uint32_t n_dims;
    int64_t ne[4];          /* unused dims are 1 */
    bool mtp;               /* part of an MTP/NextN block (layer >= n_layer): written, not bound */
    nf_bind_kind bind;      /* NF_BIND_MODEL: field of nf_model; NF_BIND_LAYER: field of nf_layer; NONE for MTP */
    size_t bind_offset;     /* offsetof(nf_model|nf_layer, field); for MTP tensors the nf_layer field too */
} nf_layout_tensor;

/* Every tensor of the model described by hp (trunk layers, then the MTP blocks if hp->n_nextn > 0, globals
 * first), in the order files are written. Fills at most `max` entries of `out` (out may be NULL with max 0)
 * and returns the total count, or -1 with nf_error() if hp is inconsistent. */
int nf_layout_tensors(const nf_hparams *hp, nf_layout_tensor *out, int max);
/* Same list, allocated (caller frees). NULL on error. */
nf_layout_tensor *nf_layout_tensors_alloc(const nf_hparams *hp, int *count);

/* The nf_tensor of model m that entry t binds to (strchr-style: m is written through it only by the binders) (MTP entries: the field of layers[t->layer], bound only when
 * m->n_mtp_bound covers it). NULL when m has no such layer. */
nf_tensor *nf_layout_bound(const nf_model *m, const nf_layout_tensor *t);

/* Element count of one entry. */
int64_t nf_layout_nelements(const nf_layout_tensor *t);
/* Parameter count of the whole layout; `trunk_only` leaves out the MTP blocks. -1 on error. */
int64_t nf_layout_param_count(const nf_hparams *hp, bool trunk_only);

/* Write general.architecture and every hyperparameter metadata key of the layout (docs/gguf.md) from hp into
 * w. Per-layer arrays (attention.head_count_kv, swiglu_clamp_*) get n_layer + n_nextn entries. Tokenizer ids are
 * written only when >= 0. Returns 0, or -1 if hp is inconsistent. */
int nf_layout_write_hparams(const nf_hparams *hp, gguf_writer *w);

/* Validate the structural rules every model must meet (positive dims, n_layer <= NF_MAX_LAYERS, topk % kpool,
 * known layer kinds, ...). 0 or -1 with a message naming the field. nf_hparams_load runs it too. */
int nf_hparams_validate(const nf_hparams *hp);

const char *nf_role_name(nf_role r);
/* Param roles: stored F32 whatever the recipe; the loader requires F32. */
bool nf_role_is_param(nf_role r);
/* True when the loader accepts `type` for a tensor of role r with row length row_len (ne[0]): param roles
 * need F32; matrices any supported type (F32, F16, BF16, Q8_0, Q4_K, Q6_K, Q2_K, IQ2_XXS) whose block size
 * divides row_len. */
bool nf_layout_type_ok(nf_role r, uint32_t type, int64_t row_len);

#endif
