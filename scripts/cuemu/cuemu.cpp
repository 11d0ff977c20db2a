/* cuemu.cpp — the host side of the CUDA emulation (scripts/cuemu/build.sh): runtime calls as malloc/memcpy, and the
 * fiber scheduler that runs a grid block by block with one ucontext per CUDA thread. */
#include "cuda_runtime.h"
#include <cstring>
#include <map>
#include <mutex>
cuemu_block *cuemu_B;
/* devices: CUEMU_DEVICES of them (default 1); streams and events remember the device current when they were made,
 * device allocations theirs (-1: pinned host memory, reachable from every device) */
static thread_local int cur_dev = 0;
struct cuemu_stream { int dev; };
static std::map<const char *, std::pair<size_t, int>> allocs; /* start -> (bytes, device) */
static std::mutex allocs_mu; /* host threads may drive several devices at once */
static int n_devices() {
    static int n = 0;
    if (!n) {
        const char *e = getenv("CUEMU_DEVICES");
        n = e && atoi(e) > 0 ? atoi(e) : 1;
    }
    return n;
}
static int stream_dev(cudaStream_t s) { return s ? ((cuemu_stream *)s)->dev : cur_dev; }
static int owner(const void *p) { /* the device of the allocation holding p; -2: none */
    std::lock_guard<std::mutex> g(allocs_mu);
    auto it = allocs.upper_bound((const char *)p);
    if (it == allocs.begin()) return -2;
    --it;
    return (const char *)p < it->first + it->second.first + 1 ? it->second.second : -2;
}
static void fail(const char *m, int a, int b) {
    fprintf(stderr, "cuemu: %s (device %d, device %d)\n", m, a, b);
    abort();
}
static void track(void *p, size_t n, int dev) {
    std::lock_guard<std::mutex> g(allocs_mu);
    if (p) allocs[(const char *)p] = {n, dev};
}
void cuemu_check_launch(void *s) {
    if (stream_dev(s) != cur_dev) fail("kernel launched on a stream of another device than the current one", stream_dev(s), cur_dev);
}
void cuemu_check_ptr(const void *p, const char *what) {
    const int d = owner(p);
    if (d >= 0 && d != cur_dev) {
        fprintf(stderr, "cuemu: %s %p is memory of device %d, used on device %d\n", what, p, d, cur_dev);
        abort();
    }
}
static const size_t STACK = 128 * 1024;
static std::vector<char *> stacks;
extern "C" {
const char *cudaGetErrorString(cudaError_t e) { return e ? "cuemu error" : "no error"; }
static cudaError_t dmalloc(void **p, size_t n, int dev) { *p = malloc(n ? n : 1); if (!*p) return 2; memset(*p, 0xFF, n); track(*p, n, dev); return 0; }
cudaError_t cudaMalloc(void **p, size_t n) { return dmalloc(p, n, cur_dev); }
cudaError_t cudaFree(void *p) {
    {
        std::lock_guard<std::mutex> g(allocs_mu);
        allocs.erase((const char *)p);
    }
    free(p);
    return 0;
}
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s) { return dmalloc(p, n, stream_dev(s)); }
cudaError_t cudaFreeAsync(void *p, cudaStream_t) { return cudaFree(p); }
cudaError_t cudaMallocHost(void **p, size_t n) { return dmalloc(p, n, -1); }
cudaError_t cudaFreeHost(void *p) { return cudaFree(p); }
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) { memmove(d, s, n); return 0; }
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t) {
    /* a device-to-device copy between two devices is a peer copy (cudaMemcpyPeerAsync, or cudaMemcpyDefault) */
    if (k == cudaMemcpyDeviceToDevice && n && owner(d) >= 0 && owner(s) >= 0 && owner(d) != owner(s))
        fail("cudaMemcpyDeviceToDevice between devices", owner(s), owner(d));
    memmove(d, s, n);
    return 0;
}
cudaError_t cudaMemcpyPeerAsync(void *d, int dd, const void *s, int sd, size_t n, cudaStream_t) {
    if (n && owner(d) >= 0 && owner(d) != dd) fail("cudaMemcpyPeerAsync: destination not on its named device", owner(d), dd);
    if (n && owner(s) >= 0 && owner(s) != sd) fail("cudaMemcpyPeerAsync: source not on its named device", owner(s), sd);
    memmove(d, s, n);
    return 0;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return 0; }
cudaError_t cudaDeviceCanAccessPeer(int *can, int, int) { *can = 1; return 0; }
cudaError_t cudaDeviceEnablePeerAccess(int, unsigned) { return 0; }
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p) {
    memset(a, 0, sizeof *a);
    a->device = owner(p) >= 0 ? owner(p) : cur_dev;
    return 0;
}
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t s) {
    if (n && owner(d) >= 0 && owner(d) != stream_dev(s)) fail("cudaMemsetAsync: memory of another device than the stream's", owner(d), stream_dev(s));
    memset(d, v, n);
    return 0;
}
cudaError_t cudaMemset(void *d, int v, size_t n) { memset(d, v, n); return 0; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return 0; }
cudaError_t cudaDeviceSynchronize(void) { return 0; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) { *s = new cuemu_stream{cur_dev}; return 0; }
cudaError_t cudaStreamDestroy(cudaStream_t s) { delete (cuemu_stream *)s; return 0; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { *e = new cuemu_stream{cur_dev}; return 0; }
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e) { delete (cuemu_stream *)e; return 0; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    if (((cuemu_stream *)e)->dev != stream_dev(s)) fail("cudaEventRecord: event and stream of different devices", ((cuemu_stream *)e)->dev, stream_dev(s));
    return 0;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return 0; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t, cudaEvent_t) { *ms = 1; return 0; }
cudaError_t cudaGetDeviceCount(int *n) { *n = n_devices(); return 0; }
cudaError_t cudaSetDevice(int d) { if (d < 0 || d >= n_devices()) return 101; cur_dev = d; return 0; }
cudaError_t cudaGetDevice(int *d) { *d = cur_dev; return 0; }
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *p, int) { *p = (void *)1; return 0; }
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, int, void *) { return 0; }
cudaError_t cudaGetLastError(void) { return 0; }
cudaError_t cudaDeviceGetAttribute(int *v, int attr, int) {
    *v = attr == cudaDevAttrMultiProcessorCount ? 4 : 227 * 1024;
    return 0;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamBeginCapture(cudaStream_t, int) { return 0; }
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t *g) { *g = (void *)1; return 0; }
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t, unsigned long long) { *e = (void *)1; return 0; }
cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t) { return 0; }
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t) { return 0; }
cudaError_t cudaGraphDestroy(cudaGraph_t) { return 0; }
/* kernels run when launched here, so a "recording" already ran: update always succeeds, launching does nothing */
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t, cudaGraph_t, cudaGraphExecUpdateResultInfo *) { return 0; }
cudaError_t cudaGraphGetNodes(cudaGraph_t, cudaGraphNode_t *, size_t *count) { *count = 1; return 0; }
/* an emulated device of 16 GiB, all free: big enough for the small models, too small for the glm53 sizes */
cudaError_t cudaMemGetInfo(size_t *f, size_t *t) { *f = *t = (size_t)16 << 30; return 0; }
}
static void trampoline() {
    (*cuemu_B->body)();
    /* copies still in flight at the thread's end land (uncommitted ones too) */
    auto &q = cuemu_B->cp[cuemu_B->cur];
    q.groups.push_back(std::move(q.open));
    q.open.clear();
    for (auto &g : q.groups)
        for (auto &c : g) memcpy(c.dst, c.bytes.data(), c.bytes.size());
    q.groups.clear();
    cuemu_B->f[cuemu_B->cur].done = 1;
    swapcontext(&cuemu_B->f[cuemu_B->cur].ctx, &cuemu_B->sched);
}
void cuemu_wait(int kind) {
    auto &f = cuemu_B->f[cuemu_B->cur];
    f.wait = kind;
    swapcontext(&f.ctx, &cuemu_B->sched);
}
void cuemu_run_grid(dim3 g, dim3 b, size_t smem, const std::function<void()> &body) {
    cuemu_block B;
    cuemu_block *saved = cuemu_B;
    cuemu_B = &B;
    const unsigned nt = b.x * b.y * b.z;
    while (stacks.size() < nt) stacks.push_back((char *)malloc(STACK));
    B.f.resize(nt);
    B.bdim = b;
    B.gdim = g;
    B.smem.assign(smem + 16, 0);
    B.vote.assign(nt, 0);
    B.cp.assign(nt, cuemu_cp_queue());
    B.body = &body;
    for (unsigned bz = 0; bz < g.z; bz++)
        for (unsigned by = 0; by < g.y; by++)
            for (unsigned bx = 0; bx < g.x; bx++) {
                B.bidx = cuemu_u3{bx, by, bz};
                for (unsigned i = 0; i < nt; i++) {
                    auto &f = B.f[i];
                    f.tx = i % b.x;
                    f.ty = i / b.x;
                    f.done = 0;
                    f.wait = 0;
                    getcontext(&f.ctx);
                    f.ctx.uc_stack.ss_sp = stacks[i];
                    f.ctx.uc_stack.ss_size = STACK;
                    f.ctx.uc_link = nullptr;
                    makecontext(&f.ctx, trampoline, 0);
                }
                for (;;) {
                    for (unsigned i = 0; i < nt; i++) {
                        while (!B.f[i].done && !B.f[i].wait) {
                            B.cur = (int)i;
                            swapcontext(&B.sched, &B.f[i].ctx);
                        }
                    }
                    unsigned live = 0, at_block = 0;
                    for (unsigned i = 0; i < nt; i++)
                        if (!B.f[i].done) { live++; at_block += B.f[i].wait == 1; }
                    if (!live) break;
                    int released = 0;
                    /* warp barriers: every live fiber of the warp waits at a warp barrier */
                    for (unsigned w = 0; w * 32 < nt; w++) {
                        unsigned l = 0, at = 0;
                        for (unsigned i = w * 32; i < nt && i < w * 32 + 32; i++)
                            if (!B.f[i].done) { l++; at += B.f[i].wait == 2; }
                        if (l && at == l) {
                            for (unsigned i = w * 32; i < nt && i < w * 32 + 32; i++) if (!B.f[i].done) B.f[i].wait = 0;
                            released = 1;
                        }
                    }
                    if (!released && at_block == live) {
                        for (unsigned i = 0; i < nt; i++) if (!B.f[i].done) B.f[i].wait = 0;
                        released = 1;
                    }
                    if (!released) { fprintf(stderr, "cuemu: deadlock (live %u, at block barrier %u)\n", live, at_block); abort(); }
                }
            }
    cuemu_B = saved;
}
