/* ctx_arg.c — strict parsing of a `--ctx N` value (contract in ctx_arg.h). */
#include "util/ctx_arg.h"

#include <errno.h>
#include <stdlib.h>

#include "util/error.h"

int nf_parse_ctx_arg(const char *v, int64_t *out) {
    if (!v || *v < '0' || *v > '9')
        return nf_fail("--ctx: expected a positive number of tokens, got '%s'", v ? v : "(nothing)");
    errno = 0;
    char *end;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || x < 1 || x > (1LL << 40))
        return nf_fail("--ctx: expected a positive number of tokens, got '%s'", v);
    *out = x;
    return 0;
}
