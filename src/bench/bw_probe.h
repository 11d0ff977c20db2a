/* bw_probe.h — the memory read bandwidth the bench compares decode against (bw_fraction = decode_gbps / probe).
 *
 * A decode step streams the weights once per token, so its ceiling is how fast this process can read memory on
 * the device the backend runs on. The probe measures that in the same process, just before the sweep: on the
 * CPU, the backend's thread count summing a buffer far larger than the caches (this file); on a GPU, a kernel
 * streaming a buffer much larger than L2 (src/cuda/cuda_bench.cu). GB here is 1e9 bytes. */
#ifndef NF_BENCH_BW_PROBE_H
#define NF_BENCH_BW_PROBE_H

#include <stddef.h>

typedef struct {
    double gbps;        /* the probe's figure: the median of the timed passes */
    double best_gbps;   /* the fastest pass */
    size_t bytes;       /* buffer size */
    int passes;         /* timed passes */
    int threads;        /* CPU threads (0 on a GPU) */
} nf_bw_probe;

/* CPU: `threads` threads (<= 0: NF_THREADS or every online CPU, as the CPU backend) read `bytes` (rounded down
 * to whole 4 KiB pages) `passes` times after one untimed pass. 0, or -1 with nf_error(). */
int nf_cpu_read_bandwidth(size_t bytes, int threads, int passes, nf_bw_probe *out);

#endif
