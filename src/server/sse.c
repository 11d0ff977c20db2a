/* sse.c — byte buffer and Server-Sent Events framing (see sse.h). */
#include "server/sse.h"

#include <stdlib.h>
#include <string.h>

#include "util/error.h"

void nf_buf_add(nf_buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n + 1) c *= 2;
        b->s = nf_xrealloc(b->s, c);
        b->cap = c;
    }
    if (n) memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

void nf_buf_str(nf_buf *b, const char *s) { nf_buf_add(b, s, strlen(s)); }

void nf_buf_reset(nf_buf *b) {
    b->n = 0;
    if (b->s) b->s[0] = 0;
}

void nf_buf_free(nf_buf *b) {
    free(b->s);
    memset(b, 0, sizeof *b);
}

char *nf_buf_take(nf_buf *b, size_t *n) {
    if (!b->s) nf_buf_add(b, "", 0);
    char *s = b->s;
    if (n) *n = b->n;
    memset(b, 0, sizeof *b);
    return s;
}

char *nf_json_compact(const json_t *v) {
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_ENCODE_ANY);
    return s ? s : nf_xstrdup("null");
}

void nf_sse_event(nf_buf *b, const char *name, json_t *data) {
    if (name) {
        nf_buf_str(b, "event: ");
        nf_buf_str(b, name);
        nf_buf_str(b, "\n");
    }
    char *s = nf_json_compact(data);
    nf_buf_str(b, "data: ");
    nf_buf_str(b, s);
    nf_buf_str(b, "\n\n");
    free(s);
    json_decref(data);
}

void nf_sse_data_raw(nf_buf *b, const char *text) {
    nf_buf_str(b, "data: ");
    nf_buf_str(b, text);
    nf_buf_str(b, "\n\n");
}

void nf_sse_comment(nf_buf *b, const char *text) {
    nf_buf_str(b, ": ");
    nf_buf_str(b, text);
    nf_buf_str(b, "\n\n");
}

json_t *nf_jstr(const char *s, size_t n) {
    json_t *v = json_stringn(s ? s : "", s ? n : 0);
    if (v) return v;
    char *c = nf_xmalloc(n + 1);
    for (size_t i = 0; i < n; i++) c[i] = (unsigned char)s[i] < 0x80 && s[i] ? s[i] : '?';
    v = json_stringn(c, n);
    free(c);
    return v;
}
