/* api_anthropic.c — Anthropic Messages responses: the message object and its stream
 *   message_start → (content_block_start → content_block_delta+ → content_block_stop)* → message_delta →
 *   message_stop, with `ping` events as keepalives.
 * Blocks: thinking {thinking, signature} (signature = the message id, as a placeholder clients echo back),
 * text, tool_use {id, name, input}. stop_reason: end_turn, max_tokens, stop_sequence, tool_use. Usage:
 * input_tokens counts the prompt tokens NOT read from the cache; cache_read_input_tokens the reused ones. */
#include <stdlib.h>
#include <string.h>

#include "server/api.h"

static const char *stop_reason(nf_finish f) {
    switch (f) {
    case NF_FIN_LENGTH: return "max_tokens";
    case NF_FIN_TOOL_CALLS: return "tool_use";
    case NF_FIN_STOP_SEQ: return "stop_sequence";
    default: return "end_turn";
    }
}

static json_t *usage(const nf_resp *r, const nf_job_result *res) {
    int64_t prompt = res ? res->prompt_tokens : r->prompt_tokens, cached = res ? res->cached_tokens : 0;
    return json_pack("{s:I,s:I,s:I,s:I}", "input_tokens", (json_int_t)(prompt - cached), "output_tokens",
                     (json_int_t)(res ? res->completion_tokens : 0), "cache_creation_input_tokens", (json_int_t)0,
                     "cache_read_input_tokens", (json_int_t)cached);
}

static json_t *block_json(const nf_resp *r, const nf_block *b) {
    switch (b->kind) {
    case NF_EV_REASONING:
        return json_pack("{s:s,s:o,s:s}", "type", "thinking", "thinking", nf_jstr(b->text.s, b->text.n), "signature", r->id);
    case NF_EV_TEXT:
        return json_pack("{s:s,s:o}", "type", "text", "text", nf_jstr(b->text.s, b->text.n));
    case NF_EV_TOOL_CALL:
        return json_pack("{s:s,s:s,s:s,s:O}", "type", "tool_use", "id", b->id, "name", b->name, "input", b->args);
    }
    return json_object();
}

void nf_anthropic_begin(nf_resp *r, nf_buf *out) {
    json_t *msg = json_pack("{s:s,s:s,s:s,s:s,s:[],s:n,s:n,s:o}", "id", r->id, "type", "message", "role", "assistant",
                            "model", r->req->model, "content", "stop_reason", "stop_sequence", "usage", usage(r, NULL));
    nf_sse_event(out, "message_start", json_pack("{s:s,s:o}", "type", "message_start", "message", msg));
}

static void close_block(nf_resp *r, int idx, nf_buf *out) {
    const nf_block *b = &r->blocks[idx];
    if (b->kind == NF_EV_TOOL_CALL) return; /* closed when it was sent */
    if (b->kind == NF_EV_REASONING)
        nf_sse_event(out, "content_block_delta",
                     json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_delta", "index", idx, "delta", "type",
                               "signature_delta", "signature", r->id));
    nf_sse_event(out, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", idx));
}

void nf_anthropic_event(nf_resp *r, const nf_ev *e, bool new_block, nf_buf *out) {
    int idx = r->n_blocks - (new_block ? 0 : 1);
    if (new_block) {
        if (r->n_blocks > 0) close_block(r, r->n_blocks - 1, out);
        json_t *cb;
        if (e->kind == NF_EV_REASONING)
            cb = json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "", "signature", "");
        else if (e->kind == NF_EV_TEXT)
            cb = json_pack("{s:s,s:s}", "type", "text", "text", "");
        else
            cb = json_pack("{s:s,s:s,s:s,s:{}}", "type", "tool_use", "id", e->id, "name", e->name, "input");
        nf_sse_event(out, "content_block_start",
                     json_pack("{s:s,s:i,s:o}", "type", "content_block_start", "index", idx, "content_block", cb));
    }
    json_t *d;
    if (e->kind == NF_EV_REASONING) {
        d = json_pack("{s:s,s:o}", "type", "thinking_delta", "thinking", nf_jstr(e->text, e->len));
    } else if (e->kind == NF_EV_TEXT) {
        d = json_pack("{s:s,s:o}", "type", "text_delta", "text", nf_jstr(e->text, e->len));
    } else {
        char *a = nf_json_compact(e->args);
        d = json_pack("{s:s,s:s}", "type", "input_json_delta", "partial_json", a);
        free(a);
    }
    nf_sse_event(out, "content_block_delta",
                 json_pack("{s:s,s:i,s:o}", "type", "content_block_delta", "index", idx, "delta", d));
    if (e->kind == NF_EV_TOOL_CALL)
        nf_sse_event(out, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", idx));
}

void nf_anthropic_end(nf_resp *r, const nf_job_result *res, nf_buf *out) {
    const char *sr = stop_reason(res->finish);
    json_t *ss = res->finish == NF_FIN_STOP_SEQ && res->stop_seq ? json_string(res->stop_seq) : json_null();
    if (!r->stream) {
        json_t *content = json_array();
        for (int i = 0; i < r->n_blocks; i++) json_array_append_new(content, block_json(r, &r->blocks[i]));
        if (!r->n_blocks) json_array_append_new(content, json_pack("{s:s,s:s}", "type", "text", "text", ""));
        json_t *msg = json_pack("{s:s,s:s,s:s,s:s,s:o,s:s,s:o,s:o}", "id", r->id, "type", "message", "role",
                                "assistant", "model", r->req->model, "content", content, "stop_reason", sr,
                                "stop_sequence", ss, "usage", usage(r, res));
        char *s = nf_json_compact(msg);
        nf_buf_str(out, s);
        free(s);
        json_decref(msg);
        return;
    }
    if (r->n_blocks > 0) {
        close_block(r, r->n_blocks - 1, out);
    } else {
        nf_sse_event(out, "content_block_start",
                     json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_start", "index", 0, "content_block",
                               "type", "text", "text", ""));
        nf_sse_event(out, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", 0));
    }
    nf_sse_event(out, "message_delta", json_pack("{s:s,s:{s:s,s:o},s:o}", "type", "message_delta", "delta",
                                                 "stop_reason", sr, "stop_sequence", ss, "usage", usage(r, res)));
    nf_sse_event(out, "message_stop", json_pack("{s:s}", "type", "message_stop"));
}
