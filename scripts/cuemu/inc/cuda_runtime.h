/* cuemu: a tiny CPU emulation of the CUDA runtime subset nextflash's backend uses (testing without a GPU). */
#ifndef CUEMU_RUNTIME_H
#define CUEMU_RUNTIME_H
#define NF_CUEMU 1 /* src/cuda/cuda_launch.h: launches go through cuemu_cfg */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2 };
typedef void *cudaStream_t;
typedef void *cudaEvent_t;
typedef void *cudaMemPool_t;
typedef enum { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault } cudaMemcpyKind;
enum { cudaStreamNonBlocking = 1, cudaEventDisableTiming = 2, cudaMemPoolAttrReleaseThreshold = 4,
       cudaFuncAttributeMaxDynamicSharedMemorySize = 8, cudaFuncAttributePreferredSharedMemoryCarveout = 9,
       cudaSharedmemCarveoutMaxShared = 100 };
/* device attributes and graph capture: the values the emulation reports are placeholders */
enum { cudaDevAttrMultiProcessorCount = 16, cudaDevAttrMaxSharedMemoryPerBlockOptin = 97, cudaStreamCaptureModeGlobal = 0,
       cudaStreamCaptureModeRelaxed = 2 };
typedef void *cudaGraph_t;
typedef void *cudaGraphExec_t;
#ifdef __cplusplus
extern "C" {
#endif
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s);
cudaError_t cudaFreeAsync(void *p, cudaStream_t s);
cudaError_t cudaMallocHost(void **p, size_t n);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t st);
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st);
cudaError_t cudaMemset(void *d, int v, size_t n);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned f);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned f);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDevice(int *d);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *p, int d);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t p, int attr, void *v);
cudaError_t cudaGetLastError(void);
cudaError_t cudaDeviceGetAttribute(int *v, int attr, int dev);
cudaError_t cudaStreamCreate(cudaStream_t *s);
/* graphs: kernels run when they are launched, so a "captured" graph is empty and launching it does nothing */
cudaError_t cudaStreamBeginCapture(cudaStream_t s, int mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e);
cudaError_t cudaGraphDestroy(cudaGraph_t g);
typedef struct { int result; } cudaGraphExecUpdateResultInfo;
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t e, cudaGraph_t g, cudaGraphExecUpdateResultInfo *info);
typedef void *cudaGraphNode_t;
cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t *nodes, size_t *count);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaMemcpyPeerAsync(void *d, int dd, const void *s, int sd, size_t n, cudaStream_t st);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaDeviceCanAccessPeer(int *can, int dev, int peer);
cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags);
typedef struct { int type; int device; void *devicePointer; void *hostPointer; } cudaPointerAttributes;
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p);
#ifdef __cplusplus
}
#include "cuemu_dev.h"
template <class F> cudaError_t cudaFuncSetAttribute(F, int, int) { return 0; }
template <class F> cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, F, int, size_t) { *n = 2; return 0; }
typedef struct { int maxThreadsPerBlock; } cudaFuncAttributes; /* the one field the backend reads */
template <class F> cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, F) { a->maxThreadsPerBlock = 1024; return 0; }
#endif
#endif
