/* threads.h — a small persistent pthread pool for the CPU backend.
 *
 * The CPU reference backend splits each big op (matmul rows, attention heads, KDA heads) into independent
 * tasks and runs them on a fixed set of worker threads that live as long as the backend. Keeping the threads
 * alive (instead of creating them per op) matters for decode, where a token runs a few hundred small ops.
 * The calling thread takes part in the work, so a pool of n threads starts n - 1 workers. */
#ifndef NF_CPU_THREADS_H
#define NF_CPU_THREADS_H

#include <stdint.h>

typedef struct nf_pool nf_pool;

/* One task: `task` runs in [0, n_tasks); `thread` is the index of the running thread in [0, n_threads). */
typedef void (*nf_task_fn)(void *ctx, int64_t task, int thread);

/* n_threads <= 0: the NF_THREADS environment variable, else the number of online CPUs. NULL on failure. */
nf_pool *nf_pool_create(int n_threads);
void nf_pool_free(nf_pool *p);
int nf_pool_size(const nf_pool *p);
/* Run fn(ctx, i, thread) for every i in [0, n_tasks) and wait for all of them. Tasks are handed out
 * dynamically. With one thread (or one task) everything runs on the caller. Not reentrant: a task must not
 * call nf_pool_run on the same pool. */
void nf_pool_run(nf_pool *p, int64_t n_tasks, nf_task_fn fn, void *ctx);

#endif
