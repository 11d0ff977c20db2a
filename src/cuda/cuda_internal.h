/* cuda_internal.h — internals shared by the CUDA backend's files (C++, not a public header).
 *
 * nf_cuda is the backend's private state: the model, the one stream every kernel runs on, the device copy of
 * the model's tensor data (uploaded once: a tensor's device address is its offset inside the mapped file's
 * tensor region), f32 device copies of small non-f32 vectors, and a pinned staging buffer for token ids.
 * Each block lives in its own file (cuda_hc.cu, cuda_kda.cu, cuda_mla.cu, cuda_indexer.cu, cuda_moe.cu);
 * cuda_matmul.cu decodes the stored formats (matrix products, row dequantization);
 * cuda_norm.cu holds the row-wise helpers; cuda_state.cu the device sequence state; cuda_synth.cu the upload of
 * a synthetic model made in memory (its large tensors made on the GPU).
 *
 * Numerics follow the CPU reference (src/cpu) operation by operation so that the two backends can be
 * compared tightly: reductions of squares in double, every weight (quantized ones included) decoded to exactly
 * nf_dequantize's f32 value and dotted against the f32 activation (activations are never quantized, so the
 * forward is continuous in its inputs and a summation-order ulp cannot flip a rounding step), and the same
 * orders of accumulation where the CPU's order is sequential (KDA recurrence, attention sums, expert sums). */
#ifndef NF_CUDA_INTERNAL_H
#define NF_CUDA_INTERNAL_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "formats/formats.h"
#include "cuda/backend_cuda.h"
#include "model/backend.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/state.h"
#include "model/synth.h"
#include "util/error.h"
}
#include "cuda/cuda_act.h"
#include "cuda/cuda_rowsum.h"

struct nf_cuda_vec_entry {
    const void *key;
    float *val;
};

struct nf_cuda {
    const nf_model *m;
    int device;
    cudaStream_t stream;
    uint8_t *dweights;          /* device copy of [hbase, hbase + hsize), or of the segments below */
    const uint8_t *hbase;
    size_t hsize;
    /* a backend made for a layer range (nf_backend_cuda_create_layers) holds only the host runs [hlo, hhi) of the
     * tensors it needs, each at dweights + doff; n_segs == 0: the whole region above */
    struct nf_cuda_seg {
        const uint8_t *hlo, *hhi;
        size_t doff;
    } *segs;
    int n_segs;
    nf_cuda_vec_entry *vecs;          /* f32 copies of non-f32 small tensors (linear list: few entries) */
    int n_vecs, cap_vecs;
    int32_t *tok_host;          /* pinned staging for token ids */
    size_t tok_cap;
    cudaEvent_t tok_ev;
    cudaEvent_t peer_ev;        /* this stream's side of a pipeline hand-over (cuda_peer.cu) */
    int tok_ev_pending;
    /* decode-step graphs (cuda_graph.cu): while `capturing`, activation and scratch memory come from the arena
     * (a bump allocator reset every step), so a step allocates nothing from the driver and the same allocation
     * sequence gives the same addresses */
    int capturing;
    /* set by the MoE block around products whose expert ids were written two or more launches earlier
     * (nf_gemv_job.ids_settled) */
    int ids_settled;
    /* the fused router's count of finished CTAs (cuda_router.cu: router_fused_kernel; zero between launches) */
    unsigned int *router_done;
    /* NF_CUDA_HC_TAIL=on (read at creation, so that a test can compare two backends): decode's hc mixing done by the
     * split projection's last CTA (cuda_hc.cu: hc_part_tail); hc_done its count of finished CTAs per token (zero
     * between launches), hc_tails the launches that took it (nf_cuda_hc_tails: tests) */
    int hc_tail;
    unsigned int *hc_done;
    unsigned long long hc_tails;
    /* decode's MoE combine left for the next site's hc projection to do at the columns it reads (cuda_moe.cu,
     * cuda_hc.cu: NF_CUDA_COMBINE_FOLD). While y is set, y has NOT been written: nf_cuda_of (every entry point but
     * the consumer) first launches the combine into y (nf_cuda_combine_flush), so any other reader sees it. */
    struct nf_cuda_combine {
        float *y;                       /* the output the combine stands for; NULL: none pending */
        const float *out, *weight_of, *shared;
        const int32_t *expert_of;
        int T, k, n;
        void *keep[4];                  /* the inputs' allocations, released once the combine has been launched */
        int nkeep;
    } pending;
    int combine_fold;                   /* NF_CUDA_COMBINE_FOLD at the backend's creation */
    unsigned long long combines_folded; /* combines the hc projection took (nf_cuda_combines_folded: tests) */
#define NF_CUDA_COMBINE_FOLD_KMAX 8     /* experts per token the folded combine takes */
    uint8_t *arena;
    size_t arena_cap, arena_used, arena_need;
    /* direct launches (no graphs): small allocations also come from the arena, bump-allocated while any is live
     * and reset when the last is released (the end of every forward), so a decode step puts no stream-ordered
     * allocation or free between its kernels (nf_cuda_alloc); 0 when graphs own the arena or NF_CUDA_STEP_ARENA=off */
    int direct_arena;
    int arena_live;             /* live direct-mode arena allocations */
    unsigned long long arena_hits, arena_misses; /* direct-mode allocations served by the arena / by the pool */
    struct nf_cuda_graph_cache *gcache;
};

/* ---- decode-step graphs (cuda_graph.cu) ---- */
/* Arena memory of the step being captured (256-byte aligned), or NULL when the arena is full (the capture then
 * fails and the step is redone with a larger arena). */
void *nf_cuda_arena_get(nf_cuda *c, size_t bytes);
/* 1 when p lies inside the arena (its release is a no-op: the arena resets per step). */
static inline int nf_cuda_in_arena(const nf_cuda *c, const void *p) {
    return c->arena && (const uint8_t *)p >= c->arena && (const uint8_t *)p < c->arena + c->arena_cap;
}
/* Activation and scratch memory on the backend's stream: from the arena while capturing a graph or, in direct
 * launches, for allocations of at most NF_CUDA_ARENA_ITEM_MAX bytes while the arena has room (cuda_graph.cu); else
 * cudaMallocAsync. nf_cuda_release gives back either kind (stream-ordered). NULL when out of memory. */
void *nf_cuda_alloc(nf_cuda *c, size_t bytes);
void nf_cuda_release(nf_cuda *c, void *p);
/* The backend's graph operations (backend.h: graph_begin / graph_end / graph_abort) and their cleanup. */
int nf_cuda_graph_begin(nf_backend *be);
int nf_cuda_graph_end(nf_backend *be);
void nf_cuda_graph_abort(nf_backend *be);
void nf_cuda_graph_free(nf_cuda *c);

/* The device this thread's CUDA calls go to. A pipeline (model/pipeline.h) runs its stages on several devices
 * from one host thread, and a kernel launch, an allocation or a symbol copy goes to the CURRENT device: so every
 * entry point of the backend makes its backend's device current first (nf_cuda_of for the backend's ops, the state
 * hooks for a device state), and nf_cuda_set_device is the only place src/cuda changes the current device, so
 * the thread-local cache of it is true and "already current" costs a compare (the ~300 entry calls of a decode
 * step would otherwise each pay a runtime call). */
#define NF_CUDA_MAX_DEVICES 64
extern thread_local int nf_cuda_cur_device;
static inline void nf_cuda_use_device(int device) {
    if (nf_cuda_cur_device != device) (void)nf_cuda_set_device(device);
}
/* the current device as nf_cuda_set_device last made it (0 before any call: the runtime's default) */
static inline int nf_cuda_device_now(void) { return nf_cuda_cur_device < 0 ? 0 : nf_cuda_cur_device; }
/* set() once per device for one call site (done: the site's own flags): a kernel's function attributes, such as the
 * opt-in limit of dynamic shared memory over 48 KiB, are per device, and each pipeline stage runs on its own.
 * set returns 0 or -1 with nf_fail (NF_CU inside it); so does this. */
template <class F> static inline int nf_cuda_once_per_device(bool (&done)[NF_CUDA_MAX_DEVICES], F set) {
    const int dev = nf_cuda_device_now();
    if (dev < NF_CUDA_MAX_DEVICES && done[dev]) return 0;
    if (set() < 0) return -1;
    if (dev < NF_CUDA_MAX_DEVICES) done[dev] = true;
    return 0;
}

/* backend.h's from_peer between two CUDA backends (cuda_peer.cu) */
int nf_cuda_from_peer(nf_backend *be, void *dst, nf_backend *src_be, const void *src, size_t bytes);

/* a pending MoE combine (nf_cuda::pending) launched into its output, its inputs released: 0, or -1 on a launch error
 * (cuda_moe.cu) */
int nf_cuda_combine_flush(nf_cuda *c);
/* the pending combine's inputs released without launching it: its consumer has read them (cuda_moe.cu) */
void nf_cuda_combine_done(nf_cuda *c);

/* the backend of an entry point, its device made current and a pending MoE combine written out */
static inline nf_cuda *nf_cuda_of(nf_backend *be) {
    nf_cuda *c = (nf_cuda *)be->impl;
    nf_cuda_use_device(c->device);
    if (c->pending.y) (void)nf_cuda_combine_flush(c); /* a launch error stays for the stream's next check */
    return c;
}
/* the same without the flush: for hc_post_pre_norm, which may take the combine itself */
static inline nf_cuda *nf_cuda_of_keep(nf_backend *be) {
    nf_cuda *c = (nf_cuda *)be->impl;
    nf_cuda_use_device(c->device);
    return c;
}

#define NF_CU(call)                                                                                          \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess) return nf_fail("cuda: %s (%s:%d)", cudaGetErrorString(e_), __FILE__, __LINE__); \
    } while (0)
/* after a kernel launch */
#define NF_LAUNCHED() NF_CU(cudaGetLastError())

/* Stream-ordered temporary device memory of one block call, freed (stream-ordered) when it goes out of scope. */
struct nf_cuda_scratch {
    nf_cuda *c;
    void *p[24];
    int n;
    explicit nf_cuda_scratch(nf_cuda *cc) : c(cc), n(0) {}
    template <class T> T *get(size_t count) {
        if (n == 24) return nullptr;
        void *q = nf_cuda_alloc(c, count * sizeof(T) + 64);
        if (q) p[n++] = q;
        return (T *)q;
    }
    /* q (one of get's) is no longer released by this scope: the caller owns it */
    void *keep(const void *q) {
        for (int i = 0; i < n; i++)
            if (p[i] == q) {
                for (int j = i; j + 1 < n; j++) p[j] = p[j + 1];
                n--;
                return (void *)q;
            }
        return nullptr;
    }
    ~nf_cuda_scratch() {
        for (int i = n - 1; i >= 0; i--) nf_cuda_release(c, p[i]);
    }
};

/* ---- tensors (backend_cuda.cu) ---- */
/* Device address of a tensor's data (NULL for an absent tensor). */
const uint8_t *nf_cuda_dptr(nf_cuda *c, const nf_tensor *t);
/* Device f32 values of a small tensor (any type; converted once). NULL with nf_fail when absent. */
const float *nf_cuda_vec(nf_cuda *c, const nf_tensor *t);

/* 0 when `bytes` of weights (plus a working margin) fit in the device's free memory, else -1 with a message that
 * names what is needed and what is free. Checked before the weights are allocated. */
int nf_cuda_check_fits(nf_cuda *c, size_t bytes);

/* ---- synthetic models (cuda_synth.cu) ---- */
/* Weight upload of a synthetic model (m->synth): host tensors copied, virtual tensors made on the GPU. */
int nf_cuda_synth_upload(nf_cuda *c);
/* The same for a layer-range backend: only the tensors inside c->segs, at their packed addresses (cuda_synth.cu). */
int nf_cuda_synth_upload_segs(nf_cuda *c);
/* The virtual synthetic tensor whose host data pointer is host_data (its host bytes are not the weights), or NULL. */
const nf_synth_tensor *nf_cuda_synth_virtual(const nf_cuda *c, const void *host_data);

/* ---- matrices (cuda_matmul.cu) ---- */
struct nf_cuda_mat {
    const uint8_t *w;       /* device */
    uint32_t type;
    int64_t n;              /* values per row */
    int64_t rows;
    size_t row_bytes;
    size_t slice_bytes;     /* bytes between the matrices of a 3-D tensor */
    int64_t nmat;           /* matrices (ne[2] of a 3-D tensor, else 1) */
};
nf_cuda_mat nf_cuda_mat_of(nf_cuda *c, const nf_tensor *t);

int nf_cuda_formats_init(void);
int nf_cuda_mat_supported(uint32_t type);
/* General product: for each vector v < nvec,
 *   y[v*ldy + r] = W_s[r,:] . x[(v/xdiv)*ldx + :],   s = ids ? ids[v] : v % smod   (r < rows)
 * where W_s is matrix s of a 3-D tensor. Every weight type is dequantized (nf_dequantize's values) and dotted
 * with the f32 activation in f32. All pointers are device pointers. */
int nf_cuda_matmul_ex(nf_cuda *c, const nf_cuda_mat *w, const float *x, int64_t ldx, int xdiv, int smod,
                      const int32_t *ids, float *y, int64_t ldy, int nvec);
/* y[m] = w[m] x for nmat (<= NF_CUDA_GEMV_MAX_MATS) matrices of one type and shape over the same activations
 * (matmul_ex's other arguments): one decode launch for all of them when nvec <= NF_CUDA_GEMV_MAX_VECTORS (the
 * same kernel, hence the same values, as separate products), else one product each. */
int nf_cuda_matmul_same(nf_cuda *c, const nf_cuda_mat *const *w, int nmat, const float *x, int64_t ldx, int xdiv,
                        const int32_t *ids, float *const *y, int64_t ldy, int nvec);
/* y[m] = w[m] x for one activation vector x and nmat 2-D matrices of one type and row length but any heights (a
 * decode token's projections of one input: KDA's q, k, v, gate down-projections and beta; MLA's q_a and kv_a):
 * one launch (nf_gemv_job.mrows), each row computed exactly as by its own product; one product each when the
 * kernels do not take them together or NF_CUDA_FLAT=off. */
int nf_cuda_matvec_many(nf_cuda *c, const nf_cuda_mat *const *w, int nmat, const float *x, float *const *y);
/* nf_cuda_matmul_same with matrix m reading its own activations x[m] (same ldx; no ids, xdiv 1) */
int nf_cuda_matmul_same_x(nf_cuda *c, const nf_cuda_mat *const *w, int nmat, const float *const *x, int64_t ldx,
                          float *const *y, int64_t ldy, int nvec);
/* y = W SwiGLU(g, u) (the clamped SwiGLU of nf_cuda_swiglu, limit; g, u rows at ldx; matmul_ex's ids, ldy, nvec):
 * in decode one launch that applies SwiGLU while staging the activation row (cuda_gemv.cu), otherwise
 * nf_cuda_swiglu into g (g is overwritten) and the product. The same values either way. */
int nf_cuda_matmul_swiglu(nf_cuda *c, const nf_cuda_mat *w, float *g, const float *u, int64_t ldx, float limit,
                          const int32_t *ids, float *y, int64_t ldy, int nvec);
/* The MoE's two product pairs as one launch each (cuda_gemv.h, nf_cuda_gemv_run_pair): gate+up of the routed
 * experts (ids) beside the shared expert's gate+up, then the routed down beside the shared down, each with the
 * arguments of nf_cuda_matmul_same (two matrices) or nf_cuda_matmul_swiglu (down_only: the gate+ups as two launches,
 * shared first, and the downs paired). nf_cuda_moe_run_pairs returns 1 when it queued the four products so, 0 when the
 * pairs cannot share a launch (nothing queued: the caller runs the products its own way), -1 on error. */
typedef struct nf_cuda_moe_pair {
    const nf_cuda_mat *rg, *ru, *rd, *sg, *su, *sd; /* routed gate, up, down; shared gate, up, down */
    const float *x;
    int64_t n;          /* model width (x rows, down outputs) */
    int k, T;           /* experts per token, tokens */
    const int32_t *ids; /* T * k */
    float limit;        /* SwiGLU clamp */
    float *a, *b, *out; /* routed gate / up outputs [T*k][rows of rg], down outputs [T*k][n] */
    float *sa, *sb, *shared; /* shared expert: gate / up [T][rows of sg], down [T][n] */
    int down_only;      /* only the downs paired: shared gate+up, routed gate+up (ids settled), then the pair */
} nf_cuda_moe_pair;
int nf_cuda_moe_run_pairs(nf_cuda *c, const nf_cuda_moe_pair *mp);
/* y = W RMSNorm(x) (no norm weight; T rows of ldx, eps): in decode, when the kernel can (nf_cuda_gemv_norms_x: the
 * hc projection of glm53), one launch that normalises the row itself bit for bit; otherwise
 * nf_cuda_rmsnorm_rows into scratch and the product. The same values either way. */
int nf_cuda_matmul_rmsnormed(nf_cuda *c, const nf_cuda_mat *w, const float *x, int T, int64_t ldx, float eps,
                             float *y, int64_t ldy);
/* y[t*ldy + r] = W[r,:] . x[t*ldx + :] for t < T */
static inline int nf_cuda_matmul(nf_cuda *c, const nf_cuda_mat *w, const float *x, int T, int64_t ldx, float *y,
                                 int64_t ldy) {
    return nf_cuda_matmul_ex(c, w, x, ldx, 1, 1, nullptr, y, ldy, T);
}
/* The tiled prefill product (cuda_gemm.cu) for the arguments of nf_cuda_matmul_ex when there are at least
 * NF_CUDA_GEMM_MIN_VECTORS (cuda_gemm.h) vectors per matrix (per head for smod > 1; all of them for ids):
 * 0 queued, 1 not taken (the caller runs the per-vector kernel), -1 error. NF_CUDA_GEMM=off never takes it,
 * NF_CUDA_GEMM=f32 runs every format on the GEMM's f32 path (diagnostics; read at each such product). */
int nf_cuda_gemm_try(nf_cuda *c, const nf_cuda_mat *w, const float *x, int64_t ldx, int xdiv, int smod,
                     const int32_t *ids, float *y, int64_t ldy, int nvec);
/* the prefill products' mode from NF_CUDA_GEMM, read at each call: 0 off (the per-vector kernel), 2 f32 (the GEMM's
 * f32 path), 1 otherwise (the default: bf16 tensor cores); the MLA core follows it too (nf_cuda_mla_tc_wanted) */
int nf_cuda_gemm_mode(void);
/* X[t][s][:] = row tokens[t] of W (dequantized) for every stream s < copies; tokens on the device. */
int nf_cuda_embed_rows(nf_cuda *c, const nf_cuda_mat *w, const int32_t *tokens, int T, int copies, float *X);

/* ---- row helpers (cuda_norm.cu) ---- */
/* out[r] = RMSNorm(x[r]) * w (w may be NULL), rows of n with strides ldx / ldo; may be in place */
int nf_cuda_rmsnorm_rows(nf_cuda *c, const float *x, int64_t ldx, int rows, int64_t n, float eps, const float *w,
                         float *out, int64_t ldo);
/* the same with out[r][i] then multiplied by sigmoid(gate[r * ldg + i]) (gate may be NULL) */
int nf_cuda_rmsnorm_gated_rows(nf_cuda *c, const float *x, int64_t ldx, int rows, int64_t n, float eps,
                               const float *w, const float *gate, int64_t ldg, float *out, int64_t ldo);
int nf_cuda_layernorm_rows(nf_cuda *c, const float *x, int rows, int64_t n, float eps, const float *w,
                           const float *b, float *out);
/* y = silu(min(g, lim)) * clamp(u, -lim, lim) elementwise (lim <= 0: no clamp); y may alias g */
int nf_cuda_swiglu(nf_cuda *c, const float *g, const float *u, int64_t n, float limit, float *y);
/* x[i] = sigmoid(x[i]) (optionally times scale first: x = scale * x then nothing else) */
int nf_cuda_sigmoid(nf_cuda *c, float *x, int64_t n);
int nf_cuda_scale(nf_cuda *c, float *x, int64_t n, float s);

/* ---- device helpers shared by kernels ---- */
__device__ __forceinline__ float nf_d_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
/* KDA's per-key-channel decay e = exp(gate(graw + dt)) (src/cpu/kda.c): with a negative lower bound lb,
 * gate(f) = lb * sigmoid(rate * f), else -rate * softplus(f); rate = exp(A_log) = -ssm_a. One definition for every
 * recurrence path (cuda_kda.cu, cuda_kda_scan.cu, which must compute it with the same operations, and
 * cuda_kda_chunk.cu, which takes the gate itself, in log2). */
__device__ __forceinline__ float nf_d_kda_gate(float graw, float dt, float rate, float lb) {
    const float f = __fadd_rn(graw, dt);
    return lb < 0.0f ? __fmul_rn(lb, nf_d_sigmoid(__fmul_rn(rate, f))) : __fmul_rn(-rate, nf_d_softplus(f));
}
/* 2^x with results below 2^-126 flushed to 0 (PTX ex2.approx.ftz: one MUFU instruction; exp2f adds a range test
 * and two multiplies for the subnormal results). For sums of decayed terms, where a term below 2^-126 of the others
 * cannot change a rounded f32 result that matters (cuda_kda_chunk.cu's pair sums). */
__device__ __forceinline__ float nf_d_ex2_ftz(float x) {
#ifdef __CUDACC__
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    const float y = exp2f(x);
    return y < 1.17549435e-38f ? 0.0f : y;
#endif
}
__device__ __forceinline__ float nf_d_kda_decay(float graw, float dt, float rate, float lb) {
    return expf(nf_d_kda_gate(graw, dt, rate, lb));
}
/* ---- blocks ---- */
int nf_cuda_hc_pre(nf_backend *be, int il, int site, const float *X, int T, float *h, float *mix);
int nf_cuda_hc_pre_norm(nf_backend *be, int il, int site, const float *X, int T, const nf_tensor *w, float *x,
                        float *mix);
int nf_cuda_hc_post(nf_backend *be, float *X, const float *y, const float *mix, int T);
int nf_cuda_hc_post_pre_norm(nf_backend *be, float *X, const float *y, int il, int site, int T, const nf_tensor *w,
                             float *x, float *mix);
/* NF_CUDA_NORM_ROW4 (cuda_hc.cu): 0 when the norms keep their strided loops (A/B of the row held in registers) */
int nf_cuda_norm_row4_enabled(void);
int nf_cuda_kda_block(nf_backend *be, int il, nf_state *st, const float *x, int T, float *y);
int nf_cuda_mla_project(nf_backend *be, int il, nf_state *st, const float *x, int T, float *qr, float *q);
int nf_cuda_mla_attend(nf_backend *be, int il, nf_state *st, const float *q, const int32_t *sel, int T, float *y);
int nf_cuda_indexer_select(nf_backend *be, int il, nf_state *st, const float *x, const float *qr, int T,
                           int32_t *sel);
int nf_cuda_dense_mlp(nf_backend *be, int il, const float *x, int T, float *y);
int nf_cuda_moe_block(nf_backend *be, int il, const float *x, int T, float *y);

/* ---- state (cuda_state.cu) ---- */
nf_state *nf_cuda_state_create(nf_backend *be, int64_t cap, int layer_begin, int layer_end);
/* The state must be this backend's device state: checks and returns 0, or -1 with nf_fail. */
int nf_cuda_state_check(const nf_state *st);

#endif
