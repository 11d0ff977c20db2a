/* session.h — floor 3: one live conversation with one model. The object the CLI (`nf run`, `nf chat`), the
 * server and nf-bench drive.
 *
 * A session owns: the model (loaded from a path), a backend (CPU by default, any backend through a factory),
 * ONE sequence state (the "live state"), the tokenizer (from the model's GGUF metadata or a separate file),
 * a sampler, and the list of token ids the live state has consumed (its history).
 *
 *   nf_session_create(path, opts)
 *   nf_session_set_prompt(s, ids, n, ...)   make the live state hold exactly `ids` (prefix reuse, see below)
 *   nf_session_prefill(s, ids, n, ...)      or: append ids to the live state
 *   nf_session_generate(s, gen, cb, user, &stats)   sample, stream pieces, stop on stop token / max / cancel
 *
 * Invariants, after every call (successful or not, cancelled or not):
 *   - the live state has consumed exactly nf_session_tokens(s) (pos == history length);
 *   - when the history is not empty, nf_session_logits(s) are the logits that follow its last token (the next
 *     generate samples from them), so a generation can always be continued with another generate call.
 *   On an internal failure (out of memory, backend error) the session resets itself to empty rather than
 *   keep a state that does not match its history.
 *
 * Generation feeds every sampled token back into the state EXCEPT a stop token: when generate returns, the
 * state holds prompt + every emitted non-stop token, and the logits that follow the last of them. Stopping
 * for max tokens, a cancel flag or the callback therefore leaves exactly the state a run with a smaller max
 * token count would have left ("a consistent state"), and calling generate again continues the same stream.
 *
 * Prefix reuse. The session keeps checkpoints (nf_state_checkpoint: the fixed-size part of the state plus
 * the logits at that point, a cost independent of the context length). nf_session_set_prompt(ids) compares
 * ids with the history: when ids extend it, only the suffix is prefilled; when they diverge at position c,
 * the state rolls back to the latest checkpoint at or before c (or resets when there is none) and prefills
 * from there. Checkpoints are taken at the end of every set_prompt, at the positions passed as `marks`
 * (message boundaries: the caller knows where messages start), and on request (nf_session_checkpoint). Rolling
 * back discards the checkpoints after the rollback point. At most opts.max_checkpoints are kept (the oldest
 * are dropped first).
 *
 * Text. Token pieces are delivered as complete UTF-8: a character split across tokens is held back until it
 * is complete; a byte that can never start or continue a valid sequence becomes U+FFFD, so every piece is
 * valid UTF-8 (JSON-safe). Special tokens deliver their literal text ("</think>", "<|user|>").
 *
 * Stop tokens: <|endoftext|>, <|user|> and <|observation|>, resolved BY NAME from the tokenizer (their ids
 * differ between the release and the embedded tiny model), plus the metadata's eos id and any extra ids in
 * the options.
 *
 * Not thread-safe: one session, one thread (a cancel flag may be set from anywhere, e.g. a signal handler). */
#ifndef NF_ENGINE_SESSION_H
#define NF_ENGINE_SESSION_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/sampler.h"
#include "model/backend.h"
#include "model/model.h"
#include "text/tokenizer.h"

/* Makes the backend the session runs on (nf_cpu_backend_create has this signature). */
typedef nf_backend *(*nf_backend_factory)(const nf_model *m, int n_threads);

typedef struct {
    int n_threads;            /* <= 0: NF_THREADS or all cores (backend's default) */
    int64_t n_ctx;            /* token limit of the live state (also the state's limit, state.h); <= 0:
                                 min(context_length, 4096); above the model's context length: create fails */
    int prefill_chunk;        /* tokens per forward call during prefill; <= 0: the backend's (CUDA 16384), else 256 */
    int max_checkpoints;      /* <= 0: 8 */
    const char *tokenizer;    /* NULL: the model GGUF's own tokenizer metadata; else a GGUF / tokenizer.json */
    nf_backend_factory backend; /* NULL: the CPU backend */
    nf_sampler_params sampler;  /* the session's sampler (nf_session_opts_default: nf_sampler_defaults()) */
    const int32_t *extra_stop;  /* more stop token ids (may be NULL) */
    int n_extra_stop;
} nf_session_opts;

nf_session_opts nf_session_opts_default(void);

typedef struct nf_session nf_session;

/* Load the model at `path` and set everything up. NULL with nf_error() on failure. A model without tokenizer
 * metadata is accepted when opts->tokenizer is NULL: the session then works on ids only (pieces are empty,
 * stop tokens come from the eos id only). */
nf_session *nf_session_create(const char *path, const nf_session_opts *opts);
void nf_session_free(nf_session *s);

const nf_model *nf_session_model(const nf_session *s);
const nf_tokenizer *nf_session_tokenizer(const nf_session *s); /* may be NULL (see create) */
nf_backend *nf_session_backend(nf_session *s);
int64_t nf_session_n_ctx(const nf_session *s);
/* The token ids the live state holds (*n = their count = the state's position). Valid until the next call. */
const int32_t *nf_session_tokens(const nf_session *s, size_t *n);
/* Logits [n_vocab] following the last history token; NULL when the history is empty. */
const float *nf_session_logits(const nf_session *s);
/* Is `id` one of the session's stop tokens? */
bool nf_session_is_stop(const nf_session *s, int32_t id);
/* Number of checkpoints held and their positions (ascending), for tests and diagnostics. */
int nf_session_checkpoints(const nf_session *s, int64_t *pos, int max);

/* Replace the sampler (its history is rebuilt from the live state's tokens; the PRNG restarts at the seed). */
void nf_session_set_sampler(nf_session *s, const nf_sampler_params *p);

/* Empty history, state at position 0, no checkpoints. */
void nf_session_reset(nf_session *s);

/* What a prefill call did. */
typedef struct {
    int64_t reused;       /* history tokens kept (not recomputed) */
    int64_t prefilled;    /* tokens run through the model by this call */
    double seconds;       /* wall time of the forward calls */
    bool cancelled;       /* the cancel flag stopped it between chunks */
} nf_prefill_stats;

/* Append n tokens to the live state (chunked prefill). `cancel` (may be NULL) is checked between chunks: when
 * set, the call returns 1 with the tokens of the completed chunks consumed (the invariants hold). `marks`
 * (ascending absolute positions, may be NULL) are positions within the new tokens where a checkpoint is taken
 * (chunks are split there). Returns 0, 1 (cancelled) or -1 with nf_error(): a token out of range or a prompt
 * beyond n_ctx (nothing done), or a backend failure (the session is then reset to empty). */
int nf_session_prefill(nf_session *s, const int32_t *ids, size_t n, const int64_t *marks, int n_marks,
                       volatile sig_atomic_t *cancel, nf_prefill_stats *st);

/* Prefill progress (long prompts: the CLI prints it, nf-server logs it): fn(user, done, total, seconds) is called
 * between the chunks of nf_session_prefill (and so of set_prompt) whenever at least every_s seconds passed since
 * the prefill started or since the previous call, and once more when a prefill that reported finishes (done ==
 * total); done and total count this call's tokens, seconds its elapsed time. every_s 0: after every chunk;
 * every_s < 0 or fn NULL: never. */
typedef void (*nf_prefill_progress)(void *user, int64_t done, int64_t total, double seconds);
void nf_session_set_progress(nf_session *s, nf_prefill_progress fn, void *user, double every_s);
/* "prefill 4096/62000 tokens (6.6%), 1187.0 t/s, ~49 s left" (at the end: the elapsed time) into buf. */
void nf_prefill_progress_line(char *buf, size_t n, int64_t done, int64_t total, double seconds);

/* Make the live state hold exactly ids[0..n) (n >= 1), reusing the longest usable part of the history (see
 * the header comment) and checkpointing at `marks` and at the end. Returns as nf_session_prefill. */
int nf_session_set_prompt(nf_session *s, const int32_t *ids, size_t n, const int64_t *marks, int n_marks,
                          volatile sig_atomic_t *cancel, nf_prefill_stats *st);

/* Shorten the history to its first n tokens (n <= current length): roll back to the latest checkpoint <= n and
 * prefill the rest. 0 or -1. */
int nf_session_truncate(nf_session *s, size_t n);

/* Take a checkpoint at the current position (no-op when one exists there or the history is empty). 0 or -1. */
int nf_session_checkpoint(nf_session *s);

/* ---- generation ---------------------------------------------------------------------------------------- */

typedef enum {
    NF_STOP_NONE = 0,
    NF_STOP_TOKEN,       /* a stop token was sampled (not fed to the state) */
    NF_STOP_MAX_TOKENS,  /* max_tokens emitted */
    NF_STOP_CANCEL,      /* the cancel flag was set */
    NF_STOP_CALLBACK,    /* the callback returned nonzero */
    NF_STOP_CTX_FULL,    /* the live state reached n_ctx */
    NF_STOP_ERROR,       /* backend failure (generate returned -1; the session was reset) */
} nf_stop_reason;

const char *nf_stop_reason_name(nf_stop_reason r);

/* One generated token, as the callback sees it. */
typedef struct {
    int32_t id;          /* the token; -1 for the final flush of an incomplete UTF-8 tail (text = U+FFFDs) */
    int64_t index;       /* 0-based among the tokens of this generate call */
    const char *text;    /* complete UTF-8 released by this token (may be empty while a character is split);
                            not NUL-terminated, valid during the callback */
    size_t len;
    bool is_stop;        /* a stop token: it ends the generation and was not fed to the model */
} nf_gen_token;

/* Return nonzero to stop after this token (it stays in the state unless it is a stop token). */
typedef int (*nf_token_fn)(void *user, const nf_gen_token *t);

typedef struct {
    int64_t max_tokens;                /* <= 0: until a stop token or the context is full */
    volatile sig_atomic_t *cancel;     /* may be NULL; checked before every token */
    bool ignore_stop;                  /* do not stop on stop tokens (benchmarks) */
} nf_gen_opts;

typedef struct {
    int64_t n_tokens;       /* tokens emitted (including a final stop token) */
    int64_t n_decoded;      /* tokens fed back through the model (forward calls of T = 1) */
    double decode_s;        /* wall time from the first emitted token to the end */
    double ttft_s;          /* time to first token: from the start of the latest prefill/set_prompt call (or
                               of this call when there was none since the last generate) */
    nf_stop_reason stop;
    int32_t stop_token;     /* the stop token, -1 otherwise */
} nf_gen_stats;

/* Generate from the current logits (the history must not be empty). Calls cb (may be NULL) for every token.
 * Returns 0 (see stats->stop for why it stopped) or -1 with nf_error(). */
int nf_session_generate(nf_session *s, const nf_gen_opts *g, nf_token_fn cb, void *user, nf_gen_stats *stats);

/* ---- speculative decoding (engine/spec.h) -------------------------------------------------------------------
 * Attach a speculative decoder (the session takes ownership; NULL detaches and frees the previous one). Every
 * generate call then starts a new request for its admission controller (nf_spec_begin) and feeds each sampled
 * token through nf_spec_feed, which may commit a block of verified drafts at once: those are emitted like any
 * generated token. Greedy output is byte-identical to the session without a decoder; with a temperature the
 * output distribution is the same. The cancel flag is checked before every block (not inside one). */
struct nf_spec;
void nf_session_set_spec(nf_session *s, struct nf_spec *sp);
struct nf_spec *nf_session_spec(nf_session *s);

/* ---- UTF-8 assembly (exposed for tests) --------------------------------------------------------------------
 * Feed bytes, get back the longest run of complete characters; an incomplete tail is kept for the next feed.
 * Invalid bytes become U+FFFD (EF BF BD). */
typedef struct {
    unsigned char pend[4];
    int n_pend;
    char *out;
    size_t cap;
} nf_utf8_asm;

/* Returns a pointer to the released text (owned by the assembler, valid until the next call), length in *len. */
const char *nf_utf8_feed(nf_utf8_asm *a, const char *bytes, size_t n, size_t *len);
/* Release the incomplete tail, if any, as one U+FFFD (len 0 when there is none). */
const char *nf_utf8_flush(nf_utf8_asm *a, size_t *len);
void nf_utf8_free(nf_utf8_asm *a);

#endif
