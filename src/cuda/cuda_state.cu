/* cuda_state.cu — the sequence state in GPU memory: a hooked nf_state (model/state.h) whose per-layer arrays
 * (KDA conv windows and fp32 recurrent states, MLA latent caches, indexer pooled keys and open-pool rows) are
 * device allocations with the same layout as the host state. Growth, reset, snapshot/restore and
 * checkpoint/rollback are stream-ordered device copies on the backend's stream, so they need no host
 * synchronisation; a synthetic fill to a depth (model/state_fill.h, nf-bench --fill synthetic) is one kernel per
 * span, writing the host fill's bits; nf_state_restore between a device and a host state copies across (and waits for the copy),
 * which is how tests compare a GPU state with the CPU's.
 *
 * A state may hold a range of the layers (a pipeline stage's, model/pipeline.h): absent layers have no arrays.
 * A device state belongs to the backend that made it and must be freed before the backend is destroyed. */
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_internal.h"
#include "cuda/cuda_launch.h"
#include "model/state_fill.h"

struct cuda_state_dev {
    cudaStream_t stream;
    int device; /* the backend's: made current by every hook (a pipeline's stages are on several devices) */
};

static size_t conv_len(const nf_state *st) { return (size_t)st->conv_rows * (size_t)st->conv_width; }
static size_t s_len(const nf_state *st) { return (size_t)st->kda_heads * st->kda_hd * st->kda_hd; }
static size_t open_len(const nf_state *st) { return (size_t)st->kpool * st->idx_hd; }
static int64_t pool_cap(const nf_state *st, int64_t cap) { return cap / st->kpool + 1; }
static size_t fixed_len(const nf_state *st) {
    size_t n = 0;
    for (int l = 0; l < st->n_layer; l++)
        n += st->L[l].kind == NF_LAYER_KDA ? conv_len(st) + s_len(st)
             : st->L[l].kind == NF_LAYER_MLA ? 2 * open_len(st) : 0;
    return n;
}
/* the state's stream, with its device made current (every hook starts here) */
static cudaStream_t stream_of(const nf_state *st) {
    const cuda_state_dev *d = (const cuda_state_dev *)st->device;
    nf_cuda_use_device(d->device);
    return d->stream;
}
static int device_of(const nf_state *st) { return ((const cuda_state_dev *)st->device)->device; }

static float *dalloc(cudaStream_t s, size_t n) {
    void *p = nullptr;
    if (cudaMallocAsync(&p, n * sizeof(float) + 16, s) != cudaSuccess) return nullptr;
    return (float *)p;
}
static void dfree(cudaStream_t s, void *p) {
    if (p) cudaFreeAsync(p, s);
}

static void h_free(nf_state *st);
static void h_reset(nf_state *st);
static int h_reserve(nf_state *st, int64_t n);
static nf_state *h_snapshot(const nf_state *st);
static int h_restore(nf_state *dst, const nf_state *src);
static int h_checkpoint(const nf_state *st, nf_state_ckpt *ck);
static int h_rollback(nf_state *st, const nf_state_ckpt *ck);
static void h_ckpt_free(nf_state_ckpt *ck);
static int h_fill(nf_state *st, int64_t to, uint64_t seed, const nf_state_fill_scales *sc);

static const nf_state_hooks cuda_hooks = {h_free, h_reset, h_reserve, h_snapshot, h_restore, h_checkpoint,
                                          h_rollback, h_ckpt_free, h_fill};

int nf_cuda_state_check(const nf_state *st) {
    if (!st || st->hooks != &cuda_hooks)
        return nf_fail("cuda backend: the state is not a CUDA device state (create it with nf_backend_state_create)");
    return 0;
}

/* A zeroed device state with the dims of `like` (dims + layer kinds). */
static nf_state *create_like(const nf_state *like, cudaStream_t s, int device, int64_t cap) {
    nf_cuda_use_device(device);
    if (cap < 16) cap = 16;
    nf_state *st = (nf_state *)calloc(1, sizeof *st);
    cuda_state_dev *dev = (cuda_state_dev *)calloc(1, sizeof *dev);
    if (!st || !dev) {
        free(st);
        free(dev);
        nf_fail("cuda state: out of memory");
        return nullptr;
    }
    *st = *like;
    st->pos = 0;
    st->cap = cap;
    st->hooks = &cuda_hooks;
    st->device = dev;
    dev->stream = s;
    dev->device = device;
    st->L = (nf_layer_state *)calloc((size_t)st->n_layer, sizeof *st->L);
    if (!st->L) {
        free(dev);
        free(st);
        nf_fail("cuda state: out of memory");
        return nullptr;
    }
    int ok = 1;
    for (int l = 0; l < st->n_layer; l++) {
        nf_layer_state *L = &st->L[l];
        L->kind = like->L[l].kind;
        if (L->kind == NF_LAYER_KDA) {
            L->conv = dalloc(s, conv_len(st) + 1);
            L->S = dalloc(s, s_len(st));
            ok &= L->conv && L->S;
        } else if (L->kind == NF_LAYER_MLA) {
            L->latent = dalloc(s, (size_t)cap * st->kv_lora);
            L->pool_key = dalloc(s, (size_t)pool_cap(st, cap) * st->idx_hd);
            L->open_key = dalloc(s, open_len(st));
            L->open_gate = dalloc(s, open_len(st));
            ok &= L->latent && L->pool_key && L->open_key && L->open_gate;
        }
    }
    if (!ok) {
        h_free(st);
        nf_fail("cuda state: out of device memory (capacity %lld tokens)", (long long)cap);
        return nullptr;
    }
    h_reset(st);
    return st;
}

nf_state *nf_cuda_state_create(nf_backend *be, int64_t cap, int layer_begin, int layer_end) {
    nf_cuda *c = nf_cuda_of(be);
    /* a host state of the model gives the dims and layer kinds (its arrays are tiny at capacity 16) */
    nf_state *like = nf_state_create_layers(&c->m->hp, 16, layer_begin, layer_end);
    if (!like) return nullptr;
    nf_state *st = create_like(like, c->stream, c->device, cap);
    nf_state_free(like);
    return st;
}

static void h_free(nf_state *st) {
    cudaStream_t s = stream_of(st);
    if (st->L) {
        for (int l = 0; l < st->n_layer; l++) {
            nf_layer_state *L = &st->L[l];
            dfree(s, L->conv);
            dfree(s, L->S);
            dfree(s, L->latent);
            dfree(s, L->pool_key);
            dfree(s, L->open_key);
            dfree(s, L->open_gate);
        }
        free(st->L);
    }
    free(st->device);
    free(st);
}

static void h_reset(nf_state *st) {
    cudaStream_t s = stream_of(st);
    st->pos = 0;
    for (int l = 0; l < st->n_layer; l++) {
        nf_layer_state *L = &st->L[l];
        if (L->kind == NF_LAYER_KDA) {
            cudaMemsetAsync(L->conv, 0, (conv_len(st) + 1) * sizeof(float), s);
            cudaMemsetAsync(L->S, 0, s_len(st) * sizeof(float), s);
        } else if (L->kind == NF_LAYER_MLA) {
            cudaMemsetAsync(L->open_key, 0, open_len(st) * sizeof(float), s);
            cudaMemsetAsync(L->open_gate, 0, open_len(st) * sizeof(float), s);
        }
    }
}

static int h_reserve(nf_state *st, int64_t n) {
    if (n <= st->cap) return 0;
    cudaStream_t s = stream_of(st);
    const int64_t cap = nf_state_grown_cap(st, n);
    for (int l = 0; l < st->n_layer; l++) {
        nf_layer_state *L = &st->L[l];
        if (L->kind != NF_LAYER_MLA) continue;
        float *lat = dalloc(s, (size_t)cap * st->kv_lora);
        float *pk = dalloc(s, (size_t)pool_cap(st, cap) * st->idx_hd);
        if (!lat || !pk) {
            dfree(s, lat);
            dfree(s, pk);
            size_t free_b = 0, total_b = 0;
            cudaMemGetInfo(&free_b, &total_b);
            int n_mla = 0;
            for (int k = 0; k < st->n_layer; k++) n_mla += st->L[k].kind == NF_LAYER_MLA;
            const double need =
                (double)n_mla * ((double)cap * st->kv_lora + (double)pool_cap(st, cap) * st->idx_hd) * sizeof(float);
            return nf_fail("cuda state: out of device memory growing the caches to %lld tokens (%.2f GB of latent rows "
                           "and pooled keys, allocated beside the current %lld-token caches while they are copied; "
                           "%.2f GB free of %.2f GB)", (long long)cap, need / 1e9, (long long)st->cap, free_b / 1e9,
                           total_b / 1e9);
        }
        NF_CU(cudaMemcpyAsync(lat, L->latent, (size_t)st->pos * st->kv_lora * sizeof(float), cudaMemcpyDeviceToDevice, s));
        NF_CU(cudaMemcpyAsync(pk, L->pool_key, (size_t)(st->pos / st->kpool) * st->idx_hd * sizeof(float),
                              cudaMemcpyDeviceToDevice, s));
        dfree(s, L->latent);
        dfree(s, L->pool_key);
        L->latent = lat;
        L->pool_key = pk;
    }
    st->cap = cap;
    return 0;
}

static int h_restore(nf_state *dst, const nf_state *src) {
    if (dst->n_layer != src->n_layer || dst->conv_width != src->conv_width || dst->kv_lora != src->kv_lora ||
        dst->kpool != src->kpool || dst->idx_hd != src->idx_hd || dst->kda_heads != src->kda_heads ||
        dst->kda_hd != src->kda_hd || dst->conv_rows != src->conv_rows)
        return nf_fail("state restore: states belong to different models");
    const nf_state *dev = dst->hooks == &cuda_hooks ? dst : src;
    cudaStream_t s = stream_of(dev);
    const int crosses = dst->hooks != src->hooks;
    if (nf_state_reserve(dst, src->pos) < 0) return -1;
    const size_t f = sizeof(float);
    for (int l = 0; l < src->n_layer; l++) {
        const nf_layer_state *S = &src->L[l];
        nf_layer_state *D = &dst->L[l];
        if (S->kind != D->kind) return nf_fail("state restore: layer %d kinds differ", l);
        if (S->kind == NF_LAYER_KDA) {
            NF_CU(cudaMemcpyAsync(D->conv, S->conv, conv_len(src) * f, cudaMemcpyDefault, s));
            NF_CU(cudaMemcpyAsync(D->S, S->S, s_len(src) * f, cudaMemcpyDefault, s));
        } else if (S->kind == NF_LAYER_MLA) {
            NF_CU(cudaMemcpyAsync(D->latent, S->latent, (size_t)src->pos * src->kv_lora * f, cudaMemcpyDefault, s));
            NF_CU(cudaMemcpyAsync(D->pool_key, S->pool_key, (size_t)(src->pos / src->kpool) * src->idx_hd * f,
                                  cudaMemcpyDefault, s));
            NF_CU(cudaMemcpyAsync(D->open_key, S->open_key, open_len(src) * f, cudaMemcpyDefault, s));
            NF_CU(cudaMemcpyAsync(D->open_gate, S->open_gate, open_len(src) * f, cudaMemcpyDefault, s));
        }
    }
    if (crosses) NF_CU(cudaStreamSynchronize(s));
    dst->pos = src->pos;
    return 0;
}

static nf_state *h_snapshot(const nf_state *st) {
    nf_state *c = create_like(st, stream_of(st), device_of(st), st->pos > 16 ? st->pos : 16);
    if (!c) return nullptr;
    if (h_restore(c, st) < 0) {
        h_free(c);
        return nullptr;
    }
    return c;
}

static int h_checkpoint(const nf_state *st, nf_state_ckpt *ck) {
    cudaStream_t s = stream_of(st);
    const size_t n = fixed_len(st), f = sizeof(float);
    float *d = nullptr;
    NF_CU(cudaMalloc((void **)&d, (n + 1) * f));
    float *p = d;
    for (int l = 0; l < st->n_layer; l++) {
        const nf_layer_state *L = &st->L[l];
        if (L->kind == NF_LAYER_KDA) {
            NF_CU(cudaMemcpyAsync(p, L->conv, conv_len(st) * f, cudaMemcpyDeviceToDevice, s)); p += conv_len(st);
            NF_CU(cudaMemcpyAsync(p, L->S, s_len(st) * f, cudaMemcpyDeviceToDevice, s)); p += s_len(st);
        } else if (L->kind == NF_LAYER_MLA) {
            NF_CU(cudaMemcpyAsync(p, L->open_key, open_len(st) * f, cudaMemcpyDeviceToDevice, s)); p += open_len(st);
            NF_CU(cudaMemcpyAsync(p, L->open_gate, open_len(st) * f, cudaMemcpyDeviceToDevice, s)); p += open_len(st);
        }
    }
    ck->pos = st->pos;
    ck->bytes = n * f;
    ck->data = d;
    ck->hooks = &cuda_hooks;
    return 0;
}

static int h_rollback(nf_state *st, const nf_state_ckpt *ck) {
    if (ck->hooks != &cuda_hooks || !ck->data || ck->bytes != fixed_len(st) * sizeof(float))
        return nf_fail("state rollback: checkpoint does not belong to this model's device state");
    if (ck->pos > st->pos)
        return nf_fail("state rollback: checkpoint at %lld is ahead of the state (%lld)", (long long)ck->pos,
                       (long long)st->pos);
    cudaStream_t s = stream_of(st);
    const size_t f = sizeof(float);
    const float *p = ck->data;
    for (int l = 0; l < st->n_layer; l++) {
        nf_layer_state *L = &st->L[l];
        if (L->kind == NF_LAYER_KDA) {
            NF_CU(cudaMemcpyAsync(L->conv, p, conv_len(st) * f, cudaMemcpyDeviceToDevice, s)); p += conv_len(st);
            NF_CU(cudaMemcpyAsync(L->S, p, s_len(st) * f, cudaMemcpyDeviceToDevice, s)); p += s_len(st);
        } else if (L->kind == NF_LAYER_MLA) {
            NF_CU(cudaMemcpyAsync(L->open_key, p, open_len(st) * f, cudaMemcpyDeviceToDevice, s)); p += open_len(st);
            NF_CU(cudaMemcpyAsync(L->open_gate, p, open_len(st) * f, cudaMemcpyDeviceToDevice, s)); p += open_len(st);
        }
    }
    st->pos = ck->pos;
    return 0;
}

static void h_ckpt_free(nf_state_ckpt *ck) {
    cudaPointerAttributes a;
    if (ck->data && cudaPointerGetAttributes(&a, ck->data) == cudaSuccess) nf_cuda_use_device(a.device);
    if (ck->data) cudaFree(ck->data);
    ck->data = nullptr;
    ck->bytes = 0;
    ck->hooks = nullptr;
}

/* dst[i] = scale * unit(key, first + i): nf_state_fill's values made on the GPU (a 1M-token glm53 state is
 * ~25 GB; the host fill would take minutes and a host copy) */
__global__ void state_fill_kernel(float *dst, uint64_t n, uint64_t first, uint64_t key, float scale) {
    NF_PDL_ENTER();
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
        dst[i] = scale * nf_state_fill_unit(key, first + i);
}

struct fill_launch {
    cudaStream_t stream;
    cudaError_t err;
};

static void fill_emit(const nf_state_fill_span *sp, void *ctx) {
    fill_launch *fl = (fill_launch *)ctx;
    if (fl->err != cudaSuccess) return;
    const uint64_t want = (sp->n + 255) / 256;
    const unsigned grid = (unsigned)(want < 8192 ? want : 8192);
    nf_launch(state_fill_kernel, grid, 256, 0, fl->stream, sp->dst, sp->n, sp->first, sp->key, sp->scale);
    fl->err = cudaGetLastError();
}

static int h_fill(nf_state *st, int64_t to, uint64_t seed, const nf_state_fill_scales *sc) {
    fill_launch fl = {stream_of(st), cudaSuccess};
    nf_state_fill_spans(st, to, seed, sc, fill_emit, &fl);
    if (fl.err != cudaSuccess) return nf_fail("cuda state: fill kernel: %s", cudaGetErrorString(fl.err));
    return 0;
}
