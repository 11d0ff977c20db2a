/* sweep.h — the measurement loop of nf-bench (bench.h describes the method), separated from the setup in bench.c
 * (model, backend, token sequence, files) so that the loop reads as the method. Internal to src/bench. */
#ifndef NF_BENCH_SWEEP_H
#define NF_BENCH_SWEEP_H

#include <stdio.h>

#include "bench/bench.h"
#include "engine/spec.h"
#include "model/backend.h"

typedef struct {
    const nf_bench_opts *o;
    nf_backend *be;
    int cuda_device;            /* -1: the CPU backend (no device to synchronise) */
    int cuda_devices;           /* devices cuda_device .. cuda_device + cuda_devices - 1 are synchronised (0: 1) */
    const int32_t *ids;         /* the token sequence, at least the last frontier long */
    int64_t n_ids;
    int64_t cap;                /* state capacity */
    double probe_gbps;
    double tc_tflops;           /* the GEMM ceiling measured before the sweep (0: none, the CPU backend) */
    FILE *csv, *dump;
    nf_spec *spec;              /* the speculative decoder of the probe (--draft), or NULL: serial */
} nf_bench_ctx;

/* Untimed warm-up on a scratch state. 0 or -1 with nf_error(). */
int nf_bench_warmup(nf_bench_ctx *c);
/* Every frontier: prefill, snapshot, probe, restore, CSV row (and dump block). 0 or -1 with nf_error(). */
int nf_bench_sweep_frontiers(nf_bench_ctx *c);

#endif
