/* test_convert.c — the converter's C pieces: safetensors validation and FP8 decoding, config.json rules, and
 * whole conversions of the committed fixtures (tests/data/convert) that must load with nf_model_load.
 * The tensor-by-tensor value checks are in tests/py/test_convert.py. */
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "convert/convert.h"
#include "convert/hf_config.h"
#include "convert/safetensors.h"
#include "model/model.h"
#include "util/error.h"

/* Build a safetensors image from a header string and a data blob. */
static size_t image(uint8_t *buf, const char *hdr, const void *data, size_t n) {
    uint64_t h = strlen(hdr);
    memcpy(buf, &h, 8);
    memcpy(buf + 8, hdr, h);
    if (n) memcpy(buf + 8 + h, data, n);
    return 8 + h + n;
}

static void expect_bad(const char *hdr, size_t data_len, const char *needle) {
    uint8_t buf[4096], data[512] = {0};
    size_t n = image(buf, hdr, data, data_len);
    st_checkpoint *c = st_open_memory(buf, n);
    cr_assert_null(c, "accepted: %s", hdr);
    cr_assert(strstr(nf_error(), needle), "message '%s' lacks '%s'", nf_error(), needle);
}

Test(safetensors, f8_e4m3_values) {
    cr_assert_eq(st_f8_e4m3_to_f32(0x38), 1.0f);
    cr_assert_eq(st_f8_e4m3_to_f32(0x40), 2.0f);
    cr_assert_eq(st_f8_e4m3_to_f32(0x7e), 448.0f);
    cr_assert_eq(st_f8_e4m3_to_f32(0xfe), -448.0f);
    cr_assert_eq(st_f8_e4m3_to_f32(0x01), ldexpf(1.0f, -9));
    cr_assert_eq(st_f8_e4m3_to_f32(0x08), ldexpf(1.0f, -6));
    cr_assert(isnan(st_f8_e4m3_to_f32(0x7f)) && isnan(st_f8_e4m3_to_f32(0xff)));
    cr_assert_eq(st_f8_e4m3_to_f32(0x80), 0.0f);
}

Test(safetensors, valid_image) {
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t b[2] = {0x3f80, 0xc000}; /* bf16 1.0, -2.0 */
    uint8_t data[28];
    memcpy(data, a, 24);
    memcpy(data + 24, b, 4);
    uint8_t buf[1024];
    size_t n = image(buf,
                     "{\"__metadata__\":{\"format\":\"pt\"},\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                     "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[24,28]}}",
                     data, 28);
    st_checkpoint *c = st_open_memory(buf, n);
    cr_assert_not_null(c, "%s", nf_error());
    cr_assert_eq(st_count(c), 2);
    const st_tensor *w = st_find(c, "w");
    cr_assert_not_null(w);
    cr_assert_eq(w->n_dims, 2);
    cr_assert_eq(w->shape[0], 2);
    cr_assert_eq(w->shape[1], 3);
    float out[6];
    cr_assert_eq(st_read_f32(c, w, 1, 4, out), 0);
    cr_assert_eq(out[0], 2.0f);
    cr_assert_eq(out[3], 5.0f);
    cr_assert_eq(st_read_f32(c, w, 4, 4, out), -1, "read past the end accepted");
    const st_tensor *bt = st_find(c, "b");
    cr_assert_eq(st_read_f32(c, bt, 0, 2, out), 0);
    cr_assert_eq(out[0], 1.0f);
    cr_assert_eq(out[1], -2.0f);
    cr_assert_null(st_find(c, "nope"));
    st_close(c);
}

Test(safetensors, rejects_corrupt) {
    uint8_t tiny[4] = {1, 2, 3, 4};
    cr_assert_null(st_open_memory(tiny, 4));
    cr_assert(strstr(nf_error(), "too small"));
    uint8_t big[16] = {0xff, 0xff, 0xff, 0, 0, 0, 0, 0, '{', '}'};
    cr_assert_null(st_open_memory(big, 16));
    cr_assert(strstr(nf_error(), "header length"));
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]", 8, "JSON");
    expect_bad("[1,2]", 0, "not an object");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "needs 12");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, "past the data section");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0, "shape[0]");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "begin");
    expect_bad("{\"w\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "dtype");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"v\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlapping");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, "JSON");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}", 8,
               "overflows");
}

Test(safetensors, unknown_dtype_listed_not_readable) {
    uint8_t buf[256], d[4] = {0};
    size_t n = image(buf, "{\"z\":{\"dtype\":\"F4_NEW\",\"shape\":[4],\"data_offsets\":[0,2]}}", d, 2);
    st_checkpoint *c = st_open_memory(buf, n);
    cr_assert_not_null(c, "%s", nf_error());
    float out[4];
    cr_assert_eq(st_read_f32(c, st_find(c, "z"), 0, 4, out), -1);
    cr_assert(strstr(nf_error(), "F4_NEW"), "%s", nf_error());
    st_close(c);
}

/* FP8 [130, 3] with scales [2, 1]: rows 0..127 use 0.5, rows 128..129 use 2.0 (a partial block). */
Test(safetensors, fp8_block_scales) {
    uint8_t data[130 * 3 + 8];
    for (int i = 0; i < 390; i++) data[i] = (uint8_t)(i * 37 % 126);
    float s[2] = {0.5f, 2.0f};
    memcpy(data + 390, s, 8);
    uint8_t buf[2048];
    size_t n = image(buf,
                     "{\"x.weight\":{\"dtype\":\"F8_E4M3\",\"shape\":[130,3],\"data_offsets\":[0,390]},"
                     "\"x.weight_scale_inv\":{\"dtype\":\"F32\",\"shape\":[2,1],\"data_offsets\":[390,398]}}",
                     data, 398);
    st_checkpoint *c = st_open_memory(buf, n);
    cr_assert_not_null(c, "%s", nf_error());
    const st_tensor *t = st_find(c, "x.weight");
    cr_assert_eq(st_check_readable(c, t), 0, "%s", nf_error());
    float out[390];
    cr_assert_eq(st_read_f32(c, t, 0, 390, out), 0, "%s", nf_error());
    for (int i = 0; i < 390; i++)
        cr_assert_eq(out[i], st_f8_e4m3_to_f32(data[i]) * (i / 3 < 128 ? 0.5f : 2.0f), "element %d", i);
    float part[5];
    cr_assert_eq(st_read_f32(c, t, 383, 5, part), 0); /* crosses the block boundary mid-row range */
    for (int i = 0; i < 5; i++) cr_assert_eq(part[i], out[383 + i]);
    st_close(c);
    /* wrong scale shape */
    n = image(buf,
              "{\"x.weight\":{\"dtype\":\"F8_E4M3\",\"shape\":[130,3],\"data_offsets\":[0,390]},"
              "\"x.weight_scale_inv\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[390,398]}}",
              data, 398);
    c = st_open_memory(buf, n);
    cr_assert_not_null(c);
    cr_assert_eq(st_check_readable(c, st_find(c, "x.weight")), -1);
    cr_assert(strstr(nf_error(), "do not match"), "%s", nf_error());
    st_close(c);
}

static const char *flat_cfg =
    "{\"model_type\":\"glm5_next_text\",\"num_hidden_layers\":8,\"hidden_size\":64,\"vocab_size\":32,"
    "\"num_attention_heads\":2,\"intermediate_size\":64,\"moe_intermediate_size\":16,\"kv_lora_rank\":32,"
    "\"q_lora_rank\":32,\"qk_nope_head_dim\":16,\"v_head_dim\":16,\"n_routed_experts\":4,\"num_experts_per_tok\":2,"
    "\"index_topk\":32,\"pad_token_id\":0,\"eos_token_id\":[1,2],\"index_topk_pattern\":\"FFFFFFFS\","
    "\"linear_attn_config\":{\"head_dim\":8,\"num_heads\":4,\"short_conv_kernel_size\":3}%s}";

static int parse_with(const char *extra, nf_hf_config *cfg) {
    char buf[2048];
    snprintf(buf, sizeof buf, flat_cfg, extra);
    return nf_hf_config_parse(buf, strlen(buf), cfg);
}

Test(hf_config, flat_defaults_like_hf) {
    nf_hf_config cfg;
    cr_assert_eq(parse_with("", &cfg), 0, "%s", nf_error());
    const nf_hparams *hp = &cfg.hp;
    cr_assert_eq(hp->n_layer, 8);
    cr_assert_eq(hp->idx_kpool, 16, "HF default index_kpool is 16");
    cr_assert(strstr(cfg.defaulted, "index_kpool"));
    cr_assert_eq(hp->kda_n_head, 4);
    cr_assert_eq(hp->kda_head_dim, 8);
    cr_assert_eq(hp->kda_conv, 3);
    cr_assert_eq(hp->kda_gate_rank, 8);
    cr_assert_float_eq(hp->kda_gate_lower_bound, -5.0f, 1e-6);
    cr_assert_eq(hp->n_dense_lead, 3);
    for (int i = 0; i < 8; i++) {
        cr_assert_eq(hp->layer_kind[i], i % 4 == 3 ? NF_LAYER_MLA : NF_LAYER_KDA);
        cr_assert_eq(hp->layer_moe[i], i >= 3);
    }
    cr_assert_eq(hp->indexer_shared[7], 1, "index_topk_pattern S on an MLA layer");
    cr_assert_eq(hp->indexer_shared[3], 0);
    cr_assert_eq(hp->eos_id, 1);
    cr_assert_eq(cfg.n_eos, 2);
    cr_assert_eq(hp->bos_id, -1);
    cr_assert_eq(hp->hc_count, 4);
    cr_assert_eq(hp->hc_sinkhorn_iters, 20);
    cr_assert_float_eq(hp->expert_weights_scale, 2.5f, 1e-6);
    cr_assert_float_eq(hp->swiglu_limit, 10.0f, 1e-6);
    cr_assert_float_eq(hp->indexer_ln_eps, 1e-6f, 1e-12);
    cr_assert_eq(hp->n_nextn, 0);
    cr_assert(!cfg.fp8);
}

Test(hf_config, refusals_name_the_field) {
    static const struct { const char *extra, *needle; } cases[] = {
        {",\"qk_rope_head_dim\":64", "qk_rope_head_dim = 64"},
        {",\"hc_mult\":2", "hc_mult = 2"},
        {",\"scoring_func\":\"softmax\"", "scoring_func"},
        {",\"topk_method\":\"greedy\"", "topk_method"},
        {",\"layer_types\":[\"linear_attention\",\"x\",\"linear_attention\",\"linear_attention\",\"linear_attention\","
         "\"linear_attention\",\"linear_attention\",\"linear_attention\"]", "layer_types[1] = \"x\""},
        {",\"mlp_layer_types\":[\"sparse\",\"dense\",\"sparse\",\"sparse\",\"sparse\",\"sparse\",\"sparse\",\"sparse\"]",
         "mlp_layer_types[1]"},
        {",\"quantization_config\":{\"quant_method\":\"fp8\",\"weight_block_size\":[1,128]}", "weight_block_size"},
        {",\"quantization_config\":{\"quant_method\":\"awq\"}", "quant_method = awq"},
        {",\"index_kpool\":5", "not divisible"},
        {",\"num_key_value_heads\":1", "num_key_value_heads"},
        {",\"attention_bias\":true", "attention_bias"},
        {",\"index_kpool_compress\":false", "index_kpool_compress"},
        {",\"hidden_act\":\"gelu\"", "hidden_act"},
        {",\"indexer_types\":[\"full\",\"full\",\"full\",\"sometimes\",\"full\",\"full\",\"full\",\"full\"]",
         "indexer_types[3]"},
        {",\"n_group\":2,\"topk_group\":1", "topk_group"},
        {",\"eos_token_id\":\"x\"", "eos_token_id"},
        {",\"rms_norm_eps\":\"small\"", "rms_norm_eps"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        nf_hf_config cfg;
        cr_assert_eq(parse_with(cases[i].extra, &cfg), -1, "accepted %s", cases[i].extra);
        cr_assert(strstr(nf_error(), cases[i].needle), "'%s' lacks '%s'", nf_error(), cases[i].needle);
    }
    nf_hf_config cfg;
    const char *missing = "{\"model_type\":\"glm5_next\",\"text_config\":{\"num_hidden_layers\":2}}";
    cr_assert_eq(nf_hf_config_parse(missing, strlen(missing), &cfg), -1);
    cr_assert(strstr(nf_error(), "text_config.hidden_size"), "%s", nf_error());
    cr_assert_eq(nf_hf_config_parse("{\"model_type\":\"llama\"}", 22, &cfg), -1);
    cr_assert(strstr(nf_error(), "llama"));
}

Test(convert, fixtures_load_with_nf_model_load, .timeout = 120) {
    static const char *const fx[] = {"tests/data/convert/fp8", "tests/data/convert/bf16", "tests/data/convert/fused"};
    static const char *const recipes[] = {"q4", "q2", "f32"};
    char out[256];
    for (int i = 0; i < 3; i++) {
        snprintf(out, sizeof out, "/tmp/nf-test-convert-%d-%d.gguf", (int)getpid(), i);
        nf_convert_opts o = {.hf_dir = fx[i], .out_path = out, .recipe = recipes[i], .n_threads = 2, .quiet = true};
        nf_convert_stats st;
        cr_assert_eq(nf_convert(&o, &st), 0, "%s: %s", fx[i], nf_error());
        cr_assert_gt(st.n_tensors, 50);
        if (i == 0) {
            cr_assert_eq(st.n_skipped_mtp, 6);
            cr_assert_eq(st.n_ignored_vision, 1);
        }
        cr_assert_eq(st.n_unused, 0);
        nf_model *m = nf_model_load(out);
        cr_assert_not_null(m, "%s: %s", fx[i], nf_error());
        nf_model_free(m);
        unlink(out);
    }
}

Test(convert, cancel_leaves_no_file) {
    char out[256], tmp[300];
    snprintf(out, sizeof out, "/tmp/nf-test-convert-cancel-%d.gguf", (int)getpid());
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    volatile sig_atomic_t stop = 1;
    nf_convert_opts o = {.hf_dir = "tests/data/convert/fused", .out_path = out, .recipe = "q8", .quiet = true,
                         .cancel = &stop};
    cr_assert_eq(nf_convert(&o, NULL), -1);
    cr_assert(strstr(nf_error(), "interrupted"), "%s", nf_error());
    cr_assert_neq(access(out, F_OK), 0);
    cr_assert_neq(access(tmp, F_OK), 0);
}
