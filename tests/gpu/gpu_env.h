/* gpu_env.h — an environment switch set for a stretch of a GPU test, then put back as the caller had it.
 * Why: the tests compare a kernel path with its A/B switch (NF_CUDA_KDA_PREP_V2=off, NF_CUDA_GEMM_PREDEQ=off, ...),
 * read at each call by the engine. A test that set the switch and then unset it clobbered a value exported for the
 * whole run (session 22: the kda test run with the switches exported compared its later cases against the wrong
 * baseline). env_push returns what the variable held; env_pop restores exactly that, an absent variable included. */
#ifndef NF_TESTS_GPU_ENV_H
#define NF_TESTS_GPU_ENV_H

#include <stdlib.h>
#include <string.h>

#include "util/error.h"

typedef struct {
    const char *name;
    char *was; /* a copy of the earlier value, NULL when the variable was absent */
} env_saved;

/* name = value (NULL: unset) until env_pop */
static inline env_saved env_push(const char *name, const char *value) {
    const char *e = getenv(name);
    env_saved s = {name, e ? strdup(e) : NULL};
    if (e && !s.was) nf_die("gpu tests: out of memory saving %s", name);
    if (value) setenv(name, value, 1);
    else unsetenv(name);
    return s;
}

static inline void env_pop(env_saved *s) {
    if (s->was) setenv(s->name, s->was, 1);
    else unsetenv(s->name);
    free(s->was);
    s->was = NULL;
}

#endif
