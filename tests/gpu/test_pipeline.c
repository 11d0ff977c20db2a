/* test_pipeline.c — the layer-split forward (model/pipeline.h) on CUDA stages against one CUDA backend.
 *
 * Models: the fixtures base and shared (tests/data/fixtures, nf-convert f32 and q8; --quick: base f32 only). The
 * pipeline has two CUDA backends made for a layer range each (nf_backend_cuda_create_layers: only their layers'
 * tensors uploaded, stage 0 with the embedding, stage 1 with the head), stage k on device k % device_count — on
 * a one-GPU machine both share device 0. Splits: at half the layers (fixture shared: layer 4, a shared-indexer MLA
 * layer), and right before the last shared-indexer MLA layer, so the selection crosses the boundary. Per case: a chunked prefill (all logits) and
 * 16 greedy decode steps through both; the greedy tokens must be identical and the logits equal within 1e-5
 * relative (the same kernels run on the same inputs, so they are expected bit-identical; the count of identical
 * rows is printed); a snapshot of the stage states replays the decode steps exactly. Checks of the layer-range
 * upload: a stage's own tensor reads back byte-equal to the file, another stage's layer tensor is absent, and a
 * pipeline whose stage asks a backend for layers it does not hold is refused. Also a synthetic tiny model made on
 * the GPU (nf-synth's tiny preset, q8, 16 KiB host threshold: its matrices are virtual), split after half. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "cuda/backend_cuda.h"
#include "gpu_tests.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/pipeline.h"
#include "model/recipe.h"
#include "model/state_fill.h"
#include "model/synth.h"
#include "util/error.h"

static int n_failed;
#include "gpu_check.h"

#define NPROMPT 40
#define CHUNK 13
#define NDEC 16
#define NTOK (NPROMPT + NDEC)

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static int read_tokens(const char *path, int32_t *out, int cap) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int n = 0, v;
    while (n < cap && fscanf(f, "%d", &v) == 1) out[n++] = v;
    fclose(f);
    return n;
}

/* prefill + greedy decode on one backend (ps NULL) or on the pipeline; logits [NTOK][V], greedy[NDEC] */
static int run(nf_backend *be, const nf_pipeline *p, const int32_t *prompt, float *logits, int32_t *greedy,
               int replay) {
    const int V = be ? be->model->hp.n_vocab : p->model->hp.n_vocab;
    nf_state *st = NULL;
    nf_pipeline_state *ps = NULL, *snap = NULL;
    int rc;
    if (be) {
        st = nf_backend_state_create(be, 16);
        if (!st) return -1;
        rc = nf_prefill(be, st, prompt, NPROMPT, CHUNK, logits, 1, NULL);
    } else {
        ps = nf_pipeline_state_create(p, 16);
        if (!ps) return -1;
        rc = nf_pipeline_prefill(p, ps, prompt, NPROMPT, CHUNK, logits, 1, NULL);
        if (rc == 0 && replay && !(snap = nf_pipeline_state_snapshot(ps))) rc = -1;
    }
    int32_t tok = argmax(logits + (size_t)(NPROMPT - 1) * V, V);
    for (int d = 0; rc == 0 && d < NDEC; d++) {
        greedy[d] = tok;
        float *row = logits + (size_t)(NPROMPT + d) * V;
        rc = be ? nf_forward(be, st, &tok, 1, row, 0, NULL) : nf_pipeline_forward(p, ps, &tok, 1, row, 0, NULL, NULL);
        tok = argmax(row, V);
    }
    if (rc == 0 && snap) {
        float *row = malloc((size_t)V * sizeof(float));
        rc = nf_pipeline_state_restore(ps, snap);
        int same = 1;
        for (int d = 0; rc == 0 && d < NDEC; d++) {
            rc = nf_pipeline_forward(p, ps, &greedy[d], 1, row, 0, NULL, NULL);
            same &= !memcmp(row, logits + (size_t)(NPROMPT + d) * V, (size_t)V * sizeof(float));
        }
        CHECK(rc != 0 || same, "decode steps replayed from a pipeline snapshot differ");
        free(row);
    }
    nf_state_free(st);
    nf_pipeline_state_free(snap);
    nf_pipeline_state_free(ps);
    return rc;
}

/* --fill synthetic through the pipeline (nf-bench --gpus N --fill synthetic): scales measured through the
 * pipeline's state equal one backend's after the same prefill, and decode steps after the same fill agree */
static void test_fill(const char *label, nf_pipeline *p, nf_backend *one, const int32_t *prompt) {
    const nf_hparams *hp = &p->model->hp;
    const int V = hp->n_vocab;
    nf_backend *fb = nf_pipeline_backend_create(p);
    nf_state *s1 = nf_backend_state_create(one, 16), *sp = fb ? nf_backend_state_create(fb, 16) : NULL;
    float *r1 = malloc((size_t)V * sizeof(float)), *r2 = malloc((size_t)V * sizeof(float));
    nf_state_fill_scales a, b;
    const int64_t to = NPROMPT + 2 * hp->idx_kpool + 3;
    int rc = s1 && sp ? 0 : -1;
    if (rc == 0) rc = nf_prefill(one, s1, prompt, NPROMPT, CHUNK, NULL, 0, NULL);
    if (rc == 0) rc = nf_prefill(fb, sp, prompt, NPROMPT, CHUNK, NULL, 0, NULL);
    if (rc == 0) rc = nf_state_fill_measure(hp, s1, &a);
    if (rc == 0) rc = nf_state_fill_measure(hp, sp, &b);
    CHECK(rc == 0, "%s: fill: %s", label, nf_error());
    double worst = 0;
    if (rc == 0) {
        for (int l = 0; l < hp->n_layer; l++) {
            const nf_state_fill_rms *x = &a.L[l], *y = &b.L[l];
            const float xs[6] = {x->latent, x->pool_key, x->open_key, x->open_gate, x->kda_S, x->conv};
            const float ys[6] = {y->latent, y->pool_key, y->open_key, y->open_gate, y->kda_S, y->conv};
            for (int i = 0; i < 6; i++) worst = fmax(worst, fabs(xs[i] - ys[i]) / (xs[i] > 0 ? xs[i] : 1));
        }
        CHECK(worst <= 1e-5, "%s: fill scales through the pipeline differ by %.2e relative", label, worst);
        rc = nf_state_fill(s1, to, 3, &a);
        if (rc == 0) rc = nf_state_fill(sp, to, 3, &a);
        CHECK(rc == 0, "%s: fill: %s", label, nf_error());
    }
    double dmax = 0;
    for (int d = 0; rc == 0 && d < 3; d++) {
        int32_t t = prompt[d];
        rc = nf_forward(one, s1, &t, 1, r1, 0, NULL);
        if (rc == 0) rc = nf_forward(fb, sp, &t, 1, r2, 0, NULL);
        CHECK(rc == 0, "%s: decode after the fill: %s", label, nf_error());
        double mx = 0, e = 0;
        for (int i = 0; rc == 0 && i < V; i++) {
            mx = fmax(mx, fabs(r1[i]));
            e = fmax(e, isfinite(r2[i]) ? fabs(r1[i] - r2[i]) : INFINITY);
        }
        dmax = fmax(dmax, e / (mx > 0 ? mx : 1));
    }
    if (rc == 0) {
        printf("  %-34s fill to %lld: scales max rel %.2e, decode logits max rel %.2e  %s\n", label, (long long)to,
               worst, dmax, dmax <= 1e-5 ? "ok" : "FAIL");
        CHECK(dmax <= 1e-5, "%s: decode after the fill differs by %.2e relative", label, dmax);
    }
    free(r1);
    free(r2);
    nf_state_free(s1);
    nf_state_free(sp);
    nf_backend_free(fb);
}

static void test_split(const char *label, const nf_model *m, nf_backend *one, const int32_t *prompt, int split,
                       int n_dev, int fill) {
    const nf_hparams *hp = &m->hp;
    const int V = hp->n_vocab;
    nf_stage st[2] = {{NULL, 0, split}, {NULL, split, hp->n_layer}};
    for (int k = 0; k < 2; k++) {
        st[k].be = nf_backend_cuda_create_layers(m, k % n_dev, st[k].layer_begin, st[k].layer_end);
        CHECK(st[k].be != NULL, "%s: stage %d backend: %s", label, k, nf_error());
    }
    nf_pipeline p;
    if (!st[0].be || !st[1].be || nf_pipeline_init(&p, 2, st) < 0) {
        CHECK(0, "%s: pipeline: %s", label, nf_error());
        goto done;
    }
    /* the layer-range upload: own tensors as in the file, another stage's absent */
    {
        const nf_tensor *own = &m->layers[split].attn_norm, *other = &m->layers[0].attn_norm;
        const size_t b = (size_t)nf_tensor_bytes(own);
        uint8_t *h = malloc(b);
        CHECK(nf_cuda_tensor_to_host(st[1].be, own, h, b) == 0 && !memcmp(h, own->data, b),
              "%s: stage 1's %s does not read back as in the file: %s", label, own->name, nf_error());
        CHECK(nf_cuda_tensor_to_host(st[1].be, other, h, 4) < 0, "%s: stage 1 holds layer 0's %s", label,
              other->name);
        CHECK(nf_cuda_tensor_to_host(st[1].be, &m->token_embd, h, 4) < 0, "%s: stage 1 holds the embedding", label);
        free(h);
        nf_stage wrong[2] = {{st[0].be, 0, split + 1}, {st[1].be, split + 1, hp->n_layer}};
        CHECK(split + 1 >= hp->n_layer || nf_pipeline_init(&(nf_pipeline){0}, 2, wrong) < 0,
              "%s: a stage asking a backend for a layer it does not hold was accepted", label);
    }
    CHECK(p.handover_dev == 1, "%s: CUDA stages do not hand over device to device", label);
    float *ref = calloc((size_t)NTOK * V, sizeof(float)), *got = calloc((size_t)NTOK * V, sizeof(float));
    int32_t gref[NDEC], ggot[NDEC];
    int rc0 = run(one, NULL, prompt, ref, gref, 0);
    CHECK(rc0 == 0, "%s: one backend: %s", label, nf_error());
    for (int dev = 1; rc0 == 0 && dev >= 0; dev--) { /* device to device (cuda_peer.cu), then through the host */
        p.handover_dev = dev;
        int rc = run(NULL, &p, prompt, got, ggot, 1);
        CHECK(rc == 0, "%s: pipeline: %s", label, nf_error());
        if (rc != 0) continue;
        double worst = 0;
        int identical = 0;
        for (int r = 0; r < NTOK; r++) {
            double mx = 0, d = 0;
            for (int i = 0; i < V; i++) {
                const double a = ref[(size_t)r * V + i], g = got[(size_t)r * V + i];
                mx = fmax(mx, fabs(a));
                d = fmax(d, isfinite(g) ? fabs(a - g) : INFINITY);
            }
            worst = fmax(worst, d / (mx > 0 ? mx : 1));
            identical += !memcmp(ref + (size_t)r * V, got + (size_t)r * V, (size_t)V * sizeof(float));
        }
        const int greedy_same = !memcmp(gref, ggot, sizeof gref);
        printf("  %-34s split at %2d, %-6s: logits max rel %.2e, %d/%d rows bit-identical, greedy %d %s  %s\n",
               label, split, dev ? "device" : "host", worst, identical, NTOK, NDEC,
               greedy_same ? "identical" : "DIFFER", worst <= 1e-5 && greedy_same ? "ok" : "FAIL");
        CHECK(worst <= 1e-5, "%s split %d: logits differ by %.2e relative", label, split, worst);
        CHECK(greedy_same, "%s split %d: greedy tokens differ", label, split);
    }
    if (rc0 == 0 && fill) test_fill(label, &p, one, prompt);
    free(ref);
    free(got);
done:
    nf_backend_free(st[0].be);
    nf_backend_free(st[1].be);
}

int nf_gpu_test_pipeline(int quick) {
    n_failed = 0;
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1) n_dev = 1;
    printf("pipeline: two CUDA stages (stage k on device k %% %d) against one CUDA backend\n", n_dev);
    const char *build = getenv("NF_BUILD") ? getenv("NF_BUILD") : "build/cuda";
    char dir[] = "/tmp/nf-gpu-pipeline.XXXXXX";
    if (!mkdtemp(dir)) nf_die("mkdtemp failed");
    static const char *fixtures[] = {"base", "shared"};
    static const char *recipes[] = {"f32", "q8"};
    char path[512], cmd[2048], label[64];
    for (int r = 0; r < (quick ? 1 : 2); r++)
        for (int fi = 0; fi < (quick ? 1 : 2); fi++) {
            snprintf(path, sizeof path, "%s/%s-%s.gguf", dir, fixtures[fi], recipes[r]);
            snprintf(cmd, sizeof cmd, "%s/nf-convert tests/data/fixtures/%s -o %s --recipe %s --no-tokenizer > %s/convert.log 2>&1",
                     build, fixtures[fi], path, recipes[r], dir);
            if (system(cmd) != 0) {
                CHECK(0, "%s failed (see %s/convert.log)", cmd, dir);
                continue;
            }
            snprintf(cmd, sizeof cmd, "tests/data/fixtures/%s/tokens.txt", fixtures[fi]);
            int32_t prompt[NPROMPT];
            const int nt = read_tokens(cmd, prompt, NPROMPT);
            CHECK(nt == NPROMPT, "fixture %s: %d tokens", fixtures[fi], nt);
            nf_model *m = nf_model_load(path);
            CHECK(m != NULL, "%s: %s", path, nf_error());
            nf_backend *one = m ? nf_backend_cuda_create(m, 0) : NULL;
            CHECK(!m || one != NULL, "one backend: %s", nf_error());
            if (one && nt == NPROMPT) {
                const nf_hparams *hp = &m->hp;
                snprintf(label, sizeof label, "fixture %s %s", fixtures[fi], recipes[r]);
                test_split(label, m, one, prompt, hp->n_layer / 2, n_dev, r == 0 && fi == 0);
                /* the last shared-indexer layer (other than the half split) starts stage 1 */
                for (int l = hp->n_layer - 1; l > 0; l--)
                    if (l != hp->n_layer / 2 && hp->layer_kind[l] == NF_LAYER_MLA && hp->indexer_shared[l]) {
                        snprintf(label, sizeof label, "fixture %s %s (shared)", fixtures[fi], recipes[r]);
                        test_split(label, m, one, prompt, l, n_dev, 0);
                        break;
                    }
            }
            nf_backend_free(one);
            nf_model_free(m);
            unlink(path);
        }
    /* a synthetic model made on the GPU (host threshold 16 KiB, so its matrices are virtual: made by the fill
     * kernel inside each stage's packed segments) */
    {
        nf_hparams hp;
        if (nf_synth_preset("tiny", &hp) < 0) nf_die("%s", nf_error());
        nf_model *m = nf_synth_model_create_ex(&hp, nf_recipe_find("q8"), 21, NF_SYNTH_DEVICE, 16 << 10);
        CHECK(m != NULL, "synthetic tiny: %s", nf_error());
        CHECK(!m || m->synth->n_virtual > 0, "synthetic tiny: no virtual tensors");
        nf_backend *one = m ? nf_backend_cuda_create(m, 0) : NULL;
        CHECK(!m || one != NULL, "one backend: %s", nf_error());
        if (one) {
            int32_t prompt[NPROMPT];
            uint64_t x = 5;
            for (int i = 0; i < NPROMPT; i++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                prompt[i] = (int32_t)((x >> 33) % (uint64_t)m->hp.n_vocab);
            }
            test_split("synthetic tiny q8 (made on the GPU)", m, one, prompt, m->hp.n_layer / 2 + 1, n_dev, 0);
        }
        nf_backend_free(one);
        nf_model_free(m);
    }
    unlink(strcat(strcpy(path, dir), "/convert.log"));
    rmdir(dir);
    printf("pipeline: %s (%d failed checks)\n", n_failed ? "FAIL" : "PASS", n_failed);
    return n_failed;
}
