/* stages.h — nf-bench's pipeline (--gpus N / --split, app/split_args.h): the memory plan printed and checked at
 * load, one backend per stage (CUDA: a layer-range backend on device k % device_count, so on one GPU every stage
 * shares device 0; CPU: a CPU backend per stage), and the pipeline behind one nf_backend (model/pipeline.h) so the
 * sweep runs it unchanged (--fill synthetic fills each stage's state: pipeline.h). Not yet with --draft (refused by
 * bench.c). */
#ifndef NF_BENCH_STAGES_H
#define NF_BENCH_STAGES_H

#include <stdint.h>

#include "app/split_args.h"
#include "model/pipeline.h"

typedef struct {
    nf_pipeline p;
    nf_backend *stage_be[NF_MAX_STAGES];
    nf_backend *be;     /* the pipeline as one backend (nf_pipeline_backend_create) */
    int n_devices;      /* CUDA devices the stages use (0: the CPU) */
} nf_bench_stages;

/* Plan (printed to stderr), check each device's free memory (stages sharing a device add up; CUDA headroom
 * `headroom` bytes per stage), make the stage backends and the pipeline. 0, or -1 with nf_error(): *refused set
 * when the plan does not fit (nothing was made). */
int nf_bench_stages_open(nf_bench_stages *s, const nf_split_args *a, const nf_model *m, int64_t cap, int cuda,
                         int n_threads, double headroom, int *refused);
void nf_bench_stages_close(nf_bench_stages *s);

#endif
