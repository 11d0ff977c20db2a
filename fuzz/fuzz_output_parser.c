/* fuzz_output_parser.c — libFuzzer target for the streaming output parser.
 *
 * The input's first byte picks a chunk-size pattern and a start mode; the rest is generated text. The
 * property: feeding the text in chunks gives exactly the same events (kinds, concatenated texts, tool-call
 * names and arguments, end token) as feeding it at once, and valid UTF-8 input never yields an event
 * that splits a character. The tools schema used for argument typing is fixed. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/output_parser.h"

typedef struct {
    char *log;  /* canonical serialisation of the event stream */
    size_t n, cap;
    int last_kind;
    bool split_char;
} rec;

static void put(rec *r, const char *s, size_t n) {
    if (r->n + n + 1 > r->cap) {
        r->cap = (r->n + n + 1) * 2;
        r->log = realloc(r->log, r->cap);
        if (!r->log) abort();
    }
    memcpy(r->log + r->n, s, n);
    r->n += n;
}

static bool utf8_whole(const char *s, size_t n) {
    if (n == 0) return true;
    if (((unsigned char)s[0] & 0xC0) == 0x80) return false; /* starts inside a character */
    size_t i = n;
    while (i > 0 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) i--;
    if (i == 0) return false;
    unsigned char c = (unsigned char)s[i - 1];
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return n - (i - 1) >= need;
}

static void on_ev(void *u, const nf_out_event *ev) {
    rec *r = u;
    if (ev->kind == NF_OUT_REASONING || ev->kind == NF_OUT_TEXT) {
        if (!utf8_whole(ev->text, ev->len)) r->split_char = true;
        if (r->last_kind != (int)ev->kind) put(r, ev->kind == NF_OUT_TEXT ? "\x01T" : "\x01R", 2);
        put(r, ev->text, ev->len);
    } else if (ev->kind == NF_OUT_TOOL_CALL) {
        char *a = json_dumps(ev->arguments, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
        put(r, "\x01C", 2);
        put(r, ev->name, strlen(ev->name));
        put(r, "\x02", 1);
        if (a) put(r, a, strlen(a));
        free(a);
    } else {
        put(r, "\x01E", 2);
        put(r, ev->text, ev->len);
    }
    r->last_kind = (int)ev->kind;
}

static json_t *tools;

static bool valid_utf8(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t l = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (!l || i + l > n) return false;
        for (size_t k = 1; k < l; k++)
            if ((s[i + k] & 0xC0) != 0x80) return false;
        i += l;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (!tools) {
        json_error_t e;
        tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"properties\":"
                           "{\"s\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"}}}}}]", 0, &e);
    }
    uint8_t mode = data[0];
    const char *text = (const char *)data + 1;
    size_t n = size - 1;
    nf_output_parser_opts o = {.in_reasoning = mode & 1, .tools = tools};
    rec whole = {0}, chunked = {0};
    nf_output_parser *p = nf_output_parser_new(&o, on_ev, &whole);
    nf_output_parser_feed(p, text, n);
    nf_output_parser_finish(p);
    nf_output_parser_free(p);
    p = nf_output_parser_new(&o, on_ev, &chunked);
    size_t step = 1 + (mode >> 1) % 7;
    for (size_t i = 0; i < n; i += step) nf_output_parser_feed(p, text + i, i + step <= n ? step : n - i);
    nf_output_parser_finish(p);
    nf_output_parser_free(p);
    if (whole.n != chunked.n || (whole.n && memcmp(whole.log, chunked.log, whole.n) != 0)) abort();
    if (valid_utf8((const uint8_t *)text, n) && (whole.split_char || chunked.split_char)) abort();
    free(whole.log);
    free(chunked.log);
    return 0;
}
