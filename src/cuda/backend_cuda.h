/* backend_cuda.h — the CUDA backend (Hopper, sm_90a): the nf_backend block table of model/backend.h run on
 * one GPU, with the weights uploaded once at creation (in their stored formats) and the sequence state in
 * device memory (nf_backend_state_create gives a hooked nf_state whose arrays are device pointers; snapshot,
 * restore, checkpoint and rollback run on the GPU).
 *
 * Activations handed out by alloc are device memory (stream-ordered allocations, so a forward call never
 * synchronises with the host until to_host copies the logits back). Every block is tested against the CPU
 * reference backend (tests/gpu/test_backend.c). */
#ifndef NF_CUDA_BACKEND_CUDA_H
#define NF_CUDA_BACKEND_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

#include "model/backend.h"

/* Backend on CUDA device `device` (< 0: device 0). Uploads every tensor of the model (a synthetic DEVICE-mode
 * model's large tensors are made on the GPU instead, model/synth.h). NULL on failure (nf_error(): no device, the
 * weights do not fit in free device memory (checked before allocating; the message gives needed and free bytes),
 * a tensor type without a GPU kernel...). */
nf_backend *nf_backend_cuda_create(const nf_model *m, int device);

/* A backend holding only what layers [layer_begin, layer_end) need (a pipeline stage, model/pipeline.h): those
 * layers' tensors, plus token_embd when layer_begin is 0 and output_norm/output when layer_end is n_layer. Its
 * states hold those layers only (a synthetic model's tensors of the range are made on the GPU as in
 * nf_backend_cuda_create). NULL with nf_error() as nf_backend_cuda_create, or for a bad range. */
nf_backend *nf_backend_cuda_create_layers(const nf_model *m, int device, int layer_begin, int layer_end);

/* Make `device` current for this thread's CUDA calls (cuda_internal.h: the one place src/cuda changes it, so its
 * cache stays true). 0, or -1 with nf_error(). */
int nf_cuda_set_device(int device);

/* MoE combines that this backend's hc projections took (NF_CUDA_COMBINE_FOLD=on; cuda_moe.cu): tests check that the
 * folded path ran. */
unsigned long long nf_cuda_combines_folded(nf_backend *be);
/* the hc projections whose last CTA did the mixing (NF_CUDA_HC_TAIL=on) so far (tests) */
unsigned long long nf_cuda_hc_tails(nf_backend *be);
/* Launch the work this backend has deferred (a pending MoE combine: NF_CUDA_COMBINE_FOLD) so that a caller that reads
 * its device buffers directly, not through an entry point, sees the outputs (test_backend's block checks). 0, or -1
 * with nf_error(). */
int nf_cuda_flush(nf_backend *be);

/* CUDA devices visible (0 when none or on error). */
int nf_cuda_device_count(void);

/* Copy `bytes` of tensor t's device data (as uploaded or, for a synthetic model, made on the GPU) to host dst.
 * 0, or -1 with nf_error(). For tests and diagnostics. */
int nf_cuda_tensor_to_host(nf_backend *be, const nf_tensor *t, void *dst, size_t bytes);

/* Diagnostic: the GPU product of every non-f32 weight type against the CPU's dequantize-and-dot (double) on
 * random data; prints one line per type, returns the number of failures. */
int nf_cuda_selftest(void);

#ifdef __cplusplus
}
#endif

#endif
