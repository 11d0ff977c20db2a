/* run_env.h — what nf-bench's log says about the run's environment, so that a CSV can be traced to the build and
 * the machine that made it: the build stamp (commit, dirty flag, compiler, flags — written by the Makefile into
 * $(BUILD)/gen/nf_build_id.h at build time), the host CPU, and the GPU kernel driver version. */
#ifndef NF_BENCH_RUN_ENV_H
#define NF_BENCH_RUN_ENV_H

#include <stddef.h>

/* "commit=<sha> dirty=<yes|no|unknown> cc=<version> cflags=<...> [nvcc=<version> nvflags=<...>]
 * compiled-backends=cpu[,cuda]". A build without the stamp (e.g. the fuzz build) says commit=unknown. */
const char *nf_run_env_build(void);
/* The commit alone ("unknown" without a stamp). */
const char *nf_run_env_commit(void);
/* "<cpu model name>, <n> online CPUs" into buf. */
void nf_run_env_cpu(char *buf, size_t n);
/* The NVIDIA kernel driver version from /proc/driver/nvidia/version ("580.159.04"), or "none". */
void nf_run_env_nvidia_driver(char *buf, size_t n);

#endif
