/* cuda_peer.cu — the hand-over between two CUDA backends (backend.h's from_peer): a pipeline stage's hidden
 * streams and indexer selection going to the next stage (model/pipeline.h) without passing through the host.
 *
 * Three ways, picked per call by the two backends' devices:
 *  - the same device (two stages sharing a GPU, as the tests run them on one GPU): a device copy on the
 *    receiver's stream;
 *  - two devices, NCCL (the default when libnccl loads): ncclSend on the sender's stream and ncclRecv on the
 *    receiver's, in one group, over a two-rank communicator of that pair of devices made on first use;
 *  - two devices, NF_CUDA_PEER=copy (or NCCL absent): cudaMemcpyPeerAsync on the receiver's stream, with peer
 *    access enabled where the devices allow it (else the driver stages the copy through the host).
 * Ordering (backend.h): the copy runs after the sender's enqueued work and before the receiver's later work, and
 * the sender's later work waits for the copy to have read the source. NCCL gives both by running its halves on the
 * two streams; the copies get them from two events (each backend's peer_ev, recorded on its own stream), so the
 * host never waits.
 *
 * Why NCCL is loaded with dlopen rather than linked: the GPU machines have NCCL only as the Python wheel that
 * PyTorch depends on (not on the loader's path, and no Debian package can be installed there), and a build
 * without NCCL must still run a pipeline. So the handful of entry points used are looked up in libnccl.so.2
 * (NF_NCCL_LIB names another path), declared here with NCCL's documented C signatures. NVLink multicast (NVLS)
 * is kept off (NCCL_NVLS_ENABLE=0 unless already set): it is not needed for point-to-point copies, and on the
 * shared machines a program using it can take GPUs out of service. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_internal.h"

namespace {

/* NCCL's public C API, the entries used (nccl.h: ncclResult_t is an enum with ncclSuccess = 0, ncclInt8 = 0) */
typedef struct nccl_comm *nccl_comm_t;
typedef int nccl_result_t;
enum { NCCL_INT8 = 0 };
struct nccl_api {
    nccl_result_t (*comm_init_all)(nccl_comm_t *comms, int ndev, const int *devlist);
    nccl_result_t (*send)(const void *buf, size_t count, int datatype, int peer, nccl_comm_t comm, cudaStream_t s);
    nccl_result_t (*recv)(void *buf, size_t count, int datatype, int peer, nccl_comm_t comm, cudaStream_t s);
    nccl_result_t (*group_start)(void);
    nccl_result_t (*group_end)(void);
    const char *(*error_string)(nccl_result_t r);
};

pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
int g_mode = -1;   /* 0 copy, 1 nccl (when it loads) */
int g_loaded = -1; /* -1 not tried, 0 failed, 1 loaded */
nccl_api g_nccl;
/* a two-rank communicator per pair of devices a < b: comm[a][b][0] is a's rank (0), [1] is b's (1) */
nccl_comm_t g_comm[NF_CUDA_MAX_DEVICES][NF_CUDA_MAX_DEVICES][2];
unsigned char g_peer_on[NF_CUDA_MAX_DEVICES][NF_CUDA_MAX_DEVICES]; /* peer access tried: [receiver][sender] */

int mode(void) {
    if (g_mode < 0) {
        const char *e = getenv("NF_CUDA_PEER");
        g_mode = !(e && !strcmp(e, "copy"));
    }
    return g_mode;
}

/* 1 when NCCL is usable (loaded once; a failure is said once and the copies are used instead) */
int nccl_load(void) {
    if (g_loaded >= 0) return g_loaded;
    g_loaded = 0;
#ifndef NF_CUEMU
    const char *path = getenv("NF_NCCL_LIB");
    void *h = dlopen(path && *path ? path : "libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "nextflash: NCCL not loaded (%s); pipeline stages on two GPUs hand over with peer copies "
                        "(NF_NCCL_LIB=path/libnccl.so.2 to name it)\n", dlerror());
        return 0;
    }
    g_nccl.comm_init_all = (nccl_result_t(*)(nccl_comm_t *, int, const int *))dlsym(h, "ncclCommInitAll");
    g_nccl.send = (nccl_result_t(*)(const void *, size_t, int, int, nccl_comm_t, cudaStream_t))dlsym(h, "ncclSend");
    g_nccl.recv = (nccl_result_t(*)(void *, size_t, int, int, nccl_comm_t, cudaStream_t))dlsym(h, "ncclRecv");
    g_nccl.group_start = (nccl_result_t(*)(void))dlsym(h, "ncclGroupStart");
    g_nccl.group_end = (nccl_result_t(*)(void))dlsym(h, "ncclGroupEnd");
    g_nccl.error_string = (const char *(*)(nccl_result_t))dlsym(h, "ncclGetErrorString");
    if (!g_nccl.comm_init_all || !g_nccl.send || !g_nccl.recv || !g_nccl.group_start || !g_nccl.group_end ||
        !g_nccl.error_string) {
        fprintf(stderr, "nextflash: %s lacks ncclSend/ncclRecv (NCCL before 2.7?); using peer copies\n",
                path && *path ? path : "libnccl.so.2");
        dlclose(h);
        return 0;
    }
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    g_loaded = 1;
#endif
    return g_loaded;
}

/* the communicator of devices a < b, made on first use (all ranks of it at once, from this thread) */
int pair_comm(int a, int b, nccl_comm_t *ca, nccl_comm_t *cb) {
    if (!g_comm[a][b][0]) {
        const int devs[2] = {a, b};
        nccl_comm_t c[2] = {nullptr, nullptr};
        const nccl_result_t r = g_nccl.comm_init_all(c, 2, devs);
        nf_cuda_cur_device = -1; /* NCCL's initialisation changes the current device behind the cache */
        if (r != 0) return nf_fail("cuda: NCCL communicator of devices %d and %d: %s", a, b, g_nccl.error_string(r));
        g_comm[a][b][0] = c[0];
        g_comm[a][b][1] = c[1];
    }
    *ca = g_comm[a][b][0];
    *cb = g_comm[a][b][1];
    return 0;
}

int nccl_copy(nf_cuda *dst, void *d, nf_cuda *src, const void *s, size_t bytes) {
    const int a = src->device < dst->device ? src->device : dst->device;
    const int b = src->device < dst->device ? dst->device : src->device;
    nccl_comm_t ca, cb;
    if (pair_comm(a, b, &ca, &cb) < 0) return -1;
    nccl_comm_t cs = src->device == a ? ca : cb, cd = dst->device == a ? ca : cb;
    const int rank_dst = dst->device == a ? 0 : 1, rank_src = 1 - rank_dst;
    nccl_result_t r = g_nccl.group_start();
    if (r == 0) {
        const nccl_result_t r1 = g_nccl.send(s, bytes, NCCL_INT8, rank_dst, cs, src->stream);
        const nccl_result_t r2 = g_nccl.recv(d, bytes, NCCL_INT8, rank_src, cd, dst->stream);
        r = g_nccl.group_end();
        if (r == 0) r = r1 ? r1 : r2;
    }
    nf_cuda_cur_device = -1;
    if (r != 0) return nf_fail("cuda: NCCL send/recv of %zu bytes from device %d to %d: %s", bytes, src->device,
                               dst->device, g_nccl.error_string(r));
    return 0;
}

/* the receiver's copy ordered after the sender's work, the sender's later work after the copy */
int event_copy(nf_cuda *dst, void *d, nf_cuda *src, const void *s, size_t bytes) {
    nf_cuda_use_device(src->device);
    NF_CU(cudaEventRecord(src->peer_ev, src->stream));
    nf_cuda_use_device(dst->device);
    NF_CU(cudaStreamWaitEvent(dst->stream, src->peer_ev, 0));
    if (src->device == dst->device) {
        NF_CU(cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToDevice, dst->stream));
    } else {
        unsigned char *on = &g_peer_on[dst->device][src->device];
        if (!*on) { /* direct copies over NVLink / PCIe instead of through the host, where the devices allow it */
            int can = 0;
            if (cudaDeviceCanAccessPeer(&can, dst->device, src->device) == cudaSuccess && can &&
                cudaDeviceEnablePeerAccess(src->device, 0) != cudaSuccess)
                (void)cudaGetLastError(); /* already enabled, or not possible: the copy works either way */
            *on = 1;
        }
        NF_CU(cudaMemcpyPeerAsync(d, dst->device, s, src->device, bytes, dst->stream));
    }
    NF_CU(cudaEventRecord(dst->peer_ev, dst->stream));
    nf_cuda_use_device(src->device);
    NF_CU(cudaStreamWaitEvent(src->stream, dst->peer_ev, 0));
    return 0;
}

} // namespace

int nf_cuda_from_peer(nf_backend *be, void *dst, nf_backend *src_be, const void *src, size_t bytes) {
    if (src_be->from_peer != be->from_peer)
        return nf_fail("cuda hand-over: the source backend (%s) is not a CUDA backend", src_be->name);
    /* the source's deferred work first (a pending MoE combine may be what src holds): its device, then ours */
    nf_cuda *s = nf_cuda_of(src_be), *d = nf_cuda_of(be);
    if (!bytes) return 0;
    if (d->device >= NF_CUDA_MAX_DEVICES || s->device >= NF_CUDA_MAX_DEVICES)
        return nf_fail("cuda hand-over: device %d (at most %d devices)", d->device > s->device ? d->device : s->device,
                       NF_CUDA_MAX_DEVICES);
    if (d->capturing || s->capturing) return nf_fail("cuda hand-over: not while recording a graph");
    int rc;
    pthread_mutex_lock(&g_mu);
    if (d->device != s->device && mode() && nccl_load()) rc = nccl_copy(d, dst, s, src, bytes);
    else rc = event_copy(d, dst, s, src, bytes);
    pthread_mutex_unlock(&g_mu);
    nf_cuda_use_device(d->device);
    return rc;
}
