/* sse.h — a growable byte buffer and Server-Sent Events framing.
 *
 * An event is `event: NAME\n` (optional) + `data: JSON\n` + `\n`; a comment is `: TEXT\n\n` (keeps TCP and
 * proxies alive, ignored by SSE parsers). JSON is written compact, one line, UTF-8 as is. */
#ifndef NF_SERVER_SSE_H
#define NF_SERVER_SSE_H

#include <jansson.h>
#include <stddef.h>

typedef struct {
    char *s;
    size_t n, cap;
} nf_buf;

void nf_buf_add(nf_buf *b, const char *s, size_t n);
void nf_buf_str(nf_buf *b, const char *s);
void nf_buf_reset(nf_buf *b);
void nf_buf_free(nf_buf *b);
/* Take the contents (NUL-terminated, malloc'ed; the buffer is left empty). */
char *nf_buf_take(nf_buf *b, size_t *n);

/* `event: name` (skipped when NULL) + `data: <data>`; steals the reference to data. */
void nf_sse_event(nf_buf *b, const char *name, json_t *data);
void nf_sse_data_raw(nf_buf *b, const char *text);
void nf_sse_comment(nf_buf *b, const char *text);

/* A JSON string of n bytes; invalid UTF-8 bytes become '?' (never NULL). */
json_t *nf_jstr(const char *s, size_t n);

/* Compact JSON text of v (malloc'ed). */
char *nf_json_compact(const json_t *v);

#endif
