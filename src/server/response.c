/* response.c — the API-independent part of answering a request (see api.h): grouping events into content
 * blocks, dispatching to the API's formatter, error bodies, ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "server/api.h"
#include "util/error.h"

void nf_random_id(char *out, size_t cap, const char *prefix) {
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char rnd[24];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        unsigned long x = (unsigned long)time(NULL) ^ (unsigned long)(size_t)out;
        for (size_t i = 0; i < sizeof rnd; i++) rnd[i] = (unsigned char)((x >> (i % 8 * 8)) + i * 37);
    }
    size_t n = strlen(prefix);
    if (n + sizeof rnd + 1 > cap) n = 0;
    memcpy(out, prefix, n);
    for (size_t i = 0; i < sizeof rnd && n + i + 1 < cap; i++) out[n + i] = al[rnd[i] % 62];
    out[n + sizeof rnd < cap ? n + sizeof rnd : cap - 1] = 0;
}

void nf_resp_init(nf_resp *r, const nf_srv_request *req, int64_t prompt_tokens) {
    memset(r, 0, sizeof *r);
    r->api = req->api;
    r->stream = req->stream;
    r->req = req;
    r->created = (int64_t)time(NULL);
    r->prompt_tokens = prompt_tokens;
    nf_random_id(r->id, sizeof r->id, r->api == NF_API_ANTHROPIC ? "msg_" : r->api == NF_API_CHAT ? "chatcmpl-" : "resp_");
}

void nf_resp_free(nf_resp *r) {
    for (int i = 0; i < r->n_blocks; i++) {
        nf_buf_free(&r->blocks[i].text);
        free(r->blocks[i].id);
        free(r->blocks[i].name);
        json_decref(r->blocks[i].args);
    }
    free(r->blocks);
    memset(r, 0, sizeof *r);
}

void nf_resp_begin(nf_resp *r, nf_buf *out) {
    if (!r->stream) return;
    switch (r->api) {
    case NF_API_ANTHROPIC: nf_anthropic_begin(r, out); break;
    case NF_API_CHAT: nf_chat_begin(r, out); break;
    case NF_API_RESPONSES: nf_responses_begin(r, out); break;
    }
}

void nf_resp_event(nf_resp *r, const nf_ev *e, nf_buf *out) {
    bool new_block = !(r->n_blocks > 0 && e->kind != NF_EV_TOOL_CALL && r->blocks[r->n_blocks - 1].kind == e->kind);
    if (r->stream) {
        switch (r->api) {
        case NF_API_ANTHROPIC: nf_anthropic_event(r, e, new_block, out); break;
        case NF_API_CHAT: nf_chat_event(r, e, new_block, out); break;
        case NF_API_RESPONSES: break; /* after the block exists (below) */
        }
    }
    if (new_block) {
        if (r->n_blocks == r->cap) {
            r->cap = r->cap ? r->cap * 2 : 8;
            r->blocks = nf_xrealloc(r->blocks, (size_t)r->cap * sizeof *r->blocks);
        }
        nf_block *b = &r->blocks[r->n_blocks++];
        memset(b, 0, sizeof *b);
        b->kind = e->kind;
        if (e->kind == NF_EV_TOOL_CALL) {
            b->id = nf_xstrdup(e->id);
            b->name = nf_xstrdup(e->name);
            b->args = json_incref(e->args);
            char *a = nf_json_compact(e->args);
            nf_buf_str(&b->text, a);
            free(a);
            r->n_tools++;
        }
        nf_random_id(b->item_id, sizeof b->item_id,
                     e->kind == NF_EV_REASONING ? "rs_" : e->kind == NF_EV_TEXT ? "msg_" : "fc_");
    }
    if (e->kind != NF_EV_TOOL_CALL) nf_buf_add(&r->blocks[r->n_blocks - 1].text, e->text, e->len);
    if (r->stream && r->api == NF_API_RESPONSES) nf_responses_event(r, e, new_block, out);
}

void nf_resp_end(nf_resp *r, const nf_job_result *res, nf_buf *out) {
    if (r->ended) return;
    r->ended = true;
    switch (r->api) {
    case NF_API_ANTHROPIC: nf_anthropic_end(r, res, out); break;
    case NF_API_CHAT: nf_chat_end(r, res, out); break;
    case NF_API_RESPONSES: nf_responses_end(r, res, out); break;
    }
}

void nf_resp_keepalive(nf_resp *r, nf_buf *out) {
    if (r->api == NF_API_ANTHROPIC) nf_sse_event(out, "ping", json_pack("{s:s}", "type", "ping"));
    else nf_sse_comment(out, "keepalive");
}

void nf_resp_stream_error(nf_resp *r, const char *msg, nf_buf *out) {
    r->ended = true;
    if (r->api == NF_API_ANTHROPIC) {
        nf_sse_event(out, "error", json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", "api_error",
                                             "message", msg));
    } else if (r->api == NF_API_RESPONSES) {
        nf_responses_error(r, msg, out);
    } else {
        nf_sse_event(out, NULL, json_pack("{s:{s:s,s:s,s:n,s:n}}", "error", "message", msg, "type", "server_error",
                                          "param", "code"));
        nf_sse_data_raw(out, "[DONE]");
    }
}

const char *nf_finish_openai(nf_finish f) {
    switch (f) {
    case NF_FIN_LENGTH: return "length";
    case NF_FIN_TOOL_CALLS: return "tool_calls";
    default: return "stop";
    }
}

char *nf_error_json(nf_api api, const nf_srv_error *e) {
    json_t *o;
    if (api == NF_API_ANTHROPIC) {
        o = json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", e->type, "message", e->message);
    } else {
        o = json_pack("{s:{s:s,s:s,s:o,s:o}}", "error", "message", e->message, "type", e->type, "param",
                      e->param[0] ? json_string(e->param) : json_null(), "code",
                      e->code[0] ? json_string(e->code) : json_null());
    }
    if (e->n_prompt_tokens > 0 && e->n_ctx > 0) {
        json_t *err = json_object_get(o, "error");
        json_object_set_new(err, "n_prompt_tokens", json_integer((json_int_t)e->n_prompt_tokens));
        json_object_set_new(err, "n_ctx", json_integer((json_int_t)e->n_ctx));
    }
    char *s = nf_json_compact(o);
    json_decref(o);
    return s;
}
