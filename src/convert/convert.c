/* convert.c — HF glm5_next checkpoint → GGUF (see convert.h).
 *
 * Three phases. Plan: read config.json into nf_hparams, list the target tensors with nf_layout_tensors, and for
 * each find its HF source tensor(s), check shapes and readability, and pick the recipe's storage type; every
 * problem is collected and reported at once, before any byte is written. Declare: metadata (layout hparams,
 * tokenizer) and the tensor table go to the streaming writer. Stream: for each tensor, read + dequantize the
 * source to f32, apply the transform, quantize (row ranges split across threads) and write.
 *
 * HF → GGUF mapping (HF name after the `model.language_model.` prefix; both the on-disk checkpoint names and
 * transformers' module names are accepted, e.g. per-expert `mlp.experts.E.gate_proj.weight` or fused
 * `mlp.experts.gate_up_proj`, separate `q_conv1d/k_conv1d/v_conv1d` or fused `conv1d`). A PyTorch shape
 * [a, b, c] is the ggml shape {c, b, a}, so plain copies need no data movement; the transforms are:
 *   conv1d [3*inner, 1, K]          → ssm_conv1d_{q,k,v} {K, 1, inner}: rows [i*inner, (i+1)*inner)
 *   A_log [H]                       → ssm_a = -exp(A_log)
 *   kv_b_proj [n_head*(nope+v), kv] → attn_k_b {nope, kv, n_head}: k_b[h][c][d] = kv_b[h*(nope+v) + d][c]
 *                                     (per head Kb[h]^T, so the absorbed query is k_b·q_h)
 *                                   → attn_v_b {kv, v, n_head}:   v_b[h][j][c] = kv_b[h*(nope+v) + nope + j][c]
 *   experts.gate_up_proj [E, 2I, H] → ffn_gate_exps {H, I, E} (rows [0, I) of each expert), ffn_up_exps (rows [I, 2I))
 *   experts.E.{gate,up,down}_proj   → stacked along the outermost dimension
 *   F8_E4M3 + weight_scale_inv      → value x scale[row/128][col/128]
 *   nextn.{eh_proj,enorm,hnorm,shared_head_norm} ← layers.L.{eh_proj,enorm,hnorm,shared_head.norm} (MTP, --mtp)
 * MTP layers (index >= num_hidden_layers; unless opts.mtp) and the vision tower are skipped and counted. */
#include "convert/convert.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "convert/hf_config.h"
#include "convert/safetensors.h"
#include "formats/formats.h"
#include "formats/quantize_rows.h"
#include "gguf/gguf.h"
#include "model/layout.h"
#include "model/recipe.h"
#include "text/hf_tokenizer.h"
#include "util/error.h"

typedef enum { X_COPY, X_NEG_EXP, X_SLICE, X_KB, X_VB, X_EXP_SPLIT, X_EXP_FUSED } xkind;

typedef struct {
    const nf_layout_tensor *lt;
    uint32_t type;
    bool fell_back;
    xkind x;
    const st_tensor *src;        /* all but X_EXP_SPLIT */
    const st_tensor **experts;   /* X_EXP_SPLIT: n_expert sources */
    int64_t off;                 /* X_SLICE: first element; X_EXP_FUSED: first element inside an expert */
    int64_t stride;              /* X_EXP_FUSED: source elements per expert */
    char label[40];              /* transform, for the summary */
    char src_desc[40];
    uint64_t src_bytes, out_bytes;
} plan_t;

typedef struct {
    const nf_convert_opts *o;
    FILE *log;
    nf_hf_config cfg;
    st_checkpoint *ck;
    bool *used;                  /* per st_at index */
    char errs[1024];
    int n_err;
    /* progress */
    uint64_t total_in, done_in;
    double t0, last_print;
    bool tty;
    int n_threads;
} conv_ctx;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void add_err(conv_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_err(conv_ctx *c, const char *fmt, ...) {
    c->n_err++;
    size_t n = strlen(c->errs);
    if (c->n_err > 8 || n + 8 >= sizeof c->errs) return;
    if (n) c->errs[n++] = '\n';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errs + n, sizeof c->errs - n, fmt, ap);
    va_end(ap);
}

static int64_t st_index_of(const st_checkpoint *ck, const st_tensor *t) {
    int64_t lo = 0, hi = st_count(ck) - 1;
    while (lo <= hi) {
        int64_t mid = (lo + hi) / 2;
        int r = strcmp(st_at(ck, mid)->name, t->name);
        if (!r) return mid;
        if (r < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

static void mark_used(conv_ctx *c, const st_tensor *t) {
    int64_t i = st_index_of(c->ck, t);
    if (i >= 0) c->used[i] = true;
    if (t->dtype == ST_F8_E4M3) {
        char buf[4200];
        snprintf(buf, sizeof buf, "%s_scale_inv", t->name);
        const st_tensor *s = st_find(c->ck, buf);
        if (s && (i = st_index_of(c->ck, s)) >= 0) c->used[i] = true;
    }
}

static const char *const prefixes[] = {"model.language_model.", "model.", "language_model.model.", ""};

/* The source named `rel` (relative to the text model; "layers.3.x" or "embed_tokens.weight"). */
static const st_tensor *lookup(conv_ctx *c, const char *rel) {
    char buf[512];
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        snprintf(buf, sizeof buf, "%s%s", prefixes[i], rel);
        const st_tensor *t = st_find(c->ck, buf);
        if (t) return t;
    }
    return NULL;
}

/* First existing candidate among NULL-terminated names (each a printf pattern taking the layer). */
static const st_tensor *find_src(conv_ctx *c, const nf_layout_tensor *lt, const char *const *cands) {
    char rel[256];
    for (int i = 0; cands[i]; i++) {
        if (lt->layer >= 0) {
            char pat[256];
            snprintf(pat, sizeof pat, "layers.%%d.%s", cands[i]);
            snprintf(rel, sizeof rel, pat, lt->layer);
        } else
            snprintf(rel, sizeof rel, "%s", cands[i]);
        const st_tensor *t = lookup(c, rel);
        if (t) return t;
    }
    if (lt->layer >= 0)
        add_err(c, "%s: source tensor model.language_model.layers.%d.%s not found in the checkpoint", lt->name, lt->layer,
                cands[0]);
    else
        add_err(c, "%s: source tensor %s%s not found in the checkpoint", lt->name,
                strcmp(cands[0], "lm_head.weight") ? "model.language_model." : "", cands[0]);
    return NULL;
}

static void fmt_shape_pt(const st_tensor *t, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (uint32_t i = 0; i < t->n_dims && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)t->shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

static void fmt_ne(const int64_t *ne, uint32_t nd, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "{");
    for (uint32_t i = 0; i < nd && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)ne[i]);
    if (k < n) snprintf(buf + k, n - k, "}");
}

/* PyTorch shape reversed equals ne, ignoring size-1 dimensions on both sides. */
static bool shape_matches(const st_tensor *t, const nf_layout_tensor *lt) {
    int64_t a[ST_MAX_DIMS], b[4];
    int na = 0, nb = 0;
    for (int i = (int)t->n_dims - 1; i >= 0; i--)
        if (t->shape[i] != 1) a[na++] = t->shape[i];
    for (uint32_t i = 0; i < lt->n_dims; i++)
        if (lt->ne[i] != 1) b[nb++] = lt->ne[i];
    if (na != nb) return false;
    for (int i = 0; i < na; i++)
        if (a[i] != b[i]) return false;
    return true;
}

static bool check_src(conv_ctx *c, const nf_layout_tensor *lt, const st_tensor *t, int n_dims, const int64_t *want,
                      const char *what) {
    bool ok = (int)t->n_dims == n_dims;
    for (int i = 0; ok && i < n_dims; i++) ok = t->shape[i] == want[i];
    if (!ok) {
        char got[96], exp[96] = "[";
        fmt_shape_pt(t, got, sizeof got);
        for (int i = 0; i < n_dims; i++)
            snprintf(exp + strlen(exp), sizeof exp - strlen(exp), "%s%lld", i ? "," : "", (long long)want[i]);
        snprintf(exp + strlen(exp), sizeof exp - strlen(exp), "]");
        add_err(c, "%s: source %s has shape %s, expected %s (%s)", lt->name, t->name, got, exp, what);
        return false;
    }
    if (st_check_readable(c->ck, t) < 0) {
        add_err(c, "%s: %s", lt->name, nf_error());
        return false;
    }
    mark_used(c, t);
    return true;
}

static bool check_copy(conv_ctx *c, const nf_layout_tensor *lt, const st_tensor *t) {
    if (!shape_matches(t, lt)) {
        char got[96], exp[96];
        fmt_shape_pt(t, got, sizeof got);
        fmt_ne(lt->ne, lt->n_dims, exp, sizeof exp);
        add_err(c, "%s: source %s has shape %s (ggml order reversed), expected ggml %s from config.json", lt->name,
                t->name, got, exp);
        return false;
    }
    if (st_check_readable(c->ck, t) < 0) {
        add_err(c, "%s: %s", lt->name, nf_error());
        return false;
    }
    mark_used(c, t);
    return true;
}

#define CANDS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Plain one-to-one tensors: GGUF suffix after "blk.N." → HF candidates. */
static const struct {
    const char *gguf;
    const char *const hf[3];
} copy_map[] = {
    {"attn_norm.weight", {"input_layernorm.weight"}},
    {"ffn_norm.weight", {"post_attention_layernorm.weight"}},
    {"hc_attn_fn.weight", {"hc_attn_fn", "attn_hc.fn"}},
    {"hc_attn_base.weight", {"hc_attn_base", "attn_hc.base"}},
    {"hc_attn_scale.weight", {"hc_attn_scale", "attn_hc.scale"}},
    {"hc_ffn_fn.weight", {"hc_ffn_fn", "ffn_hc.fn"}},
    {"hc_ffn_base.weight", {"hc_ffn_base", "ffn_hc.base"}},
    {"hc_ffn_scale.weight", {"hc_ffn_scale", "ffn_hc.scale"}},
    /* KDA */
    {"attn_q.weight", {"self_attn.q_proj.weight"}},
    {"attn_k.weight", {"self_attn.k_proj.weight"}},
    {"attn_v.weight", {"self_attn.v_proj.weight"}},
    {"ssm_f_a.weight", {"self_attn.f_a_proj.weight", "self_attn.forget_gate.f_a_proj.weight"}},
    {"ssm_f_b.weight", {"self_attn.f_b_proj.weight", "self_attn.forget_gate.f_b_proj.weight"}},
    {"ssm_dt.bias", {"self_attn.dt_bias", "self_attn.forget_gate.dt_bias"}},
    {"ssm_beta.weight", {"self_attn.b_proj.weight"}},
    {"ssm_g_a.weight", {"self_attn.g_a_proj.weight"}},
    {"ssm_g_b.weight", {"self_attn.g_b_proj.weight"}},
    {"ssm_norm.weight", {"self_attn.o_norm.weight"}},
    {"attn_output.weight", {"self_attn.o_proj.weight"}},
    /* MLA */
    {"attn_q_a.weight", {"self_attn.q_a_proj.weight"}},
    {"attn_q_a_norm.weight", {"self_attn.q_a_layernorm.weight"}},
    {"attn_q_b.weight", {"self_attn.q_b_proj.weight"}},
    {"attn_kv_a_mqa.weight", {"self_attn.kv_a_proj_with_mqa.weight"}},
    {"attn_kv_a_norm.weight", {"self_attn.kv_a_layernorm.weight"}},
    {"indexer.attn_q_b.weight", {"self_attn.indexer.wq_b.weight"}},
    {"indexer.attn_k.weight", {"self_attn.indexer.wk.weight"}},
    {"indexer.k_norm.weight", {"self_attn.indexer.k_norm.weight"}},
    {"indexer.k_norm.bias", {"self_attn.indexer.k_norm.bias"}},
    {"indexer.proj.weight", {"self_attn.indexer.weights_proj.weight"}},
    {"indexer_compressor_gate.weight", {"self_attn.indexer.index_kpool_compress_gate"}},
    {"indexer_compressor_ape.weight", {"self_attn.indexer.index_kpool_compress_ape"}},
    /* FFN */
    {"ffn_gate.weight", {"mlp.gate_proj.weight"}},
    {"ffn_up.weight", {"mlp.up_proj.weight"}},
    {"ffn_down.weight", {"mlp.down_proj.weight"}},
    {"ffn_gate_inp.weight", {"mlp.gate.weight"}},
    {"exp_probs_b.bias", {"mlp.gate.e_score_correction_bias"}},
    {"ffn_gate_shexp.weight", {"mlp.shared_experts.gate_proj.weight"}},
    {"ffn_up_shexp.weight", {"mlp.shared_experts.up_proj.weight"}},
    {"ffn_down_shexp.weight", {"mlp.shared_experts.down_proj.weight"}},
    /* MTP / NextN block */
    {"nextn.eh_proj.weight", {"eh_proj.weight"}},
    {"nextn.enorm.weight", {"enorm.weight"}},
    {"nextn.hnorm.weight", {"hnorm.weight"}},
    {"nextn.shared_head_norm.weight", {"shared_head.norm.weight"}},
};

static void plan_experts(conv_ctx *c, plan_t *p, int part /* 0 gate, 1 up, 2 down */) {
    const nf_hparams *hp = &c->cfg.hp;
    const nf_layout_tensor *lt = p->lt;
    int64_t E = hp->n_expert, I = hp->n_ff_exp, H = hp->n_embd;
    static const char *const names[3] = {"gate_proj", "up_proj", "down_proj"};
    char rel[256];
    snprintf(rel, sizeof rel, "layers.%d.mlp.experts.0.%s.weight", lt->layer, names[part]);
    if (lookup(c, rel)) {
        p->x = X_EXP_SPLIT;
        p->experts = nf_xcalloc((size_t)E, sizeof *p->experts);
        int64_t want[2] = {part == 2 ? H : I, part == 2 ? I : H};
        for (int64_t e = 0; e < E; e++) {
            snprintf(rel, sizeof rel, "layers.%d.mlp.experts.%lld.%s.weight", lt->layer, (long long)e, names[part]);
            const st_tensor *t = lookup(c, rel);
            if (!t) {
                add_err(c, "%s: source tensor model.language_model.%s not found in the checkpoint", lt->name, rel);
                return;
            }
            if (!check_src(c, lt, t, 2, want, part == 2 ? "[hidden, moe_intermediate]" : "[moe_intermediate, hidden]"))
                return;
            p->experts[e] = t;
            p->src_bytes += t->end - t->begin;
        }
        snprintf(p->label, sizeof p->label, "stack %lld experts", (long long)E);
        snprintf(p->src_desc, sizeof p->src_desc, "%s", st_source_desc(c->ck, p->experts[0]));
        return;
    }
    snprintf(rel, sizeof rel, "layers.%d.mlp.experts.%s", lt->layer, part == 2 ? "down_proj" : "gate_up_proj");
    const st_tensor *t = lookup(c, rel);
    if (!t) {
        char r2[300];
        snprintf(r2, sizeof r2, "%s.weight", rel);
        t = lookup(c, r2);
    }
    if (!t) {
        add_err(c, "%s: neither model.language_model.layers.%d.mlp.experts.0.%s.weight nor ...%s found in the "
                   "checkpoint", lt->name, lt->layer, names[part], rel);
        return;
    }
    int64_t want[3] = {E, part == 2 ? H : 2 * I, part == 2 ? I : H};
    if (!check_src(c, lt, t, 3, want, part == 2 ? "[experts, hidden, moe_intermediate]" : "[experts, 2*moe_intermediate, hidden]"))
        return;
    p->x = X_EXP_FUSED;
    p->src = t;
    p->stride = want[1] * want[2];
    p->off = part == 1 ? I * H : 0;
    p->src_bytes = part == 2 ? t->end - t->begin : (t->end - t->begin) / 2;
    snprintf(p->label, sizeof p->label, part == 2 ? "copy" : part == 0 ? "gate_up[:, :I]" : "gate_up[:, I:]");
    snprintf(p->src_desc, sizeof p->src_desc, "%s", st_source_desc(c->ck, t));
}

static void plan_one(conv_ctx *c, plan_t *p) {
    const nf_hparams *hp = &c->cfg.hp;
    const nf_layout_tensor *lt = p->lt;
    const st_tensor *t = NULL;
    p->x = X_COPY;
    snprintf(p->label, sizeof p->label, "copy");

    if (lt->layer < 0) {
        if (!strcmp(lt->name, "token_embd.weight")) t = find_src(c, lt, CANDS("embed_tokens.weight"));
        else if (!strcmp(lt->name, "output_norm.weight")) t = find_src(c, lt, CANDS("norm.weight"));
        else if (!strcmp(lt->name, "output.weight")) {
            t = st_find(c->ck, "lm_head.weight");
            if (!t) t = st_find(c->ck, "language_model.lm_head.weight");
            if (!t && c->cfg.tie_embeddings) {
                t = lookup(c, "embed_tokens.weight");
                if (t) snprintf(p->label, sizeof p->label, "tied: embed_tokens");
            }
            if (!t) add_err(c, "%s: source tensor lm_head.weight not found in the checkpoint", lt->name);
        } else
            add_err(c, "%s: no HF source known for this tensor", lt->name);
        if (t && check_copy(c, lt, t)) goto done;
        return;
    }

    const char *sfx = strchr(lt->name + 4, '.') + 1; /* after "blk.N." */
    for (size_t i = 0; i < sizeof copy_map / sizeof copy_map[0]; i++) {
        if (strcmp(sfx, copy_map[i].gguf)) continue;
        const char *cands[4] = {copy_map[i].hf[0], copy_map[i].hf[1], copy_map[i].hf[2], NULL};
        t = find_src(c, lt, cands);
        if (t && check_copy(c, lt, t)) goto done;
        return;
    }

    int64_t inner = (int64_t)hp->kda_n_head * hp->kda_head_dim;
    if (!strncmp(sfx, "ssm_conv1d_", 11) && strlen(sfx) == 19 && !strcmp(sfx + 12, ".weight")) {
        int part = sfx[11] == 'q' ? 0 : sfx[11] == 'k' ? 1 : 2;
        char rel[128];
        snprintf(rel, sizeof rel, "layers.%d.self_attn.%c_conv1d.weight", lt->layer, sfx[11]);
        if ((t = lookup(c, rel))) {
            if (check_copy(c, lt, t)) goto done;
            return;
        }
        t = find_src(c, lt, CANDS("self_attn.conv1d.weight"));
        if (!t) return;
        int64_t want[3] = {3 * inner, 1, hp->kda_conv};
        if (t->n_dims == 2) want[1] = hp->kda_conv;
        if (!check_src(c, lt, t, (int)t->n_dims == 2 ? 2 : 3, want, "[3*linear_num_heads*linear_head_dim, 1, conv_kernel]"))
            return;
        p->x = X_SLICE;
        p->off = part * inner * hp->kda_conv;
        snprintf(p->label, sizeof p->label, "conv1d rows %c", sfx[11]);
        p->src = t;
        p->src_bytes = (t->end - t->begin) / 3;
        snprintf(p->src_desc, sizeof p->src_desc, "%s", st_source_desc(c->ck, t));
        return;
    }
    if (!strcmp(sfx, "ssm_a")) {
        t = find_src(c, lt, CANDS("self_attn.A_log", "self_attn.forget_gate.A_log"));
        if (t && check_copy(c, lt, t)) {
            p->x = X_NEG_EXP;
            snprintf(p->label, sizeof p->label, "-exp(A_log)");
            goto done;
        }
        return;
    }
    if (!strcmp(sfx, "attn_k_b.weight") || !strcmp(sfx, "attn_v_b.weight")) {
        t = find_src(c, lt, CANDS("self_attn.kv_b_proj.weight"));
        if (!t) return;
        int64_t want[2] = {(int64_t)hp->n_head * (hp->qk_nope_dim + hp->v_head_dim), hp->kv_lora_rank};
        if (!check_src(c, lt, t, 2, want, "[num_attention_heads*(qk_nope_head_dim+v_head_dim), kv_lora_rank]")) return;
        bool k = sfx[5] == 'k';
        p->x = k ? X_KB : X_VB;
        p->src = t;
        p->src_bytes = (uint64_t)((double)(t->end - t->begin) * (k ? hp->qk_nope_dim : hp->v_head_dim) /
                                  (hp->qk_nope_dim + hp->v_head_dim));
        snprintf(p->label, sizeof p->label, k ? "kv_b k part, transposed" : "kv_b v part");
        snprintf(p->src_desc, sizeof p->src_desc, "%s", st_source_desc(c->ck, t));
        return;
    }
    if (!strcmp(sfx, "ffn_gate_exps.weight")) return plan_experts(c, p, 0);
    if (!strcmp(sfx, "ffn_up_exps.weight")) return plan_experts(c, p, 1);
    if (!strcmp(sfx, "ffn_down_exps.weight")) return plan_experts(c, p, 2);
    add_err(c, "%s: no HF source known for this tensor", lt->name);
    return;
done:
    p->src = t;
    p->src_bytes = t->end - t->begin;
    snprintf(p->src_desc, sizeof p->src_desc, "%s", st_source_desc(c->ck, t));
}

/* Start reading the source(s) of plan entry p (the first expert only for stacks). */
static void prefetch_plan(conv_ctx *c, const plan_t *p) {
    if (p->x == X_EXP_SPLIT) st_prefetch(c->ck, p->experts[0]);
    else if (p->src) st_prefetch(c->ck, p->src);
}

/* ---- progress ---- */

static void fmt_bytes(double b, char *buf, size_t n) {
    if (b >= 1e9) snprintf(buf, n, "%.2f GB", b / 1e9);
    else if (b >= 1e6) snprintf(buf, n, "%.1f MB", b / 1e6);
    else snprintf(buf, n, "%.0f kB", b / 1e3);
}

static void progress(conv_ctx *c, int i, int n, const char *name, bool force) {
    if (c->o->quiet) return;
    double t = now_s();
    if (!force && t - c->last_print < (c->tty ? 0.2 : 10.0)) return;
    c->last_print = t;
    double el = t - c->t0, rate = el > 0 ? (double)c->done_in / el : 0;
    double frac = c->total_in ? (double)c->done_in / (double)c->total_in : 1.0;
    double eta = rate > 0 ? (double)(c->total_in - c->done_in) / rate : 0;
    char done[32], tot[32], rb[32];
    fmt_bytes((double)c->done_in, done, sizeof done);
    fmt_bytes((double)c->total_in, tot, sizeof tot);
    fmt_bytes(rate, rb, sizeof rb);
    char bar[24];
    int fill = (int)(frac * 20 + 0.5);
    for (int k = 0; k < 20; k++) bar[k] = k < fill ? '#' : '.';
    bar[20] = 0;
    fprintf(c->log, "%s[%s] %5.1f%% tensor %d/%d %s/%s %s/s ETA %dh%02dm%02ds %-40.40s%s", c->tty ? "\r" : "", bar,
            100 * frac, i, n, done, tot, rb, (int)eta / 3600, (int)eta / 60 % 60, (int)eta % 60, name,
            c->tty ? "" : "\n");
    fflush(c->log);
}

/* ---- reading (element ranges in parallel) ---- */

typedef struct {
    const st_checkpoint *ck;
    const st_tensor *t;
    int64_t first, n;
    float *dst;
    int ret;
} rjob;

static void *rworker(void *arg) {
    rjob *j = arg;
    j->ret = j->n ? st_read_f32(j->ck, j->t, j->first, j->n, j->dst) : 0;
    return NULL;
}

/* st_read_f32 split over the conversion threads (dequantizing FP8 of a 300B checkpoint on one core would take
 * about as long as quantizing it on all of them). */
static int read_f32(conv_ctx *c, const st_tensor *t, int64_t first, int64_t n, float *dst) {
    int nt = c->n_threads;
    if (n < (1 << 20) || nt < 2) return st_read_f32(c->ck, t, first, n, dst);
    if (st_check_readable(c->ck, t) < 0) return -1;   /* errors from the calling thread */
    if (first < 0 || n < 0 || first + n > t->n_elements) return st_read_f32(c->ck, t, first, n, dst);
    rjob jobs[64];
    pthread_t th[64];
    if (nt > 64) nt = 64;
    for (int i = 0; i < nt; i++) {
        int64_t a = n * i / nt, b = n * (i + 1) / nt;
        jobs[i] = (rjob){c->ck, t, first + a, b - a, dst + a, 0};
    }
    bool started[64] = {false};
    for (int i = 1; i < nt; i++) started[i] = pthread_create(&th[i], NULL, rworker, &jobs[i]) == 0;
    rworker(&jobs[0]);
    for (int i = 1; i < nt; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        else rworker(&jobs[i]);
    }
    for (int i = 0; i < nt; i++)
        if (jobs[i].ret < 0) return nf_fail("tensor '%s': read failed", t->name);
    return 0;
}

/* ---- quantization (row ranges in parallel; shared with nf-quantize) ---- */

static int quantize_rows(conv_ctx *c, uint32_t type, const float *src, uint8_t *dst, int64_t rows, int64_t row_len) {
    return nf_quantize_rows(type, src, dst, rows, row_len, c->n_threads);
}

static int check_finite(const plan_t *p, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return nf_fail("%s: source value %lld is %s", p->lt->name, (long long)i, isnan(x[i]) ? "NaN" : "infinite");
    return 0;
}

/* Fill the f32 data (ggml order) of a non-expert tensor. */
static int produce(conv_ctx *c, const plan_t *p, float *out, int64_t n) {
    const nf_hparams *hp = &c->cfg.hp;
    switch (p->x) {
    case X_COPY:
    case X_NEG_EXP:
        if (read_f32(c, p->src, 0, n, out) < 0) return -1;
        if (p->x == X_NEG_EXP)
            for (int64_t i = 0; i < n; i++) out[i] = -expf(out[i]);
        break;
    case X_SLICE:
        if (read_f32(c, p->src, p->off, n, out) < 0) return -1;
        break;
    case X_KB:
    case X_VB: {
        int64_t H = hp->n_head, dn = hp->qk_nope_dim, dv = hp->v_head_dim, kv = hp->kv_lora_rank, per = dn + dv;
        float *rows = malloc((size_t)dn * (size_t)kv * sizeof(float));
        if (!rows) return nf_fail("out of memory");
        for (int64_t h = 0; h < H; h++) {
            if (p->x == X_KB) {
                /* Kb[h] = kv_b rows [h*per, h*per+dn) as [dn][kv]; stored transposed: out[h][c][d] = Kb[h][d][c] */
                if (st_read_f32(c->ck, p->src, h * per * kv, dn * kv, rows) < 0) {
                    free(rows);
                    return -1;
                }
                float *o = out + h * kv * dn;
                for (int64_t d = 0; d < dn; d++)
                    for (int64_t cc = 0; cc < kv; cc++) o[cc * dn + d] = rows[d * kv + cc];
            } else if (st_read_f32(c->ck, p->src, (h * per + dn) * kv, dv * kv, out + h * dv * kv) < 0) {
                /* Vb[h] = kv_b rows [h*per+dn, (h+1)*per) as [dv][kv]: already ggml {kv, dv} */
                free(rows);
                return -1;
            }
        }
        free(rows);
        break;
    }
    default: return nf_fail("internal: bad transform");
    }
    return check_finite(p, out, n);
}

static void print_summary(conv_ctx *cx, const plan_t *plan, int n, const nf_convert_stats *st, const nf_recipe *recipe,
                          int n_fallback, bool dry) {
    FILE *lg = cx->log;
    fprintf(lg, "\n%-40s %-18s %-16s %-26s %-8s %12s\n", "tensor", "shape (ggml)", "source", "transform", "type", "bytes");
    uint64_t in = 0, outb = 0;
    for (int i = 0; i < n; i++) {
        char shp[64], ty[24];
        fmt_ne(plan[i].lt->ne, plan[i].lt->n_dims, shp, sizeof shp);
        snprintf(ty, sizeof ty, "%s%s", nf_type_get(plan[i].type)->name, plan[i].fell_back ? "*" : "");
        fprintf(lg, "%-40s %-18s %-16s %-26s %-8s %12llu\n", plan[i].lt->name, shp, plan[i].src_desc, plan[i].label, ty,
                (unsigned long long)plan[i].out_bytes);
        in += plan[i].src_bytes;
        outb += plan[i].out_bytes;
    }
    char bi[32], bo[32], rb[32];
    fmt_bytes((double)in, bi, sizeof bi);
    fmt_bytes((double)outb, bo, sizeof bo);
    if (dry)
        fprintf(lg, "\n%d tensors, recipe %s: would read %s and write %s of tensor data (dry run: nothing written)\n", n,
                recipe->name, bi, bo);
    else {
        fmt_bytes(st->seconds > 0 ? (double)in / st->seconds : 0, rb, sizeof rb);
        fprintf(lg, "\n%d tensors, recipe %s: read %s, wrote %s in %.1f s (%s/s) -> %s\n", n, recipe->name, bi, bo,
                st->seconds, rb, cx->o->out_path);
    }
    if (n_fallback) fprintf(lg, "%d tensors (marked *) fell back to a smaller-block type\n", n_fallback);
    if (st->n_skipped_mtp || st->n_ignored_vision || st->n_unused)
        fprintf(lg, "skipped: %d MTP-layer tensors, %d vision tensors, %d unused\n", st->n_skipped_mtp,
                st->n_ignored_vision, st->n_unused);
}

/* ---- main ---- */

static bool has_file(const char *dir, const char *name) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
    struct stat sb;
    return stat(buf, &sb) == 0 && S_ISREG(sb.st_mode);
}

static bool is_vision(const char *name) {
    static const char *const v[] = {"model.visual.", "visual.", "model.vision_tower.", "vision_tower.",
                                    "model.multi_modal_projector.", "multi_modal_projector.", "mm_projector."};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (!strncmp(name, v[i], strlen(v[i]))) return true;
    return false;
}

/* Layer index of a text-model layer tensor, -1 otherwise. */
static int layer_of(const char *name) {
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        size_t l = strlen(prefixes[i]);
        if (strncmp(name, prefixes[i], l) || strncmp(name + l, "layers.", 7)) continue;
        char *end;
        long v = strtol(name + l + 7, &end, 10);
        if (end != name + l + 7 && *end == '.' && v >= 0 && v < 100000) return (int)v;
    }
    return -1;
}

int nf_convert(const nf_convert_opts *o, nf_convert_stats *stats) {
    conv_ctx c = {.o = o, .log = o->log ? o->log : stderr};
    nf_convert_stats st = {0};
    plan_t *plan = NULL;
    nf_layout_tensor *lts = NULL;
    gguf_writer *w = NULL;
    float *f32 = NULL;
    uint8_t *qbuf = NULL;
    int n = 0, rc = -1;
    c.tty = isatty(fileno(c.log));
    c.n_threads = o->n_threads > 0 ? o->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (c.n_threads < 1) c.n_threads = 1;
    if (c.n_threads > 64) c.n_threads = 64;

    const nf_recipe *recipe = nf_recipe_find(o->recipe ? o->recipe : "");
    if (!recipe) return -1;

    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", o->hf_dir);
    struct stat sb;
    if (stat(o->hf_dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return nf_fail("%s: not a folder", o->hf_dir);
    if (stat(path, &sb) != 0) return nf_fail("%s: no config.json (not a Hugging Face checkpoint folder?)", o->hf_dir);
    if (nf_hf_config_load(path, &c.cfg) < 0) return -1;
    if (o->mtp) {
        if (c.cfg.n_mtp_config == 0)
            return nf_fail("%s: --mtp: num_nextn_predict_layers is 0 or absent (no MTP block to convert)", path);
        c.cfg.hp.n_nextn = c.cfg.n_mtp_config;
        c.cfg.hp.n_layer_total = c.cfg.hp.n_layer + c.cfg.hp.n_nextn;
    }
    const nf_hparams *hp = &c.cfg.hp;

    c.ck = st_open_dir(o->hf_dir);
    if (!c.ck) return -1;
    if (c.cfg.fp8) st_set_fp8_block(c.ck, c.cfg.fp8_block[0], c.cfg.fp8_block[1]);
    c.used = calloc((size_t)st_count(c.ck) + 1, 1);

    lts = nf_layout_tensors_alloc(hp, &n);
    if (!lts) {
        nf_fail_prefix("%s", path);
        goto out;
    }
    plan = calloc((size_t)n, sizeof *plan);
    int n_fallback = 0;
    for (int i = 0; i < n; i++) {
        plan[i].lt = &lts[i];
        plan_one(&c, &plan[i]);
        plan[i].type = nf_recipe_type(recipe, &lts[i], &plan[i].fell_back);
        if (!nf_layout_type_ok(lts[i].role, plan[i].type, lts[i].ne[0]))
            add_err(&c, "%s: recipe %s picks type %s, which the loader does not accept for role %s", lts[i].name,
                    recipe->name, nf_type_get(plan[i].type)->name, nf_role_name(lts[i].role));
        int64_t rows = nf_layout_nelements(&lts[i]) / lts[i].ne[0];
        plan[i].out_bytes = nf_row_bytes(plan[i].type, lts[i].ne[0]) * (uint64_t)rows;
        c.total_in += plan[i].src_bytes;
        if (plan[i].fell_back) n_fallback++;
    }
    if (c.n_err) {
        char more[64] = "";
        if (c.n_err > 8) snprintf(more, sizeof more, "\n... and %d more", c.n_err - 8);
        nf_fail("%s: %d problem%s mapping the checkpoint to the glm5-next layout:\n%s%s", o->hf_dir, c.n_err,
                c.n_err > 1 ? "s" : "", c.errs, more);
        goto out;
    }

    /* Everything else in the checkpoint: vision (ignored), MTP (skipped for now), anything unknown (warned). */
    for (int64_t i = 0; i < st_count(c.ck); i++) {
        if (c.used[i]) continue;
        const char *nm = st_at(c.ck, i)->name;
        int l = layer_of(nm);
        if (is_vision(nm)) st.n_ignored_vision++;
        else if (l >= hp->n_layer + hp->n_nextn) st.n_skipped_mtp++;
        else {
            if (!o->quiet && st.n_unused < 10) fprintf(c.log, "nf-convert: warning: source tensor %s is not used\n", nm);
            st.n_unused++;
        }
    }
    if (!o->quiet) {
        if (st.n_unused > 10) fprintf(c.log, "nf-convert: warning: ... %d unused source tensors in all\n", st.n_unused);
        if (st.n_skipped_mtp)
            fprintf(c.log, "nf-convert: note: %d tensors of MTP layers (index >= %d; num_nextn_predict_layers = %d) are "
                           "not converted%s\n", st.n_skipped_mtp, hp->n_layer + hp->n_nextn, c.cfg.n_mtp_config,
                    o->mtp ? "" : " (use --mtp)");
        if (c.cfg.defaulted[0])
            fprintf(c.log, "nf-convert: note: config.json lacks %s: using the transformers default\n", c.cfg.defaulted);
        int shown = 0;
        for (int i = 0; i < n && n_fallback; i++) {
            if (!plan[i].fell_back) continue;
            if (shown++ < 12)
                fprintf(c.log, "nf-convert: %s: rows of %lld do not fit %s, stored as %s\n", lts[i].name,
                        (long long)lts[i].ne[0], nf_type_get(recipe->type[lts[i].role])->name,
                        nf_type_get(plan[i].type)->name);
        }
        if (n_fallback > 12) fprintf(c.log, "nf-convert: ... %d fallbacks in all\n", n_fallback);
    }
    if (o->dry_run) {
        if (!o->quiet) print_summary(&c, plan, n, &st, recipe, n_fallback, true);
        st.n_tensors = n;
        rc = 0;
        goto out;
    }

    /* ---- declare ---- */
    w = gguf_writer_create(o->out_path);
    if (!w) goto out;
    char name[256];
    const char *base = o->hf_dir + strlen(o->hf_dir);
    while (base > o->hf_dir && base[-1] == '/') base--;
    const char *bend = base;
    while (base > o->hf_dir && base[-1] != '/') base--;
    snprintf(name, sizeof name, "%.*s", (int)(bend - base), base);
    gguf_set_str(w, "general.name", name[0] ? name : "glm5-next");
    if (!o->no_tokenizer && has_file(o->hf_dir, "tokenizer.json")) {
        if (nf_tokenizer_write_gguf_meta(o->hf_dir, w) < 0) {
            nf_fail_prefix("%s/tokenizer.json (use --no-tokenizer to skip)", o->hf_dir);
            goto out;
        }
    }
    if (nf_layout_write_hparams(hp, w) < 0) goto out;
    if (c.cfg.n_eos > 1) {
        /* All stop ids (the release has three); tokenizer.ggml.eos_token_id keeps the first. */
        uint32_t ids[NF_HF_MAX_EOS];
        for (int i = 0; i < c.cfg.n_eos; i++) ids[i] = (uint32_t)c.cfg.eos_ids[i];
        gguf_set_arr(w, "tokenizer.ggml.eos_token_ids", GGUF_TYPE_UINT32, ids, (uint64_t)c.cfg.n_eos);
    }
    bool any_q = false;
    for (int i = 0; i < n; i++) any_q |= nf_type_get(plan[i].type)->quantized;
    if (any_q) gguf_set_u32(w, "general.quantization_version", 2);
    gguf_set_str(w, "nextflash.convert.recipe", recipe->name);
    for (int i = 0; i < n; i++)
        if (gguf_writer_add_tensor(w, lts[i].name, plan[i].type, lts[i].n_dims, lts[i].ne) < 0) goto out;
    if (gguf_writer_begin_data(w) < 0) goto out;

    /* ---- stream ---- */
    c.t0 = now_s();
    c.last_print = -1e9;
    for (int i = 0; i < n; i++) {
        const plan_t *p = &plan[i];
        const nf_layout_tensor *lt = p->lt;
        if (o->cancel && *o->cancel) {
            nf_fail("interrupted");
            goto out;
        }
        progress(&c, i, n, lt->name, false);
        if (i == 0) prefetch_plan(&c, p);
        if (i + 1 < n) prefetch_plan(&c, &plan[i + 1]);
        int64_t ne = nf_layout_nelements(lt), row_len = lt->ne[0];
        qbuf = malloc(p->out_bytes ? p->out_bytes : 1);
        if (!qbuf) {
            nf_fail("%s: out of memory for %llu bytes", lt->name, (unsigned long long)p->out_bytes);
            goto out;
        }
        if (p->x == X_EXP_SPLIT || p->x == X_EXP_FUSED) {
            int64_t E = lt->ne[2], slab = ne / E;
            size_t slab_bytes = (size_t)(p->out_bytes / (uint64_t)E);
            f32 = malloc((size_t)slab * sizeof(float));
            if (!f32) {
                nf_fail("%s: out of memory", lt->name);
                goto out;
            }
            for (int64_t e = 0; e < E; e++) {
                if (o->cancel && *o->cancel) {
                    nf_fail("interrupted");
                    goto out;
                }
                const st_tensor *src = p->x == X_EXP_SPLIT ? p->experts[e] : p->src;
                if (p->x == X_EXP_SPLIT && e + 1 < E) st_prefetch(c.ck, p->experts[e + 1]);
                int64_t first = p->x == X_EXP_SPLIT ? 0 : e * p->stride + p->off;
                if (read_f32(&c, src, first, slab, f32) < 0 || check_finite(p, f32, slab) < 0) {
                    nf_fail_prefix("%s (expert %lld)", lt->name, (long long)e);
                    goto out;
                }
                if (quantize_rows(&c, p->type, f32, qbuf + (size_t)e * slab_bytes, slab / row_len, row_len) < 0) {
                    nf_fail_prefix("%s", lt->name);
                    goto out;
                }
                if (p->x == X_EXP_SPLIT) st_release(c.ck, src);
                c.done_in += p->src_bytes / (uint64_t)E;
                progress(&c, i, n, lt->name, false);
            }
            if (p->x == X_EXP_FUSED) st_release(c.ck, p->src);
            c.done_in -= p->src_bytes / (uint64_t)E * (uint64_t)E;
        } else {
            f32 = malloc((size_t)ne * sizeof(float));
            if (!f32) {
                nf_fail("%s: out of memory", lt->name);
                goto out;
            }
            if (produce(&c, p, f32, ne) < 0) {
                nf_fail_prefix("%s", lt->name);
                goto out;
            }
            st_release(c.ck, p->src);
            if (quantize_rows(&c, p->type, f32, qbuf, ne / row_len, row_len) < 0) {
                nf_fail_prefix("%s", lt->name);
                goto out;
            }
        }
        free(f32);
        f32 = NULL;
        if (gguf_writer_write_tensor(w, qbuf, p->out_bytes) < 0) goto out;
        free(qbuf);
        qbuf = NULL;
        c.done_in += p->src_bytes;
        st.bytes_in += p->src_bytes;
        st.bytes_out += p->out_bytes;
    }
    progress(&c, n, n, "done", true);
    if (!o->quiet && c.tty) fputc('\n', c.log);
    if (gguf_writer_finish(w) < 0) {
        w = NULL;
        goto out;
    }
    w = NULL;
    st.n_tensors = n;
    st.seconds = now_s() - c.t0;

    if (!o->quiet) print_summary(&c, plan, n, &st, recipe, n_fallback, false);
    rc = 0;
out:
    if (w) gguf_writer_abort(w);
    free(f32);
    free(qbuf);
    if (plan)
        for (int i = 0; i < n; i++) free(plan[i].experts);
    free(plan);
    free(lts);
    free(c.used);
    st_close(c.ck);
    if (stats) *stats = st;
    return rc;
}
