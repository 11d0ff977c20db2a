/* test_synth_model.c — synthetic models made in memory (src/model/synth_model.c): spec parsing, HOST mode equal
 * to the file nf-synth writes (every tensor's bytes, the binding, the byte counts), DEVICE mode marking exactly
 * the large matrices virtual and never touching their pages, the pools' statistics, and the CPU forward of a
 * materialized DEVICE-mode model (the bytes the GPU makes) staying finite, also 45 layers deep. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cpu/backend_cpu.h"
#include "formats/formats.h"
#include "model/forward.h"
#include "model/layout.h"
#include "model/model.h"
#include "model/recipe.h"
#include "model/state.h"
#include "model/synth.h"
#include "score/score.h"
#include "util/error.h"

TestSuite(synth_model);

Test(synth_model, spec_parse) {
    nf_hparams hp;
    const nf_recipe *r = NULL;
    cr_assert_eq(nf_synth_spec_parse("glm53:q2", &hp, &r), 0, "%s", nf_error());
    cr_expect_eq(hp.n_layer, 45);
    cr_expect_eq(hp.n_embd, 4096);
    cr_expect_eq(hp.n_expert, 288);
    cr_expect_str_eq(r->name, "q2");
    cr_assert_eq(nf_synth_spec_parse("tiny:F32", &hp, &r), 0, "%s", nf_error());
    cr_expect_eq(hp.n_embd, 256);
    cr_expect_str_eq(r->name, "f32");
    cr_expect_eq(hp.n_layer_total, hp.n_layer + hp.n_nextn, "derived arrays filled");

    const char *bad[] = {"glm53", "glm53:", ":q2", "", "glm53-q2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_expect_eq(nf_synth_spec_parse(bad[i], &hp, &r), -1, "%s accepted", bad[i]);
        cr_expect(strstr(nf_error(), "expected PRESET:RECIPE"), "%s: %s", bad[i], nf_error());
    }
    cr_expect_eq(nf_synth_spec_parse("glm53:q3", &hp, &r), -1);
    cr_expect(strstr(nf_error(), "unknown recipe \"q3\""), "%s", nf_error());
    cr_expect_eq(nf_synth_spec_parse("huge:q2", &hp, &r), -1);
    cr_expect(strstr(nf_error(), "unknown preset \"huge\""), "%s", nf_error());
    cr_expect_eq(nf_synth_spec_parse(NULL, &hp, &r), -1);
}

/* PRESET@N: the preset's first N trunk layers with the full model's kinds (MLA every 4th, the dense lead). */
Test(synth_model, spec_parse_layers) {
    nf_hparams full, hp;
    const nf_recipe *r = NULL;
    cr_assert_eq(nf_synth_spec_parse("glm53:q2", &full, &r), 0, "%s", nf_error());
    cr_assert_eq(nf_synth_spec_parse("glm53@32:q2", &hp, &r), 0, "%s", nf_error());
    cr_expect_eq(hp.n_layer, 32);
    cr_expect_eq(hp.n_layer_total, 32 + full.n_nextn);
    cr_expect_eq(hp.n_embd, full.n_embd);
    cr_expect_eq(hp.n_expert, full.n_expert);
    cr_expect_str_eq(r->name, "q2");
    for (int i = 0; i < 32; i++) {
        cr_expect_eq(hp.layer_kind[i], full.layer_kind[i], "layer %d kind", i);
        cr_expect_eq(hp.layer_moe[i], full.layer_moe[i], "layer %d moe", i);
    }
    for (int i = 32; i < NF_MAX_LAYERS; i++) cr_expect_eq(hp.layer_kind[i], 0, "layer %d beyond the trunk", i);
    cr_assert_eq(nf_synth_spec_parse("tiny@2:f32", &hp, &r), 0, "%s", nf_error());
    cr_expect_eq(hp.n_layer, 2);
    cr_expect_eq(hp.n_embd, 256);
    cr_assert_eq(nf_synth_spec_parse("glm53@45:q2", &hp, &r), 0, "%s", nf_error());
    cr_expect_eq(memcmp(&hp, &full, sizeof hp), 0, "@45 is the full preset");

    struct { const char *spec, *why; } bad[] = {
        {"glm53@:q2", "expected PRESET@LAYERS"}, {"glm53@0:q2", "expected PRESET@LAYERS"},
        {"glm53@x:q2", "expected PRESET@LAYERS"}, {"glm53@3x:q2", "expected PRESET@LAYERS"},
        {"glm53@46:q2", "has 45 trunk layers"}, {"glm53@3:q2", "keeps only dense layers"},
        {"tiny@1:f32", "keeps only dense layers"}, {"huge@4:q2", "unknown preset \"huge\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_expect_eq(nf_synth_spec_parse(bad[i].spec, &hp, &r), -1, "%s accepted", bad[i].spec);
        cr_expect(strstr(nf_error(), bad[i].why), "%s: %s", bad[i].spec, nf_error());
    }
}

/* HOST mode == load(nf_synth_write(...)): same hparams, same tensors bound with the same types, shapes and bytes. */
static void host_equals_file(const char *recipe) {
    nf_hparams hp;
    cr_assert_eq(nf_synth_preset("tiny", &hp), 0);
    const nf_recipe *r = nf_recipe_find(recipe);
    char path[128];
    snprintf(path, sizeof path, "/tmp/nf-test-synth-model-%d-%s.gguf", (int)getpid(), recipe);
    cr_assert_eq(nf_synth_write(path, &hp, r, 5, NULL, NULL, NULL), 0, "%s", nf_error());
    nf_model *f = nf_model_load(path);
    unlink(path);
    cr_assert_not_null(f, "%s", nf_error());
    nf_model *m = nf_synth_model_create(&hp, r, 5, NF_SYNTH_HOST);
    cr_assert_not_null(m, "%s", nf_error());
    cr_expect_null(m->file);
    cr_assert_not_null(m->synth);
    cr_expect_eq(m->synth->n_virtual, 0);

    cr_expect_eq(m->hp.n_layer, f->hp.n_layer);
    cr_expect_eq(m->hp.n_embd, f->hp.n_embd);
    cr_expect_eq(memcmp(m->hp.layer_kind, f->hp.layer_kind, sizeof m->hp.layer_kind), 0);
    cr_expect_eq(memcmp(m->hp.layer_moe, f->hp.layer_moe, sizeof m->hp.layer_moe), 0);
    cr_expect_eq(m->n_bound, f->n_bound);
    cr_expect_eq(m->n_mtp_tensors, f->n_mtp_tensors);
    cr_expect_eq(m->n_mtp_bound, f->n_mtp_bound);

    int n;
    nf_layout_tensor *lt = nf_layout_tensors_alloc(&hp, &n);
    int differ = 0;
    for (int i = 0; i < n; i++) {
        const nf_tensor *a = nf_layout_bound(m, &lt[i]), *b = nf_layout_bound(f, &lt[i]);
        cr_assert(a && b && a->data && b->data, "%s unbound", lt[i].name);
        cr_expect_str_eq(a->name, b->name);
        cr_expect_eq(a->type, b->type, "%s: type %u vs %u", lt[i].name, a->type, b->type);
        cr_expect_eq(memcmp(a->ne, b->ne, sizeof a->ne), 0, "%s shape", lt[i].name);
        uint64_t bytes = nf_tensor_bytes(a);
        cr_expect_eq(bytes, nf_tensor_bytes(b));
        cr_expect_eq(bytes, gguf_find_tensor(f->file, lt[i].name)->size, "%s size", lt[i].name);
        if (memcmp(a->data, b->data, bytes)) {
            differ++;
            cr_expect_fail("%s (%s): bytes differ from the file's", lt[i].name, recipe);
        }
    }
    cr_expect_eq(differ, 0);
    free(lt);
    cr_expect_eq(nf_model_tensor_bytes(m, true), nf_model_tensor_bytes(f, true));
    cr_expect_eq(nf_model_tensor_bytes(m, true), m->synth->tensor_bytes);
    cr_expect_lt(nf_model_tensor_bytes(m, false), nf_model_tensor_bytes(m, true), "MTP block counted separately");
    cr_expect_eq(nf_score_weight_bytes_per_token(m), nf_score_weight_bytes_per_token(f));
    cr_expect_gt(nf_score_weight_bytes_per_token(m), 0);
    nf_model_free(m);
    nf_model_free(f);
}

Test(synth_model, host_equals_file_f32) { host_equals_file("f32"); }
Test(synth_model, host_equals_file_bf16) { host_equals_file("bf16"); }
Test(synth_model, host_equals_file_q8) { host_equals_file("q8"); }
Test(synth_model, host_equals_file_q4) { host_equals_file("q4"); }
Test(synth_model, host_equals_file_q2) { host_equals_file("q2"); }

/* pages of [p, p + n) resident in memory */
static size_t resident_pages(const void *p, size_t n) {
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)p / (uintptr_t)page * (uintptr_t)page, hi = (uintptr_t)p + n;
    size_t np = (hi - lo + (uintptr_t)page - 1) / (uintptr_t)page;
    unsigned char *vec = malloc(np);
    cr_assert_eq(mincore((void *)lo, hi - lo, vec), 0);
    size_t r = 0;
    for (size_t i = 0; i < np; i++) r += vec[i] & 1;
    free(vec);
    return r;
}

static void device_marks_large(const char *recipe, size_t host_max) {
    nf_hparams hp;
    cr_assert_eq(nf_synth_preset("tiny", &hp), 0);
    const nf_recipe *r = nf_recipe_find(recipe);
    nf_model *d = nf_synth_model_create_ex(&hp, r, 9, NF_SYNTH_DEVICE, host_max);
    cr_assert_not_null(d, "%s", nf_error());
    nf_model *h = nf_synth_model_create(&hp, r, 9, NF_SYNTH_HOST);
    cr_assert_not_null(h, "%s", nf_error());
    const nf_synth *s = d->synth;
    int n_virt = 0, n_big_matrices = 0;
    for (int i = 0; i < s->n_tensors; i++) {
        const nf_layout_tensor *lt = &s->layout[i];
        const nf_synth_tensor *t = &s->tensors[i];
        bool big_matrix = t->bytes > host_max && !nf_role_is_param(lt->role);
        n_big_matrices += big_matrix;
        cr_expect_eq(t->virt, big_matrix, "%s (%llu bytes, %s): virtual %d", lt->name, (unsigned long long)t->bytes,
                     nf_role_name(lt->role), t->virt);
        cr_expect_eq(t->offset % NF_SYNTH_ALIGN, 0);
        const nf_tensor *bd = nf_layout_bound(d, lt), *bh = nf_layout_bound(h, lt);
        cr_expect_eq(bd->type, bh->type);
        cr_expect_eq(nf_synth_find(s, bd->data), t, "%s: find", lt->name);
        if (t->virt) {
            n_virt++;
            cr_expect_eq(resident_pages(bd->data, t->bytes), 0, "%s: virtual tensor's pages were touched", lt->name);
            double sigma;
            cr_assert(nf_synth_sigma(&s->hp, lt, &sigma));
            cr_expect_eq(s->pools[t->pool].sigma, (float)sigma);
            cr_expect_eq(s->pools[t->pool].type, t->type);
        } else {
            cr_expect_eq(memcmp(bd->data, bh->data, t->bytes), 0, "%s: host tensor differs from HOST mode", lt->name);
        }
    }
    cr_expect_gt(n_virt, 10, "threshold %zu made only %d tensors virtual", host_max, n_virt);
    cr_expect_eq(n_virt, s->n_virtual);
    cr_expect_eq(n_virt, n_big_matrices);
    nf_model_free(d);
    nf_model_free(h);
}

Test(synth_model, device_marks_large_q2) { device_marks_large("q2", 16 << 10); }
Test(synth_model, device_marks_large_f32) { device_marks_large("f32", 64 << 10); }
Test(synth_model, device_default_threshold_keeps_tiny_on_host) {
    nf_hparams hp;
    const nf_recipe *r;
    cr_assert_eq(nf_synth_spec_parse("tiny:q2", &hp, &r), 0);
    nf_model *d = nf_synth_model_create(&hp, r, 1, NF_SYNTH_DEVICE);
    cr_assert_not_null(d, "%s", nf_error());
    cr_expect_eq(d->synth->n_virtual, 0, "every tiny tensor is below NF_SYNTH_HOST_MAX");
    nf_model_free(d);
}

static long rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld", &v) == 1) break;
    if (f) fclose(f);
    return v;
}

/* The released widths with 4 layers (two of them MoE with 288 experts): a ~14 GB region of which only the small
 * tensors are ever in memory. */
/* Refusals: a DEVICE model on the CPU backend, the released size in HOST mode or materialized (more than this
 * machine's memory: the tests run on machines far below 97 GB). */
Test(synth_model, refusals) {
    nf_hparams hp;
    const nf_recipe *r;
    cr_assert_eq(nf_synth_spec_parse("tiny:q8", &hp, &r), 0);
    nf_model *d = nf_synth_model_create_ex(&hp, r, 1, NF_SYNTH_DEVICE, 16 << 10);
    cr_assert_not_null(d);
    cr_expect_null(nf_cpu_backend_create(d, 1));
    cr_expect(strstr(nf_error(), "made only on the GPU"), "%s", nf_error());
    nf_model_free(d);
    cr_assert_eq(nf_synth_spec_parse("glm53:q2", &hp, &r), 0);
    if ((double)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE) > 120e9) return;   /* a big machine could hold it */
    cr_expect_null(nf_synth_model_create(&hp, r, 1, NF_SYNTH_HOST));
    cr_expect(strstr(nf_error(), "97.62 GB of tensors on the host in NF_SYNTH_HOST mode"), "%s", nf_error());
}

Test(synth_model, device_glm53_widths_stay_virtual, .timeout = 300) {
    nf_hparams hp;
    const nf_recipe *r;
    cr_assert_eq(nf_synth_spec_parse("glm53:q2", &hp, &r), 0);
    hp.n_layer = 4;
    nf_synth_derive(&hp, 4);
    long before = rss_kb();
    nf_model *d = nf_synth_model_create(&hp, r, 1, NF_SYNTH_DEVICE);
    cr_assert_not_null(d, "%s", nf_error());
    const nf_synth *s = d->synth;
    long grown_kb = rss_kb() - before;
    uint64_t host_bytes = s->tensor_bytes - s->virtual_bytes;
    cr_expect_gt(s->virtual_bytes, (uint64_t)5e9, "virtual %llu", (unsigned long long)s->virtual_bytes);
    cr_expect_lt(host_bytes, (uint64_t)200e6, "host %llu", (unsigned long long)host_bytes);
    cr_expect_lt((double)grown_kb * 1024, (double)host_bytes + 64e6, "RSS grew %ld kB for %llu host bytes", grown_kb,
                 (unsigned long long)host_bytes);
    for (int i = 0; i < s->n_tensors; i++) {
        const nf_synth_tensor *t = &s->tensors[i];
        if (t->virt) cr_expect_eq(resident_pages(s->region + t->offset, t->bytes), 0, "%s touched", t->name);
        else cr_expect_leq(t->bytes, NF_SYNTH_HOST_MAX);
    }
    nf_model_free(d);
}

static void moments(uint32_t type, const void *data, int64_t n, double *mean, double *sd, int *finite) {
    float *v = malloc((size_t)n * sizeof(float));
    cr_assert_eq(nf_dequantize(type, data, v, n), 0);
    double s = 0, s2 = 0;
    *finite = 1;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(v[i])) *finite = 0;
        s += v[i];
        s2 += (double)v[i] * v[i];
    }
    *mean = s / (double)n;
    *sd = sqrt(s2 / (double)n - *mean * *mean);
    free(v);
}

/* The bytes a DEVICE-mode model gets on the GPU (materialized on the host) have the statistics of the HOST-mode
 * (file) values of the same tensor: same spread within 10%, mean near 0, every value finite. */
static void pool_statistics(const char *recipe) {
    nf_hparams hp;
    cr_assert_eq(nf_synth_preset("tiny", &hp), 0);
    const nf_recipe *r = nf_recipe_find(recipe);
    nf_model *d = nf_synth_model_create_ex(&hp, r, 3, NF_SYNTH_DEVICE, 16 << 10);
    nf_model *h = nf_synth_model_create(&hp, r, 3, NF_SYNTH_HOST);
    cr_assert(d && h, "%s", nf_error());
    nf_synth *s = d->synth;
    bool *was_virtual = calloc((size_t)s->n_tensors, 1);
    for (int i = 0; i < s->n_tensors; i++) was_virtual[i] = s->tensors[i].virt;
    /* the block copies are nf_synth_virtual_fill's, spot-checked against the pool directly */
    const nf_synth_tensor *t0 = NULL;
    for (int i = 0; i < s->n_tensors && !t0; i++) if (s->tensors[i].virt) t0 = &s->tensors[i];
    cr_assert_not_null(t0);
    const nf_synth_pool *p0 = &s->pools[t0->pool];
    uint8_t *blk = malloc(3 * p0->block_bytes);
    nf_synth_virtual_fill(s, t0, 7, 3, blk);
    for (int k = 0; k < 3; k++)
        cr_expect_eq(memcmp(blk + k * p0->block_bytes,
                            p0->bytes + (size_t)nf_synth_pool_index(t0->key, 7 + k, p0->n_blocks) * p0->block_bytes,
                            p0->block_bytes), 0);
    free(blk);
    cr_assert_eq(nf_synth_model_materialize(d), 0);
    cr_expect_eq(s->n_virtual, 0);
    int checked = 0;
    for (int i = 0; i < s->n_tensors; i++) {
        if (!was_virtual[i]) continue;
        const nf_layout_tensor *lt = &s->layout[i];
        const nf_tensor *a = nf_layout_bound(d, lt), *b = nf_layout_bound(h, lt);
        int64_t ne = nf_layout_nelements(lt);
        double ma, sa, mb, sb;
        int fa, fb;
        moments(a->type, a->data, ne, &ma, &sa, &fa);
        moments(b->type, b->data, ne, &mb, &sb, &fb);
        cr_expect(fa, "%s: non-finite values", lt->name);
        cr_expect(fabs(sa / sb - 1) < 0.1, "%s (%s): sd %.4g, file values %.4g", lt->name, recipe, sa, sb);
        cr_expect(fabs(ma) < 0.1 * sb, "%s (%s): mean %.3g for sd %.3g", lt->name, recipe, ma, sb);
        checked++;
    }
    cr_expect_gt(checked, 10);
    free(was_virtual);
    nf_model_free(d);
    nf_model_free(h);
}

Test(synth_model, pool_statistics_q2) { pool_statistics("q2"); }
Test(synth_model, pool_statistics_q4) { pool_statistics("q4"); }
Test(synth_model, pool_statistics_q8) { pool_statistics("q8"); }
Test(synth_model, pool_statistics_bf16) { pool_statistics("bf16"); }

/* CPU forward of the materialized DEVICE-mode bytes: finite logits of a sane size. n_layer 0 keeps the preset. */
static void forward_finite(const char *recipe, int n_layer) {
    nf_hparams hp;
    cr_assert_eq(nf_synth_preset("tiny", &hp), 0);
    if (n_layer) {
        hp.n_layer = n_layer;
        nf_synth_derive(&hp, 4);
    }
    nf_model *m = nf_synth_model_create_ex(&hp, nf_recipe_find(recipe), 2, NF_SYNTH_DEVICE, 16 << 10);
    cr_assert_not_null(m, "%s", nf_error());
    cr_assert_gt(m->synth->n_virtual, 0);
    cr_assert_eq(nf_synth_model_materialize(m), 0);
    nf_backend *be = nf_cpu_backend_create(m, 2);
    cr_assert_not_null(be, "%s", nf_error());
    nf_state *st = nf_backend_state_create(be, 64);
    enum { T = 24 };
    int32_t tok[T];
    for (int i = 0; i < T; i++) tok[i] = (i * 977 + 13) % hp.n_vocab;
    float *lg = malloc((size_t)T * hp.n_vocab * sizeof(float));
    cr_assert_eq(nf_prefill(be, st, tok, T, 8, lg, 1, NULL), 0, "%s", nf_error());
    double mx = 0, s2 = 0;
    for (size_t i = 0; i < (size_t)T * hp.n_vocab; i++) {
        cr_assert(isfinite(lg[i]), "logit %zu not finite", i);
        if (fabs(lg[i]) > mx) mx = fabs(lg[i]);
        s2 += (double)lg[i] * lg[i];
    }
    double rms = sqrt(s2 / ((double)T * hp.n_vocab));
    cr_expect(rms > 1e-3 && mx < 1e3, "%s, %d layers: logits rms %.3g, max %.3g", recipe, hp.n_layer, rms, mx);
    free(lg);
    nf_state_free(st);
    nf_backend_free(be);
    nf_model_free(m);
}

Test(synth_model, forward_finite_q2) { forward_finite("q2", 0); }
Test(synth_model, forward_finite_f32) { forward_finite("f32", 0); }
Test(synth_model, forward_finite_45_layers_q2, .timeout = 300) { forward_finite("q2", 45); }

Test(synth_model, summary_without_file) {
    nf_hparams hp;
    const nf_recipe *r;
    cr_assert_eq(nf_synth_spec_parse("tiny:q4", &hp, &r), 0);
    nf_model *m = nf_synth_model_create_ex(&hp, r, 1, NF_SYNTH_DEVICE, 16 << 10);
    cr_assert_not_null(m);
    FILE *saved = stdout;
    char *buf = NULL;
    size_t len = 0;
    stdout = open_memstream(&buf, &len);
    nf_model_print_summary(m);
    fclose(stdout);
    stdout = saved;
    cr_expect(strstr(buf, "synthetic, recipe q4, seed 1, no file"), "%s", buf);
    cr_expect(strstr(buf, "q4_K"), "%s", buf);
    free(buf);
    nf_model_free(m);
    cr_expect_eq(nf_synth_model_materialize(NULL), -1);
}

static int run_cmd(const char *cmd, char *out, size_t outsz) {
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, outsz - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* nf-synth --dry-run PRESET[:RECIPE]: one census line per recipe, the spec form equal to --preset/--recipe. */
Test(synth_model, nf_synth_dry_run_specs) {
    const char *b = getenv("NF_BUILD") && *getenv("NF_BUILD") ? getenv("NF_BUILD") : "build";
    char cmd[512], out[4096], out2[4096];
    snprintf(cmd, sizeof cmd, "%s/nf-synth --dry-run glm53 2>&1", b);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    for (int i = 0; nf_recipe_at(i); i++) {
        char want[64];
        snprintf(want, sizeof want, "preset glm53, recipe %s,", nf_recipe_at(i)->name);
        cr_expect(strstr(out, want), "%s missing in:\n%s", want, out);
    }
    cr_expect(strstr(out, "97.616 GB (95.375 GB trunk)"), "q2 bytes:\n%s", out);
    snprintf(cmd, sizeof cmd, "%s/nf-synth --dry-run glm53:q2 2>&1", b);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    snprintf(cmd, sizeof cmd, "%s/nf-synth --dry-run --preset glm53 --recipe q2 2>&1", b);
    cr_assert_eq(run_cmd(cmd, out2, sizeof out2), 0, "%s", out2);
    cr_expect_str_eq(out, out2);
    snprintf(cmd, sizeof cmd, "%s/nf-synth --dry-run glm53:q9 2>&1", b);
    cr_expect_neq(run_cmd(cmd, out, sizeof out), 0);
    cr_expect(strstr(out, "unknown recipe \"q9\""), "%s", out);
    snprintf(cmd, sizeof cmd, "%s/nf-synth --dry-run glm53:q2 --recipe q4 2>&1", b);
    cr_expect_neq(run_cmd(cmd, out, sizeof out), 0);
    cr_expect(strstr(out, "give the recipe once"), "%s", out);
}
