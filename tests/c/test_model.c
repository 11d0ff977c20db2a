/* test_model.c — hyperparameters, the layout table, recipes, nf-synth and nf_model_load.
 *
 * Synthesizes the tiny preset in every recipe and loads it back (hparams equal what was asked, every tensor
 * bound with the recipe's type, f32 values equal the generator's); rewrites a good file with one thing broken
 * (a tensor's shape, a missing tensor, a wrong type, a missing or changed key) and checks the exact messages;
 * checks the glm53 preset's layout (tensor census and parameter count, spec §1/§4.1) without writing it. */
#include <criterion/criterion.h>

#include "formats/formats.h"
#include "gguf/gguf.h"
#include "model/layout.h"
#include "model/model.h"
#include "model/recipe.h"
#include "model/synth.h"
#include "util/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- helpers ---- */

static char tmpdir[64];

static const char *tmp_path(const char *name) {
    static char buf[32][256];
    static int k;
    if (!tmpdir[0]) {
        strcpy(tmpdir, "/tmp/nf-test-model-XXXXXX");
        cr_assert_not_null(mkdtemp(tmpdir));
    }
    char *p = buf[k++ & 31];
    snprintf(p, 256, "%s/%s", tmpdir, name);
    return p;
}

/* Each test runs in its own process with its own directory; remove it after the test (tiny f32 files are
 * 45 MB and the machine is shared). */
static void cleanup(void) {
    if (!tmpdir[0]) return;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", tmpdir);
    tmpdir[0] = 0;
}
TestSuite(layout, .fini = cleanup);
TestSuite(recipe, .fini = cleanup);
TestSuite(synth, .fini = cleanup);
TestSuite(model_load, .fini = cleanup);
TestSuite(model_tools, .fini = cleanup);

static const char *synth_tiny(const char *recipe, const char *file) {
    nf_hparams hp;
    cr_assert_eq(nf_synth_preset("tiny", &hp), 0);
    const nf_recipe *r = nf_recipe_find(recipe);
    cr_assert_not_null(r, "%s", nf_error());
    const char *path = tmp_path(file);
    cr_assert_eq(nf_synth_write(path, &hp, r, 7, NULL, NULL, NULL), 0, "%s", nf_error());
    return path;
}

/* Copy src to dst, changing one thing:
 *   skip_key:   leave this metadata key out (NULL: none)
 *   set_f32_key/val: after copying, set this key to a scalar float (replaces an array)
 *   tensor:     the tensor to change (NULL: none); new_ne (n_dims new_nd) replaces its shape, new_type its type
 *               (-1 keeps), drop removes it. Changed tensors get zero data. */
typedef struct {
    const char *skip_key;
    const char *set_f32_key;
    float set_f32_val;
    const char *tensor;
    uint32_t new_nd;
    int64_t new_ne[4];
    int new_type;
    bool drop;
    const char *add_tensor;   /* append an extra F32 tensor {8} with this name (NULL: none) */
} rewrite_spec;

static void rewrite(const char *src, const char *dst, const rewrite_spec *rs) {
    gguf_file *f = gguf_open(src);
    cr_assert_not_null(f, "%s", nf_error());
    gguf_writer *w = gguf_writer_create(dst);
    cr_assert_not_null(w);
    for (int64_t i = 0; i < gguf_kv_count(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
        if (rs->skip_key && !strcmp(key, rs->skip_key)) continue;
        if (!strcmp(key, "general.alignment")) continue;
        if (kv->type == GGUF_TYPE_ARRAY) {
            if (kv->elem_type == GGUF_TYPE_STRING) {
                const char **s = calloc(kv->count, sizeof *s);
                for (uint64_t j = 0; j < kv->count; j++) {
                    gguf_str g = gguf_arr_str(kv, j);
                    s[j] = strndup(g.ptr, g.len);
                }
                gguf_set_arr_str(w, key, s, kv->count);
                for (uint64_t j = 0; j < kv->count; j++) free((void *)s[j]);
                free(s);
            } else {
                gguf_set_arr(w, key, kv->elem_type, kv->data, kv->count);
            }
            continue;
        }
        const uint8_t *d = kv->data;
        switch (kv->type) {
        case GGUF_TYPE_UINT32: { uint32_t v; memcpy(&v, d, 4); gguf_set_u32(w, key, v); break; }
        case GGUF_TYPE_INT32: { int32_t v; memcpy(&v, d, 4); gguf_set_i32(w, key, v); break; }
        case GGUF_TYPE_UINT64: { uint64_t v; memcpy(&v, d, 8); gguf_set_u64(w, key, v); break; }
        case GGUF_TYPE_FLOAT32: { float v; memcpy(&v, d, 4); gguf_set_f32(w, key, v); break; }
        case GGUF_TYPE_BOOL: gguf_set_bool(w, key, d[0] != 0); break;
        case GGUF_TYPE_STRING: {
            char buf[512];
            cr_assert_eq(gguf_get_str(f, key, buf, sizeof buf), 0);
            gguf_set_str(w, key, buf);
            break;
        }
        default: cr_assert_fail("rewrite: unhandled metadata type %d for %s", kv->type, key);
        }
    }
    if (rs->set_f32_key) gguf_set_f32(w, rs->set_f32_key, rs->set_f32_val);
    for (int64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        bool mine = rs->tensor && !strcmp(t->name, rs->tensor);
        if (mine && rs->drop) continue;
        uint32_t nd = mine && rs->new_nd ? rs->new_nd : t->n_dims;
        const int64_t *ne = mine && rs->new_nd ? rs->new_ne : t->ne;
        uint32_t type = mine && rs->new_type >= 0 ? (uint32_t)rs->new_type : t->type;
        cr_assert_geq(gguf_writer_add_tensor(w, t->name, type, nd, ne), 0, "%s", nf_error());
    }
    const int64_t extra_ne[1] = {8};
    if (rs->add_tensor) cr_assert_geq(gguf_writer_add_tensor(w, rs->add_tensor, NF_TYPE_F32, 1, extra_ne), 0);
    cr_assert_eq(gguf_writer_begin_data(w), 0, "%s", nf_error());
    for (int64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        bool mine = rs->tensor && !strcmp(t->name, rs->tensor);
        if (mine && rs->drop) continue;
        if (!mine) {
            cr_assert_eq(gguf_writer_write_tensor(w, t->data, t->size), 0, "%s", nf_error());
            continue;
        }
        uint32_t nd = rs->new_nd ? rs->new_nd : t->n_dims;
        const int64_t *ne = rs->new_nd ? rs->new_ne : t->ne;
        uint32_t type = rs->new_type >= 0 ? (uint32_t)rs->new_type : t->type;
        int64_t n = 1;
        for (uint32_t d = 0; d < nd; d++) n *= ne[d];
        uint64_t size = nf_row_bytes(type, ne[0]) * (uint64_t)(n / ne[0]);
        void *z = calloc(1, size ? size : 1);
        cr_assert_eq(gguf_writer_write_tensor(w, z, size), 0, "%s", nf_error());
        free(z);
    }
    if (rs->add_tensor) {
        float z[8] = {0};
        cr_assert_eq(gguf_writer_write_tensor(w, z, sizeof z), 0, "%s", nf_error());
    }
    cr_assert_eq(gguf_writer_finish(w), 0, "%s", nf_error());
    gguf_close(f);
}

static rewrite_spec no_change(void) {
    rewrite_spec rs;
    memset(&rs, 0, sizeof rs);
    rs.new_type = -1;
    return rs;
}

static int run_cmd(const char *cmd, char *out, size_t outsz) {
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, outsz - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *build_dir(void) {
    const char *b = getenv("NF_BUILD");
    return b && *b ? b : "build";
}

static void expect_same_hparams(const nf_hparams *a, const nf_hparams *b) {
    cr_expect_str_eq(a->arch, b->arch);
#define EQ(f) cr_expect_eq(a->f, b->f, #f ": %g vs %g", (double)a->f, (double)b->f)
    EQ(n_layer); EQ(n_layer_total); EQ(n_nextn); EQ(n_embd); EQ(n_vocab); EQ(n_ctx_train); EQ(rms_eps);
    EQ(indexer_ln_eps); EQ(n_head); EQ(q_lora_rank); EQ(kv_lora_rank); EQ(qk_nope_dim); EQ(v_head_dim);
    EQ(kda_n_head); EQ(kda_head_dim); EQ(kda_conv); EQ(kda_gate_lower_bound); EQ(kda_gate_rank);
    EQ(idx_n_head); EQ(idx_head_dim); EQ(idx_topk); EQ(idx_kpool); EQ(idx_select_tail);
    EQ(n_ff); EQ(n_ff_exp); EQ(n_expert); EQ(n_expert_used); EQ(n_expert_shared); EQ(n_dense_lead);
    EQ(expert_weights_scale); EQ(expert_weights_norm); EQ(swiglu_limit); EQ(hc_count); EQ(hc_sinkhorn_iters);
    EQ(hc_eps); EQ(bos_id); EQ(eos_id); EQ(pad_id);
#undef EQ
    for (int i = 0; i < a->n_layer; i++) {
        cr_expect_eq(a->layer_kind[i], b->layer_kind[i], "layer_kind[%d]", i);
        cr_expect_eq(a->layer_moe[i], b->layer_moe[i], "layer_moe[%d]", i);
        cr_expect_eq(a->indexer_shared[i], b->indexer_shared[i], "indexer_shared[%d]", i);
    }
}

static const nf_tensor *bound(const nf_model *m, const nf_layout_tensor *t) {
    return t->bind == NF_BIND_MODEL ? (const nf_tensor *)((const char *)m + t->bind_offset)
                                    : (const nf_tensor *)((const char *)&m->layers[t->layer] + t->bind_offset);
}

static uint32_t type_of(const nf_model *m, const char *name) {
    const gguf_tensor *t = gguf_find_tensor(m->file, name);
    cr_assert_not_null(t, "%s", name);
    return t->type;
}

/* ---- glm53 layout (never written) ---- */

Test(layout, glm53_census_and_params) {
    nf_hparams hp;
    cr_assert_eq(nf_synth_preset("glm53", &hp), 0);
    int n;
    nf_layout_tensor *t = nf_layout_tensors_alloc(&hp, &n);
    cr_assert_not_null(t, "%s", nf_error());
    int trunk = 0, mtp = 0;
    for (int i = 0; i < n; i++) { if (t[i].mtp) mtp++; else trunk++; }
    cr_expect_eq(trunk, 1383, "trunk tensors %d (release census 1383)", trunk);
    cr_expect_eq(mtp, 29, "MTP tensors %d (release census 29)", mtp);
    int64_t p_trunk = nf_layout_param_count(&hp, true), p_all = nf_layout_param_count(&hp, false);
    cr_expect(p_trunk > 312.5e9 && p_trunk < 314.5e9, "trunk params %lld (~313B)", (long long)p_trunk);
    cr_expect(p_all - p_trunk > 7.0e9 && p_all - p_trunk < 8.0e9, "MTP params %lld (~7.4B)", (long long)(p_all - p_trunk));
    struct { const char *name; uint32_t nd; int64_t ne[3]; nf_role role; } want[] = {
        {"token_embd.weight", 2, {4096, 154880}, NF_ROLE_EMBD},
        {"output.weight", 2, {4096, 154880}, NF_ROLE_OUTPUT},
        {"blk.0.hc_attn_fn.weight", 2, {16384, 24}, NF_ROLE_HC_FN},
        {"blk.0.hc_ffn_base.weight", 1, {24}, NF_ROLE_HC_PARAM},
        {"blk.0.hc_ffn_scale.weight", 1, {3}, NF_ROLE_HC_PARAM},
        {"blk.0.attn_q.weight", 2, {4096, 8192}, NF_ROLE_KDA},
        {"blk.0.ssm_conv1d_v.weight", 3, {4, 1, 8192}, NF_ROLE_KDA_PARAM},
        {"blk.0.ssm_f_a.weight", 2, {4096, 128}, NF_ROLE_KDA},
        {"blk.0.ssm_f_b.weight", 2, {128, 8192}, NF_ROLE_KDA},
        {"blk.0.ssm_dt.bias", 1, {8192}, NF_ROLE_KDA_PARAM},
        {"blk.0.ssm_a", 1, {64}, NF_ROLE_KDA_PARAM},
        {"blk.0.ssm_beta.weight", 2, {4096, 64}, NF_ROLE_KDA},
        {"blk.0.ssm_norm.weight", 1, {128}, NF_ROLE_NORM},
        {"blk.0.attn_output.weight", 2, {8192, 4096}, NF_ROLE_KDA},
        {"blk.0.ffn_gate.weight", 2, {4096, 12288}, NF_ROLE_DENSE_FFN},
        {"blk.7.attn_q_a.weight", 2, {4096, 1536}, NF_ROLE_MLA},
        {"blk.7.attn_q_b.weight", 2, {1536, 16384}, NF_ROLE_MLA},
        {"blk.7.attn_kv_a_mqa.weight", 2, {4096, 512}, NF_ROLE_MLA},
        {"blk.7.attn_k_b.weight", 3, {256, 512, 64}, NF_ROLE_MLA},
        {"blk.7.attn_v_b.weight", 3, {512, 256, 64}, NF_ROLE_MLA},
        {"blk.7.attn_output.weight", 2, {16384, 4096}, NF_ROLE_MLA},
        {"blk.7.indexer.attn_q_b.weight", 2, {1536, 4096}, NF_ROLE_INDEXER},
        {"blk.7.indexer.attn_k.weight", 2, {4096, 128}, NF_ROLE_INDEXER},
        {"blk.7.indexer.k_norm.bias", 1, {128}, NF_ROLE_NORM},
        {"blk.7.indexer.proj.weight", 2, {4096, 32}, NF_ROLE_INDEXER_SMALL},
        {"blk.7.indexer_compressor_gate.weight", 2, {4096, 128}, NF_ROLE_INDEXER_SMALL},
        {"blk.7.indexer_compressor_ape.weight", 2, {128, 4}, NF_ROLE_INDEXER_PARAM},
        {"blk.7.ffn_gate_inp.weight", 2, {4096, 288}, NF_ROLE_ROUTER},
        {"blk.7.exp_probs_b.bias", 1, {288}, NF_ROLE_NORM},
        {"blk.7.ffn_up_exps.weight", 3, {4096, 2048, 288}, NF_ROLE_EXP_UP},
        {"blk.7.ffn_down_exps.weight", 3, {2048, 4096, 288}, NF_ROLE_EXP_DOWN},
        {"blk.7.ffn_down_shexp.weight", 2, {2048, 4096}, NF_ROLE_SHEXP},
        {"blk.45.nextn.eh_proj.weight", 2, {8192, 4096}, NF_ROLE_NEXTN_PROJ},
        {"blk.45.indexer_compressor_ape.weight", 2, {128, 4}, NF_ROLE_INDEXER_PARAM},
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        const nf_layout_tensor *f = NULL;
        for (int i = 0; i < n && !f; i++)
            if (!strcmp(t[i].name, want[k].name)) f = &t[i];
        cr_assert_not_null(f, "%s not in the layout", want[k].name);
        cr_expect_eq(f->n_dims, want[k].nd, "%s n_dims", want[k].name);
        for (uint32_t d = 0; d < want[k].nd; d++)
            cr_expect_eq(f->ne[d], want[k].ne[d], "%s ne[%u] = %lld", want[k].name, d, (long long)f->ne[d]);
        cr_expect_eq(f->role, want[k].role, "%s role %s", want[k].name, nf_role_name(f->role));
    }
    /* no MLA tensors on KDA layers and vice versa; names unique */
    for (int i = 0; i < n; i++) {
        if (t[i].layer == 0) cr_expect_null(strstr(t[i].name, "attn_q_a"), "%s", t[i].name);
        if (t[i].layer == 7) cr_expect_null(strstr(t[i].name, "ssm_"), "%s", t[i].name);
        for (int j = i + 1; j < n; j++) cr_assert_str_neq(t[i].name, t[j].name);
    }
    free(t);
}

Test(layout, rejects_bad_hparams) {
    nf_hparams hp;
    cr_assert_eq(nf_synth_preset("tiny", &hp), 0);
    hp.idx_topk = 18;   /* not a multiple of kpool 4 */
    cr_expect_eq(nf_layout_tensors(&hp, NULL, 0), -1);
    cr_expect(strstr(nf_error(), "top_k 18") != NULL, "%s", nf_error());
    cr_assert_eq(nf_synth_preset("tiny", &hp), 0);
    hp.n_embd = 0;
    cr_expect_eq(nf_layout_tensors(&hp, NULL, 0), -1);
    cr_expect(strstr(nf_error(), "n_embd") != NULL, "%s", nf_error());
    cr_expect_eq(nf_synth_preset("huge", &hp), -1);
}

/* ---- recipes ---- */

Test(recipe, table_and_fallback) {
    cr_expect_null(nf_recipe_find("q3"));
    cr_expect(strstr(nf_error(), "q4") != NULL, "%s", nf_error());
    cr_expect_not_null(nf_recipe_find("Q4"));
    cr_expect_eq(nf_type_fit(NF_TYPE_Q4_K, 4096), NF_TYPE_Q4_K);
    cr_expect_eq(nf_type_fit(NF_TYPE_Q4_K, 96), NF_TYPE_Q8_0);
    cr_expect_eq(nf_type_fit(NF_TYPE_IQ2_XXS, 100), NF_TYPE_BF16);
    cr_expect_eq(nf_type_fit(NF_TYPE_Q8_0, 64), NF_TYPE_Q8_0);
    cr_expect_eq(nf_type_fit(NF_TYPE_BF16, 3), NF_TYPE_BF16);

    nf_hparams hp;
    cr_assert_eq(nf_synth_preset("glm53", &hp), 0);
    int n;
    nf_layout_tensor *t = nf_layout_tensors_alloc(&hp, &n);
    const nf_recipe *q2 = nf_recipe_find("q2");
    for (int i = 0; i < n; i++) {
        bool fb;
        uint32_t ty = nf_recipe_type(q2, &t[i], &fb);
        cr_expect(!fb, "%s fell back", t[i].name);
        cr_expect(nf_layout_type_ok(t[i].role, ty, t[i].ne[0]), "%s: %s not accepted", t[i].name, nf_type_get(ty)->name);
        if (nf_role_is_param(t[i].role) || t[i].role == NF_ROLE_HC_FN || t[i].role == NF_ROLE_ROUTER ||
            t[i].role == NF_ROLE_INDEXER_SMALL)
            cr_expect_eq(ty, NF_TYPE_F32, "%s", t[i].name);
        else if (t[i].role == NF_ROLE_EXP_GATE || t[i].role == NF_ROLE_EXP_UP)
            cr_expect_eq(ty, NF_TYPE_IQ2_XXS, "%s", t[i].name);
        else if (t[i].role == NF_ROLE_EXP_DOWN)
            cr_expect_eq(ty, NF_TYPE_Q2_K, "%s", t[i].name);
        else
            cr_expect_eq(ty, NF_TYPE_Q8_0, "%s", t[i].name);
    }
    free(t);
}

/* ---- synth -> load, every recipe ---- */

static void check_recipe(const char *recipe) {
    char file[64];
    snprintf(file, sizeof file, "tiny-%s.gguf", recipe);
    const char *path = synth_tiny(recipe, file);
    nf_model *m = nf_model_load(path);
    cr_assert_not_null(m, "%s\n%s", nf_error(), nf_model_mismatches());
    nf_hparams want;
    nf_synth_preset("tiny", &want);
    expect_same_hparams(&m->hp, &want);

    int n;
    nf_layout_tensor *t = nf_layout_tensors_alloc(&want, &n);
    int trunk = 0, mtp = 0;
    const nf_recipe *r = nf_recipe_find(recipe);
    for (int i = 0; i < n; i++) {
        if (t[i].mtp) { mtp++; continue; }
        trunk++;
        const nf_tensor *b = bound(m, &t[i]);
        cr_expect_not_null(b->data, "%s not bound", t[i].name);
        cr_expect_str_eq(b->name, t[i].name);
        cr_expect_eq(b->type, nf_recipe_type(r, &t[i], NULL), "%s type %s", t[i].name, nf_type_get(b->type)->name);
    }
    cr_expect_eq(m->n_bound, trunk);
    cr_expect_eq(m->n_mtp_tensors, mtp);
    cr_expect_eq(m->n_extra_tensors, 0);
    cr_expect_not_null(m->layers[3].q_b.data);
    cr_expect_null(m->layers[3].kda_q.data, "MLA layer has no KDA tensors");
    cr_expect_null(m->layers[0].router.data, "dense layer has no router");
    free(t);
    nf_model_free(m);
}

Test(synth, f32_values_match_generator) {
    const char *path = synth_tiny("f32", "tiny-f32-values.gguf");
    nf_model *m = nf_model_load(path);
    cr_assert_not_null(m, "%s", nf_error());
    int n;
    nf_layout_tensor *t = nf_layout_tensors_alloc(&m->hp, &n);
    for (int i = 0; i < n; i++) {
        if (t[i].mtp) continue;
        const nf_tensor *b = bound(m, &t[i]);
        int64_t ne = nf_layout_nelements(&t[i]);
        float *v = malloc((size_t)ne * sizeof *v);
        nf_synth_values(&m->hp, &t[i], 7, 0, ne, v);
        cr_assert_eq(memcmp(v, b->data, (size_t)ne * 4), 0, "%s differs from the generator", t[i].name);
        for (int64_t k = 0; k < ne; k++) cr_assert(isfinite(v[k]), "%s[%lld] not finite", t[i].name, (long long)k);
        free(v);
    }
    /* a few distribution checks */
    cr_expect_eq(((const float *)m->layers[0].attn_norm.data)[5], 1.0f);
    const float *a = m->layers[0].kda_a.data;
    for (int h = 0; h < m->hp.kda_n_head; h++) cr_expect(a[h] < -0.5f && a[h] > -1.7f, "ssm_a[%d] = %g", h, a[h]);
    const float *dt = m->layers[0].kda_dt_bias.data;
    cr_expect(dt[0] < -2.0f && dt[0] > -7.5f, "dt_bias %g (inverse softplus of 1e-3..1e-1)", dt[0]);
    free(t);
    nf_model_free(m);
}

Test(synth, chunked_values_equal_whole) {
    nf_hparams hp;
    nf_synth_preset("tiny", &hp);
    int n;
    nf_layout_tensor *t = nf_layout_tensors_alloc(&hp, &n);
    const nf_layout_tensor *e = NULL;
    for (int i = 0; i < n; i++) if (t[i].role == NF_ROLE_EXP_UP) { e = &t[i]; break; }
    cr_assert_not_null(e);
    float whole[1000], part[1000];
    nf_synth_values(&hp, e, 3, 1001, 1000, whole);
    nf_synth_values(&hp, e, 3, 1001, 333, part);
    nf_synth_values(&hp, e, 3, 1334, 667, part + 333);
    cr_expect_eq(memcmp(whole, part, sizeof whole), 0);
    float other[1000];
    nf_synth_values(&hp, e, 4, 1001, 1000, other);
    cr_expect_neq(memcmp(whole, other, sizeof whole), 0, "seed must matter");
    double s = 0, s2 = 0;
    for (int k = 0; k < 1000; k++) { s += whole[k]; s2 += whole[k] * whole[k]; }
    double sd = sqrt(s2 / 1000), want = 1.0 / sqrt((double)e->ne[0]);
    cr_expect(fabs(s / 1000) < 0.2 * want && fabs(sd / want - 1) < 0.1, "mean %g sd %g want sd %g", s / 1000, sd, want);
    free(t);
}

Test(synth, load_f32) { check_recipe("f32"); }
Test(synth, load_bf16) { check_recipe("bf16"); }
Test(synth, load_q8) { check_recipe("q8"); }
Test(synth, load_q4) { check_recipe("q4"); }
Test(synth, load_q2) { check_recipe("q2"); }

Test(synth, recipe_types_in_file) {
    const char *path = synth_tiny("q2", "tiny-q2-types.gguf");
    nf_model *m = nf_model_load(path);
    cr_assert_not_null(m, "%s", nf_error());
    cr_expect_eq(type_of(m, "blk.1.ffn_gate_exps.weight"), NF_TYPE_IQ2_XXS);
    cr_expect_eq(type_of(m, "blk.1.ffn_up_exps.weight"), NF_TYPE_IQ2_XXS);
    cr_expect_eq(type_of(m, "blk.1.ffn_down_exps.weight"), NF_TYPE_Q2_K);
    cr_expect_eq(type_of(m, "blk.1.ffn_gate_shexp.weight"), NF_TYPE_Q8_0);
    cr_expect_eq(type_of(m, "blk.1.ffn_gate_inp.weight"), NF_TYPE_F32);
    cr_expect_eq(type_of(m, "blk.1.hc_attn_fn.weight"), NF_TYPE_F32);
    cr_expect_eq(type_of(m, "blk.3.indexer.proj.weight"), NF_TYPE_F32);
    cr_expect_eq(type_of(m, "blk.3.indexer.attn_k.weight"), NF_TYPE_Q8_0);
    cr_expect_eq(type_of(m, "token_embd.weight"), NF_TYPE_Q8_0);
    cr_expect_eq(type_of(m, "output_norm.weight"), NF_TYPE_F32);
    /* the MTP block is written too (ignored by the loader) */
    cr_expect_eq(type_of(m, "blk.4.ffn_down_exps.weight"), NF_TYPE_Q2_K);
    cr_expect_not_null(gguf_find_tensor(m->file, "blk.4.nextn.eh_proj.weight"));
    nf_model_free(m);
}

Test(synth, odd_dims_fall_back_and_load) {
    nf_hparams hp;
    nf_synth_preset("tiny", &hp);
    hp.n_embd = 96;       /* rows of 96: Q4_K/IQ2 (256) -> Q8_0 (32) */
    hp.n_ff_exp = 80;     /* rows of 80: Q2_K -> Q8_0 does not fit either -> BF16 */
    hp.n_vocab = 300;
    nf_synth_derive(&hp, 4);
    int fb = -1;
    const char *path = tmp_path("odd.gguf");
    cr_assert_eq(nf_synth_write(path, &hp, nf_recipe_find("q2"), 1, NULL, NULL, &fb), 0, "%s", nf_error());
    cr_expect_gt(fb, 0);
    nf_model *m = nf_model_load(path);
    cr_assert_not_null(m, "%s", nf_error());
    cr_expect_eq(m->hp.n_embd, 96);
    cr_expect_eq(m->hp.n_vocab, 300);
    cr_expect_eq(type_of(m, "blk.1.ffn_gate_exps.weight"), NF_TYPE_Q8_0);
    cr_expect_eq(type_of(m, "blk.1.ffn_down_exps.weight"), NF_TYPE_BF16);
    nf_model_free(m);
}

/* ---- mismatches ---- */

Test(model_load, wrong_shape_message) {
    const char *good = synth_tiny("f32", "good-shape.gguf");
    const char *bad = tmp_path("bad-shape.gguf");
    rewrite_spec rs = no_change();
    rs.tensor = "blk.3.attn_q_b.weight";
    rs.new_nd = 2;
    rs.new_ne[0] = 128; rs.new_ne[1] = 128; rs.new_ne[2] = rs.new_ne[3] = 1;
    rewrite(good, bad, &rs);
    cr_expect_null(nf_model_load(bad));
    cr_expect_str_eq(nf_error(), "blk.3.attn_q_b.weight: expected [128,256] got [128,128]");
    cr_expect_str_eq(nf_model_mismatches(), "blk.3.attn_q_b.weight: expected [128,256] got [128,128]\n");
}

Test(model_load, missing_tensor_and_wrong_type) {
    const char *good = synth_tiny("f32", "good-miss.gguf");
    const char *bad1 = tmp_path("missing.gguf"), *bad2 = tmp_path("missing-and-type.gguf");
    rewrite_spec rs = no_change();
    rs.tensor = "blk.0.ssm_g_b.weight";
    rs.drop = true;
    rewrite(good, bad1, &rs);
    rs = no_change();
    rs.tensor = "blk.2.attn_norm.weight";   /* norms must be F32 */
    rs.new_type = NF_TYPE_F16;
    rewrite(bad1, bad2, &rs);
    cr_expect_null(nf_model_load(bad2));
    const char *all = nf_model_mismatches();
    cr_expect(strstr(all, "blk.0.ssm_g_b.weight: missing (expected [64,256])\n") != NULL, "%s", all);
    cr_expect(strstr(all, "blk.2.attn_norm.weight: type f16 not allowed (norm tensors must be f32)\n") != NULL, "%s", all);
    cr_expect(strstr(nf_error(), "2 tensor mismatches") != NULL, "%s", nf_error());
    cr_expect(strstr(nf_error(), "blk.0.ssm_g_b.weight: missing") != NULL, "%s", nf_error());
}

Test(model_load, many_mismatches_fit_one_message) {
    /* a model written with a different hidden size: every n_embd-shaped tensor mismatches */
    nf_hparams hp;
    nf_synth_preset("tiny", &hp);
    hp.n_embd = 128;
    const char *a = tmp_path("embd128.gguf"), *b = tmp_path("embd128-bad.gguf");
    cr_assert_eq(nf_synth_write(a, &hp, nf_recipe_find("f32"), 1, NULL, NULL, NULL), 0, "%s", nf_error());
    rewrite_spec rs = no_change();
    rs.skip_key = "glm5-next.embedding_length";
    rs.set_f32_key = NULL;
    rewrite(a, b, &rs);
    /* put the key back with the wrong value through a second rewrite is not possible for u32 with this helper,
     * so check the missing-key path here and the mismatch list with an ffn width change below */
    cr_expect_null(nf_model_load(b));
    cr_expect(strstr(nf_error(), "missing metadata key glm5-next.embedding_length") != NULL, "%s", nf_error());

    hp.n_embd = 256;
    hp.n_ff_exp = 128;
    const char *c = tmp_path("ffexp128.gguf"), *d = tmp_path("ffexp128-bad.gguf");
    cr_assert_eq(nf_synth_write(c, &hp, nf_recipe_find("f32"), 1, NULL, NULL, NULL), 0, "%s", nf_error());
    rs = no_change();
    rs.skip_key = "glm5-next.expert_feed_forward_length";
    rs.set_f32_key = "glm5-next.expert_feed_forward_length";
    rs.set_f32_val = 256;
    rewrite(c, d, &rs);
    cr_expect_null(nf_model_load(d));
    const char *all = nf_model_mismatches();
    int lines = 0;
    for (const char *p = all; *p; p++) lines += *p == '\n';
    /* 3 MoE trunk layers x (3 expert tensors + 3 shared) */
    cr_expect_eq(lines, 18, "%s", all);
    cr_expect(strstr(all, "blk.1.ffn_down_exps.weight: expected [256,256,8] got [128,256,8]\n") != NULL, "%s", all);
    cr_expect(strlen(nf_error()) < 1000);
    cr_expect(strstr(nf_error(), "18 tensor mismatches") != NULL, "%s", nf_error());
}

Test(model_load, missing_key_named) {
    const char *good = synth_tiny("f32", "good-key.gguf");
    const char *keys[] = {"glm5-next.attention.indexer.kpool", "glm5-next.kda.head_dim", "glm5-next.block_count",
                          "glm5-next.hyper_connection.count", "glm5-next.swiglu_clamp_exp", "general.architecture"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        const char *bad = tmp_path("nokey.gguf");
        rewrite_spec rs = no_change();
        rs.skip_key = keys[k];
        rewrite(good, bad, &rs);
        cr_expect_null(nf_model_load(bad));
        char want[160];
        snprintf(want, sizeof want, "missing metadata key %s", keys[k]);
        cr_expect(strstr(nf_error(), want) != NULL, "%s: %s", keys[k], nf_error());
        unlink(bad);
    }
}

Test(model_load, optional_keys_default_and_scalars) {
    const char *good = synth_tiny("f32", "good-opt.gguf");
    const char *a = tmp_path("no-tail.gguf"), *b = tmp_path("scalar-clamp.gguf");
    rewrite_spec rs = no_change();
    rs.skip_key = "glm5-next.attention.indexer.kpool_select_tail";
    rewrite(good, a, &rs);
    nf_model *m = nf_model_load(a);
    cr_assert_not_null(m, "%s", nf_error());
    cr_expect(m->hp.idx_select_tail, "kpool_select_tail defaults to true");
    cr_expect_eq(m->hp.kda_n_head, m->hp.n_head, "kda.head_count defaults to attention.head_count");
    cr_expect_eq(m->hp.indexer_shared[3], 0, "indexer.types defaults to full");
    nf_model_free(m);

    rs = no_change();
    rs.skip_key = "glm5-next.swiglu_clamp_exp";
    rs.set_f32_key = "glm5-next.swiglu_clamp_exp";
    rs.set_f32_val = 7.0f;
    rewrite(good, a, &rs);
    rs = no_change();
    rs.skip_key = "glm5-next.swiglu_clamp_shexp";
    rewrite(a, b, &rs);
    m = nf_model_load(b);
    cr_assert_not_null(m, "%s", nf_error());
    cr_expect_eq(m->hp.swiglu_limit, 7.0f, "scalar swiglu_clamp_exp");
    nf_model_free(m);

    rs = no_change();
    rs.skip_key = "glm5-next.attention.head_count_kv";   /* scalar 0: every layer KDA -> MLA tensors unexpected */
    rs.set_f32_key = "glm5-next.attention.head_count_kv";
    rs.set_f32_val = 0;
    rewrite(good, a, &rs);
    cr_expect_null(nf_model_load(a));
    cr_expect(strstr(nf_model_mismatches(), "blk.3.attn_q.weight: missing") != NULL, "%s", nf_model_mismatches());
}

Test(model_load, not_glm5_next) {
    const char *good = synth_tiny("f32", "good-arch.gguf");
    const char *bad = tmp_path("arch.gguf");
    gguf_file *f = gguf_open(good);
    cr_assert_not_null(f);
    gguf_close(f);
    rewrite_spec rs = no_change();
    rs.skip_key = "general.architecture";
    rewrite(good, bad, &rs);
    cr_expect_null(nf_model_load(bad));
    cr_expect(strstr(nf_error(), "general.architecture") != NULL, "%s", nf_error());
    cr_expect_null(nf_model_load(tmp_path("does-not-exist.gguf")));
}

Test(model_load, shared_indexer_layout) {
    nf_hparams hp;
    nf_synth_preset("tiny", &hp);
    hp.n_layer = 8;
    nf_synth_derive(&hp, 4);
    hp.indexer_shared[7] = 1;
    const char *p = tmp_path("shared-idx.gguf");
    cr_assert_eq(nf_synth_write(p, &hp, nf_recipe_find("bf16"), 1, NULL, NULL, NULL), 0, "%s", nf_error());
    nf_model *m = nf_model_load(p);
    cr_assert_not_null(m, "%s", nf_error());
    cr_expect_eq(m->hp.indexer_shared[7], 1);
    cr_expect_eq(m->hp.indexer_shared[3], 0);
    cr_expect_not_null(m->layers[3].idx_q_b.data);
    cr_expect_null(m->layers[7].idx_q_b.data);
    cr_expect_not_null(m->layers[7].q_b.data);
    nf_model_free(m);
}

/* ---- the programs ---- */

Test(model_tools, synth_and_info) {
    char cmd[1024], out[8192];
    const char *p = tmp_path("tool-tiny.gguf");
    snprintf(cmd, sizeof cmd, "%s/nf-synth --out %s --recipe q4 --seed 3 --quiet 2>&1", build_dir(), p);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    snprintf(cmd, sizeof cmd, "%s/nf info %s 2>&1", build_dir(), p);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "kKKM") != NULL, "%s", out);
    cr_expect(strstr(out, "q4_K") != NULL, "%s", out);
    cr_expect(strstr(out, "MTP") != NULL, "%s", out);

    snprintf(cmd, sizeof cmd, "%s/nf-synth --out %s --recipe q4 --hidden abc 2>&1", build_dir(), p);
    cr_expect_neq(run_cmd(cmd, out, sizeof out), 0);
    cr_expect(strstr(out, "--hidden") != NULL, "%s", out);
    snprintf(cmd, sizeof cmd, "%s/nf-synth --out %s --recipe q5 2>&1", build_dir(), p);
    cr_expect_neq(run_cmd(cmd, out, sizeof out), 0);
    cr_expect(strstr(out, "--recipe") != NULL, "%s", out);
    snprintf(cmd, sizeof cmd, "%s/nf-synth --out %s --recipe q4 --topk 10 2>&1", build_dir(), p);
    cr_expect_neq(run_cmd(cmd, out, sizeof out), 0);
    cr_expect(strstr(out, "--topk") != NULL, "%s", out);
    snprintf(cmd, sizeof cmd, "%s/nf-synth --preset glm53 --recipe q4 --dry-run 2>&1", build_dir());
    cr_expect_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "1412 tensors") != NULL, "%s", out);
    snprintf(cmd, sizeof cmd, "%s/nf-synth --preset glm53 --layers 2 --experts 4 --vocab 512 --recipe bf16 --dry-run 2>&1", build_dir());
    cr_expect_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
}

Test(model_tools, synth_same_bytes_any_thread_count) {
    char cmd[1024], out[4096];
    const char *a = tmp_path("th1.gguf"), *b = tmp_path("th3.gguf");
    snprintf(cmd, sizeof cmd, "NF_THREADS=1 %s/nf-synth --out %s --recipe q4 --seed 9 --quiet 2>&1", build_dir(), a);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    snprintf(cmd, sizeof cmd, "NF_THREADS=3 %s/nf-synth --out %s --recipe q4 --seed 9 --quiet 2>&1", build_dir(), b);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    snprintf(cmd, sizeof cmd, "cmp %s %s 2>&1", a, b);
    cr_expect_eq(run_cmd(cmd, out, sizeof out), 0, "files differ: %s", out);
}

Test(model_load, conv_2d_shape_and_extra_tensor) {
    const char *good = synth_tiny("f32", "good-conv.gguf");
    const char *a = tmp_path("conv2d.gguf"), *b = tmp_path("conv2d-extra.gguf");
    rewrite_spec rs = no_change();
    rs.tensor = "blk.0.ssm_conv1d_q.weight";
    rs.new_nd = 2;
    rs.new_ne[0] = 4; rs.new_ne[1] = 256; rs.new_ne[2] = rs.new_ne[3] = 1;
    rewrite(good, a, &rs);
    rs = no_change();
    rs.add_tensor = "blk.1.something_new.weight";
    rewrite(a, b, &rs);
    nf_model *m = nf_model_load(b);
    cr_assert_not_null(m, "%s", nf_error());
    const nf_tensor *c = &m->layers[0].kda_conv_q;
    cr_expect_eq(c->n_dims, 3);
    cr_expect(c->ne[0] == 4 && c->ne[1] == 1 && c->ne[2] == 256, "[%lld,%lld,%lld]", (long long)c->ne[0],
              (long long)c->ne[1], (long long)c->ne[2]);
    cr_expect_eq(m->n_extra_tensors, 1);
    nf_model_free(m);
    /* {conv, inner} with the wrong inner size is still a mismatch */
    rs = no_change();
    rs.tensor = "blk.0.ssm_conv1d_k.weight";
    rs.new_nd = 2;
    rs.new_ne[0] = 4; rs.new_ne[1] = 128; rs.new_ne[2] = rs.new_ne[3] = 1;
    rewrite(good, a, &rs);
    cr_expect_null(nf_model_load(a));
    cr_expect_str_eq(nf_error(), "blk.0.ssm_conv1d_k.weight: expected [4,1,256] got [4,128]");
}
