/* test_gemv.c — the GPU decode products (src/cuda/cuda_gemv.cu) against the host's dequantize-then-dot, then a
 * bandwidth table beside a read-bandwidth probe (run by `make gpu-test`; `--only gemv --bench` adds the table).
 *
 * Correctness: for every format, jobs of the shapes decode meets — 2048x4096, 4096x2048, rows that are not a
 * multiple of a CTA's batch, the 154880x4096 output head, 3-D expert tensors with per-vector ids (gate and up in
 * one launch, one activation per token; down with one activation per slot), one matrix times 2..8 vectors,
 * per-head matrices (v % smod), shapes only the plain kernel takes, activations spanning 2^-60..2^60, an
 * all-zero activation (the result must be exactly 0) and a NaN or an Inf in one column of the first activation
 * row (every row of the vectors that read it must be NaN, or not finite for the Inf, as f32 products are; the
 * other vectors as usual). Weights come from the reference quantizer on random normal rows; the reference is
 * nf_dequantize's values dotted with x in double. The GPU sums in f32 in another order and applies each block
 * scale once per sub-block (exact in real arithmetic), so the bound is relative to sum |w x| of the row. Output
 * rows are NaN-poisoned (with a finite value in the NaN and Inf cases; an unwritten row fails) and the padding
 * between output vectors and after the last one must stay untouched. NF_GEMV_TEST_SMALL=1 shrinks the shapes
 * (for the CPU emulation, scripts/cuemu). NF_GEMV_DUMP=file appends every case's raw outputs to the file: two
 * builds whose dumps are byte-identical (cmp) compute every product bit for bit alike (a check for kernel rewrites
 * that must not change results).
 * Speed (a benchmark, not a pass/fail criterion): each case is timed as CUDA-graph replays of 20 launches that
 * rotate through weight copies larger than 8x the L2 (random expert ids per launch for the MoE cases); the read
 * probe reads the same number of bytes from the same copies the same way, so "fraction" = probe time / product
 * time (1.0: the product streams its weights as fast as a plain read of them). A 2 GiB probe gives the device's
 * read bandwidth. CSV (header below) to stdout and to $NF_GEMV_CSV if set. Entry point nf_gpu_test_gemv
 * (tests/gpu/main.c). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_bench.h"
#include "cuda/cuda_gemv.h"
#include "gpu_tests.h"
#include "formats/formats.h"
#include "util/error.h"

#define CHECK(x)                                                                                      \
    do {                                                                                              \
        cudaError_t e_ = (x);                                                                         \
        if (e_ != cudaSuccess) nf_die("%s:%d: %s: %s", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
    } while (0)

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return rng_state;
}
static double uniform(void) { return ((rng() >> 11) + 0.5) / 9007199254740992.0; }
static float gauss(void) { return (float)(sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform())); }

static const uint32_t types[] = {NF_TYPE_F32, NF_TYPE_F16, NF_TYPE_BF16, NF_TYPE_Q8_0,
                                 NF_TYPE_Q4_K, NF_TYPE_Q6_K, NF_TYPE_Q2_K, NF_TYPE_IQ2_XXS};
#define N_TYPES (sizeof types / sizeof types[0])
#define TOL 2e-5 /* |gpu - ref| / sum |w x| */

/* $NF_GEMV_DUMP opened for appending, or NULL */
static FILE *dump_file(void) {
    static FILE *f;
    static int opened;
    if (!opened) {
        opened = 1;
        const char *path = getenv("NF_GEMV_DUMP");
        if (path && *path && !(f = fopen(path, "ab"))) nf_die("test_gemv: cannot open NF_GEMV_DUMP=%s", path);
    }
    return f;
}

static int small_mode(void) {
    const char *e = getenv("NF_GEMV_TEST_SMALL");
    return e && *e && strcmp(e, "0");
}

/* `distinct` quantized random rows (row bytes rb each) and their dequantized values */
typedef struct {
    uint32_t type;
    int64_t cols, distinct;
    size_t rb;
    uint8_t *q;
    float *deq;
} rowset;

static rowset make_rows(uint32_t type, int64_t cols, int64_t distinct) {
    rowset s = {type, cols, distinct, nf_row_bytes(type, cols), NULL, NULL};
    s.q = nf_xmalloc(s.rb * distinct);
    s.deq = nf_xmalloc(sizeof(float) * cols * distinct);
    float *row = nf_xmalloc(sizeof(float) * cols);
    for (int64_t r = 0; r < distinct; r++) {
        const float scale = 0.02f * (float)(1 + r % 3);
        for (int64_t c = 0; c < cols; c++) row[c] = gauss() * scale;
        if (nf_quantize(type, row, s.q + s.rb * r, cols, cols, NULL) != s.rb) nf_die("quantize %s failed", nf_type_get(type)->name);
        if (nf_dequantize(type, s.q + s.rb * r, s.deq + cols * r, cols)) nf_die("dequantize %s failed", nf_type_get(type)->name);
    }
    free(row);
    return s;
}
static void free_rows(rowset *s) { free(s->q); free(s->deq); }

/* which distinct row is row r of slice sl of matrix m */
static int64_t src_row(const rowset *s, int m, int64_t sl, int64_t rows, int64_t r) {
    return (int64_t)(((uint64_t)(m * 7919 + sl) * (uint64_t)rows + (uint64_t)r) % (uint64_t)s->distinct);
}

/* Weights of nmat matrices x slices x rows on the device (rows tiled from the row set; big tensors are
 * filled on the device by doubling copies). */
static uint8_t *upload_weights(const rowset *s, int m, int64_t slices, int64_t rows, int woff) {
    const size_t total = s->rb * (size_t)rows * (size_t)slices;
    uint8_t *d;
    CHECK(cudaMalloc((void **)&d, total + (size_t)woff));
    d += woff;
    const int64_t nrows = rows * slices;
    const int64_t host_rows = nrows < 8192 ? nrows : 8192;
    if (host_rows < nrows && s->distinct > host_rows) nf_die("test_gemv: %lld distinct rows do not tile", (long long)s->distinct);
    uint8_t *h = nf_xmalloc(s->rb * (size_t)host_rows);
    for (int64_t f = 0; f < host_rows; f++) {
        const int64_t sl = f / rows, r = f % rows;
        memcpy(h + s->rb * f, s->q + s->rb * src_row(s, m, sl, rows, r), s->rb);
    }
    CHECK(cudaMemcpy(d, h, s->rb * (size_t)host_rows, cudaMemcpyHostToDevice));
    free(h);
    /* flat row f's source is (m*7919*rows + f) % distinct: period `distinct`, so copy whole periods */
    int64_t have = host_rows - host_rows % s->distinct;
    if (have <= 0) have = host_rows;
    while (have < nrows) {
        const int64_t n = have < nrows - have ? have : nrows - have;
        CHECK(cudaMemcpy(d + s->rb * (size_t)have, d, s->rb * (size_t)n, cudaMemcpyDeviceToDevice));
        have += n;
    }
    return d;
}

typedef struct {
    const char *name;
    int64_t rows, cols, slices; /* slices > 1: 3-D tensor */
    int nmat, nvec, xdiv, smod, use_ids;
    int xkind;                  /* 0 gauss, 1 gauss * 2^[-60, 60], 2 zeros, X_NAN / X_INF: gauss with a NaN / an
                                 * Inf in one column of the first activation row */
    int woff;                   /* weights start this many bytes after an aligned address */
    int64_t distinct;           /* distinct weight rows (tiled) */
    int sample;                 /* check every sample-th row (plus the last 64) */
    int fuse;                   /* 0 none; FUSE_XM per-matrix activations, FUSE_SWIGLU xup, FUSE_NORM xnorm,
                                 * FUSE_FLAT matrices of different heights on one vector (nf_gemv_job.mrows) */
} job_case;
enum { FUSE_XM = 1, FUSE_SWIGLU = 2, FUSE_NORM = 3, FUSE_FLAT = 4 };
enum { X_NAN = 3, X_INF = 4 };

/* whether f has the bits of the output poison, bytes pb */
static int poisoned(float f, int pb) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u == 0x01010101u * (uint32_t)pb;
}

/* heights of a FUSE_FLAT case's matrices: the case's rows, then uneven fractions of it (batch-sized and not, down
 * to one row), so that batches of several matrices meet in one grid and partial last batches occur */
static int64_t flat_rows(int64_t rows, int m) {
    static const int64_t num[8] = {1, 1, 1, 1, 3, 1, 5, 1}, den[8] = {1, 3, 2, 64, 7, 1000000, 16, 1};
    const int64_t r = rows * num[m] / den[m] + (m == 2 ? 3 : 0);
    return r < 1 ? 1 : r > rows ? rows : r;
}
#define SWIGLU_LIMIT 10.0f
#define NORM_EPS 1e-6f

/* the reference activation of a SwiGLU job (src/cpu's clamped SwiGLU, in double) */
static double swiglu_ref(double g, double u) {
    if (g > SWIGLU_LIMIT) g = SWIGLU_LIMIT;
    if (u > SWIGLU_LIMIT) u = SWIGLU_LIMIT;
    if (u < -SWIGLU_LIMIT) u = -SWIGLU_LIMIT;
    return g / (1.0 + exp(-g)) * u;
}

/* set during the passes over the cases with a warp-per-row kernel forced on (cases it does not take are skipped):
 * ROWS_IQ2 (cuda_gemv_iq2.cu) or ROWS_Q2K (cuda_gemv_q2k.cu); g_rows_taken counts the cases it ran */
enum { ROWS_IQ2 = 1, ROWS_Q2K = 2 };
static int g_rows_pass, g_rows_taken;

/* Run one case for one format; returns 1 if it passed, -1 when skipped (g_rows_pass). */
static int check_case(uint32_t type, const job_case *jc) {
    const int64_t rows = jc->rows, cols = jc->cols, slices = jc->slices;
    const size_t rb = nf_row_bytes(type, cols);
    if (!rb) return 1; /* the format does not fit this row length */
    /* SwiGLU staging is for the quantized formats (the float ones read their activations unstaged); the in-kernel
     * norm for f32 rows of 16384 */
    if (jc->fuse == FUSE_SWIGLU && (type == NF_TYPE_F32 || type == NF_TYPE_F16 || type == NF_TYPE_BF16)) return 1;
    if (jc->fuse == FUSE_NORM && type != NF_TYPE_F32) return 1;
    rowset rs = make_rows(type, cols, jc->distinct);
    const int xdiv = jc->xdiv > 1 ? jc->xdiv : 1;
    const int nx = (jc->nvec + xdiv - 1) / xdiv;
    const int64_t ldx = cols + 12, ldy = rows + 5;
    /* activation sets: one, or one per matrix (FUSE_XM), or gate and up (FUSE_SWIGLU: up in set 1) */
    const int nsets = jc->fuse == FUSE_XM ? jc->nmat : jc->fuse == FUSE_SWIGLU ? 2 : 1;
    float *xset[NF_CUDA_GEMV_MAX_MATS] = {NULL};
    for (int k = 0; k < nsets; k++) {
        xset[k] = nf_xcalloc((size_t)nx * ldx, sizeof(float));
        for (int i = 0; i < nx; i++)
            for (int64_t c = 0; c < cols; c++) {
                float v = jc->xkind == 2 ? 0.f : gauss();
                if (jc->xkind == 1) v = ldexpf(v, (int)(rng() % 121) - 60);
                if (jc->fuse == FUSE_SWIGLU) v *= 6.0f; /* some beyond the clamp */
                xset[k][(size_t)i * ldx + c] = v;
            }
    }
    /* one column of row 0 inside a chunk of both warp-per-row kernels (not its first) */
    if (jc->xkind == X_NAN || jc->xkind == X_INF) xset[0][cols / 2 + 37] = jc->xkind == X_NAN ? NAN : -INFINITY;
    /* the output poison: NaN (0xff bytes), or 0x7f7f7f7f (finite) where NaN is a result */
    const int pb = jc->xkind == X_NAN || jc->xkind == X_INF ? 0x7f : 0xff;
    /* what the product sees: per set, the activation after the fused operation */
    double *xeff[NF_CUDA_GEMV_MAX_MATS] = {NULL};
    for (int k = 0; k < (jc->fuse == FUSE_XM ? nsets : 1); k++) {
        xeff[k] = nf_xcalloc((size_t)nx * ldx, sizeof(double));
        for (int i = 0; i < nx; i++) {
            const float *xr = xset[k] + (size_t)i * ldx;
            double r = 1.0;
            if (jc->fuse == FUSE_NORM) {
                double ss = 0;
                for (int64_t c = 0; c < cols; c++) ss += (double)xr[c] * xr[c];
                r = 1.0 / sqrt(ss / (double)cols + NORM_EPS);
            }
            for (int64_t c = 0; c < cols; c++)
                xeff[k][(size_t)i * ldx + c] =
                    jc->fuse == FUSE_SWIGLU ? swiglu_ref(xr[c], xset[1][(size_t)i * ldx + c]) : xr[c] * r;
        }
    }
    float *x = xset[0];
    int32_t ids[64];
    for (int v = 0; v < jc->nvec; v++) ids[v] = (int32_t)(rng() % (uint64_t)slices);
    nf_gemv_job j;
    memset(&j, 0, sizeof j);
    j.type = type;
    j.rows = rows;
    j.cols = cols;
    j.slice_bytes = rb * (size_t)rows;
    j.ldx = ldx;
    j.xdiv = xdiv;
    j.smod = jc->smod;
    j.ldy = ldy;
    j.nvec = jc->nvec;
    uint8_t *dw[NF_CUDA_GEMV_MAX_MATS] = {NULL};
    float *dy[NF_CUDA_GEMV_MAX_MATS] = {NULL}, *dx;
    int32_t *dids = NULL;
    const size_t ybytes = sizeof(float) * ((size_t)jc->nvec * ldy + 64);
    for (int m = 0; m < jc->nmat; m++) {
        dw[m] = upload_weights(&rs, m, slices, rows, jc->woff);
        CHECK(cudaMalloc((void **)&dy[m], ybytes));
        CHECK(cudaMemset(dy[m], pb, ybytes));
        j.w[m] = dw[m];
        j.y[m] = dy[m];
    }
    CHECK(cudaMalloc((void **)&dx, sizeof(float) * (size_t)nx * ldx));
    CHECK(cudaMemcpy(dx, x, sizeof(float) * (size_t)nx * ldx, cudaMemcpyHostToDevice));
    j.x = dx;
    float *dxs[NF_CUDA_GEMV_MAX_MATS] = {NULL};
    for (int k = 1; k < nsets; k++) {
        CHECK(cudaMalloc((void **)&dxs[k], sizeof(float) * (size_t)nx * ldx));
        CHECK(cudaMemcpy(dxs[k], xset[k], sizeof(float) * (size_t)nx * ldx, cudaMemcpyHostToDevice));
    }
    if (jc->fuse == FUSE_XM) {
        j.xm[0] = dx;
        for (int k = 1; k < nsets; k++) j.xm[k] = dxs[k];
    } else if (jc->fuse == FUSE_SWIGLU) {
        j.xup = dxs[1];
        j.act_limit = SWIGLU_LIMIT;
    } else if (jc->fuse == FUSE_NORM) {
        j.xnorm = 1;
        j.xnorm_eps = NORM_EPS;
    }
    /* a fused job the kernels do not take is an error of this test's shapes, not a skip */
    int taken = jc->fuse == FUSE_SWIGLU ? nf_cuda_gemv_stages_x(&j) : jc->fuse == FUSE_NORM ? nf_cuda_gemv_norms_x(&j) : 1;
    if (jc->use_ids) {
        CHECK(cudaMalloc((void **)&dids, sizeof ids));
        CHECK(cudaMemcpy(dids, ids, sizeof ids, cudaMemcpyHostToDevice));
        j.ids = dids;
    }
    if (jc->fuse == FUSE_FLAT)
        for (int m = 0; m < jc->nmat; m++) j.mrows[m] = flat_rows(rows, m);
    const int streams = nf_cuda_gemv_streams(&j);
    if (jc->fuse == FUSE_FLAT) taken = streams; /* the shapes of this test stream: one launch, not the fallback */
    if (!taken) {
        printf("gemv %-8s %-10s: the fused job is not taken by the kernels  FAIL\n", nf_type_get(type)->name, jc->name);
        return 0;
    }
    /* the warp-per-row kernels (g_rows_pass: their passes over the cases) round the activation to 24 bits per
     * chunk of columns (IQ2_XXS: 64, Q2_K: 128): each row may be off by one activation unit (amax / (2^23 - 1)) per
     * value on top of its roundings */
    const int rows_kind = nf_cuda_gemv_iq2_takes(&j) ? ROWS_IQ2 : nf_cuda_gemv_q2k_takes(&j) ? ROWS_Q2K : 0;
    const int iq2rows = rows_kind != 0, chunk = rows_kind == ROWS_Q2K ? 128 : 64;
    const int skip = g_rows_pass && rows_kind != g_rows_pass;
    if (!skip && nf_cuda_gemv_run(&j, NULL)) nf_die("%s", nf_error());
    CHECK(cudaDeviceSynchronize());
    float *y = nf_xmalloc(ybytes), *y1 = nf_xmalloc(ybytes);
    double worst = 0;
    int64_t bad_rows = 0, pad_bad = 0, worst_r = -1, not_same = 0, over = 0;
    int worst_v = 0, worst_m = 0, zero_bad = 0, finite_bad = 0;
    for (int m = 0; !skip && m < jc->nmat; m++) {
        CHECK(cudaMemcpy(y, dy[m], ybytes, cudaMemcpyDeviceToHost));
        const int64_t mr = jc->fuse == FUSE_FLAT ? j.mrows[m] : rows; /* rows of this matrix */
        if (jc->fuse == FUSE_FLAT) {
            /* the same bits as a job of this matrix alone */
            const nf_gemv_job one = nf_cuda_gemv_one_of(&j, m);
            CHECK(cudaMemset(dy[m], pb, ybytes));
            if (nf_cuda_gemv_run(&one, NULL)) nf_die("%s", nf_error());
            CHECK(cudaDeviceSynchronize());
            CHECK(cudaMemcpy(y1, dy[m], ybytes, cudaMemcpyDeviceToHost));
            not_same += memcmp(y, y1, sizeof(float) * (size_t)mr) != 0;
        }
        if (dump_file() && fwrite(y, 1, ybytes, dump_file()) != ybytes) nf_die("test_gemv: NF_GEMV_DUMP write failed");
        for (int v = 0; v < jc->nvec; v++) {
            const int64_t sl = jc->use_ids ? ids[v] : v % (jc->smod > 1 ? jc->smod : 1);
            const double *xv = xeff[jc->fuse == FUSE_XM ? m : 0] + (size_t)(v / xdiv) * ldx;
            for (int64_t r = 0; r < mr; r++) {
                const float got = y[(size_t)v * ldy + r];
                if (poisoned(got, pb)) { bad_rows++; continue; }
                if ((jc->xkind == X_NAN || jc->xkind == X_INF) && v / xdiv == 0) { /* reads the NaN or Inf */
                    finite_bad += jc->xkind == X_NAN ? !isnan(got) : isfinite(got);
                    continue;
                }
                if (r % jc->sample && r < mr - 64) continue;
                const float *w = rs.deq + cols * src_row(&rs, m, sl, rows, r);
                double ref = 0, mag = 0, fx = 0;
                for (int64_t c = 0; c < cols; c++) {
                    ref += (double)w[c] * xv[c];
                    mag += fabs((double)w[c] * xv[c]);
                }
                if (iq2rows)
                    for (int64_t c0 = 0; c0 < cols; c0 += chunk) {
                        double amax = 0, sw = 0;
                        for (int64_t c = c0; c < c0 + chunk; c++) {
                            amax = fmax(amax, fabs(xv[c]));
                            sw += fabs((double)w[c]);
                        }
                        fx += sw * amax / 8388607.0;
                    }
                if (jc->xkind == 2 && got != 0.f) zero_bad++;
                /* the kernel's sums are exact integers up to a few f32 roundings: 1e-6, not TOL, besides fx */
                over += !(fabs(got - ref) <= (iq2rows ? 1e-6 : TOL) * mag + fx) && mag > 0;
                const double err = fabs(got - ref) / (mag > 0 ? mag : 1e-300);
                if (!(err <= worst) && mag > 0) { worst = err; worst_r = r; worst_v = v; worst_m = m; }
                if (mag == 0 && got != 0.f) zero_bad++;
            }
            for (int64_t r = mr; r < ldy; r++) pad_bad += !poisoned(y[(size_t)v * ldy + r], pb);
        }
        for (int i = 0; i < 64; i++) pad_bad += !poisoned(y[(size_t)jc->nvec * ldy + i], pb);
    }
    const int ok = !over && !bad_rows && !pad_bad && !zero_bad && !not_same && !finite_bad;
    if (!skip)
        printf("gemv %-8s %-10s %6lldx%-5lld x%lld nmat %d nvec %d %-7s max |gpu-ref|/sum|wx| %.2e", nf_type_get(type)->name,
               jc->name, (long long)rows, (long long)cols, (long long)slices, jc->nmat, jc->nvec,
               rows_kind == ROWS_IQ2 ? "iq2rows" : rows_kind == ROWS_Q2K ? "q2krows" : streams ? "stream" : "plain", worst);
    if (over) printf(", %lld rows beyond the bound", (long long)over);
    if (bad_rows) printf(", %lld rows not written", (long long)bad_rows);
    if (pad_bad) printf(", %lld writes outside the outputs", (long long)pad_bad);
    if (zero_bad) printf(", %d nonzero results of a zero product", zero_bad);
    if (finite_bad) printf(", %d rows of the %s activation %s", finite_bad, jc->xkind == X_NAN ? "NaN" : "Inf",
                           jc->xkind == X_NAN ? "not NaN" : "finite");
    if (not_same) printf(", %lld matrices differ from their own job's bits", (long long)not_same);
    if (!ok && worst_r >= 0) printf(" (worst: matrix %d vector %d row %lld)", worst_m, worst_v, (long long)worst_r);
    if (!skip) printf("  %s\n", ok ? "ok" : "FAIL");
    for (int m = 0; m < jc->nmat; m++) { cudaFree(dw[m] - jc->woff); cudaFree(dy[m]); }
    cudaFree(dx);
    for (int k = 1; k < nsets; k++) cudaFree(dxs[k]);
    if (dids) cudaFree(dids);
    for (int k = 0; k < nsets; k++) free(xset[k]);
    for (int k = 0; k < NF_CUDA_GEMV_MAX_MATS; k++) free(xeff[k]);
    free(y);
    free(y1);
    free_rows(&rs);
    if (skip) return -1;
    g_rows_taken += iq2rows;
    return ok;
}

/* ---- bandwidth table ---- */

typedef struct {
    double us, gbps;
} timing;

/* time `launches` of fn(i) replayed from a CUDA graph (20 launches per graph) */
typedef void (*launch_fn)(void *ctx, int i, cudaStream_t s);
static timing time_graph(launch_fn fn, void *ctx, double bytes_per_launch, cudaStream_t s) {
    const int per_graph = 20, replays = 20;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed)); /* the launches query device attributes */
    for (int i = 0; i < per_graph; i++) fn(ctx, i, s);
    CHECK(cudaStreamEndCapture(s, &g));
    CHECK(cudaGraphInstantiate(&ge, g, 0));
    for (int i = 0; i < 3; i++) CHECK(cudaGraphLaunch(ge, s));
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a)); CHECK(cudaEventCreate(&b));
    CHECK(cudaEventRecord(a, s));
    for (int i = 0; i < replays; i++) CHECK(cudaGraphLaunch(ge, s));
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    CHECK(cudaGetLastError());
    timing t;
    t.us = 1000.0 * ms / (per_graph * replays);
    t.gbps = bytes_per_launch / (t.us * 1e3);
    cudaEventDestroy(a); cudaEventDestroy(b);
    cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
    return t;
}

typedef struct {
    nf_gemv_job job;
    uint8_t **copies;           /* weight copies (each holds both matrices when nmat = 2) */
    int ncopies;
    size_t matrix_bytes;        /* one matrix (or 3-D tensor) */
    int32_t *ids;               /* device: 20 sets of nvec ids */
    size_t read_bytes;          /* what one launch reads */
    size_t copy_bytes;
    unsigned *sink;
} bench_ctx;

static void launch_gemv(void *c, int i, cudaStream_t s) {
    bench_ctx *b = c;
    nf_gemv_job j = b->job;
    uint8_t *w = b->copies[i % b->ncopies];
    for (int m = 0; m < NF_CUDA_GEMV_MAX_MATS && j.w[m]; m++) j.w[m] = w + (size_t)m * b->matrix_bytes;
    if (b->ids) j.ids = b->ids + (size_t)i * j.nvec;
    if (nf_cuda_gemv_run(&j, s)) nf_die("%s", nf_error());
}
static void launch_probe(void *c, int i, cudaStream_t s) {
    bench_ctx *b = c;
    const uint8_t *w = b->copies[i % b->ncopies];
    /* one copy (expert jobs read scattered experts of a large tensor): consecutive windows of it */
    const size_t n = b->read_bytes / 16 * 16, span = b->copy_bytes - n;
    const size_t off = b->ncopies == 1 && span ? ((size_t)i * n) % span / 16 * 16 : 0;
    if (nf_cuda_read_launch(w + off, n, b->sink, s)) nf_die("%s", nf_error());
}

/* 1 when the environment list `var` (comma-separated) is unset, empty or names `item` */
static int listed(const char *var, const char *item) {
    const char *only = getenv(var);
    if (!only || !*only) return 1;
    const size_t ln = strlen(item);
    for (const char *p = only; *p;) {
        const char *e = strchr(p, ',');
        const size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == ln && !strncmp(p, item, n)) return 1;
        p += n + (e != NULL);
    }
    return 0;
}

static void bench_case(FILE *csv, const char *name, uint32_t type, int64_t rows, int64_t cols, int64_t slices, int nmat,
                       int nvec, int xdiv, int use_ids, cudaStream_t s, unsigned *sink) {
    /* NF_GEMV_BENCH_ONLY=q8_0,iq2_xxs: time only these formats; NF_GEMV_BENCH_CASES=kda_out,hc: only these cases
     * (a plan sweep needs a few shapes, many runs) */
    if (!listed("NF_GEMV_BENCH_ONLY", nf_type_get(type)->name) || !listed("NF_GEMV_BENCH_CASES", name)) return;
    const size_t rb = nf_row_bytes(type, cols);
    const size_t matrix_bytes = rb * (size_t)rows * (size_t)slices;
    bench_ctx b;
    memset(&b, 0, sizeof b);
    b.matrix_bytes = matrix_bytes;
    b.sink = sink;
    const size_t copy_bytes = matrix_bytes * (size_t)nmat;
    b.copy_bytes = copy_bytes;
    b.read_bytes = use_ids ? rb * (size_t)rows * (size_t)nvec * (size_t)nmat : copy_bytes;
    b.ncopies = (int)(512e6 / (double)b.read_bytes) + 1; /* what 20 launches read exceeds 8x the 60 MB L2 */
    if (b.ncopies > 20) b.ncopies = 20;
    if (use_ids) b.ncopies = 1;                           /* random experts of a large tensor instead */
    rowset rs = make_rows(type, cols, 256);
    b.copies = nf_xcalloc((size_t)b.ncopies, sizeof(uint8_t *));
    uint8_t *first = NULL;
    for (int c = 0; c < b.ncopies; c++) {
        if (!c) {
            CHECK(cudaMalloc((void **)&b.copies[0], copy_bytes));
            for (int m = 0; m < nmat; m++) {
                uint8_t *d = upload_weights(&rs, m, slices, rows, 0);
                CHECK(cudaMemcpy(b.copies[0] + m * matrix_bytes, d, matrix_bytes, cudaMemcpyDeviceToDevice));
                cudaFree(d);
            }
            first = b.copies[0];
        } else {
            CHECK(cudaMalloc((void **)&b.copies[c], copy_bytes));
            CHECK(cudaMemcpy(b.copies[c], first, copy_bytes, cudaMemcpyDeviceToDevice));
        }
    }
    free_rows(&rs);
    const int nx = (nvec + xdiv - 1) / xdiv;
    float *dx, *dy;
    CHECK(cudaMalloc((void **)&dx, sizeof(float) * (size_t)nx * cols));
    float *hx = nf_xmalloc(sizeof(float) * (size_t)nx * cols);
    for (int64_t i = 0; i < nx * cols; i++) hx[i] = gauss();
    CHECK(cudaMemcpy(dx, hx, sizeof(float) * (size_t)nx * cols, cudaMemcpyHostToDevice));
    free(hx);
    CHECK(cudaMalloc((void **)&dy, sizeof(float) * (size_t)nvec * rows * nmat));
    if (use_ids) {
        /* distinct experts within a launch, as the router picks them, and none used twice in the 20 launches
         * of a graph (a shuffled list) so that no launch finds its weights in L2 */
        if (slices < 20 * nvec) nf_die("test_gemv: %lld experts are too few for the bench", (long long)slices);
        int32_t *perm = nf_xmalloc(sizeof(int32_t) * (size_t)slices), *h = nf_xmalloc(sizeof(int32_t) * 20 * nvec);
        for (int64_t e = 0; e < slices; e++) perm[e] = (int32_t)e;
        for (int64_t e = slices - 1; e > 0; e--) {
            const int64_t o = (int64_t)(rng() % (uint64_t)(e + 1));
            const int32_t t = perm[e];
            perm[e] = perm[o];
            perm[o] = t;
        }
        for (int i = 0; i < 20 * nvec; i++) h[i] = perm[i];
        free(perm);
        CHECK(cudaMalloc((void **)&b.ids, sizeof(int32_t) * 20 * nvec));
        CHECK(cudaMemcpy(b.ids, h, sizeof(int32_t) * 20 * nvec, cudaMemcpyHostToDevice));
        free(h);
    }
    nf_gemv_job *j = &b.job;
    j->type = type;
    j->rows = rows;
    j->cols = cols;
    j->slice_bytes = rb * (size_t)rows;
    for (int m = 0; m < nmat; m++) {
        j->w[m] = first + (size_t)m * matrix_bytes;
        j->y[m] = dy + (size_t)m * nvec * rows;
    }
    j->x = dx;
    j->ldx = cols;
    j->xdiv = xdiv;
    j->ldy = rows;
    j->nvec = nvec;
    const timing tg = time_graph(launch_gemv, &b, (double)b.read_bytes, s);
    const timing tp = time_graph(launch_probe, &b, (double)b.read_bytes, s);
    const double frac = tp.us / tg.us;
    printf("bench %-10s %-8s %6lldx%-5lld x%-3lld nmat %d nvec %d  %9.2f us %7.0f GB/s | probe %9.2f us %7.0f GB/s | %5.1f%%\n",
           name, nf_type_get(type)->name, (long long)rows, (long long)cols, (long long)slices, nmat, nvec, tg.us, tg.gbps,
           tp.us, tp.gbps, 100 * frac);
    if (csv) {
        fprintf(csv, "%s,%s,%lld,%lld,%lld,%d,%d,%zu,%.3f,%.1f,%.3f,%.1f,%.4f\n", name, nf_type_get(type)->name,
                (long long)rows, (long long)cols, (long long)slices, nmat, nvec, b.read_bytes, tg.us, tg.gbps, tp.us,
                tp.gbps, frac);
        fflush(csv);
    }
    for (int c = 0; c < b.ncopies; c++) cudaFree(b.copies[c]);
    free(b.copies);
    if (b.ids) cudaFree(b.ids);
    cudaFree(dx); cudaFree(dy);
}

/* ---- two jobs in one launch (nf_cuda_gemv_run_pair): the MoE's routed and shared experts ---- */

typedef struct {
    uint32_t type;
    int64_t rows, cols, slices;
    int nmat, nvec, xdiv, use_ids, swiglu; /* swiglu: the activation is SwiGLU(x, xup), applied while staging */
} pair_side;

/* one side's job on the device: random weights (copies rotating for a bench), activation(s), NaN-poisoned outputs */
typedef struct {
    nf_gemv_job job;
    uint8_t *w;          /* nmat matrices (3-D when slices > 1) */
    size_t matrix_bytes, ybytes;
    float *x, *xup, *y;  /* y: nmat outputs of ybytes each */
    int32_t *ids;
} pair_buf;

static void pair_build(const pair_side *ps, pair_buf *b) {
    memset(b, 0, sizeof *b);
    const size_t rb = nf_row_bytes(ps->type, ps->cols);
    b->matrix_bytes = rb * (size_t)ps->rows * (size_t)ps->slices;
    rowset rs = make_rows(ps->type, ps->cols, 97);
    CHECK(cudaMalloc((void **)&b->w, b->matrix_bytes * (size_t)ps->nmat));
    for (int m = 0; m < ps->nmat; m++) {
        uint8_t *d = upload_weights(&rs, m, ps->slices, ps->rows, 0);
        CHECK(cudaMemcpy(b->w + (size_t)m * b->matrix_bytes, d, b->matrix_bytes, cudaMemcpyDeviceToDevice));
        cudaFree(d);
    }
    free_rows(&rs);
    const int nx = (ps->nvec + ps->xdiv - 1) / ps->xdiv;
    const size_t xn = (size_t)nx * (size_t)ps->cols;
    float *hx = nf_xmalloc(sizeof(float) * xn * 2);
    for (size_t i = 0; i < 2 * xn; i++) hx[i] = gauss() * (ps->swiglu ? 6.0f : 1.0f);
    CHECK(cudaMalloc((void **)&b->x, sizeof(float) * xn));
    CHECK(cudaMemcpy(b->x, hx, sizeof(float) * xn, cudaMemcpyHostToDevice));
    if (ps->swiglu) {
        CHECK(cudaMalloc((void **)&b->xup, sizeof(float) * xn));
        CHECK(cudaMemcpy(b->xup, hx + xn, sizeof(float) * xn, cudaMemcpyHostToDevice));
    }
    free(hx);
    const int64_t ldy = ps->rows + 3;
    b->ybytes = sizeof(float) * ((size_t)ps->nvec * (size_t)ldy + 16);
    CHECK(cudaMalloc((void **)&b->y, b->ybytes * (size_t)ps->nmat));
    nf_gemv_job *j = &b->job;
    j->type = ps->type;
    j->rows = ps->rows;
    j->cols = ps->cols;
    j->slice_bytes = rb * (size_t)ps->rows;
    for (int m = 0; m < ps->nmat; m++) {
        j->w[m] = b->w + (size_t)m * b->matrix_bytes;
        j->y[m] = (float *)((uint8_t *)b->y + (size_t)m * b->ybytes);
    }
    j->x = b->x;
    j->xup = b->xup;
    j->act_limit = ps->swiglu ? SWIGLU_LIMIT : 0.0f;
    j->ldx = ps->cols;
    j->xdiv = ps->xdiv;
    j->ldy = ldy;
    j->nvec = ps->nvec;
    if (ps->use_ids) {
        /* distinct experts of a token, as the router picks them; 20 sets for the bench's launches */
        int32_t *h = nf_xmalloc(sizeof(int32_t) * 20 * (size_t)ps->nvec);
        for (int i = 0; i < 20 * ps->nvec; i++) h[i] = (int32_t)(((uint64_t)i * 7 + rng() % 3) % (uint64_t)ps->slices);
        CHECK(cudaMalloc((void **)&b->ids, sizeof(int32_t) * 20 * (size_t)ps->nvec));
        CHECK(cudaMemcpy(b->ids, h, sizeof(int32_t) * 20 * (size_t)ps->nvec, cudaMemcpyHostToDevice));
        free(h);
        j->ids = b->ids;
    }
}
static void pair_free(pair_buf *b) {
    cudaFree(b->w);
    cudaFree(b->x);
    if (b->xup) cudaFree(b->xup);
    cudaFree(b->y);
    if (b->ids) cudaFree(b->ids);
}
static void pair_poison(pair_buf *b, int nmat) { CHECK(cudaMemset(b->y, 0xff, b->ybytes * (size_t)nmat)); }
static void *pair_outputs(const pair_buf *b, int nmat) {
    void *h = nf_xmalloc(b->ybytes * (size_t)nmat);
    CHECK(cudaMemcpy(h, b->y, b->ybytes * (size_t)nmat, cudaMemcpyDeviceToHost));
    return h;
}

/* The pair's outputs (every byte of both output buffers, padding included) must equal those of the two jobs
 * run one launch each (whose values check_case tests against the reference), and the pairs this test names
 * must share a launch (want_pair) — a kernel mapping CTAs to the wrong problem or rows fails the first. */
static int check_pair(const char *name, const pair_side *pa, const pair_side *pb, int want_pair) {
    pair_buf a, b;
    pair_build(pa, &a);
    pair_build(pb, &b);
    pair_poison(&a, pa->nmat);
    pair_poison(&b, pb->nmat);
    if (nf_cuda_gemv_run(&a.job, NULL) || nf_cuda_gemv_run(&b.job, NULL)) nf_die("%s", nf_error());
    CHECK(cudaDeviceSynchronize());
    void *ya = pair_outputs(&a, pa->nmat), *yb = pair_outputs(&b, pb->nmat);
    pair_poison(&a, pa->nmat);
    pair_poison(&b, pb->nmat);
    const int paired = nf_cuda_gemv_pairs(&a.job, &b.job);
    if (nf_cuda_gemv_run_pair(&a.job, &b.job, NULL)) nf_die("%s", nf_error());
    CHECK(cudaDeviceSynchronize());
    void *ya2 = pair_outputs(&a, pa->nmat), *yb2 = pair_outputs(&b, pb->nmat);
    const int same_a = !memcmp(ya, ya2, a.ybytes * (size_t)pa->nmat), same_b = !memcmp(yb, yb2, b.ybytes * (size_t)pb->nmat);
    /* the single launches wrote every row (no NaN left in the rows) */
    int unwritten = 0;
    for (int m = 0; m < pa->nmat; m++)
        for (int v = 0; v < pa->nvec; v++)
            for (int64_t r = 0; r < pa->rows; r++)
                unwritten += isnan(((const float *)((const uint8_t *)ya + (size_t)m * a.ybytes))[(size_t)v * a.job.ldy + r]);
    const int ok = same_a && same_b && paired == want_pair && !unwritten;
    printf("gemv pair %-12s %s %lldx%lld x%lld nmat %d nvec %d + %s %lldx%lld nmat %d nvec %d: %s, a %s, b %s%s  %s\n", name,
           nf_type_get(pa->type)->name, (long long)pa->rows, (long long)pa->cols, (long long)pa->slices, pa->nmat, pa->nvec,
           nf_type_get(pb->type)->name, (long long)pb->rows, (long long)pb->cols, pb->nmat, pb->nvec,
           paired ? "one launch" : "two launches", same_a ? "identical" : "DIFFERS", same_b ? "identical" : "DIFFERS",
           unwritten ? ", rows unwritten" : "", ok ? "ok" : "FAIL");
    free(ya); free(yb); free(ya2); free(yb2);
    pair_free(&a);
    pair_free(&b);
    return ok;
}

/* the pair cases; adds their count to *total, returns the failures */
static int check_pairs(int small, int *total) {
    /* type, rows, cols, slices, nmat, nvec, xdiv, ids, swiglu */
    /* row lengths whose rows are whole 16-byte chunks (the streaming kernels' condition): IQ2_XXS 2048k, Q2_K 1024k */
    const int64_t I = small ? 96 : 2048, n = small ? 2048 : 4096, E = small ? 6 : 64, Id = small ? 1024 : 2048;
    const pair_side rgu = {NF_TYPE_IQ2_XXS, I, n, E, 2, 8, 8, 1, 0}, sgu = {NF_TYPE_Q8_0, I + 64, n, 1, 2, 1, 1, 0, 0};
    const pair_side rd = {NF_TYPE_Q2_K, small ? 80 : n, Id, E, 1, 8, 1, 1, 1}, sd = {NF_TYPE_Q8_0, small ? 80 : n, Id, 1, 1, 1, 1, 0, 1};
    const pair_side q4 = {NF_TYPE_Q4_K, 64, 1024, 5, 2, 4, 4, 1, 0}, q4s = {NF_TYPE_Q8_0, 100, 1024, 1, 2, 1, 1, 0, 0};
    /* two tokens of four experts each (a short verify): two activation rows on both sides */
    const pair_side q8 = {NF_TYPE_Q8_0, 64, 512, 5, 2, 8, 4, 1, 0}, q8s = {NF_TYPE_Q8_0, 80, 512, 1, 2, 2, 1, 0, 0};
    /* formats without a pair kernel: two launches, the same bits */
    const pair_side f32 = {NF_TYPE_F32, 64, 512, 5, 2, 8, 8, 1, 0};
    const struct {
        const char *name;
        const pair_side *a, *b;
        int paired;
    } cases[] = {{"moe_gate_up", &rgu, &sgu, 1}, {"moe_down", &rd, &sd, 1}, {"q4_gate_up", &q4, &q4s, 1},
                 {"q8_2tokens", &q8, &q8s, 1}, {"f32_fallback", &f32, &q8s, 0}};
    int fails = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fails += !check_pair(cases[i].name, cases[i].a, cases[i].b, cases[i].paired);
        (*total)++;
    }
    return fails;
}

/* the pair against its two launches (graph replays; the routed side's ids rotate over 20 sets of a 288-expert
 * tensor, the shared side's weights over copies beyond the L2) */
typedef struct {
    pair_buf a, b;
    uint8_t *bcopies[8];
    int paired;
} pair_bench;
static void launch_pair(void *c, int i, cudaStream_t s) {
    pair_bench *pb = c;
    nf_gemv_job ja = pb->a.job, jb = pb->b.job;
    ja.ids = pb->a.ids + (size_t)(i % 20) * (size_t)ja.nvec;
    for (int m = 0; m < NF_CUDA_GEMV_MAX_MATS && jb.w[m]; m++) jb.w[m] = pb->bcopies[i % 8] + (size_t)m * pb->b.matrix_bytes;
    if (pb->paired ? nf_cuda_gemv_run_pair(&ja, &jb, s) : (nf_cuda_gemv_run(&ja, s) || nf_cuda_gemv_run(&jb, s)))
        nf_die("%s", nf_error());
}
static void bench_pair(FILE *csv, const char *name, const pair_side *pa, const pair_side *pb_, cudaStream_t s) {
    if (!listed("NF_GEMV_BENCH_CASES", name)) return;
    pair_bench pb;
    memset(&pb, 0, sizeof pb);
    pair_build(pa, &pb.a);
    pair_build(pb_, &pb.b);
    const size_t bbytes = pb.b.matrix_bytes * (size_t)pb_->nmat;
    for (int c = 0; c < 8; c++) {
        CHECK(cudaMalloc((void **)&pb.bcopies[c], bbytes));
        CHECK(cudaMemcpy(pb.bcopies[c], pb.b.w, bbytes, cudaMemcpyDeviceToDevice));
    }
    const double bytes = (double)nf_row_bytes(pa->type, pa->cols) * pa->rows * pa->nvec * pa->nmat + (double)bbytes;
    timing t[4];
    for (int k = 0; k < 4; k++) { /* two launches, pair, pair, two launches */
        pb.paired = k == 1 || k == 2;
        t[k] = time_graph(launch_pair, &pb, bytes, s);
    }
    const double two = (t[0].us + t[3].us) / 2, one = (t[1].us + t[2].us) / 2;
    printf("bench pair %-10s %s + %s: two launches %8.2f us, one launch %8.2f us (%s), %.0f -> %.0f GB/s\n", name,
           nf_type_get(pa->type)->name, nf_type_get(pb_->type)->name, two, one,
           nf_cuda_gemv_pairs(&pb.a.job, &pb.b.job) ? "paired" : "NOT paired: two launches", bytes / (two * 1e3),
           bytes / (one * 1e3));
    if (csv) {
        fprintf(csv, "pair_%s_two,%s+%s,0,0,0,0,0,%.0f,%.3f,%.1f,0,0,0\n", name, nf_type_get(pa->type)->name,
                nf_type_get(pb_->type)->name, bytes, two, bytes / (two * 1e3));
        fprintf(csv, "pair_%s_one,%s+%s,0,0,0,0,0,%.0f,%.3f,%.1f,0,0,0\n", name, nf_type_get(pa->type)->name,
                nf_type_get(pb_->type)->name, bytes, one, bytes / (one * 1e3));
        fflush(csv);
    }
    for (int c = 0; c < 8; c++) cudaFree(pb.bcopies[c]);
    pair_free(&pb.a);
    pair_free(&pb.b);
}

static void bench_probe(FILE *csv, size_t bytes, cudaStream_t s, unsigned *sink) {
    bench_ctx b;
    memset(&b, 0, sizeof b);
    uint8_t *d;
    CHECK(cudaMalloc((void **)&d, bytes));
    CHECK(cudaMemset(d, 1, bytes));
    b.copies = &d;
    b.ncopies = 1;
    b.read_bytes = bytes;
    b.copy_bytes = bytes;
    b.sink = sink;
    const timing t = time_graph(launch_probe, &b, (double)bytes, s);
    printf("bench probe      %zu bytes  %9.2f us %7.0f GB/s\n", bytes, t.us, t.gbps);
    if (csv) fprintf(csv, "probe,-,0,0,0,0,0,%zu,%.3f,%.1f,%.3f,%.1f,1\n", bytes, t.us, t.gbps, t.us, t.gbps);
    cudaFree(d);
}

static void run_bench(void) {
    const char *path = getenv("NF_GEMV_CSV");
    FILE *csv = path ? fopen(path, "w") : NULL;
    if (path && !csv) nf_die("cannot write %s", path);
    const char *head = "case,format,rows,cols,slices,nmat,nvec,bytes_per_run,us_per_run,gbps,probe_us,probe_gbps,fraction";
    printf("%s\n", head);
    if (csv) fprintf(csv, "%s\n", head);
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    unsigned *sink;
    CHECK(cudaMalloc((void **)&sink, sizeof *sink));
    CHECK(cudaMemset(sink, 0, sizeof *sink));
    bench_probe(csv, (size_t)2 << 30, s, sink);
    for (size_t i = 0; i < N_TYPES; i++) bench_case(csv, "dense", types[i], 14336, 4096, 1, 1, 1, 1, 0, s, sink);
    for (size_t i = 0; i < N_TYPES; i++) bench_case(csv, "head", types[i], 154880, 4096, 1, 1, 1, 1, 0, s, sink);
    /* glm53's most frequent decode shapes: a KDA projection (8192 x 4096, ~34 per token) and a small projection
     * (128 x 4096: gates, indexer keys) where the fixed cost of a launch shows */
    for (size_t i = 0; i < N_TYPES; i++) bench_case(csv, "kda_proj", types[i], 8192, 4096, 1, 1, 1, 1, 0, s, sink);
    for (size_t i = 0; i < N_TYPES; i++) bench_case(csv, "small", types[i], 128, 4096, 1, 1, 1, 1, 0, s, sink);
    /* routed experts of one token: gate and up in one launch (shared activation), then down (one per slot) */
    for (size_t i = 0; i < N_TYPES; i++) bench_case(csv, "gate_up", types[i], 2048, 4096, 288, 2, 8, 8, 1, s, sink);
    for (size_t i = 0; i < N_TYPES; i++) bench_case(csv, "down", types[i], 4096, 2048, 288, 1, 8, 1, 1, s, sink);
    /* the other decode products of glm53:q2 (its recipe's formats), one launch each as the backend makes them:
     * KDA q/k/v (3 matrices), KDA, MLA and dense-FFN output projections (rows of 8192-16384 columns), the
     * hyper-connection projection (24 rows of 4 x 4096), the router, KDA's low-rank gate inputs and beta, the
     * shared expert */
    bench_case(csv, "kda_qkv", NF_TYPE_Q8_0, 8192, 4096, 1, 3, 1, 1, 0, s, sink);
    bench_case(csv, "kda_out", NF_TYPE_Q8_0, 4096, 8192, 1, 1, 1, 1, 0, s, sink);
    bench_case(csv, "ffn_down", NF_TYPE_Q8_0, 4096, 12288, 1, 1, 1, 1, 0, s, sink);
    bench_case(csv, "mla_out", NF_TYPE_Q8_0, 4096, 16384, 1, 1, 1, 1, 0, s, sink);
    bench_case(csv, "hc_proj", NF_TYPE_F32, 24, 16384, 1, 1, 1, 1, 0, s, sink);
    bench_case(csv, "router", NF_TYPE_F32, 288, 4096, 1, 1, 1, 1, 0, s, sink);
    bench_case(csv, "kda_gate_a", NF_TYPE_Q8_0, 128, 4096, 1, 1, 1, 1, 0, s, sink);
    bench_case(csv, "kda_beta", NF_TYPE_Q8_0, 64, 4096, 1, 1, 1, 1, 0, s, sink);
    bench_case(csv, "shexp_gu", NF_TYPE_Q8_0, 2048, 4096, 1, 2, 1, 1, 0, s, sink);
    bench_case(csv, "shexp_down", NF_TYPE_Q8_0, 4096, 2048, 1, 1, 1, 1, 0, s, sink);
    /* the MoE's pairs in one launch against two (NF_CUDA_MOE_PAIR): glm53:q2's routed gate+up (IQ2_XXS, 8 of 288)
     * beside the shared expert's (Q8_0), the routed down (Q2_K, SwiGLU staged) beside the shared down */
    const pair_side rgu = {NF_TYPE_IQ2_XXS, 2048, 4096, 288, 2, 8, 8, 1, 0}, sgu = {NF_TYPE_Q8_0, 2048, 4096, 1, 2, 1, 1, 0, 0};
    const pair_side rd = {NF_TYPE_Q2_K, 4096, 2048, 288, 1, 8, 1, 1, 1}, sd = {NF_TYPE_Q8_0, 4096, 2048, 1, 1, 1, 1, 0, 1};
    bench_pair(csv, "moe_gate_up", &rgu, &sgu, s);
    bench_pair(csv, "moe_down", &rd, &sd, s);
    /* one matrix times nvec vectors (speculative verify) */
    static const int nv[] = {1, 2, 4, 8};
    for (size_t i = 0; i < N_TYPES; i++)
        for (int k = 0; k < 4; k++) bench_case(csv, "verify", types[i], 4096, 4096, 1, 1, nv[k], 1, 0, s, sink);
    cudaFree(sink);
    cudaStreamDestroy(s);
    if (csv) fclose(csv);
}

/* The cases both lists end with: shapes of glm53's decode that the full and the emulated (small) runs share. */
#define SHARED_CASES \
        {"misalign", 50, 1024, 3, 2, 4, 2, 3, 0, 0, 4, 150, 1, 0}, \
        /* rows of 1-4 blocks that are not 16-byte multiples (glm53's 128-wide Q8_0 gate expansions): the plain \
         * kernel with 4- and 1-lane groups per row */ \
        {"short128", 45, 128, 1, 1, 2, 1, 1, 0, 0, 0, 45, 1, 0}, \
        {"short256", 45, 256, 1, 1, 2, 1, 1, 0, 0, 0, 45, 1, 0}, \
        /* three matrices of one shape in one launch (KDA's q, k, v) */ \
        {"qkv", 96, 1024, 1, 3, 1, 1, 1, 0, 0, 0, 96, 1, 0}, \
        {"qkv_ids", 64, 512, 5, 3, 2, 1, 1, 1, 0, 0, 64, 1, 0}, \
        /* rows whose activation is longer than a stage (KDA's and MLA's output projections): the staged copy in \
         * the extended last stage */ \
        {"long_row", 40, 16384, 1, 1, 2, 1, 1, 0, 0, 0, 40, 1, 0}, \
        /* fused activations: per-matrix rows (KDA's two gate up-projections, plain and streaming shapes), SwiGLU \
         * while staging (the routed and shared experts' down projections), the in-kernel RMSNorm (the hc projection) */ \
        {"xm_plain", 96, 128, 1, 2, 1, 1, 1, 0, 0, 0, 96, 1, FUSE_XM}, \
        {"xm_stream", 64, 1024, 1, 3, 2, 1, 1, 0, 0, 0, 64, 1, FUSE_XM}, \
        {"swiglu_ids", 256, 2048, 12, 1, 8, 1, 1, 1, 0, 0, 256, 1, FUSE_SWIGLU}, \
        {"swiglu_long", 40, 12288, 1, 1, 1, 1, 1, 0, 0, 0, 40, 1, FUSE_SWIGLU}, \
        {"xnorm", 24, 16384, 1, 1, 2, 1, 1, 0, 0, 0, 24, 1, FUSE_NORM}, \
        /* one vector, matrices of different heights in one launch (KDA's six projections of x, MLA's two) */ \
        {"flat6", 520, 4096, 1, 6, 1, 1, 1, 0, 0, 0, 520, 1, FUSE_FLAT}, \
        {"flat2", 300, 2048, 1, 2, 1, 1, 1, 0, 0, 0, 300, 1, FUSE_FLAT}, \
        /* activations of extreme ranges and zeros at 2048 columns (the warp-per-row Q2_K kernel's row length) */ \
        {"x_range2k", 64, 2048, 1, 1, 2, 1, 1, 0, 1, 0, 64, 1, 0}, \
        {"x_zero2k", 16, 2048, 1, 1, 1, 1, 1, 0, 2, 0, 16, 1, 0}, \
        /* a NaN or an Inf in one activation column: one row (both warp-per-row kernels' row lengths), the routed \
         * gate+up shape (one activation per token: the IQ2_XXS kernel's) and the routed down shape (one per slot: \
         * the Q2_K kernel's, whose other slots must stay finite) */ \
        {"x_nan2k", 64, 2048, 1, 1, 1, 1, 1, 0, X_NAN, 0, 64, 1, 0}, \
        {"x_inf2k", 64, 2048, 1, 1, 1, 1, 1, 0, X_INF, 0, 64, 1, 0}, \
        {"x_nan_gu", 64, 4096, 3, 2, 4, 4, 1, 1, X_NAN, 0, 64, 1, 0}, \
        {"x_nan_dn", 64, 2048, 3, 1, 4, 1, 1, 1, X_NAN, 0, 64, 1, 0},

int nf_gpu_test_gemv(int bench) {
    if (nf_cuda_gemv_init()) nf_die("%s", nf_error());
    const int small = small_mode();
    /* name, rows, cols, slices, nmat, nvec, xdiv, smod, ids, xkind, woff, distinct, sample */
    const job_case full[] = {
        {"2048x4096", 2048, 4096, 1, 1, 1, 1, 1, 0, 0, 0, 512, 1, 0},
        {"4096x2048", 4096, 2048, 1, 1, 1, 1, 1, 0, 0, 0, 512, 1, 0},
        {"odd_rows", 37, 4096, 1, 1, 1, 1, 1, 0, 0, 0, 37, 1, 0},
        {"one_row", 1, 2048, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0},
        {"head", 154880, 4096, 1, 1, 1, 1, 1, 0, 0, 0, 509, 97, 0},
        {"gate_up", 2048, 4096, 64, 2, 8, 8, 1, 1, 0, 0, 1021, 3, 0},
        {"down", 4096, 2048, 64, 1, 8, 1, 1, 1, 0, 0, 1021, 3, 0},
        {"verify", 1000, 4096, 1, 1, 5, 1, 1, 0, 0, 0, 500, 1, 0},
        {"verify8", 333, 2048, 1, 1, 8, 1, 1, 0, 0, 0, 333, 1, 0},
        {"per_head", 70, 768, 4, 1, 8, 2, 4, 0, 0, 0, 280, 1, 0},
        {"plain", 33, 512, 1, 2, 3, 1, 1, 0, 0, 0, 66, 1, 0},
        {"x_range", 64, 4096, 1, 1, 1, 1, 1, 0, 1, 0, 64, 1, 0},
        {"x_zero", 16, 4096, 1, 1, 1, 1, 1, 0, 2, 0, 16, 1, 0},
        SHARED_CASES
    };
    const job_case tiny[] = {
        {"256x4096", 256, 4096, 1, 1, 1, 1, 1, 0, 0, 0, 256, 1, 0},
        {"512x2048", 512, 2048, 1, 1, 1, 1, 1, 0, 0, 0, 512, 1, 0},
        {"odd_rows", 37, 4096, 1, 1, 1, 1, 1, 0, 0, 0, 37, 1, 0},
        {"one_row", 1, 2048, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0},
        {"gate_up", 96, 4096, 6, 2, 8, 8, 1, 1, 0, 0, 97, 1, 0},
        {"down", 128, 2048, 6, 1, 8, 1, 1, 1, 0, 0, 101, 1, 0},
        {"verify", 100, 4096, 1, 1, 5, 1, 1, 0, 0, 0, 100, 1, 0},
        {"per_head", 70, 768, 4, 1, 8, 2, 4, 0, 0, 0, 280, 1, 0},
        {"plain", 33, 512, 1, 2, 3, 1, 1, 0, 0, 0, 66, 1, 0},
        {"x_range", 40, 4096, 1, 1, 1, 1, 1, 0, 1, 0, 40, 1, 0},
        {"x_zero", 8, 4096, 1, 1, 1, 1, 1, 0, 2, 0, 8, 1, 0},
        SHARED_CASES
    };
    const job_case *cases = small ? tiny : full;
    const int ncases = small ? (int)(sizeof tiny / sizeof tiny[0]) : (int)(sizeof full / sizeof full[0]);
    int failed = 0, total = 0;
    /* NF_GEMV_BENCH_NO_CHECKS=1 with --bench: time only, so that a profiler's --launch-skip counts bench launches
     * alone (ncu --set full on nf-bench replays ~100 GB of device memory per pass; on the bench it is fast) */
    const char *nc = getenv("NF_GEMV_BENCH_NO_CHECKS");
    const int checks = !(bench && nc && !strcmp(nc, "1"));
    /* the cases and pairs with the streaming kernel (the warp-per-row IQ2_XXS kernel, the default for the jobs it
     * takes, has its own pass below), so that both keep their coverage */
    if (checks) {
        nf_cuda_gemv_iq2_force(0);
        nf_cuda_gemv_q2k_force(0);
    }
    for (size_t i = 0; checks && i < N_TYPES; i++)
        for (int c = 0; c < ncases; c++) {
            total++;
            failed += !check_case(types[i], &cases[c]);
        }
    if (checks) {
        failed += check_pairs(small, &total);
        /* each warp-per-row kernel on every case it takes (the routed gate+up and down shapes among them), forced on
         * (the other one off) */
        static const struct { int kind; const char *name; uint32_t type; } rk[] = {
            {ROWS_IQ2, "iq2rows", NF_TYPE_IQ2_XXS}, {ROWS_Q2K, "q2krows", NF_TYPE_Q2_K}};
        for (int k = 0; k < 2; k++) {
            nf_cuda_gemv_iq2_force(rk[k].kind == ROWS_IQ2);
            nf_cuda_gemv_q2k_force(rk[k].kind == ROWS_Q2K);
            g_rows_pass = rk[k].kind;
            g_rows_taken = 0;
            for (int c = 0; c < ncases; c++) {
                const int r = check_case(rk[k].type, &cases[c]);
                if (r >= 0) { total++; failed += !r; }
            }
            total++;
            if (g_rows_taken < 5) {
                printf("gemv %s: the kernel took %d cases (5 or more expected)  FAIL\n", rk[k].name, g_rows_taken);
                failed++;
            }
        }
        g_rows_pass = 0;
    }
    /* the bench and later tests: as the environment says */
    nf_cuda_gemv_iq2_force(-1);
    nf_cuda_gemv_q2k_force(-1);
    if (dump_file()) fflush(dump_file());
    if (checks) printf("gemv: %d passed, %d failed\n", total - failed, failed);
    else printf("gemv: checks skipped (NF_GEMV_BENCH_NO_CHECKS=1)\n");
    if (bench) run_bench();
    return failed;
}
