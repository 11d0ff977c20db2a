/* ctx_arg.h — the one parser of a `--ctx N` command-line value (nf run/chat/logits, nf-server), so every entry
 * point refuses the same bad values the same way instead of reading "abc" or "-5" as "the default". Whether N fits
 * the model (its context length) and the memory is checked later, where those are known (session.c, nf-bench). */
#ifndef NF_UTIL_CTX_ARG_H
#define NF_UTIL_CTX_ARG_H

#include <stdint.h>

/* *out = N for a decimal integer 1 <= N <= 2^40 (no sign, no spaces, nothing after it). 0, or -1 with nf_error()
 * naming the value. */
int nf_parse_ctx_arg(const char *v, int64_t *out);

#endif
