/* threads.c — the persistent worker pool (see threads.h).
 *
 * One job at a time: the caller publishes (fn, ctx, n_tasks), bumps a generation counter and wakes the
 * workers; everybody takes task indices from an atomic counter until none is left; the caller waits until
 * every worker has checked out of this generation. Workers spin briefly before sleeping on the condition
 * variable, because decode issues many short jobs back to back. */
#include "cpu/threads.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "util/error.h"

struct nf_pool {
    int n_threads;
    pthread_t *workers;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    pthread_cond_t done;
    /* current job */
    nf_task_fn fn;
    void *ctx;
    int64_t n_tasks;
    atomic_llong next;
    atomic_int generation;
    atomic_int busy;        /* workers still inside the current generation */
    int quit;
};

typedef struct {
    nf_pool *p;
    int index;
} worker_arg;

static void drain(nf_pool *p, int thread) {
    for (;;) {
        int64_t i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (i >= p->n_tasks) break;
        p->fn(p->ctx, i, thread);
    }
}

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    nf_pool *p = wa->p;
    int index = wa->index;
    free(wa);
    int seen = 0;
    for (;;) {
        int gen = atomic_load_explicit(&p->generation, memory_order_acquire);
        for (int spin = 0; gen == seen && spin < 4000; spin++) {
            if (spin >= 1000) sched_yield(); /* be polite on an oversubscribed machine */
            gen = atomic_load_explicit(&p->generation, memory_order_acquire);
        }
        if (gen == seen) {
            pthread_mutex_lock(&p->mu);
            while (!p->quit && atomic_load(&p->generation) == seen) pthread_cond_wait(&p->wake, &p->mu);
            pthread_mutex_unlock(&p->mu);
            if (p->quit) return NULL;
            gen = atomic_load(&p->generation);
        }
        if (p->quit) return NULL;
        seen = gen;
        drain(p, index);
        if (atomic_fetch_sub_explicit(&p->busy, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

nf_pool *nf_pool_create(int n_threads) {
    if (n_threads <= 0) {
        const char *env = getenv("NF_THREADS");
        if (env && atoi(env) > 0) n_threads = atoi(env);
        else n_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
        if (n_threads <= 0) n_threads = 1;
    }
    if (n_threads > 256) n_threads = 256;
    nf_pool *p = calloc(1, sizeof *p);
    if (!p) { nf_fail("thread pool: out of memory"); return NULL; }
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->next, 0);
    atomic_init(&p->generation, 0);
    atomic_init(&p->busy, 0);
    if (n_threads > 1) {
        p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->workers) { free(p); nf_fail("thread pool: out of memory"); return NULL; }
        for (int i = 0; i < n_threads - 1; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (!wa) { p->n_threads = i + 1; break; }
            wa->p = p;
            wa->index = i + 1;
            if (pthread_create(&p->workers[i], NULL, worker_main, wa) != 0) {
                free(wa);
                p->n_threads = i + 1;
                break;
            }
        }
    }
    return p;
}

void nf_pool_free(nf_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    atomic_fetch_add(&p->generation, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_threads - 1; i++) pthread_join(p->workers[i], NULL);
    free(p->workers);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p);
}

int nf_pool_size(const nf_pool *p) { return p ? p->n_threads : 1; }

void nf_pool_run(nf_pool *p, int64_t n_tasks, nf_task_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (!p || p->n_threads == 1 || n_tasks == 1) {
        for (int64_t i = 0; i < n_tasks; i++) fn(ctx, i, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->busy, p->n_threads - 1, memory_order_relaxed);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    drain(p, 0);
    /* wait for the workers to leave this generation (spin a little, then sleep) */
    for (int spin = 0; spin < 4000 && atomic_load_explicit(&p->busy, memory_order_acquire) > 0; spin++) {
        if (spin >= 1000) sched_yield();
    }
    if (atomic_load_explicit(&p->busy, memory_order_acquire) > 0) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->busy) > 0) pthread_cond_wait(&p->done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}
