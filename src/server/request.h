/* request.h — one validated inference request, whatever API it came through.
 *
 * The three wire APIs (Anthropic Messages, OpenAI Chat Completions, OpenAI Responses) are parsed and checked
 * here into one internal struct: an OpenAI-shaped message list the chat template renders (roles system / user /
 * assistant / tool, assistant reasoning_content and tool_calls with object arguments), OpenAI-shaped tools,
 * sampling, stop sequences, the output budget and the stream flag. Everything a client can get wrong is
 * caught here and reported as a 400 that names the field ("messages[2].content[0].tool_use_id: expected a
 * string"), so nothing later has to defend against a malformed request.
 *
 * JSON is parsed strictly (RFC 8259 through Jansson: no NaN/Infinity, no raw control characters, valid UTF-8
 * only, no trailing data) and duplicate object keys are rejected. Unknown fields are ignored, as clients
 * expect. Claude Code's per-request `x-anthropic-billing-header` system block is dropped, since it changes on
 * every request and would defeat prefix reuse. */
#ifndef NF_SERVER_REQUEST_H
#define NF_SERVER_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/sampler.h"

typedef enum { NF_API_ANTHROPIC = 0, NF_API_CHAT = 1, NF_API_RESPONSES = 2 } nf_api;

/* An error for the client: HTTP status, error type (Anthropic/OpenAI vocabulary), optional OpenAI code and
 * param, one-line message. */
typedef struct {
    int status;
    char type[40];
    char code[40];
    char param[160];
    char message[600];
    /* a context overflow (both > 0): the prompt's tokens and the context size, added to the error object as
     * n_prompt_tokens and n_ctx (server spec: overflow is rejected with both) */
    int64_t n_prompt_tokens, n_ctx;
} nf_srv_error;

int nf_srv_err(nf_srv_error *e, int status, const char *type, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#define NF_MAX_STOP 16

typedef struct {
    nf_api api;
    char *model;             /* as the client sent it */
    json_t *messages;        /* OpenAI-shaped, ready for nf_chat_render */
    json_t *tools;           /* OpenAI-shaped [{type:function,function:{name,description,parameters}}] or NULL */
    bool tools_off;          /* tool_choice none: tools are not rendered */
    int64_t max_tokens;      /* 0: as many as the context allows */
    nf_sampler_params sp;
    char *stop[NF_MAX_STOP];
    int n_stop;
    bool stream;
    bool include_usage;      /* chat: stream_options.include_usage */
    bool thinking;           /* reasoning on */
    char effort[16];         /* "low", "high" or "" (Max) */
    char *force_output;      /* test hook (only honoured with --allow-forced-output) */
    bool count_only;         /* /v1/messages/count_tokens: max_tokens not required */
    json_t *metadata;        /* responses: echoed back (may be NULL) */
    char *instructions;      /* responses: echoed back */
} nf_srv_request;

/* Parse and validate a request body. 0, or -1 with *e filled (status 400 and the field named). */
int nf_req_parse(nf_api api, const char *body, size_t len, bool count_only, nf_srv_request *r, nf_srv_error *e);
void nf_req_free(nf_srv_request *r);

/* Strict JSON load of a body: an object, duplicates rejected. NULL with *e filled. */
json_t *nf_req_load_json(const char *body, size_t len, nf_srv_error *e);

/* Render the request with the chat template and tokenize it (prompt.c). *marks receives the token positions
 * where the last few messages start (checkpoint positions for prefix reuse; malloc'ed). 0, or -1 with *e. */
struct nf_tokenizer;
typedef struct { int32_t *ids; size_t n; int64_t *marks; int n_marks; } nf_srv_prompt;
int nf_req_prompt(const nf_srv_request *r, const struct nf_tokenizer *tok, nf_srv_prompt *out, nf_srv_error *e);
void nf_srv_prompt_free(nf_srv_prompt *p);

/* Is this system text Claude Code's per-request billing header? */
bool nf_req_is_billing_header(const char *s, size_t n);

#endif
