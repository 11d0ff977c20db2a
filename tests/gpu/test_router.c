/* test_router.c — the MoE router on the GPU (src/cuda/cuda_router.h) against the CPU's rules (src/cpu/moe.c:
 * sigmoid, biased choice, nf_topk_desc, normalised and scaled weights); entry nf_gpu_test_router
 * (tests/gpu/main.c).
 *
 * The host computes the scores with its own expf, which may differ from the device's by an ulp; the data keep
 * the chosen experts independent of that: random logits (distinct choices far apart compared with an ulp), and
 * logits from a few values with no or constant bias (exact ties, each value mapped to one score on either side,
 * so ties by ascending expert index decide). The chosen experts must be identical, order included; the weights
 * agree to 1e-6 relative. Shapes: the release's 288 experts top-8, a small 8 top-2, 256 top-8, k = E, more
 * experts than a block's threads (1500), several tokens per call; NaN logits must still give k distinct experts
 * with the NaN ones ranked last. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cuda/cuda_router.h"
#include "gpu_tests.h"
#include "util/error.h"

static int n_failed;
#include "gpu_check.h"

#define GPU_RAND_SEED 0x9e3779b97f4a7c15ull
#include "gpu_rand.h"
static float uniform_pm(float a) { return a * (2.0f * (float)(rnd() >> 8) / 16777216.0f - 1.0f); }

enum { R_RANDOM, R_TIES, R_NAN };
static const char *kind_names[] = {"random", "ties", "nan"};

/* the CPU's router for one token (src/cpu/moe.c) */
static void ref_route(const float *logit, const float *bias, int E, int k, int norm, float scale, int32_t *sel,
                      float *w) {
    float *s = malloc((size_t)E * sizeof *s), *choice = malloc((size_t)E * sizeof *choice);
    if (!s || !choice) nf_die("out of memory");
    for (int e = 0; e < E; e++) {
        s[e] = nf_sigmoidf(logit[e]);
        choice[e] = s[e] + (bias ? bias[e] : 0.0f);
    }
    nf_topk_desc(choice, E, k, sel);
    float sum = 0.0f;
    for (int i = 0; i < k; i++) sum += s[sel[i]];
    for (int i = 0; i < k; i++) w[i] = (norm ? s[sel[i]] / (sum + 1e-20f) : s[sel[i]]) * scale;
    free(s);
    free(choice);
}

static void run_case(int kind, int T, int E, int k, int with_bias, int norm) {
    const float scale = 2.5f;
    float *logit = malloc((size_t)T * E * sizeof *logit), *bias = malloc((size_t)E * sizeof *bias);
    int32_t *sel = malloc((size_t)T * k * sizeof *sel), *ref_sel = malloc((size_t)k * sizeof *ref_sel);
    float *w = malloc((size_t)T * k * sizeof *w), *ref_w = malloc((size_t)k * sizeof *ref_w);
    if (!logit || !bias || !sel || !ref_sel || !w || !ref_w) nf_die("out of memory");
    for (int e = 0; e < E; e++) bias[e] = kind == R_TIES ? 0.125f : uniform_pm(0.05f);
    for (int i = 0; i < T * E; i++) {
        if (kind == R_TIES) logit[i] = (float)((int)(rnd() % 5) - 2) * 0.5f;
        else logit[i] = uniform_pm(4.0f);
        if (kind == R_NAN && rnd() % 4 == 0) logit[i] = NAN;
    }
    float *d_logit, *d_bias, *d_w;
    int32_t *d_sel;
    CU(cudaMalloc((void **)&d_logit, (size_t)T * E * sizeof(float)));
    CU(cudaMalloc((void **)&d_bias, (size_t)E * sizeof(float)));
    CU(cudaMalloc((void **)&d_w, (size_t)T * k * sizeof(float)));
    CU(cudaMalloc((void **)&d_sel, (size_t)T * k * sizeof(int32_t)));
    CU(cudaMemcpy(d_logit, logit, (size_t)T * E * sizeof(float), cudaMemcpyHostToDevice));
    CU(cudaMemcpy(d_bias, bias, (size_t)E * sizeof(float), cudaMemcpyHostToDevice));
    const int rc = nf_cuda_router(0, d_logit, with_bias ? d_bias : NULL, T, E, k, norm, scale, d_sel, d_w);
    CU(cudaDeviceSynchronize());
    CU(cudaMemcpy(sel, d_sel, (size_t)T * k * sizeof(int32_t), cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(w, d_w, (size_t)T * k * sizeof(float), cudaMemcpyDeviceToHost));
    int bad_sel = 0, bad_w = 0;
    double worst = 0.0;
    CHECK(rc == 0, "nf_cuda_router failed: %s", nf_error());
    for (int t = 0; t < T && rc == 0; t++) {
        const float *lt = logit + (size_t)t * E;
        const int32_t *st = sel + (size_t)t * k;
        if (kind == R_NAN) {
            /* k distinct experts; the NaN ones after every finite one */
            int seen_nan = 0;
            for (int i = 0; i < k; i++) {
                if (st[i] < 0 || st[i] >= E) {
                    bad_sel++;
                    break;
                }
                for (int j = 0; j < i; j++) bad_sel += st[j] == st[i];
                const int is_nan = isnan(lt[st[i]]);
                bad_sel += seen_nan && !is_nan;
                seen_nan |= is_nan;
            }
            continue;
        }
        ref_route(lt, with_bias ? bias : NULL, E, k, norm, scale, ref_sel, ref_w);
        for (int i = 0; i < k; i++) {
            bad_sel += st[i] != ref_sel[i];
            const double d = fabs((double)w[(size_t)t * k + i] - ref_w[i]) / (fabs(ref_w[i]) + 1e-30);
            if (d > worst) worst = d;
            bad_w += d > 1e-6;
        }
    }
    printf("  router %-6s T %d E %4d k %2d bias %d norm %d: selection %s, max rel dw %.1e%s\n", kind_names[kind], T, E,
           k, with_bias, norm, bad_sel ? "DIFFERS" : "identical", worst, kind == R_NAN ? " (NaN: distinct, last)" : "");
    CHECK(bad_sel == 0, "router %s E %d k %d: %d selection mismatches", kind_names[kind], E, k, bad_sel);
    CHECK(bad_w == 0, "router %s E %d k %d: %d weights off by more than 1e-6 relative", kind_names[kind], E, k, bad_w);
    CU(cudaFree(d_logit));
    CU(cudaFree(d_bias));
    CU(cudaFree(d_w));
    CU(cudaFree(d_sel));
    free(logit);
    free(bias);
    free(sel);
    free(ref_sel);
    free(w);
    free(ref_w);
}

/* The fused product + routing (nf_cuda_router_fused): logits against a double dot of the same rows (the f32 sum of
 * n products: within 1e-5 of sum |w x|), the routing against the CPU's rules applied to the kernel's own logits
 * (exact selection, weights to 1e-6), a second launch bit-identical to the first and the counter back at zero. */
static void run_fused_case(int T, int E, int k, int n, int with_bias) {
    const float scale = 2.5f;
    float *W = malloc((size_t)E * n * sizeof *W), *x = malloc((size_t)T * n * sizeof *x), *bias = malloc((size_t)E * sizeof *bias);
    float *logit = malloc((size_t)T * E * sizeof *logit), *logit2 = malloc((size_t)T * E * sizeof *logit2);
    float *w = malloc((size_t)T * k * sizeof *w), *w2 = malloc((size_t)T * k * sizeof *w2), *ref_w = malloc((size_t)k * sizeof *ref_w);
    int32_t *sel = malloc((size_t)T * k * sizeof *sel), *sel2 = malloc((size_t)T * k * sizeof *sel2),
            *ref_sel = malloc((size_t)k * sizeof *ref_sel);
    if (!W || !x || !bias || !logit || !logit2 || !w || !w2 || !ref_w || !sel || !sel2 || !ref_sel) nf_die("out of memory");
    for (size_t i = 0; i < (size_t)E * n; i++) W[i] = uniform_pm(0.05f);
    for (size_t i = 0; i < (size_t)T * n; i++) x[i] = uniform_pm(1.0f);
    for (int e = 0; e < E; e++) bias[e] = uniform_pm(0.05f);
    float *d_W, *d_x, *d_bias, *d_logit, *d_w;
    int32_t *d_sel;
    unsigned int *d_done, done = 1;
    CU(cudaMalloc((void **)&d_W, (size_t)E * n * sizeof(float)));
    CU(cudaMalloc((void **)&d_x, (size_t)T * n * sizeof(float)));
    CU(cudaMalloc((void **)&d_bias, (size_t)E * sizeof(float)));
    CU(cudaMalloc((void **)&d_logit, (size_t)T * E * sizeof(float)));
    CU(cudaMalloc((void **)&d_w, (size_t)T * k * sizeof(float)));
    CU(cudaMalloc((void **)&d_sel, (size_t)T * k * sizeof(int32_t)));
    CU(cudaMalloc((void **)&d_done, sizeof done));
    CU(cudaMemset(d_done, 0, sizeof done));
    CU(cudaMemcpy(d_W, W, (size_t)E * n * sizeof(float), cudaMemcpyHostToDevice));
    CU(cudaMemcpy(d_x, x, (size_t)T * n * sizeof(float), cudaMemcpyHostToDevice));
    CU(cudaMemcpy(d_bias, bias, (size_t)E * sizeof(float), cudaMemcpyHostToDevice));
    int rc[2];
    for (int run = 0; run < 2; run++) {
        rc[run] = nf_cuda_router_fused(0, d_W, n, d_x, n, T, with_bias ? d_bias : NULL, E, k, 1, scale, d_logit, d_sel,
                                       d_w, d_done);
        CU(cudaDeviceSynchronize());
        CU(cudaMemcpy(run ? logit2 : logit, d_logit, (size_t)T * E * sizeof(float), cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(run ? sel2 : sel, d_sel, (size_t)T * k * sizeof(int32_t), cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(run ? w2 : w, d_w, (size_t)T * k * sizeof(float), cudaMemcpyDeviceToHost));
        CU(cudaMemset(d_logit, 0xFF, (size_t)T * E * sizeof(float))); /* NaN: the second run must write them again */
    }
    CU(cudaMemcpy(&done, d_done, sizeof done, cudaMemcpyDeviceToHost));
    CHECK(rc[0] == 1 && rc[1] == 1, "fused router T %d E %d n %d: not launched", T, E, n);
    int bad_l = 0, bad_sel = 0, bad_w = 0;
    double worst_l = 0.0, worst_w = 0.0;
    for (int t = 0; t < T && rc[0] == 1; t++) {
        for (int e = 0; e < E; e++) {
            double ref = 0.0, mag = 0.0;
            for (int i = 0; i < n; i++) {
                ref += (double)W[(size_t)e * n + i] * x[(size_t)t * n + i];
                mag += fabs((double)W[(size_t)e * n + i] * x[(size_t)t * n + i]);
            }
            const double d = fabs(logit[(size_t)t * E + e] - ref) / (mag + 1e-30);
            if (d > worst_l) worst_l = d;
            bad_l += !(d <= 1e-5);
        }
        ref_route(logit + (size_t)t * E, with_bias ? bias : NULL, E, k, 1, scale, ref_sel, ref_w);
        for (int i = 0; i < k; i++) {
            bad_sel += sel[(size_t)t * k + i] != ref_sel[i];
            const double d = fabs((double)w[(size_t)t * k + i] - ref_w[i]) / (fabs(ref_w[i]) + 1e-30);
            if (d > worst_w) worst_w = d;
            bad_w += d > 1e-6;
        }
    }
    const int same = !memcmp(logit, logit2, (size_t)T * E * sizeof(float)) && !memcmp(sel, sel2, (size_t)T * k * sizeof(int32_t)) &&
                     !memcmp(w, w2, (size_t)T * k * sizeof(float));
    printf("  fused  T %d E %4d k %2d n %5d bias %d: logits max rel %.1e, selection %s, max rel dw %.1e, rerun %s, counter %u\n",
           T, E, k, n, with_bias, worst_l, bad_sel ? "DIFFERS" : "identical", worst_w, same ? "identical" : "DIFFERS", done);
    CHECK(bad_l == 0, "fused router T %d E %d n %d: %d logits off by more than 1e-5 of sum |w x|", T, E, n, bad_l);
    CHECK(bad_sel == 0, "fused router T %d E %d: %d selection mismatches", T, E, bad_sel);
    CHECK(bad_w == 0, "fused router T %d E %d: %d weights off by more than 1e-6 relative", T, E, bad_w);
    CHECK(same, "fused router T %d E %d: a second launch gave other values", T, E);
    CHECK(done == 0, "fused router T %d E %d: the counter is %u after the launches, not 0", T, E, done);
    CU(cudaFree(d_W));
    CU(cudaFree(d_x));
    CU(cudaFree(d_bias));
    CU(cudaFree(d_logit));
    CU(cudaFree(d_w));
    CU(cudaFree(d_sel));
    CU(cudaFree(d_done));
    free(W);
    free(x);
    free(bias);
    free(logit);
    free(logit2);
    free(w);
    free(w2);
    free(ref_w);
    free(sel);
    free(sel2);
    free(ref_sel);
}

int nf_gpu_test_router(void) {
    n_failed = 0;
    printf("router (top-k by rank counting; narrowed per warp with NF_CUDA_ROUTER_NARROW=on; the fused product + "
           "routing) vs the CPU's rules\n");
    for (int kind = R_RANDOM; kind <= R_TIES; kind++) {
        run_case(kind, 5, 288, 8, 1, 1);
        run_case(kind, 5, 288, 8, 0, 1);
        run_case(kind, 3, 8, 2, 1, 1);
        run_case(kind, 3, 256, 8, 1, 0);
        run_case(kind, 2, 16, 16, 1, 1);
        run_case(kind, 2, 1500, 8, 1, 1);
        /* the narrowed count with a short last warp (200: 8 experts, fewer than k) and k = 32 (one warp's all) */
        run_case(kind, 2, 200, 20, 1, 1);
        run_case(kind, 2, 40, 32, 1, 1);
    }
    run_case(R_NAN, 4, 288, 8, 1, 1);
    run_case(R_NAN, 4, 8, 8, 1, 1);
    /* the fused product + routing: glm53's shape (one and eight tokens), an odd expert count (a CTA with one row),
     * rows of several 4096-column passes and a short one, no bias */
    run_fused_case(1, 288, 8, 4096, 1);
    run_fused_case(8, 288, 8, 4096, 1);
    run_fused_case(3, 7, 2, 12288, 1);
    run_fused_case(2, 64, 8, 1000, 0);
    CHECK(nf_cuda_router_fused(0, NULL, 4096, NULL, 4096, 9, NULL, 288, 8, 1, 1.0f, NULL, NULL, NULL, NULL) == 0,
          "fused router took 9 tokens");
    /* k out of range is refused, not run */
    CHECK(nf_cuda_router(0, NULL, NULL, 1, 8, 9, 1, 1.0f, NULL, NULL) < 0, "k > E accepted");
    CHECK(nf_cuda_router(0, NULL, NULL, 1, 288, 0, 1, 1.0f, NULL, NULL) < 0, "k = 0 accepted");
    printf("router: %s\n", n_failed ? "FAIL" : "PASS");
    return n_failed;
}
