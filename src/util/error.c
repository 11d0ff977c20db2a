/* error.c — thread-local error messages and the few fatal helpers programs use (see error.h). */
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *nf_progname = "nf";
static _Thread_local char last_error[1024];

int nf_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return -1;
}

int nf_fail_prefix(const char *fmt, ...) {
    char prefix[512], old[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, sizeof old);
    snprintf(last_error, sizeof last_error, "%.400s: %.600s", prefix, old);
    return -1;
}

const char *nf_error(void) { return last_error; }
void nf_clear_error(void) { last_error[0] = 0; }

void nf_die(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "%s: error: ", nf_progname);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

void *nf_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) nf_die("out of memory allocating %zu bytes", n);
    return p;
}
void *nf_xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) nf_die("out of memory allocating %zu x %zu bytes", n, size);
    return p;
}
void *nf_xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) nf_die("out of memory reallocating %zu bytes", n);
    return q;
}
char *nf_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(nf_xmalloc(n), s, n);
}
