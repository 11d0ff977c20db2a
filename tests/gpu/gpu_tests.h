/* gpu_tests.h — entry points of the GPU test files, all run by tests/gpu/main.c (build/cuda/nf-gpu-tests).
 * Each returns the number of failed checks (0 = all passed) and prints one line per check. */
#ifndef NF_TESTS_GPU_TESTS_H
#define NF_TESTS_GPU_TESTS_H

/* test_gemv.c: baseline GEMV vs the CPU formats code; bench != 0 adds the bandwidth table. */
int nf_gpu_test_gemv(int bench);

/* test_gemm.c: the tiled prefill GEMM vs float references for every format, dense, per-head and routed;
 * bench != 0 adds its timing table. */
int nf_gpu_test_gemm(int bench);

/* test_backend.c: the CUDA backend vs the CPU backend on every fixture and recipe. quick != 0 runs a small
 * subset (for compute-sanitizer). */
int nf_gpu_test_backend(int quick);

/* test_synth.c: synthetic models made on the GPU (model/synth.h DEVICE mode) against their host reference, their
 * forward against the CPU, glm53:q2 at full size when the device holds it, glm53:q8 refused. quick != 0: small
 * presets only. */
int nf_gpu_test_synth(int quick);
/* test_attn.c: indexer scoring/top-k and the sparse MLA core vs references on synthetic data (exact selections,
 * attention within tolerance); bench != 0 adds per-phase timings at long contexts with the release dims. */
int nf_gpu_test_attn(int bench, int quick);
/* test_pipeline.c: two CUDA pipeline stages (layer-range backends) against one CUDA backend: logits, greedy
 * tokens, snapshot replay, the layer-range upload. quick != 0: fixture base f32 only. */
int nf_gpu_test_pipeline(int quick);
/* test_router.c: the MoE router's top-k and weights vs the CPU's rules (ties, NaN, many experts). */
int nf_gpu_test_router(void);

/* test_kda.c: the KDA recurrence's fused and prepared paths bit-identical (one-shot, chunked, token by token) and
 * within tolerance of the CPU; bench != 0 adds their timing at glm53's shapes. quick != 0: no full-size case. */
int nf_gpu_test_kda(int bench, int quick);

#endif
