/* cuda_matmul.cu — the stored weight formats on the GPU: the general matrix × activations product of the CUDA
 * backend and row dequantization (the embedding lookup).
 *
 * Same arithmetic as the CPU reference (src/cpu/matmul.c with src/formats): every weight, F32/F16/BF16 or
 * quantized (Q8_0, Q4_K, Q6_K, Q2_K, IQ2_XXS), is decoded to exactly the f32 value nf_dequantize gives (the
 * same float operations, written with __fmul_rn/__fsub_rn so nothing is contracted) and dotted against the f32
 * activation, accumulated in f32. Activations are never quantized: quantizing them (Q8_0 / Q8_K as ggml does)
 * is discontinuous, so a one-ulp difference between the backends upstream (another summation order) could
 * flip a rounding and move a product by a whole quantization step, which the chaotic random fixtures amplified
 * to 0.4 relative in the logits and diverging greedy tokens on the H200. Dotting the dequantized values makes
 * a model a continuous function of its inputs, and the two backends differ only by the order of f32 additions.
 *
 * Work split: up to 8 vectors (decode, a token's routed experts, a short verify) go to cuda_gemv.cu's streaming
 * products (weights read once, f32 exact); products over NF_CUDA_GEMM_MIN_VECTORS or more vectors per matrix
 * (prefill) go to the tiled GEMM of cuda_gemm.cu, which reads each weight once per tile of vectors (bf16 tensor
 * cores); what is left runs the baseline kernel here: one warp per (output row, activation vector), the lanes
 * read a row element-wise. The "ex" form covers every product of the forward: per-head matrices of a 3-D tensor
 * (matrix = vector % heads) and routed experts (matrix = ids[vector], the activation row shared by the k slots of
 * a token). */
#include <cuda_fp16.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/backend_cuda.h"
#include "cuda/cuda_dequant.h"
#include "cuda/cuda_gemv.h"
#include "cuda/cuda_internal.h"
#include "cuda/cuda_launch.h"

/* NF_CUDA_SYNC=1 (diagnostic): wait for the stream after every product */
static int g_sync = 0;

int nf_cuda_formats_init(void) {
    g_sync = getenv("NF_CUDA_SYNC") != nullptr;
    NF_CU(nf_dequant_tables_init());
    return nf_cuda_gemv_init();
}

int nf_cuda_mat_supported(uint32_t type) {
    switch (type) {
    case NF_TYPE_F32: case NF_TYPE_F16: case NF_TYPE_BF16: case NF_TYPE_Q8_0:
    case NF_TYPE_Q4_K: case NF_TYPE_Q6_K: case NF_TYPE_Q2_K: case NF_TYPE_IQ2_XXS:
        return 1;
    default:
        return 0;
    }
}

nf_cuda_mat nf_cuda_mat_of(nf_cuda *c, const nf_tensor *t) {
    nf_cuda_mat m;
    m.w = nf_cuda_dptr(c, t);
    m.type = t->type;
    m.n = t->ne[0];
    m.rows = t->ne[1];
    m.row_bytes = nf_row_bytes(t->type, t->ne[0]);
    m.slice_bytes = m.row_bytes * (size_t)m.rows;
    m.nmat = t->n_dims >= 3 ? t->ne[2] : 1;
    return m;
}

/* ---- the product kernel ---- */
struct mm_args {
    const uint8_t *w;
    size_t row_bytes, slice_bytes;
    int64_t rows, n;
    const float *x;
    int64_t ldx;
    int xdiv, smod;
    const int32_t *ids;
    float *y;
    int64_t ldy;
    int nvec;
};

#define MM_WARPS 4

template <int TY>
__global__ void __launch_bounds__(32 * MM_WARPS) mm_kernel(mm_args a) {
    NF_PDL_ENTER();
    const int64_t r = (int64_t)blockIdx.x * MM_WARPS + threadIdx.y;
    if (r >= a.rows) return;
    const int lane = threadIdx.x;
    for (int v = blockIdx.y; v < a.nvec; v += gridDim.y) {
        const int s = a.ids ? a.ids[v] : v % a.smod;
        const uint8_t *row = a.w + (size_t)s * a.slice_bytes + (size_t)r * a.row_bytes;
        const float *x = a.x + (size_t)(v / a.xdiv) * a.ldx;
        float acc = 0.0f;
        for (int64_t i = lane; i < a.n; i += 32) acc += nf_deq_elem<TY>(row, i) * x[i];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0) a.y[(size_t)v * a.ldy + r] = acc;
    }
}

static unsigned grid_y(int nvec) { return (unsigned)(nvec < 65535 ? nvec : 65535); }

template <int TY> static void launch_mm(const mm_args &a, cudaStream_t s) {
    dim3 block(32, MM_WARPS), grid((unsigned)((a.rows + MM_WARPS - 1) / MM_WARPS), grid_y(a.nvec));
    nf_launch(mm_kernel<TY>, grid, block, 0, s, a);
}

int nf_cuda_matmul_ex(nf_cuda *c, const nf_cuda_mat *w, const float *x, int64_t ldx, int xdiv, int smod,
                      const int32_t *ids, float *y, int64_t ldy, int nvec) {
    if (nvec <= 0 || w->rows <= 0) return 0;
    if (!w->w) return nf_fail("cuda matmul: missing weight");
    const nf_type_info *ti = nf_type_get(w->type);
    if (!nf_cuda_mat_supported(w->type)) return nf_fail("cuda matmul: type %s unsupported", ti->name ? ti->name : "?");
    if (w->n % ti->block_size) return nf_fail("cuda matmul: row length %lld", (long long)w->n);
    /* decode: the streaming products of cuda_gemv.cu (weights read once). Per-head matrices (smod > 1: MLA's
     * absorbed k_b / v_b, one vector per head and token) go there too while each matrix meets at most
     * NF_CUDA_GEMV_MAX_VECTORS vectors: 64 heads x 1 token is 64 small independent products, not a GEMM */
    const int per_matrix = smod > 1 && !ids ? (nvec + smod - 1) / smod : nvec;
    if (per_matrix <= NF_CUDA_GEMV_MAX_VECTORS) {
        if (nf_cuda_gemv_ex(w->type, w->w, w->rows, w->n, w->slice_bytes, x, ldx, xdiv, smod, ids, y, ldy, nvec, c->stream) < 0)
            return -1;
        if (g_sync) NF_CU(cudaStreamSynchronize(c->stream));
        return 0;
    }
    const int gemm = nf_cuda_gemm_try(c, w, x, ldx, xdiv, smod, ids, y, ldy, nvec);
    if (gemm < 0) return -1;
    if (gemm == 0) {
        if (g_sync) NF_CU(cudaStreamSynchronize(c->stream));
        return 0;
    }
    mm_args a;
    a.w = w->w;
    a.row_bytes = w->row_bytes;
    a.slice_bytes = w->slice_bytes;
    a.rows = w->rows;
    a.n = w->n;
    a.x = x;
    a.ldx = ldx;
    a.xdiv = xdiv > 0 ? xdiv : 1;
    a.smod = smod > 0 ? smod : 1;
    a.ids = ids;
    a.y = y;
    a.ldy = ldy;
    a.nvec = nvec;
    cudaStream_t s = c->stream;
    switch (w->type) {
    case NF_TYPE_F32: launch_mm<NF_TYPE_F32>(a, s); break;
    case NF_TYPE_F16: launch_mm<NF_TYPE_F16>(a, s); break;
    case NF_TYPE_BF16: launch_mm<NF_TYPE_BF16>(a, s); break;
    case NF_TYPE_Q8_0: launch_mm<NF_TYPE_Q8_0>(a, s); break;
    case NF_TYPE_Q4_K: launch_mm<NF_TYPE_Q4_K>(a, s); break;
    case NF_TYPE_Q6_K: launch_mm<NF_TYPE_Q6_K>(a, s); break;
    case NF_TYPE_Q2_K: launch_mm<NF_TYPE_Q2_K>(a, s); break;
    case NF_TYPE_IQ2_XXS: launch_mm<NF_TYPE_IQ2_XXS>(a, s); break;
    }
    NF_LAUNCHED();
    if (g_sync) NF_CU(cudaStreamSynchronize(s));
    return 0;
}

/* ---- embedding rows ---- */
template <int TY>
__global__ void embed_kernel(const uint8_t *w, size_t row_bytes, int64_t n, const int32_t *tokens, int copies, float *X) {
    NF_PDL_ENTER();
    const int t = blockIdx.x;
    const uint8_t *row = w + (size_t)tokens[t] * row_bytes;
    float *xt = X + (size_t)t * copies * n;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = nf_deq_elem<TY>(row, i);
        for (int s = 0; s < copies; s++) xt[(size_t)s * n + i] = v;
    }
}

int nf_cuda_embed_rows(nf_cuda *c, const nf_cuda_mat *w, const int32_t *tokens, int T, int copies, float *X) {
    if (T <= 0) return 0;
    cudaStream_t s = c->stream;
    const unsigned g = (unsigned)T;
    switch (w->type) {
    case NF_TYPE_F32: nf_launch(embed_kernel<NF_TYPE_F32>, g, 256, 0, s, w->w, w->row_bytes, w->n, tokens, copies, X); break;
    case NF_TYPE_F16: nf_launch(embed_kernel<NF_TYPE_F16>, g, 256, 0, s, w->w, w->row_bytes, w->n, tokens, copies, X); break;
    case NF_TYPE_BF16: nf_launch(embed_kernel<NF_TYPE_BF16>, g, 256, 0, s, w->w, w->row_bytes, w->n, tokens, copies, X); break;
    case NF_TYPE_Q8_0: nf_launch(embed_kernel<NF_TYPE_Q8_0>, g, 256, 0, s, w->w, w->row_bytes, w->n, tokens, copies, X); break;
    case NF_TYPE_Q4_K: nf_launch(embed_kernel<NF_TYPE_Q4_K>, g, 256, 0, s, w->w, w->row_bytes, w->n, tokens, copies, X); break;
    case NF_TYPE_Q6_K: nf_launch(embed_kernel<NF_TYPE_Q6_K>, g, 256, 0, s, w->w, w->row_bytes, w->n, tokens, copies, X); break;
    case NF_TYPE_Q2_K: nf_launch(embed_kernel<NF_TYPE_Q2_K>, g, 256, 0, s, w->w, w->row_bytes, w->n, tokens, copies, X); break;
    case NF_TYPE_IQ2_XXS: nf_launch(embed_kernel<NF_TYPE_IQ2_XXS>, g, 256, 0, s, w->w, w->row_bytes, w->n, tokens, copies, X); break;
    default: return nf_fail("cuda embed: type %u unsupported", w->type);
    }
    NF_LAUNCHED();
    return 0;
}

/* ---- self-test (diagnostic): the backend's products against the CPU's dequantize-and-dot ---- */
extern "C" int nf_cuda_selftest(void) {
    if (nf_cuda_formats_init() < 0) return 1;
    nf_cuda c;
    memset(&c, 0, sizeof c);
    c.stream = 0;
    const uint32_t types[] = {NF_TYPE_F16, NF_TYPE_BF16, NF_TYPE_Q8_0, NF_TYPE_Q4_K, NF_TYPE_Q6_K, NF_TYPE_Q2_K,
                              NF_TYPE_IQ2_XXS};
    const int ntypes = (int)(sizeof types / sizeof types[0]);
    const int64_t n = 512, rows = 64;
    const int T = 3;
    int fails = 0;
    srand(7);
    for (int ti = 0; ti < ntypes; ti++) {
        const uint32_t type = types[ti];
        const size_t rb = nf_row_bytes(type, n);
        float *w = (float *)malloc(n * sizeof(float)), *x = (float *)malloc(T * n * sizeof(float)),
              *y = (float *)malloc(T * rows * sizeof(float)), *wd = (float *)malloc(n * sizeof(float));
        uint8_t *W = (uint8_t *)malloc(rb * rows);
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t i = 0; i < n; i++) w[i] = (float)((rand() % 2001) - 1000) * 1e-4f;
            nf_quantize(type, w, W + r * rb, n, n, NULL);
        }
        for (int64_t i = 0; i < T * n; i++) x[i] = (float)((rand() % 2001) - 1000) * 1e-3f;
        uint8_t *dW = nullptr;
        float *dx = nullptr, *dy = nullptr;
        cudaMalloc((void **)&dW, rb * rows);
        cudaMalloc((void **)&dx, T * n * sizeof(float));
        cudaMalloc((void **)&dy, T * rows * sizeof(float));
        cudaMemcpy(dW, W, rb * rows, cudaMemcpyHostToDevice);
        cudaMemcpy(dx, x, T * n * sizeof(float), cudaMemcpyHostToDevice);
        cudaMemset(dy, 0xff, T * rows * sizeof(float));
        nf_cuda_mat m;
        m.w = dW;
        m.type = type;
        m.n = n;
        m.rows = rows;
        m.row_bytes = rb;
        m.slice_bytes = rb * rows;
        m.nmat = 1;
        const int rc = nf_cuda_matmul(&c, &m, dx, T, n, dy, rows);
        const cudaError_t e = cudaDeviceSynchronize();
        cudaMemcpy(y, dy, T * rows * sizeof(float), cudaMemcpyDeviceToHost);
        /* error relative to sum |w*x|: the f32 sums of the two backends differ only in order (~1e-7) */
        double worst = 0;
        int wt = 0, wr = 0;
        for (int t = 0; t < T; t++)
            for (int64_t r = 0; r < rows; r++) {
                nf_dequantize(type, W + r * rb, wd, n);
                double ref = 0, mag = 0;
                for (int64_t i = 0; i < n; i++) {
                    ref += (double)wd[i] * x[t * n + i];
                    mag += fabs((double)wd[i] * x[t * n + i]);
                }
                const double err = fabs((double)y[t * rows + r] - ref) / (mag + 1e-30);
                if (!(err <= worst)) {
                    worst = isnan(err) ? INFINITY : err;
                    wt = t;
                    wr = (int)r;
                }
            }
        printf("selftest %-8s matmul: rc %d, %s, max |gpu - exact| / sum|w*x| %.3g (t %d row %d: gpu %.7g)\n",
               nf_type_get(type)->name, rc, cudaGetErrorString(e), worst, wt, wr, y[wt * rows + wr]);
        fails += rc != 0 || e != cudaSuccess || !(worst < 1e-5);
        cudaFree(dW);
        cudaFree(dx);
        cudaFree(dy);
        free(w);
        free(x);
        free(y);
        free(wd);
        free(W);
    }
    return fails;
}

/* a decode job of one matrix (nf_cuda_matmul_ex's arguments with smod = 1) */
static nf_gemv_job decode_job(const nf_cuda_mat *w, const float *x, int64_t ldx, int xdiv, const int32_t *ids, float *y,
                              int64_t ldy, int nvec) {
    nf_gemv_job j;
    memset(&j, 0, sizeof j);
    j.type = w->type;
    j.rows = w->rows;
    j.cols = w->n;
    j.slice_bytes = w->slice_bytes;
    j.w[0] = w->w;
    j.y[0] = y;
    j.x = x;
    j.ldx = ldx;
    j.xdiv = xdiv;
    j.smod = 1;
    j.ids = ids;
    j.ldy = ldy;
    j.nvec = nvec;
    return j;
}

static int run_job_as_is(nf_cuda *c, const nf_gemv_job *j) {
    if (nf_cuda_gemv_run(j, c->stream) < 0) return -1;
    if (g_sync) NF_CU(cudaStreamSynchronize(c->stream));
    return 0;
}
static int run_job(nf_cuda *c, const nf_gemv_job *j) {
    nf_gemv_job jj = *j;
    jj.ids_settled = j->ids && c->ids_settled; /* the MoE block says when its router ran two launches ago */
    return run_job_as_is(c, &jj);
}

/* NF_CUDA_FUSE_X=off: the SwiGLU and RMSNorm in front of a decode product run as their own launches, and products
 * on different activations as one launch each (A/B) */
static bool fuse_x(void) {
    static int cache = -1;
    return nf_cuda_env_switch(&cache, "NF_CUDA_FUSE_X", "off");
}

/* nf_cuda_matmul_same / _same_x: matrices of one type and shape, each on x (or on xs[m] when xs is given), in one
 * decode launch when `group` allows and nvec <= NF_CUDA_GEMV_MAX_VECTORS (the same kernel, hence the same values,
 * as separate products), else one product each */
static int matmul_group(nf_cuda *c, const nf_cuda_mat *const *w, int nmat, const float *x, const float *const *xs,
                        int64_t ldx, int xdiv, const int32_t *ids, float *const *y, int64_t ldy, int nvec, bool group) {
    bool same = group && nmat >= 2 && nvec <= NF_CUDA_GEMV_MAX_VECTORS && nmat <= NF_CUDA_GEMV_MAX_MATS;
    for (int m = 1; m < nmat && same; m++)
        same = w[m]->type == w[0]->type && w[m]->n == w[0]->n && w[m]->rows == w[0]->rows &&
               w[m]->slice_bytes == w[0]->slice_bytes && w[m]->w;
    if (!same) {
        for (int m = 0; m < nmat; m++)
            if (nf_cuda_matmul_ex(c, w[m], xs ? xs[m] : x, ldx, xdiv, 1, ids, y[m], ldy, nvec) < 0) return -1;
        return 0;
    }
    if (nvec <= 0 || w[0]->rows <= 0) return 0;
    if (!w[0]->w) return nf_fail("cuda matmul: missing weight");
    nf_gemv_job j = decode_job(w[0], x, ldx, xdiv, ids, y[0], ldy, nvec);
    for (int m = 0; m < nmat; m++) {
        j.w[m] = w[m]->w;
        j.y[m] = y[m];
        if (xs) j.xm[m] = xs[m];
    }
    return run_job(c, &j);
}

/* NF_CUDA_FLAT=off: products of one vector with matrices of different heights run one launch each (A/B) */
static bool flat_on(void) {
    static int cache = -1;
    return nf_cuda_env_switch(&cache, "NF_CUDA_FLAT", "off");
}

int nf_cuda_matvec_many(nf_cuda *c, const nf_cuda_mat *const *w, int nmat, const float *x, float *const *y) {
    bool one = flat_on() && nmat >= 2 && nmat <= NF_CUDA_GEMV_MAX_MATS;
    for (int m = 0; m < nmat && one; m++)
        one = w[m]->w && w[m]->rows > 0 && w[m]->nmat == 1 && w[m]->type == w[0]->type && w[m]->n == w[0]->n;
    if (!one) {
        for (int m = 0; m < nmat; m++)
            if (nf_cuda_matmul_ex(c, w[m], x, w[m]->n, 1, 1, nullptr, y[m], w[m]->rows, 1) < 0) return -1;
        return 0;
    }
    nf_gemv_job j = decode_job(w[0], x, w[0]->n, 1, nullptr, y[0], w[0]->rows, 1);
    for (int m = 0; m < nmat; m++) {
        j.w[m] = w[m]->w;
        j.y[m] = y[m];
        j.mrows[m] = w[m]->rows;
    }
    return run_job(c, &j);
}

int nf_cuda_matmul_same(nf_cuda *c, const nf_cuda_mat *const *w, int nmat, const float *x, int64_t ldx, int xdiv,
                        const int32_t *ids, float *const *y, int64_t ldy, int nvec) {
    return matmul_group(c, w, nmat, x, nullptr, ldx, xdiv, ids, y, ldy, nvec, true);
}

int nf_cuda_matmul_same_x(nf_cuda *c, const nf_cuda_mat *const *w, int nmat, const float *const *x, int64_t ldx,
                          float *const *y, int64_t ldy, int nvec) {
    return matmul_group(c, w, nmat, x[0], x, ldx, 1, nullptr, y, ldy, nvec, fuse_x());
}

int nf_cuda_matmul_swiglu(nf_cuda *c, const nf_cuda_mat *w, float *g, const float *u, int64_t ldx, float limit,
                          const int32_t *ids, float *y, int64_t ldy, int nvec) {
    if (nvec <= 0 || w->rows <= 0) return 0;
    if (nvec <= NF_CUDA_GEMV_MAX_VECTORS && w->w && fuse_x()) {
        nf_gemv_job j = decode_job(w, g, ldx, 1, ids, y, ldy, nvec);
        j.xup = u;
        j.act_limit = limit;
        if (nf_cuda_gemv_stages_x(&j)) return run_job(c, &j);
    }
    /* over whole rows of ldx (a gap of ldx > n included, as one contiguous buffer) */
    if (nf_cuda_swiglu(c, g, u, (int64_t)(nvec - 1) * ldx + w->n, limit, g) < 0) return -1;
    return nf_cuda_matmul_ex(c, w, g, ldx, 1, 1, ids, y, ldy, nvec);
}

/* the MoE pairs' four jobs: routed gate+up, shared gate+up, routed down, shared down */
static void moe_pair_jobs(const nf_cuda_moe_pair *mp, nf_gemv_job j[4]) {
    const int64_t I = mp->rg->rows, Is = mp->sg->rows;
    j[0] = decode_job(mp->rg, mp->x, mp->n, mp->k, mp->ids, mp->a, I, mp->T * mp->k);
    j[0].w[1] = mp->ru->w;
    j[0].y[1] = mp->b;
    j[1] = decode_job(mp->sg, mp->x, mp->n, 1, nullptr, mp->sa, Is, mp->T);
    j[1].w[1] = mp->su->w;
    j[1].y[1] = mp->sb;
    j[2] = decode_job(mp->rd, mp->a, I, 1, mp->ids, mp->out, mp->n, mp->T * mp->k);
    j[2].xup = mp->b;
    j[2].act_limit = mp->limit;
    j[2].ids_settled = 1; /* the router ran two (down_only: three) launches before it (nf_cuda_moe_run_pairs) */
    j[3] = decode_job(mp->sd, mp->sa, Is, 1, nullptr, mp->shared, mp->n, mp->T);
    j[3].xup = mp->sb;
    j[3].act_limit = mp->limit;
}

int nf_cuda_moe_run_pairs(nf_cuda *c, const nf_cuda_moe_pair *mp) {
    if (mp->T * mp->k > NF_CUDA_GEMV_MAX_VECTORS || !fuse_x()) return 0;
    const nf_cuda_mat *gu[4] = {mp->rg, mp->ru, mp->sg, mp->su};
    for (int i = 0; i < 4; i++) /* gate and up of one kind: one job (matmul_group's rule) */
        if (!gu[i]->w || gu[i ^ 1]->type != gu[i]->type || gu[i ^ 1]->n != gu[i]->n || gu[i ^ 1]->rows != gu[i]->rows ||
            gu[i ^ 1]->slice_bytes != gu[i]->slice_bytes)
            return 0;
    if (!mp->rd->w || !mp->sd->w) return 0;
    nf_gemv_job j[4];
    moe_pair_jobs(mp, j);
    if (!nf_cuda_gemv_stages_x(&j[2]) || !nf_cuda_gemv_stages_x(&j[3]) ||
        (!mp->down_only && !nf_cuda_gemv_pairs(&j[0], &j[1])) || !nf_cuda_gemv_pairs(&j[2], &j[3]))
        return 0;
    if (mp->down_only) {
        /* the shared gate+up between the router and the routed one, which then reads its ids early (as
         * nf_cuda_moe_block's default order) */
        j[0].ids_settled = 1;
        if (run_job(c, &j[1]) < 0 || run_job_as_is(c, &j[0]) < 0) return -1;
    } else {
        if (nf_cuda_gemv_run_pair(&j[0], &j[1], c->stream) < 0) return -1;
        if (g_sync) NF_CU(cudaStreamSynchronize(c->stream));
    }
    if (nf_cuda_gemv_run_pair(&j[2], &j[3], c->stream) < 0) return -1;
    if (g_sync) NF_CU(cudaStreamSynchronize(c->stream));
    return 1;
}

int nf_cuda_matmul_rmsnormed(nf_cuda *c, const nf_cuda_mat *w, const float *x, int T, int64_t ldx, float eps,
                             float *y, int64_t ldy) {
    if (T <= 0 || w->rows <= 0) return 0;
    if (T <= NF_CUDA_GEMV_MAX_VECTORS && w->w && fuse_x()) {
        nf_gemv_job j = decode_job(w, x, ldx, 1, nullptr, y, ldy, T);
        j.xnorm = 1;
        j.xnorm_eps = eps;
        if (nf_cuda_gemv_norms_x(&j)) return run_job(c, &j);
    }
    nf_cuda_scratch sc(c);
    float *tmp = sc.get<float>((size_t)T * w->n);
    if (!tmp) return nf_fail("cuda matmul: out of device memory");
    if (nf_cuda_rmsnorm_rows(c, x, ldx, T, w->n, eps, nullptr, tmp, w->n) < 0) return -1;
    return nf_cuda_matmul(c, w, tmp, T, w->n, y, ldy);
}
