/* hparams.c — nf_hparams from the GGUF metadata of the llama.cpp `glm5-next` layout (docs/gguf.md).
 *
 * Every key is read under the prefix given by general.architecture. A required key that is missing or has the
 * wrong type fails with a message naming the full key; only keys the layout documents as optional get defaults
 * (kpool_select_tail true, indexer.types all full, kda.head_count = attention.head_count, nextn_predict_layers 0,
 * expert group counts 1). Per-layer keys (attention.head_count_kv, swiglu_clamp_exp, expert_feed_forward_length)
 * may be scalars or arrays. The few numbers not in metadata come from tensor shapes (n_vocab from token_embd,
 * the KDA gate rank from the first ssm_f_a). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "formats/formats.h"
#include "model/layout.h"
#include "model/model.h"
#include "util/error.h"

typedef struct {
    const gguf_file *f;
    const char *arch;
    char key[192];
} reader;

static const char *K(reader *r, const char *k) {
    snprintf(r->key, sizeof r->key, "%s.%s", r->arch, k);
    return r->key;
}

static bool is_int_type(gguf_type t) {
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16:
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64:
        return true;
    default:
        return false;
    }
}
static bool is_num_type(gguf_type t) {
    return is_int_type(t) || t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64;
}

/* Required non-negative integer that fits an int. */
static int req_int(reader *r, const char *k, int *out) {
    const char *key = K(r, k);
    if (!gguf_find(r->f, key)) return nf_fail("missing metadata key %s", key);
    int64_t v;
    if (gguf_get_i64(r->f, key, &v) < 0) return -1;
    if (v < 0 || v > INT32_MAX) return nf_fail("metadata key %s: value %lld out of range", key, (long long)v);
    *out = (int)v;
    return 0;
}
static int opt_int(reader *r, const char *k, int *out, int def) {
    if (!gguf_find(r->f, K(r, k))) { *out = def; return 0; }
    return req_int(r, k, out);
}
static int req_f32(reader *r, const char *k, float *out) {
    const char *key = K(r, k);
    if (!gguf_find(r->f, key)) return nf_fail("missing metadata key %s", key);
    if (gguf_get_f32(r->f, key, out) < 0) return -1;
    if (!isfinite(*out)) return nf_fail("metadata key %s: value is not finite", key);
    return 0;
}
static int req_bool(reader *r, const char *k, bool *out) {
    const char *key = K(r, k);
    if (!gguf_find(r->f, key)) return nf_fail("missing metadata key %s", key);
    return gguf_get_bool(r->f, key, out);
}
static int opt_bool(reader *r, const char *k, bool *out, bool def) {
    if (!gguf_find(r->f, K(r, k))) { *out = def; return 0; }
    return req_bool(r, k, out);
}

/* A per-layer key: scalar (same for all n layers) or numeric array with at least n entries. vals[i] for i < n. */
static int per_layer(reader *r, const char *k, int n, double *vals, bool required, double def) {
    const char *key = K(r, k);
    const gguf_kv *kv = gguf_find(r->f, key);
    if (!kv) {
        if (required) return nf_fail("missing metadata key %s", key);
        for (int i = 0; i < n; i++) vals[i] = def;
        return 0;
    }
    if (kv->type == GGUF_TYPE_ARRAY) {
        if (!is_num_type(kv->elem_type) && kv->elem_type != GGUF_TYPE_BOOL)
            return nf_fail("metadata key %s: array of %s, expected numbers", key, gguf_type_name(kv->elem_type));
        if (kv->count < (uint64_t)n)
            return nf_fail("metadata key %s: array has %llu entries, expected %d (one per layer)", key,
                           (unsigned long long)kv->count, n);
        for (int i = 0; i < n; i++) vals[i] = gguf_arr_f64(kv, (uint64_t)i);
        return 0;
    }
    if (!is_num_type(kv->type))
        return nf_fail("metadata key %s: type %s, expected a number or an array", key, gguf_type_name(kv->type));
    float v;
    if (gguf_get_f32(r->f, key, &v) < 0) return -1;
    for (int i = 0; i < n; i++) vals[i] = v;
    return 0;
}

int nf_hparams_load(const gguf_file *f, nf_hparams *hp) {
    memset(hp, 0, sizeof *hp);
    hp->bos_id = hp->eos_id = hp->pad_id = -1;
    if (!gguf_find(f, "general.architecture")) return nf_fail("missing metadata key general.architecture");
    if (gguf_get_str(f, "general.architecture", hp->arch, sizeof hp->arch) < 0) return -1;
    if (strcmp(hp->arch, "glm5-next") && strcmp(hp->arch, "glm5next"))
        return nf_fail("general.architecture is \"%s\", expected \"glm5-next\"", hp->arch);
    reader rd = {f, hp->arch, {0}}, *r = &rd;

#define TRY(x) do { if ((x) < 0) return -1; } while (0)
    TRY(req_int(r, "block_count", &hp->n_layer_total));
    TRY(opt_int(r, "nextn_predict_layers", &hp->n_nextn, 0));
    if (hp->n_nextn > hp->n_layer_total)
        return nf_fail("metadata key %s: %d exceeds block_count %d", K(r, "nextn_predict_layers"), hp->n_nextn,
                       hp->n_layer_total);
    hp->n_layer = hp->n_layer_total - hp->n_nextn;
    if (hp->n_layer < 1) return nf_fail("metadata key %s: no trunk layers (block_count %d, nextn %d)",
                                        K(r, "block_count"), hp->n_layer_total, hp->n_nextn);
    if (hp->n_layer_total > NF_MAX_LAYERS)
        return nf_fail("metadata key %s: %d blocks exceed the limit of %d", K(r, "block_count"), hp->n_layer_total,
                       NF_MAX_LAYERS);
    const int nt = hp->n_layer_total, nl = hp->n_layer;

    TRY(req_int(r, "context_length", &hp->n_ctx_train));
    TRY(req_int(r, "embedding_length", &hp->n_embd));
    TRY(req_int(r, "feed_forward_length", &hp->n_ff));
    TRY(req_f32(r, "attention.layer_norm_rms_epsilon", &hp->rms_eps));
    TRY(req_f32(r, "attention.layer_norm_epsilon", &hp->indexer_ln_eps));

    /* MLA */
    TRY(req_int(r, "attention.head_count", &hp->n_head));
    TRY(req_int(r, "attention.q_lora_rank", &hp->q_lora_rank));
    TRY(req_int(r, "attention.kv_lora_rank", &hp->kv_lora_rank));
    TRY(req_int(r, "attention.key_length_mla", &hp->qk_nope_dim));
    TRY(req_int(r, "attention.value_length_mla", &hp->v_head_dim));
    int rope = 0;
    TRY(opt_int(r, "rope.dimension_count", &rope, 0));
    if (rope != 0) return nf_fail("metadata key %s: %d, only 0 (NoPE) is supported", K(r, "rope.dimension_count"), rope);
    int key_len;
    TRY(opt_int(r, "attention.key_length", &key_len, hp->kv_lora_rank));
    if (key_len != hp->kv_lora_rank)
        return nf_fail("metadata key %s: %d, expected kv_lora_rank %d (NoPE latent)", K(r, "attention.key_length"),
                       key_len, hp->kv_lora_rank);

    /* layer kinds */
    double v[NF_MAX_LAYERS];
    TRY(per_layer(r, "attention.head_count_kv", nt, v, true, 0));
    for (int i = 0; i < nl; i++) {
        if (v[i] < 0 || v[i] != floor(v[i]))
            return nf_fail("metadata key %s: entry %d is %g, expected 0 (KDA) or >= 1 (MLA)",
                           K(r, "attention.head_count_kv"), i, v[i]);
        hp->layer_kind[i] = v[i] == 0 ? NF_LAYER_KDA : NF_LAYER_MLA;
    }

    /* KDA */
    TRY(opt_int(r, "kda.head_count", &hp->kda_n_head, hp->n_head));
    TRY(req_int(r, "kda.head_dim", &hp->kda_head_dim));
    TRY(req_int(r, "ssm.conv_kernel", &hp->kda_conv));
    TRY(req_f32(r, "kda.gate_lower_bound", &hp->kda_gate_lower_bound));
    int inner;
    int64_t want_inner = (int64_t)hp->kda_n_head * hp->kda_head_dim;
    TRY(opt_int(r, "ssm.inner_size", &inner, want_inner <= INT32_MAX ? (int)want_inner : -1));
    if (inner != want_inner)
        return nf_fail("metadata key %s: %d != KDA heads %d x head_dim %d", K(r, "ssm.inner_size"), inner,
                       hp->kda_n_head, hp->kda_head_dim);
    hp->kda_gate_rank = hp->kda_head_dim;
    for (int i = 0; i < nl; i++) {
        if (hp->layer_kind[i] != NF_LAYER_KDA) continue;
        char name[64];
        snprintf(name, sizeof name, "blk.%d.ssm_f_a.weight", i);
        const gguf_tensor *t = gguf_find_tensor(f, name);
        if (t && t->n_dims == 2 && t->ne[1] > 0 && t->ne[1] <= INT32_MAX) hp->kda_gate_rank = (int)t->ne[1];
        break;
    }

    /* indexer */
    TRY(req_int(r, "attention.indexer.head_count", &hp->idx_n_head));
    TRY(req_int(r, "attention.indexer.key_length", &hp->idx_head_dim));
    TRY(req_int(r, "attention.indexer.top_k", &hp->idx_topk));
    TRY(req_int(r, "attention.indexer.kpool", &hp->idx_kpool));
    TRY(opt_bool(r, "attention.indexer.kpool_select_tail", &hp->idx_select_tail, true));
    TRY(per_layer(r, "attention.indexer.types", nl, v, false, 1));
    for (int i = 0; i < nl; i++) {
        if (v[i] != 0 && v[i] != 1)
            return nf_fail("metadata key %s: entry %d is %g, expected 1 (full) or 0 (shared)",
                           K(r, "attention.indexer.types"), i, v[i]);
        hp->indexer_shared[i] = hp->layer_kind[i] == NF_LAYER_MLA && v[i] == 0;
    }

    /* FFN */
    TRY(req_int(r, "expert_count", &hp->n_expert));
    TRY(req_int(r, "expert_used_count", &hp->n_expert_used));
    TRY(req_int(r, "expert_shared_count", &hp->n_expert_shared));
    TRY(req_int(r, "leading_dense_block_count", &hp->n_dense_lead));
    TRY(req_f32(r, "expert_weights_scale", &hp->expert_weights_scale));
    TRY(req_bool(r, "expert_weights_norm", &hp->expert_weights_norm));
    int gating;
    TRY(req_int(r, "expert_gating_func", &gating));
    if (gating != 2) return nf_fail("metadata key %s: %d, only 2 (sigmoid) is supported", K(r, "expert_gating_func"), gating);
    int groups, groups_used;
    TRY(opt_int(r, "expert_group_count", &groups, 1));
    TRY(opt_int(r, "expert_group_used_count", &groups_used, groups));
    if (groups > 1 && groups_used < groups)
        return nf_fail("metadata key %s: group-limited routing (%d of %d groups) is not supported",
                       K(r, "expert_group_used_count"), groups_used, groups);
    if (hp->n_dense_lead > nl)
        return nf_fail("metadata key %s: %d exceeds the %d trunk layers", K(r, "leading_dense_block_count"),
                       hp->n_dense_lead, nl);
    for (int i = 0; i < nl; i++) hp->layer_moe[i] = i >= hp->n_dense_lead;

    /* expert width: scalar, or per-layer with one value over all MoE blocks (trunk and MTP) */
    TRY(per_layer(r, "expert_feed_forward_length", nt, v, true, 0));
    hp->n_ff_exp = 0;
    for (int i = 0; i < nt; i++) {
        if (i < nl && !hp->layer_moe[i]) continue;
        if (v[i] <= 0 || v[i] > INT32_MAX || v[i] != floor(v[i]))
            return nf_fail("metadata key %s: entry %d is %g, expected a positive integer",
                           K(r, "expert_feed_forward_length"), i, v[i]);
        if (hp->n_ff_exp && (int)v[i] != hp->n_ff_exp)
            return nf_fail("metadata key %s: per-layer widths differ (%d vs %g at layer %d); not supported",
                           K(r, "expert_feed_forward_length"), hp->n_ff_exp, v[i], i);
        hp->n_ff_exp = (int)v[i];
    }

    /* SwiGLU clamp: one value for all trunk layers (0 = none); the shared-expert clamp must agree. */
    TRY(per_layer(r, "swiglu_clamp_exp", nt, v, true, 0));
    hp->swiglu_limit = (float)v[0];
    for (int i = 1; i < nl; i++)
        if (v[i] != v[0])
            return nf_fail("metadata key %s: per-layer values differ (%g at layer 0, %g at layer %d); not supported",
                           K(r, "swiglu_clamp_exp"), v[0], v[i], i);
    TRY(per_layer(r, "swiglu_clamp_shexp", nt, v, false, hp->swiglu_limit));
    for (int i = 0; i < nl; i++)
        if ((float)v[i] != hp->swiglu_limit)
            return nf_fail("metadata key %s: %g at layer %d differs from swiglu_clamp_exp %g; not supported",
                           K(r, "swiglu_clamp_shexp"), v[i], i, hp->swiglu_limit);

    /* hyper-connections */
    TRY(req_int(r, "hyper_connection.count", &hp->hc_count));
    TRY(req_int(r, "hyper_connection.sinkhorn_iterations", &hp->hc_sinkhorn_iters));
    TRY(req_f32(r, "hyper_connection.epsilon", &hp->hc_eps));

    /* vocabulary: rows of token_embd (or output, or the tokenizer's token list) */
    const gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight");
    if (!te) te = gguf_find_tensor(f, "output.weight");
    const gguf_kv *toks = gguf_find(f, "tokenizer.ggml.tokens");
    if (te && te->n_dims == 2 && te->ne[1] > 0 && te->ne[1] <= INT32_MAX)
        hp->n_vocab = (int)te->ne[1];
    else if (toks && toks->type == GGUF_TYPE_ARRAY && toks->count > 0 && toks->count <= INT32_MAX)
        hp->n_vocab = (int)toks->count;
    else
        return nf_fail("cannot determine the vocabulary size: no 2-D token_embd.weight, output.weight or "
                       "tokenizer.ggml.tokens");

    /* tokenizer ids (optional) */
    const char *idk[3] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id"};
    int32_t *ids[3] = {&hp->bos_id, &hp->eos_id, &hp->pad_id};
    for (int i = 0; i < 3; i++) {
        uint32_t id;
        if (gguf_find(f, idk[i]) && gguf_get_u32(f, idk[i], &id) == 0 && id <= INT32_MAX) *ids[i] = (int32_t)id;
    }
#undef TRY
    if (nf_hparams_validate(hp) < 0) return -1;
    return 0;
}
