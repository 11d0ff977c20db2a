/* model.h — a loaded glm5_next model: hyperparameters from GGUF metadata and every tensor bound by name.
 *
 * Nothing about GLM-5.3-Flash's size is hard-coded: the released dimensions and a 10M-parameter test model
 * load through the same code. Binding checks each tensor's shape and type and reports one clear error per
 * mismatch (e.g. `blk.7.attn_q_b: expected [1536,16384] got [1536,8192]`). Shapes are in ggml order
 * ({ne0, ne1, ...}, ne0 contiguous); a weight matrix with ne = {in, out} is `out` rows of `in` values.
 *
 * The GGUF layout is llama.cpp's `glm5-next` (docs/gguf.md; spec §4.1). The metadata prefix is the file's
 * general.architecture ("glm5-next"). */
#ifndef NF_MODEL_H
#define NF_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"

#define NF_MAX_LAYERS 128

/* A view of one tensor inside the mapped file. `data` is NULL for an absent optional tensor. */
typedef struct {
    const char *name;     /* points into the gguf tensor table */
    const void *data;
    uint32_t type;        /* nf_type */
    uint32_t n_dims;
    int64_t ne[4];
} nf_tensor;

typedef enum { NF_LAYER_KDA = 0, NF_LAYER_MLA = 1 } nf_layer_kind;

typedef struct {
    char arch[32];              /* general.architecture */
    int n_layer;                /* trunk layers (45 for the release): block_count - nextn_predict_layers */
    int n_layer_total;          /* block_count (46 for the release: trunk + MTP) */
    int n_nextn;                /* nextn_predict_layers */
    int n_embd;                 /* embedding_length */
    int n_vocab;                /* rows of token_embd */
    int n_ctx_train;            /* context_length */
    float rms_eps;              /* attention.layer_norm_rms_epsilon */
    float indexer_ln_eps;       /* attention.layer_norm_epsilon (indexer key LayerNorm, 1e-6) */

    /* MLA (NoPE, absorbed form) */
    int n_head;                 /* attention.head_count */
    int q_lora_rank;            /* attention.q_lora_rank */
    int kv_lora_rank;           /* attention.kv_lora_rank */
    int qk_nope_dim;            /* attention.key_length_mla */
    int v_head_dim;             /* attention.value_length_mla */

    /* KDA */
    int kda_n_head;             /* kda.head_count if present, else attention.head_count */
    int kda_head_dim;           /* kda.head_dim */
    int kda_conv;               /* ssm.conv_kernel */
    float kda_gate_lower_bound; /* kda.gate_lower_bound */
    int kda_gate_rank;          /* rows of ssm_f_a (128) — derived from the tensor */

    /* DSA lightning indexer */
    int idx_n_head;             /* attention.indexer.head_count */
    int idx_head_dim;           /* attention.indexer.key_length */
    int idx_topk;               /* attention.indexer.top_k (tokens) */
    int idx_kpool;              /* attention.indexer.kpool */
    bool idx_select_tail;       /* attention.indexer.kpool_select_tail (default true) */

    /* FFN */
    int n_ff;                   /* feed_forward_length (dense) */
    int n_ff_exp;               /* expert_feed_forward_length */
    int n_expert;               /* expert_count */
    int n_expert_used;          /* expert_used_count */
    int n_expert_shared;        /* expert_shared_count */
    int n_dense_lead;           /* leading_dense_block_count */
    float expert_weights_scale; /* 2.5 */
    bool expert_weights_norm;
    float swiglu_limit;         /* swiglu_clamp_exp[layer] (10.0); 0 = no clamp */

    /* hyper-connections */
    int hc_count;               /* hyper_connection.count (4) */
    int hc_sinkhorn_iters;      /* 20 */
    float hc_eps;               /* 1e-6 */

    /* per trunk layer */
    uint8_t layer_kind[NF_MAX_LAYERS];      /* nf_layer_kind, from attention.head_count_kv (0 KDA, 1 MLA) */
    uint8_t layer_moe[NF_MAX_LAYERS];       /* 1 for MoE FFN, 0 for dense (layer >= n_dense_lead) */
    uint8_t indexer_shared[NF_MAX_LAYERS];  /* 1 = reuse the previous full MLA layer's selection */

    /* tokenizer ids (-1 when absent) */
    int32_t bos_id, eos_id, pad_id;
} nf_hparams;

typedef struct {
    /* every trunk layer */
    nf_tensor attn_norm, ffn_norm;
    nf_tensor hc_attn_fn, hc_attn_base, hc_attn_scale;
    nf_tensor hc_ffn_fn, hc_ffn_base, hc_ffn_scale;
    nf_tensor attn_output;            /* KDA {kda_inner, n_embd} or MLA {n_head*v_head_dim, n_embd} */

    /* KDA (layer_kind == NF_LAYER_KDA) */
    nf_tensor kda_q, kda_k, kda_v;    /* attn_q/attn_k/attn_v {n_embd, inner} */
    nf_tensor kda_conv_q, kda_conv_k, kda_conv_v; /* ssm_conv1d_{q,k,v} {conv, 1, inner} (or {conv, inner}) */
    nf_tensor kda_f_a, kda_f_b;       /* ssm_f_a {n_embd, rank}, ssm_f_b {rank, inner} */
    nf_tensor kda_dt_bias;            /* ssm_dt.bias {inner} */
    nf_tensor kda_a;                  /* ssm_a {kda_n_head} = -exp(A_log) */
    nf_tensor kda_beta;               /* ssm_beta {n_embd, kda_n_head} */
    nf_tensor kda_g_a, kda_g_b;       /* ssm_g_a {n_embd, rank}, ssm_g_b {rank, inner} */
    nf_tensor kda_norm;               /* ssm_norm {kda_head_dim} */

    /* MLA + DSA (layer_kind == NF_LAYER_MLA) */
    nf_tensor q_a, q_a_norm, q_b;     /* attn_q_a {n_embd, q_lora}, attn_q_a_norm {q_lora}, attn_q_b {q_lora, n_head*qk_nope} */
    nf_tensor kv_a, kv_a_norm;        /* attn_kv_a_mqa {n_embd, kv_lora}, attn_kv_a_norm {kv_lora} */
    nf_tensor k_b, v_b;               /* attn_k_b {qk_nope, kv_lora, n_head}, attn_v_b {kv_lora, v_head_dim, n_head} */
    nf_tensor idx_q_b, idx_k, idx_k_norm_w, idx_k_norm_b, idx_proj, idx_gate, idx_ape; /* absent for shared */

    /* FFN */
    nf_tensor ffn_gate, ffn_up, ffn_down;            /* dense */
    nf_tensor router, router_bias;                   /* ffn_gate_inp {n_embd, n_expert}, exp_probs_b.bias */
    nf_tensor gate_exps, up_exps, down_exps;         /* {n_embd, n_ff_exp, n_expert}, down {n_ff_exp, n_embd, n_expert} */
    nf_tensor gate_shexp, up_shexp, down_shexp;

    /* MTP/NextN block only (layers[n_layer + k]; no hc tensors, MLA with its own indexer + MoE) */
    nf_tensor nextn_eh_proj;          /* nextn.eh_proj {2*n_embd, n_embd}: [enorm(embed) | hnorm(h)] -> n_embd */
    nf_tensor nextn_enorm, nextn_hnorm, nextn_shared_head_norm; /* {n_embd} */
} nf_layer;

struct nf_synth;

typedef struct {
    gguf_file *file;                  /* NULL for a synthetic model made in memory */
    struct nf_synth *synth;           /* synthetic model made in memory (model/synth.h), else NULL */
    nf_hparams hp;
    nf_tensor token_embd, output_norm, output;
    nf_layer *layers;                 /* hp.n_layer trunk entries, then hp.n_nextn MTP blocks (bound when complete) */
    int n_bound;                      /* tensors bound (trunk + globals) */
    int n_mtp_tensors;                /* tensors of blocks >= n_layer: present, ignored for now */
    int n_extra_tensors;              /* tensors the layout does not know (ignored, noted in the summary) */
    int n_mtp_bound;                  /* MTP blocks whose every tensor is present and valid (bound into
                                         layers[n_layer..]); an incomplete MTP block is left unbound, not an error */
} nf_model;

/* Read hyperparameters from metadata (validated: positive dims, divisibility rules, known layer kinds). */
int nf_hparams_load(const gguf_file *f, nf_hparams *hp);
/* Open a GGUF, read hparams and bind every tensor. NULL on failure; nf_error() lists every mismatch
 * (one per line, at most a screenful). */
nf_model *nf_model_load(const char *path);
/* The same from an opened file (e.g. gguf_open_memory); the model takes ownership of f (closed on failure too). */
nf_model *nf_model_from_gguf(gguf_file *f);
void nf_model_free(nf_model *m);
/* The complete mismatch list of the last failed nf_model_load on this thread, one per line ("" if none);
 * nf_error() holds as many lines as fit in one message. */
const char *nf_model_mismatches(void);
/* Bytes of a tensor's data in its stored type (0 for an absent tensor). */
uint64_t nf_tensor_bytes(const nf_tensor *t);
/* Bytes of every bound tensor (globals and trunk layers; the bound MTP blocks too when include_mtp). */
uint64_t nf_model_tensor_bytes(const nf_model *m, bool include_mtp);
/* Print a short summary (dims, layer pattern, tensor bytes by type) to stdout. */
void nf_model_print_summary(const nf_model *m);

#endif
