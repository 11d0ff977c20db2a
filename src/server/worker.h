/* worker.h — the request queue and the ONE inference worker that owns the engine session.
 *
 * Connection threads parse, render and tokenize a request, then submit a job. Jobs wait in a FIFO queue; a
 * single worker thread takes them one at a time, makes the live state hold the prompt (prefix reuse through
 * nf_session_set_prompt: only the suffix that differs from the live history is prefilled), generates, and
 * turns the generated text into API-neutral events (reasoning text, visible text, complete tool calls) through
 * the GLM output parser and the stop-sequence filter. Events go into the job's own queue; the connection
 * thread waits on it (with a timeout, so it can send keepalives and notice a disconnect) and formats them for
 * its API.
 *
 * Cancellation: the connection thread sets job->cancel when its client goes away. A queued job is then
 * skipped; a running prefill stops between chunks and a running generation before the next token. What was
 * computed stays in the live state (and its checkpoints), so the client's retry resumes from it.
 *
 * A job is reference-counted between the worker and the connection thread; the last release frees it. */
#ifndef NF_SERVER_WORKER_H
#define NF_SERVER_WORKER_H

#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/session.h"
#include "server/request.h"

typedef enum { NF_EV_REASONING = 1, NF_EV_TEXT, NF_EV_TOOL_CALL } nf_ev_kind;

typedef struct nf_ev {
    nf_ev_kind kind;
    char *text;       /* reasoning/text chunk (whole UTF-8 characters); tool call: the raw body */
    size_t len;
    char *id;         /* tool call id (toolu_... / call_...) */
    char *name;       /* tool name */
    json_t *args;     /* arguments object, typed by the tool's schema */
    struct nf_ev *next;
} nf_ev;

typedef enum {
    NF_FIN_STOP = 0,     /* end of turn */
    NF_FIN_LENGTH,       /* max tokens / context full */
    NF_FIN_TOOL_CALLS,   /* ended after tool calls */
    NF_FIN_STOP_SEQ,     /* a stop sequence matched (stop_seq) */
    NF_FIN_CANCELLED,
    NF_FIN_ERROR,
} nf_finish;

typedef struct {
    nf_finish finish;
    char *stop_seq;
    char error[256];
    int64_t prompt_tokens, cached_tokens, completion_tokens, prefilled;
    int64_t disk_tokens;         /* prompt tokens loaded from the disk cache */
    int64_t ram_tokens;          /* prompt tokens resumed from the RAM prefix cache */
    double queue_s, prefill_s, decode_s;
} nf_job_result;

typedef struct nf_job {
    nf_srv_request req;          /* owned */
    int32_t *tokens;             /* the rendered prompt */
    size_t n_tokens;
    int64_t *marks;              /* message-boundary positions (checkpoints) */
    int n_marks;
    int64_t max_tokens;          /* resolved budget */
    bool prompt_thinking;        /* generation starts inside <think> */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    nf_ev *head, *tail;          /* events not yet taken */
    bool started, done;
    nf_job_result res;
    volatile sig_atomic_t cancel;
    int refs;
    double t_submit;
    struct nf_job *qnext;
} nf_job;

typedef struct nf_worker nf_worker;

struct nf_disk_cache;
struct nf_prefix_cache;
typedef struct {
    bool allow_forced_output;    /* honour request field nf_force_output (tests) */
    struct nf_disk_cache *disk;  /* optional on-disk state cache (disk_cache.h) */
    struct nf_prefix_cache *ram; /* optional in-RAM copies of given-up conversations (prefix_cache.h) */
} nf_worker_opts;

/* Start the worker thread on a session (not owned). NULL on failure. */
nf_worker *nf_worker_start(nf_session *s, const nf_worker_opts *o);
/* Cancel the running and queued jobs (they finish as cancelled), join the thread. Jobs submitted later finish
 * as cancelled at once. */
void nf_worker_stop(nf_worker *w);
/* Free a stopped worker (after the HTTP side has stopped: nothing may submit any more). */
void nf_worker_free(nf_worker *w);

/* A new job (refs = 1, the caller's); takes ownership of *req (zeroed), tokens and marks. */
nf_job *nf_job_new(nf_srv_request *req, int32_t *tokens, size_t n, int64_t *marks, int n_marks, int64_t max_tokens,
                   bool prompt_thinking);
/* Queue it (the worker takes its own reference). Returns the queue length ahead of it. */
int nf_worker_submit(nf_worker *w, nf_job *j);
/* Wait up to timeout_ms for events or completion; returns the taken event list (caller frees with
 * nf_ev_free_list) and sets *done when the job has finished and every event was taken. */
nf_ev *nf_job_wait(nf_job *j, int timeout_ms, bool *done);
void nf_job_cancel(nf_job *j);
void nf_job_release(nf_job *j);
void nf_ev_free_list(nf_ev *e);

int nf_worker_queue_len(nf_worker *w);
bool nf_worker_busy(nf_worker *w);

#endif
