/* output_parser.c — streaming split of generated text into reasoning / text / tool calls (see the header).
 *
 * One buffer holds the input not yet consumed. In reasoning or text mode the parser emits everything up
 * to the first complete tag, acts on the tag, and repeats; at the end of the buffer it keeps back the
 * longest tail that is a prefix of some tag, plus an incomplete UTF-8 sequence. In tool mode it waits for
 * </tool_call> and parses the whole body at once. */
#include "text/output_parser.h"

#include <stdlib.h>
#include <string.h>

#include "util/error.h"

enum { M_REASONING, M_TEXT, M_TOOL, M_DONE };

struct nf_output_parser {
    int mode;
    char *buf;
    size_t n, cap;
    nf_out_fn fn;
    void *user;
    json_t *tools;
};

typedef enum { T_THINK, T_END_THINK, T_TOOL, T_END_TOOL, T_USER, T_OBS, T_EOT, T_COUNT } tag_id;
static const char *const TAGS[T_COUNT] = {"<think>", "</think>", "<tool_call>", "</tool_call>",
                                          "<|user|>", "<|observation|>", "<|endoftext|>"};

nf_output_parser *nf_output_parser_new(const nf_output_parser_opts *o, nf_out_fn fn, void *user) {
    nf_output_parser *p = nf_xcalloc(1, sizeof *p);
    p->mode = (o && o->in_reasoning) ? M_REASONING : M_TEXT;
    p->fn = fn;
    p->user = user;
    p->tools = (o && o->tools) ? json_incref((json_t *)o->tools) : NULL;
    return p;
}

void nf_output_parser_free(nf_output_parser *p) {
    if (!p) return;
    free(p->buf);
    json_decref(p->tools);
    free(p);
}

bool nf_output_parser_done(const nf_output_parser *p) { return p->mode == M_DONE; }

static void emit_text(nf_output_parser *p, int mode, const char *s, size_t n) {
    if (n == 0) return;
    nf_out_event ev = {.kind = mode == M_REASONING ? NF_OUT_REASONING : NF_OUT_TEXT, .text = s, .len = n};
    p->fn(p->user, &ev);
}

static void consume(nf_output_parser *p, size_t k) {
    if (k == 0) return;
    memmove(p->buf, p->buf + k, p->n - k);
    p->n -= k;
}

/* Length of an incomplete UTF-8 sequence at the end of s[0, n) (0 if the end is complete or invalid). */
static size_t utf8_tail(const char *s, size_t n) {
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = (unsigned char)s[n - back];
        if ((c & 0xC0) == 0x80) continue;      /* continuation byte: look further back */
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return (c >= 0xC0 && need > back && c < 0xF8) ? back : 0;
    }
    return 0;
}

/* Longest tail of s[0, n) that is a proper prefix of a tag. */
static size_t tag_prefix_tail(const char *s, size_t n) {
    size_t best = 0;
    for (int t = 0; t < T_COUNT; t++) {
        size_t tl = strlen(TAGS[t]);
        for (size_t k = tl - 1; k > best; k--) {
            if (k <= n && memcmp(s + n - k, TAGS[t], k) == 0) {
                best = k;
                break;
            }
        }
    }
    return best;
}

/* First complete tag in s[0, n): position and id, or -1. */
static long find_tag(const char *s, size_t n, tag_id *which) {
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '<') continue;
        for (int t = 0; t < T_COUNT; t++) {
            size_t tl = strlen(TAGS[t]);
            if (tl <= n - i && memcmp(s + i, TAGS[t], tl) == 0) {
                *which = (tag_id)t;
                return (long)i;
            }
        }
    }
    return -1;
}

/* ---- tool-call body ----------------------------------------------------------------------------------- */

static bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

static void trim(const char **s, size_t *n) {
    while (*n && is_ws((unsigned char)(*s)[0])) { (*s)++; (*n)--; }
    while (*n && is_ws((unsigned char)(*s)[*n - 1])) (*n)--;
}

static const char *memfind(const char *s, size_t n, const char *needle) {
    size_t l = strlen(needle);
    if (l > n) return NULL;
    for (size_t i = 0; i + l <= n; i++)
        if (s[i] == needle[0] && memcmp(s + i, needle, l) == 0) return s + i;
    return NULL;
}

/* Does the tools schema declare tool `name`'s parameter `arg` as a string? */
static bool arg_is_string(const json_t *tools, const char *name, const char *arg) {
    size_t i;
    json_t *tool;
    json_array_foreach(tools, i, tool) {
        json_t *f = json_object_get(tool, "function");
        if (!f) f = tool;
        const char *n = json_string_value(json_object_get(f, "name"));
        if (!n || strcmp(n, name) != 0) continue;
        json_t *ty = json_object_get(json_object_get(json_object_get(json_object_get(f, "parameters"), "properties"), arg),
                                     "type");
        if (json_is_string(ty)) return strcmp(json_string_value(ty), "string") == 0;
        if (json_is_array(ty)) { /* ["string", "null"] */
            bool str = false, other = false;
            size_t k;
            json_t *e;
            json_array_foreach(ty, k, e) {
                if (!json_is_string(e)) continue;
                if (!strcmp(json_string_value(e), "string")) str = true;
                else if (strcmp(json_string_value(e), "null") != 0) other = true;
            }
            return str && !other;
        }
        return false;
    }
    return false;
}

static json_t *convert_value(const char *raw, size_t n, bool as_string) {
    if (as_string) return json_stringn(raw, n);
    const char *s = raw;
    size_t k = n;
    trim(&s, &k);
    json_error_t e;
    json_t *v = k ? json_loadb(s, k, JSON_DECODE_ANY, &e) : NULL;
    if (v) return v;
    if (k == 4 && !memcmp(s, "True", 4)) return json_true();
    if (k == 5 && !memcmp(s, "False", 5)) return json_false();
    if (k == 4 && !memcmp(s, "None", 4)) return json_null();
    return json_stringn(raw, n);
}

int nf_parse_tool_call(const char *body, size_t len, const json_t *tools, char **name_out, json_t **args_out) {
    *name_out = NULL;
    *args_out = NULL;
    const char *s = body;
    size_t n = len;
    trim(&s, &n);
    if (n && s[0] == '{') { /* {"name": ..., "arguments": {...}} */
        json_error_t e;
        json_t *j = json_loadb(s, n, 0, &e);
        const char *nm = json_string_value(json_object_get(j, "name"));
        json_t *a = json_object_get(j, "arguments");
        if (json_is_string(a)) a = json_loads(json_string_value(a), 0, &e);
        else if (a) json_incref(a);
        if (nm && nm[0] && (json_is_object(a) || !a)) {
            *name_out = nf_xstrdup(nm);
            *args_out = a ? a : json_object();
            json_decref(j);
            return 0;
        }
        json_decref(a);
        json_decref(j);
    }
    const char *k0 = memfind(s, n, "<arg_key>");
    size_t nl = k0 ? (size_t)(k0 - s) : n;
    const char *nm = s;
    trim(&nm, &nl);
    if (nl == 0) return nf_fail("tool call without a function name");
    if (memchr(nm, '<', nl) || memchr(nm, '>', nl)) return nf_fail("tool call name '%.*s' contains a tag", (int)nl, nm);
    char *name = nf_xmalloc(nl + 1);
    memcpy(name, nm, nl);
    name[nl] = 0;
    json_t *args = json_object();
    const char *p = k0, *end = s + n;
    while (p) {
        const char *ks = p + strlen("<arg_key>");
        const char *ke = memfind(ks, (size_t)(end - ks), "</arg_key>");
        if (!ke) goto bad;
        const char *vs = ke + strlen("</arg_key>");
        for (;;) { /* whitespace, or a literal backslash-n, between the key and the value (official regex) */
            if (vs < end && is_ws((unsigned char)*vs)) vs++;
            else if (end - vs >= 2 && vs[0] == '\\' && vs[1] == 'n') vs += 2;
            else break;
        }
        if ((size_t)(end - vs) < strlen("<arg_value>") || memcmp(vs, "<arg_value>", strlen("<arg_value>")) != 0)
            goto bad;
        vs += strlen("<arg_value>");
        const char *ve = memfind(vs, (size_t)(end - vs), "</arg_value>");
        if (!ve) goto bad;
        const char *key = ks;
        size_t kl = (size_t)(ke - ks);
        trim(&key, &kl);
        char *kz = nf_xmalloc(kl + 1);
        memcpy(kz, key, kl);
        kz[kl] = 0;
        json_object_set_new(args, kz, convert_value(vs, (size_t)(ve - vs), arg_is_string(tools, name, kz)));
        free(kz);
        p = ve + strlen("</arg_value>");
        const char *rest = p;
        size_t rl = (size_t)(end - p);
        trim(&rest, &rl);
        if (rl == 0) break;
        if (rl < strlen("<arg_key>") || memcmp(rest, "<arg_key>", strlen("<arg_key>")) != 0) goto bad;
        p = rest;
    }
    *name_out = name;
    *args_out = args;
    return 0;
bad:
    free(name);
    json_decref(args);
    return nf_fail("malformed tool call arguments (expected <arg_key>K</arg_key><arg_value>V</arg_value> pairs)");
}

/* ---- streaming ------------------------------------------------------------------------------------------ */

static void emit_tool(nf_output_parser *p, const char *body, size_t n, bool at_finish) {
    char *name;
    json_t *args;
    if (nf_parse_tool_call(body, n, p->tools, &name, &args) == 0) {
        nf_out_event ev = {.kind = NF_OUT_TOOL_CALL, .text = body, .len = n, .name = name, .arguments = args};
        p->fn(p->user, &ev);
        free(name);
        json_decref(args);
        return;
    }
    /* malformed: show it as text rather than lose it */
    emit_text(p, M_TEXT, "<tool_call>", strlen("<tool_call>"));
    emit_text(p, M_TEXT, body, n);
    if (!at_finish) emit_text(p, M_TEXT, "</tool_call>", strlen("</tool_call>"));
}

static void process(nf_output_parser *p, bool final) {
    for (;;) {
        if (p->mode == M_DONE) {
            p->n = 0;
            return;
        }
        if (p->mode == M_TOOL) {
            /* the call ends at </tool_call>, or at an end token if one comes first (the turn ended
             * without closing the call: recover it) */
            const char *e = memfind(p->buf, p->n, "</tool_call>");
            size_t limit = e ? (size_t)(e - p->buf) : p->n;
            tag_id t;
            long at = find_tag(p->buf, limit, &t);
            while (at >= 0 && t != T_USER && t != T_OBS && t != T_EOT) {
                long next = find_tag(p->buf + at + 1, limit - (size_t)at - 1, &t);
                at = next < 0 ? -1 : at + 1 + next;
            }
            if (at >= 0) {
                emit_tool(p, p->buf, (size_t)at, true);
                nf_out_event ev = {.kind = NF_OUT_END, .text = TAGS[t], .len = strlen(TAGS[t])};
                p->mode = M_DONE;
                p->fn(p->user, &ev);
                continue;
            }
            if (!e) {
                if (final) {
                    emit_tool(p, p->buf, p->n, true);
                    p->n = 0;
                }
                return;
            }
            size_t bl = (size_t)(e - p->buf);
            emit_tool(p, p->buf, bl, false);
            consume(p, bl + strlen("</tool_call>"));
            p->mode = M_TEXT;
            continue;
        }
        tag_id t;
        long at = find_tag(p->buf, p->n, &t);
        if (at < 0) {
            size_t hold = final ? 0 : tag_prefix_tail(p->buf, p->n);
            if (!final) {
                size_t u = utf8_tail(p->buf, p->n - hold);
                hold += u;
            }
            emit_text(p, p->mode, p->buf, p->n - hold);
            consume(p, p->n - hold);
            return;
        }
        emit_text(p, p->mode, p->buf, (size_t)at);
        consume(p, (size_t)at + strlen(TAGS[t]));
        switch (t) {
        case T_THINK: p->mode = M_REASONING; break;          /* dropped when already reasoning */
        case T_END_THINK: p->mode = M_TEXT; break;           /* a second </think> is dropped */
        case T_TOOL: p->mode = M_TOOL; break;
        case T_END_TOOL: break;                              /* stray closer: dropped */
        case T_USER: case T_OBS: case T_EOT: {
            nf_out_event ev = {.kind = NF_OUT_END, .text = TAGS[t], .len = strlen(TAGS[t])};
            p->mode = M_DONE;
            p->fn(p->user, &ev);
            break;
        }
        default: break;
        }
    }
}

void nf_output_parser_feed(nf_output_parser *p, const char *text, size_t len) {
    if (p->mode == M_DONE || len == 0) return;
    if (p->n + len + 1 > p->cap) {
        size_t cap = p->cap ? p->cap : 256;
        while (cap < p->n + len + 1) cap *= 2;
        p->buf = nf_xrealloc(p->buf, cap);
        p->cap = cap;
    }
    memcpy(p->buf + p->n, text, len);
    p->n += len;
    process(p, false);
}

void nf_output_parser_finish(nf_output_parser *p) { process(p, true); }
