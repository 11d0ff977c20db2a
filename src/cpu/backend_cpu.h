/* backend_cpu.h — the CPU reference backend: creates an nf_backend whose blocks run on the host with a
 * persistent thread pool. Every other backend is tested against this one. */
#ifndef NF_CPU_BACKEND_CPU_H
#define NF_CPU_BACKEND_CPU_H

#include "model/backend.h"

/* n_threads <= 0: NF_THREADS or the number of online CPUs. NULL on failure (nf_error()). */
nf_backend *nf_cpu_backend_create(const nf_model *m, int n_threads);

#endif
