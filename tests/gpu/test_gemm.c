/* test_gemm.c — the tiled prefill GEMM (src/cuda/cuda_gemm.cu) against float references on random data (entry
 * nf_gpu_test_gemm, run by `make gpu-test`; `nf-gpu-tests --only gemm --bench` adds the timing table).
 *
 * For every stored format, random rows are quantized with the reference quantizer and dequantized on the CPU
 * (nf_dequantize), then multiplied on the GPU in four layouts: a 2-D matrix (vector count and row count not
 * multiples of the tiles, row length not a multiple of the reduction step, padded output rows), per-head
 * matrices of a 3-D tensor (matrix = v % smod), and routed experts (matrix = ids[v]) with uneven loads and empty
 * experts, both with the activation shared by the slots of a token (xdiv = k) and one activation per vector.
 * Activation padding past n holds NaN and the output padding past `rows` must stay untouched, so a read past the
 * row or a stray store fails. Two references per output, relative to sum_k |w_k x_k| of that output:
 *  - tensor-core mode: the dot of the bf16-rounded weight and activation, summed in double. The GPU multiplies
 *    exactly these bf16 values (products exact in f32) and differs only by f32 accumulation: bound 2e-5 (an
 *    indexing or layout error gives O(1)). Against the unrounded f32 product the error is bf16 rounding: at most
 *    2^-7 per product (both operands rounded to 8 significant bits), far less on average; the bound is 2^-7 and
 *    the mean is printed (the numbers docs/cuda.md quotes).
 *  - f32 mode (F32 weights by default; any format on request): the unrounded f32 product, bound 1e-5.
 * --bench times a 4096x4096 matrix and the GLM-5.3-Flash expert shapes (288 experts, top-8) at T = 512 tokens
 * and prints TFLOPS (2 x rows x n x vectors per call; CUDA events over repeated calls). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_gemm.h"
#include "formats/formats.h"
#include "gpu_env.h"
#include "gpu_tests.h"
#include "util/error.h"

#define CK(x)                                                                                         \
    do {                                                                                              \
        cudaError_t e_ = (x);                                                                         \
        if (e_ != cudaSuccess) nf_die("%s:%d: %s: %s", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
    } while (0)

static int n_failed;
static uint64_t rng = 0x2545f4914f6cdd1dull;
static double uniform(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return ((rng >> 11) + 0.5) / 9007199254740992.0;
}
static float gauss(void) { return (float)(sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform())); }
static float bf16_round(float f) { return nf_bf16_to_f32(nf_f32_to_bf16(f)); }

/* nrows random rows of n values quantized to `type`; *deq gets the dequantized values */
static uint8_t *make_rows(uint32_t type, int64_t nrows, int64_t n, float **deq) {
    const size_t rb = nf_row_bytes(type, n);
    uint8_t *q = nf_xmalloc(rb * nrows + 16);
    float *row = nf_xmalloc(sizeof(float) * n);
    *deq = nf_xmalloc(sizeof(float) * n * nrows);
    for (int64_t r = 0; r < nrows; r++) {
        /* a per-row scale spreads magnitudes as real matrices do */
        const float s = 0.02f * (float)(0.25 + 2 * uniform());
        for (int64_t c = 0; c < n; c++) row[c] = gauss() * s;
        if (nf_quantize(type, row, q + rb * r, n, n, NULL) != rb) nf_die("quantize %s failed", nf_type_get(type)->name);
        if (nf_dequantize(type, q + rb * r, *deq + n * r, n) < 0) nf_die("dequantize failed");
    }
    free(row);
    return q;
}

typedef struct {
    const char *label;
    int64_t rows, n, nmat;
    int nvec, xdiv, smod;
    const int32_t *ids; /* host, nvec entries, or NULL */
    int64_t ldx, ldy;
    nf_gemm_mode mode;
} gemm_case;

static void run_case(uint32_t type, const gemm_case *gc) {
    const char *tn = nf_type_get(type)->name;
    const int64_t rows = gc->rows, n = gc->n, nm = gc->nmat;
    const size_t rb = nf_row_bytes(type, n);
    float *deq;
    uint8_t *W = make_rows(type, nm * rows, n, &deq);
    const int nx = (gc->nvec + gc->xdiv - 1) / gc->xdiv;
    float *x = nf_xmalloc(sizeof(float) * gc->ldx * nx);
    for (int t = 0; t < nx; t++)
        for (int64_t k = 0; k < gc->ldx; k++) x[t * gc->ldx + k] = k < n ? gauss() : NAN;
    const size_t ybytes = sizeof(float) * gc->ldy * gc->nvec;
    float *y = nf_xmalloc(ybytes);
    void *dw;
    float *dx, *dy;
    int32_t *dids = NULL;
    CK(cudaMalloc(&dw, rb * nm * rows + 16));
    CK(cudaMalloc((void **)&dx, sizeof(float) * gc->ldx * nx));
    CK(cudaMalloc((void **)&dy, ybytes));
    CK(cudaMemcpy(dw, W, rb * nm * rows, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, x, sizeof(float) * gc->ldx * nx, cudaMemcpyHostToDevice));
    CK(cudaMemset(dy, 0xff, ybytes));
    if (gc->ids) {
        CK(cudaMalloc((void **)&dids, sizeof(int32_t) * gc->nvec));
        CK(cudaMemcpy(dids, gc->ids, sizeof(int32_t) * gc->nvec, cudaMemcpyHostToDevice));
    }
    nf_gemm_weights w = {dw, type, n, rows, nm, rb, rb * rows};
    int rc = nf_cuda_gemm(&w, dx, gc->ldx, gc->xdiv, gc->smod, dids, dy, gc->ldy, gc->nvec, gc->mode, NULL);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(y, dy, ybytes, cudaMemcpyDeviceToHost));
    const int f32_mode = gc->mode == NF_GEMM_F32 || (gc->mode == NF_GEMM_AUTO && type == NF_TYPE_F32);
    double worst_bf = 0, worst_ex = 0, sum_ex = 0;
    long untouched_bad = 0, cnt = 0;
    for (int v = 0; v < gc->nvec; v++) {
        const int s = gc->ids ? gc->ids[v] : v % gc->smod;
        const float *xv = x + (size_t)(v / gc->xdiv) * gc->ldx;
        for (int64_t r = 0; r < gc->ldy; r++) {
            const float got = y[(size_t)v * gc->ldy + r];
            if (r >= rows) {
                uint32_t bits;
                memcpy(&bits, &got, 4);
                untouched_bad += bits != 0xffffffffu;
                continue;
            }
            const float *wr = deq + ((size_t)s * rows + r) * n;
            double ex = 0, bf = 0, mag = 0;
            for (int64_t k = 0; k < n; k++) {
                ex += (double)wr[k] * xv[k];
                bf += (double)bf16_round(wr[k]) * bf16_round(xv[k]);
                mag += fabs((double)wr[k] * xv[k]);
            }
            mag += 1e-30;
            const double e_ex = fabs(got - ex) / mag, e_bf = fabs(got - bf) / mag;
            if (!(e_ex <= worst_ex)) worst_ex = isnan(e_ex) ? INFINITY : e_ex;
            if (!(e_bf <= worst_bf)) worst_bf = isnan(e_bf) ? INFINITY : e_bf;
            sum_ex += e_ex;
            cnt++;
        }
    }
    int ok = rc == 0 && untouched_bad == 0;
    if (f32_mode) ok &= worst_ex <= 1e-5;
    else ok &= worst_bf <= 2e-5 && worst_ex <= 0.0078125;
    printf("gemm %-8s %-22s %s rows %lld n %lld vectors %d: max err/sum|wx| vs bf16-rounded %.2e, vs f32 %.2e (mean %.2e)%s  %s\n",
           tn, gc->label, f32_mode ? "f32 " : "bf16", (long long)rows, (long long)n, gc->nvec, worst_bf, worst_ex,
           cnt ? sum_ex / cnt : 0.0, untouched_bad ? "  PADDING WRITTEN" : "", ok ? "ok" : "FAIL");
    if (rc != 0) printf("  nf_cuda_gemm returned %d: %s\n", rc, rc < 0 ? nf_error() : "not handled");
    n_failed += !ok;
    cudaFree(dw);
    cudaFree(dx);
    cudaFree(dy);
    if (dids) cudaFree(dids);
    free(W);
    free(deq);
    free(x);
    free(y);
}

/* routed ids for T tokens x k slots over E experts, distinct per token: expert `hot` takes about half of the
 * tokens, experts in `empty` (a bit mask) are never chosen */
static int32_t *make_ids(int T, int k, int E, int hot, unsigned empty) {
    int32_t *ids = nf_xmalloc(sizeof(int32_t) * T * k);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < k; j++) {
            int e;
            for (;;) {
                e = j == 0 && uniform() < 0.5 ? hot : (int)(uniform() * E);
                if ((empty >> e) & 1) continue;
                int dup = 0;
                for (int i = 0; i < j; i++) dup |= ids[t * k + i] == e;
                if (!dup) break;
            }
            ids[t * k + j] = e;
        }
    return ids;
}

static void check_type(uint32_t type) {
    const int64_t bs = nf_type_get(type)->block_size;
    /* reduction lengths that are not multiples of the 64-step; F32/BF16 odd (scalar loads), F16 vector loads */
    const int64_t n = bs == 256 ? 512 : bs == 32 ? 544 : type == NF_TYPE_F16 ? 520 : 517;
    const int64_t ldx = n % 4 ? n + 3 : n + 4;
    gemm_case dense = {"dense", 200, n, 1, 77, 1, 1, NULL, ldx, 203, NF_GEMM_AUTO};
    run_case(type, &dense);
    gemm_case heads = {"3 heads (smod)", 72, n, 3, 3 * 37, 1, 3, NULL, n, 72, NF_GEMM_AUTO};
    run_case(type, &heads);
    int32_t *ids = make_ids(61, 4, 9, 2, (1u << 5) | (1u << 7));
    gemm_case routed = {"9 experts, k 4, xdiv 4", 136, n, 9, 61 * 4, 4, 1, ids, n, 136, NF_GEMM_AUTO};
    run_case(type, &routed);
    gemm_case down = {"9 experts, xdiv 1", 136, n, 9, 61 * 4, 1, 1, ids, ldx, 140, NF_GEMM_AUTO};
    run_case(type, &down);
    free(ids);
    ids = make_ids(150, 2, 4, 1, 0);
    gemm_case wide = {"4 experts, 300 vectors", 130, n, 4, 300, 2, 1, ids, n, 130, NF_GEMM_AUTO};
    run_case(type, &wide);
    free(ids);
    /* >= 96 vectors per matrix: the 128-vector tiles with NF_CUDA_GEMM_BN128=ids|all (a full tile and a partial
     * one of 2 for each expert; 230 dense vectors: one full, one partial), the 64-vector ones without; the product's order of additions does not depend on
     * the tile, so both runs give the same tolerance */
    ids = make_ids(130, 2, 2, 1, 0);
    gemm_case deep = {"2 experts, 260 vectors", 130, n, 2, 260, 2, 1, ids, n, 130, NF_GEMM_AUTO};
    run_case(type, &deep);
    free(ids);
    gemm_case dense230 = {"dense, 230 vectors", 140, n, 1, 230, 1, 1, NULL, ldx, 141, NF_GEMM_AUTO};
    run_case(type, &dense230);
}

static void check_modes_and_refusals(void) {
    /* the other mode of each path: tensor cores on F32 weights, f32 on quantized weights */
    gemm_case bf = {"dense, forced bf16", 150, 520, 1, 70, 1, 1, NULL, 520, 150, NF_GEMM_BF16};
    run_case(NF_TYPE_F32, &bf);
    gemm_case f32q = {"dense, forced f32", 150, 512, 1, 70, 1, 1, NULL, 512, 150, NF_GEMM_F32};
    run_case(NF_TYPE_Q4_K, &f32q);
    run_case(NF_TYPE_IQ2_XXS, &f32q);
    /* a Q4_K matrix whose rows are only 2-byte aligned is refused (1), a row length off the block size fails */
    void *dw;
    float *dx, *dy;
    CK(cudaMalloc(&dw, 4096));
    CK(cudaMalloc((void **)&dx, 4096));
    CK(cudaMalloc((void **)&dy, 4096));
    nf_gemm_weights w = {(uint8_t *)dw + 2, NF_TYPE_Q4_K, 256, 4, 1, 144, 576};
    int rc = nf_cuda_gemm(&w, dx, 256, 1, 1, NULL, dy, 4, 2, NF_GEMM_AUTO, NULL);
    nf_gemm_weights w2 = {dw, NF_TYPE_Q8_0, 48, 4, 1, 34, 136};
    int rc2 = nf_cuda_gemm(&w2, dx, 48, 1, 1, NULL, dy, 4, 2, NF_GEMM_AUTO, NULL);
    nf_gemm_weights w3 = {dw, NF_TYPE_Q4_0, 64, 4, 1, 36, 144};
    int rc3 = nf_cuda_gemm(&w3, dx, 64, 1, 1, NULL, dy, 4, 2, NF_GEMM_AUTO, NULL);
    const int ok = rc == 1 && rc2 < 0 && rc3 == 1;
    printf("gemm refusals: misaligned Q4_K rows -> %d, Q8_0 row of 48 -> %d (%s), Q4_0 -> %d  %s\n", rc, rc2,
           rc2 < 0 ? nf_error() : "no error", rc3, ok ? "ok" : "FAIL");
    n_failed += !ok;
    cudaFree(dw);
    cudaFree(dx);
    cudaFree(dy);
}

/* nrows random rows of `type` (make_rows) on the device; the host copies freed */
static void *device_rows(uint32_t type, int64_t nrows, int64_t n) {
    const size_t rb = nf_row_bytes(type, n);
    float *deq;
    uint8_t *W = make_rows(type, nrows, n, &deq);
    void *dw;
    CK(cudaMalloc(&dw, rb * nrows));
    CK(cudaMemcpy(dw, W, rb * nrows, cudaMemcpyHostToDevice));
    free(W);
    free(deq);
    return dw;
}

/* one product (nf_cuda_gemm, default mode) into host y[rows x nvec]; its return code */
static int product_to_host(const nf_gemm_weights *w, const float *dx, int64_t ldx, int xdiv, int smod,
                           const int32_t *dids, float *dy, int64_t rows, int nvec, float *y) {
    const int rc = nf_cuda_gemm(w, dx, ldx, xdiv, smod, dids, dy, rows, nvec, NF_GEMM_AUTO, NULL);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(y, dy, sizeof(float) * rows * nvec, cudaMemcpyDeviceToHost));
    return rc;
}

/* NF_CUDA_GEMM_PREDEQ (default; =off decodes per tile): a quantized matrix used by >= NF_GEMM_PREDEQ_MIN_VECTORS vectors (dense, and per head)
 * is decoded once to bf16 and multiplied as BF16 weights: every output byte as without the copy (the same decode
 * and rounding), and the copy must have been taken (the count); routed experts never take it */
static void check_predeq(void) {
    static const uint32_t types[] = {NF_TYPE_Q8_0, NF_TYPE_Q4_K, NF_TYPE_Q6_K, NF_TYPE_Q2_K, NF_TYPE_IQ2_XXS};
    const int64_t n = 256, rows = 72;
    const int nvec = 2 * NF_GEMM_PREDEQ_MIN_VECTORS + 6; /* two heads of >= the minimum each */
    float *x = nf_xmalloc(sizeof(float) * n * nvec);
    for (int64_t i = 0; i < n * nvec; i++) x[i] = gauss();
    float *y0 = nf_xmalloc(sizeof(float) * rows * nvec), *y1 = nf_xmalloc(sizeof(float) * rows * nvec);
    float *dx, *dy;
    CK(cudaMalloc((void **)&dx, sizeof(float) * n * nvec));
    CK(cudaMalloc((void **)&dy, sizeof(float) * rows * nvec));
    CK(cudaMemcpy(dx, x, sizeof(float) * n * nvec, cudaMemcpyHostToDevice));
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (int smod = 1; smod <= 2; smod++) {
            const uint32_t type = types[ti];
            const size_t rb = nf_row_bytes(type, n);
            void *dw = device_rows(type, rows * smod, n);
            nf_gemm_weights w = {dw, type, n, rows, smod, rb, rb * rows};
            const int before = nf_cuda_gemm_predeq_count();
            env_saved sv = env_push("NF_CUDA_GEMM_PREDEQ", "off");
            const int rc0 = product_to_host(&w, dx, n, 1, smod, NULL, dy, rows, nvec, y0);
            env_pop(&sv);
            sv = env_push("NF_CUDA_GEMM_PREDEQ", NULL); /* the default, whatever the caller exported */
            const int mid = nf_cuda_gemm_predeq_count();
            const int rc1 = product_to_host(&w, dx, n, 1, smod, NULL, dy, rows, nvec, y1);
            env_pop(&sv);
            const int taken = nf_cuda_gemm_predeq_count() - mid;
            const int same = !memcmp(y0, y1, sizeof(float) * rows * nvec);
            const int ok = rc0 == 0 && rc1 == 0 && mid == before && taken == 1 && same;
            printf("gemm %-8s decoded once (NF_CUDA_GEMM_PREDEQ), %d head%s x %d vectors: copy %s, outputs %s  %s\n",
                   nf_type_get(type)->name, smod, smod > 1 ? "s" : "", nvec / smod, taken == 1 ? "taken" : "NOT TAKEN",
                   same ? "bit-identical" : "DIFFERENT", ok ? "ok" : "FAIL");
            n_failed += !ok;
            cudaFree(dw);
        }
    cudaFree(dx);
    cudaFree(dy);
    free(x), free(y0), free(y1);
}

/* NF_CUDA_GEMM_PREDEQ_EXPERTS (default on; =off decodes per tile): routed experts of >=
 * NF_GEMM_PREDEQ_EXPERT_MIN_VECTORS vectors on average decoded once per batch of experts (here one batch, and batches
 * of 2 of the 5 experts: the tiles of each batch only, the weights indexed from the batch's first expert): every
 * output byte as decoded per tile, the copy taken */
static void check_predeq_experts(void) {
    static const uint32_t types[] = {NF_TYPE_Q8_0, NF_TYPE_Q2_K, NF_TYPE_IQ2_XXS};
    const int64_t n = 256, rows = 72;
    const int E = 5, T = (NF_GEMM_PREDEQ_EXPERT_MIN_VECTORS * E) / 2 + 37, k = 2, nvec = T * k;
    int32_t *ids = make_ids(T, k, E, 3, 0);
    float *x = nf_xmalloc(sizeof(float) * n * T);
    for (int64_t i = 0; i < n * T; i++) x[i] = gauss();
    float *y0 = nf_xmalloc(sizeof(float) * rows * nvec), *y1 = nf_xmalloc(sizeof(float) * rows * nvec);
    float *dx, *dy;
    int32_t *dids;
    CK(cudaMalloc((void **)&dx, sizeof(float) * n * T));
    CK(cudaMalloc((void **)&dy, sizeof(float) * rows * nvec));
    CK(cudaMalloc((void **)&dids, sizeof(int32_t) * nvec));
    CK(cudaMemcpy(dx, x, sizeof(float) * n * T, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dids, ids, sizeof(int32_t) * nvec, cudaMemcpyHostToDevice));
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (int batch = 0; batch <= 2; batch += 2) {
            const uint32_t type = types[ti];
            const size_t rb = nf_row_bytes(type, n);
            void *dw = device_rows(type, rows * E, n);
            nf_gemm_weights w = {dw, type, n, rows, E, rb, rb * rows};
            env_saved so = env_push("NF_CUDA_GEMM_PREDEQ_EXPERTS", "off"); /* the per-tile decode */
            const int rc0 = product_to_host(&w, dx, n, k, 1, dids, dy, rows, nvec, y0);
            env_pop(&so);
            CK(cudaMemset(dy, 0xff, sizeof(float) * rows * nvec));
            const int before = nf_cuda_gemm_predeq_count();
            char b[16];
            snprintf(b, sizeof b, "%d", batch);
            env_saved sv = env_push("NF_CUDA_GEMM_PREDEQ_EXPERTS", "on"),
                      sb = env_push("NF_CUDA_GEMM_PREDEQ_EXPERT_BATCH", batch ? b : NULL);
            const int rc1 = product_to_host(&w, dx, n, k, 1, dids, dy, rows, nvec, y1);
            env_pop(&sb);
            env_pop(&sv);
            const int taken = nf_cuda_gemm_predeq_count() - before;
            const int same = !memcmp(y0, y1, sizeof(float) * rows * nvec);
            const int ok = rc0 == 0 && rc1 == 0 && taken == 1 && same;
            printf("gemm %-8s %d experts decoded once (NF_CUDA_GEMM_PREDEQ_EXPERTS), %s, %d vectors: copy %s, outputs %s  %s\n",
                   nf_type_get(type)->name, E, batch ? "batches of 2" : "one batch", nvec, taken == 1 ? "taken" : "NOT TAKEN",
                   same ? "bit-identical" : "DIFFERENT", ok ? "ok" : "FAIL");
            n_failed += !ok;
            cudaFree(dw);
        }
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dids);
    free(x), free(y0), free(y1), free(ids);
}

/* ---- bench ---- */

/* E*rows rows of `type`: 256 distinct quantized rows repeated (quantizing 2.4 G weights on the CPU would take
 * minutes; the GPU's cost does not depend on the values) */
static void *bench_weights(uint32_t type, int64_t total_rows, int64_t n, size_t *bytes) {
    const size_t rb = nf_row_bytes(type, n);
    const int64_t distinct = total_rows < 256 ? total_rows : 256;
    float *deq;
    uint8_t *src = make_rows(type, distinct, n, &deq);
    free(deq);
    *bytes = rb * total_rows;
    void *d;
    CK(cudaMalloc(&d, *bytes));
    for (int64_t r = 0; r < total_rows; r += distinct) {
        const int64_t c = total_rows - r < distinct ? total_rows - r : distinct;
        CK(cudaMemcpy((uint8_t *)d + rb * r, src, rb * c, cudaMemcpyHostToDevice));
    }
    free(src);
    return d;
}

static void bench_one(const char *label, uint32_t type, int64_t rows, int64_t n, int64_t E, int T, int k,
                      nf_gemm_mode mode) {
    size_t bytes;
    void *dw = bench_weights(type, rows * E, n, &bytes);
    const int nvec = T * k, xdiv = k;
    const int nx = T;
    float *x = nf_xmalloc(sizeof(float) * n * nx);
    for (int64_t i = 0; i < n * nx; i++) x[i] = gauss();
    float *dx, *dy;
    int32_t *dids = NULL;
    CK(cudaMalloc((void **)&dx, sizeof(float) * n * nx));
    CK(cudaMalloc((void **)&dy, sizeof(float) * rows * nvec));
    CK(cudaMemcpy(dx, x, sizeof(float) * n * nx, cudaMemcpyHostToDevice));
    if (E > 1) {
        int32_t *ids = nf_xmalloc(sizeof(int32_t) * nvec);
        for (int t = 0; t < T; t++)
            for (int j = 0; j < k; j++) {
                int e, dup;
                do {
                    e = (int)(uniform() * E);
                    dup = 0;
                    for (int i = 0; i < j; i++) dup |= ids[t * k + i] == e;
                } while (dup);
                ids[t * k + j] = e;
            }
        CK(cudaMalloc((void **)&dids, sizeof(int32_t) * nvec));
        CK(cudaMemcpy(dids, ids, sizeof(int32_t) * nvec, cudaMemcpyHostToDevice));
        free(ids);
    }
    nf_gemm_weights w = {dw, type, n, rows, E, nf_row_bytes(type, n), nf_row_bytes(type, n) * rows};
    for (int i = 0; i < 3; i++)
        if (nf_cuda_gemm(&w, dx, n, xdiv, 1, dids, dy, rows, nvec, mode, NULL) != 0) nf_die("bench: %s", nf_error());
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    const int iters = 20;
    CK(cudaEventRecord(a, NULL));
    for (int i = 0; i < iters; i++) nf_cuda_gemm(&w, dx, n, xdiv, 1, dids, dy, rows, nvec, mode, NULL);
    CK(cudaEventRecord(b, NULL));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    ms /= iters;
    const double flop = 2.0 * rows * n * nvec;
    printf("bench gemm %-8s %-34s %6.3f ms  %6.1f TFLOPS  %6.0f GB/s of weights\n", nf_type_get(type)->name, label, ms,
           flop / (ms * 1e9), bytes / (ms * 1e6));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaFree(dw);
    cudaFree(dx);
    cudaFree(dy);
    if (dids) cudaFree(dids);
    free(x);
}

static void bench(void) {
    static const uint32_t dense_types[] = {NF_TYPE_BF16, NF_TYPE_Q8_0, NF_TYPE_Q4_K};
    for (size_t i = 0; i < sizeof dense_types / sizeof dense_types[0]; i++)
        bench_one("4096x4096, T 512", dense_types[i], 4096, 4096, 1, 512, 1, NF_GEMM_AUTO);
    bench_one("4096x4096, T 2048", NF_TYPE_Q8_0, 4096, 4096, 1, 2048, 1, NF_GEMM_AUTO);
    bench_one("288x4096 router, T 512", NF_TYPE_F32, 288, 4096, 1, 512, 1, NF_GEMM_AUTO);
    static const uint32_t up_types[] = {NF_TYPE_IQ2_XXS, NF_TYPE_Q4_K, NF_TYPE_Q8_0};
    for (size_t i = 0; i < sizeof up_types / sizeof up_types[0]; i++)
        bench_one("288 x 2048x4096 experts, T 512 k 8", up_types[i], 2048, 4096, 288, 512, 8, NF_GEMM_AUTO);
    bench_one("288 x 2048x4096 experts, T 2048 k 8", NF_TYPE_IQ2_XXS, 2048, 4096, 288, 2048, 8, NF_GEMM_AUTO);
    /* a 4096-token prefill chunk of glm53's routed experts: ~114 vectors per expert (NF_CUDA_GEMM_BN128=ids gives
     * them one 128-vector tile instead of two of 64) */
    bench_one("288 x 2048x4096 experts, T 4096 k 8", NF_TYPE_IQ2_XXS, 2048, 4096, 288, 4096, 8, NF_GEMM_AUTO);
    bench_one("288 x 4096x2048 experts, T 4096 k 8", NF_TYPE_Q2_K, 4096, 2048, 288, 4096, 8, NF_GEMM_AUTO);
    bench_one("4096x4096, T 4096", NF_TYPE_Q8_0, 4096, 4096, 1, 4096, 1, NF_GEMM_AUTO);
    /* the 16384-token chunk (the CUDA backend's prefill chunk): ~455 vectors per expert; the dense shape in bf16
     * and Q8_0 (what the per-tile dequantization costs), and the ceiling's own shape for the ratio */
    env_saved so = env_push("NF_CUDA_GEMM_PREDEQ_EXPERTS", "off");
    bench_one("288 x 2048x4096 experts, T 16384 k 8, decoded per tile", NF_TYPE_IQ2_XXS, 2048, 4096, 288, 16384, 8, NF_GEMM_AUTO);
    bench_one("288 x 4096x2048 experts, T 16384 k 8, decoded per tile", NF_TYPE_Q2_K, 4096, 2048, 288, 16384, 8, NF_GEMM_AUTO);
    env_pop(&so);
    env_saved sv = env_push("NF_CUDA_GEMM_PREDEQ_EXPERTS", "on");
    bench_one("288 x 2048x4096 experts, T 16384 k 8, decoded once", NF_TYPE_IQ2_XXS, 2048, 4096, 288, 16384, 8, NF_GEMM_AUTO);
    bench_one("288 x 4096x2048 experts, T 16384 k 8, decoded once", NF_TYPE_Q2_K, 4096, 2048, 288, 16384, 8, NF_GEMM_AUTO);
    bench_one("288 x 2048x4096 experts, T 4096 k 8, decoded once", NF_TYPE_IQ2_XXS, 2048, 4096, 288, 4096, 8, NF_GEMM_AUTO);
    env_pop(&sv);
    bench_one("4096x4096, T 16384", NF_TYPE_BF16, 4096, 4096, 1, 16384, 1, NF_GEMM_AUTO);
    sv = env_push("NF_CUDA_GEMM_PREDEQ", "off");
    bench_one("4096x4096, T 16384, decoded per tile", NF_TYPE_Q8_0, 4096, 4096, 1, 16384, 1, NF_GEMM_AUTO);
    env_pop(&sv);
    bench_one("4096x4096, T 16384, decoded once", NF_TYPE_Q8_0, 4096, 4096, 1, 16384, 1, NF_GEMM_AUTO);
    bench_one("8192x8192, T 8192 (the ceiling's shape)", NF_TYPE_BF16, 8192, 8192, 1, 8192, 1, NF_GEMM_AUTO);
    static const uint32_t down_types[] = {NF_TYPE_Q2_K, NF_TYPE_Q4_K};
    for (size_t i = 0; i < sizeof down_types / sizeof down_types[0]; i++)
        bench_one("288 x 4096x2048 experts, T 512 k 8", down_types[i], 4096, 2048, 288, 512, 8, NF_GEMM_AUTO);
}

int nf_gpu_test_gemm(int bench_mode) {
    n_failed = 0;
    static const uint32_t types[] = {NF_TYPE_F32, NF_TYPE_F16, NF_TYPE_BF16, NF_TYPE_Q8_0,
                                     NF_TYPE_Q4_K, NF_TYPE_Q6_K, NF_TYPE_Q2_K, NF_TYPE_IQ2_XXS};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) check_type(types[i]);
    check_modes_and_refusals();
    check_predeq();
    check_predeq_experts();
    printf("gemm: %s (%d failed checks)\n", n_failed ? "FAIL" : "all passed", n_failed);
    if (bench_mode) bench();
    return n_failed;
}
