/* hf_config.c — config.json of a glm5_next checkpoint → nf_hparams (see hf_config.h).
 *
 * The rules mirror transformers' Glm5NextTextConfig (configuration_glm5_next.py): same defaults, same
 * __post_init__ derivations (layer_types, mlp_layer_types, indexer_types from index_topk_pattern or
 * index_topk_freq/index_skip_topk_offset, linear_attn_config overriding the linear_* fields, legacy
 * "full_attention" meaning an indexed (DSA) layer) and the same validation, plus refusals for values the engine
 * does not implement. Errors name the field: "config.json: text_config.hc_mult = 8: only 4 is supported". */
#include "convert/hf_config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "util/error.h"

typedef struct {
    json_t *obj;         /* the text-config object */
    const char *prefix;  /* "text_config." or "" for messages */
    char *defaulted;
} cfg_ctx;

static void note_default(cfg_ctx *c, const char *field) {
    size_t n = strlen(c->defaulted);
    if (n + strlen(field) + 3 < 512) snprintf(c->defaulted + n, 512 - n, "%s%s", n ? ", " : "", field);
}

/* Integer field: absent/null -> def (required: error). */
static int get_int(cfg_ctx *c, const char *k, bool required, int64_t def, int64_t *out) {
    json_t *v = json_object_get(c->obj, k);
    if (!v || json_is_null(v)) {
        if (required) return nf_fail("config.json: required field %s%s is missing", c->prefix, k);
        *out = def;
        return 0;
    }
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return 0;
    }
    if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 1e15) {
        *out = (int64_t)json_real_value(v);
        return 0;
    }
    return nf_fail("config.json: field %s%s must be an integer", c->prefix, k);
}

/* Positive int that fits an int. */
static int get_dim(cfg_ctx *c, const char *k, bool required, int64_t def, int *out) {
    int64_t x;
    if (get_int(c, k, required, def, &x) < 0) return -1;
    if (x <= 0 || x > (1 << 30)) return nf_fail("config.json: %s%s = %lld must be positive", c->prefix, k, (long long)x);
    *out = (int)x;
    return 0;
}

static int get_float(cfg_ctx *c, const char *k, double def, double *out) {
    json_t *v = json_object_get(c->obj, k);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_number(v)) return nf_fail("config.json: field %s%s must be a number", c->prefix, k);
    *out = json_number_value(v);
    if (!isfinite(*out)) return nf_fail("config.json: field %s%s is not finite", c->prefix, k);
    return 0;
}

static int get_bool(cfg_ctx *c, const char *k, bool def, bool *out) {
    json_t *v = json_object_get(c->obj, k);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v)) return nf_fail("config.json: field %s%s must be true or false", c->prefix, k);
    *out = json_is_true(v);
    return 0;
}

/* String field: NULL if absent/null; error if not a string. */
static int get_str(cfg_ctx *c, const char *k, const char **out) {
    json_t *v = json_object_get(c->obj, k);
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return nf_fail("config.json: field %s%s must be a string", c->prefix, k);
    *out = json_string_value(v);
    return 0;
}

/* A list of strings of length >= n (extra entries, e.g. for MTP layers, are ignored). NULL if absent. */
static int get_str_list(cfg_ctx *c, const char *k, int n, json_t **out) {
    json_t *v = json_object_get(c->obj, k);
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_array(v)) return nf_fail("config.json: field %s%s must be a list", c->prefix, k);
    if ((int)json_array_size(v) < n)
        return nf_fail("config.json: %s%s has %zu entries, num_hidden_layers is %d", c->prefix, k, json_array_size(v), n);
    for (int i = 0; i < n; i++)
        if (!json_is_string(json_array_get(v, (size_t)i)))
            return nf_fail("config.json: %s%s[%d] is not a string", c->prefix, k, i);
    *out = v;
    return 0;
}

static int token_id(cfg_ctx *c, const char *k, int32_t def, int32_t *out) {
    int64_t x;
    json_t *v = json_object_get(c->obj, k);
    if (json_is_array(v)) {
        if (json_array_size(v) == 0) {
            *out = -1;
            return 0;
        }
        v = json_array_get(v, 0);
        if (!json_is_integer(v)) return nf_fail("config.json: %s%s[0] must be an integer", c->prefix, k);
        x = json_integer_value(v);
    } else {
        if (get_int(c, k, false, def, &x) < 0) return -1;
    }
    if (x < -1 || x > INT32_MAX) return nf_fail("config.json: %s%s = %lld is not a token id", c->prefix, k, (long long)x);
    *out = (int32_t)x;
    return 0;
}

static int parse_quant(json_t *q, nf_hf_config *out) {
    if (!json_is_object(q)) return nf_fail("config.json: quantization_config must be an object");
    json_t *m = json_object_get(q, "quant_method");
    if (!json_is_string(m) || strcmp(json_string_value(m), "fp8"))
        return nf_fail("config.json: quantization_config.quant_method = %s: only \"fp8\" (block-scaled E4M3) is supported",
                       json_is_string(m) ? json_string_value(m) : "(missing)");
    json_t *fmt = json_object_get(q, "fmt");
    if (fmt && !json_is_null(fmt) && (!json_is_string(fmt) || strcmp(json_string_value(fmt), "e4m3")))
        return nf_fail("config.json: quantization_config.fmt = %s: only \"e4m3\" is supported",
                       json_is_string(fmt) ? json_string_value(fmt) : "(not a string)");
    json_t *bs = json_object_get(q, "weight_block_size");
    if (!json_is_array(bs) || json_array_size(bs) != 2 || !json_is_integer(json_array_get(bs, 0)) ||
        !json_is_integer(json_array_get(bs, 1)))
        return nf_fail("config.json: quantization_config.weight_block_size must be [128, 128] (per-tensor or "
                       "per-channel FP8 scales are not supported)");
    int64_t r = json_integer_value(json_array_get(bs, 0)), cc = json_integer_value(json_array_get(bs, 1));
    if (r != 128 || cc != 128)
        return nf_fail("config.json: quantization_config.weight_block_size = [%lld, %lld]: only [128, 128] is supported",
                       (long long)r, (long long)cc);
    out->fp8 = true;
    out->fp8_block[0] = r;
    out->fp8_block[1] = cc;
    return 0;
}

static int parse(json_t *root, nf_hf_config *out) {
    memset(out, 0, sizeof *out);
    if (!json_is_object(root)) return nf_fail("config.json: not a JSON object");
    const char *mt = json_string_value(json_object_get(root, "model_type"));
    if (!mt) return nf_fail("config.json: field model_type is missing");
    if (strcmp(mt, "glm5_next") && strcmp(mt, "glm5_next_text"))
        return nf_fail("config.json: model_type = \"%s\": expected \"glm5_next\" or \"glm5_next_text\"", mt);
    snprintf(out->model_type, sizeof out->model_type, "%s", mt);

    cfg_ctx c = {root, "", out->defaulted};
    json_t *tc = json_object_get(root, "text_config");
    if (tc && !json_is_null(tc)) {
        if (!json_is_object(tc)) return nf_fail("config.json: text_config must be an object");
        const char *tmt = json_string_value(json_object_get(tc, "model_type"));
        if (tmt && strcmp(tmt, "glm5_next_text"))
            return nf_fail("config.json: text_config.model_type = \"%s\": expected \"glm5_next_text\"", tmt);
        c.obj = tc;
        c.prefix = "text_config.";
    }

    /* quantization_config lives at the top level in the release; accept it inside text_config too. */
    json_t *q = json_object_get(root, "quantization_config");
    if (!q || json_is_null(q)) q = json_object_get(c.obj, "quantization_config");
    if (q && !json_is_null(q) && parse_quant(q, out) < 0) return -1;

    nf_hparams *hp = &out->hp;
    snprintf(hp->arch, sizeof hp->arch, "glm5-next");
    int64_t x;
    double d;
    bool b;
    const char *s;

    /* ---- core dimensions (required) ---- */
    if (get_dim(&c, "num_hidden_layers", true, 0, &hp->n_layer) < 0) return -1;
    if (hp->n_layer > NF_MAX_LAYERS)
        return nf_fail("config.json: %snum_hidden_layers = %d exceeds the supported %d", c.prefix, hp->n_layer, NF_MAX_LAYERS);
    if (get_dim(&c, "hidden_size", true, 0, &hp->n_embd) < 0) return -1;
    if (get_dim(&c, "vocab_size", true, 0, &hp->n_vocab) < 0) return -1;
    if (get_dim(&c, "num_attention_heads", true, 0, &hp->n_head) < 0) return -1;
    if (get_dim(&c, "intermediate_size", true, 0, &hp->n_ff) < 0) return -1;
    if (get_dim(&c, "moe_intermediate_size", true, 0, &hp->n_ff_exp) < 0) return -1;
    if (get_dim(&c, "kv_lora_rank", true, 0, &hp->kv_lora_rank) < 0) return -1;
    if (get_dim(&c, "q_lora_rank", true, 0, &hp->q_lora_rank) < 0) return -1;
    if (get_dim(&c, "qk_nope_head_dim", true, 0, &hp->qk_nope_dim) < 0) return -1;
    if (get_dim(&c, "v_head_dim", true, 0, &hp->v_head_dim) < 0) return -1;
    /* n_routed_experts (attribute_map: num_local_experts) */
    if (json_object_get(c.obj, "n_routed_experts")) {
        if (get_dim(&c, "n_routed_experts", true, 0, &hp->n_expert) < 0) return -1;
    } else if (get_dim(&c, "num_local_experts", true, 0, &hp->n_expert) < 0)
        return nf_fail("config.json: required field %sn_routed_experts is missing", c.prefix);
    if (get_dim(&c, "num_experts_per_tok", true, 0, &hp->n_expert_used) < 0) return -1;
    if (hp->n_expert_used > hp->n_expert)
        return nf_fail("config.json: %snum_experts_per_tok = %d exceeds n_routed_experts = %d", c.prefix,
                       hp->n_expert_used, hp->n_expert);

    /* ---- fields with HF defaults ---- */
    if (get_int(&c, "qk_rope_head_dim", false, 0, &x) < 0) return -1;
    if (x != 0)
        return nf_fail("config.json: %sqk_rope_head_dim = %lld: only 0 (NoPE MLA) is supported", c.prefix, (long long)x);
    if (get_int(&c, "num_key_value_heads", false, hp->n_head, &x) < 0) return -1;
    if (x != hp->n_head)
        return nf_fail("config.json: %snum_key_value_heads = %lld must equal num_attention_heads = %d", c.prefix,
                       (long long)x, hp->n_head);
    if (get_bool(&c, "attention_bias", false, &b) < 0) return -1;
    if (b) return nf_fail("config.json: %sattention_bias = true is not supported", c.prefix);
    if (get_bool(&c, "mla_use_nope", true, &b) < 0) return -1;
    if (!b) return nf_fail("config.json: %smla_use_nope = false is not supported", c.prefix);
    if (get_str(&c, "hidden_act", &s) < 0) return -1;
    if (s && strcmp(s, "silu"))
        return nf_fail("config.json: %shidden_act = \"%s\": only \"silu\" is supported", c.prefix, s);

    if (get_int(&c, "max_position_embeddings", false, 1048576, &x) < 0) return -1;
    if (x <= 0 || x > INT32_MAX)
        return nf_fail("config.json: %smax_position_embeddings = %lld is out of range", c.prefix, (long long)x);
    hp->n_ctx_train = (int)x;
    if (get_float(&c, "rms_norm_eps", 1e-5, &d) < 0) return -1;
    if (d <= 0) return nf_fail("config.json: %srms_norm_eps must be positive", c.prefix);
    hp->rms_eps = (float)d;
    hp->indexer_ln_eps = 1e-6f; /* hard-coded in HF's indexer (nn.LayerNorm(eps=1e-6)) */

    /* KDA: flat linear_* fields, then a linear_attn_config dict overrides (HF __post_init__). */
    int64_t kda_hd, kda_nh, kda_k;
    double lb = -5.0;
    bool lb_set = true;
    if (get_int(&c, "linear_head_dim", false, 128, &kda_hd) < 0) return -1;
    if (get_int(&c, "linear_num_heads", false, 64, &kda_nh) < 0) return -1;
    if (get_int(&c, "linear_conv_kernel_dim", false, 4, &kda_k) < 0) return -1;
    json_t *jlb = json_object_get(c.obj, "linear_lower_bound");
    if (jlb && json_is_null(jlb)) lb_set = false;
    else if (get_float(&c, "linear_lower_bound", -5.0, &lb) < 0) return -1;
    json_t *lac = json_object_get(c.obj, "linear_attn_config");
    if (lac && !json_is_null(lac)) {
        if (!json_is_object(lac)) return nf_fail("config.json: %slinear_attn_config must be an object", c.prefix);
        cfg_ctx lc = {lac, "linear_attn_config.", out->defaulted};
        char pfx[64];
        snprintf(pfx, sizeof pfx, "%slinear_attn_config.", c.prefix);
        lc.prefix = pfx;
        if (get_int(&lc, "head_dim", false, kda_hd, &kda_hd) < 0) return -1;
        if (get_int(&lc, "num_heads", false, kda_nh, &kda_nh) < 0) return -1;
        if (get_int(&lc, "short_conv_kernel_size", false, kda_k, &kda_k) < 0) return -1;
        json_t *g = json_object_get(lac, "gate_lower_bound");
        if (g && !json_is_null(g)) {
            if (get_float(&lc, "gate_lower_bound", lb, &lb) < 0) return -1;
            lb_set = true;
        }
        bool safe;
        if (get_bool(&lc, "safe_gate", true, &safe) < 0) return -1;
        if (safe && !lb_set) {
            lb = -5.0;
            lb_set = true;
        }
    }
    if (!lb_set)
        return nf_fail("config.json: %slinear_lower_bound is null: the unbounded (softplus) KDA gate is not supported",
                       c.prefix);
    if (!(lb < 0)) return nf_fail("config.json: %slinear_lower_bound = %g must be negative", c.prefix, lb);
    if (kda_hd <= 0 || kda_nh <= 0 || kda_k <= 0 || kda_hd > 65536 || kda_nh > 65536 || kda_k > 64)
        return nf_fail("config.json: %slinear_head_dim/linear_num_heads/linear_conv_kernel_dim out of range", c.prefix);
    hp->kda_head_dim = (int)kda_hd;
    hp->kda_n_head = (int)kda_nh;
    hp->kda_conv = (int)kda_k;
    hp->kda_gate_lower_bound = (float)lb;
    hp->kda_gate_rank = (int)kda_hd; /* f_a_proj: hidden -> linear_head_dim */

    /* DSA indexer */
    if (get_dim(&c, "index_n_heads", false, 32, &hp->idx_n_head) < 0) return -1;
    if (get_dim(&c, "index_head_dim", false, 128, &hp->idx_head_dim) < 0) return -1;
    if (get_dim(&c, "index_topk", false, 2048, &hp->idx_topk) < 0) return -1;
    if (!json_object_get(c.obj, "index_kpool")) note_default(&c, "index_kpool=16");
    if (get_int(&c, "index_kpool", false, 16, &x) < 0) return -1;
    if (x < 1 || x > 4096) return nf_fail("config.json: %sindex_kpool = %lld must be >= 1", c.prefix, (long long)x);
    hp->idx_kpool = (int)x;
    if (hp->idx_topk % hp->idx_kpool)
        return nf_fail("config.json: %sindex_topk = %d is not divisible by index_kpool = %d", c.prefix, hp->idx_topk,
                       hp->idx_kpool);
    if (get_bool(&c, "index_kpool_always_select_tail", true, &hp->idx_select_tail) < 0) return -1;
    if (get_bool(&c, "index_kpool_compress", true, &b) < 0) return -1;
    if (!b) return nf_fail("config.json: %sindex_kpool_compress = false is not supported (HF always compresses)", c.prefix);
    if (get_int(&c, "qk_head_dim", false, hp->qk_nope_dim, &x) < 0) return -1;
    if (x != hp->qk_nope_dim)
        return nf_fail("config.json: %sqk_head_dim = %lld must equal qk_nope_head_dim + qk_rope_head_dim = %d", c.prefix,
                       (long long)x, hp->qk_nope_dim);

    /* MoE */
    if (get_dim(&c, "n_shared_experts", false, 1, &hp->n_expert_shared) < 0) return -1;
    if (get_float(&c, "routed_scaling_factor", 2.5, &d) < 0) return -1;
    hp->expert_weights_scale = (float)d;
    if (get_bool(&c, "norm_topk_prob", true, &hp->expert_weights_norm) < 0) return -1;
    json_t *sl = json_object_get(c.obj, "swiglu_limit");
    if (sl && json_is_null(sl)) hp->swiglu_limit = 0;
    else {
        if (get_float(&c, "swiglu_limit", 10.0, &d) < 0) return -1;
        if (d < 0) return nf_fail("config.json: %sswiglu_limit = %g must be >= 0", c.prefix, d);
        hp->swiglu_limit = (float)d;
    }
    if (get_str(&c, "scoring_func", &s) < 0) return -1;
    if (s && strcmp(s, "sigmoid"))
        return nf_fail("config.json: %sscoring_func = \"%s\": only \"sigmoid\" routing is supported", c.prefix, s);
    if (get_str(&c, "topk_method", &s) < 0) return -1;
    if (s && strcmp(s, "noaux_tc"))
        return nf_fail("config.json: %stopk_method = \"%s\": only \"noaux_tc\" is supported", c.prefix, s);
    int64_t ng, tg;
    if (get_int(&c, "n_group", false, 1, &ng) < 0 || get_int(&c, "topk_group", false, 1, &tg) < 0) return -1;
    if (ng < 1 || tg < 1 || tg > ng || hp->n_expert % ng)
        return nf_fail("config.json: %sn_group = %lld / topk_group = %lld are inconsistent", c.prefix, (long long)ng,
                       (long long)tg);
    if (tg != ng)
        return nf_fail("config.json: %stopk_group = %lld < n_group = %lld: group-limited routing is not supported", c.prefix,
                       (long long)tg, (long long)ng);

    /* hyper-connections */
    if (get_int(&c, "hc_mult", false, 4, &x) < 0) return -1;
    if (x != 4) return nf_fail("config.json: %shc_mult = %lld: only 4 residual streams are supported", c.prefix, (long long)x);
    hp->hc_count = 4;
    if (get_dim(&c, "hc_sinkhorn_iters", false, 20, &hp->hc_sinkhorn_iters) < 0) return -1;
    if (get_float(&c, "hc_eps", 1e-6, &d) < 0) return -1;
    hp->hc_eps = (float)d;
    if (get_bool(&c, "mhc", true, &b) < 0) return -1;
    if (!b) return nf_fail("config.json: %smhc = false is not supported", c.prefix);

    /* per-layer schedules */
    int n = hp->n_layer;
    json_t *lt, *mlt, *it;
    if (get_str_list(&c, "layer_types", n, &lt) < 0) return -1;
    for (int i = 0; i < n; i++) {
        const char *t = lt ? json_string_value(json_array_get(lt, (size_t)i)) : (i % 4 != 3 ? "linear_attention" : "indexed_attention");
        if (!strcmp(t, "linear_attention")) hp->layer_kind[i] = NF_LAYER_KDA;
        else if (!strcmp(t, "indexed_attention") || !strcmp(t, "deepseek_sparse_attention") || !strcmp(t, "full_attention"))
            hp->layer_kind[i] = NF_LAYER_MLA;
        else
            return nf_fail("config.json: %slayer_types[%d] = \"%s\": expected \"linear_attention\" or "
                           "\"indexed_attention\"", c.prefix, i, t);
    }
    if (get_str_list(&c, "mlp_layer_types", n, &mlt) < 0) return -1;
    hp->n_dense_lead = 0;
    bool seen_sparse = false;
    for (int i = 0; i < n; i++) {
        const char *t = mlt ? json_string_value(json_array_get(mlt, (size_t)i)) : (i < 3 ? "dense" : "sparse");
        if (!strcmp(t, "dense")) {
            if (seen_sparse)
                return nf_fail("config.json: %smlp_layer_types[%d] = \"dense\" after a sparse layer: only leading dense "
                               "layers can be expressed (leading_dense_block_count)", c.prefix, i);
            hp->layer_moe[i] = 0;
            hp->n_dense_lead++;
        } else if (!strcmp(t, "sparse")) {
            hp->layer_moe[i] = 1;
            seen_sparse = true;
        } else
            return nf_fail("config.json: %smlp_layer_types[%d] = \"%s\": expected \"dense\" or \"sparse\"", c.prefix, i, t);
    }
    if (get_str_list(&c, "indexer_types", n, &it) < 0) return -1;
    json_t *pat = json_object_get(c.obj, "index_topk_pattern");
    int64_t freq = 1, off = 2;
    if (!it) {
        if (get_int(&c, "index_topk_freq", false, 1, &freq) < 0 || get_int(&c, "index_skip_topk_offset", false, 2, &off) < 0)
            return -1;
        if (freq < 1) freq = 1;
        if (pat && !json_is_null(pat)) {
            if (json_is_string(pat)) {
                if ((int)strlen(json_string_value(pat)) < n)
                    return nf_fail("config.json: %sindex_topk_pattern is shorter than num_hidden_layers", c.prefix);
            } else if (!json_is_array(pat) || (int)json_array_size(pat) < n)
                return nf_fail("config.json: %sindex_topk_pattern must be a string or list of num_hidden_layers entries",
                               c.prefix);
        }
    }
    for (int i = 0; i < n; i++) {
        const char *t;
        char one[2] = {0, 0};
        if (it) t = json_string_value(json_array_get(it, (size_t)i));
        else if (pat && json_is_string(pat)) {
            one[0] = json_string_value(pat)[i];
            t = one[0] == 'F' ? "full" : one[0] == 'S' ? "shared" : one;
        } else if (pat && json_is_array(pat)) {
            t = json_string_value(json_array_get(pat, (size_t)i));
            if (!t) return nf_fail("config.json: %sindex_topk_pattern[%d] is not a string", c.prefix, i);
        } else {
            int64_t m = i - off + 1;
            t = ((m > 0 ? m : 0) % freq) == 0 ? "full" : "shared";
        }
        if (!strcmp(t, "full")) hp->indexer_shared[i] = 0;
        else if (!strcmp(t, "shared")) hp->indexer_shared[i] = 1;
        else
            return nf_fail("config.json: %sindexer_types[%d] = \"%s\": expected \"full\" or \"shared\"", c.prefix, i, t);
        if (hp->layer_kind[i] != NF_LAYER_MLA) hp->indexer_shared[i] = 0; /* unused for KDA layers */
    }

    /* MTP blocks are not converted yet: remember how many the file declares. */
    if (get_int(&c, "num_nextn_predict_layers", false, 0, &x) < 0) return -1;
    if (x < 0 || x > 16) return nf_fail("config.json: %snum_nextn_predict_layers = %lld is out of range", c.prefix, (long long)x);
    out->n_mtp_config = (int)x;
    hp->n_nextn = 0;
    hp->n_layer_total = hp->n_layer;

    /* tokens */
    /* Token ids: text level first, then the top level (multimodal configs may carry them there). */
    cfg_ctx top = {root, "", out->defaulted};
    cfg_ctx *bc = json_object_get(c.obj, "bos_token_id") || !json_object_get(root, "bos_token_id") ? &c : &top;
    cfg_ctx *pc = json_object_get(c.obj, "pad_token_id") || !json_object_get(root, "pad_token_id") ? &c : &top;
    if (token_id(bc, "bos_token_id", -1, &hp->bos_id) < 0) return -1;
    if (token_id(pc, "pad_token_id", 154820, &hp->pad_id) < 0) return -1;
    hp->eos_id = -1;
    json_t *eos = json_object_get(c.obj, "eos_token_id");
    if (!eos || json_is_null(eos)) eos = json_object_get(root, "eos_token_id");
    if (json_is_integer(eos)) {
        out->eos_ids[out->n_eos++] = (int32_t)json_integer_value(eos);
    } else if (json_is_array(eos)) {
        for (size_t i = 0; i < json_array_size(eos) && out->n_eos < NF_HF_MAX_EOS; i++) {
            json_t *e = json_array_get(eos, i);
            if (!json_is_integer(e)) return nf_fail("config.json: eos_token_id[%zu] must be an integer", i);
            out->eos_ids[out->n_eos++] = (int32_t)json_integer_value(e);
        }
    } else if (eos && !json_is_null(eos))
        return nf_fail("config.json: eos_token_id must be an integer or a list of integers");
    for (int i = 0; i < out->n_eos; i++)
        if (out->eos_ids[i] < 0) return nf_fail("config.json: eos_token_id contains a negative id");
    if (out->n_eos) hp->eos_id = out->eos_ids[0];
    int32_t ids[3] = {hp->bos_id, hp->pad_id, hp->eos_id};
    static const char *const id_names[3] = {"bos_token_id", "pad_token_id", "eos_token_id"};
    for (int i = 0; i < 3; i++)
        if (ids[i] >= hp->n_vocab)
            return nf_fail("config.json: %s%s = %d is outside the vocabulary (vocab_size %d)%s", c.prefix, id_names[i],
                           ids[i], hp->n_vocab, i == 1 && !json_object_get(pc->obj, "pad_token_id") ? " (HF default)" : "");

    /* tie_word_embeddings: top level (multimodal) or text level. */
    bool tie_top = false;
    cfg_ctx rc = {root, "", out->defaulted};
    if (get_bool(&rc, "tie_word_embeddings", false, &tie_top) < 0) return -1;
    if (get_bool(&c, "tie_word_embeddings", tie_top, &out->tie_embeddings) < 0) return -1;
    return 0;
}

int nf_hf_config_parse(const char *text, size_t len, nf_hf_config *out) {
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return nf_fail("config.json: bad JSON at line %d: %s", jerr.line, jerr.text);
    int r = parse(root, out);
    json_decref(root);
    return r;
}

int nf_hf_config_load(const char *path, nf_hf_config *out) {
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return nf_fail("%s: %s (line %d)", path, jerr.text, jerr.line);
    int r = parse(root, out);
    json_decref(root);
    return r;
}
