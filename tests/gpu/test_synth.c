/* test_synth.c — synthetic models made on the GPU (entry nf_gpu_test_synth; `nf-gpu-tests --only synth`).
 *
 * A DEVICE-mode synthetic model (model/synth.h) keeps its small tensors on the host and has the CUDA backend make
 * its large ones on the GPU from pools of quantized N(0,1) blocks. Checked here:
 *
 *  1. tiny preset in every recipe, with a 16 KiB host threshold so most matrices are virtual (also 45 layers deep
 *     for q4 and q2): every tensor's device bytes equal the host reference (a twin model materialized with
 *     nf_synth_virtual_fill: exactly what the kernel must write; the host tensors' plain copies are compared too);
 *     each virtual tensor dequantizes to finite values with the spread of the HOST-mode (file) values of that
 *     tensor (within 10%) and a mean near 0; a 24-token prefill on the GPU gives finite logits that match the CPU
 *     backend run on the materialized twin (same weights) within test_backend.c's tolerances (1e-4 f32/bf16,
 *     1e-2 quantized, same reasons) at >= 3/4 of the positions: a router or indexer top-k choice flipped by one
 *     rounding on these random weights moves a whole position past any tolerance (test_backend.c measures the
 *     backend itself; here the bytes are already compared exactly and the forward must above all stay finite;
 *     wrong weights would miss the tolerance at every position).
 *  2. glm53:q2, the released dimensions (skipped when the device lacks the memory, and with --quick): made and
 *     uploaded with timings, a 262144-token device state allocated beside it, a 16-token prefill and 8 greedy
 *     decode steps with finite logits, and three whole virtual tensors (Q8_0 embedding, IQ2_XXS and Q2_K experts)
 *     byte-equal to the host reference.
 *  3. glm53:q8 (341 GB) on a device that cannot hold it: nf_backend_cuda_create fails with a message naming the
 *     needed and free memory, and device memory is unchanged (checked before allocating).
 *  4. the synthetic state fill (model/state_fill.h, nf-bench --fill synthetic) on a device state: scales measured
 *     from a real GPU prefill (read back), the device fill to depth 3000 byte-equal to the host fill of the same
 *     rows, and decode steps from the filled device state with finite logits (also in --quick). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/backend_cpu.h"
#include "cuda/backend_cuda.h"
#include "formats/formats.h"
#include "gpu_tests.h"
#include "model/forward.h"
#include "model/layout.h"
#include "model/model.h"
#include "model/state.h"
#include "model/state_fill.h"
#include "model/synth.h"
#include "util/error.h"

static int n_failed;
#include "gpu_check.h"
#include "gpu_env.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double tol_of(const char *recipe) {
    return !strcmp(recipe, "f32") || !strcmp(recipe, "bf16") ? 1e-4 : 1e-2;
}

/* mean and standard deviation of a tensor's values; 0 when one is not finite */
static int moments(uint32_t type, const void *data, int64_t n, double *mean, double *sd) {
    float *v = nf_xmalloc((size_t)n * sizeof(float));
    int ok = nf_dequantize(type, data, v, n) == 0;
    double s = 0, s2 = 0;
    for (int64_t i = 0; ok && i < n; i++) {
        if (!isfinite(v[i])) ok = 0;
        s += v[i];
        s2 += (double)v[i] * v[i];
    }
    free(v);
    *mean = s / (double)n;
    *sd = sqrt(s2 / (double)n - *mean * *mean);
    return ok;
}

static double max_rel(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= num)) num = d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0 ? num / den : num;
}

static int all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

static void check_small(const char *recipe, int n_layer) {
    nf_hparams hp;
    if (nf_synth_preset("tiny", &hp) < 0) nf_die("%s", nf_error());
    if (n_layer) {
        hp.n_layer = n_layer;
        nf_synth_derive(&hp, 4);
    }
    printf("== synthetic tiny, %d layers (%s), host threshold 16 KiB\n", hp.n_layer, recipe);
    const nf_recipe *r = nf_recipe_find(recipe);
    const size_t host_max = 16 << 10;
    nf_model *d = nf_synth_model_create_ex(&hp, r, 21, NF_SYNTH_DEVICE, host_max);
    nf_model *twin = nf_synth_model_create_ex(&hp, r, 21, NF_SYNTH_DEVICE, host_max);
    nf_model *h = nf_synth_model_create(&hp, r, 21, NF_SYNTH_HOST);
    CHECK(d && twin && h, "synthetic models: %s", nf_error());
    if (!d || !twin || !h) goto out_models;
    CHECK(d->synth->n_virtual > 10, "only %d virtual tensors", d->synth->n_virtual);
    CHECK(nf_synth_model_materialize(twin) == 0, "materialize: %s", nf_error());
    nf_backend *gpu = nf_backend_cuda_create(d, 0);
    nf_backend *cpu = nf_cpu_backend_create(twin, 0);
    CHECK(gpu && cpu, "backends: %s", nf_error());
    if (!gpu || !cpu) {
        nf_backend_free(gpu);
        nf_backend_free(cpu);
        goto out_models;
    }

    /* bytes and statistics */
    const nf_synth *s = d->synth;
    int bad_virtual = 0, bad_host = 0, bad_stats = 0, n_virtual = 0;
    double worst_sd = 0;
    for (int i = 0; i < s->n_tensors; i++) {
        const nf_layout_tensor *lt = &s->layout[i];
        const nf_synth_tensor *t = &s->tensors[i];
        uint8_t *buf = nf_xmalloc(t->bytes);
        const nf_tensor *td = nf_layout_bound(d, lt), *tw = nf_layout_bound(twin, lt), *th = nf_layout_bound(h, lt);
        if (nf_cuda_tensor_to_host(gpu, td, buf, t->bytes) < 0) {
            CHECK(0, "%s: %s", lt->name, nf_error());
            free(buf);
            continue;
        }
        int same = !memcmp(buf, tw->data, t->bytes);
        if (t->virt) {
            n_virtual++;
            bad_virtual += !same;
            if (!same) printf("  %s (%s): device bytes differ from the host reference\n", lt->name,
                              nf_type_get(t->type)->name);
            double md, sd, mh, sh;
            int fin = moments(t->type, buf, nf_layout_nelements(lt), &md, &sd);
            moments(th->type, th->data, nf_layout_nelements(lt), &mh, &sh);
            double dev = fabs(sd / sh - 1);
            if (dev > worst_sd) worst_sd = dev;
            if (!fin || dev > 0.1 || fabs(md) > 0.1 * sh) {
                bad_stats++;
                printf("  %s: finite %d, mean %.3g, sd %.4g vs file values' sd %.4g\n", lt->name, fin, md, sd, sh);
            }
        } else {
            bad_host += !same;
            if (!same) printf("  %s: host tensor's device copy differs\n", lt->name);
        }
        free(buf);
    }
    printf("  %d virtual tensors (%.1f MB) made on the GPU: %d differ from the reference; %d host tensors copied: %d "
           "differ; statistics: worst sd deviation %.1f%%, %d out of bounds\n",
           n_virtual, (double)s->virtual_bytes / 1e6, bad_virtual, s->n_tensors - n_virtual, bad_host,
           100 * worst_sd, bad_stats);
    CHECK(bad_virtual == 0 && bad_host == 0, "device bytes differ (%d virtual, %d host)", bad_virtual, bad_host);
    CHECK(bad_stats == 0, "%d virtual tensors with wrong statistics", bad_stats);

    /* forward on the GPU vs the CPU on the same weights */
    enum { T = 24 };
    const int V = hp.n_vocab;
    int32_t tok[T];
    for (int i = 0; i < T; i++) tok[i] = (i * 977 + 13) % V;
    float *lg = nf_xmalloc((size_t)T * V * sizeof(float)), *lc = nf_xmalloc((size_t)T * V * sizeof(float));
    nf_state *sg = nf_backend_state_create(gpu, 32), *sc = nf_backend_state_create(cpu, 32);
    CHECK(sg && sc, "states: %s", nf_error());
    /* The 24-token prefill reaches the bf16 prefill GEMM (>= 16 vectors per matrix), whose rounding the random
     * weights amplify beyond the f32 tolerance (H200, 2026-12-03: bf16 24/24 positions over); compare in the GEMM's
     * f32 mode, as tests/gpu/test_backend.c does for its exact checks. The weights themselves are compared byte for
     * byte above, which is what this test is about. */
    env_saved sv = env_push("NF_CUDA_GEMM", "f32");
    int rg = sg ? nf_prefill(gpu, sg, tok, T, 0, lg, 1, NULL) : -1;
    env_pop(&sv);
    CHECK(rg == 0, "gpu prefill: %s", nf_error());
    int rc = sc ? nf_prefill(cpu, sc, tok, T, 0, lc, 1, NULL) : -1;
    CHECK(rc == 0, "cpu prefill: %s", nf_error());
    if (rg == 0 && rc == 0) {
        int fin = all_finite(lg, (size_t)T * V), over = 0, am = 0;
        double worst = 0, big = 0;
        for (int p = 0; p < T; p++) {
            const float *g = lg + (size_t)p * V, *c = lc + (size_t)p * V;
            double e = max_rel(g, c, (size_t)V);
            if (!(e <= worst)) worst = e;
            over += !(e <= tol_of(recipe));
            int ag = 0, ac = 0;
            for (int k = 1; k < V; k++) {
                if (g[k] > g[ag]) ag = k;
                if (c[k] > c[ac]) ac = k;
                if (fabs(g[k]) > big) big = fabs(g[k]);
            }
            am += ag == ac;
        }
        printf("  prefill %d tokens: logits finite %s, max |logit| %.3g, gpu vs cpu max rel %.2e (tol %.0e; %d over), "
               "argmax %d/%d\n", T, fin ? "yes" : "NO", big, worst, tol_of(recipe), over, am, T);
        CHECK(fin, "non-finite logits on the GPU");
        CHECK(over <= T / 4, "%d of %d positions over the logit tolerance", over, T);
    }
    nf_state_free(sg);
    nf_state_free(sc);
    free(lg);
    free(lc);
    nf_backend_free(gpu);
    nf_backend_free(cpu);
out_models:
    nf_model_free(d);
    nf_model_free(twin);
    nf_model_free(h);
}

static void free_memory(size_t *free_b, size_t *total_b) {
    *free_b = *total_b = 0;
    if (cudaMemGetInfo(free_b, total_b) != cudaSuccess) printf("  cudaMemGetInfo failed\n");
}

/* the whole tensor's device bytes against nf_synth_virtual_fill */
static void compare_whole(nf_backend *gpu, const nf_model *m, const char *name) {
    const nf_synth *s = m->synth;
    for (int i = 0; i < s->n_tensors; i++) {
        const nf_synth_tensor *t = &s->tensors[i];
        if (strcmp(t->name, name)) continue;
        CHECK(t->virt, "%s is not virtual", name);
        if (!t->virt) return;
        uint8_t *dev = malloc(t->bytes), *ref = malloc(t->bytes);
        CHECK(dev && ref, "no host memory for %s", name);
        if (dev && ref) {
            int ok = nf_cuda_tensor_to_host(gpu, nf_layout_bound(m, &s->layout[i]), dev, t->bytes) == 0;
            CHECK(ok, "%s: %s", name, nf_error());
            nf_synth_virtual_fill(s, t, 0, t->bytes / s->pools[t->pool].block_bytes, ref);
            int same = ok && !memcmp(dev, ref, t->bytes);
            printf("  %s (%s, %.2f GB): device bytes %s the host reference\n", name, nf_type_get(t->type)->name,
                   (double)t->bytes / 1e9, same ? "equal" : "DIFFER FROM");
            CHECK(same, "%s differs", name);
        }
        free(dev);
        free(ref);
        return;
    }
    CHECK(0, "no tensor %s", name);
}

static void check_glm53_q2(void) {
    printf("== glm53:q2 (released dimensions)\n");
    nf_hparams hp;
    const nf_recipe *r;
    if (nf_synth_spec_parse("glm53:q2", &hp, &r) < 0) nf_die("%s", nf_error());
    double t0 = now_s();
    nf_model *m = nf_synth_model_create(&hp, r, 1, NF_SYNTH_DEVICE);
    double t_host = now_s() - t0;
    CHECK(m != NULL, "create: %s", nf_error());
    if (!m) return;
    const nf_synth *s = m->synth;
    const int64_t ctx = 262144;
    size_t fr, tot;
    free_memory(&fr, &tot);
    printf("  weights %.2f GB (%.2f GB made on the GPU, %d tensors; trunk %.2f GB), host part made in %.1f s; "
           "device %.2f GB free of %.2f GB\n", (double)s->tensor_bytes / 1e9, (double)s->virtual_bytes / 1e9,
           s->n_virtual, (double)nf_model_tensor_bytes(m, false) / 1e9, t_host, fr / 1e9, tot / 1e9);
    if ((double)fr < (double)s->region_bytes + 8e9) {
        printf("  SKIP: this device cannot hold glm53:q2 and a %lld-token state\n", (long long)ctx);
        nf_model_free(m);
        return;
    }
    t0 = now_s();
    nf_backend *gpu = nf_backend_cuda_create(m, 0);
    double t_up = now_s() - t0;
    CHECK(gpu != NULL, "backend: %s", nf_error());
    if (!gpu) {
        nf_model_free(m);
        return;
    }
    nf_state *st = nf_backend_state_create(gpu, ctx);
    CHECK(st != NULL, "a %lld-token device state: %s", (long long)ctx, nf_error());
    size_t fr2, tot2;
    free_memory(&fr2, &tot2);
    printf("  backend created in %.2f s (weights made on the GPU); %lld-token state %.2f GB; %.2f GB free after both\n",
           t_up, (long long)ctx, st ? (double)nf_state_bytes(st) / 1e9 : 0.0, fr2 / 1e9);
    if (st) {
        const int V = hp.n_vocab, P = 16, steps = 8;
        int32_t tok[16];
        for (int i = 0; i < P; i++) tok[i] = (i * 7919 + 101) % V;
        float *lg = nf_xmalloc((size_t)P * V * sizeof(float));
        t0 = now_s();
        int rc = nf_prefill(gpu, st, tok, P, 0, lg, 1, NULL);
        double t_pf = now_s() - t0;
        CHECK(rc == 0, "prefill: %s", nf_error());
        int fin = rc == 0 && all_finite(lg, (size_t)P * V);
        double big = 0, s2 = 0;
        for (size_t i = 0; rc == 0 && i < (size_t)V; i++) {
            float x = lg[(size_t)(P - 1) * V + i];
            if (fabs(x) > big) big = fabs(x);
            s2 += (double)x * x;
        }
        int32_t out[8];
        t0 = now_s();
        for (int k = 0; rc == 0 && k < steps; k++) {
            const float *x = lg + (k == 0 ? (size_t)(P - 1) * V : 0);
            int a = 0;
            for (int i = 1; i < V; i++) if (x[i] > x[a]) a = i;
            out[k] = a;
            rc = nf_forward(gpu, st, &out[k], 1, lg, 0, NULL);
            CHECK(rc == 0, "decode: %s", nf_error());
            fin &= rc == 0 && all_finite(lg, (size_t)V);
        }
        double t_dec = now_s() - t0;
        printf("  prefill %d tokens %.2f s, %d greedy decode steps %.2f s (first calls, untuned); last prefill logits "
               "rms %.3g max %.3g; tokens", P, t_pf, steps, t_dec, sqrt(s2 / V), big);
        for (int k = 0; k < steps; k++) printf(" %d", out[k]);
        printf("\n");
        CHECK(fin, "non-finite logits at the released dimensions");
        free(lg);
    }
    nf_state_free(st);
    compare_whole(gpu, m, "token_embd.weight");
    compare_whole(gpu, m, "blk.3.ffn_gate_exps.weight");
    compare_whole(gpu, m, "blk.44.ffn_down_exps.weight");
    nf_backend_free(gpu);
    nf_model_free(m);
}

static void check_glm53_q8_refused(void) {
    printf("== glm53:q8 on a device too small for it\n");
    nf_hparams hp;
    const nf_recipe *r;
    if (nf_synth_spec_parse("glm53:q8", &hp, &r) < 0) nf_die("%s", nf_error());
    nf_model *m = nf_synth_model_create(&hp, r, 1, NF_SYNTH_DEVICE);
    CHECK(m != NULL, "create: %s", nf_error());
    if (!m) return;
    size_t fr, tot, fr2, tot2;
    free_memory(&fr, &tot);
    if ((double)fr > (double)m->synth->region_bytes + 2e9) {
        printf("  SKIP: this device has %.2f GB free, enough for %.2f GB\n", fr / 1e9, m->synth->region_bytes / 1e9);
        nf_model_free(m);
        return;
    }
    nf_backend *gpu = nf_backend_cuda_create(m, 0);
    free_memory(&fr2, &tot2);
    printf("  refused: %s\n", gpu ? "NO (created)" : nf_error());
    CHECK(gpu == NULL, "a %.2f GB model was accepted with %.2f GB free", m->synth->region_bytes / 1e9, fr / 1e9);
    CHECK(strstr(nf_error(), "need") && strstr(nf_error(), "GB free"), "message: %s", nf_error());
    double moved = fabs((double)fr - (double)fr2);
    CHECK(moved < 512e6, "free device memory moved by %.2f GB across the refused create", moved / 1e9);
    nf_backend_free(gpu);
    nf_model_free(m);
}

static int all_finite_f(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

static void check_state_fill(void) {
    printf("== state fill (tiny f32): device fill vs host fill, decode at depth\n");
    nf_hparams hp;
    const nf_recipe *r = NULL;
    if (nf_synth_spec_parse("tiny:f32", &hp, &r) < 0) nf_die("%s", nf_error());
    nf_model *m = nf_synth_model_create(&hp, r, 3, NF_SYNTH_HOST);
    nf_backend *gpu = m ? nf_backend_cuda_create(m, 0) : NULL;
    CHECK(gpu != NULL, "model/backend: %s", nf_error());
    if (!gpu) {
        nf_model_free(m);
        return;
    }
    const int64_t prefix = 40, depth = 3000;
    int32_t toks[64];
    for (int i = 0; i < 64; i++) toks[i] = (int32_t)((i * 977 + 13) % hp.n_vocab);
    float *logits = nf_xmalloc((size_t)hp.n_vocab * sizeof *logits);
    nf_state *dev = nf_backend_state_create(gpu, depth + 4);
    nf_state *host = nf_state_create(&hp, depth + 4), *back = nf_state_create(&hp, depth + 4);
    nf_state_fill_scales sc;
    int ok = dev && host && back && nf_prefill(gpu, dev, toks, prefix, 16, logits, 0, NULL) == 0 &&
             nf_state_fill_measure(&hp, dev, &sc) == 0;
    CHECK(ok, "prefill and measure on the device state: %s", nf_error());
    if (ok) {
        /* the host state holds the same first rows (read back), then each side fills its own */
        ok = nf_state_restore(host, dev) == 0 && nf_state_fill(dev, depth, 11, &sc) == 0 &&
             nf_state_fill(host, depth, 11, &sc) == 0 && nf_state_restore(back, dev) == 0;
        CHECK(ok, "fill: %s", nf_error());
    }
    if (ok) {
        const size_t lora = (size_t)hp.kv_lora_rank, hd = (size_t)hp.idx_head_dim, kp = (size_t)hp.idx_kpool;
        int diff = 0;
        for (int l = 0; l < hp.n_layer; l++) {
            const nf_layer_state *H = &host->L[l], *B = &back->L[l];
            if (H->kind == NF_LAYER_KDA) {
                diff += memcmp(H->S, B->S, (size_t)hp.kda_n_head * hp.kda_head_dim * hp.kda_head_dim * 4) != 0;
                diff += memcmp(H->conv, B->conv, (size_t)(hp.kda_conv - 1) * 3 * hp.kda_n_head * hp.kda_head_dim * 4) != 0;
                continue;
            }
            diff += memcmp(H->latent, B->latent, (size_t)depth * lora * 4) != 0;
            diff += memcmp(H->pool_key, B->pool_key, (size_t)(depth / kp) * hd * 4) != 0;
            diff += memcmp(H->open_key, B->open_key, kp * hd * 4) != 0;
            diff += memcmp(H->open_gate, B->open_gate, kp * hd * 4) != 0;
        }
        CHECK(diff == 0, "%d arrays of the device fill differ from the host fill", diff);
        CHECK(back->pos == depth && dev->pos == depth, "positions %lld/%lld, expected %lld", (long long)back->pos,
              (long long)dev->pos, (long long)depth);
        int finite = 1;
        for (int s = 0; s < 3 && finite; s++) {
            if (nf_forward(gpu, dev, &toks[50 + s], 1, logits, 0, NULL) < 0) {
                CHECK(0, "decode step %d at depth: %s", s, nf_error());
                finite = 0;
                break;
            }
            finite = all_finite_f(logits, (size_t)hp.n_vocab);
        }
        CHECK(finite, "decode from the filled device state: non-finite logits");
        printf("  device fill == host fill over %lld tokens; 3 decode steps at depth finite\n", (long long)depth);
    }
    free(logits);
    nf_state_free(back);
    nf_state_free(host);
    nf_state_free(dev);
    nf_backend_free(gpu);
    nf_model_free(m);
}

int nf_gpu_test_synth(int quick) {
    n_failed = 0;
    static const char *recipes[] = {"f32", "bf16", "q8", "q4", "q2"};
    for (int i = 0; i < 5; i++) {
        if (quick && i != 2 && i != 4) continue;
        check_small(recipes[i], 0);
    }
    check_state_fill();
    if (!quick) {
        check_small("q4", 45);
        check_small("q2", 45);
        check_glm53_q8_refused();
        check_glm53_q2();
    }
    printf("synth: %s (%d failed checks)\n", n_failed ? "FAIL" : "PASS", n_failed);
    return n_failed;
}
