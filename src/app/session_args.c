/* session_args.c — --backend and --prefill-chunk for the programs that open a session (session_args.h). */
#include "app/session_args.h"

#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#ifdef NF_CUDA
#include "cuda/backend_cuda.h"

static nf_backend *cuda_factory(const nf_model *m, int n_threads) {
    (void)n_threads;
    return nf_backend_cuda_create(m, 0);
}
#endif

int nf_backend_arg(const char *name, const char *prog, nf_backend_factory *factory) {
    if (!strcmp(name, "cpu")) {
        *factory = NULL;
        return 0;
    }
    if (!strcmp(name, "cuda")) {
#ifdef NF_CUDA
        (void)prog;
        *factory = cuda_factory;
        return 0;
#else
        return nf_fail("this build has no CUDA backend; build with `make cuda` and use build/cuda/%s", prog);
#endif
    }
    return nf_fail("--backend: expected cpu or cuda, got '%s'", name);
}

int nf_prefill_chunk_arg(const char *v, int *chunk) {
    char *end;
    const long c = strtol(v, &end, 10);
    if (end == v || *end || c < 1 || c > 65536) return nf_fail("--prefill-chunk: expected 1..65536 tokens, got '%s'", v);
    *chunk = (int)c;
    return 0;
}
