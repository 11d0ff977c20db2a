/* model_load.c — open a glm5-next GGUF, read its hyperparameters and bind every tensor by name.
 *
 * The expected tensors come from the single layout table (layout.h). Each is checked for presence, shape and
 * type, and ALL mismatches are collected, one line each (`blk.7.attn_q_b.weight: expected [1536,16384] got
 * [1536,8192]`), so one run tells the user everything that is wrong with a file. Tensors of the MTP blocks
 * (blk.N, N >= n_layer) are not bound yet and are only counted; tensors the layout does not know are counted
 * and ignored. KDA conv weights are accepted as {conv,1,inner} or {conv,inner} and bound with the canonical
 * 3-D shape (same bytes). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"
#include "model/layout.h"
#include "model/model.h"
#include "model/synth.h"
#include "util/error.h"

static _Thread_local char *last_mismatches;

const char *nf_model_mismatches(void) { return last_mismatches ? last_mismatches : ""; }

typedef struct {
    char *buf;
    size_t len, cap;
    int lines;
} strbuf;

static void sb_addf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_addf(strbuf *b, const char *fmt, ...) {
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(b->buf ? b->buf + b->len : NULL, b->buf ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if (b->buf && b->len + (size_t)n < b->cap) { b->len += (size_t)n; return; }
        b->cap = (b->cap + (size_t)n + 1) * 2;
        b->buf = nf_xrealloc(b->buf, b->cap);
        if (b->len == 0) b->buf[0] = 0;
    }
}

static void fmt_shape(char *out, size_t n, uint32_t nd, const int64_t *ne) {
    size_t k = 0;
    k += (size_t)snprintf(out + k, n - k, "[");
    for (uint32_t d = 0; d < nd && k < n; d++)
        k += (size_t)snprintf(out + k, n - k, "%s%lld", d ? "," : "", (long long)ne[d]);
    if (k < n) snprintf(out + k, n - k, "]");
}

static bool same_shape(const nf_layout_tensor *want, const gguf_tensor *got) {
    int64_t a[4] = {1, 1, 1, 1}, b[4] = {1, 1, 1, 1};
    for (uint32_t d = 0; d < want->n_dims && d < 4; d++) a[d] = want->ne[d];
    for (uint32_t d = 0; d < got->n_dims && d < 4; d++) b[d] = got->ne[d];
    if (!memcmp(a, b, sizeof a)) return true;
    /* ssm_conv1d_*: {conv, inner} is the same data as {conv, 1, inner} */
    if (want->role == NF_ROLE_KDA_PARAM && want->n_dims == 3 && want->ne[1] == 1 && got->n_dims == 2 &&
        got->ne[0] == want->ne[0] && got->ne[1] == want->ne[2])
        return true;
    return false;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Block index of "blk.N.<rest>", or -1. */
static long block_index(const char *name) {
    if (strncmp(name, "blk.", 4)) return -1;
    char *end;
    long n = strtol(name + 4, &end, 10);
    return end != name + 4 && *end == '.' ? n : -1;
}

static void set_error_from_list(const strbuf *sb, int count, const char *path) {
    /* nf_error holds one message of ~1 KB: a header when there are several, then as many whole lines as fit,
     * then a count of the rest. A single mismatch is just its line. */
    char msg[960];
    size_t k = 0;
    int shown = 0;
    if (count > 1) k = (size_t)snprintf(msg, sizeof msg, "%.300s: %d tensor mismatches", path, count);
    for (const char *p = sb->buf; shown < count && p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (k + len + 40 >= sizeof msg) break;
        if (k) msg[k++] = '\n';
        memcpy(msg + k, p, len);
        k += len;
        shown++;
        p = nl ? nl + 1 : p + len;
    }
    msg[k] = 0;
    if (shown < count) snprintf(msg + k, sizeof msg - k, "\n... and %d more", count - shown);
    nf_fail("%s", msg);
}

nf_model *nf_model_load(const char *path) {
    gguf_file *f = gguf_open(path);
    if (!f) {
        free(last_mismatches);
        last_mismatches = NULL;
        return NULL;
    }
    return nf_model_from_gguf(f);
}

nf_model *nf_model_from_gguf(gguf_file *f) {
    free(last_mismatches);
    last_mismatches = NULL;
    const char *path = gguf_path(f);
    nf_model *m = nf_xcalloc(1, sizeof *m);
    m->file = f;
    if (nf_hparams_load(f, &m->hp) < 0) {
        nf_fail_prefix("%s", path);
        nf_model_free(m);
        return NULL;
    }
    const nf_hparams *hp = &m->hp;
    int n;
    nf_layout_tensor *lt = nf_layout_tensors_alloc(hp, &n);
    if (!lt) {
        nf_fail_prefix("%s", path);
        nf_model_free(m);
        return NULL;
    }
    m->layers = nf_xcalloc((size_t)(hp->n_layer + hp->n_nextn), sizeof *m->layers);
    bool *mtp_bad = nf_xcalloc((size_t)hp->n_nextn + 1, sizeof *mtp_bad);

    strbuf sb = {0};
    int n_bad = 0;
    for (int i = 0; i < n; i++) {
        const nf_layout_tensor *w = &lt[i];
        if (w->mtp) { /* MTP blocks: bound when every tensor is there and valid, never an error */
            const gguf_tensor *t = gguf_find_tensor(f, w->name);
            int k = w->layer - hp->n_layer;
            if (!t || !same_shape(w, t) || !nf_layout_type_ok(w->role, t->type, w->ne[0])) {
                mtp_bad[k] = true;
                continue;
            }
            nf_tensor *dst = nf_layout_bound(m, w);
            dst->name = t->name;
            dst->data = t->data;
            dst->type = t->type;
            dst->n_dims = w->n_dims;
            memcpy(dst->ne, w->ne, sizeof dst->ne);
            continue;
        }
        char es[96], gs[96];
        fmt_shape(es, sizeof es, w->n_dims, w->ne);
        const gguf_tensor *t = gguf_find_tensor(f, w->name);
        if (!t) {
            sb_addf(&sb, "%s: missing (expected %s)\n", w->name, es);
            n_bad++;
            continue;
        }
        bool ok = true;
        if (!same_shape(w, t)) {
            fmt_shape(gs, sizeof gs, t->n_dims, t->ne);
            sb_addf(&sb, "%s: expected %s got %s\n", w->name, es, gs);
            n_bad++;
            ok = false;
        }
        if (!nf_layout_type_ok(w->role, t->type, w->ne[0])) {
            const nf_type_info *ti = nf_type_get(t->type);
            const char *tn = ti->name ? ti->name : "unknown";
            if (nf_role_is_param(w->role))
                sb_addf(&sb, "%s: type %s not allowed (%s tensors must be f32)\n", w->name, tn, nf_role_name(w->role));
            else if (nf_layout_type_ok(w->role, t->type, ti->block_size > 0 ? ti->block_size : 1))
                sb_addf(&sb, "%s: type %s needs rows that are a multiple of %lld, row length is %lld\n", w->name, tn,
                        (long long)ti->block_size, (long long)w->ne[0]);
            else
                sb_addf(&sb, "%s: unsupported type %s (id %u)\n", w->name, tn, t->type);
            n_bad++;
            ok = false;
        }
        if (!ok) continue;
        nf_tensor *dst = nf_layout_bound(m, w);
        dst->name = t->name;
        dst->data = t->data;
        dst->type = t->type;
        dst->n_dims = w->n_dims;
        memcpy(dst->ne, w->ne, sizeof dst->ne);
        m->n_bound++;
    }

    /* tensors in the file that the layout does not bind */
    const char **names = nf_xcalloc((size_t)n, sizeof *names);
    for (int i = 0; i < n; i++) names[i] = lt[i].name;
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        long b = block_index(t->name);
        if (b >= hp->n_layer) { m->n_mtp_tensors++; continue; }
        const char *key = t->name;
        if (!bsearch(&key, names, (size_t)n, sizeof *names, cmp_str)) m->n_extra_tensors++;
    }
    free(names);
    free(lt);
    for (int k = 0; k < hp->n_nextn; k++) {
        if (mtp_bad[k]) memset(&m->layers[hp->n_layer + k], 0, sizeof m->layers[0]);
        else m->n_mtp_bound++;
    }
    free(mtp_bad);

    if (n_bad) {
        set_error_from_list(&sb, n_bad, path);
        last_mismatches = sb.buf;
        nf_model_free(m);
        return NULL;
    }
    free(sb.buf);
    return m;
}

void nf_model_free(nf_model *m) {
    if (!m) return;
    nf_synth_release(m->synth);
    gguf_close(m->file);
    free(m->layers);
    free(m);
}

uint64_t nf_tensor_bytes(const nf_tensor *t) {
    if (!t->data || t->ne[0] <= 0) return 0;
    int64_t ne = 1;
    for (uint32_t d = 0; d < t->n_dims && d < 4; d++) ne *= t->ne[d];
    return (uint64_t)nf_row_bytes(t->type, t->ne[0]) * (uint64_t)(ne / t->ne[0]);
}

uint64_t nf_model_tensor_bytes(const nf_model *m, bool include_mtp) {
    uint64_t b = nf_tensor_bytes(&m->token_embd) + nf_tensor_bytes(&m->output_norm) + nf_tensor_bytes(&m->output);
    _Static_assert(sizeof(nf_layer) % sizeof(nf_tensor) == 0, "nf_layer holds only nf_tensor fields");
    int n_layers = m->hp.n_layer + (include_mtp ? m->hp.n_nextn : 0);
    for (int l = 0; m->layers && l < n_layers; l++) {
        const nf_tensor *ts = (const nf_tensor *)&m->layers[l];
        for (size_t i = 0; i < sizeof(nf_layer) / sizeof(nf_tensor); i++) b += nf_tensor_bytes(&ts[i]);
    }
    return b;
}

static void human(char *out, size_t n, double v, const char *unit) {
    const char *pre[] = {"", "K", "M", "G", "T"};
    int i = 0;
    while (v >= 1000 && i < 4) { v /= 1000; i++; }
    snprintf(out, n, "%.*f %s%s", i ? 2 : 0, v, pre[i], unit);
}

void nf_model_print_summary(const nf_model *m) {
    const nf_hparams *hp = &m->hp;
    if (m->file)
        printf("model       %s\n", gguf_path(m->file));
    else if (m->synth)
        printf("model       synthetic, recipe %s, seed %llu, no file (%d tensors made on the GPU, %.2f GB)\n",
               m->synth->recipe->name, (unsigned long long)m->synth->seed, m->synth->n_virtual,
               (double)m->synth->virtual_bytes / 1e9);
    printf("arch        %s, %d trunk layers", hp->arch, hp->n_layer);
    if (hp->n_nextn) printf(" + %d MTP block%s", hp->n_nextn, hp->n_nextn > 1 ? "s" : "");
    printf("\n");
    char pat[NF_MAX_LAYERS + 1];
    int n_kda = 0, n_mla = 0, n_moe = 0;
    for (int i = 0; i < hp->n_layer; i++) {
        bool mla = hp->layer_kind[i] == NF_LAYER_MLA;
        n_mla += mla; n_kda += !mla; n_moe += hp->layer_moe[i];
        pat[i] = mla ? (hp->layer_moe[i] ? 'M' : 'm') : (hp->layer_moe[i] ? 'K' : 'k');
    }
    pat[hp->n_layer] = 0;
    printf("layers      %s  (K/k = KDA, M/m = MLA+DSA; upper case MoE, lower case dense FFN)\n", pat);
    printf("            %d KDA, %d MLA, %d dense FFN, %d MoE\n", n_kda, n_mla, hp->n_layer - n_moe, n_moe);
    printf("dims        n_embd %d, vocab %d, context %d, rms_eps %g\n", hp->n_embd, hp->n_vocab, hp->n_ctx_train,
           (double)hp->rms_eps);
    if (n_mla)
        printf("MLA         %d heads, q_lora %d, kv_lora %d, qk_nope %d, v %d (NoPE)\n", hp->n_head, hp->q_lora_rank,
               hp->kv_lora_rank, hp->qk_nope_dim, hp->v_head_dim);
    if (n_mla)
        printf("indexer     %d heads x %d, top_k %d, kpool %d, select tail %s, ln_eps %g\n", hp->idx_n_head,
               hp->idx_head_dim, hp->idx_topk, hp->idx_kpool, hp->idx_select_tail ? "yes" : "no",
               (double)hp->indexer_ln_eps);
    if (n_kda)
        printf("KDA         %d heads x %d, conv %d, gate rank %d, gate lower bound %g\n", hp->kda_n_head,
               hp->kda_head_dim, hp->kda_conv, hp->kda_gate_rank, (double)hp->kda_gate_lower_bound);
    if (hp->n_layer - n_moe) printf("dense FFN   width %d\n", hp->n_ff);
    if (n_moe)
        printf("MoE         %d experts (top %d) + %d shared, width %d, scale %g, norm %s\n", hp->n_expert,
               hp->n_expert_used, hp->n_expert_shared, hp->n_ff_exp, (double)hp->expert_weights_scale,
               hp->expert_weights_norm ? "yes" : "no");
    printf("SwiGLU      clamp %g\n", (double)hp->swiglu_limit);
    printf("hc          %d streams, sinkhorn %d, eps %g\n", hp->hc_count, hp->hc_sinkhorn_iters, (double)hp->hc_eps);
    if (hp->bos_id >= 0 || hp->eos_id >= 0 || hp->pad_id >= 0)
        printf("tokens      bos %d, eos %d, pad %d\n", hp->bos_id, hp->eos_id, hp->pad_id);

    /* parameters and bytes by type, over the bound tensors */
    int64_t params[NF_TYPE_COUNT] = {0}, total = 0;
    uint64_t bytes[NF_TYPE_COUNT] = {0}, total_bytes = 0;
    int count[NF_TYPE_COUNT] = {0};
    for (int64_t i = 0; m->file && i < gguf_tensor_count(m->file); i++) {
        const gguf_tensor *t = gguf_tensor_at(m->file, i);
        long b = block_index(t->name);
        if (b >= hp->n_layer || t->type >= NF_TYPE_COUNT) continue;
        int64_t ne = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) ne *= t->ne[d];
        params[t->type] += ne; bytes[t->type] += t->size; count[t->type]++;
        total += ne; total_bytes += t->size;
    }
    for (int i = 0; !m->file && m->synth && i < m->synth->n_tensors; i++) {   /* the same census, no file */
        const nf_layout_tensor *lt = &m->synth->layout[i];
        uint32_t type = m->synth->tensors[i].type;
        if (lt->mtp) continue;
        int64_t ne = nf_layout_nelements(lt);
        params[type] += ne; bytes[type] += m->synth->tensors[i].bytes; count[type]++;
        total += ne; total_bytes += m->synth->tensors[i].bytes;
    }
    char a[32], b2[32];
    human(a, sizeof a, (double)total, "");
    human(b2, sizeof b2, (double)total_bytes, "B");
    printf("tensors     %d bound, %s parameters, %s (trunk)\n", m->n_bound, a, b2);
    for (int t = 0; t < NF_TYPE_COUNT; t++) {
        if (!count[t]) continue;
        human(a, sizeof a, (double)params[t], "");
        human(b2, sizeof b2, (double)bytes[t], "B");
        printf("  %-8s  %5d tensors  %12s params  %12s\n", nf_type_get((uint32_t)t)->name, count[t], a, b2);
    }
    if (m->n_mtp_tensors)
        printf("MTP         %d tensors present (blocks >= %d), %d of %d blocks bound (speculative drafts: --draft mtp)\n",
               m->n_mtp_tensors, hp->n_layer, m->n_mtp_bound, hp->n_nextn);
    if (m->n_extra_tensors) printf("warning     %d tensors not in the layout were ignored\n", m->n_extra_tensors);
}
