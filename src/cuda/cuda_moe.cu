/* cuda_moe.cu — the feed-forward blocks on the GPU: dense SwiGLU MLP and the MoE (the CPU reference and the
 * rules: src/cpu/moe.c).
 *
 * The router (cuda_router.cu: sigmoid scores, biased choice, top-k with ties to the lower expert index,
 * normalised and scaled weights) runs on the device, so the chosen experts never travel to the host: the expert products are one
 * launch each for gate, up and down over all (token, slot) pairs, each reading its expert id from device
 * memory (for one token, gate and up of all k slots are a single launch). The weighted expert outputs of a token
 * are summed in ascending expert order, then the shared expert is added, as the CPU does, so the sum does not
 * depend on the slot order. */
#include "cuda/cuda_gemv.h"
#include "cuda/cuda_launch.h"
#include "cuda/cuda_internal.h"
#include "cuda/cuda_router.h"

/* a = G x, b = U x for nvec vectors (matmul_ex's arguments): one decode launch for both when they fit */
static int gate_up(nf_cuda *c, const nf_cuda_mat *g, const nf_cuda_mat *u, const float *x, int64_t ldx, int xdiv,
                   const int32_t *ids, float *a, float *b, int64_t ldy, int nvec) {
    const nf_cuda_mat *w[2] = {g, u};
    float *y[2] = {a, b};
    return nf_cuda_matmul_same(c, w, 2, x, ldx, xdiv, ids, y, ldy, nvec);
}

/* gate and up into a, b ([T][rows of gate]), then down of SwiGLU(a, b) into y: two launches in decode */
static int mlp_in(nf_cuda *c, const nf_tensor *tg, const nf_tensor *tu, const nf_tensor *td, const float *x, int T,
                  float limit, float *y, float *a, float *b) {
    nf_cuda_mat g = nf_cuda_mat_of(c, tg), u = nf_cuda_mat_of(c, tu), d = nf_cuda_mat_of(c, td);
    const int64_t n = g.n, I = g.rows;
    if (gate_up(c, &g, &u, x, n, 1, nullptr, a, b, I, T) < 0) return -1;
    return nf_cuda_matmul_swiglu(c, &d, a, b, I, limit, nullptr, y, d.rows, T);
}
static int mlp(nf_cuda *c, const nf_tensor *tg, const nf_tensor *tu, const nf_tensor *td, const float *x, int T,
               float limit, float *y) {
    const int64_t I = tg->ne[1];
    nf_cuda_scratch sc(c);
    float *a = sc.get<float>((size_t)T * I), *b = sc.get<float>((size_t)T * I);
    if (!a || !b) return nf_fail("cuda mlp: out of device memory");
    return mlp_in(c, tg, tu, td, x, T, limit, y, a, b);
}

int nf_cuda_dense_mlp(nf_backend *be, int il, const float *x, int T, float *y) {
    nf_cuda *c = nf_cuda_of(be);
    const nf_layer *L = &c->m->layers[il];
    return mlp(c, &L->ffn_gate, &L->ffn_up, &L->ffn_down, x, T, c->m->hp.swiglu_limit, y);
}

/* NF_CUDA_ROUTER_FUSED=on: decode's router product and routing in one launch (nf_cuda_router_fused; the logits
 * rounded as that kernel adds them, not as the GEMV engine does). Opt-in until measured */
static int router_fused_on(void) {
    static int cache = -1;
    return !nf_cuda_env_switch(&cache, "NF_CUDA_ROUTER_FUSED", "on"); /* the switch is 0 exactly when it is "on" */
}

/* NF_CUDA_IDS_EARLY=off: see nf_cuda_moe_block */
static int ids_early(void) {
    static int cache = -1;
    return nf_cuda_env_switch(&cache, "NF_CUDA_IDS_EARLY", "off");
}

/* In decode the routed experts' down and the shared expert's down run as one launch (nf_cuda_moe_run_pairs): the
 * 2-bit routed product is bound by its decode instructions, the shared expert's Q8_0 by its loads, and one launch's
 * CTAs of both kinds share the SMs. The same values (every row as in its own launch). NF_CUDA_MOE_PAIR selects:
 *   down (default): the downs paired, the gate+ups as two launches in the default order (shared first). On the
 *     H100 (session 18, glm53@32:q2) decode +1.9% and +1.2% by the medians of two alternating A/Bs (3 and 4 runs
 *     per arm, 6 of 7 pairs faster), the same greedy tokens; the bench: 25.50 -> 22.99 us for the pair;
 *   on: the gate+ups paired too: that pair is slower (45.06 -> 46.97 us: the IQ2_XXS gate+up loses more to the
 *     CTAs it gives up than the shared expert's loads gain) and decode was 0.5% and 2.3% slower;
 *   off: four launches (A/B). Returns 0 (off), 1 (on), 2 (down). */
static int moe_pair_mode(void) {
    static int cache = -1;
    static const char *const names[] = {"off", "on"};
    return nf_cuda_env_choice(&cache, "NF_CUDA_MOE_PAIR", names, 2, 2);
}

#define COMBINE_THREADS 256
#define COMBINE_BATCH 8 /* slots whose loads are issued together (glm53: k = 8, one round) */

/* y[t][i] = sum over slots in ascending expert order of w * out (+ shared[t][i]); block (column range, token):
 * the slots' ascending order is found once per block (slot q's place = number of smaller experts; the k experts of
 * a token are distinct). */
__global__ void moe_combine_kernel(const float *out, const int32_t *expert_of, const float *weight_of,
                                   const float *shared, int T, int k, int n, float *y) {
    NF_PDL_ENTER();
    __shared__ int order[NF_ROUTER_TOPK_MAX];
    __shared__ float wgt[NF_ROUTER_TOPK_MAX];
    for (int t = blockIdx.y; t < T; t += gridDim.y) {
        const int32_t *ex = expert_of + (size_t)t * k;
        /* loads in groups of COMBINE_BATCH issued together (a rolled loop paid one memory round trip per slot),
         * the same comparisons and additions in the same order */
        if (threadIdx.x < k) {
            const int32_t mine = ex[threadIdx.x];
            const float w = weight_of[(size_t)t * k + threadIdx.x];
            int place = 0;
            for (int q0 = 0; q0 < k; q0 += COMBINE_BATCH) {
                int32_t e[COMBINE_BATCH];
#pragma unroll
                for (int u = 0; u < COMBINE_BATCH; u++) e[u] = q0 + u < k ? ex[q0 + u] : 0;
#pragma unroll
                for (int u = 0; u < COMBINE_BATCH; u++)
                    place += q0 + u < k && (e[u] < mine || (e[u] == mine && q0 + u < (int)threadIdx.x));
            }
            order[place] = threadIdx.x;
            wgt[place] = w;
        }
        __syncthreads();
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
            float acc = 0.0f;
            for (int r0 = 0; r0 < k; r0 += COMBINE_BATCH) {
                float v[COMBINE_BATCH];
#pragma unroll
                for (int u = 0; u < COMBINE_BATCH; u++)
                    v[u] = r0 + u < k ? out[((size_t)t * k + order[r0 + u]) * n + i] : 0.0f;
#pragma unroll
                for (int u = 0; u < COMBINE_BATCH; u++)
                    if (r0 + u < k) acc = __fadd_rn(acc, __fmul_rn(v[u], wgt[r0 + u]));
            }
            if (shared) acc = __fadd_rn(acc, shared[(size_t)t * n + i]);
            y[(size_t)t * n + i] = acc;
        }
        __syncthreads();
    }
}

static int combine(nf_cuda *c, const float *out, const int32_t *expert_of, const float *weight_of, const float *shared,
                   int T, int k, int n, float *y) {
    const dim3 cgrid((n + COMBINE_THREADS - 1) / COMBINE_THREADS < 32 ? (n + COMBINE_THREADS - 1) / COMBINE_THREADS : 32,
                     T < 65535 ? T : 65535);
    nf_launch(moe_combine_kernel, cgrid, COMBINE_THREADS, 0, c->stream, out, expert_of, weight_of, shared, T, k, n, y);
    NF_LAUNCHED();
    return 0;
}

/* the combine into y, or in decode with NF_CUDA_COMBINE_FOLD left pending for the next site's hc projection, which
 * computes y at the columns it reads (cuda_hc.cu: hc_proj_part_kernel) with the same operations in the same order:
 * the streams get the same bits and the combine's launch and its dependency edge go. Its inputs then outlive this
 * block's scratch: sc gives them up to c->pending, whose consumer (or nf_cuda_combine_flush) releases them. */
static int finish(nf_cuda *c, nf_cuda_scratch &sc, float *out, int32_t *expert_of, float *weight_of, float *shared,
                  int T, int k, int n, float *y) {
    if (!c->combine_fold || T > NF_CUDA_GEMV_MAX_VECTORS || k > NF_CUDA_COMBINE_FOLD_KMAX || c->pending.y)
        return combine(c, out, expert_of, weight_of, shared, T, k, n, y);
    nf_cuda::nf_cuda_combine &p = c->pending;
    p.nkeep = 0;
    p.keep[p.nkeep++] = sc.keep(out);
    p.keep[p.nkeep++] = sc.keep(expert_of);
    p.keep[p.nkeep++] = sc.keep(weight_of);
    if (shared) p.keep[p.nkeep++] = sc.keep(shared);
    p.out = out;
    p.expert_of = expert_of;
    p.weight_of = weight_of;
    p.shared = shared;
    p.T = T;
    p.k = k;
    p.n = n;
    p.y = y;
    return 0;
}

void nf_cuda_combine_done(nf_cuda *c) {
    nf_cuda::nf_cuda_combine &p = c->pending;
    for (int i = 0; i < p.nkeep; i++)
        if (p.keep[i]) nf_cuda_release(c, p.keep[i]);
    p.nkeep = 0;
    p.y = nullptr;
}

int nf_cuda_combine_flush(nf_cuda *c) {
    nf_cuda::nf_cuda_combine &p = c->pending;
    if (!p.y) return 0;
    const int rc = combine(c, p.out, p.expert_of, p.weight_of, p.shared, p.T, p.k, p.n, p.y);
    nf_cuda_combine_done(c);
    return rc;
}

int nf_cuda_moe_block(nf_backend *be, int il, const float *x, int T, float *y) {
    nf_cuda *c = nf_cuda_of(be);
    const nf_hparams *hp = &c->m->hp;
    const nf_layer *L = &c->m->layers[il];
    const int n = hp->n_embd, E = hp->n_expert, k = hp->n_expert_used;
    if (k < 1 || k > NF_ROUTER_TOPK_MAX || k > E) return nf_fail("cuda moe: %d experts per token of %d unsupported (1..%d)", k, E, NF_ROUTER_TOPK_MAX);
    const float *bias = L->router_bias.data ? nf_cuda_vec(c, &L->router_bias) : nullptr;
    if (L->router_bias.data && !bias) return nf_fail_prefix("layer %d router bias", il);
    nf_cuda_mat r = nf_cuda_mat_of(c, &L->router), g = nf_cuda_mat_of(c, &L->gate_exps),
                u = nf_cuda_mat_of(c, &L->up_exps), d = nf_cuda_mat_of(c, &L->down_exps);
    const int64_t I = g.rows;
    const int has_shared = hp->n_expert_shared > 0 && L->gate_shexp.data;
    nf_cuda_scratch sc(c);
    float *logit = sc.get<float>((size_t)T * E), *weight_of = sc.get<float>((size_t)T * k),
          *a = sc.get<float>((size_t)T * k * I), *b = sc.get<float>((size_t)T * k * I),
          *out = sc.get<float>((size_t)T * k * n), *shared = has_shared ? sc.get<float>((size_t)T * n) : nullptr;
    int32_t *expert_of = sc.get<int32_t>((size_t)T * k);
    /* the shared expert's gate and up outputs, taken here: no stream-ordered allocation between the router and
     * the routed products (see below) */
    const int64_t Is = has_shared ? L->gate_shexp.ne[1] : 0;
    float *sa = has_shared ? sc.get<float>((size_t)T * Is) : nullptr, *sb = has_shared ? sc.get<float>((size_t)T * Is) : nullptr;
    if (!logit || !weight_of || !a || !b || !out || !expert_of || (has_shared && (!shared || !sa || !sb)))
        return nf_fail("cuda moe: out of device memory");
    const int fused = router_fused_on() && r.type == NF_TYPE_F32 && r.w && r.n == n && r.rows == E &&
                      r.row_bytes == (size_t)n * sizeof(float) &&
                      nf_cuda_router_fused(c->stream, (const float *)r.w, n, x, n, T, bias, E, k,
                                           hp->expert_weights_norm, hp->expert_weights_scale, logit, expert_of,
                                           weight_of, c->router_done);
    if (!fused && (nf_cuda_matmul(c, &r, x, T, n, logit, E) < 0 ||
                   nf_cuda_router(c->stream, logit, bias, T, E, k, hp->expert_weights_norm, hp->expert_weights_scale,
                                  expert_of, weight_of) < 0))
        return -1;
    /* The shared expert (two launches: gate+up, down) goes between the router and the routed experts, so that
     * the router has completed when they start (PDL, cuda_launch.h): they read the ids and start copying their
     * weights while the launch before them drains (ids_settled). Without a shared expert only the down product
     * (two launches after the router) can. NF_CUDA_IDS_EARLY=off: routed then shared, the routed products waiting
     * first (the order before, for A/B). The results are the same either way: the products are independent and
     * moe_combine adds them in its fixed order. */
    if (has_shared && moe_pair_mode()) {
        nf_cuda_mat sg = nf_cuda_mat_of(c, &L->gate_shexp), su = nf_cuda_mat_of(c, &L->up_shexp),
                    sd = nf_cuda_mat_of(c, &L->down_shexp);
        const nf_cuda_moe_pair mp = {&g, &u, &d, &sg, &su, &sd, x, n, k, T, expert_of, hp->swiglu_limit,
                                     a, b, out, sa, sb, shared, moe_pair_mode() == 2};
        const int rc = nf_cuda_moe_run_pairs(c, &mp);
        if (rc < 0) return -1;
        if (rc) return finish(c, sc, out, expert_of, weight_of, shared, T, k, n, y);
    }
    const int early = ids_early();
    if (early && has_shared && mlp_in(c, &L->gate_shexp, &L->up_shexp, &L->down_shexp, x, T, hp->swiglu_limit, shared, sa, sb) < 0)
        return -1;
    c->ids_settled = early && has_shared;
    int rc = gate_up(c, &g, &u, x, n, k, expert_of, a, b, I, T * k);
    c->ids_settled = early;
    if (rc == 0) rc = nf_cuda_matmul_swiglu(c, &d, a, b, I, hp->swiglu_limit, expert_of, out, n, T * k);
    c->ids_settled = 0;
    if (rc < 0) return -1;
    if (!early && has_shared && mlp_in(c, &L->gate_shexp, &L->up_shexp, &L->down_shexp, x, T, hp->swiglu_limit, shared, sa, sb) < 0)
        return -1;
    return finish(c, sc, out, expert_of, weight_of, shared, T, k, n, y);
}
