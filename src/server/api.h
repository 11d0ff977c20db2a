/* api.h — formatting a generation for the client, in each wire API's exact shape.
 *
 * An nf_resp follows one request: the worker's events (reasoning, text, tool calls) arrive in order and are
 * grouped into content blocks (consecutive reasoning or text events form one block; every tool call is a
 * block). Streaming requests get their bytes as events arrive (SSE, see sse.h): the opening event is written
 * by nf_resp_begin before the prompt is even queued, keepalives on demand, the final events at the end.
 * Non-streaming requests get the whole JSON body from nf_resp_end.
 *
 *   Anthropic Messages  api_anthropic.c        message_start, content_block_*, message_delta, message_stop, ping
 *   OpenAI Chat         api_openai_chat.c      chat.completion(.chunk), reasoning_content, tool_calls, [DONE]
 *   OpenAI Responses    api_openai_responses.c response.created ... response.completed, sequence_number
 *
 * Errors for the client (nf_srv_error) are rendered in the API's own error shape by nf_error_json. */
#ifndef NF_SERVER_API_H
#define NF_SERVER_API_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "server/request.h"
#include "server/sse.h"
#include "server/worker.h"

typedef struct {
    nf_ev_kind kind;
    nf_buf text;          /* reasoning / text; tool call: the arguments JSON (as streamed) */
    char *id, *name;      /* tool call */
    json_t *args;
    char item_id[48];     /* Responses output item id */
} nf_block;

typedef struct nf_resp {
    nf_api api;
    bool stream;
    const nf_srv_request *req;   /* borrowed, lives as long as the response */
    char id[48];                 /* msg_... / chatcmpl-... / resp_... */
    int64_t created;
    int64_t prompt_tokens;
    nf_block *blocks;
    int n_blocks, cap;
    int n_tools;
    int seq;                     /* Responses sequence_number */
    bool ended;
} nf_resp;

void nf_resp_init(nf_resp *r, const nf_srv_request *req, int64_t prompt_tokens);
void nf_resp_free(nf_resp *r);
/* Streaming: the opening event(s). */
void nf_resp_begin(nf_resp *r, nf_buf *out);
/* One worker event (accumulated; streamed when r->stream). */
void nf_resp_event(nf_resp *r, const nf_ev *e, nf_buf *out);
/* The end: streaming → final events; otherwise the complete JSON body. */
void nf_resp_end(nf_resp *r, const nf_job_result *res, nf_buf *out);
/* A keepalive: Anthropic `event: ping`, SSE comment for the OpenAI APIs. */
void nf_resp_keepalive(nf_resp *r, nf_buf *out);
/* An error after the stream started (the API's error event). */
void nf_resp_stream_error(nf_resp *r, const char *msg, nf_buf *out);

/* The error body in the API's shape (malloc'ed JSON text). */
char *nf_error_json(nf_api api, const nf_srv_error *e);

/* usage helpers shared by the APIs */
const char *nf_finish_openai(nf_finish f);

/* per-API parts (called by response.c; the Responses event after the event's block was appended) */
void nf_anthropic_begin(nf_resp *r, nf_buf *out);
void nf_anthropic_event(nf_resp *r, const nf_ev *e, bool new_block, nf_buf *out);
void nf_anthropic_end(nf_resp *r, const nf_job_result *res, nf_buf *out);
void nf_chat_begin(nf_resp *r, nf_buf *out);
void nf_chat_event(nf_resp *r, const nf_ev *e, bool new_block, nf_buf *out);
void nf_chat_end(nf_resp *r, const nf_job_result *res, nf_buf *out);
void nf_responses_begin(nf_resp *r, nf_buf *out);
void nf_responses_event(nf_resp *r, const nf_ev *e, bool new_block, nf_buf *out);
void nf_responses_end(nf_resp *r, const nf_job_result *res, nf_buf *out);
void nf_responses_error(nf_resp *r, const char *msg, nf_buf *out);

/* a random id with a prefix (base62, 24 characters) */
void nf_random_id(char *out, size_t cap, const char *prefix);

#endif
