/* cuemu.cpp — the host side of the CUDA emulation (scripts/cuemu/build.sh): runtime calls as malloc/memcpy, and the
 * fiber scheduler that runs a grid block by block with one ucontext per CUDA thread. */
#include "cuda_runtime.h"
#include <cstring>
cuemu_block *cuemu_B;
static const size_t STACK = 128 * 1024;
static std::vector<char *> stacks;
extern "C" {
const char *cudaGetErrorString(cudaError_t e) { return e ? "cuemu error" : "no error"; }
cudaError_t cudaMalloc(void **p, size_t n) { *p = malloc(n); memset(*p, 0xFF, n); return *p ? 0 : 2; }
cudaError_t cudaFree(void *p) { free(p); return 0; }
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t) { return cudaMalloc(p, n); }
cudaError_t cudaFreeAsync(void *p, cudaStream_t) { free(p); return 0; }
cudaError_t cudaMallocHost(void **p, size_t n) { return cudaMalloc(p, n); }
cudaError_t cudaFreeHost(void *p) { free(p); return 0; }
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) { memmove(d, s, n); return 0; }
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind, cudaStream_t) { memmove(d, s, n); return 0; }
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t) { memset(d, v, n); return 0; }
cudaError_t cudaMemset(void *d, int v, size_t n) { memset(d, v, n); return 0; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return 0; }
cudaError_t cudaDeviceSynchronize(void) { return 0; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) { *s = (void *)1; return 0; }
cudaError_t cudaStreamDestroy(cudaStream_t) { return 0; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { *e = (void *)1; return 0; }
cudaError_t cudaEventCreate(cudaEvent_t *e) { *e = (void *)1; return 0; }
cudaError_t cudaEventDestroy(cudaEvent_t) { return 0; }
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return 0; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return 0; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t, cudaEvent_t) { *ms = 1; return 0; }
cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return 0; }
cudaError_t cudaSetDevice(int) { return 0; }
cudaError_t cudaGetDevice(int *d) { *d = 0; return 0; }
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *p, int) { *p = (void *)1; return 0; }
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, int, void *) { return 0; }
cudaError_t cudaGetLastError(void) { return 0; }
cudaError_t cudaDeviceGetAttribute(int *v, int attr, int) {
    *v = attr == cudaDevAttrMultiProcessorCount ? 4 : 227 * 1024;
    return 0;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { *s = (void *)1; return 0; }
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
