/* error.h — one way to report failure across the library.
 *
 * Library functions that can fail return NULL or a negative int and leave a one-line, human readable
 * message in a thread-local buffer (nf_error). Programs print it and exit; tests assert on it. Keeping the
 * message next to the failure (with the byte offset, tensor name, field...) is what lets a user fix a bad
 * file without a debugger. */
#ifndef NF_UTIL_ERROR_H
#define NF_UTIL_ERROR_H

#include <stdarg.h>
#include <stddef.h>

/* Set the current thread's error message (printf style). Always returns -1 so callers can
 * `return nf_fail("...")`. */
int nf_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The last message set on this thread ("" if none). */
const char *nf_error(void);
/* Prefix the current message: "ctx: old message". Returns -1. */
int nf_fail_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void nf_clear_error(void);

/* Print "prog: error: <msg>" to stderr and exit(1). For programs, never for the library. */
void nf_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* malloc/calloc/realloc that die with a clear message when memory runs out (programs and model setup). */
void *nf_xmalloc(size_t n);
void *nf_xcalloc(size_t n, size_t size);
void *nf_xrealloc(void *p, size_t n);
char *nf_xstrdup(const char *s);

/* The program name used in messages (set once by main). */
extern const char *nf_progname;

#endif
