/* layout.c — the glm5-next tensor table and metadata writer (see layout.h).
 *
 * Every tensor name and shape formula lives in the emitters below; nothing else in the tree spells a tensor
 * name. The order is the write order: globals (token_embd, output_norm, output), then each trunk block
 * (norms, hc, attention, FFN), then the MTP blocks. */
#include "model/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"
#include "util/error.h"

/* ---- roles ---- */

static const char *const role_names[NF_ROLE_COUNT] = {
    [NF_ROLE_EMBD] = "embedding",          [NF_ROLE_OUTPUT] = "output",
    [NF_ROLE_NORM] = "norm",               [NF_ROLE_HC_FN] = "hc-fn",
    [NF_ROLE_HC_PARAM] = "hc-param",       [NF_ROLE_KDA] = "kda",
    [NF_ROLE_KDA_PARAM] = "kda-param",     [NF_ROLE_MLA] = "mla",
    [NF_ROLE_INDEXER] = "indexer",         [NF_ROLE_INDEXER_SMALL] = "indexer-small",
    [NF_ROLE_INDEXER_PARAM] = "indexer-param", [NF_ROLE_ROUTER] = "router",
    [NF_ROLE_DENSE_FFN] = "dense-ffn",     [NF_ROLE_SHEXP] = "shared-expert",
    [NF_ROLE_EXP_GATE] = "expert-gate",    [NF_ROLE_EXP_UP] = "expert-up",
    [NF_ROLE_EXP_DOWN] = "expert-down",    [NF_ROLE_NEXTN_PROJ] = "nextn-proj",
};

const char *nf_role_name(nf_role r) {
    return (unsigned)r < NF_ROLE_COUNT ? role_names[r] : "?";
}

bool nf_role_is_param(nf_role r) {
    return r == NF_ROLE_NORM || r == NF_ROLE_HC_PARAM || r == NF_ROLE_KDA_PARAM || r == NF_ROLE_INDEXER_PARAM;
}

bool nf_layout_type_ok(nf_role r, uint32_t type, int64_t row_len) {
    if (nf_role_is_param(r)) return type == NF_TYPE_F32;
    switch (type) {
    case NF_TYPE_F32: case NF_TYPE_F16: case NF_TYPE_BF16: case NF_TYPE_Q8_0:
    case NF_TYPE_Q4_K: case NF_TYPE_Q6_K: case NF_TYPE_Q2_K: case NF_TYPE_IQ2_XXS:
        break;
    default:
        return false;
    }
    const nf_type_info *ti = nf_type_get(type);
    return ti->block_size > 0 && row_len > 0 && row_len % ti->block_size == 0;
}

/* ---- validation ---- */

int nf_hparams_validate(const nf_hparams *hp) {
#define POS(field) if (hp->field <= 0) return nf_fail("hparams: " #field " must be positive (got %d)", (int)hp->field)
    POS(n_layer); POS(n_embd); POS(n_vocab); POS(hc_count); POS(hc_sinkhorn_iters);
    /* generous bounds that keep every derived product (hc mix width, head x dim) far from int overflow */
#define MAXV(field, lim) if (hp->field > (lim)) return nf_fail("hparams: " #field " %d exceeds the limit %d", (int)hp->field, (int)(lim))
    MAXV(n_embd, 1 << 24); MAXV(n_vocab, 1 << 26); MAXV(hc_count, 64); MAXV(n_head, 1 << 16);
    MAXV(q_lora_rank, 1 << 24); MAXV(kv_lora_rank, 1 << 24); MAXV(qk_nope_dim, 1 << 16); MAXV(v_head_dim, 1 << 16);
    MAXV(kda_n_head, 1 << 16); MAXV(kda_head_dim, 1 << 16); MAXV(kda_conv, 1 << 10); MAXV(kda_gate_rank, 1 << 24);
    MAXV(idx_n_head, 1 << 16); MAXV(idx_head_dim, 1 << 16); MAXV(idx_kpool, 1 << 16);
    MAXV(n_ff, 1 << 26); MAXV(n_ff_exp, 1 << 26); MAXV(n_expert, 1 << 20); MAXV(n_expert_shared, 1 << 10);
#undef MAXV
    if (hp->n_nextn < 0) return nf_fail("hparams: n_nextn must be >= 0 (got %d)", hp->n_nextn);
    if (hp->n_layer + hp->n_nextn > NF_MAX_LAYERS)
        return nf_fail("hparams: %d blocks (n_layer %d + n_nextn %d) exceed the limit of %d", hp->n_layer + hp->n_nextn,
                       hp->n_layer, hp->n_nextn, NF_MAX_LAYERS);
    if (hp->n_layer_total != hp->n_layer + hp->n_nextn)
        return nf_fail("hparams: n_layer_total %d != n_layer %d + n_nextn %d", hp->n_layer_total, hp->n_layer, hp->n_nextn);
    bool any_kda = false, any_mla = hp->n_nextn > 0, any_moe = hp->n_nextn > 0, any_dense = false, any_full = false;
    for (int i = 0; i < hp->n_layer; i++) {
        if (hp->layer_kind[i] != NF_LAYER_KDA && hp->layer_kind[i] != NF_LAYER_MLA)
            return nf_fail("hparams: layer %d has unknown kind %d", i, hp->layer_kind[i]);
        if (hp->layer_kind[i] == NF_LAYER_KDA) any_kda = true;
        if (hp->layer_kind[i] == NF_LAYER_MLA) {
            any_mla = true;
            if (!hp->indexer_shared[i]) any_full = true;
            else if (!any_full)
                return nf_fail("hparams: layer %d has a shared indexer but no earlier MLA layer has its own", i);
        }
        if (hp->layer_moe[i]) any_moe = true; else any_dense = true;
    }
    if (any_kda) {
        POS(kda_n_head); POS(kda_head_dim); POS(kda_conv); POS(kda_gate_rank);
    }
    if (any_mla) {
        POS(n_head); POS(q_lora_rank); POS(kv_lora_rank); POS(qk_nope_dim); POS(v_head_dim);
        POS(idx_n_head); POS(idx_head_dim); POS(idx_topk); POS(idx_kpool);
        if (hp->idx_topk % hp->idx_kpool)
            return nf_fail("hparams: indexer top_k %d is not a multiple of kpool %d", hp->idx_topk, hp->idx_kpool);
    }
    if (any_dense) POS(n_ff);
    if (any_moe) {
        POS(n_ff_exp); POS(n_expert); POS(n_expert_used);
        if (hp->n_expert_used > hp->n_expert)
            return nf_fail("hparams: expert_used_count %d exceeds expert_count %d", hp->n_expert_used, hp->n_expert);
        if (hp->n_expert_shared < 0) return nf_fail("hparams: expert_shared_count must be >= 0");
    }
    if (hp->n_dense_lead < 0 || hp->n_dense_lead > hp->n_layer)
        return nf_fail("hparams: leading_dense_block_count %d out of range [0,%d]", hp->n_dense_lead, hp->n_layer);
    if (!(hp->rms_eps > 0)) return nf_fail("hparams: rms_eps must be positive");
    if (hp->swiglu_limit < 0) return nf_fail("hparams: swiglu_limit must be >= 0 (0 = no clamp)");
    return 0;
#undef POS
}

/* ---- tensor table ---- */

typedef struct {
    const nf_hparams *hp;
    nf_layout_tensor *out;
    int max, n;
    char too_big[64];   /* first tensor whose element count exceeds NF_LAYOUT_MAX_ELEMENTS */
} emitter;

#define NF_LAYOUT_MAX_ELEMENTS ((int64_t)1 << 48)

static void emit(emitter *e, int layer, bool mtp, const char *base, const char *suffix, nf_role role,
                 nf_bind_kind bind, size_t off, uint32_t nd, int64_t ne0, int64_t ne1, int64_t ne2) {
    int64_t ne[3] = {ne0, nd > 1 ? ne1 : 1, nd > 2 ? ne2 : 1}, total = 1;
    bool bad = false;
    for (int d = 0; d < 3; d++) bad |= ne[d] <= 0 || __builtin_mul_overflow(total, ne[d], &total);
    if ((bad || total > NF_LAYOUT_MAX_ELEMENTS) && !e->too_big[0])
        snprintf(e->too_big, sizeof e->too_big, "%s%s%s", layer >= 0 ? "blk.N." : "", base, suffix);
    if (e->n < e->max) {
        nf_layout_tensor *t = &e->out[e->n];
        memset(t, 0, sizeof *t);
        if (layer >= 0)
            snprintf(t->name, sizeof t->name, "blk.%d.%s%s", layer, base, suffix);
        else
            snprintf(t->name, sizeof t->name, "%s%s", base, suffix);
        t->layer = layer;
        t->role = role;
        t->n_dims = nd;
        t->ne[0] = ne0; t->ne[1] = nd > 1 ? ne1 : 1; t->ne[2] = nd > 2 ? ne2 : 1; t->ne[3] = 1;
        t->mtp = mtp;
        t->bind = mtp ? NF_BIND_NONE : bind;
        t->bind_offset = off; /* MTP tensors: the nf_layer field of layers[layer] (bound optionally) */
    }
    e->n++;
}

#define W ".weight"
#define B ".bias"
#define LF(f) NF_BIND_LAYER, offsetof(nf_layer, f)
#define MF(f) NF_BIND_MODEL, offsetof(nf_model, f)
#define V1(role, base, sfx, f, n) emit(e, il, mtp, base, sfx, role, LF(f), 1, n, 1, 1)
#define M2(role, base, f, a, b) emit(e, il, mtp, base, W, role, LF(f), 2, a, b, 1)
#define M3(role, base, f, a, b, c) emit(e, il, mtp, base, W, role, LF(f), 3, a, b, c)

static void emit_mla(emitter *e, int il, bool mtp, bool own_indexer) {
    const nf_hparams *hp = e->hp;
    M2(NF_ROLE_MLA, "attn_q_a", q_a, hp->n_embd, hp->q_lora_rank);
    V1(NF_ROLE_NORM, "attn_q_a_norm", W, q_a_norm, hp->q_lora_rank);
    M2(NF_ROLE_MLA, "attn_q_b", q_b, hp->q_lora_rank, (int64_t)hp->n_head * hp->qk_nope_dim);
    M2(NF_ROLE_MLA, "attn_kv_a_mqa", kv_a, hp->n_embd, hp->kv_lora_rank);
    V1(NF_ROLE_NORM, "attn_kv_a_norm", W, kv_a_norm, hp->kv_lora_rank);
    M3(NF_ROLE_MLA, "attn_k_b", k_b, hp->qk_nope_dim, hp->kv_lora_rank, hp->n_head);
    M3(NF_ROLE_MLA, "attn_v_b", v_b, hp->kv_lora_rank, hp->v_head_dim, hp->n_head);
    M2(NF_ROLE_MLA, "attn_output", attn_output, (int64_t)hp->n_head * hp->v_head_dim, hp->n_embd);
    if (!own_indexer) return;
    M2(NF_ROLE_INDEXER, "indexer.attn_q_b", idx_q_b, hp->q_lora_rank, (int64_t)hp->idx_n_head * hp->idx_head_dim);
    M2(NF_ROLE_INDEXER, "indexer.attn_k", idx_k, hp->n_embd, hp->idx_head_dim);
    V1(NF_ROLE_NORM, "indexer.k_norm", W, idx_k_norm_w, hp->idx_head_dim);
    V1(NF_ROLE_NORM, "indexer.k_norm", B, idx_k_norm_b, hp->idx_head_dim);
    M2(NF_ROLE_INDEXER_SMALL, "indexer.proj", idx_proj, hp->n_embd, hp->idx_n_head);
    M2(NF_ROLE_INDEXER_SMALL, "indexer_compressor_gate", idx_gate, hp->n_embd, hp->idx_head_dim);
    M2(NF_ROLE_INDEXER_PARAM, "indexer_compressor_ape", idx_ape, hp->idx_head_dim, hp->idx_kpool);
}

static void emit_kda(emitter *e, int il, bool mtp) {
    const nf_hparams *hp = e->hp;
    int64_t inner = (int64_t)hp->kda_n_head * hp->kda_head_dim;
    M2(NF_ROLE_KDA, "attn_q", kda_q, hp->n_embd, inner);
    M2(NF_ROLE_KDA, "attn_k", kda_k, hp->n_embd, inner);
    M2(NF_ROLE_KDA, "attn_v", kda_v, hp->n_embd, inner);
    M3(NF_ROLE_KDA_PARAM, "ssm_conv1d_q", kda_conv_q, hp->kda_conv, 1, inner);
    M3(NF_ROLE_KDA_PARAM, "ssm_conv1d_k", kda_conv_k, hp->kda_conv, 1, inner);
    M3(NF_ROLE_KDA_PARAM, "ssm_conv1d_v", kda_conv_v, hp->kda_conv, 1, inner);
    M2(NF_ROLE_KDA, "ssm_f_a", kda_f_a, hp->n_embd, hp->kda_gate_rank);
    M2(NF_ROLE_KDA, "ssm_f_b", kda_f_b, hp->kda_gate_rank, inner);
    V1(NF_ROLE_KDA_PARAM, "ssm_dt", B, kda_dt_bias, inner);
    V1(NF_ROLE_KDA_PARAM, "ssm_a", "", kda_a, hp->kda_n_head);
    M2(NF_ROLE_KDA, "ssm_beta", kda_beta, hp->n_embd, hp->kda_n_head);
    M2(NF_ROLE_KDA, "ssm_g_a", kda_g_a, hp->n_embd, hp->kda_gate_rank);
    M2(NF_ROLE_KDA, "ssm_g_b", kda_g_b, hp->kda_gate_rank, inner);
    V1(NF_ROLE_NORM, "ssm_norm", W, kda_norm, hp->kda_head_dim);
    M2(NF_ROLE_KDA, "attn_output", attn_output, inner, hp->n_embd);
}

static void emit_moe(emitter *e, int il, bool mtp) {
    const nf_hparams *hp = e->hp;
    M2(NF_ROLE_ROUTER, "ffn_gate_inp", router, hp->n_embd, hp->n_expert);
    V1(NF_ROLE_NORM, "exp_probs_b", B, router_bias, hp->n_expert);
    M3(NF_ROLE_EXP_GATE, "ffn_gate_exps", gate_exps, hp->n_embd, hp->n_ff_exp, hp->n_expert);
    M3(NF_ROLE_EXP_UP, "ffn_up_exps", up_exps, hp->n_embd, hp->n_ff_exp, hp->n_expert);
    M3(NF_ROLE_EXP_DOWN, "ffn_down_exps", down_exps, hp->n_ff_exp, hp->n_embd, hp->n_expert);
    if (hp->n_expert_shared > 0) {
        int64_t sh = (int64_t)hp->n_ff_exp * hp->n_expert_shared;
        M2(NF_ROLE_SHEXP, "ffn_gate_shexp", gate_shexp, hp->n_embd, sh);
        M2(NF_ROLE_SHEXP, "ffn_up_shexp", up_shexp, hp->n_embd, sh);
        M2(NF_ROLE_SHEXP, "ffn_down_shexp", down_shexp, sh, hp->n_embd);
    }
}

static void emit_trunk_layer(emitter *e, int il) {
    const nf_hparams *hp = e->hp;
    const bool mtp = false;
    int64_t hc_mix = (int64_t)(2 + hp->hc_count) * hp->hc_count, hc_in = (int64_t)hp->hc_count * hp->n_embd;
    V1(NF_ROLE_NORM, "attn_norm", W, attn_norm, hp->n_embd);
    V1(NF_ROLE_NORM, "ffn_norm", W, ffn_norm, hp->n_embd);
    M2(NF_ROLE_HC_FN, "hc_attn_fn", hc_attn_fn, hc_in, hc_mix);
    V1(NF_ROLE_HC_PARAM, "hc_attn_base", W, hc_attn_base, hc_mix);
    V1(NF_ROLE_HC_PARAM, "hc_attn_scale", W, hc_attn_scale, 3);
    M2(NF_ROLE_HC_FN, "hc_ffn_fn", hc_ffn_fn, hc_in, hc_mix);
    V1(NF_ROLE_HC_PARAM, "hc_ffn_base", W, hc_ffn_base, hc_mix);
    V1(NF_ROLE_HC_PARAM, "hc_ffn_scale", W, hc_ffn_scale, 3);
    if (hp->layer_kind[il] == NF_LAYER_KDA)
        emit_kda(e, il, mtp);
    else
        emit_mla(e, il, mtp, !hp->indexer_shared[il]);
    if (hp->layer_moe[il]) {
        emit_moe(e, il, mtp);
    } else {
        M2(NF_ROLE_DENSE_FFN, "ffn_gate", ffn_gate, hp->n_embd, hp->n_ff);
        M2(NF_ROLE_DENSE_FFN, "ffn_up", ffn_up, hp->n_embd, hp->n_ff);
        M2(NF_ROLE_DENSE_FFN, "ffn_down", ffn_down, hp->n_ff, hp->n_embd);
    }
}

/* MTP/NextN block: plain residual (no hc), MLA with its own indexer, MoE, and the nextn tensors. */
static void emit_mtp_layer(emitter *e, int il) {
    const nf_hparams *hp = e->hp;
    const bool mtp = true;
    V1(NF_ROLE_NORM, "attn_norm", W, attn_norm, hp->n_embd);
    V1(NF_ROLE_NORM, "ffn_norm", W, ffn_norm, hp->n_embd);
    emit_mla(e, il, mtp, true);
    emit_moe(e, il, mtp);
    emit(e, il, mtp, "nextn.eh_proj", W, NF_ROLE_NEXTN_PROJ, LF(nextn_eh_proj), 2, 2 * (int64_t)hp->n_embd, hp->n_embd, 1);
    emit(e, il, mtp, "nextn.enorm", W, NF_ROLE_NORM, LF(nextn_enorm), 1, hp->n_embd, 1, 1);
    emit(e, il, mtp, "nextn.hnorm", W, NF_ROLE_NORM, LF(nextn_hnorm), 1, hp->n_embd, 1, 1);
    emit(e, il, mtp, "nextn.shared_head_norm", W, NF_ROLE_NORM, LF(nextn_shared_head_norm), 1, hp->n_embd, 1, 1);
}

int nf_layout_tensors(const nf_hparams *hp, nf_layout_tensor *out, int max) {
    if (nf_hparams_validate(hp) < 0) return -1;
    emitter em = {hp, out, out ? max : 0, 0, {0}}, *e = &em;
    const int il = -1;
    const bool mtp = false;
    emit(e, il, mtp, "token_embd", W, NF_ROLE_EMBD, MF(token_embd), 2, hp->n_embd, hp->n_vocab, 1);
    emit(e, il, mtp, "output_norm", W, NF_ROLE_NORM, MF(output_norm), 1, hp->n_embd, 1, 1);
    emit(e, il, mtp, "output", W, NF_ROLE_OUTPUT, MF(output), 2, hp->n_embd, hp->n_vocab, 1);
    for (int l = 0; l < hp->n_layer; l++) emit_trunk_layer(e, l);
    for (int l = hp->n_layer; l < hp->n_layer + hp->n_nextn; l++) emit_mtp_layer(e, l);
    if (em.too_big[0]) return nf_fail("hparams: tensor %s would have more than 2^48 elements", em.too_big);
    return em.n;
}

nf_layout_tensor *nf_layout_tensors_alloc(const nf_hparams *hp, int *count) {
    int n = nf_layout_tensors(hp, NULL, 0);
    if (n < 0) return NULL;
    nf_layout_tensor *t = nf_xcalloc((size_t)n, sizeof *t);
    nf_layout_tensors(hp, t, n);
    if (count) *count = n;
    return t;
}

nf_tensor *nf_layout_bound(const nf_model *m, const nf_layout_tensor *t) {
    if (t->bind == NF_BIND_MODEL) return (nf_tensor *)((char *)m + t->bind_offset);
    if (!m->layers || t->layer < 0 || t->layer >= m->hp.n_layer + m->hp.n_nextn) return NULL;
    return (nf_tensor *)((char *)&m->layers[t->layer] + t->bind_offset);
}

int64_t nf_layout_nelements(const nf_layout_tensor *t) {
    int64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) n *= t->ne[d];
    return n;
}

int64_t nf_layout_param_count(const nf_hparams *hp, bool trunk_only) {
    int n;
    nf_layout_tensor *t = nf_layout_tensors_alloc(hp, &n);
    if (!t) return -1;
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        if (!(trunk_only && t[i].mtp)) total += nf_layout_nelements(&t[i]);
    free(t);
    return total;
}

/* ---- metadata ---- */

int nf_layout_write_hparams(const nf_hparams *hp, gguf_writer *w) {
    if (nf_hparams_validate(hp) < 0) return -1;
    const char *arch = hp->arch[0] ? hp->arch : "glm5-next";
    char k[160];
#define KEY(s) (snprintf(k, sizeof k, "%s.%s", arch, s), k)
    int nt = hp->n_layer + hp->n_nextn;
    uint32_t kv[NF_MAX_LAYERS], full[NF_MAX_LAYERS];
    float clamp[NF_MAX_LAYERS];
    bool any_shared = false;
    for (int i = 0; i < nt; i++) {
        kv[i] = i < hp->n_layer ? (hp->layer_kind[i] == NF_LAYER_MLA) : 1;
        clamp[i] = hp->swiglu_limit;
    }
    for (int i = 0; i < hp->n_layer; i++) {
        full[i] = !hp->indexer_shared[i];
        if (hp->layer_kind[i] == NF_LAYER_MLA && hp->indexer_shared[i]) any_shared = true;
    }

    gguf_set_str(w, "general.architecture", arch);
    gguf_set_u32(w, KEY("block_count"), (uint32_t)nt);
    if (hp->n_nextn > 0) gguf_set_u32(w, KEY("nextn_predict_layers"), (uint32_t)hp->n_nextn);
    gguf_set_u32(w, KEY("context_length"), (uint32_t)hp->n_ctx_train);
    gguf_set_u32(w, KEY("embedding_length"), (uint32_t)hp->n_embd);
    gguf_set_u32(w, KEY("feed_forward_length"), (uint32_t)hp->n_ff);
    gguf_set_u32(w, KEY("vocab_size"), (uint32_t)hp->n_vocab);
    gguf_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), hp->rms_eps);
    gguf_set_f32(w, KEY("attention.layer_norm_epsilon"), hp->indexer_ln_eps);

    /* MLA */
    gguf_set_u32(w, KEY("attention.head_count"), (uint32_t)hp->n_head);
    gguf_set_arr(w, KEY("attention.head_count_kv"), GGUF_TYPE_UINT32, kv, (uint64_t)nt);
    gguf_set_u32(w, KEY("attention.q_lora_rank"), (uint32_t)hp->q_lora_rank);
    gguf_set_u32(w, KEY("attention.kv_lora_rank"), (uint32_t)hp->kv_lora_rank);
    gguf_set_u32(w, KEY("attention.key_length"), (uint32_t)hp->kv_lora_rank);   /* latent + rope (0) */
    gguf_set_u32(w, KEY("attention.value_length"), (uint32_t)hp->kv_lora_rank);
    gguf_set_u32(w, KEY("attention.key_length_mla"), (uint32_t)hp->qk_nope_dim);
    gguf_set_u32(w, KEY("attention.value_length_mla"), (uint32_t)hp->v_head_dim);
    gguf_set_u32(w, KEY("rope.dimension_count"), 0);

    /* KDA */
    gguf_set_u32(w, KEY("ssm.conv_kernel"), (uint32_t)hp->kda_conv);
    gguf_set_u32(w, KEY("ssm.inner_size"), (uint32_t)((int64_t)hp->kda_n_head * hp->kda_head_dim));
    gguf_set_u32(w, KEY("ssm.state_size"), (uint32_t)hp->kda_head_dim);
    gguf_set_u32(w, KEY("ssm.group_count"), (uint32_t)hp->kda_n_head);
    gguf_set_u32(w, KEY("kda.head_dim"), (uint32_t)hp->kda_head_dim);
    if (hp->kda_n_head != hp->n_head) gguf_set_u32(w, KEY("kda.head_count"), (uint32_t)hp->kda_n_head);
    gguf_set_f32(w, KEY("kda.gate_lower_bound"), hp->kda_gate_lower_bound);

    /* indexer */
    gguf_set_u32(w, KEY("attention.indexer.head_count"), (uint32_t)hp->idx_n_head);
    gguf_set_u32(w, KEY("attention.indexer.key_length"), (uint32_t)hp->idx_head_dim);
    gguf_set_u32(w, KEY("attention.indexer.top_k"), (uint32_t)hp->idx_topk);
    gguf_set_u32(w, KEY("attention.indexer.kpool"), (uint32_t)hp->idx_kpool);
    gguf_set_bool(w, KEY("attention.indexer.kpool_select_tail"), hp->idx_select_tail);
    gguf_set_bool(w, KEY("attention.indexer.index_share_mtp"), true);
    if (any_shared) gguf_set_arr(w, KEY("attention.indexer.types"), GGUF_TYPE_UINT32, full, (uint64_t)hp->n_layer);

    /* FFN */
    gguf_set_u32(w, KEY("expert_feed_forward_length"), (uint32_t)hp->n_ff_exp);
    gguf_set_u32(w, KEY("expert_count"), (uint32_t)hp->n_expert);
    gguf_set_u32(w, KEY("expert_used_count"), (uint32_t)hp->n_expert_used);
    gguf_set_u32(w, KEY("expert_shared_count"), (uint32_t)hp->n_expert_shared);
    gguf_set_u32(w, KEY("expert_group_count"), 1);
    gguf_set_u32(w, KEY("expert_group_used_count"), 1);
    gguf_set_u32(w, KEY("leading_dense_block_count"), (uint32_t)hp->n_dense_lead);
    gguf_set_f32(w, KEY("expert_weights_scale"), hp->expert_weights_scale);
    gguf_set_bool(w, KEY("expert_weights_norm"), hp->expert_weights_norm);
    gguf_set_u32(w, KEY("expert_gating_func"), 2);   /* sigmoid */
    gguf_set_arr(w, KEY("swiglu_clamp_exp"), GGUF_TYPE_FLOAT32, clamp, (uint64_t)nt);
    gguf_set_arr(w, KEY("swiglu_clamp_shexp"), GGUF_TYPE_FLOAT32, clamp, (uint64_t)nt);

    /* hyper-connections */
    gguf_set_u32(w, KEY("hyper_connection.count"), (uint32_t)hp->hc_count);
    gguf_set_u32(w, KEY("hyper_connection.sinkhorn_iterations"), (uint32_t)hp->hc_sinkhorn_iters);
    gguf_set_f32(w, KEY("hyper_connection.epsilon"), hp->hc_eps);

    if (hp->bos_id >= 0) gguf_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)hp->bos_id);
    if (hp->eos_id >= 0) gguf_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)hp->eos_id);
    if (hp->pad_id >= 0) gguf_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)hp->pad_id);
#undef KEY
    return 0;
}
