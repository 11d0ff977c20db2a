/* test_attn.c — the indexer's scoring and top-k selection and the sparse MLA attention core on the GPU, at the
 * kernel level (src/cuda/cuda_attn.h) on synthetic data; entry nf_gpu_test_attn (tests/gpu/main.c).
 *
 * Selection (exact): pooled keys, per-head queries and head weights are generated on the host; the reference
 * computes each score with the formula the GPU documents (per-head dot in index order with fused
 * multiply-adds, times hd^-1/2, relu, weighted sum over heads in order, unfused) and selects with the CPU
 * reference's own top-k (nf_topk_desc: score descending, ties by ascending pool index) and row layout
 * (expanded pools, forced tail, -1 padding), so the scores are bit-identical and the rows must be identical,
 * order included. With small-integer data every product and sum is exact, so the scores also equal the CPU
 * indexer's (nf_dot_f32 in its SIMD order), which the test asserts. Data shapes drive every path of the radix
 * select: distinct scores; many exact ties (pools repeated); scores crowded into one first-digit bin (more than
 * the shared-memory candidate capacity: a refinement pass over the keys); more tied scores at the threshold
 * than that capacity (mostly zero scores: the ordered scan); queries on both sides of the point where the
 * visible pools exceed the budget; decode (T = 1) and prefill (T > 4) kernel shapes.
 *
 * Attention core (tolerance): the release dims (64 heads, latent 512, 2051-wide rows) and smaller odd ones (70
 * heads: two head tiles and a padded head stride; 2 heads x latent 32) against a double precision reference, rows
 * with all, some, holed and no valid entries, and valid entries only in the middle (whole selection ranges
 * empty); relative error per (token, head) <= 2e-5 (f32 sums of <= 2051 terms). Decode-shaped calls (T <= 4) are
 * held to the same tolerance on every decode path (the default; at the smaller dims also the two-pass and online
 * kernels forced: they sum in another order, so they are not bit-identical to the batched call), and calls of 4 and 3 tokens
 * must give each token exactly the bits of its one-token call (cuda_attn.h: results independent of T).
 *
 * --bench: per-phase timing (indexer scoring, selection, attention core) per MLA layer and per token at
 * several context lengths with the release dims on random data, decode (T = 1) and a prefill chunk; for decode
 * also the attention core on each path (tiled, online, two-pass), for the prefill chunk the tiled f32 path against
 * the tensor-core path, each timed interleaved in the same loop. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cuda/cuda_attn.h"
#include "gpu_tests.h"
#include "util/error.h"

static int n_failed;
#include "gpu_check.h"

#define GPU_RAND_SEED 0x2545f4914f6cdd1dull
#include "gpu_rand.h"

static void *dup_to_dev(const void *h, size_t bytes) {
    void *d;
    CU(cudaMalloc(&d, bytes ? bytes : 4));
    if (bytes) CU(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

/* ------------------------------------------------------------------------------------------------------ */
/* selection                                                                                                */

enum { D_RANDOM, D_TIES, D_CROWDED, D_ZEROS, D_SOME_ZEROS };
static const char *data_names[] = {"random", "ties", "crowded", "zeros", "some-zeros"};

/* the score as the GPU computes it (and, for exact data, as the CPU does) */
static float ref_score(const float *q, const float *w, const float *P, int nh, int hd) {
    const float sc = 1.0f / sqrtf((float)hd);
    float s = 0.0f;
    for (int h = 0; h < nh; h++) {
        float d = 0.0f;
        for (int i = 0; i < hd; i++) d = fmaf(q[(size_t)h * hd + i], P[i], d);
        d = d * sc;
        const float r = d > 0.0f ? d : 0.0f;
        const float prod = w[h] * r; /* separate statements: no contraction into an FMA */
        s = s + prod;
    }
    return s;
}

/* the CPU indexer's score (src/cpu/indexer.c sel_task) */
static float cpu_score(const float *q, const float *w, const float *P, int nh, int hd) {
    const float sc = 1.0f / sqrtf((float)hd);
    float s = 0.0f;
    for (int h = 0; h < nh; h++) {
        const float d = nf_dot_f32(q + (size_t)h * hd, P, hd) * sc;
        const float prod = w[h] * (d > 0.0f ? d : 0.0f);
        s = s + prod;
    }
    return s;
}

/* the CPU reference's row: top pools (nf_topk_desc) expanded, tail, -1 padding */
static void ref_rows(const float *P, const float *iq, const float *w, int64_t pos0, int T, int nh, int hd, int kpool,
                     int budget, int width, int tail, int exact_data, int32_t *rows, int *cpu_mismatch) {
    const int64_t nmax = (pos0 + T) / kpool;
    float *score = nf_xmalloc((size_t)(nmax > 0 ? nmax : 1) * sizeof(float));
    int32_t *top = nf_xmalloc((size_t)budget * sizeof(int32_t));
    for (int t = 0; t < T; t++) {
        const int64_t a = pos0 + t, n = (a + 1) / kpool;
        int32_t *row = rows + (size_t)t * width;
        int w_ = 0;
        if (n <= budget) {
            for (int64_t p = 0; p < n * kpool; p++) row[w_++] = (int32_t)p;
        } else {
            const float *q = iq + (size_t)t * nh * hd, *hw = w + (size_t)t * nh;
            for (int64_t p = 0; p < n; p++) {
                score[p] = ref_score(q, hw, P + (size_t)p * hd, nh, hd);
                if (exact_data && score[p] != cpu_score(q, hw, P + (size_t)p * hd, nh, hd)) (*cpu_mismatch)++;
            }
            const int k = nf_topk_desc(score, (int)n, budget, top);
            for (int i = 0; i < k; i++)
                for (int m = 0; m < kpool; m++) row[w_++] = top[i] * kpool + m;
        }
        if (tail)
            for (int64_t p = n * kpool; p <= a; p++) row[w_++] = (int32_t)p;
        while (w_ < width) row[w_++] = -1;
    }
    free(score);
    free(top);
}

typedef struct {
    int hd, nh, kpool, topk, tail, data;
    int64_t pos0;
    int T;
} sel_case;

static void gen_data(const sel_case *c, int64_t npool, float *P, float *iq, float *w) {
    const int hd = c->hd, nh = c->nh, T = c->T;
    const size_t nq = (size_t)T * nh * hd;
    switch (c->data) {
    case D_RANDOM:
        for (int64_t i = 0; i < npool * hd; i++) P[i] = gauss();
        for (size_t i = 0; i < nq; i++) iq[i] = gauss();
        for (int i = 0; i < T * nh; i++) w[i] = 0.2f * gauss();
        break;
    case D_TIES: { /* small integers, pools drawn from 24 distinct rows: exact, often tied scores */
        float *base = nf_xmalloc((size_t)24 * hd * sizeof(float));
        for (int i = 0; i < 24 * hd; i++) base[i] = (float)((int)(rnd() % 5) - 2);
        for (int64_t p = 0; p < npool; p++) memcpy(P + p * hd, base + (size_t)(rnd() % 24) * hd, (size_t)hd * sizeof(float));
        for (size_t i = 0; i < nq; i++) iq[i] = (float)((int)(rnd() % 5) - 2);
        for (int i = 0; i < T * nh; i++) w[i] = (float)((int)(rnd() % 6) - 2);
        free(base);
        break;
    }
    case D_CROWDED: /* keys of 9 or 10 per dim: every score within a few percent (one first-digit bin) */
        for (int64_t i = 0; i < npool * hd; i++) P[i] = (float)(9 + rnd() % 2);
        for (size_t i = 0; i < nq; i++) iq[i] = 1.0f;
        for (int i = 0; i < T * nh; i++) w[i] = (float)(1 + rnd() % 2);
        break;
    case D_ZEROS:      /* 1 pool in 97 scores above 0, the rest exactly 0 */
    case D_SOME_ZEROS: /* 1 pool in 3 scores above 0 */
        for (int64_t p = 0; p < npool; p++) {
            const float sign = rnd() % (c->data == D_ZEROS ? 97 : 3) == 0 ? 1.0f : -1.0f;
            for (int i = 0; i < hd; i++) P[p * hd + i] = sign * (float)(1 + rnd() % 3);
        }
        for (size_t i = 0; i < nq; i++) iq[i] = (float)(1 + rnd() % 2);
        for (int i = 0; i < T * nh; i++) w[i] = (float)(1 + rnd() % 3);
        break;
    }
}

static void sel_check(const sel_case *c) {
    const int budget = c->topk / c->kpool, width = c->topk + (c->tail ? c->kpool - 1 : 0);
    const int64_t npool = (c->pos0 + c->T) / c->kpool;
    float *P = nf_xmalloc((size_t)(npool + 1) * c->hd * sizeof(float));
    float *iq = nf_xmalloc((size_t)c->T * c->nh * c->hd * sizeof(float)), *w = nf_xmalloc((size_t)c->T * c->nh * sizeof(float));
    gen_data(c, npool, P, iq, w);
    int32_t *ref = nf_xmalloc((size_t)c->T * width * sizeof(int32_t)), *got = nf_xmalloc((size_t)c->T * width * sizeof(int32_t));
    int cpu_mismatch = 0;
    const int exact = c->data != D_RANDOM;
    ref_rows(P, iq, w, c->pos0, c->T, c->nh, c->hd, c->kpool, budget, width, c->tail, exact, ref, &cpu_mismatch);

    float *dP = dup_to_dev(P, (size_t)(npool + 1) * c->hd * sizeof(float));
    float *dq = dup_to_dev(iq, (size_t)c->T * c->nh * c->hd * sizeof(float)), *dw = dup_to_dev(w, (size_t)c->T * c->nh * sizeof(float));
    uint32_t *keys, *hist;
    int32_t *dsel;
    CU(cudaMalloc((void **)&keys, (size_t)c->T * (npool + 1) * sizeof(uint32_t)));
    CU(cudaMalloc((void **)&hist, (size_t)c->T * NF_IDX_HIST_BINS * sizeof(uint32_t)));
    CU(cudaMalloc((void **)&dsel, (size_t)c->T * width * sizeof(int32_t)));
    CU(cudaMemset(hist, 0, (size_t)c->T * NF_IDX_HIST_BINS * sizeof(uint32_t)));
    int rc = nf_cuda_idx_score(0, dP, dq, dw, c->pos0, c->T, c->nh, c->hd, c->kpool, budget, keys, npool + 1, hist);
    if (rc == 0) rc = nf_cuda_idx_topk(0, keys, npool + 1, hist, c->pos0, c->T, c->kpool, budget, width, c->tail, dsel);
    CHECK(rc == 0, "indexer kernels: %s", nf_error());
    CU(cudaDeviceSynchronize());
    CU(cudaMemcpy(got, dsel, (size_t)c->T * width * sizeof(int32_t), cudaMemcpyDeviceToHost));
    int bad = 0, first = -1, col = -1;
    for (int t = 0; t < c->T; t++) {
        const int32_t *g = got + (size_t)t * width, *r = ref + (size_t)t * width;
        if (memcmp(g, r, (size_t)width * sizeof(int32_t))) {
            if (first < 0) {
                first = t;
                for (col = 0; col < width && g[col] == r[col]; col++) {}
            }
            bad++;
        }
    }
    const int64_t nv0 = (c->pos0 + 1) / c->kpool, nv1 = (c->pos0 + c->T) / c->kpool;
    printf("  select %-10s hd %3d heads %2d kpool %2d budget %4d, %d queries seeing %lld..%lld pools: %s", data_names[c->data],
           c->hd, c->nh, c->kpool, budget, c->T, (long long)nv0, (long long)nv1, bad ? "DIFFERENT" : "rows identical");
    if (bad)
        printf(" (%d rows; first query %d at entry %d: gpu %d ref %d)", bad, first, col, got[(size_t)first * width + col],
               ref[(size_t)first * width + col]);
    printf("\n");
    CHECK(bad == 0, "%d of %d selection rows differ from the reference", bad, c->T);
    CHECK(cpu_mismatch == 0, "%d exact-data scores differ between the reference formula and the CPU's dot", cpu_mismatch);
    cudaFree(dP);
    cudaFree(dq);
    cudaFree(dw);
    cudaFree(keys);
    cudaFree(hist);
    cudaFree(dsel);
    free(P);
    free(iq);
    free(w);
    free(ref);
    free(got);
}

/* ------------------------------------------------------------------------------------------------------ */
/* attention core                                                                                           */

/* worst over the n (token, head) rows of max |g - ref| / max |ref| (an all-zero reference row: absolute) */
static double core_err(const double *ref, const float *g, int n, int kl) {
    double worst = 0;
    for (size_t v = 0; v < (size_t)n; v++) {
        double mx = 0, md = 0;
        for (int r = 0; r < kl; r++) {
            const double a = fabs(ref[v * kl + r]), d = fabs(g[v * kl + r] - ref[v * kl + r]);
            if (a > mx) mx = a;
            if (!(d <= md)) md = isnan(d) ? INFINITY : d;
        }
        const double e = mx > 0 ? md / mx : md;
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

/* force_paths: also the two-pass and online decode paths forced, one token per call (at the release dims the
 * default decode calls cover the two-pass path: the emulator, scripts/cuemu, would take minutes more) */
static void core_check(int H, int kl, int width, int64_t ctx, int T, int force_paths) {
    float *lat = nf_xmalloc((size_t)ctx * kl * sizeof(float)), *qt = nf_xmalloc((size_t)T * H * kl * sizeof(float));
    int32_t *sel = nf_xmalloc((size_t)T * width * sizeof(int32_t));
    for (int64_t i = 0; i < ctx * kl; i++) lat[i] = gauss();
    for (size_t i = 0; i < (size_t)T * H * kl; i++) qt[i] = 0.05f * gauss();
    int32_t *perm = nf_xmalloc((size_t)ctx * sizeof(int32_t));
    for (int t = 0; t < T; t++) {
        for (int64_t i = 0; i < ctx; i++) perm[i] = (int32_t)i;
        for (int64_t i = 0; i < width && i < ctx; i++) { /* distinct positions */
            int64_t j = i + rnd() % (ctx - i);
            int32_t x = perm[i];
            perm[i] = perm[j];
            perm[j] = x;
        }
        const int kind = t % 7;
        int nvalid = kind == 0 ? width : kind == 1 ? 100 : kind == 2 ? 0 : kind == 3 ? width : kind == 4 ? 37 : width - 5;
        int32_t *row = sel + (size_t)t * width;
        for (int s = 0; s < width; s++) row[s] = s < nvalid ? perm[s] : -1;
        if (kind == 3)
            for (int s = 7; s < width; s += 11) row[s] = -1; /* holes */
        if (kind == 6) /* valid entries only in the middle: the first and last ranges of rows hold none */
            for (int s = 0; s < width; s++) row[s] = s >= width / 10 && s < width / 4 ? perm[s] : -1;
    }
    /* reference in double */
    double *ref = nf_xmalloc((size_t)T * H * kl * sizeof(double)), *sc = nf_xmalloc((size_t)width * sizeof(double));
    const double scale = 1.0 / sqrt(256.0);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            const int32_t *row = sel + (size_t)t * width;
            const float *q = qt + ((size_t)t * H + h) * kl;
            double mx = -INFINITY, sum = 0;
            for (int s = 0; s < width; s++) {
                if (row[s] < 0) continue;
                double d = 0;
                for (int r = 0; r < kl; r++) d += (double)q[r] * lat[(size_t)row[s] * kl + r];
                sc[s] = d * scale;
                if (sc[s] > mx) mx = sc[s];
            }
            for (int s = 0; s < width; s++)
                if (row[s] >= 0) sum += exp(sc[s] - mx);
            double *u = ref + ((size_t)t * H + h) * kl;
            for (int r = 0; r < kl; r++) u[r] = 0;
            for (int s = 0; s < width; s++) {
                if (row[s] < 0) continue;
                const double p = exp(sc[s] - mx) / sum;
                for (int r = 0; r < kl; r++) u[r] += p * lat[(size_t)row[s] * kl + r];
            }
        }
    float *dlat = dup_to_dev(lat, (size_t)ctx * kl * sizeof(float)), *dqt = dup_to_dev(qt, (size_t)T * H * kl * sizeof(float));
    int32_t *dsel = dup_to_dev(sel, (size_t)T * width * sizeof(int32_t));
    float *S, *U;
    size_t s_floats = nf_cuda_mla_scratch_floats(T, H, kl, width);
    for (int n = 1; n <= 4; n++) {
        const size_t sn = nf_cuda_mla_scratch_floats(n, H, kl, width);
        if (sn > s_floats) s_floats = sn;
    }
    CU(cudaMalloc((void **)&S, s_floats * sizeof(float)));
    CU(cudaMalloc((void **)&U, (size_t)T * H * kl * sizeof(float)));
    const float fscale = 1.0f / sqrtf(256.0f);
    const size_t nU = (size_t)T * H * kl;
    /* results: the whole batch in one call; then in calls of `per_call` tokens on a path */
    enum { R_BATCH, R_ONE, R_GROUPS, R_TWOPASS, R_ONLINE, NR };
    static const char *const names[NR] = {"batched", "one token per call", "calls of 4 tokens", "two-pass forced",
                                           "online forced"};
    const nf_mla_path paths[NR] = {NF_MLA_PATH_AUTO, NF_MLA_PATH_AUTO, NF_MLA_PATH_AUTO, NF_MLA_PATH_TWOPASS,
                                   NF_MLA_PATH_ONLINE};
    const int per_call[NR] = {T, 1, 4, 1, 1};
    float *g[NR];
    double err[NR];
    int ran[NR];
    for (int k = 0; k < NR; k++) {
        g[k] = nf_xmalloc(nU * sizeof(float));
        ran[k] = 0;
        err[k] = 0;
        /* forced decode paths only where they take these sizes (else they must refuse: checked below) */
        if ((k == R_TWOPASS || k == R_ONLINE) && !force_paths) continue;
        if (k == R_TWOPASS && kl / 32 > 16) continue;
        if (k == R_ONLINE && kl / 32 > 32) continue;
        int rc = 0;
        for (int t0 = 0; rc == 0 && t0 < T; t0 += per_call[k]) {
            const int n = T - t0 < per_call[k] ? T - t0 : per_call[k];
            rc = nf_cuda_mla_core_path(paths[k], 0, dlat, dqt + (size_t)t0 * H * kl, dsel + (size_t)t0 * width, n, H, kl,
                                       width, fscale, S, U + (size_t)t0 * H * kl);
        }
        CHECK(rc == 0, "mla core (%s): %s", names[k], nf_error());
        CU(cudaDeviceSynchronize());
        CU(cudaMemcpy(g[k], U, nU * sizeof(float), cudaMemcpyDeviceToHost));
        err[k] = core_err(ref, g[k], T * H, kl);
        ran[k] = 1;
    }
    printf("  mla core H %d kl %d width %d, %d tokens: max rel err vs double", H, kl, width, T);
    for (int k = 0; k < NR; k++)
        if (ran[k]) printf("%s %.2e %s", k ? "," : "", err[k], names[k]);
    printf(" (tol 2e-5)\n");
    for (int k = 0; k < NR; k++) CHECK(err[k] <= 2e-5, "attention core error %.3g (%s)", err[k], names[k]);
    /* a token's result must not depend on how many tokens share its call (cuda_attn.h) */
    size_t ndiff = 0;
    for (size_t i = 0; i < nU; i++) ndiff += memcmp(&g[R_ONE][i], &g[R_GROUPS][i], sizeof(float)) != 0;
    CHECK(ndiff == 0, "%zu of %zu values differ between one-token calls and calls of 4 tokens", ndiff, nU);
    /* the bf16 tensor-core paths (prefill's: NF_MLA_PATH_TC, and the one-kernel NF_MLA_PATH_FLASH where it takes
     * kl): all tokens in one call and in two calls; their operands are rounded to bf16 (~2^-9 each), so the
     * tolerance is bf16's, and they are as independent of T as the others. The flash path gets no score scratch
     * (it must not need one). */
    for (int fl = 0; fl < 2; fl++) {
        const nf_mla_path path = fl ? NF_MLA_PATH_FLASH : NF_MLA_PATH_TC;
        const char *name = fl ? "one-kernel (flash) bf16 tensor cores" : "bf16 tensor cores";
        float *const Sp = fl ? NULL : S;
        if (fl && !nf_mla_flash_supported(kl)) {
            CHECK(nf_cuda_mla_core_path(path, 0, dlat, dqt, dsel, T, H, kl, width, fscale, Sp, U) < 0,
                  "the flash path accepted kv_lora_rank %d", kl);
            printf("  mla core kl %d: the flash path refuses it (as it must)\n", kl);
            continue;
        }
        float *tc1 = nf_xmalloc(nU * sizeof(float)), *tc2 = nf_xmalloc(nU * sizeof(float));
        const int half = T / 2;
        CU(cudaMemset(U, 0xff, nU * sizeof(float))); /* NaN: a value never written shows */
        int rc = nf_cuda_mla_core_path(path, 0, dlat, dqt, dsel, T, H, kl, width, fscale, Sp, U);
        CU(cudaDeviceSynchronize());
        CU(cudaMemcpy(tc1, U, nU * sizeof(float), cudaMemcpyDeviceToHost));
        if (rc == 0) rc = nf_cuda_mla_core_path(path, 0, dlat, dqt, dsel, half, H, kl, width, fscale, Sp, U);
        if (rc == 0)
            rc = nf_cuda_mla_core_path(path, 0, dlat, dqt + (size_t)half * H * kl, dsel + (size_t)half * width,
                                       T - half, H, kl, width, fscale, Sp, U + (size_t)half * H * kl);
        CHECK(rc == 0, "mla core (%s): %s", name, nf_error());
        CU(cudaDeviceSynchronize());
        CU(cudaMemcpy(tc2, U, nU * sizeof(float), cudaMemcpyDeviceToHost));
        const double e = core_err(ref, tc1, T * H, kl);
        size_t nd = 0;
        for (size_t i = 0; i < nU; i++) nd += memcmp(&tc1[i], &tc2[i], sizeof(float)) != 0;
        printf("  mla core H %d kl %d width %d, %d tokens, %s: max rel err vs double %.2e (tol 1e-2), "
               "one call vs two: %zu of %zu values differ\n", H, kl, width, T, name, e, nd, nU);
        CHECK(e <= 1e-2, "attention core error %.3g (%s)", e, name);
        CHECK(nd == 0, "%zu of %zu values differ between one call and two calls on the %s path", nd, nU, name);
        if (fl) { /* over the latent's bf16 copy (nf_mla_flash16, NF_CUDA_MLA_FLASH16): the same bits */
            uint16_t *d16;
            CU(cudaMalloc((void **)&d16, (size_t)ctx * kl * sizeof(uint16_t)));
            CU(cudaMemset(U, 0xff, nU * sizeof(float)));
            rc = nf_mla_latent_bf16(0, dlat, ctx, kl, d16);
            if (rc == 0) rc = nf_mla_flash16(0, d16, dqt, dsel, T, H, kl, width, fscale, U);
            CHECK(rc == 0, "mla core (flash over the bf16 copy): %s", nf_error());
            CU(cudaDeviceSynchronize());
            CU(cudaMemcpy(tc2, U, nU * sizeof(float), cudaMemcpyDeviceToHost));
            size_t n16 = 0;
            for (size_t i = 0; i < nU; i++) n16 += memcmp(&tc1[i], &tc2[i], sizeof(float)) != 0;
            printf("  mla core H %d kl %d, the flash path over the latent's bf16 copy: %zu of %zu values differ\n", H, kl,
                   n16, nU);
            CHECK(n16 == 0, "%zu of %zu values differ between the flash path over f32 rows and over the bf16 copy", n16,
                  nU);
            cudaFree(d16);
        }
        free(tc1);
        free(tc2);
    }
    /* the decode paths refuse what they cannot take */
    CHECK(nf_cuda_mla_core_path(NF_MLA_PATH_TWOPASS, 0, dlat, dqt, dsel, 5, H, kl, width, fscale, S, U) < 0,
          "the two-pass path accepted 5 tokens");
    cudaFree(dlat);
    cudaFree(dqt);
    cudaFree(dsel);
    cudaFree(S);
    cudaFree(U);
    free(lat);
    free(qt);
    free(sel);
    free(perm);
    free(ref);
    free(sc);
    for (int k = 0; k < NR; k++) free(g[k]);
}

/* ------------------------------------------------------------------------------------------------------ */
/* bench                                                                                                    */

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The attention core of one token on each path, the paths in a rotating order within each repetition (so that
 * clocks and caches drift alike for all three): median us per MLA layer. */
static void bench_decode_paths(const float *dlat, const float *dqt, const int32_t *dsel, int H, int kl, int width,
                               int reps, float *S, float *U, cudaEvent_t *ev) {
    enum { NP = 3 };
    static const nf_mla_path paths[NP] = {NF_MLA_PATH_TILED, NF_MLA_PATH_ONLINE, NF_MLA_PATH_TWOPASS};
    float *t[NP];
    for (int k = 0; k < NP; k++) t[k] = nf_xmalloc(reps * sizeof(float));
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
        for (int i = 0; i < NP; i++) {
            const int k = (i + r + 1) % NP;
            CU(cudaEventRecord(ev[0], 0));
            if (nf_cuda_mla_core_path(paths[k], 0, dlat, dqt, dsel, 1, H, kl, width, 1.0f / 16.0f, S, U) < 0)
                nf_die("%s", nf_error());
            CU(cudaEventRecord(ev[1], 0));
            CU(cudaEventSynchronize(ev[1]));
            if (r >= 0) CU(cudaEventElapsedTime(&t[k][r], ev[0], ev[1]));
        }
    }
    for (int k = 0; k < NP; k++) qsort(t[k], reps, sizeof(float), cmp_float);
    printf("%9s %5s decode attention by path, us: tiled %.2f, online %.2f, two-pass %.2f\n", "", "", t[0][reps / 2] * 1000.0,
           t[1][reps / 2] * 1000.0, t[2][reps / 2] * 1000.0);
    for (int k = 0; k < NP; k++) free(t[k]);
}

/* The attention core of a prefill chunk of T tokens on the f32 tiled path and on the tensor-core path, in a
 * rotating order within each repetition: median us per token per MLA layer, and the TFLOPS of the two products
 * (2 x H x kl multiply-adds per valid selected entry, counted from the selection rows). */
static void bench_prefill_paths(const float *dlat, int64_t ctx, const float *dqt, const int32_t *dsel, int T, int H,
                                int kl, int width, int reps, float *S, float *U, cudaEvent_t *ev) {
    enum { NP = 4 }; /* the fourth: the one-kernel core over the latent's bf16 copy (made once, outside the timing) */
    static const nf_mla_path paths[NP] = {NF_MLA_PATH_TILED, NF_MLA_PATH_TC, NF_MLA_PATH_FLASH, NF_MLA_PATH_FLASH};
    uint16_t *d16;
    CU(cudaMalloc((void **)&d16, (size_t)ctx * kl * sizeof(uint16_t)));
    if (nf_mla_latent_bf16(0, dlat, ctx, kl, d16) < 0) nf_die("%s", nf_error());
    int32_t *hsel = nf_xmalloc((size_t)T * width * sizeof(int32_t));
    CU(cudaMemcpy(hsel, dsel, (size_t)T * width * sizeof(int32_t), cudaMemcpyDeviceToHost));
    double valid = 0;
    for (size_t i = 0; i < (size_t)T * width; i++) valid += hsel[i] >= 0;
    free(hsel);
    float *t[NP];
    for (int k = 0; k < NP; k++) t[k] = nf_xmalloc(reps * sizeof(float));
    for (int r = -1; r < reps; r++) {
        for (int j = 0; j < NP; j++) {
            const int k = (r + 1 + j) % NP;
            CU(cudaEventRecord(ev[0], 0));
            if ((k == 3 ? nf_mla_flash16(0, d16, dqt, dsel, T, H, kl, width, 1.0f / 16.0f, U)
                        : nf_cuda_mla_core_path(paths[k], 0, dlat, dqt, dsel, T, H, kl, width, 1.0f / 16.0f, S, U)) < 0)
                nf_die("%s", nf_error());
            CU(cudaEventRecord(ev[1], 0));
            CU(cudaEventSynchronize(ev[1]));
            if (r >= 0) CU(cudaEventElapsedTime(&t[k][r], ev[0], ev[1]));
        }
    }
    cudaFree(d16);
    for (int k = 0; k < NP; k++) qsort(t[k], reps, sizeof(float), cmp_float);
    const double flop = 4.0 * H * kl * valid; /* scores and values: 2 flops per multiply-add each */
    printf("%9s %5s prefill attention by path, us per token: tiled %.2f (%.1f TFLOPS), tensor cores %.2f (%.1f TFLOPS), "
           "one kernel %.2f (%.1f TFLOPS), one kernel over bf16 rows %.2f (%.1f TFLOPS)\n",
           "", "", t[0][reps / 2] * 1000.0 / T, flop / (t[0][reps / 2] * 1e-3) / 1e12, t[1][reps / 2] * 1000.0 / T,
           flop / (t[1][reps / 2] * 1e-3) / 1e12, t[2][reps / 2] * 1000.0 / T, flop / (t[2][reps / 2] * 1e-3) / 1e12,
           t[3][reps / 2] * 1000.0 / T, flop / (t[3][reps / 2] * 1e-3) / 1e12);
    for (int k = 0; k < NP; k++) free(t[k]);
}

/* Release dims (spec §1): indexer 32 heads x 128, kpool 4, top-k 2048 tokens (512 pools) + tail; MLA 64 heads,
 * latent 512, 11 MLA layers. Times per MLA layer, medians of `reps` runs; microseconds per token. */
static void bench(int quick) {
    const int nh = 32, hd = 128, kpool = 4, topk = 2048, budget = topk / kpool, width = topk + kpool - 1;
    const int H = 64, kl = 512, reps = quick ? 3 : 20, n_mla = 11;
    const int64_t ctxs[] = {2048, 8192, 32768, 65536, 131072, 300000, 1048576};
    const int nctx = quick ? 3 : (int)(sizeof ctxs / sizeof ctxs[0]);
    const int64_t max_ctx = ctxs[nctx - 1], max_pool = max_ctx / kpool + 1;
    const int Tpre = 256;
    printf("attn bench: glm53 dims (indexer %d x %d, kpool %d, top-k %d; MLA %d heads x %d latent); us per token per "
           "MLA layer (x%d layers in the last column), medians of %d runs\n", nh, hd, kpool, topk, H, kl, n_mla, reps);
    printf("%9s %5s %10s %10s %10s %10s %12s\n", "ctx", "T", "score", "select", "attention", "sum", "x11 layers");
    float *hP = nf_xmalloc((size_t)max_pool * hd * sizeof(float));
    for (int64_t i = 0; i < max_pool * hd; i++) hP[i] = gauss();
    float *hq = nf_xmalloc((size_t)Tpre * nh * hd * sizeof(float)), *hw = nf_xmalloc((size_t)Tpre * nh * sizeof(float));
    for (size_t i = 0; i < (size_t)Tpre * nh * hd; i++) hq[i] = gauss();
    for (int i = 0; i < Tpre * nh; i++) hw[i] = 0.2f * gauss();
    float *dP = dup_to_dev(hP, (size_t)max_pool * hd * sizeof(float));
    float *dq = dup_to_dev(hq, (size_t)Tpre * nh * hd * sizeof(float)), *dw = dup_to_dev(hw, (size_t)Tpre * nh * sizeof(float));
    free(hP);
    /* latent: random rows (generated on the device side by copying one random block repeatedly) */
    float *dlat, *dqt, *S, *U;
    uint32_t *keys, *hist;
    int32_t *dsel;
    const size_t lat_block = (size_t)65536 * kl;
    float *hl = nf_xmalloc(lat_block * sizeof(float));
    for (size_t i = 0; i < lat_block; i++) hl[i] = gauss();
    CU(cudaMalloc((void **)&dlat, (size_t)max_ctx * kl * sizeof(float)));
    for (int64_t r = 0; r < max_ctx; r += 65536) {
        const int64_t nr = max_ctx - r < 65536 ? max_ctx - r : 65536;
        CU(cudaMemcpy(dlat + r * kl, hl, (size_t)nr * kl * sizeof(float), cudaMemcpyHostToDevice));
    }
    free(hl);
    float *hqt = nf_xmalloc((size_t)Tpre * H * kl * sizeof(float));
    for (size_t i = 0; i < (size_t)Tpre * H * kl; i++) hqt[i] = 0.05f * gauss();
    dqt = dup_to_dev(hqt, (size_t)Tpre * H * kl * sizeof(float));
    free(hqt);
    const size_t s_pre = nf_cuda_mla_scratch_floats(Tpre, H, kl, width), s_dec = nf_cuda_mla_scratch_floats(1, H, kl, width);
    CU(cudaMalloc((void **)&S, (s_pre > s_dec ? s_pre : s_dec) * sizeof(float)));
    CU(cudaMalloc((void **)&U, (size_t)Tpre * H * kl * sizeof(float)));
    CU(cudaMalloc((void **)&keys, (size_t)Tpre * max_pool * sizeof(uint32_t)));
    CU(cudaMalloc((void **)&hist, (size_t)Tpre * NF_IDX_HIST_BINS * sizeof(uint32_t)));
    CU(cudaMalloc((void **)&dsel, (size_t)Tpre * width * sizeof(int32_t)));
    cudaEvent_t ev[4];
    for (int i = 0; i < 4; i++) CU(cudaEventCreate(&ev[i]));
    float *t_sc = nf_xmalloc(reps * sizeof(float)), *t_se = nf_xmalloc(reps * sizeof(float)), *t_at = nf_xmalloc(reps * sizeof(float));
    for (int ci = 0; ci < nctx; ci++) {
        for (int mode = 0; mode < 2; mode++) {
            const int64_t ctx = ctxs[ci];
            const int T = mode == 0 ? 1 : Tpre;
            const int64_t pos0 = ctx - T, npool = ctx / kpool;
            for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
                CU(cudaEventRecord(ev[0], 0));
                CU(cudaMemsetAsync(hist, 0, (size_t)T * NF_IDX_HIST_BINS * sizeof(uint32_t), 0));
                if (nf_cuda_idx_score(0, dP, dq, dw, pos0, T, nh, hd, kpool, budget, keys, npool + 1, hist) < 0)
                    nf_die("%s", nf_error());
                CU(cudaEventRecord(ev[1], 0));
                if (nf_cuda_idx_topk(0, keys, npool + 1, hist, pos0, T, kpool, budget, width, 1, dsel) < 0)
                    nf_die("%s", nf_error());
                CU(cudaEventRecord(ev[2], 0));
                if (nf_cuda_mla_core(0, dlat, dqt, dsel, T, H, kl, width, 1.0f / 16.0f, S, U) < 0) nf_die("%s", nf_error());
                CU(cudaEventRecord(ev[3], 0));
                CU(cudaEventSynchronize(ev[3]));
                if (r < 0) continue;
                CU(cudaEventElapsedTime(&t_sc[r], ev[0], ev[1]));
                CU(cudaEventElapsedTime(&t_se[r], ev[1], ev[2]));
                CU(cudaEventElapsedTime(&t_at[r], ev[2], ev[3]));
            }
            qsort(t_sc, reps, sizeof(float), cmp_float);
            qsort(t_se, reps, sizeof(float), cmp_float);
            qsort(t_at, reps, sizeof(float), cmp_float);
            const double us = 1000.0 / T, a = t_sc[reps / 2] * us, b = t_se[reps / 2] * us, c = t_at[reps / 2] * us;
            printf("%9lld %5d %10.2f %10.2f %10.2f %10.2f %12.1f\n", (long long)ctx, T, a, b, c, a + b + c, (a + b + c) * n_mla);
            if (T == 1) bench_decode_paths(dlat, dqt, dsel, H, kl, width, reps, S, U, ev);
            else bench_prefill_paths(dlat, ctx, dqt, dsel, T, H, kl, width, reps, S, U, ev);
        }
    }
    for (int i = 0; i < 4; i++) cudaEventDestroy(ev[i]);
    free(t_sc);
    free(t_se);
    free(t_at);
    free(hq);
    free(hw);
    cudaFree(dP);
    cudaFree(dq);
    cudaFree(dw);
    cudaFree(dlat);
    cudaFree(dqt);
    cudaFree(S);
    cudaFree(U);
    cudaFree(keys);
    cudaFree(hist);
    cudaFree(dsel);
}

/* ------------------------------------------------------------------------------------------------------ */

int nf_gpu_test_attn(int do_bench, int quick) {
    n_failed = 0;
    /* {hd, nh, kpool, topk, tail, data, pos0, T} */
    const sel_case cases[] = {
        /* release dims: decode at depth, then a prefill chunk crossing the dense/sparse boundary */
        {128, 32, 4, 2048, 1, D_RANDOM, 9000, 1},
        {128, 32, 4, 2048, 1, D_RANDOM, 2030, 40},
        {128, 32, 4, 2048, 1, D_TIES, 6001, 6},
        /* small dims, long contexts: every selection path */
        {16, 8, 4, 32, 1, D_RANDOM, 3000, 12},
        {16, 8, 4, 32, 1, D_TIES, 4003, 1},
        {16, 8, 4, 32, 1, D_TIES, 40, 9},
        {16, 8, 4, 256, 1, D_CROWDED, 24000, 2},
        {16, 8, 4, 256, 1, D_CROWDED, 24000, 6},
        {16, 8, 4, 256, 1, D_ZEROS, 20000, 2},
        {16, 8, 4, 256, 1, D_ZEROS, 9000, 5},
        {16, 8, 4, 32, 1, D_SOME_ZEROS, 9000, 5},
        {16, 8, 16, 64, 1, D_RANDOM, 5000, 7},
        {16, 8, 1, 32, 0, D_TIES, 700, 3},
        {12, 5, 4, 32, 0, D_RANDOM, 1500, 6},
    };
    const int ncases = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < ncases; i++) {
        if (quick && i % 3 != 0) continue;
        sel_check(&cases[i]);
    }
    core_check(64, 512, 2051, 6000, 7, 0);
    core_check(70, 64, 300, 1000, 7, 1);
    core_check(2, 32, 35, 300, 12, 1);
    if (do_bench) bench(quick);
    printf("attn: %s (%d failed checks)\n", n_failed ? "FAIL" : "PASS", n_failed);
    return n_failed;
}
