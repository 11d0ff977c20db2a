/* cuda_mla_decode.h — the decode paths of the sparse MLA core (cuda_mla_decode.cu: why two of them, and how), for
 * nf_cuda_mla_core_path (cuda_mla.cu), which checks the arguments they share (kl % 4, T) and picks the path.
 *
 * Each path: *_supported(T, kl) says whether it takes these sizes; *_scratch_floats is the scratch it needs (the
 * core's S argument); the call only enqueues work on `stream` and returns 0, or -1 with nf_fail (a CUDA error). */
#ifndef NF_CUDA_MLA_DECODE_H
#define NF_CUDA_MLA_DECODE_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

bool nf_mla_twopass_supported(int T, int kl);
size_t nf_mla_twopass_scratch_floats(int T, int H, int kl, int width);
int nf_mla_twopass(cudaStream_t stream, const float *latent, const float *qt, const int32_t *sel, int T, int H, int kl,
                   int width, float scale, float *scratch, float *U);

bool nf_mla_online_supported(int T, int kl);
size_t nf_mla_online_scratch_floats(int T, int H, int kl, int width);
int nf_mla_online(cudaStream_t stream, const float *latent, const float *qt, const int32_t *sel, int T, int H, int kl,
                  int width, float scale, float *scratch, float *U);

#endif
