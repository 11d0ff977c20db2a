/* backend_cuda.cu — assembles the CUDA backend (backend_cuda.h): device selection, the one stream, the weight
 * upload (the whole tensor region of the mapped GGUF copied once; a tensor's device address is its offset in
 * that region; a synthetic model's region is made by cuda_synth.cu; both checked against free memory first),
 * f32 device copies of small non-f32 vectors, stream-ordered activation memory, the embedding lookup, the RMSNorm
 * block, the output head and the nf_backend table (blocks from cuda_hc.cu, cuda_kda.cu,
 * cuda_mla.cu, cuda_indexer.cu, cuda_moe.cu; the device state from cuda_state.cu; a pipeline's hand-over
 * from cuda_peer.cu). Each entry point makes the backend's device current (nf_cuda_of), so backends on several
 * devices can be driven from one thread.
 *
 * Synchronisation: blocks only enqueue work on the stream; the forward's to_host (logits, optional selection
 * dump) is the one point where the host waits. Token ids go through a pinned staging buffer. A decode step runs
 * as one CUDA graph launch (cuda_graph.cu) with NF_CUDA_GRAPH=on (off by default: slower, see cuda_graph.cu). */
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_internal.h"
#include "cuda/backend_cuda.h"
#include "cuda/cuda_launch.h"
#include "cuda/cuda_gemv.h" /* NF_CUDA_GEMV_MAX_VECTORS: decode tokens per launch (hc_done) */

thread_local int nf_cuda_cur_device = -1;

extern "C" int nf_cuda_set_device(int device) {
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) {
        nf_cuda_cur_device = -1; /* unknown: the next use tries again */
        return nf_fail("cuda: cannot make device %d current: %s", device, cudaGetErrorString(e));
    }
    nf_cuda_cur_device = device;
    return 0;
}

const uint8_t *nf_cuda_dptr(nf_cuda *c, const nf_tensor *t) {
    if (!t->data) return nullptr;
    const uint8_t *p = (const uint8_t *)t->data;
    if (!c->n_segs) return c->dweights + (p - c->hbase);
    for (int i = 0; i < c->n_segs; i++) /* a few runs: the range's layers, the embedding, the head */
        if (p >= c->segs[i].hlo && p < c->segs[i].hhi) return c->dweights + c->segs[i].doff + (p - c->segs[i].hlo);
    return nullptr; /* a tensor of another stage's layers */
}

const float *nf_cuda_vec(nf_cuda *c, const nf_tensor *t) {
    if (!t->data) {
        nf_fail("missing tensor %s", t->name ? t->name : "(unnamed)");
        return nullptr;
    }
    if (t->type == NF_TYPE_F32) return (const float *)nf_cuda_dptr(c, t);
    if (nf_cuda_synth_virtual(c, t->data)) {   /* its host bytes were never made */
        nf_fail("tensor %s: a synthetic tensor made on the GPU cannot be converted on the host", t->name);
        return nullptr;
    }
    for (int i = 0; i < c->n_vecs; i++)
        if (c->vecs[i].key == t->data) return c->vecs[i].val;
    int64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims && d < 4; d++) n *= t->ne[d];
    float *h = (float *)malloc((size_t)n * sizeof(float) + 4);
    if (!h) {
        nf_fail("out of memory");
        return nullptr;
    }
    if (nf_dequantize(t->type, t->data, h, n) < 0) {
        free(h);
        nf_fail("tensor %s: type %u cannot be read as f32", t->name ? t->name : "?", t->type);
        return nullptr;
    }
    float *d = nullptr;
    if (cudaMalloc((void **)&d, (size_t)n * sizeof(float) + 4) != cudaSuccess ||
        cudaMemcpy(d, h, (size_t)n * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess) {
        free(h);
        if (d) cudaFree(d);
        nf_fail("tensor %s: out of device memory", t->name ? t->name : "?");
        return nullptr;
    }
    free(h);
    if (c->n_vecs == c->cap_vecs) {
        int cap = c->cap_vecs ? 2 * c->cap_vecs : 64;
        nf_cuda_vec_entry *nv = (nf_cuda_vec_entry *)realloc(c->vecs, (size_t)cap * sizeof *nv);
        if (!nv) {
            cudaFree(d);
            nf_fail("out of memory");
            return nullptr;
        }
        c->vecs = nv;
        c->cap_vecs = cap;
    }
    c->vecs[c->n_vecs].key = t->data;
    c->vecs[c->n_vecs].val = d;
    c->n_vecs++;
    return d;
}

/* ---- activation memory ---- */
static void *cu_alloc(nf_backend *be, size_t bytes) { return nf_cuda_alloc(nf_cuda_of(be), bytes); }
static void cu_release(nf_backend *be, void *p) { nf_cuda_release(nf_cuda_of(be), p); }
static int cu_to_host(nf_backend *be, void *dst, const void *src, size_t bytes) {
    nf_cuda *c = nf_cuda_of(be);
    NF_CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    NF_CU(cudaStreamSynchronize(c->stream));
    return 0;
}

/* pageable source: the copy has left the host buffer when it returns; later kernels on the stream see it */
static int cu_from_host(nf_backend *be, void *dst, const void *src, size_t bytes) {
    nf_cuda *c = nf_cuda_of(be);
    NF_CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
    return 0;
}

static int cu_embed(nf_backend *be, const int32_t *tokens, int T, float *X) {
    nf_cuda_pdl_forward(T); /* the first op of every forward: its size picks the launch mode */
    nf_cuda *c = nf_cuda_of(be);
    if (T <= 0) return 0;
    /* the last copy has read the staging buffer (a recorded step has none pending: the step before it ended with
     * the logits read back, and waiting is not allowed while recording) */
    if (c->tok_ev_pending) NF_CU(cudaEventSynchronize(c->tok_ev));
    c->tok_ev_pending = 0;
    if ((size_t)T > c->tok_cap) {
        if (c->tok_host) cudaFreeHost(c->tok_host);
        c->tok_host = nullptr;
        size_t cap = c->tok_cap ? c->tok_cap : 256;
        while (cap < (size_t)T) cap *= 2;
        NF_CU(cudaMallocHost((void **)&c->tok_host, cap * sizeof(int32_t)));
        c->tok_cap = cap;
    }
    memcpy(c->tok_host, tokens, (size_t)T * sizeof(int32_t));
    nf_cuda_scratch sc(c);
    int32_t *dtok = sc.get<int32_t>((size_t)T);
    if (!dtok) return nf_fail("cuda embed: out of device memory");
    NF_CU(cudaMemcpyAsync(dtok, c->tok_host, (size_t)T * sizeof(int32_t), cudaMemcpyHostToDevice, c->stream));
    if (!c->capturing) {
        NF_CU(cudaEventRecord(c->tok_ev, c->stream));
        c->tok_ev_pending = 1;
    }
    nf_cuda_mat e = nf_cuda_mat_of(c, &c->m->token_embd);
    return nf_cuda_embed_rows(c, &e, dtok, T, c->m->hp.hc_count, X);
}

static int cu_rmsnorm(nf_backend *be, const nf_tensor *w, const float *x, int T, float *out) {
    nf_cuda *c = nf_cuda_of(be);
    const float *wv = nf_cuda_vec(c, w);
    if (!wv) return -1;
    const int64_t n = w->ne[0];
    return nf_cuda_rmsnorm_rows(c, x, n, T, n, c->m->hp.rms_eps, wv, out, n);
}

/* z[t][i] = mean over streams of X[t][s][i] */
__global__ void stream_mean_kernel(const float *X, int T, int hc, int n, float *z) {
    NF_PDL_ENTER();
    const int64_t total = (int64_t)T * n;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int t = (int)(idx / n), i = (int)(idx % n);
        const float *x = X + (size_t)t * hc * n;
        float s = 0.0f;
        for (int k = 0; k < hc; k++) s = __fadd_rn(s, x[(size_t)k * n + i]);
        z[idx] = __fdiv_rn(s, (float)hc);
    }
}

static int cu_head(nf_backend *be, const float *X, int T, float *logits) {
    nf_cuda *c = nf_cuda_of(be);
    const nf_hparams *hp = &c->m->hp;
    const int n = hp->n_embd, hc = hp->hc_count;
    const float *wn = nf_cuda_vec(c, &c->m->output_norm);
    if (!wn) return -1;
    nf_cuda_scratch sc(c);
    float *z = sc.get<float>((size_t)T * n);
    if (!z) return nf_fail("cuda head: out of device memory");
    int64_t blocks = ((int64_t)T * n + 255) / 256;
    nf_launch(stream_mean_kernel, (unsigned)(blocks > 65535 ? 65535 : blocks), 256, 0, c->stream, X, T, hc, n, z);
    NF_LAUNCHED();
    if (nf_cuda_rmsnorm_rows(c, z, n, T, n, hp->rms_eps, wn, z, n) < 0) return -1;
    nf_cuda_mat w = nf_cuda_mat_of(c, &c->m->output);
    return nf_cuda_matmul(c, &w, z, T, n, logits, hp->n_vocab);
}

extern "C" unsigned long long nf_cuda_combines_folded(nf_backend *be) { return ((nf_cuda *)be->impl)->combines_folded; }
extern "C" unsigned long long nf_cuda_hc_tails(nf_backend *be) { return ((nf_cuda *)be->impl)->hc_tails; }
extern "C" int nf_cuda_flush(nf_backend *be) { return nf_cuda_combine_flush(nf_cuda_of_keep(be)); }

static void cu_destroy(nf_backend *be) {
    if (!be) return;
    nf_cuda *c = (nf_cuda *)be->impl;
    if (c) {
        nf_cuda_use_device(c->device);
        if (c->stream) cudaStreamSynchronize(c->stream);
        if (c->pending.y) nf_cuda_combine_done(c);
        nf_cuda_graph_free(c);
        for (int i = 0; i < c->n_vecs; i++) cudaFree(c->vecs[i].val);
        free(c->vecs);
        if (c->dweights) cudaFree(c->dweights);
        if (c->router_done) cudaFree(c->router_done);
        if (c->hc_done) cudaFree(c->hc_done);
        free(c->segs);
        if (c->tok_host) cudaFreeHost(c->tok_host);
        if (c->tok_ev) cudaEventDestroy(c->tok_ev);
        if (c->peer_ev) cudaEventDestroy(c->peer_ev);
        if (c->stream) cudaStreamDestroy(c->stream);
        free(c);
    }
    free(be);
}

static int check_types(const nf_model *m) {
    const size_t per = sizeof(nf_layer) / sizeof(nf_tensor);
    static_assert(sizeof(nf_layer) % sizeof(nf_tensor) == 0, "nf_layer holds only nf_tensor fields");
    for (int l = 0; l < m->hp.n_layer; l++) {
        const nf_tensor *ts = (const nf_tensor *)&m->layers[l];
        for (size_t i = 0; i < per; i++)
            if (ts[i].data && !nf_cuda_mat_supported(ts[i].type))
                return nf_fail("cuda backend: tensor %s has type %s, which has no GPU kernel", ts[i].name ? ts[i].name : "?",
                               nf_type_get(ts[i].type)->name ? nf_type_get(ts[i].type)->name : "?");
    }
    const nf_tensor *g[] = {&m->token_embd, &m->output_norm, &m->output};
    for (int i = 0; i < 3; i++)
        if (g[i]->data && !nf_cuda_mat_supported(g[i]->type))
            return nf_fail("cuda backend: tensor %s type unsupported", g[i]->name ? g[i]->name : "?");
    return 0;
}

int nf_cuda_check_fits(nf_cuda *c, size_t bytes) {
    /* activations, scratch, cuBLAS-free kernels' temporaries: the sequence state is the caller's to size */
    const size_t margin = (size_t)1 << 30;
    size_t free_b = 0, total_b = 0;
    NF_CU(cudaMemGetInfo(&free_b, &total_b));
    if (bytes + margin > free_b)
        return nf_fail("cuda backend: the weights need %.2f GB of device memory (+%.2f GB working margin) but device "
                       "%d has %.2f GB free of %.2f GB", (double)bytes / 1e9, (double)margin / 1e9, c->device,
                       (double)free_b / 1e9, (double)total_b / 1e9);
    return 0;
}

static int upload(nf_cuda *c) {
    if (c->m->synth) return nf_cuda_synth_upload(c);
    const gguf_file *f = c->m->file;
    if (!f) return nf_fail("cuda backend: the model has no tensor data");
    const uint8_t *lo = nullptr, *hi = nullptr;
    for (int64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        const uint8_t *p = (const uint8_t *)t->data;
        if (!p) continue;
        if (!lo || p < lo) lo = p;
        if (!hi || p + t->size > hi) hi = p + t->size;
    }
    if (!lo) return nf_fail("cuda backend: the model has no tensor data");
    c->hbase = lo;
    c->hsize = (size_t)(hi - lo);
    if (nf_cuda_check_fits(c, c->hsize) < 0) return -1;
    NF_CU(cudaMalloc((void **)&c->dweights, c->hsize));
    /* in pieces, so a mapped multi-GB file streams through the staging path */
    const size_t piece = (size_t)1 << 28;
    for (size_t off = 0; off < c->hsize; off += piece) {
        size_t n = c->hsize - off < piece ? c->hsize - off : piece;
        NF_CU(cudaMemcpy(c->dweights + off, lo + off, n, cudaMemcpyHostToDevice));
    }
    /* a pageable copy can return before its DMA completes; kernels run on a non-blocking stream */
    NF_CU(cudaDeviceSynchronize());
    return 0;
}

struct host_run {
    const uint8_t *lo, *hi;
};
static int run_cmp(const void *a, const void *b) {
    const uint8_t *x = ((const host_run *)a)->lo, *y = ((const host_run *)b)->lo;
    return x < y ? -1 : x > y;
}

/* Only the tensors of layers [l0, l1) (+ embedding / head at the ends): their host byte runs, sorted and merged
 * where they touch (a GGUF, or a synthetic model's region, stores a layer's tensors together, so a stage is a
 * handful of runs), packed into one device allocation; nf_cuda_dptr maps a tensor through the runs. A synthetic
 * model's tensors are made in place by cuda_synth.cu. */
static int upload_layers(nf_cuda *c, int l0, int l1) {
    const nf_model *m = c->m;
    const size_t per = sizeof(nf_layer) / sizeof(nf_tensor);
    const size_t cap = (size_t)(l1 - l0) * per + 3;
    host_run *r = (host_run *)malloc(cap * sizeof *r);
    if (!r) return nf_fail("cuda backend: out of memory");
    size_t n = 0;
    auto add = [&](const nf_tensor *t) {
        const uint64_t b = nf_tensor_bytes(t);
        if (!t->data || !b) return;
        r[n].lo = (const uint8_t *)t->data;
        r[n].hi = r[n].lo + b;
        n++;
    };
    for (int l = l0; l < l1; l++)
        for (size_t i = 0; i < per; i++) add((const nf_tensor *)&m->layers[l] + i);
    if (l0 == 0) add(&m->token_embd);
    if (l1 == m->hp.n_layer) {
        add(&m->output_norm);
        add(&m->output);
    }
    if (!n) {
        free(r);
        return nf_fail("cuda backend: layers [%d, %d) have no tensor data", l0, l1);
    }
    qsort(r, n, sizeof *r, run_cmp);
    size_t k = 0; /* merged runs: a gap of alignment padding between neighbours is copied along */
    for (size_t i = 1; i < n; i++) {
        if (r[i].lo <= r[k].hi + 256) {
            if (r[i].hi > r[k].hi) r[k].hi = r[i].hi;
        } else {
            r[++k] = r[i];
        }
    }
    const int n_runs = (int)k + 1;
    c->segs = (nf_cuda::nf_cuda_seg *)calloc((size_t)n_runs, sizeof *c->segs);
    if (!c->segs) {
        free(r);
        return nf_fail("cuda backend: out of memory");
    }
    size_t total = 0;
    for (int i = 0; i < n_runs; i++) {
        c->segs[i].hlo = r[i].lo;
        c->segs[i].hhi = r[i].hi;
        c->segs[i].doff = total;
        total += ((size_t)(r[i].hi - r[i].lo) + 255) & ~(size_t)255; /* each run 256-byte aligned, as cudaMalloc */
    }
    free(r);
    c->n_segs = n_runs;
    c->hsize = total;
    size_t pools = 0; /* a synthetic model's block pools live on the device while its tensors are made */
    for (int i = 0; m->synth && i < m->synth->n_pools; i++)
        pools += (size_t)m->synth->pools[i].n_blocks * m->synth->pools[i].block_bytes;
    if (nf_cuda_check_fits(c, total + pools) < 0) return -1;
    NF_CU(cudaMalloc((void **)&c->dweights, total));
    if (m->synth) return nf_cuda_synth_upload_segs(c); /* virtual tensors have no host bytes to copy */
    const size_t piece = (size_t)1 << 28;
    for (int i = 0; i < n_runs; i++) {
        const size_t len = (size_t)(c->segs[i].hhi - c->segs[i].hlo);
        for (size_t off = 0; off < len; off += piece) {
            const size_t b = len - off < piece ? len - off : piece;
            NF_CU(cudaMemcpy(c->dweights + c->segs[i].doff + off, c->segs[i].hlo + off, b, cudaMemcpyHostToDevice));
        }
    }
    NF_CU(cudaDeviceSynchronize());
    return 0;
}

extern "C" int nf_cuda_tensor_to_host(nf_backend *be, const nf_tensor *t, void *dst, size_t bytes) {
    nf_cuda *c = nf_cuda_of(be);
    const uint8_t *d = nf_cuda_dptr(c, t);
    if (!d) return nf_fail("tensor %s is absent", t->name ? t->name : "?");
    if (d + bytes > c->dweights + c->hsize) return nf_fail("tensor %s: %zu bytes run past the weights", t->name, bytes);
    if (bytes > nf_tensor_bytes(t) && c->n_segs) return nf_fail("tensor %s: %zu bytes run past it", t->name, bytes);
    NF_CU(cudaMemcpy(dst, d, bytes, cudaMemcpyDeviceToHost));
    return 0;
}

static nf_backend *create(const nf_model *m, int device, int l0, int l1);

extern "C" int nf_cuda_device_count(void) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

extern "C" nf_backend *nf_backend_cuda_create(const nf_model *m, int device) { return create(m, device, 0, 0); }

extern "C" nf_backend *nf_backend_cuda_create_layers(const nf_model *m, int device, int layer_begin, int layer_end) {
    if (layer_begin < 0 || layer_end > m->hp.n_layer || layer_begin >= layer_end) {
        nf_fail("cuda backend: layer range [%d, %d) is not a non-empty part of the model's %d layers", layer_begin,
                layer_end, m->hp.n_layer);
        return nullptr;
    }
    return create(m, device, layer_begin, layer_end);
}

/* l0 == l1 == 0: the whole model */
static nf_backend *create(const nf_model *m, int device, int l0, int l1) {
    const nf_hparams *hp = &m->hp;
    if (hp->hc_count < 1 || hp->hc_count > 16) {
        nf_fail("cuda backend: hc_count %d unsupported", hp->hc_count);
        return nullptr;
    }
    if (check_types(m) < 0) return nullptr;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        nf_fail("cuda backend: no CUDA device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return nullptr;
    }
    if (device < 0) device = 0;
    if (device >= count) {
        nf_fail("cuda backend: device %d does not exist (%d found)", device, count);
        return nullptr;
    }
    nf_backend *be = (nf_backend *)calloc(1, sizeof *be);
    nf_cuda *c = (nf_cuda *)calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        nf_fail("cuda backend: out of memory");
        return nullptr;
    }
    c->m = m;
    c->device = device;
    be->impl = c;
    be->model = m;
    be->name = "cuda";
    /* 16384 prefill tokens per forward: more tokens per routed expert make the MoE GEMMs larger (at 65536, 7.8%
     * faster than 4096 on the H100 in alternating runs, 8192 5.2%; docs/benchmarks.md); the memory pool's peak is
     * 8.4 GB at this chunk (1.2 GB at 2048), which a 1M-token state beside glm53:q2 leaves room for on an H200 */
    be->prefill_chunk = 16384;
    be->destroy = cu_destroy;
    cudaMemPool_t pool;
    uint64_t thr = UINT64_MAX;
    if (nf_cuda_set_device(device) < 0) {
        cu_destroy(be);
        return nullptr;
    }
    if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&c->tok_ev, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&c->peer_ev, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaDeviceGetDefaultMemPool(&pool, device)) != cudaSuccess ||
        (e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &thr)) != cudaSuccess ||
        (e = cudaMalloc((void **)&c->router_done, sizeof *c->router_done)) != cudaSuccess ||
        (e = cudaMemset(c->router_done, 0, sizeof *c->router_done)) != cudaSuccess ||
        (e = cudaMalloc((void **)&c->hc_done, NF_CUDA_GEMV_MAX_VECTORS * sizeof *c->hc_done)) != cudaSuccess ||
        (e = cudaMemset(c->hc_done, 0, NF_CUDA_GEMV_MAX_VECTORS * sizeof *c->hc_done)) != cudaSuccess) {
        nf_fail("cuda backend: %s", cudaGetErrorString(e));
        cu_destroy(be);
        return nullptr;
    }
    be->layer_begin = l0;
    be->layer_end = l1;
    /* NF_CUDA_COMBINE_FOLD=on: decode's MoE combine done by the next site's hc projection (cuda_moe.cu: finish).
     * Read per backend, so that a test can compare two backends; opt-in until measured */
    const char *cf = getenv("NF_CUDA_COMBINE_FOLD");
    c->combine_fold = cf && !strcmp(cf, "on");
    /* NF_CUDA_HC_TAIL=on: hc_pre's mixing in the split projection's last CTA (cuda_hc.cu); opt-in until measured */
    const char *ht = getenv("NF_CUDA_HC_TAIL");
    c->hc_tail = ht && !strcmp(ht, "on");
    if (nf_cuda_formats_init() < 0 || (l1 ? upload_layers(c, l0, l1) : upload(c)) < 0) {
        cu_destroy(be);
        return nullptr;
    }
    be->alloc = cu_alloc;
    be->release = cu_release;
    be->to_host = cu_to_host;
    be->from_host = cu_from_host;
    be->from_peer = nf_cuda_from_peer;
    be->embed = cu_embed;
    be->hc_pre = nf_cuda_hc_pre;
    be->hc_pre_norm = nf_cuda_hc_pre_norm;
    be->hc_post = nf_cuda_hc_post;
    be->hc_post_pre_norm = nf_cuda_hc_post_pre_norm;
    be->rmsnorm = cu_rmsnorm;
    be->kda_block = nf_cuda_kda_block;
    be->mla_project = nf_cuda_mla_project;
    be->indexer_select = nf_cuda_indexer_select;
    be->mla_attend = nf_cuda_mla_attend;
    be->dense_mlp = nf_cuda_dense_mlp;
    be->moe_block = nf_cuda_moe_block;
    be->head = cu_head;
    be->state_create = nf_cuda_state_create;
    /* off by default: recording and updating ~1400 nodes per step cost the host more than launching them
     * (H200, glm53:q2 at 2048: direct launches 18% faster than per-step graphs, nf-ab, docs/benchmarks.md) */
    const char *g = getenv("NF_CUDA_GRAPH");
    if (g && (!strcmp(g, "on") || !strcmp(g, "1"))) {
        be->graph_begin = nf_cuda_graph_begin;
        be->graph_end = nf_cuda_graph_end;
        be->graph_abort = nf_cuda_graph_abort;
    } else {
        /* graphs keep the arena's addresses between recordings; without them direct launches may use it */
        const char *a = getenv("NF_CUDA_STEP_ARENA");
        c->direct_arena = !(a && !strcmp(a, "off"));
    }
    return be;
}
