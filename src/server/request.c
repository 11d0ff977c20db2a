/* request.c — request validation: Anthropic Messages, OpenAI Chat Completions and OpenAI Responses bodies into
 * one nf_srv_request (see request.h). Every check names the offending field with its JSON path. */
#include "server/request.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

int nf_srv_err(nf_srv_error *e, int status, const char *type, const char *param, const char *fmt, ...) {
    memset(e, 0, sizeof *e);
    e->status = status;
    snprintf(e->type, sizeof e->type, "%s", type ? type : "invalid_request_error");
    if (param) snprintf(e->param, sizeof e->param, "%s", param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    /* messages quote client input: keep them plain ASCII so any JSON encoder takes them */
    for (char *c = e->message; *c; c++)
        if ((unsigned char)*c >= 0x80 || (unsigned char)*c < 0x20) *c = '?';
    for (char *c = e->param; *c; c++)
        if ((unsigned char)*c >= 0x80 || (unsigned char)*c < 0x20) *c = '?';
    return -1;
}

#define BAD(...) nf_srv_err(e, 400, "invalid_request_error", NULL, __VA_ARGS__)

json_t *nf_req_load_json(const char *body, size_t len, nf_srv_error *e) {
    if (len == 0) {
        nf_srv_err(e, 400, "invalid_request_error", NULL, "request body is empty (expected a JSON object)");
        return NULL;
    }
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        nf_srv_err(e, 400, "invalid_request_error", NULL, "invalid JSON at line %d column %d: %s", je.line,
                   je.column, je.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        nf_srv_err(e, 400, "invalid_request_error", NULL, "request body must be a JSON object");
        return NULL;
    }
    return root;
}

bool nf_req_is_billing_header(const char *s, size_t n) {
    static const char pfx[] = "x-anthropic-billing-header";
    while (n && (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')) s++, n--;
    return n >= sizeof pfx - 1 && !memcmp(s, pfx, sizeof pfx - 1);
}

/* ---- small typed getters: each returns 0 (value or absent) or -1 with the error naming path.key ---- */

static const char *tname(const json_t *v) {
    if (!v) return "nothing";
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static int want(nf_srv_error *e, const char *path, const json_t *v, const char *what) {
    return nf_srv_err(e, 400, "invalid_request_error", path, "%s: expected %s, got %s", path, what, tname(v));
}

/* optional string; null counts as absent */
static int get_str(nf_srv_error *e, const json_t *o, const char *k, const char *path, const char **out) {
    json_t *v = json_object_get(o, k);
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return want(e, path, v, "a string");
    *out = json_string_value(v);
    return 0;
}

static int get_bool(nf_srv_error *e, const json_t *o, const char *k, const char *path, bool *out) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return want(e, path, v, "a boolean");
    *out = json_is_true(v);
    return 0;
}

static int get_num(nf_srv_error *e, const json_t *o, const char *k, const char *path, double lo, double hi,
                   bool *present, double *out) {
    json_t *v = json_object_get(o, k);
    *present = false;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return want(e, path, v, "a number");
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi)
        return nf_srv_err(e, 400, "invalid_request_error", path, "%s: %g is out of range [%g, %g]", path, d, lo, hi);
    *present = true;
    *out = d;
    return 0;
}

static int get_int(nf_srv_error *e, const json_t *o, const char *k, const char *path, int64_t lo, int64_t hi,
                   bool *present, int64_t *out) {
    json_t *v = json_object_get(o, k);
    *present = false;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return want(e, path, v, "an integer");
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return nf_srv_err(e, 400, "invalid_request_error", path, "%s: %lld is out of range [%lld, %lld]", path,
                          (long long)x, (long long)lo, (long long)hi);
    *present = true;
    *out = x;
    return 0;
}

static void pathf(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void pathf(char *buf, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

/* ---- common pieces ------------------------------------------------------------------------------------ */

static bool valid_tool_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 128) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.' || c == ':'))
            return false;
    }
    return true;
}

/* A JSON schema for a tool's input: an object; "type" (if given) "object"; "properties" (if given) an object
 * of objects; "required" (if given) an array of strings. */
static int check_schema(nf_srv_error *e, const json_t *s, const char *path) {
    char p[200];
    if (!json_is_object(s)) return want(e, path, s, "an object (a JSON schema)");
    json_t *t = json_object_get(s, "type");
    if (t && !(json_is_string(t) && !strcmp(json_string_value(t), "object"))) {
        pathf(p, sizeof p, "%s.type", path);
        return nf_srv_err(e, 400, "invalid_request_error", p, "%s: a tool's input schema must have type \"object\"", p);
    }
    json_t *props = json_object_get(s, "properties");
    if (props) {
        pathf(p, sizeof p, "%s.properties", path);
        if (!json_is_object(props)) return want(e, p, props, "an object");
        const char *k;
        json_t *v;
        json_object_foreach(props, k, v) {
            if (!json_is_object(v) && !json_is_boolean(v)) {
                pathf(p, sizeof p, "%s.properties.%s", path, k);
                return want(e, p, v, "an object (a JSON schema)");
            }
        }
    }
    json_t *req = json_object_get(s, "required");
    if (req) {
        pathf(p, sizeof p, "%s.required", path);
        if (!json_is_array(req)) return want(e, p, req, "an array of strings");
        size_t i;
        json_t *v;
        json_array_foreach(req, i, v) if (!json_is_string(v)) {
            pathf(p, sizeof p, "%s.required[%zu]", path, i);
            return want(e, p, v, "a string");
        }
    }
    return 0;
}

static json_t *make_tool(const char *name, const char *desc, const json_t *params) {
    json_t *f = json_object();
    json_object_set_new(f, "name", json_string(name));
    if (desc) json_object_set_new(f, "description", json_string(desc));
    json_object_set(f, "parameters", (json_t *)params);
    json_t *t = json_object();
    json_object_set_new(t, "type", json_string("function"));
    json_object_set_new(t, "function", f);
    return t;
}

static int add_stop(nf_srv_request *r, nf_srv_error *e, const json_t *v, const char *path) {
    if (!json_is_string(v)) return want(e, path, v, "a string");
    if (json_string_length(v) == 0)
        return nf_srv_err(e, 400, "invalid_request_error", path, "%s: a stop sequence may not be empty", path);
    if (r->n_stop == NF_MAX_STOP)
        return nf_srv_err(e, 400, "invalid_request_error", path, "%s: at most %d stop sequences", path, NF_MAX_STOP);
    r->stop[r->n_stop++] = nf_xstrdup(json_string_value(v));
    return 0;
}

static int parse_stop(nf_srv_request *r, nf_srv_error *e, const json_t *v, const char *field) {
    char p[64];
    if (!v || json_is_null(v)) return 0;
    if (json_is_string(v)) return add_stop(r, e, v, field);
    if (!json_is_array(v)) return want(e, field, v, "a string or an array of strings");
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s) {
        pathf(p, sizeof p, "%s[%zu]", field, i);
        if (add_stop(r, e, s, p) < 0) return -1;
    }
    return 0;
}

/* temperature / top_p / top_k / min_p / penalties / seed shared by the OpenAI APIs and Anthropic */
static int parse_sampling(nf_srv_request *r, nf_srv_error *e, const json_t *root) {
    bool has;
    double d;
    int64_t i;
    if (get_num(e, root, "temperature", "temperature", 0, 2, &has, &d) < 0) return -1;
    if (has) r->sp.temperature = (float)d;
    if (get_num(e, root, "top_p", "top_p", 0, 1, &has, &d) < 0) return -1;
    if (has) r->sp.top_p = (float)d;
    if (get_int(e, root, "top_k", "top_k", 0, 1 << 30, &has, &i) < 0) return -1;
    if (has) r->sp.top_k = (int)i;
    if (get_num(e, root, "min_p", "min_p", 0, 1, &has, &d) < 0) return -1;
    if (has) r->sp.min_p = (float)d;
    if (get_num(e, root, "presence_penalty", "presence_penalty", -2, 2, &has, &d) < 0) return -1;
    if (has) r->sp.presence_penalty = (float)d;
    if (get_num(e, root, "frequency_penalty", "frequency_penalty", -2, 2, &has, &d) < 0) return -1;
    if (has) r->sp.frequency_penalty = (float)d;
    if (get_num(e, root, "repetition_penalty", "repetition_penalty", 0.01, 10, &has, &d) < 0) return -1;
    if (has) r->sp.repetition_penalty = (float)d;
    json_t *seed = json_object_get(root, "seed");
    if (seed && !json_is_null(seed)) {
        if (!json_is_integer(seed)) return want(e, "seed", seed, "an integer");
        r->sp.seed = (uint64_t)json_integer_value(seed);
    }
    return 0;
}

static int parse_force(nf_srv_request *r, nf_srv_error *e, const json_t *root) {
    const char *s;
    if (get_str(e, root, "nf_force_output", "nf_force_output", &s) < 0) return -1;
    if (s) r->force_output = nf_xstrdup(s);
    return 0;
}

static void set_effort(nf_srv_request *r, const char *eff) {
    if (!eff) return;
    if (!strcmp(eff, "none") || !strcmp(eff, "minimal")) r->thinking = false;
    else if (!strcmp(eff, "low")) snprintf(r->effort, sizeof r->effort, "low");
    else if (!strcmp(eff, "medium") || !strcmp(eff, "high")) snprintf(r->effort, sizeof r->effort, "high");
}

static int check_effort(nf_srv_error *e, const char *eff, const char *path) {
    static const char *ok[] = {"none", "minimal", "low", "medium", "high", "xhigh", "max", NULL};
    if (!eff) return 0;
    for (int i = 0; ok[i]; i++)
        if (!strcmp(eff, ok[i])) return 0;
    return nf_srv_err(e, 400, "invalid_request_error", path,
                      "%s: unknown effort \"%.40s\" (none, minimal, low, medium, high, xhigh, max)", path, eff);
}

/* Text of a content value: a string, or an array of {type:"text"|"input_text"|"output_text", text} parts.
 * Appends to *buf. Other part types (images, documents) are refused: this model reads text only. */
static int content_text(nf_srv_error *e, const json_t *c, const char *path, char **buf, size_t *len, bool allow_null) {
    char p[200];
    if (!c || json_is_null(c)) {
        if (allow_null) return 0;
        return nf_srv_err(e, 400, "invalid_request_error", path, "%s: required", path);
    }
    if (json_is_string(c)) {
        size_t n = json_string_length(c);
        *buf = nf_xrealloc(*buf, *len + n + 1);
        memcpy(*buf + *len, json_string_value(c), n);
        *len += n;
        (*buf)[*len] = 0;
        return 0;
    }
    if (!json_is_array(c)) return want(e, path, c, "a string or an array of content parts");
    size_t i;
    json_t *part;
    json_array_foreach(c, i, part) {
        pathf(p, sizeof p, "%s[%zu]", path, i);
        if (!json_is_object(part)) return want(e, p, part, "an object");
        const char *type;
        char tp[220];
        pathf(tp, sizeof tp, "%s.type", p);
        if (get_str(e, part, "type", tp, &type) < 0) return -1;
        if (!type) return nf_srv_err(e, 400, "invalid_request_error", tp, "%s: required", tp);
        if (!strcmp(type, "text") || !strcmp(type, "input_text") || !strcmp(type, "output_text")) {
            json_t *t = json_object_get(part, "text");
            pathf(tp, sizeof tp, "%s.text", p);
            if (!json_is_string(t)) return want(e, tp, t, "a string");
            if (content_text(e, t, tp, buf, len, false) < 0) return -1;
        } else if (!strcmp(type, "refusal")) {
            json_t *t = json_object_get(part, "refusal");
            if (json_is_string(t) && content_text(e, t, p, buf, len, false) < 0) return -1;
        } else {
            return nf_srv_err(e, 400, "invalid_request_error", tp,
                              "%s: content type \"%.40s\" is not supported (this model reads text only)", tp, type);
        }
    }
    return 0;
}

static json_t *msg_new(const char *role) {
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string(role));
    return m;
}

static void msg_set_text(json_t *m, const char *key, const char *s, size_t n) {
    json_object_set_new(m, key, json_stringn(s ? s : "", s ? n : 0));
}

static json_t *tool_call_new(const char *id, const char *name, json_t *args_steal) {
    json_t *f = json_object();
    json_object_set_new(f, "name", json_string(name));
    json_object_set_new(f, "arguments", args_steal);
    json_t *tc = json_object();
    json_object_set_new(tc, "id", json_string(id));
    json_object_set_new(tc, "type", json_string("function"));
    json_object_set_new(tc, "function", f);
    return tc;
}

/* OpenAI-style arguments string → object (400 naming the field if it is not a JSON object) */
static json_t *parse_args_string(nf_srv_error *e, const json_t *v, const char *path) {
    if (json_is_object(v)) return json_deep_copy(v);
    if (!json_is_string(v)) {
        want(e, path, v, "a string holding a JSON object");
        return NULL;
    }
    json_error_t je;
    json_t *o = json_loadb(json_string_value(v), json_string_length(v), JSON_DECODE_ANY, &je);
    if (json_string_length(v) == 0) o = json_object();
    if (!json_is_object(o)) {
        json_decref(o);
        nf_srv_err(e, 400, "invalid_request_error", path, "%s: not a JSON object (%s)", path,
                   o ? "wrong type" : je.text);
        return NULL;
    }
    return o;
}

/* ---- Anthropic Messages ------------------------------------------------------------------------------- */

static int anthropic_system(nf_srv_request *r, nf_srv_error *e, const json_t *sys) {
    if (!sys || json_is_null(sys)) return 0;
    char *buf = NULL;
    size_t len = 0;
    char p[64];
    if (json_is_string(sys)) {
        const char *s = json_string_value(sys);
        size_t n = json_string_length(sys);
        if (nf_req_is_billing_header(s, n)) { /* a leading billing line: drop that line only */
            const char *nl = memchr(s, '\n', n);
            n = nl ? n - (size_t)(nl + 1 - s) : 0;
            s = nl ? nl + 1 : s;
        }
        if (n) {
            json_t *m = msg_new("system");
            msg_set_text(m, "content", s, n);
            json_array_append_new(r->messages, m);
        }
        return 0;
    }
    if (!json_is_array(sys)) return want(e, "system", sys, "a string or an array of text blocks");
    size_t i;
    json_t *b;
    bool any = false;
    json_array_foreach(sys, i, b) {
        pathf(p, sizeof p, "system[%zu]", i);
        if (!json_is_object(b)) {
            free(buf);
            return want(e, p, b, "an object");
        }
        const char *type, *text;
        char tp[80];
        pathf(tp, sizeof tp, "%s.type", p);
        if (get_str(e, b, "type", tp, &type) < 0) { free(buf); return -1; }
        if (!type || strcmp(type, "text")) {
            free(buf);
            return nf_srv_err(e, 400, "invalid_request_error", tp, "%s: system blocks must have type \"text\"", tp);
        }
        pathf(tp, sizeof tp, "%s.text", p);
        if (get_str(e, b, "text", tp, &text) < 0) { free(buf); return -1; }
        if (!text) { free(buf); return nf_srv_err(e, 400, "invalid_request_error", tp, "%s: required", tp); }
        size_t n = strlen(text);
        if (nf_req_is_billing_header(text, n)) continue;
        buf = nf_xrealloc(buf, len + n + 2);
        if (any) buf[len++] = '\n';
        memcpy(buf + len, text, n);
        len += n;
        buf[len] = 0;
        any = true;
    }
    if (any) {
        json_t *m = msg_new("system");
        msg_set_text(m, "content", buf, len);
        json_array_append_new(r->messages, m);
    }
    free(buf);
    return 0;
}

static int anthropic_tool_result_content(nf_srv_error *e, const json_t *c, const char *path, char **buf, size_t *len) {
    if (!c || json_is_null(c)) return 0;
    if (json_is_string(c)) return content_text(e, c, path, buf, len, true);
    if (!json_is_array(c)) return want(e, path, c, "a string or an array of blocks");
    size_t i;
    json_t *b;
    char p[220];
    json_array_foreach(c, i, b) {
        pathf(p, sizeof p, "%s[%zu]", path, i);
        if (!json_is_object(b)) return want(e, p, b, "an object");
        json_t *t = json_object_get(b, "type");
        if (json_is_string(t) && !strcmp(json_string_value(t), "text")) {
            json_t *tx = json_object_get(b, "text");
            char tp[240];
            pathf(tp, sizeof tp, "%s.text", p);
            if (!json_is_string(tx)) return want(e, tp, tx, "a string");
            if (*len) {
                *buf = nf_xrealloc(*buf, *len + 2);
                (*buf)[(*len)++] = '\n';
                (*buf)[*len] = 0;
            }
            if (content_text(e, tx, tp, buf, len, false) < 0) return -1;
        } else if (json_is_string(t) && !strcmp(json_string_value(t), "tool_reference")) {
            continue;
        } else {
            char tp[240];
            pathf(tp, sizeof tp, "%s.type", p);
            return nf_srv_err(e, 400, "invalid_request_error", tp, "%s: only text blocks are supported in tool results", tp);
        }
    }
    return 0;
}

static int anthropic_message(nf_srv_request *r, nf_srv_error *e, const json_t *m, size_t mi) {
    char p[96], bp[160], fp[200];
    pathf(p, sizeof p, "messages[%zu]", mi);
    if (!json_is_object(m)) return want(e, p, m, "an object");
    const char *role;
    pathf(bp, sizeof bp, "%s.role", p);
    if (get_str(e, m, "role", bp, &role) < 0) return -1;
    if (!role || (strcmp(role, "user") && strcmp(role, "assistant")))
        return nf_srv_err(e, 400, "invalid_request_error", bp, "%s: must be \"user\" or \"assistant\"", bp);
    bool user = !strcmp(role, "user");
    json_t *c = json_object_get(m, "content");
    pathf(bp, sizeof bp, "%s.content", p);
    if (!c) return nf_srv_err(e, 400, "invalid_request_error", bp, "%s: required", bp);
    if (json_is_string(c)) {
        json_t *o = msg_new(role);
        json_object_set(o, "content", c);
        json_array_append_new(r->messages, o);
        return 0;
    }
    if (!json_is_array(c)) return want(e, bp, c, "a string or an array of content blocks");
    char *text = NULL, *think = NULL;
    size_t tlen = 0, klen = 0;
    json_t *calls = json_array();
    size_t i;
    json_t *b;
    int rc = -1;
    json_array_foreach(c, i, b) {
        pathf(bp, sizeof bp, "%s.content[%zu]", p, i);
        if (!json_is_object(b)) { want(e, bp, b, "an object"); goto out; }
        const char *type;
        pathf(fp, sizeof fp, "%s.type", bp);
        if (get_str(e, b, "type", fp, &type) < 0) goto out;
        if (!type) { nf_srv_err(e, 400, "invalid_request_error", fp, "%s: required", fp); goto out; }
        if (!strcmp(type, "text")) {
            json_t *t = json_object_get(b, "text");
            pathf(fp, sizeof fp, "%s.text", bp);
            if (!json_is_string(t)) { want(e, fp, t, "a string"); goto out; }
            if (content_text(e, t, fp, &text, &tlen, false) < 0) goto out;
        } else if (!strcmp(type, "thinking") && !user) {
            json_t *t = json_object_get(b, "thinking");
            pathf(fp, sizeof fp, "%s.thinking", bp);
            if (!json_is_string(t)) { want(e, fp, t, "a string"); goto out; }
            if (content_text(e, t, fp, &think, &klen, false) < 0) goto out;
        } else if (!strcmp(type, "redacted_thinking")) {
            continue;
        } else if (!strcmp(type, "tool_use") && !user) {
            const char *id, *name;
            pathf(fp, sizeof fp, "%s.id", bp);
            if (get_str(e, b, "id", fp, &id) < 0) goto out;
            if (!id) { nf_srv_err(e, 400, "invalid_request_error", fp, "%s: required", fp); goto out; }
            pathf(fp, sizeof fp, "%s.name", bp);
            if (get_str(e, b, "name", fp, &name) < 0) goto out;
            if (!name || !*name) { nf_srv_err(e, 400, "invalid_request_error", fp, "%s: required", fp); goto out; }
            json_t *in = json_object_get(b, "input");
            pathf(fp, sizeof fp, "%s.input", bp);
            if (!json_is_object(in)) { want(e, fp, in, "an object"); goto out; }
            json_array_append_new(calls, tool_call_new(id, name, json_deep_copy(in)));
        } else if (!strcmp(type, "tool_result") && user) {
            const char *id;
            pathf(fp, sizeof fp, "%s.tool_use_id", bp);
            if (get_str(e, b, "tool_use_id", fp, &id) < 0) goto out;
            if (!id) { nf_srv_err(e, 400, "invalid_request_error", fp, "%s: required", fp); goto out; }
            bool is_err = false;
            pathf(fp, sizeof fp, "%s.is_error", bp);
            if (get_bool(e, b, "is_error", fp, &is_err) < 0) goto out;
            char *res = NULL;
            size_t rlen = 0;
            pathf(fp, sizeof fp, "%s.content", bp);
            if (anthropic_tool_result_content(e, json_object_get(b, "content"), fp, &res, &rlen) < 0) {
                free(res);
                goto out;
            }
            json_t *o = msg_new("tool");
            json_object_set_new(o, "tool_call_id", json_string(id));
            msg_set_text(o, "content", res, rlen);
            free(res);
            json_array_append_new(r->messages, o);
        } else {
            nf_srv_err(e, 400, "invalid_request_error", fp, "%s: block type \"%.40s\" is not supported in a%s message",
                       fp, type, user ? " user" : "n assistant");
            goto out;
        }
    }
    if (user) {
        if (text || !json_array_size(c)) {
            json_t *o = msg_new("user");
            msg_set_text(o, "content", text, tlen);
            json_array_append_new(r->messages, o);
        }
    } else {
        json_t *o = msg_new("assistant");
        msg_set_text(o, "content", text, tlen);
        if (think) msg_set_text(o, "reasoning_content", think, klen);
        if (json_array_size(calls)) json_object_set(o, "tool_calls", calls);
        json_array_append_new(r->messages, o);
    }
    rc = 0;
out:
    free(text);
    free(think);
    json_decref(calls);
    return rc;
}

static int parse_anthropic(nf_srv_request *r, nf_srv_error *e, const json_t *root) {
    bool has;
    int64_t i64;
    if (get_int(e, root, "max_tokens", "max_tokens", 1, INT32_MAX, &has, &i64) < 0) return -1;
    if (!has && !r->count_only) return nf_srv_err(e, 400, "invalid_request_error", "max_tokens", "max_tokens: required");
    if (has) r->max_tokens = i64;
    if (anthropic_system(r, e, json_object_get(root, "system")) < 0) return -1;
    json_t *msgs = json_object_get(root, "messages");
    if (!msgs) return nf_srv_err(e, 400, "invalid_request_error", "messages", "messages: required");
    if (!json_is_array(msgs)) return want(e, "messages", msgs, "an array");
    if (!json_array_size(msgs)) return nf_srv_err(e, 400, "invalid_request_error", "messages", "messages: at least one message is required");
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) if (anthropic_message(r, e, m, i) < 0) return -1;
    /* tools */
    json_t *tools = json_object_get(root, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) return want(e, "tools", tools, "an array");
        r->tools = json_array();
        json_t *t;
        char p[64], fp[96];
        json_array_foreach(tools, i, t) {
            pathf(p, sizeof p, "tools[%zu]", i);
            if (!json_is_object(t)) return want(e, p, t, "an object");
            const char *type, *name, *desc;
            pathf(fp, sizeof fp, "%s.type", p);
            if (get_str(e, t, "type", fp, &type) < 0) return -1;
            json_t *schema = json_object_get(t, "input_schema");
            if (type && strcmp(type, "custom") && !schema) continue; /* server tools (web_search_...): not ours */
            pathf(fp, sizeof fp, "%s.name", p);
            if (get_str(e, t, "name", fp, &name) < 0) return -1;
            if (!name || !valid_tool_name(name))
                return nf_srv_err(e, 400, "invalid_request_error", fp, "%s: a tool name of 1-128 characters [a-zA-Z0-9_.:-] is required", fp);
            pathf(fp, sizeof fp, "%s.description", p);
            if (get_str(e, t, "description", fp, &desc) < 0) return -1;
            pathf(fp, sizeof fp, "%s.input_schema", p);
            if (!schema) return nf_srv_err(e, 400, "invalid_request_error", fp, "%s: required", fp);
            if (check_schema(e, schema, fp) < 0) return -1;
            json_array_append_new(r->tools, make_tool(name, desc, schema));
        }
    }
    json_t *tc = json_object_get(root, "tool_choice");
    if (tc && !json_is_null(tc)) {
        if (!json_is_object(tc)) return want(e, "tool_choice", tc, "an object");
        const char *type;
        if (get_str(e, tc, "type", "tool_choice.type", &type) < 0) return -1;
        if (!type || (strcmp(type, "auto") && strcmp(type, "any") && strcmp(type, "tool") && strcmp(type, "none")))
            return nf_srv_err(e, 400, "invalid_request_error", "tool_choice.type", "tool_choice.type: must be auto, any, tool or none");
        if (!strcmp(type, "none")) r->tools_off = true;
    }
    json_t *ss = json_object_get(root, "stop_sequences");
    if (ss && !json_is_null(ss)) {
        if (!json_is_array(ss)) return want(e, "stop_sequences", ss, "an array of strings");
        if (parse_stop(r, e, ss, "stop_sequences") < 0) return -1;
    }
    if (parse_sampling(r, e, root) < 0) return -1;
    if (get_bool(e, root, "stream", "stream", &r->stream) < 0) return -1;
    json_t *th = json_object_get(root, "thinking");
    if (th && !json_is_null(th)) {
        if (!json_is_object(th)) return want(e, "thinking", th, "an object");
        const char *type;
        if (get_str(e, th, "type", "thinking.type", &type) < 0) return -1;
        if (!type || (strcmp(type, "enabled") && strcmp(type, "disabled") && strcmp(type, "adaptive")))
            return nf_srv_err(e, 400, "invalid_request_error", "thinking.type", "thinking.type: must be enabled, disabled or adaptive");
        if (get_int(e, th, "budget_tokens", "thinking.budget_tokens", 0, INT32_MAX, &has, &i64) < 0) return -1;
        r->thinking = strcmp(type, "disabled") != 0;
    }
    json_t *oc = json_object_get(root, "output_config");
    if (json_is_object(oc)) {
        const char *eff;
        if (get_str(e, oc, "effort", "output_config.effort", &eff) < 0) return -1;
        if (check_effort(e, eff, "output_config.effort") < 0) return -1;
        set_effort(r, eff);
    }
    json_t *md = json_object_get(root, "metadata");
    if (md && !json_is_null(md) && !json_is_object(md)) return want(e, "metadata", md, "an object");
    return 0;
}

/* ---- OpenAI Chat Completions -------------------------------------------------------------------------- */

static int openai_tools(nf_srv_request *r, nf_srv_error *e, const json_t *tools, bool flat) {
    if (!tools || json_is_null(tools)) return 0;
    if (!json_is_array(tools)) return want(e, "tools", tools, "an array");
    r->tools = json_array();
    size_t i;
    json_t *t;
    char p[64], fp[128];
    json_array_foreach(tools, i, t) {
        pathf(p, sizeof p, "tools[%zu]", i);
        if (!json_is_object(t)) return want(e, p, t, "an object");
        const char *type;
        pathf(fp, sizeof fp, "%s.type", p);
        if (get_str(e, t, "type", fp, &type) < 0) return -1;
        if (!type) return nf_srv_err(e, 400, "invalid_request_error", fp, "%s: required", fp);
        if (strcmp(type, "function")) {
            if (flat) continue; /* Responses built-in tools (web_search, local_shell, ...): not served here */
            return nf_srv_err(e, 400, "invalid_request_error", fp, "%s: only \"function\" tools are supported", fp);
        }
        const json_t *f = t;
        char base[80];
        if (flat) {
            pathf(base, sizeof base, "%s", p);
        } else {
            f = json_object_get(t, "function");
            pathf(base, sizeof base, "%s.function", p);
            if (!json_is_object(f)) return want(e, base, f, "an object");
        }
        const char *name, *desc;
        pathf(fp, sizeof fp, "%s.name", base);
        if (get_str(e, f, "name", fp, &name) < 0) return -1;
        if (!name || !valid_tool_name(name))
            return nf_srv_err(e, 400, "invalid_request_error", fp, "%s: a tool name of 1-128 characters [a-zA-Z0-9_.:-] is required", fp);
        pathf(fp, sizeof fp, "%s.description", base);
        if (get_str(e, f, "description", fp, &desc) < 0) return -1;
        json_t *params = json_object_get(f, "parameters");
        pathf(fp, sizeof fp, "%s.parameters", base);
        json_t *empty = NULL;
        if (!params || json_is_null(params)) params = empty = json_pack("{s:s,s:{}}", "type", "object", "properties");
        else if (check_schema(e, params, fp) < 0) return -1;
        json_array_append_new(r->tools, make_tool(name, desc, params));
        json_decref(empty);
    }
    return 0;
}

static int openai_tool_choice(nf_srv_request *r, nf_srv_error *e, const json_t *tc, bool responses) {
    if (!tc || json_is_null(tc)) return 0;
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (!strcmp(s, "none")) r->tools_off = true;
        else if (!strcmp(s, "auto")) ;
        else if (!strcmp(s, "required")) {
            if (responses)
                return nf_srv_err(e, 400, "invalid_request_error", "tool_choice",
                                  "tool_choice: \"required\" is not supported (no constrained decoding)");
        } else {
            return nf_srv_err(e, 400, "invalid_request_error", "tool_choice", "tool_choice: must be none, auto, required or an object");
        }
        return 0;
    }
    if (!json_is_object(tc)) return want(e, "tool_choice", tc, "a string or an object");
    if (responses)
        return nf_srv_err(e, 400, "invalid_request_error", "tool_choice", "tool_choice: forcing a tool is not supported");
    return 0;
}

static int chat_message(nf_srv_request *r, nf_srv_error *e, const json_t *m, size_t mi) {
    char p[64], fp[160];
    pathf(p, sizeof p, "messages[%zu]", mi);
    if (!json_is_object(m)) return want(e, p, m, "an object");
    const char *role;
    pathf(fp, sizeof fp, "%s.role", p);
    if (get_str(e, m, "role", fp, &role) < 0) return -1;
    if (!role) return nf_srv_err(e, 400, "invalid_request_error", fp, "%s: required", fp);
    bool sys = !strcmp(role, "system") || !strcmp(role, "developer");
    bool user = !strcmp(role, "user"), asst = !strcmp(role, "assistant"), tool = !strcmp(role, "tool");
    if (!sys && !user && !asst && !tool)
        return nf_srv_err(e, 400, "invalid_request_error", fp, "%s: must be system, developer, user, assistant or tool", fp);
    char *text = NULL;
    size_t len = 0;
    pathf(fp, sizeof fp, "%s.content", p);
    if (content_text(e, json_object_get(m, "content"), fp, &text, &len, asst) < 0) { free(text); return -1; }
    json_t *o = msg_new(sys ? "system" : role);
    msg_set_text(o, "content", text, len);
    free(text);
    if (tool) {
        const char *id;
        pathf(fp, sizeof fp, "%s.tool_call_id", p);
        if (get_str(e, m, "tool_call_id", fp, &id) < 0) { json_decref(o); return -1; }
        if (!id) { json_decref(o); return nf_srv_err(e, 400, "invalid_request_error", fp, "%s: required", fp); }
        json_object_set_new(o, "tool_call_id", json_string(id));
    }
    if (asst) {
        const char *rc;
        pathf(fp, sizeof fp, "%s.reasoning_content", p);
        if (get_str(e, m, "reasoning_content", fp, &rc) < 0) { json_decref(o); return -1; }
        if (!rc) {
            pathf(fp, sizeof fp, "%s.reasoning", p);
            if (get_str(e, m, "reasoning", fp, &rc) < 0) { json_decref(o); return -1; }
        }
        if (rc) json_object_set_new(o, "reasoning_content", json_string(rc));
        json_t *tcs = json_object_get(m, "tool_calls");
        if (tcs && !json_is_null(tcs)) {
            pathf(fp, sizeof fp, "%s.tool_calls", p);
            if (!json_is_array(tcs)) { json_decref(o); return want(e, fp, tcs, "an array"); }
            json_t *calls = json_array();
            size_t j;
            json_t *tc;
            json_array_foreach(tcs, j, tc) {
                char tp[200], xp[240];
                pathf(tp, sizeof tp, "%s.tool_calls[%zu]", p, j);
                const char *id = NULL, *name = NULL;
                json_t *f = json_object_get(tc, "function");
                int bad = 0;
                if (!json_is_object(tc)) bad = want(e, tp, tc, "an object");
                else if (pathf(xp, sizeof xp, "%s.id", tp), get_str(e, tc, "id", xp, &id) < 0) bad = -1;
                else if (!id) bad = nf_srv_err(e, 400, "invalid_request_error", xp, "%s: required", xp);
                else if (pathf(xp, sizeof xp, "%s.function", tp), !json_is_object(f)) bad = want(e, xp, f, "an object");
                else if (pathf(xp, sizeof xp, "%s.function.name", tp), get_str(e, f, "name", xp, &name) < 0) bad = -1;
                else if (!name || !*name) bad = nf_srv_err(e, 400, "invalid_request_error", xp, "%s: required", xp);
                json_t *args = NULL;
                if (!bad) {
                    pathf(xp, sizeof xp, "%s.function.arguments", tp);
                    args = parse_args_string(e, json_object_get(f, "arguments"), xp);
                    if (!args) bad = -1;
                }
                if (bad) { json_decref(calls); json_decref(o); return -1; }
                json_array_append_new(calls, tool_call_new(id, name, args));
            }
            if (json_array_size(calls)) json_object_set(o, "tool_calls", calls);
            json_decref(calls);
        }
    }
    json_array_append_new(r->messages, o);
    return 0;
}

static int parse_chat(nf_srv_request *r, nf_srv_error *e, const json_t *root) {
    json_t *msgs = json_object_get(root, "messages");
    if (!msgs) return nf_srv_err(e, 400, "invalid_request_error", "messages", "messages: required");
    if (!json_is_array(msgs)) return want(e, "messages", msgs, "an array");
    if (!json_array_size(msgs)) return nf_srv_err(e, 400, "invalid_request_error", "messages", "messages: at least one message is required");
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) if (chat_message(r, e, m, i) < 0) return -1;
    if (openai_tools(r, e, json_object_get(root, "tools"), false) < 0) return -1;
    if (openai_tool_choice(r, e, json_object_get(root, "tool_choice"), false) < 0) return -1;
    bool has;
    int64_t v;
    if (get_int(e, root, "max_tokens", "max_tokens", 1, INT32_MAX, &has, &v) < 0) return -1;
    if (has) r->max_tokens = v;
    if (get_int(e, root, "max_completion_tokens", "max_completion_tokens", 1, INT32_MAX, &has, &v) < 0) return -1;
    if (has) r->max_tokens = v;
    if (get_int(e, root, "n", "n", 1, 1, &has, &v) < 0) return -1;
    if (parse_stop(r, e, json_object_get(root, "stop"), "stop") < 0) return -1;
    if (parse_sampling(r, e, root) < 0) return -1;
    if (get_bool(e, root, "stream", "stream", &r->stream) < 0) return -1;
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return want(e, "stream_options", so, "an object");
        if (get_bool(e, so, "include_usage", "stream_options.include_usage", &r->include_usage) < 0) return -1;
    }
    const char *eff;
    if (get_str(e, root, "reasoning_effort", "reasoning_effort", &eff) < 0) return -1;
    if (check_effort(e, eff, "reasoning_effort") < 0) return -1;
    set_effort(r, eff);
    bool think = true;
    json_t *thv = json_object_get(root, "think");
    if (thv && !json_is_null(thv)) {
        if (get_bool(e, root, "think", "think", &think) < 0) return -1;
        r->thinking = think;
    }
    json_t *kw = json_object_get(root, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw)) return want(e, "chat_template_kwargs", kw, "an object");
        json_t *et = json_object_get(kw, "enable_thinking");
        if (et) {
            if (!json_is_boolean(et)) return want(e, "chat_template_kwargs.enable_thinking", et, "a boolean");
            r->thinking = json_is_true(et);
        }
    }
    json_t *rf = json_object_get(root, "response_format");
    if (rf && !json_is_null(rf)) {
        if (!json_is_object(rf)) return want(e, "response_format", rf, "an object");
        const char *t;
        if (get_str(e, rf, "type", "response_format.type", &t) < 0) return -1;
        if (!t || strcmp(t, "text"))
            return nf_srv_err(e, 400, "invalid_request_error", "response_format.type",
                              "response_format.type: only \"text\" is supported (no constrained decoding)");
    }
    return 0;
}

/* ---- OpenAI Responses --------------------------------------------------------------------------------- */

static int parse_responses(nf_srv_request *r, nf_srv_error *e, const json_t *root) {
    const char *instr;
    if (get_str(e, root, "instructions", "instructions", &instr) < 0) return -1;
    if (instr) {
        r->instructions = nf_xstrdup(instr);
        json_t *m = msg_new("system");
        json_object_set_new(m, "content", json_string(instr));
        json_array_append_new(r->messages, m);
    }
    json_t *prev = json_object_get(root, "previous_response_id");
    if (prev && !json_is_null(prev))
        return nf_srv_err(e, 400, "invalid_request_error", "previous_response_id",
                          "previous_response_id: responses are not stored; send the full input");
    json_t *conv = json_object_get(root, "conversation");
    if (conv && !json_is_null(conv))
        return nf_srv_err(e, 400, "invalid_request_error", "conversation",
                          "conversation: conversations are not stored; send the full input");
    json_t *in = json_object_get(root, "input");
    if (!in) return nf_srv_err(e, 400, "invalid_request_error", "input", "input: required");
    if (json_is_string(in)) {
        json_t *m = msg_new("user");
        json_object_set(m, "content", in);
        json_array_append_new(r->messages, m);
    } else if (json_is_array(in)) {
        size_t i;
        json_t *it;
        char *pending_reasoning = NULL;
        size_t prlen = 0;
        json_array_foreach(in, i, it) {
            char p[64], fp[128];
            pathf(p, sizeof p, "input[%zu]", i);
            if (!json_is_object(it)) { free(pending_reasoning); return want(e, p, it, "an object"); }
            const char *type, *role;
            pathf(fp, sizeof fp, "%s.type", p);
            if (get_str(e, it, "type", fp, &type) < 0) { free(pending_reasoning); return -1; }
            pathf(fp, sizeof fp, "%s.role", p);
            if (get_str(e, it, "role", fp, &role) < 0) { free(pending_reasoning); return -1; }
            if (!type && role) type = "message";
            if (!type) { free(pending_reasoning); return nf_srv_err(e, 400, "invalid_request_error", fp, "%s.type: required", p); }
            json_t *last = json_array_size(r->messages) ? json_array_get(r->messages, json_array_size(r->messages) - 1) : NULL;
            bool last_asst = last && !strcmp(json_string_value(json_object_get(last, "role")), "assistant");
            if (!strcmp(type, "message")) {
                if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") && strcmp(role, "developer"))) {
                    free(pending_reasoning);
                    return nf_srv_err(e, 400, "invalid_request_error", fp, "%s: must be user, assistant, system or developer", fp);
                }
                char *text = NULL;
                size_t len = 0;
                pathf(fp, sizeof fp, "%s.content", p);
                if (content_text(e, json_object_get(it, "content"), fp, &text, &len, false) < 0) {
                    free(text);
                    free(pending_reasoning);
                    return -1;
                }
                bool asst = !strcmp(role, "assistant");
                if (asst && last_asst && !json_object_get(last, "tool_calls")) { /* continue the assistant turn */
                    const char *old = json_string_value(json_object_get(last, "content"));
                    size_t on = old ? strlen(old) : 0;
                    char *cat = nf_xmalloc(on + len + 1);
                    memcpy(cat, old ? old : "", on);
                    memcpy(cat + on, text ? text : "", len);
                    json_object_set_new(last, "content", json_stringn(cat, on + len));
                    free(cat);
                } else {
                    json_t *m = msg_new(!strcmp(role, "developer") ? "system" : role);
                    msg_set_text(m, "content", text, len);
                    if (asst && pending_reasoning) {
                        msg_set_text(m, "reasoning_content", pending_reasoning, prlen);
                        free(pending_reasoning);
                        pending_reasoning = NULL;
                        prlen = 0;
                    }
                    json_array_append_new(r->messages, m);
                }
                free(text);
            } else if (!strcmp(type, "reasoning")) {
                json_t *sum = json_object_get(it, "summary");
                json_t *cont = json_object_get(it, "content");
                pathf(fp, sizeof fp, "%s.summary", p);
                if (sum && !json_is_null(sum) && !json_is_array(sum)) { free(pending_reasoning); return want(e, fp, sum, "an array"); }
                const json_t *src = json_is_array(cont) && json_array_size(cont) ? cont : sum;
                size_t j;
                json_t *s;
                if (json_is_array(src)) json_array_foreach(src, j, s) {
                    json_t *t = json_object_get(s, "text");
                    if (json_is_string(t)) {
                        size_t n = json_string_length(t);
                        pending_reasoning = nf_xrealloc(pending_reasoning, prlen + n + 1);
                        memcpy(pending_reasoning + prlen, json_string_value(t), n);
                        prlen += n;
                        pending_reasoning[prlen] = 0;
                    }
                }
            } else if (!strcmp(type, "function_call")) {
                const char *id, *name;
                pathf(fp, sizeof fp, "%s.call_id", p);
                if (get_str(e, it, "call_id", fp, &id) < 0) { free(pending_reasoning); return -1; }
                if (!id) { free(pending_reasoning); return nf_srv_err(e, 400, "invalid_request_error", fp, "%s: required", fp); }
                pathf(fp, sizeof fp, "%s.name", p);
                if (get_str(e, it, "name", fp, &name) < 0) { free(pending_reasoning); return -1; }
                if (!name || !*name) { free(pending_reasoning); return nf_srv_err(e, 400, "invalid_request_error", fp, "%s: required", fp); }
                pathf(fp, sizeof fp, "%s.arguments", p);
                json_t *args = parse_args_string(e, json_object_get(it, "arguments"), fp);
                if (!args) { free(pending_reasoning); return -1; }
                json_t *m = last;
                if (!last_asst) {
                    m = msg_new("assistant");
                    json_object_set_new(m, "content", json_string(""));
                    if (pending_reasoning) {
                        msg_set_text(m, "reasoning_content", pending_reasoning, prlen);
                        free(pending_reasoning);
                        pending_reasoning = NULL;
                        prlen = 0;
                    }
                    json_array_append_new(r->messages, m);
                }
                json_t *calls = json_object_get(m, "tool_calls");
                if (!calls) {
                    calls = json_array();
                    json_object_set_new(m, "tool_calls", calls);
                }
                json_array_append_new(calls, tool_call_new(id, name, args));
            } else if (!strcmp(type, "function_call_output")) {
                const char *id;
                pathf(fp, sizeof fp, "%s.call_id", p);
                if (get_str(e, it, "call_id", fp, &id) < 0) { free(pending_reasoning); return -1; }
                if (!id) { free(pending_reasoning); return nf_srv_err(e, 400, "invalid_request_error", fp, "%s: required", fp); }
                char *text = NULL;
                size_t len = 0;
                pathf(fp, sizeof fp, "%s.output", p);
                if (content_text(e, json_object_get(it, "output"), fp, &text, &len, false) < 0) {
                    free(text);
                    free(pending_reasoning);
                    return -1;
                }
                json_t *m = msg_new("tool");
                json_object_set_new(m, "tool_call_id", json_string(id));
                msg_set_text(m, "content", text, len);
                free(text);
                json_array_append_new(r->messages, m);
            } else {
                /* other item types (item_reference, built-in tool calls): nothing this model can use */
            }
        }
        free(pending_reasoning);
    } else {
        return want(e, "input", in, "a string or an array of items");
    }
    if (!json_array_size(r->messages)) return nf_srv_err(e, 400, "invalid_request_error", "input", "input: empty");
    if (openai_tools(r, e, json_object_get(root, "tools"), true) < 0) return -1;
    if (openai_tool_choice(r, e, json_object_get(root, "tool_choice"), true) < 0) return -1;
    bool has;
    int64_t v;
    if (get_int(e, root, "max_output_tokens", "max_output_tokens", 1, INT32_MAX, &has, &v) < 0) return -1;
    if (has) r->max_tokens = v;
    if (parse_sampling(r, e, root) < 0) return -1;
    if (get_bool(e, root, "stream", "stream", &r->stream) < 0) return -1;
    json_t *rs = json_object_get(root, "reasoning");
    if (rs && !json_is_null(rs)) {
        if (!json_is_object(rs)) return want(e, "reasoning", rs, "an object");
        const char *eff;
        if (get_str(e, rs, "effort", "reasoning.effort", &eff) < 0) return -1;
        if (check_effort(e, eff, "reasoning.effort") < 0) return -1;
        set_effort(r, eff);
    }
    json_t *md = json_object_get(root, "metadata");
    if (md && !json_is_null(md)) {
        if (!json_is_object(md)) return want(e, "metadata", md, "an object");
        r->metadata = json_incref(md);
    }
    json_t *tx = json_object_get(root, "text");
    if (tx && !json_is_null(tx)) {
        if (!json_is_object(tx)) return want(e, "text", tx, "an object");
        json_t *fmt = json_object_get(tx, "format");
        if (fmt && !json_is_null(fmt)) {
            if (!json_is_object(fmt)) return want(e, "text.format", fmt, "an object");
            const char *t;
            if (get_str(e, fmt, "type", "text.format.type", &t) < 0) return -1;
            if (t && strcmp(t, "text"))
                return nf_srv_err(e, 400, "invalid_request_error", "text.format.type",
                                  "text.format.type: only \"text\" is supported (no constrained decoding)");
        }
    }
    return 0;
}

/* ---- entry ---------------------------------------------------------------------------------------------- */

int nf_req_parse(nf_api api, const char *body, size_t len, bool count_only, nf_srv_request *r, nf_srv_error *e) {
    memset(r, 0, sizeof *r);
    r->api = api;
    r->count_only = count_only;
    r->sp = nf_sampler_defaults();
    r->sp.seed = 0;
    r->thinking = true;
    r->messages = json_array();
    json_t *root = nf_req_load_json(body, len, e);
    if (!root) {
        nf_req_free(r);
        return -1;
    }
    const char *model;
    int rc = -1;
    if (get_str(e, root, "model", "model", &model) < 0) goto out;
    if (!model && api != NF_API_RESPONSES && !count_only) {
        nf_srv_err(e, 400, "invalid_request_error", "model", "model: required");
        goto out;
    }
    if (model && (!*model || strlen(model) > 256)) {
        nf_srv_err(e, 400, "invalid_request_error", "model", "model: must be 1-256 characters");
        goto out;
    }
    r->model = nf_xstrdup(model ? model : "");
    if (parse_force(r, e, root) < 0) goto out;
    switch (api) {
    case NF_API_ANTHROPIC: rc = parse_anthropic(r, e, root); break;
    case NF_API_CHAT: rc = parse_chat(r, e, root); break;
    case NF_API_RESPONSES: rc = parse_responses(r, e, root); break;
    }
out:
    json_decref(root);
    if (rc < 0) nf_req_free(r);
    return rc;
}

void nf_req_free(nf_srv_request *r) {
    free(r->model);
    json_decref(r->messages);
    json_decref(r->tools);
    json_decref(r->metadata);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->force_output);
    free(r->instructions);
    memset(r, 0, sizeof *r);
}
