/* api_openai_chat.c — OpenAI Chat Completions responses: chat.completion, and its stream of
 * chat.completion.chunk objects (same id/created on every chunk): a role chunk first, reasoning in
 * delta.reasoning_content, text in delta.content, tool calls as a header delta (index, id, type, name) then the
 * arguments, a final chunk with finish_reason, an optional usage chunk (choices: []), then `data: [DONE]`. */
#include <stdlib.h>
#include <string.h>

#include "server/api.h"

static json_t *usage(const nf_job_result *res) {
    return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)res->prompt_tokens, "completion_tokens",
                     (json_int_t)res->completion_tokens, "total_tokens",
                     (json_int_t)(res->prompt_tokens + res->completion_tokens), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)res->cached_tokens);
}

static json_t *chunk(const nf_resp *r, json_t *delta, const char *finish) {
    return json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:o}]}", "id", r->id, "object", "chat.completion.chunk", "created",
                     (json_int_t)r->created, "model", r->req->model, "choices", "index", 0, "delta", delta,
                     "finish_reason", finish ? json_string(finish) : json_null());
}

void nf_chat_begin(nf_resp *r, nf_buf *out) {
    nf_sse_event(out, NULL, chunk(r, json_pack("{s:s,s:s}", "role", "assistant", "content", ""), NULL));
}

void nf_chat_event(nf_resp *r, const nf_ev *e, bool new_block, nf_buf *out) {
    (void)new_block;
    if (e->kind == NF_EV_REASONING) {
        nf_sse_event(out, NULL, chunk(r, json_pack("{s:o}", "reasoning_content", nf_jstr(e->text, e->len)), NULL));
    } else if (e->kind == NF_EV_TEXT) {
        nf_sse_event(out, NULL, chunk(r, json_pack("{s:o}", "content", nf_jstr(e->text, e->len)), NULL));
    } else {
        int idx = r->n_tools;
        nf_sse_event(out, NULL, chunk(r, json_pack("{s:[{s:i,s:s,s:s,s:{s:s,s:s}}]}", "tool_calls", "index", idx, "id",
                                                   e->id, "type", "function", "function", "name", e->name, "arguments", ""),
                                      NULL));
        char *a = nf_json_compact(e->args);
        nf_sse_event(out, NULL,
                     chunk(r, json_pack("{s:[{s:i,s:{s:s}}]}", "tool_calls", "index", idx, "function", "arguments", a), NULL));
        free(a);
    }
}

void nf_chat_end(nf_resp *r, const nf_job_result *res, nf_buf *out) {
    const char *fin = nf_finish_openai(res->finish);
    if (r->stream) {
        nf_sse_event(out, NULL, chunk(r, json_object(), fin));
        if (r->req->include_usage)
            nf_sse_event(out, NULL, json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", r->id, "object", "chat.completion.chunk",
                                              "created", (json_int_t)r->created, "model", r->req->model, "choices",
                                              "usage", usage(res)));
        nf_sse_data_raw(out, "[DONE]");
        return;
    }
    nf_buf text = {0}, reasoning = {0};
    json_t *calls = json_array();
    for (int i = 0; i < r->n_blocks; i++) {
        const nf_block *b = &r->blocks[i];
        if (b->kind == NF_EV_TEXT) nf_buf_add(&text, b->text.s, b->text.n);
        else if (b->kind == NF_EV_REASONING) nf_buf_add(&reasoning, b->text.s, b->text.n);
        else
            json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s,s:s%}}", "id", b->id, "type", "function", "function",
                                                   "name", b->name, "arguments", b->text.s ? b->text.s : "{}",
                                                   b->text.n));
    }
    json_t *msg = json_pack("{s:s,s:o}", "role", "assistant", "content",
                            text.n || !json_array_size(calls) ? nf_jstr(text.s, text.n) : json_null());
    if (reasoning.n) json_object_set_new(msg, "reasoning_content", nf_jstr(reasoning.s, reasoning.n));
    if (json_array_size(calls)) json_object_set(msg, "tool_calls", calls);
    json_decref(calls);
    nf_buf_free(&text);
    nf_buf_free(&reasoning);
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:n,s:s}],s:o}", "id", r->id, "object", "chat.completion",
                          "created", (json_int_t)r->created, "model", r->req->model, "choices", "index", 0, "message",
                          msg, "logprobs", "finish_reason", fin, "usage", usage(res));
    char *s = nf_json_compact(o);
    nf_buf_str(out, s);
    free(s);
    json_decref(o);
}
