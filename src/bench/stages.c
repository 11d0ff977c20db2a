/* stages.c — nf-bench's pipeline stages (stages.h). */
#include "bench/stages.h"

#include <stdio.h>
#include <string.h>

#include "cpu/backend_cpu.h"
#include "util/error.h"
#ifdef NF_CUDA
#include "cuda/backend_cuda.h"
#include "cuda/cuda_bench.h"
#endif

int nf_bench_stages_open(nf_bench_stages *s, const nf_split_args *a, const nf_model *m, int64_t cap, int cuda,
                         int n_threads, double headroom, int *refused) {
    memset(s, 0, sizeof *s);
    *refused = 1;
    nf_split_plan plan;
    if (nf_split_args_plan(a, m, cap, &plan) < 0) return -1;
    int device[NF_MAX_STAGES];
    double avail[NF_MAX_STAGES];
    int n_dev = 0;
#ifdef NF_CUDA
    if (cuda && (n_dev = nf_cuda_device_count()) < 1) return nf_fail("no CUDA device");
    /* stages on one device share its free memory: each stage is checked against what the earlier ones left */
    double left[64];
    for (int d = 0; d < n_dev && d < 64; d++) {
        size_t fr = 0, tot = 0;
        if (nf_cuda_mem_info(d, &fr, &tot) < 0) return -1;
        left[d] = (double)fr;
    }
    for (int k = 0; cuda && k < plan.n_stages; k++) {
        device[k] = k % (n_dev < 64 ? n_dev : 64);
        avail[k] = left[device[k]];
        left[device[k]] -= plan.stage[k].weight_bytes + plan.stage[k].state_bytes + headroom;
    }
#endif
    fputs("nf-bench: ", stderr);
    nf_split_plan_print(stderr, &plan, cuda ? avail : NULL, cuda ? device : NULL);
    if (cuda && nf_split_plan_check(&plan, avail, device, headroom) < 0)
        return nf_fail_prefix("the model does not fit (free memory after the earlier stages on the same device)");
    *refused = 0;
    nf_stage stages[NF_MAX_STAGES];
    nf_split_plan_stages(&plan, stages);
    for (int k = 0; k < plan.n_stages; k++) {
#ifdef NF_CUDA
        if (cuda) stages[k].be = nf_backend_cuda_create_layers(m, device[k], stages[k].layer_begin, stages[k].layer_end);
#endif
        if (!cuda) stages[k].be = nf_cpu_backend_create(m, n_threads);
        s->stage_be[k] = stages[k].be;
        if (!stages[k].be) {
            nf_fail_prefix("stage %d", k);
            goto fail;
        }
    }
    if (nf_pipeline_init(&s->p, plan.n_stages, stages) < 0 || !(s->be = nf_pipeline_backend_create(&s->p))) goto fail;
    s->n_devices = cuda ? (plan.n_stages < n_dev ? plan.n_stages : n_dev) : 0;
    fprintf(stderr, "nf-bench: stages hand over %s\n",
            !s->p.handover_dev ? "through the host (NF_PIPELINE_HANDOVER=host or a stage without from_peer)"
            : cuda ? "device to device (NCCL send/recv between GPUs unless NF_CUDA_PEER=copy; a device copy on one GPU)"
                   : "backend to backend (host memory)");
    return 0;
fail:
    nf_bench_stages_close(s);
    return -1;
}

void nf_bench_stages_close(nf_bench_stages *s) {
    nf_backend_free(s->be);
    s->be = NULL;
    for (int k = 0; k < NF_MAX_STAGES; k++) {
        nf_backend_free(s->stage_be[k]);
        s->stage_be[k] = NULL;
    }
}
