/* http.h — the HTTP/1.1 front of nf-server (GNU libmicrohttpd, one thread per connection).
 *
 * Routes: POST /v1/messages, /v1/messages/count_tokens, /v1/chat/completions, /v1/responses, /tokenize,
 * /detokenize; GET /v1/models, /v1/models/{id}, /health, /metrics; OPTIONS anything (CORS preflight, 204).
 * Query strings are ignored (Claude Code sends ?beta=true). Errors use the shape of the API the path belongs to
 * (Anthropic for /v1/messages*, OpenAI otherwise); a client mistake is never a 5xx.
 *
 * A connection thread parses, validates, renders and tokenizes the request (a prompt over the context is
 * refused with 400 before queueing), submits the job to the worker and then waits on it: a streaming
 * response gets its opening event at once and keepalives on a wall-clock timer (Anthropic `ping` events, SSE
 * comments for OpenAI) while the job is queued, prefilling or decoding; a client disconnect is noticed while
 * waiting (poll + recv(MSG_PEEK) every 100 ms) and cancels the job. */
#ifndef NF_SERVER_HTTP_H
#define NF_SERVER_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/session.h"
#include "server/worker.h"

typedef struct {
    const char *host;          /* default 127.0.0.1 */
    int port;                  /* 0: any free port (see nf_server_port) */
    const char *api_key;       /* NULL: no authentication */
    bool cors;
    size_t max_body;           /* bytes; default 32 MiB */
    int timeout_s;             /* idle connection timeout (slow clients); default 60 */
    double keepalive_s;        /* streaming keepalive interval; default 5 */
    int max_connections;       /* default 64 */
    const char *model_id;      /* the served model's id */
    bool strict_models;        /* 404 for a request naming another model (default: any name is accepted) */
    int64_t n_ctx;
    int64_t default_max_tokens;/* when a request gives none (OpenAI APIs); default: the rest of the context */
    const nf_tokenizer *tok;
    nf_worker *worker;
} nf_server_opts;

typedef struct nf_server nf_server;

nf_server *nf_server_start(const nf_server_opts *o);
int nf_server_port(const nf_server *s);
/* Stop accepting connections (those open are served to the end). */
void nf_server_quiesce(nf_server *s);
void nf_server_stop(nf_server *s);

#endif
