/* test_kda.c — the KDA delta-rule recurrence on the GPU at the kernel level (src/cuda/cuda_kda.h) on synthetic
 * data; entry nf_gpu_test_kda (tests/gpu/main.c).
 *
 * Exactness: the fused path (per-token inputs prepared inside the serial loop) and the prepared path (a parallel
 * prep launch, then the ring-buffered scan) compute the same float operations in the same order, so for every
 * shape below the outputs and the final state must be equal BIT FOR BIT between: fused one-shot, prepared
 * one-shot, NF_KDA_AUTO in chunks that mix both paths (chunked prefill), and fused token by token (decode). The
 * shapes cover glm53's head_dim 128 (16-byte copies, 8 warps), a head_dim that is not a multiple of 4 (4-byte
 * copies, a partial column group and a partial warp of rows), the fixtures' 16 (one warp), 36 (a 4-column group),
 * 256 (the 8-slot ring), both gate branches (lower bound < 0: sigmoid; >= 0: softplus); head_dim 512 is refused
 * by the prepared path and runs fused under NF_KDA_AUTO. A CPU reference (src/cpu/kda.c's nf_kda_step on the
 * CPU's own norms and gates) bounds both within 1e-4 relative so that agreement cannot come from a shared
 * degenerate result. Unless --quick or NF_KDA_TEST_SMALL=1 (for scripts/cuemu), glm53's full shape (64 heads,
 * 2048 tokens) is checked the same way (one-shot vs chunks vs fused).
 *
 * The chunked path (cuda_kda_chunk.cu) is not bit-identical to those two (f32, other summation orders): it must
 * stay within CHUNKED_TOL of the CPU reference (at glm53's full shape, of the fused path) one-shot and over calls
 * cut anywhere, equal its own one-shot bit for bit over calls cut at multiples of NF_KDA_CHUNK, be what
 * NF_KDA_AUTO takes from NF_KDA_CHUNKED_MIN_T tokens (and not with NF_CUDA_KDA_CHUNK=off), and refuse
 * head_dim > 128. Dropping P's diagonal (one term of every output) fails it with errors ~1.
 *
 * --bench: glm53's shapes (64 heads x 128), the fused, prepared and chunked paths interleaved round by round in
 * one process, at T = 1 .. 16384: microseconds per call (= per KDA layer) and per token, median of 5 rounds. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cuda/cuda_kda.h"
#include "gpu_tests.h"
#include "util/error.h"

static int n_failed;
#include "gpu_check.h"
#include "gpu_env.h"

#define GPU_RAND_SEED 0x9e3779b97f4a7c15ull
#include "gpu_rand.h"

/* one problem: host inputs, pristine device copies, and working buffers the prepared path may overwrite */
typedef struct {
    int T, H, hd;
    float lb, qscale;
    size_t nS, nqkv, ng, nb, no;
    float *S, *qkv, *g, *dt, *ssm_a, *beta;           /* host */
    float *dS, *dqkv, *dg, *ddt, *dssm_a, *dbeta;     /* device, pristine */
    float *wS, *wqkv, *wg, *wbeta, *wo, *wwork;        /* device, working */
} problem;

static float *dev_copy(const float *h, size_t n) {
    float *d;
    CU(cudaMalloc((void **)&d, n * sizeof(float)));
    CU(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}
static float *dev_alloc(size_t n) {
    float *d;
    CU(cudaMalloc((void **)&d, n * sizeof(float)));
    return d;
}

static void problem_make(problem *p, int T, int H, int hd, float lb) {
    memset(p, 0, sizeof *p);
    p->T = T, p->H = H, p->hd = hd, p->lb = lb, p->qscale = 1.0f / sqrtf((float)hd);
    const size_t inner = (size_t)H * hd;
    p->nS = (size_t)H * hd * hd, p->nqkv = (size_t)T * 3 * inner, p->ng = (size_t)T * inner, p->nb = (size_t)T * H;
    p->no = (size_t)T * inner;
    p->S = malloc(p->nS * sizeof(float)), p->qkv = malloc(p->nqkv * sizeof(float));
    p->g = malloc(p->ng * sizeof(float)), p->dt = malloc(inner * sizeof(float));
    p->ssm_a = malloc(H * sizeof(float)), p->beta = malloc(p->nb * sizeof(float));
    if (!p->S || !p->qkv || !p->g || !p->dt || !p->ssm_a || !p->beta) nf_die("test_kda: out of memory");
    for (size_t i = 0; i < p->nS; i++) p->S[i] = 0.05f * gauss(); /* a state carried from earlier tokens */
    for (size_t i = 0; i < p->nqkv; i++) p->qkv[i] = gauss();
    for (size_t i = 0; i < p->ng; i++) p->g[i] = 2.0f * gauss();
    for (size_t i = 0; i < inner; i++) p->dt[i] = 0.5f * gauss();
    for (int h = 0; h < H; h++) p->ssm_a[h] = -(float)(0.2 + 2.0 * uniform());
    for (size_t i = 0; i < p->nb; i++) p->beta[i] = gauss();
    p->dS = dev_copy(p->S, p->nS), p->dqkv = dev_copy(p->qkv, p->nqkv), p->dg = dev_copy(p->g, p->ng);
    p->ddt = dev_copy(p->dt, inner), p->dssm_a = dev_copy(p->ssm_a, H), p->dbeta = dev_copy(p->beta, p->nb);
    p->wS = dev_alloc(p->nS), p->wqkv = dev_alloc(p->nqkv), p->wg = dev_alloc(p->ng), p->wbeta = dev_alloc(p->nb);
    p->wo = dev_alloc(p->no);
    p->wwork = dev_alloc(nf_cuda_kda_work_floats(T, H, hd) + 4);
}

static void problem_free(problem *p) {
    free(p->S), free(p->qkv), free(p->g), free(p->dt), free(p->ssm_a), free(p->beta);
    float *d[] = {p->dS, p->dqkv, p->dg, p->ddt, p->dssm_a, p->dbeta, p->wS, p->wqkv, p->wg, p->wbeta, p->wo, p->wwork};
    for (size_t i = 0; i < sizeof d / sizeof *d; i++) CU(cudaFree(d[i]));
}

static void restore(const problem *p, cudaStream_t s) {
    CU(cudaMemcpyAsync(p->wS, p->dS, p->nS * sizeof(float), cudaMemcpyDeviceToDevice, s));
    CU(cudaMemcpyAsync(p->wqkv, p->dqkv, p->nqkv * sizeof(float), cudaMemcpyDeviceToDevice, s));
    CU(cudaMemcpyAsync(p->wg, p->dg, p->ng * sizeof(float), cudaMemcpyDeviceToDevice, s));
    CU(cudaMemcpyAsync(p->wbeta, p->dbeta, p->nb * sizeof(float), cudaMemcpyDeviceToDevice, s));
    CU(cudaMemsetAsync(p->wo, 0xff, p->no * sizeof(float), s)); /* NaN: an output never written shows */
}

/* tokens [t0, t0 + n) through `path`; returns nf_cuda_kda_recurrence's result */
static int call(const problem *p, cudaStream_t s, int path, int t0, int n) {
    const size_t inner = (size_t)p->H * p->hd;
    return nf_cuda_kda_recurrence(s, path, p->wS, p->wqkv + (size_t)t0 * 3 * inner, p->wg + (size_t)t0 * inner, p->ddt,
                                  p->dssm_a, p->lb, p->wbeta + (size_t)t0 * p->H, p->qscale,
                                  p->wo + (size_t)t0 * inner, n, p->H, p->hd, p->wwork);
}

/* the whole sequence through `path` in chunks of the given lengths (cyclic; chunk 0 = one-shot); o and the final
 * S copied to the host */
static int run(const problem *p, cudaStream_t s, int path, const int *chunks, int nchunks, float *o, float *S) {
    restore(p, s);
    for (int t = 0, c = 0; t < p->T; c++) {
        int n = nchunks ? chunks[c % nchunks] : p->T;
        if (n > p->T - t) n = p->T - t;
        if (call(p, s, path, t, n) < 0) return -1;
        t += n;
    }
    CU(cudaStreamSynchronize(s));
    CU(cudaGetLastError());
    CU(cudaMemcpy(o, p->wo, p->no * sizeof(float), cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(S, p->wS, p->nS * sizeof(float), cudaMemcpyDeviceToHost));
    return 0;
}

/* the CPU reference: src/cpu/kda.c's preparation and nf_kda_step */
static void cpu_reference(const problem *p, float *o, float *S) {
    const int H = p->H, hd = p->hd, inner = H * hd;
    memcpy(S, p->S, p->nS * sizeof(float));
    float *q = malloc(hd * sizeof(float)), *k = malloc(hd * sizeof(float)), *gate = malloc(hd * sizeof(float));
    if (!q || !k || !gate) nf_die("test_kda: out of memory");
    for (int t = 0; t < p->T; t++) {
        const float *row = p->qkv + (size_t)t * 3 * inner;
        for (int h = 0; h < H; h++) {
            memcpy(q, row + h * hd, hd * sizeof(float));
            memcpy(k, row + inner + h * hd, hd * sizeof(float));
            nf_l2norm_row(q, hd, 1e-6f);
            nf_l2norm_row(k, hd, 1e-6f);
            for (int i = 0; i < hd; i++) q[i] *= p->qscale;
            const float rate = -p->ssm_a[h];
            for (int i = 0; i < hd; i++) {
                const float f = p->g[(size_t)t * inner + h * hd + i] + p->dt[h * hd + i];
                gate[i] = p->lb < 0.0f ? p->lb * nf_sigmoidf(rate * f) : -rate * nf_softplus(f);
            }
            nf_kda_step(S + (size_t)h * hd * hd, hd, hd, q, k, row + 2 * inner + h * hd, gate,
                        nf_sigmoidf(p->beta[(size_t)t * H + h]), o + (size_t)t * inner + h * hd);
        }
    }
    free(q), free(k), free(gate);
}

static double rel_err(const float *a, const float *ref, size_t n) {
    double m = 0.0, r = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - (double)ref[i]);
        if (!(d <= m)) m = d; /* NaN propagates */
        if (fabs((double)ref[i]) > r) r = fabs((double)ref[i]);
    }
    return r > 0.0 ? m / r : m;
}

static size_t bytes_differ(const float *a, const float *b, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += memcmp(a + i, b + i, sizeof(float)) != 0;
    return c;
}

/* every path and chunking of one shape bit-identical to the fused one-shot, all within 1e-4 of the CPU */
static void exact_case(cudaStream_t s, int T, int H, int hd, float lb, int with_cpu) {
    problem p;
    problem_make(&p, T, H, hd, lb);
    const int supported = nf_cuda_kda_prepared_supported(hd);
    float *o0 = malloc(p.no * sizeof(float)), *S0 = malloc(p.nS * sizeof(float));
    float *o1 = malloc(p.no * sizeof(float)), *S1 = malloc(p.nS * sizeof(float));
    if (!o0 || !S0 || !o1 || !S1) nf_die("test_kda: out of memory");
    CHECK(run(&p, s, NF_KDA_FUSED, NULL, 0, o0, S0) == 0, "fused T=%d H=%d hd=%d failed", T, H, hd);
    int nbad = 0;
    double ecpu = -1.0;
    if (with_cpu) {
        float *oc = malloc(p.no * sizeof(float)), *Sc = malloc(p.nS * sizeof(float));
        if (!oc || !Sc) nf_die("test_kda: out of memory");
        cpu_reference(&p, oc, Sc);
        const double eo = rel_err(o0, oc, p.no), es = rel_err(S0, Sc, p.nS);
        CHECK(eo <= 1e-4 && es <= 1e-4, "T=%d H=%d hd=%d lb=%g: fused vs CPU rel err o %.3g S %.3g > 1e-4", T, H, hd,
              lb, eo, es);
        nbad += !(eo <= 1e-4 && es <= 1e-4);
        ecpu = eo > es ? eo : es;
        free(oc), free(Sc);
    }
    /* chunkings: prepared one-shot; AUTO in chunks of both paths (prefill chunks >= NF_KDA_PREPARED_MIN_T, short
     * ones fused); fused token by token (decode) */
    static const int mixed[] = {NF_KDA_PREPARED_MIN_T + 2, 3, NF_KDA_PREPARED_MIN_T, 1, 2 * NF_KDA_PREPARED_MIN_T + 5};
    static const int one[] = {1};
    struct {
        const char *name;
        int path;
        const int *chunks;
        int n;
    } runs[] = {{"prepared one-shot", NF_KDA_PREPARED, NULL, 0},
                {"auto chunked", NF_KDA_AUTO, mixed, (int)(sizeof mixed / sizeof *mixed)},
                {"fused token by token", NF_KDA_FUSED, one, 1}};
    for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
        if (runs[r].path == NF_KDA_PREPARED && !supported) {
            const int rc = call(&p, s, NF_KDA_PREPARED, 0, T);
            CHECK(rc < 0 && strstr(nf_error(), "head_dim"), "hd=%d: the prepared path accepted an unsupported head_dim",
                  hd);
            nbad += !(rc < 0);
            continue;
        }
        const int rc = run(&p, s, runs[r].path, runs[r].chunks, runs[r].n, o1, S1);
        const size_t dobad = rc == 0 ? bytes_differ(o1, o0, p.no) : p.no;
        const size_t dsbad = rc == 0 ? bytes_differ(S1, S0, p.nS) : p.nS;
        CHECK(rc == 0 && dobad == 0 && dsbad == 0,
              "T=%d H=%d hd=%d lb=%g: %s vs fused one-shot: %zu of %zu outputs, %zu of %zu state values differ", T, H,
              hd, lb, runs[r].name, dobad, p.no, dsbad, p.nS);
        nbad += !(rc == 0 && dobad == 0 && dsbad == 0);
    }
    printf("  kda T=%-4d H=%-2d hd=%-3d lb=%-2g prepared %-3s: %s", T, H, hd, lb, supported ? "yes" : "no",
           nbad ? "FAIL" : "bit-identical");
    if (ecpu >= 0.0) printf(" (fused vs CPU: max rel err %.2e)", ecpu);
    printf("\n");
    free(o0), free(S0), free(o1), free(S1);
    problem_free(&p);
}

/* Relative error bound of the chunked path against the CPU reference: it sums in f32 in other orders (its chunk
 * products and the triangular solve), so it is not bit-identical to the serial paths, only this close. */
#define CHUNKED_TOL 2e-5

/* the chunked path: one-shot within CHUNKED_TOL of the CPU (and of the fused path); calls cut at multiples of
 * NF_KDA_CHUNK bit-identical to its one-shot; calls cut elsewhere within CHUNKED_TOL of the CPU; NF_KDA_AUTO with
 * a work buffer takes it in the default mode from NF_KDA_CHUNKED_MIN_T tokens, and not with NF_CUDA_KDA_CHUNK=off
 * (then the prepared path's bits); an unsupported head_dim refused. */
static void chunked_case(cudaStream_t s, int T, int H, int hd, float lb, int with_cpu) {
    problem p;
    problem_make(&p, T, H, hd, lb);
    if (!nf_cuda_kda_chunked_supported(hd)) {
        restore(&p, s);
        const int rc = call(&p, s, NF_KDA_CHUNKED, 0, T);
        CHECK(rc < 0 && strstr(nf_error(), "head_dim"), "hd=%d: the chunked path accepted an unsupported head_dim", hd);
        printf("  kda chunked T=%-5d H=%-2d hd=%-3d: %s\n", T, H, hd, rc < 0 ? "refused (head_dim)" : "FAIL: accepted");
        problem_free(&p);
        return;
    }
    const int before = n_failed;
    float *oc = malloc(p.no * sizeof(float)), *Sc = malloc(p.nS * sizeof(float));
    float *o0 = malloc(p.no * sizeof(float)), *S0 = malloc(p.nS * sizeof(float));
    float *o1 = malloc(p.no * sizeof(float)), *S1 = malloc(p.nS * sizeof(float));
    float *o2 = malloc(p.no * sizeof(float)), *S2 = malloc(p.nS * sizeof(float));
    if (!oc || !Sc || !o0 || !S0 || !o1 || !S1 || !o2 || !S2) nf_die("test_kda: out of memory");
    /* the reference: the CPU, or (without it, at glm53's full shape) the fused GPU path, itself within 1e-4 of
     * the CPU in exact_case */
    if (with_cpu) cpu_reference(&p, oc, Sc);
    else CHECK(run(&p, s, NF_KDA_FUSED, NULL, 0, oc, Sc) == 0, "fused T=%d failed", T);
    CHECK(run(&p, s, NF_KDA_CHUNKED, NULL, 0, o0, S0) == 0, "chunked T=%d H=%d hd=%d: %s", T, H, hd, nf_error());
    /* the default: the second prep kernel preparing its own inputs, the serial pass double-buffered. With the input
     * preparation as a separate pass (NF_CUDA_KDA_FUSED_PREP=off): other roundings of the norms, within the same
     * bound */
    env_saved sv = env_push("NF_CUDA_KDA_FUSED_PREP", "off");
    const int rcf = run(&p, s, NF_KDA_CHUNKED, NULL, 0, o1, S1);
    env_pop(&sv);
    CHECK(rcf == 0, "chunked (separate prep) T=%d: %s", T, nf_error());
    const double efp = fmax(rel_err(o1, oc, p.no), rel_err(S1, Sc, p.nS));
    CHECK(efp <= CHUNKED_TOL, "T=%d H=%d hd=%d: chunked with the separate prep: rel err %.3g > %g", T, H, hd, efp,
          CHUNKED_TOL);
    /* the single-buffered serial pass (NF_CUDA_KDA_SCAN_DB=off): the same operations, the same bits */
    sv = env_push("NF_CUDA_KDA_SCAN_DB", "off");
    const int rcd = run(&p, s, NF_KDA_CHUNKED, NULL, 0, o1, S1);
    env_pop(&sv);
    const size_t ddb = rcd == 0 ? bytes_differ(o1, o0, p.no) + bytes_differ(S1, S0, p.nS) : p.no + p.nS;
    CHECK(ddb == 0, "T=%d H=%d hd=%d: the single-buffered serial pass: %zu values differ from the default's", T, H, hd,
          ddb);
    /* the first prep kernel (NF_CUDA_KDA_PREP_V2=off: a direct exponent per pair, the right-hand sides through
     * global memory), with its own and with the separate input preparation: within the same bound; calls cut at
     * multiples of NF_KDA_CHUNK bit-identical to its one-shot */
    double ev2 = 0.0;
    size_t dv2 = 0;
    sv = env_push("NF_CUDA_KDA_PREP_V2", "off");
    for (int fp = 0; fp < 2; fp++) {
        static const int cuts[] = {NF_KDA_CHUNK, 2 * NF_KDA_CHUNK};
        env_saved sf = env_push("NF_CUDA_KDA_FUSED_PREP", fp ? NULL : "off");
        const int rv = run(&p, s, NF_KDA_CHUNKED, NULL, 0, o1, S1);
        const int rc2 = rv == 0 ? run(&p, s, NF_KDA_CHUNKED, cuts, 2, o2, S2) : -1;
        env_pop(&sf);
        CHECK(rv == 0 && rc2 == 0, "chunked (first prep kernel, fused prep %d) T=%d: %s", fp, T, nf_error());
        const double e = fmax(rel_err(o1, oc, p.no), rel_err(S1, Sc, p.nS));
        CHECK(e <= CHUNKED_TOL, "T=%d H=%d hd=%d: chunked with the first prep kernel (fused prep %d): rel err %.3g > %g",
              T, H, hd, fp, e, CHUNKED_TOL);
        const size_t d = bytes_differ(o2, o1, p.no) + bytes_differ(S2, S1, p.nS);
        CHECK(d == 0, "T=%d H=%d hd=%d: the first prep kernel (fused prep %d) in calls of multiples of %d: %zu values "
              "differ from its one-shot", T, H, hd, fp, NF_KDA_CHUNK, d);
        ev2 = fmax(ev2, e), dv2 += d;
    }
    env_pop(&sv);
    double err = rel_err(o0, oc, p.no), errS = rel_err(S0, Sc, p.nS);
    CHECK(err <= CHUNKED_TOL && errS <= CHUNKED_TOL, "T=%d H=%d hd=%d lb=%g: chunked one-shot vs %s: rel err o %.3g S %.3g > %g",
          T, H, hd, lb, with_cpu ? "CPU" : "fused", err, errS, CHUNKED_TOL);
    static const int aligned[] = {2 * NF_KDA_CHUNK, NF_KDA_CHUNK, 3 * NF_KDA_CHUNK};
    static const int odd[] = {NF_KDA_CHUNK + 37, 23, NF_KDA_CHUNK - 1, 2 * NF_KDA_CHUNK + 5};
    CHECK(run(&p, s, NF_KDA_CHUNKED, aligned, 3, o1, S1) == 0, "chunked (aligned calls): %s", nf_error());
    const size_t da = bytes_differ(o1, o0, p.no) + bytes_differ(S1, S0, p.nS);
    CHECK(da == 0, "T=%d H=%d hd=%d: chunked in calls of multiples of %d: %zu values differ from its one-shot", T, H, hd,
          NF_KDA_CHUNK, da);
    CHECK(run(&p, s, NF_KDA_CHUNKED, odd, 4, o1, S1) == 0, "chunked (odd calls): %s", nf_error());
    const double eodd = fmax(rel_err(o1, oc, p.no), rel_err(S1, Sc, p.nS));
    CHECK(eodd <= CHUNKED_TOL, "T=%d H=%d hd=%d: chunked in odd calls: rel err %.3g > %g", T, H, hd, eodd, CHUNKED_TOL);
    /* the automatic choice */
    CHECK(run(&p, s, NF_KDA_AUTO, NULL, 0, o1, S1) == 0, "auto: %s", nf_error());
    const size_t dauto = bytes_differ(o1, o0, p.no) + bytes_differ(S1, S0, p.nS);
    if (T >= NF_KDA_CHUNKED_MIN_T)
        CHECK(dauto == 0, "T=%d: NF_KDA_AUTO (default mode, work buffer) did not take the chunked path", T);
    sv = env_push("NF_CUDA_KDA_CHUNK", "off");
    const int rca = run(&p, s, NF_KDA_AUTO, NULL, 0, o1, S1);
    env_pop(&sv);
    CHECK(rca == 0 && run(&p, s, nf_cuda_kda_prepared_supported(hd) && T >= NF_KDA_PREPARED_MIN_T ? NF_KDA_PREPARED
                                                                                                  : NF_KDA_FUSED,
                          NULL, 0, o0, S0) == 0,
          "auto / serial: %s", nf_error());
    const size_t doff = bytes_differ(o1, o0, p.no) + bytes_differ(S1, S0, p.nS);
    CHECK(doff == 0, "T=%d: NF_KDA_AUTO with NF_CUDA_KDA_CHUNK=off is not the serial path (%zu values differ)", T, doff);
    printf("  kda chunked T=%-5d H=%-2d hd=%-3d lb=%-2g: %s (vs %s: o %.2e S %.2e, odd calls %.2e; aligned calls "
           "bit-identical: %s; auto %s; separate prep %.2e; single-buffered pass %s; first prep kernel %.2e, cut %s)\n",
           T, H, hd, lb, n_failed == before ? "ok" : "FAIL", with_cpu ? "CPU" : "fused", err, errS, eodd,
           da ? "no" : "yes", T >= NF_KDA_CHUNKED_MIN_T ? (dauto ? "not chunked" : "chunked") : "serial (short)", efp,
           ddb ? "DIFFERENT" : "bit-identical", ev2, dv2 ? "DIFFERENT" : "bit-identical");
    free(oc), free(Sc), free(o0), free(S0), free(o1), free(S1), free(o2), free(S2);
    problem_free(&p);
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* glm53's shapes, the paths interleaved: 5 rounds of (fused, prepared, chunked), each `reps` calls on restored
 * inputs (fused only up to 2048 tokens, chunked from NF_KDA_CHUNKED_MIN_T) */
static void bench(cudaStream_t s) {
    static const int Ts[] = {1, 2, 4, 8, 9, 16, 64, 256, 2048, 16384};
    const int H = 64, hd = 128;
    cudaEvent_t e0, e1;
    CU(cudaEventCreate(&e0));
    CU(cudaEventCreate(&e1));
    printf("  bench kda recurrence, %d heads x %d, lb -5 (us per call = per KDA layer; median of 5 rounds)\n", H, hd);
    for (size_t it = 0; it < sizeof Ts / sizeof *Ts; it++) {
        const int T = Ts[it], reps = T >= 256 ? 1 : 20;
        problem p;
        problem_make(&p, T, H, hd, -5.0f);
        float us[3][5] = {{0}};
        static const int paths[3] = {NF_KDA_FUSED, NF_KDA_PREPARED, NF_KDA_CHUNKED};
        for (int round = 0; round < 5; round++) {
            for (int path = 0; path < 3; path++) {
                if ((path == 0 && T > 2048) || (path == 2 && T < NF_KDA_CHUNKED_MIN_T)) continue;
                restore(&p, s);
                CU(cudaEventRecord(e0, s));
                for (int r = 0; r < reps; r++)
                    if (call(&p, s, paths[path], 0, T) < 0) nf_die("test_kda bench: %s", nf_error());
                CU(cudaEventRecord(e1, s));
                CU(cudaEventSynchronize(e1));
                float ms;
                CU(cudaEventElapsedTime(&ms, e0, e1));
                us[path][round] = 1000.0f * ms / reps;
            }
        }
        for (int path = 0; path < 3; path++) qsort(us[path], 5, sizeof(float), cmp_float);
        printf("  bench kda T=%-5d fused %10.1f us (%7.3f us/token)  prepared %10.1f us (%7.3f us/token)  chunked "
               "%10.1f us (%7.3f us/token)  prepared/chunked x%.2f\n",
               T, us[0][2], us[0][2] / T, us[1][2], us[1][2] / T, us[2][2], us[2][2] / T,
               us[2][2] > 0 ? us[1][2] / us[2][2] : 0.0);
        problem_free(&p);
    }
    CU(cudaEventDestroy(e0));
    CU(cudaEventDestroy(e1));
}

int nf_gpu_test_kda(int bench_on, int quick) {
    n_failed = 0;
    printf("kda: fused vs prepared recurrence (bit-identical), chunked and token by token\n");
    cudaStream_t s;
    CU(cudaStreamCreate(&s));
    const int small = quick || getenv("NF_KDA_TEST_SMALL") != NULL;
    exact_case(s, 37, 2, 128, -5.0f, 1);
    exact_case(s, 29, 3, 100, -5.0f, 1);
    exact_case(s, 50, 2, 16, 0.0f, 1);
    exact_case(s, 23, 2, 36, -5.0f, 1);
    exact_case(s, 12, 1, 256, 0.0f, 1);
    exact_case(s, 10, 1, 512, -5.0f, !small);
    if (!small) exact_case(s, 2048, 64, 128, -5.0f, 0);
    printf("kda: the chunked recurrence (within %.0e of the CPU; bit-identical over calls cut at multiples of %d)\n",
           CHUNKED_TOL, NF_KDA_CHUNK);
    chunked_case(s, 37, 2, 128, -5.0f, 1);  /* one partial chunk */
    chunked_case(s, 300, 2, 128, -5.0f, 1); /* glm53's head_dim, 16-byte copies, a partial last chunk */
    chunked_case(s, 192, 3, 100, -5.0f, 1); /* 4-byte copies, padded key channels, two column blocks */
    chunked_case(s, 130, 2, 16, 0.0f, 1);   /* the fixtures' head_dim, the softplus gate */
    chunked_case(s, 256, 2, 128, 0.0f, 1);  /* glm53's head_dim with the slower softplus decay: the pairs of distant
                                             * 16-token blocks count (prep v2's factored exponents) */
    chunked_case(s, 200, 2, 36, -5.0f, 1);
    chunked_case(s, 70, 1, 256, 0.0f, 1);   /* refused: head_dim > 128 */
    if (!small) chunked_case(s, 2048, 64, 128, -5.0f, 0);
    if (bench_on) bench(s);
    CU(cudaStreamDestroy(s));
    printf("kda: %s\n", n_failed ? "FAIL" : "PASS");
    return n_failed;
}
