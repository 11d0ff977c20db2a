/* api_openai_responses.c — OpenAI Responses API: the response object and its event stream. Every event has a
 * `type` and an increasing `sequence_number`:
 *   response.created, response.in_progress,
 *   per output item: response.output_item.added → (reasoning: reasoning_summary_part.added,
 *   reasoning_summary_text.delta*, reasoning_summary_text.done, reasoning_summary_part.done | message:
 *   content_part.added, output_text.delta*, output_text.done, content_part.done | function_call:
 *   function_call_arguments.delta, function_call_arguments.done) → response.output_item.done,
 *   terminal response.completed | response.incomplete (max_output_tokens) | response.failed.
 * Codex ingests function calls from output_item.done and routes on the terminal event, so both always come. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api.h"

static void ev(nf_resp *r, nf_buf *out, const char *type, json_t *o) {
    json_object_set_new(o, "type", json_string(type));
    json_object_set_new(o, "sequence_number", json_integer(r->seq++));
    nf_sse_event(out, type, o);
}

static json_t *item_json(const nf_block *b, bool done) {
    const char *st = done ? "completed" : "in_progress";
    switch (b->kind) {
    case NF_EV_REASONING:
        return json_pack("{s:s,s:s,s:o,s:s}", "id", b->item_id, "type", "reasoning", "summary",
                         done ? json_pack("[{s:s,s:o}]", "type", "summary_text", "text", nf_jstr(b->text.s, b->text.n))
                              : json_array(),
                         "status", st);
    case NF_EV_TEXT:
        return json_pack("{s:s,s:s,s:s,s:s,s:o}", "id", b->item_id, "type", "message", "status", st, "role", "assistant",
                         "content",
                         done ? json_pack("[{s:s,s:o,s:[]}]", "type", "output_text", "text", nf_jstr(b->text.s, b->text.n),
                                          "annotations")
                              : json_array());
    case NF_EV_TOOL_CALL:
        return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s%}", "id", b->item_id, "type", "function_call", "status", st, "call_id",
                         b->id, "name", b->name, "arguments", done && b->text.s ? b->text.s : "", done ? b->text.n : 0);
    }
    return json_object();
}

static json_t *response_obj(const nf_resp *r, const char *status, const nf_job_result *res) {
    json_t *output = json_array();
    if (res)
        for (int i = 0; i < r->n_blocks; i++) json_array_append_new(output, item_json(&r->blocks[i], true));
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:s,s:o,s:n,s:n,s:b,s:s,s:[],s:n,s:s,s:{s:{s:s}},s:b}", "id", r->id, "object",
                          "response", "created_at", (json_int_t)r->created, "status", status, "model", r->req->model,
                          "output", output, "error", "incomplete_details", "parallel_tool_calls", 1, "tool_choice",
                          r->req->tools_off ? "none" : "auto", "tools", "previous_response_id", "truncation", "disabled",
                          "text", "format", "type", "text", "store", 0);
    json_object_set_new(o, "instructions", r->req->instructions ? json_string(r->req->instructions) : json_null());
    json_object_set_new(o, "metadata", r->req->metadata ? json_incref(r->req->metadata) : json_object());
    json_object_set_new(o, "max_output_tokens", r->req->max_tokens ? json_integer(r->req->max_tokens) : json_null());
    json_object_set_new(o, "temperature", json_real(r->req->sp.temperature));
    json_object_set_new(o, "top_p", json_real(r->req->sp.top_p));
    json_object_set_new(o, "reasoning", json_pack("{s:o,s:n}", "effort",
                                                  r->req->effort[0] ? json_string(r->req->effort) : json_null(), "summary"));
    if (res) {
        int64_t reasoning_tokens = 0;
        json_object_set_new(o, "usage", json_pack("{s:I,s:{s:I},s:I,s:{s:I},s:I}", "input_tokens",
                                                  (json_int_t)res->prompt_tokens, "input_tokens_details", "cached_tokens",
                                                  (json_int_t)res->cached_tokens, "output_tokens",
                                                  (json_int_t)res->completion_tokens, "output_tokens_details",
                                                  "reasoning_tokens", (json_int_t)reasoning_tokens, "total_tokens",
                                                  (json_int_t)(res->prompt_tokens + res->completion_tokens)));
        if (res->finish == NF_FIN_LENGTH)
            json_object_set_new(o, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
        if (res->finish == NF_FIN_ERROR)
            json_object_set_new(o, "error", json_pack("{s:s,s:s}", "code", "server_error", "message", res->error));
    } else {
        json_object_set_new(o, "usage", json_null());
    }
    return o;
}

void nf_responses_begin(nf_resp *r, nf_buf *out) {
    ev(r, out, "response.created", json_pack("{s:o}", "response", response_obj(r, "in_progress", NULL)));
    ev(r, out, "response.in_progress", json_pack("{s:o}", "response", response_obj(r, "in_progress", NULL)));
}

static void close_item(nf_resp *r, int idx, nf_buf *out) {
    const nf_block *b = &r->blocks[idx];
    json_t *text = nf_jstr(b->text.s, b->text.n);
    if (b->kind == NF_EV_REASONING) {
        ev(r, out, "response.reasoning_summary_text.done",
           json_pack("{s:s,s:i,s:i,s:O}", "item_id", b->item_id, "output_index", idx, "summary_index", 0, "text", text));
        ev(r, out, "response.reasoning_summary_part.done",
           json_pack("{s:s,s:i,s:i,s:{s:s,s:O}}", "item_id", b->item_id, "output_index", idx, "summary_index", 0, "part",
                     "type", "summary_text", "text", text));
    } else if (b->kind == NF_EV_TEXT) {
        ev(r, out, "response.output_text.done",
           json_pack("{s:s,s:i,s:i,s:O}", "item_id", b->item_id, "output_index", idx, "content_index", 0, "text", text));
        ev(r, out, "response.content_part.done",
           json_pack("{s:s,s:i,s:i,s:{s:s,s:O,s:[]}}", "item_id", b->item_id, "output_index", idx, "content_index", 0,
                     "part", "type", "output_text", "text", text, "annotations"));
    } else {
        ev(r, out, "response.function_call_arguments.done",
           json_pack("{s:s,s:i,s:O}", "item_id", b->item_id, "output_index", idx, "arguments", text));
    }
    json_decref(text);
    ev(r, out, "response.output_item.done", json_pack("{s:i,s:o}", "output_index", idx, "item", item_json(b, true)));
}

/* Called after the event's block was appended (the item id is needed in every event). */
void nf_responses_event(nf_resp *r, const nf_ev *e, bool new_block, nf_buf *out) {
    int idx = r->n_blocks - 1;
    nf_block *b = &r->blocks[idx];
    if (new_block) {
        if (idx > 0) close_item(r, idx - 1, out);
        nf_block tmp = *b;
        if (b->kind == NF_EV_TOOL_CALL) tmp.text = (nf_buf){0};
        ev(r, out, "response.output_item.added", json_pack("{s:i,s:o}", "output_index", idx, "item", item_json(&tmp, false)));
        if (b->kind == NF_EV_REASONING)
            ev(r, out, "response.reasoning_summary_part.added",
               json_pack("{s:s,s:i,s:i,s:{s:s,s:s}}", "item_id", b->item_id, "output_index", idx, "summary_index", 0, "part",
                         "type", "summary_text", "text", ""));
        else if (b->kind == NF_EV_TEXT)
            ev(r, out, "response.content_part.added",
               json_pack("{s:s,s:i,s:i,s:{s:s,s:s,s:[]}}", "item_id", b->item_id, "output_index", idx, "content_index", 0,
                         "part", "type", "output_text", "text", "", "annotations"));
    }
    if (e->kind == NF_EV_REASONING)
        ev(r, out, "response.reasoning_summary_text.delta",
           json_pack("{s:s,s:i,s:i,s:o}", "item_id", b->item_id, "output_index", idx, "summary_index", 0, "delta",
                     nf_jstr(e->text, e->len)));
    else if (e->kind == NF_EV_TEXT)
        ev(r, out, "response.output_text.delta",
           json_pack("{s:s,s:i,s:i,s:o}", "item_id", b->item_id, "output_index", idx, "content_index", 0, "delta",
                     nf_jstr(e->text, e->len)));
    else
        ev(r, out, "response.function_call_arguments.delta",
           json_pack("{s:s,s:i,s:s%}", "item_id", b->item_id, "output_index", idx, "delta", b->text.s, b->text.n));
}

void nf_responses_end(nf_resp *r, const nf_job_result *res, nf_buf *out) {
    const char *status = res->finish == NF_FIN_LENGTH ? "incomplete" : res->finish == NF_FIN_ERROR ? "failed" : "completed";
    if (!r->stream) {
        json_t *o = response_obj(r, status, res);
        char *s = nf_json_compact(o);
        nf_buf_str(out, s);
        free(s);
        json_decref(o);
        return;
    }
    if (r->n_blocks > 0) close_item(r, r->n_blocks - 1, out);
    const char *type = res->finish == NF_FIN_LENGTH ? "response.incomplete"
                       : res->finish == NF_FIN_ERROR ? "response.failed" : "response.completed";
    ev(r, out, type, json_pack("{s:o}", "response", response_obj(r, status, res)));
}

void nf_responses_error(nf_resp *r, const char *msg, nf_buf *out) {
    nf_job_result res = {.finish = NF_FIN_ERROR};
    snprintf(res.error, sizeof res.error, "%s", msg);
    ev(r, out, "response.failed", json_pack("{s:o}", "response", response_obj(r, "failed", &res)));
}
