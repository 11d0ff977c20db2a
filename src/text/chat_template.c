/* chat_template.c — GLM-5.3-Flash prompt rendering (contract and layout in chat_template.h).
 *
 * The code follows the released Jinja template's control flow step by step, with Jinja's semantics spelled
 * out where they matter for bytes: truthiness of JSON values, Python str() of scalars, Python str.strip()
 * (Unicode whitespace), str.split, json.dumps formatting. Output is built as a "marked string": each byte
 * carries 0 (text from the request), 1 (first byte of a template-emitted special token) or 2 (its other
 * bytes), so slicing (split on </think>, strip) keeps the marks aligned. */
#include "text/chat_template.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

/* GLM-4.5/4.7/5.x added tokens that the template can emit (spec §5). */
static const char *const GLM_SPECIALS[] = {
    "<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
    "<|assistant|>", "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>",
    "<|end_of_video|>", "<|begin_of_audio|>", "<|end_of_audio|>", "<|begin_of_transcription|>",
    "<|end_of_transcription|>", "<|code_prefix|>", "<|code_middle|>", "<|code_suffix|>", "<think>", "</think>",
    "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<arg_key>", "</arg_key>",
    "<arg_value>", "</arg_value>", "/nothink", "<|begin_of_box|>", "<|end_of_box|>", "<|image|>", "<|video|>",
};
#define N_SPECIALS (sizeof GLM_SPECIALS / sizeof GLM_SPECIALS[0])

bool nf_glm_is_special_text(const char *s, size_t n) {
    for (size_t i = 0; i < N_SPECIALS; i++)
        if (strlen(GLM_SPECIALS[i]) == n && memcmp(GLM_SPECIALS[i], s, n) == 0) return true;
    return false;
}

nf_chat_opts nf_chat_opts_default(void) {
    return (nf_chat_opts){.add_generation_prompt = true, .enable_thinking = true, .reasoning_effort = NULL,
                          .clear_thinking = false};
}

/* ---- marked strings --------------------------------------------------------------------------------- */

typedef struct {
    char *s;
    uint8_t *m;
    size_t n, cap;
} mstr;

static void ms_reserve(mstr *b, size_t extra) {
    if (b->n + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + extra + 1) cap *= 2;
    b->s = nf_xrealloc(b->s, cap);
    b->m = nf_xrealloc(b->m, cap);
    b->cap = cap;
}

static void ms_text(mstr *b, const char *s, size_t n) {
    ms_reserve(b, n);
    if (n == 0) {
        b->s[b->n] = 0;
        return;
    }
    memcpy(b->s + b->n, s, n);
    memset(b->m + b->n, 0, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void ms_cstr(mstr *b, const char *s) { ms_text(b, s, strlen(s)); }

static void ms_special(mstr *b, const char *s) {
    size_t n = strlen(s);
    ms_reserve(b, n);
    memcpy(b->s + b->n, s, n);
    memset(b->m + b->n, 2, n);
    b->m[b->n] = 1;
    b->n += n;
    b->s[b->n] = 0;
}

/* Template literal text: special-token strings inside it are special tokens (as the tokenizer would see
 * them in the template), everything else is text. */
static void ms_lit(mstr *b, const char *s) {
    size_t n = strlen(s), i = 0, start = 0;
    while (i < n) {
        size_t hit = 0;
        if (s[i] == '<' || s[i] == '[' || s[i] == '/') {
            for (size_t k = 0; k < N_SPECIALS; k++) {
                size_t l = strlen(GLM_SPECIALS[k]);
                if (l <= n - i && memcmp(s + i, GLM_SPECIALS[k], l) == 0) { hit = k + 1; break; }
            }
        }
        if (hit) {
            ms_text(b, s + start, i - start);
            ms_special(b, GLM_SPECIALS[hit - 1]);
            i += strlen(GLM_SPECIALS[hit - 1]);
            start = i;
        } else {
            i++;
        }
    }
    ms_text(b, s + start, n - start);
}

static void ms_slice(mstr *dst, const mstr *src, size_t off, size_t n) {
    ms_reserve(dst, n);
    if (n == 0) {
        dst->s[dst->n] = 0;
        return;
    }
    memcpy(dst->s + dst->n, src->s + off, n);
    memcpy(dst->m + dst->n, src->m + off, n);
    dst->n += n;
    dst->s[dst->n] = 0;
}

static void ms_free(mstr *b) {
    free(b->s);
    free(b->m);
    memset(b, 0, sizeof *b);
}

/* ---- Python formatting ------------------------------------------------------------------------------ */

void nf_py_float_repr(double d, char out[32]) {
    if (isnan(d)) { snprintf(out, 32, "NaN"); return; }
    if (isinf(d)) { snprintf(out, 32, d < 0 ? "-Infinity" : "Infinity"); return; }
    if (d == 0) { snprintf(out, 32, signbit(d) ? "-0.0" : "0.0"); return; }
    char buf[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
        if (strtod(buf, NULL) == d) break;
    }
    /* buf: [-]D[.DDD]e[+-]XX */
    const char *p = buf;
    char digits[24];
    int nd = 0;
    bool neg = false;
    if (*p == '-') { neg = true; p++; }
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int e = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    int decpt = e + 1;
    char *o = out;
    if (neg) *o++ = '-';
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            *o++ = '0';
            *o++ = '.';
            for (int i = 0; i < -decpt; i++) *o++ = '0';
            for (int i = 0; i < nd; i++) *o++ = digits[i];
        } else if (decpt >= nd) {
            for (int i = 0; i < nd; i++) *o++ = digits[i];
            for (int i = nd; i < decpt; i++) *o++ = '0';
            *o++ = '.';
            *o++ = '0';
        } else {
            for (int i = 0; i < decpt; i++) *o++ = digits[i];
            *o++ = '.';
            for (int i = decpt; i < nd; i++) *o++ = digits[i];
        }
        *o = 0;
    } else {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            for (int i = 1; i < nd; i++) *o++ = digits[i];
        }
        snprintf(o, 32 - (size_t)(o - out), "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
}

static void dump_str(mstr *b, const char *s, size_t n) {
    ms_text(b, "\"", 1);
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char ubuf[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(ubuf, sizeof ubuf, "\\u%04x", c);
                esc = ubuf;
            }
        }
        if (esc) {
            ms_text(b, s + start, i - start);
            ms_cstr(b, esc);
            start = i + 1;
        }
    }
    ms_text(b, s + start, n - start);
    ms_text(b, "\"", 1);
}

static void dump_json(mstr *b, const json_t *v) {
    char buf[40];
    switch (json_typeof(v)) {
    case JSON_NULL: ms_cstr(b, "null"); break;
    case JSON_TRUE: ms_cstr(b, "true"); break;
    case JSON_FALSE: ms_cstr(b, "false"); break;
    case JSON_INTEGER:
        snprintf(buf, sizeof buf, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        ms_cstr(b, buf);
        break;
    case JSON_REAL:
        nf_py_float_repr(json_real_value(v), buf);
        ms_cstr(b, buf);
        break;
    case JSON_STRING: dump_str(b, json_string_value(v), json_string_length(v)); break;
    case JSON_ARRAY: {
        ms_text(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) ms_text(b, ", ", 2);
            dump_json(b, json_array_get(v, i));
        }
        ms_text(b, "]", 1);
        break;
    }
    case JSON_OBJECT: {
        ms_text(b, "{", 1);
        const char *k;
        json_t *x;
        bool first = true;
        json_object_foreach((json_t *)v, k, x) {
            if (!first) ms_text(b, ", ", 2);
            first = false;
            dump_str(b, k, strlen(k));
            ms_text(b, ": ", 2);
            dump_json(b, x);
        }
        ms_text(b, "}", 1);
        break;
    }
    }
}

char *nf_json_dumps_py(const json_t *v, size_t *len) {
    mstr b = {0};
    ms_reserve(&b, 0);
    b.s[0] = 0;
    dump_json(&b, v);
    free(b.m);
    if (len) *len = b.n;
    return b.s;
}

/* Python repr of a string (used only for str() of containers, an edge case of odd requests). */
static void py_repr_str(mstr *b, const char *s, size_t n) {
    char q = (memchr(s, '\'', n) && !memchr(s, '"', n)) ? '"' : '\'';
    ms_text(b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char e[8];
        if (c == '\\' || c == (unsigned char)q) { e[0] = '\\'; e[1] = (char)c; ms_text(b, e, 2); }
        else if (c == '\n') ms_cstr(b, "\\n");
        else if (c == '\r') ms_cstr(b, "\\r");
        else if (c == '\t') ms_cstr(b, "\\t");
        else if (c < 0x20 || c == 0x7f) { snprintf(e, sizeof e, "\\x%02x", c); ms_cstr(b, e); }
        else ms_text(b, (const char *)&s[i], 1);
    }
    ms_text(b, &q, 1);
}

static void py_repr(mstr *b, const json_t *v);

/* Python str(v): what Jinja prints for {{ v }}. */
static void py_str(mstr *b, const json_t *v) {
    if (!v) return; /* Undefined prints nothing */
    if (json_is_string(v)) ms_text(b, json_string_value(v), json_string_length(v));
    else py_repr(b, v);
}

static void py_repr(mstr *b, const json_t *v) {
    char buf[40];
    switch (json_typeof(v)) {
    case JSON_NULL: ms_cstr(b, "None"); break;
    case JSON_TRUE: ms_cstr(b, "True"); break;
    case JSON_FALSE: ms_cstr(b, "False"); break;
    case JSON_INTEGER:
        snprintf(buf, sizeof buf, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        ms_cstr(b, buf);
        break;
    case JSON_REAL:
        nf_py_float_repr(json_real_value(v), buf);
        if (!strcmp(buf, "NaN")) strcpy(buf, "nan");
        else if (!strcmp(buf, "Infinity")) strcpy(buf, "inf");
        else if (!strcmp(buf, "-Infinity")) strcpy(buf, "-inf");
        ms_cstr(b, buf);
        break;
    case JSON_STRING: py_repr_str(b, json_string_value(v), json_string_length(v)); break;
    case JSON_ARRAY:
        ms_text(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) ms_text(b, ", ", 2);
            py_repr(b, json_array_get(v, i));
        }
        ms_text(b, "]", 1);
        break;
    case JSON_OBJECT: {
        const char *k;
        json_t *x;
        bool first = true;
        ms_text(b, "{", 1);
        json_object_foreach((json_t *)v, k, x) {
            if (!first) ms_text(b, ", ", 2);
            first = false;
            py_repr_str(b, k, strlen(k));
            ms_text(b, ": ", 2);
            py_repr(b, x);
        }
        ms_text(b, "}", 1);
        break;
    }
    }
}

/* Python str.isspace() for one code point. */
static bool py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

static uint32_t cp_at(const unsigned char *p, size_t n, size_t *len) {
    unsigned char c = p[0];
    if (c < 0x80 || n < 2) { *len = 1; return c; }
    if ((c & 0xE0) == 0xC0) { *len = 2; return ((uint32_t)(c & 0x1F) << 6) | (p[1] & 0x3F); }
    if ((c & 0xF0) == 0xE0 && n >= 3) {
        *len = 3;
        return ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    }
    if ((c & 0xF8) == 0xF0 && n >= 4) {
        *len = 4;
        return ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(p[1] & 0x3F) << 12) | ((uint32_t)(p[2] & 0x3F) << 6) |
               (p[3] & 0x3F);
    }
    *len = 1;
    return c;
}

/* Python str.strip(): bounds [*a, *b) of s[0, n) without leading/trailing Unicode whitespace. Special
 * token bytes are never whitespace. */
static void py_strip(const mstr *s, size_t *a, size_t *b) {
    const unsigned char *p = (const unsigned char *)s->s;
    size_t i = 0, j = s->n, l;
    while (i < j && s->m[i] == 0 && py_space(cp_at(p + i, j - i, &l))) i += l;
    while (j > i) {
        size_t k = j - 1;
        while (k > i && (p[k] & 0xC0) == 0x80) k--;
        if (s->m[k] != 0 || !py_space(cp_at(p + k, j - k, &l))) break;
        j = k;
    }
    *a = i;
    *b = j;
}

/* Position of the first / last occurrence of needle in s[0, n) (only in text bytes), or -1. */
static long find_first(const mstr *s, const char *needle) {
    size_t l = strlen(needle);
    for (size_t i = 0; i + l <= s->n; i++)
        if (memcmp(s->s + i, needle, l) == 0) return (long)i;
    return -1;
}

static long find_last(const mstr *s, size_t n, const char *needle) {
    size_t l = strlen(needle);
    if (n < l) return -1;
    for (size_t i = n - l + 1; i-- > 0;)
        if (memcmp(s->s + i, needle, l) == 0) return (long)i;
    return -1;
}

/* ---- Jinja-like value helpers ----------------------------------------------------------------------- */

static json_t *get(const json_t *o, const char *k) { return json_is_object(o) ? json_object_get(o, k) : NULL; }

static bool truthy(const json_t *v) {
    if (!v) return false;
    switch (json_typeof(v)) {
    case JSON_NULL: case JSON_FALSE: return false;
    case JSON_TRUE: return true;
    case JSON_INTEGER: return json_integer_value(v) != 0;
    case JSON_REAL: return json_real_value(v) != 0.0;
    case JSON_STRING: return json_string_length(v) > 0;
    case JSON_ARRAY: return json_array_size(v) > 0;
    case JSON_OBJECT: return json_object_size(v) > 0;
    }
    return false;
}

static bool str_eq(const json_t *v, const char *s) {
    return json_is_string(v) && json_string_length(v) == strlen(s) && !memcmp(json_string_value(v), s, strlen(s));
}

static bool role_is(const json_t *m, const char *r) { return str_eq(get(m, "role"), r); }

/* ---- the renderer ----------------------------------------------------------------------------------- */

typedef struct {
    const json_t *msgs;
    size_t n;
    const json_t *tools;
    const nf_chat_opts *o;
    mstr out;
} R;

static void visible_text(mstr *b, const json_t *content) {
    if (!content || json_is_null(content)) return;
    if (json_is_string(content)) { py_str(b, content); return; }
    if (json_is_array(content)) {
        size_t i;
        json_t *it;
        json_array_foreach(content, i, it) {
            json_t *type = get(it, "type");
            if (json_is_object(it) && str_eq(type, "text")) py_str(b, get(it, "text"));
            else if (json_is_string(it)) py_str(b, it);
            else if (json_is_object(it) && (str_eq(type, "image") || str_eq(type, "image_url")))
                ms_lit(b, "<|begin_of_image|><|image|><|end_of_image|>");
            else if (json_is_object(it) && (str_eq(type, "video") || str_eq(type, "video_url")))
                ms_lit(b, "<|begin_of_video|><|video|><|end_of_video|>");
            else if (json_is_object(it) && (str_eq(type, "audio") || str_eq(type, "audio_url") ||
                                            str_eq(type, "input_audio")))
                ms_lit(b, "<|begin_of_audio|><|end_of_audio|>");
        }
        return;
    }
    py_str(b, content); /* a mapping or a scalar: Jinja prints str() of it */
}

static const json_t *unwrap_tool(const json_t *tool) {
    json_t *f = get(tool, "function");
    return f ? f : tool;
}

static void tool_to_json(mstr *b, const json_t *tool) {
    ms_text(b, "{", 1);
    const char *k;
    json_t *v;
    bool first = true;
    if (json_is_object(tool)) {
        json_object_foreach((json_t *)tool, k, v) {
            if (!strcmp(k, "defer_loading") || !strcmp(k, "strict")) continue;
            if (!first) ms_text(b, ", ", 2);
            first = false;
            ms_text(b, "\"", 1);
            ms_cstr(b, k);  /* the template prints the key raw */
            ms_text(b, "\": ", 3);
            dump_json(b, v);
        }
    }
    ms_text(b, "}", 1);
}

static void tool_references_to_response(R *r, mstr *b, const json_t *refs) {
    ms_lit(b, "<tool_response><tools>\n");
    size_t i, j;
    json_t *tr, *tool;
    json_array_foreach(refs, i, tr) {
        json_array_foreach(r->tools, j, tool) {
            const json_t *t = unwrap_tool(tool);
            json_t *a = get(t, "name"), *c = get(tr, "name");
            if ((a || c) && (a && c ? json_equal(a, c) : false)) {
                tool_to_json(b, t);
                ms_text(b, "\n", 1);
            } else if (!a && !c) { /* Undefined == Undefined is true in Jinja */
                tool_to_json(b, t);
                ms_text(b, "\n", 1);
            }
        }
    }
    ms_lit(b, "</tools></tool_response>");
}

static void tool_response(mstr *b, const mstr *text) {
    ms_lit(b, "<tool_response>");
    ms_slice(b, text, 0, text->n);
    ms_lit(b, "</tool_response>");
}

static bool is_tool_reference_list(const json_t *v) {
    return json_is_array(v) && json_array_size(v) > 0 && str_eq(get(json_array_get(v, 0), "type"), "tool_reference");
}

static bool is_list_of_outputs(const json_t *m) {
    const json_t *c = get(m, "content");
    return truthy(c) && json_is_array(c) && json_is_object(json_array_get(c, 0)) &&
           json_object_get(json_array_get(c, 0), "output") != NULL;
}

static void render_output_entry(R *r, mstr *b, const json_t *entry) {
    const json_t *out = get(entry, "output");
    if (is_tool_reference_list(out)) {
        tool_references_to_response(r, b, out);
    } else {
        mstr t = {0};
        visible_text(&t, out);
        tool_response(b, &t);
        ms_free(&t);
    }
}

static void render_tool_response(R *r, mstr *b, const json_t *m) {
    const json_t *c = get(m, "content");
    mstr t = {0};
    if (json_is_string(c)) {
        py_str(&t, c);
        tool_response(b, &t);
    } else if (truthy(c) && !json_is_object(c) && is_tool_reference_list(c)) {
        tool_references_to_response(r, b, c);
    } else if (is_list_of_outputs(m)) {
        size_t i;
        json_t *tr;
        json_array_foreach(c, i, tr) render_output_entry(r, b, tr);
    } else {
        visible_text(&t, c);
        tool_response(b, &t);
    }
    ms_free(&t);
}

/* id_of(obj): str(tool_call_id) if truthy, else str(id) if truthy, else "". Caller frees. */
static char *id_of(const json_t *o) {
    const json_t *v = get(o, "tool_call_id");
    if (!truthy(v)) v = get(o, "id");
    mstr b = {0};
    ms_reserve(&b, 0);
    b.s[0] = 0;
    if (truthy(v)) py_str(&b, v);
    free(b.m);
    return b.s;
}

static bool id_eq(const json_t *o, const char *target) {
    char *id = id_of(o);
    bool eq = strcmp(id, target) == 0;
    free(id);
    return eq;
}

static bool has_dup_result_id(R *r, size_t lo, size_t hi, const char *target) {
    int n = 0;
    for (size_t k = lo; k <= hi && n <= 1; k++) {
        const json_t *m = json_array_get(r->msgs, k);
        if (is_list_of_outputs(m)) {
            size_t i;
            json_t *e;
            json_array_foreach(get(m, "content"), i, e) if (id_eq(e, target)) n++;
        } else if (id_eq(m, target)) {
            n++;
        }
    }
    return n > 1;
}

static bool tc_id_exists(const json_t *tcs, const char *target) {
    size_t i;
    json_t *tc;
    json_array_foreach(tcs, i, tc) if (id_eq(tc, target)) return true;
    return false;
}

static bool result_id_ok(R *r, size_t lo, size_t hi, const json_t *tcs, const json_t *obj) {
    char *id = id_of(obj);
    bool ok = id[0] && !has_dup_result_id(r, lo, hi, id) && tc_id_exists(tcs, id);
    free(id);
    return ok;
}

static void render_tool_block(R *r, size_t start) {
    size_t end = start;
    for (size_t j = start; j < r->n; j++) {
        if (!role_is(json_array_get(r->msgs, j), "tool")) break;
        end = j;
    }
    const json_t *tcs = NULL;
    if (start > 0) {
        const json_t *prev = json_array_get(r->msgs, start - 1);
        if (role_is(prev, "assistant") && truthy(get(prev, "tool_calls"))) tcs = get(prev, "tool_calls");
    }
    bool can_sort = tcs != NULL && json_is_array(tcs);
    for (size_t k = start; can_sort && k <= end; k++) {
        const json_t *m = json_array_get(r->msgs, k);
        if (is_list_of_outputs(m)) {
            size_t i;
            json_t *e;
            json_array_foreach(get(m, "content"), i, e) {
                if (!result_id_ok(r, start, end, tcs, e)) { can_sort = false; break; }
            }
        } else if (!result_id_ok(r, start, end, tcs, m)) {
            can_sort = false;
        }
    }
    for (size_t i = 0; can_sort && i < json_array_size(tcs); i++) {
        char *id = id_of(json_array_get(tcs, i));
        if (!id[0]) can_sort = false;
        for (size_t j = i + 1; can_sort && j < json_array_size(tcs); j++)
            if (id_eq(json_array_get(tcs, j), id)) can_sort = false;
        free(id);
    }
    if (can_sort) {
        size_t i;
        json_t *tc;
        json_array_foreach(tcs, i, tc) {
            char *tc_id = id_of(tc);
            for (size_t k = start; k <= end; k++) {
                const json_t *m = json_array_get(r->msgs, k);
                if (is_list_of_outputs(m)) {
                    size_t q;
                    json_t *e;
                    json_array_foreach(get(m, "content"), q, e) if (id_eq(e, tc_id)) render_output_entry(r, &r->out, e);
                } else if (id_eq(m, tc_id)) {
                    render_tool_response(r, &r->out, m);
                }
            }
            free(tc_id);
        }
    } else {
        for (size_t k = start; k <= end; k++) render_tool_response(r, &r->out, json_array_get(r->msgs, k));
    }
}

static int render_tool_calls(R *r, const json_t *tcs) {
    size_t i;
    json_t *tc;
    json_array_foreach(tcs, i, tc) {
        const json_t *f = get(tc, "function");
        if (truthy(f)) tc = (json_t *)f;
        ms_lit(&r->out, "<tool_call>");
        py_str(&r->out, get(tc, "name"));
        json_t *args = get(tc, "arguments"), *parsed = NULL;
        if (json_is_string(args)) { /* OpenAI clients send arguments as a JSON string */
            json_error_t e;
            parsed = json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, &e);
            if (!json_is_object(parsed)) {
                json_decref(parsed);
                return nf_fail("tool call %zu: arguments are not a JSON object", i);
            }
            args = parsed;
        } else if (args && !json_is_object(args) && !json_is_null(args)) {
            return nf_fail("tool call %zu: arguments must be an object", i);
        }
        const char *k;
        json_t *v;
        if (args) {
            json_object_foreach(args, k, v) {
                ms_lit(&r->out, "<arg_key>");
                ms_cstr(&r->out, k);
                ms_lit(&r->out, "</arg_key><arg_value>");
                if (json_is_string(v)) ms_text(&r->out, json_string_value(v), json_string_length(v));
                else dump_json(&r->out, v);
                ms_lit(&r->out, "</arg_value>");
            }
        }
        json_decref(parsed);
        ms_lit(&r->out, "</tool_call>");
    }
    return 0;
}

static int render_assistant(R *r, const json_t *m, size_t idx, long last_user) {
    ms_lit(&r->out, "<|assistant|>");
    mstr content = {0}, reasoning = {0};
    ms_reserve(&content, 0);
    visible_text(&content, get(m, "content"));
    /* transformers aliases the first non-null of these to reasoning_content */
    const json_t *rc = NULL;
    static const char *const fields[] = {"reasoning_content", "thinking", "reasoning"};
    for (int f = 0; f < 3 && !rc; f++) {
        const json_t *v = get(m, fields[f]);
        if (v && !json_is_null(v)) rc = v;
    }
    bool have_reasoning = false;
    size_t c0 = 0, c1 = content.n;
    if (json_is_string(rc)) {
        ms_text(&reasoning, json_string_value(rc), json_string_length(rc));
        have_reasoning = true;
    } else if (find_first(&content, "</think>") >= 0) {
        size_t first_close = (size_t)find_first(&content, "</think>");
        long open = find_last(&content, first_close, "<think>");
        size_t r0 = open >= 0 ? (size_t)open + strlen("<think>") : 0;
        ms_slice(&reasoning, &content, r0, first_close - r0);
        have_reasoning = true;
        c0 = (size_t)find_last(&content, content.n, "</think>") + strlen("</think>");
    }
    ms_lit(&r->out, "<think>");
    if ((!r->o->clear_thinking || (long)idx > last_user) && have_reasoning) {
        ms_slice(&r->out, &reasoning, 0, reasoning.n);
    }
    ms_lit(&r->out, "</think>");
    mstr tail = {0};
    ms_reserve(&tail, 0);
    ms_slice(&tail, &content, c0, c1 - c0);
    size_t a, b;
    py_strip(&tail, &a, &b);
    if (b > a) ms_slice(&r->out, &tail, a, b - a);
    ms_free(&tail);
    ms_free(&content);
    ms_free(&reasoning);
    const json_t *tcs = get(m, "tool_calls");
    if (truthy(tcs)) {
        if (!json_is_array(tcs)) return nf_fail("message %zu: tool_calls must be an array", idx);
        if (render_tool_calls(r, tcs) < 0) return nf_fail_prefix("message %zu", idx);
    }
    return 0;
}

int nf_chat_render(const json_t *messages, const json_t *tools, const nf_chat_opts *opts, nf_prompt *out) {
    memset(out, 0, sizeof *out);
    nf_chat_opts def = nf_chat_opts_default();
    if (!opts) opts = &def;
    if (!json_is_array(messages)) return nf_fail("messages must be a JSON array");
    if (tools && !json_is_null(tools) && !json_is_array(tools)) return nf_fail("tools must be a JSON array");
    R r = {.msgs = messages, .n = json_array_size(messages), .tools = tools, .o = opts};
    for (size_t i = 0; i < r.n; i++)
        if (!json_is_object(json_array_get(messages, i))) return nf_fail("message %zu is not an object", i);
    if (tools) {
        for (size_t i = 0; i < json_array_size(tools); i++)
            if (!json_is_object(json_array_get(tools, i))) return nf_fail("tool %zu is not an object", i);
    }

    ms_lit(&r.out, "[gMASK]<sop><|system|>Reasoning Effort: ");
    const char *eff = opts->reasoning_effort;
    ms_cstr(&r.out, eff && !strcmp(eff, "low") ? "Low" : eff && !strcmp(eff, "high") ? "High" : "Max");
    if (truthy(tools)) {
        ms_lit(&r.out, "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                       "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n");
        size_t i;
        json_t *tool;
        json_array_foreach(tools, i, tool) {
            const json_t *t = unwrap_tool(tool);
            if (truthy(get(t, "defer_loading"))) continue;
            tool_to_json(&r.out, t);
            ms_text(&r.out, "\n", 1);
        }
        ms_lit(&r.out, "</tools>\n\nFor each function call, output the function name and arguments within the "
                       "following XML format:\n<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>"
                       "{arg-value-1}</arg_value><arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}"
                       "</arg_value>...</tool_call>");
    }
    long last_user = -1;
    for (size_t i = 0; i < r.n; i++)
        if (role_is(json_array_get(messages, i), "user")) last_user = (long)i;
    for (size_t i = 0; i < r.n; i++) {
        const json_t *m = json_array_get(messages, i);
        if (role_is(m, "user")) {
            ms_lit(&r.out, "<|user|>");
            visible_text(&r.out, get(m, "content"));
        } else if (role_is(m, "assistant")) {
            if (render_assistant(&r, m, i, last_user) < 0) { ms_free(&r.out); return -1; }
        } else if (role_is(m, "tool")) {
            if (i == 0 || !role_is(json_array_get(messages, i - 1), "tool")) {
                ms_lit(&r.out, "<|observation|>");
                render_tool_block(&r, i);
            }
        } else if (role_is(m, "system")) {
            ms_lit(&r.out, "<|system|>");
            visible_text(&r.out, get(m, "content"));
        }
    }
    if (opts->add_generation_prompt) {
        ms_lit(&r.out, "<|assistant|><think>");
        if (!opts->enable_thinking) ms_lit(&r.out, "</think>");
    }

    /* marks -> pieces */
    out->text = r.out.s;
    out->len = r.out.n;
    size_t cap = 16;
    out->pieces = nf_xmalloc(cap * sizeof *out->pieces);
    for (size_t i = 0; i < r.out.n;) {
        size_t j = i + 1;
        bool sp = r.out.m[i] != 0;
        if (sp) while (j < r.out.n && r.out.m[j] == 2) j++;
        else while (j < r.out.n && r.out.m[j] == 0) j++;
        if (out->n_pieces == cap) out->pieces = nf_xrealloc(out->pieces, (cap *= 2) * sizeof *out->pieces);
        out->pieces[out->n_pieces++] = (nf_prompt_piece){i, j - i, sp};
        i = j;
    }
    free(r.out.m);
    return 0;
}

void nf_prompt_free(nf_prompt *p) {
    free(p->text);
    free(p->pieces);
    memset(p, 0, sizeof *p);
}

int nf_prompt_tokenize(const nf_tokenizer *t, const nf_prompt *p, nf_tokens *out) {
    for (size_t i = 0; i < p->n_pieces; i++) {
        const nf_prompt_piece *pc = &p->pieces[i];
        const char *s = p->text + pc->off;
        bool sp = pc->special;
        if (nf_tokenize_pieces(t, 1, &s, &pc->len, &sp, out) < 0) return -1;
    }
    return 0;
}
