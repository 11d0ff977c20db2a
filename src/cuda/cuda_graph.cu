/* cuda_graph.cu — a decode step as one CUDA graph launch (the backend's graph_begin / graph_end / graph_abort,
 * backend.h).
 *
 * Why: a decode step of the full-size model is ~1700 small kernel launches; launched one by one, the host pays a
 * few microseconds per launch and the GPU a gap between kernels. Recording the step with stream capture and
 * launching the recording lets the GPU run the kernels back to back.
 *
 * How: graph_begin resets the step arena and starts capturing the backend's stream; the blocks then enqueue their
 * work as usual, with their activation and scratch memory taken from the arena (cuda_internal.h: a bump allocator,
 * so a step allocates nothing from the driver and every step gets the same addresses for the same sequence of
 * allocations). graph_end ends the capture and, instead of instantiating the recording every step (costly),
 * updates a cached executable graph of the same topology in place (cudaGraphExecUpdate: only kernel arguments
 * such as the position and grid sizes differ between steps) and launches it. Steps differ in topology only at a
 * few points (a pool completing every kpool tokens, the dense/sparse regime of attention), so a handful of cached
 * executables cover them; a miss instantiates a new one and evicts the least recently used.
 *
 * Without graphs the same arena serves direct launches (nf_cuda_alloc / nf_cuda_release): small allocations are
 * bump-allocated while any is live and the arena resets when the last is released (the end of every forward), so
 * a decode step enqueues no stream-ordered allocation or free between its kernels.
 *
 * Failure: a capture that could not be completed (the arena was too small, or some call is not allowed while
 * capturing, e.g. a lazy one-time conversion of a tensor) launched nothing and left the state untouched (the
 * blocks change no host-side state); graph_end then returns 1, the forward redoes the step with direct launches,
 * and the arena grows to what the step needed. NF_CUDA_GRAPH=on enables graphs (read when the backend is made); they are
 * off by default because the per-step recording and update cost the host more than the launches they replace
 * (measured on the H200: direct launches 18% faster at glm53:q2 decode). A static graph (kernels reading the
 * position from device memory, replayed without recording) is the next step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_internal.h"

enum { CACHE_SLOTS = 6 };

struct nf_cuda_graph_cache {
    cudaGraphExec_t exec[CACHE_SLOTS];
    size_t nodes[CACHE_SLOTS];            /* node count of the recording each executable was made from */
    unsigned long long used[CACHE_SLOTS]; /* step counter at last use (LRU) */
    unsigned long long steps;
    unsigned long long launched, instantiated, fallbacks;
};

void *nf_cuda_arena_get(nf_cuda *c, size_t bytes) {
    const size_t at = (c->arena_used + 255) & ~(size_t)255;
    c->arena_need = at + bytes > c->arena_need ? at + bytes : c->arena_need;
    if (!c->arena || at + bytes > c->arena_cap) return nullptr;
    c->arena_used = at + bytes;
    return c->arena + at;
}

static int grow_arena(nf_cuda *c, size_t need);

/* direct launches: the arena takes allocations up to this size while the arena (at most NF_CUDA_ARENA_MAX bytes)
 * has room; larger ones (prefill activations) go to the stream-ordered pool and do not grow it */
#define NF_CUDA_ARENA_ITEM_MAX ((size_t)8 << 20)
#define NF_CUDA_ARENA_MAX ((size_t)64 << 20)

void *nf_cuda_alloc(nf_cuda *c, size_t bytes) {
    if (!bytes) bytes = 1;
    if (c->capturing) return nf_cuda_arena_get(c, bytes);
    if (c->direct_arena && bytes <= NF_CUDA_ARENA_ITEM_MAX) {
        const size_t want = c->arena_need < NF_CUDA_ARENA_MAX ? c->arena_need : NF_CUDA_ARENA_MAX;
        if (!c->arena_live && want > c->arena_cap && grow_arena(c, want) < 0) (void)cudaGetLastError();
        void *p = nf_cuda_arena_get(c, bytes);
        if (p) {
            c->arena_live++;
            c->arena_hits++;
            return p;
        }
    }
    if (!c->capturing) c->arena_misses++;
    void *p = nullptr;
    if (cudaMallocAsync(&p, bytes, c->stream) != cudaSuccess) return nullptr;
    return p;
}

void nf_cuda_release(nf_cuda *c, void *p) {
    if (!p) return;
    if (!nf_cuda_in_arena(c, p)) {
        cudaFreeAsync(p, c->stream);
        return;
    }
    /* a graph's arena resets at the next recording; the direct arena when its last allocation is given back (its
     * memory is then reused by later work on the same stream, which runs after every earlier use) */
    if (!c->capturing && c->direct_arena && c->arena_live > 0 && --c->arena_live == 0) c->arena_used = 0;
}

static int grow_arena(nf_cuda *c, size_t need) {
    if (need <= c->arena_cap) return 0;
    size_t cap = c->arena_cap ? c->arena_cap : (size_t)16 << 20;
    while (cap < need) cap *= 2;
    if (c->arena) {
        /* the previous step may still read it: its graph ran on the stream */
        NF_CU(cudaStreamSynchronize(c->stream));
        cudaFree(c->arena);
        c->arena = nullptr;
        c->arena_cap = 0;
    }
    NF_CU(cudaMalloc((void **)&c->arena, cap));
    c->arena_cap = cap;
    return 0;
}

int nf_cuda_graph_begin(nf_backend *be) {
    nf_cuda *c = nf_cuda_of(be);
    if (!c->gcache) {
        c->gcache = (nf_cuda_graph_cache *)calloc(1, sizeof *c->gcache);
        if (!c->gcache) return nf_fail("cuda graphs: out of memory");
    }
    const size_t first = (size_t)16 << 20; /* a decode step of the full-size model needs a few MB */
    if (grow_arena(c, c->arena_need > first ? c->arena_need : first) < 0) return -1;
    c->arena_used = 0;
    /* relaxed: the blocks' one-time, non-stream calls (occupancy queries, function attributes) stay allowed */
    NF_CU(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeRelaxed));
    c->capturing = 1;
    return 0;
}

void nf_cuda_graph_abort(nf_backend *be) {
    nf_cuda *c = nf_cuda_of(be);
    if (!c->capturing) return;
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(c->stream, &g);
    if (g) cudaGraphDestroy(g);
    cudaGetLastError(); /* an invalidated capture reports its error here; the stream itself is fine */
    c->capturing = 0;
}

/* The cached executable that takes g's parameters, or a new one; -1 with nf_fail. Only an executable made from a
 * recording with the same node count is offered the update (a cheap topology key: the variants of a step differ
 * in kernels, e.g. a pool completing), so failed updates — which also count as API errors in compute-sanitizer —
 * stay rare; one that still fails is replaced. */
static int exec_for(nf_cuda_graph_cache *gc, cudaGraph_t g) {
    size_t count = 0;
    if (cudaGraphGetNodes(g, nullptr, &count) != cudaSuccess) return nf_fail("cuda graphs: cannot count nodes");
    int slot = -1;
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (gc->exec[i] && gc->nodes[i] == count) {
            cudaGraphExecUpdateResultInfo info;
            if (cudaGraphExecUpdate(gc->exec[i], g, &info) == cudaSuccess) return i;
            cudaGetLastError(); /* a topology mismatch is not an error of the stream */
            slot = i;           /* same key, other topology: replace it */
            break;
        }
    for (int i = 0; slot < 0 && i < CACHE_SLOTS; i++)
        if (!gc->exec[i]) slot = i;
    if (slot < 0) {
        slot = 0;
        for (int i = 1; i < CACHE_SLOTS; i++)
            if (gc->used[i] < gc->used[slot]) slot = i;
    }
    if (gc->exec[slot]) cudaGraphExecDestroy(gc->exec[slot]);
    gc->exec[slot] = nullptr;
    cudaError_t e = cudaGraphInstantiate(&gc->exec[slot], g, 0);
    if (e != cudaSuccess) {
        gc->exec[slot] = nullptr;
        return nf_fail("cuda graphs: instantiate: %s", cudaGetErrorString(e));
    }
    gc->nodes[slot] = count;
    gc->instantiated++;
    return slot;
}

int nf_cuda_graph_end(nf_backend *be) {
    nf_cuda *c = nf_cuda_of(be);
    nf_cuda_graph_cache *gc = c->gcache;
    cudaGraph_t g = nullptr;
    cudaError_t e = cudaStreamEndCapture(c->stream, &g);
    c->capturing = 0;
    if (e != cudaSuccess || !g || c->arena_need > c->arena_cap) {
        /* nothing ran: the forward redoes the step with direct launches; the next capture gets a larger arena */
        if (g) cudaGraphDestroy(g);
        cudaGetLastError();
        gc->fallbacks++;
        return 1;
    }
    int slot = exec_for(gc, g);
    cudaGraphDestroy(g);
    if (slot < 0) return -1;
    gc->used[slot] = ++gc->steps;
    NF_CU(cudaGraphLaunch(gc->exec[slot], c->stream));
    gc->launched++;
    return 0;
}

void nf_cuda_graph_free(nf_cuda *c) {
    nf_cuda_graph_cache *gc = c->gcache;
    if (gc) {
        if (getenv("NF_CUDA_GRAPH_STATS"))
            fprintf(stderr, "cuda graphs: %llu steps launched as graphs, %llu instantiations, %llu fallbacks to direct launches\n",
                    gc->launched, gc->instantiated, gc->fallbacks);
        for (int i = 0; i < CACHE_SLOTS; i++)
            if (gc->exec[i]) cudaGraphExecDestroy(gc->exec[i]);
        free(gc);
        c->gcache = nullptr;
    }
    /* NF_CUDA_ARENA_STATS=1: whether direct launches took their memory from the arena (an A/B whose arm never
     * used it would measure nothing) */
    if (getenv("NF_CUDA_ARENA_STATS"))
        fprintf(stderr, "cuda arena: direct %s, %llu allocations from the arena, %llu from the pool, arena %zu bytes (need %zu)\n",
                c->direct_arena ? "on" : "off", c->arena_hits, c->arena_misses, c->arena_cap, c->arena_need);
    if (c->arena) cudaFree(c->arena);
    c->arena = nullptr;
    c->arena_cap = 0;
}
