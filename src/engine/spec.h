/* spec.h — speculative decoding (floor 3): drafters, batched verification with exact rollback, greedy and
 * distribution-preserving sampled acceptance, and the admission controller that decides per step whether
 * speculating pays. The session (session.h) drives it through nf_session_set_spec; docs/speculative.md has
 * the cost model and the controller's rules.
 *
 * One cycle, entered after the session sampled (and emitted) token t from the logits L0 that follow the
 * history h:
 *
 *   drafts d1..dn  = drafter(h ++ [t])               n <= K, cut before any stop token
 *   checkpoint the state (fixed-size part, pos = |h|)
 *   V0..Vn         = nf_forward([t, d1..dn], all logits)      Vi follows di (V0 follows t)
 *   accept di while the target's choice from V(i-1) agrees (greedy: argmax == di; sampling: u < p(di))
 *   j accepted:  j == n  → the state is already right;
 *                j <  n  → roll back to the checkpoint and re-run [t, d1..dj] without the head
 *   the logits that follow the last committed token are Vj (batched logits are bit-identical to token-by-token
 *   decode, tests/c/test_forward_state.c), so the next cycle samples from Vj exactly as serial decoding would.
 *
 * Greedy output is therefore byte-identical to serial decoding whatever the drafts are. With a temperature the
 * acceptance is standard speculative sampling with a deterministic draft (q = one-hot on di): accept with
 * probability p(di), else draw from p with di removed (renormalised) — this token is "pending": the session
 * emits it next instead of sampling. Every committed token is then distributed exactly as p.
 *
 * Drafters (a drafter only proposes; it can never change the output, only the speed):
 *   lookup   prompt lookup: the longest suffix n-gram of the context (max_ngram .. min_ngram tokens) that
 *            occurred before; proposes the tokens that followed its most recent occurrence. No file.
 *   model    a separate draft GGUF this engine loads (same vocabulary): greedy drafts from its own state,
 *            kept in sync with the context through its own checkpoint/rollback.
 *   mtp      the model's own MTP/NextN block (spec §2.6) on the CPU: fed the target's final hidden states through
 *            observe(), greedy chained drafts.
 */
#ifndef NF_ENGINE_SPEC_H
#define NF_ENGINE_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/sampler.h"
#include "model/backend.h"
#include "model/state.h"

/* ---- drafters ------------------------------------------------------------------------------------------ */

typedef struct nf_drafter nf_drafter;
struct nf_drafter {
    const char *name;   /* "lookup", "model", "mtp" */
    void *impl;
    /* Propose up to `max` tokens that continue ctx[0..n) (n >= 1). Returns the count (0 = no proposal) or -1
     * with nf_fail(). May keep state between calls (the next call's ctx usually extends this ctx by the
     * accepted part plus one token; anything else must still work). */
    int (*draft)(nf_drafter *d, const int32_t *ctx, size_t n, int32_t *out, int max);
    void (*destroy)(nf_drafter *d);
    /* Optional (drafters that read the target's hidden states, i.e. MTP): called after every target forward
     * that goes through the decoder (nf_spec_feed, nf_spec_truncate, nf_spec_target_forward): the target
     * consumed toks[0..T) at positions p0.. and hidden[T][n_embd] are their final hidden states
     * (nf_forward_ex). 0 or -1. */
    int (*observe)(nf_drafter *d, int64_t p0, const int32_t *toks, int T, const float *hidden);
    /* Optional (drafters with a distribution: model, mtp): sampled drafts for sampling mode. Like draft, but
     * draft i is drawn (nf_draw with rng) from q_i = nf_sampler_probs(smp, the drafter's logits), written to
     * q[i][n_vocab]. The verifier then accepts with min(1, p/q) and draws rejections from max(0, p - q). */
    int (*draft_sampled)(nf_drafter *d, const int32_t *ctx, size_t n, int32_t *out, int max, nf_sampler *smp,
                         nf_rng *rng, float *q);
};

/* A draw from the distribution q[V] (sums to 1) with r. */
int32_t nf_draw(const float *q, int32_t V, nf_rng *r);

void nf_drafter_free(nf_drafter *d);

typedef struct {
    int min_ngram;  /* shortest suffix that may match (default 2) */
    int max_ngram;  /* longest suffix tried first (default 4) */
    int64_t window; /* only look this many tokens back (<= 0: the whole context) */
} nf_lookup_params;

nf_lookup_params nf_lookup_defaults(void);
nf_drafter *nf_drafter_lookup(const nf_lookup_params *p);

/* A draft model from a GGUF. n_vocab must equal the target's (same tokenizer); backend NULL = CPU. */
typedef nf_backend *(*nf_drafter_backend_fn)(const nf_model *m, int n_threads);
nf_drafter *nf_drafter_model(const char *path, int32_t n_vocab, int n_threads, nf_drafter_backend_fn backend);

/* The target model's own MTP/NextN block (layers[n_layer], bound by the loader when complete), run on its own
 * CPU backend with its own cache (one MLA layer). It conditions on the target's final hidden states, which it
 * receives through observe(): every target forward of the prompt and of the generation must go through the
 * decoder (the session does this when a decoder is attached). Drafts are greedy and chained: step k feeds
 * (the block's own shared_head_norm output, the previous draft). NULL with a message when the model has no
 * bound MTP block. The target must stay alive as long as the drafter. */
nf_drafter *nf_drafter_mtp(const nf_model *target, int n_threads);

/* "lookup", "mtp" or "model:FILE" → a drafter (n_vocab/n_threads/target as above). NULL with nf_fail(). */
nf_drafter *nf_drafter_from_spec(const char *spec, const nf_model *target, int n_threads);

/* ---- admission controller ------------------------------------------------------------------------------ */

typedef enum {
    NF_SPEC_SERIAL = 0,       /* never verify drafts */
    NF_SPEC_CONSERVATIVE = 1, /* speculate while the windowed rate says it pays (default with a drafter) */
    NF_SPEC_SPECULATIVE = 2,  /* always speculate (except reasoning unless allowed) */
} nf_spec_mode;

const char *nf_spec_mode_name(nf_spec_mode m);
int nf_spec_mode_parse(const char *s, nf_spec_mode *out); /* 0 or -1 */

typedef struct {
    nf_spec_mode mode;
    int draft_max;       /* K: drafts per cycle (default 6) */
    bool reasoning;      /* speculate inside <think>…</think> too (default false) */
    int window;          /* cycles / serial steps in each rate window (default 16) */
    int min_cycles;      /* cycles of a probe before it is judged (default 4) */
    int warmup;          /* serial steps measured before the first probe (default 3) */
    double margin;       /* speculation must beat serial by this fraction (default 0.02) */
    int backoff_min;     /* serial tokens after the first park (default 16) */
    int backoff_max;     /* cap of the doubling back-off (default 512) */
    uint64_t seed;       /* PRNG of the sampled acceptance (default: the sampler's seed is mixed in) */
    bool no_defer;       /* re-run the accepted tokens at once after a partial accept instead of deferring them
                            into the next forward (default false: defer) */
} nf_spec_params;

nf_spec_params nf_spec_defaults(void);
/* Set one parameter from "key=value" (keys: the field names above; mode takes a mode name, booleans 0/1,
 * true/false). 0, or -1 with nf_fail() naming the problem. For CLI / server options. */
int nf_spec_params_set(nf_spec_params *p, const char *kv);

/* The controller on its own (pure bookkeeping: times are given, so it can be tested with a fake clock). */
typedef struct {
    nf_spec_params p;
    /* rolling windows: serial steps (seconds) and cycles (seconds, committed tokens) */
    double *ser_t;
    int ser_n, ser_i;
    double *cyc_t;
    int *cyc_c;
    int cyc_n, cyc_i;
    int since_probe;     /* cycles since the current probe started */
    int park_left;       /* serial tokens left before the next probe */
    int backoff;         /* length of the next park */
    int64_t parks, probes;
} nf_spec_ctl;

void nf_spec_ctl_init(nf_spec_ctl *c, const nf_spec_params *p);
void nf_spec_ctl_free(nf_spec_ctl *c);
void nf_spec_ctl_reset(nf_spec_ctl *c);
/* May this step speculate? (in_reasoning: the context is inside a thinking block). Counts a serial token
 * against the current park when it says no for that reason. */
bool nf_spec_ctl_admit(nf_spec_ctl *c, bool in_reasoning);
void nf_spec_ctl_serial(nf_spec_ctl *c, double seconds);           /* one token fed serially */
void nf_spec_ctl_cycle(nf_spec_ctl *c, double seconds, int committed); /* one verified cycle */
/* Current windowed estimates (tokens/s; 0 when unknown). */
double nf_spec_ctl_rate_serial(const nf_spec_ctl *c);
double nf_spec_ctl_rate_spec(const nf_spec_ctl *c);

/* ---- the speculative decoder --------------------------------------------------------------------------- */

typedef struct {
    int64_t cycles;        /* verified cycles */
    int64_t drafted;       /* draft tokens verified */
    int64_t accepted;      /* of which accepted */
    int64_t committed;     /* tokens committed by cycles (accepted + 1 per cycle) */
    int64_t serial;        /* tokens fed without verification (serial mode, parked, reasoning, no draft) */
    int64_t no_draft;      /* of which: the drafter proposed nothing */
    int64_t rollbacks;     /* partial accepts (rollback to the cycle's checkpoint) */
    int64_t rerun_tokens;  /* accepted tokens re-run at once after a rollback */
    int64_t deferred_tokens; /* accepted tokens whose re-run was deferred into the next forward */
    int64_t parks, probes; /* controller decisions */
    double draft_s, verify_s, rerun_s, serial_s; /* wall time by phase */
    double rate_serial, rate_spec; /* the controller's current windowed estimates (tokens/s) */
    int hist[33];          /* cycles by accepted count (0..32) */
} nf_spec_stats;

typedef struct nf_spec nf_spec;

/* Takes ownership of the drafter (freed with the decoder, also on failure). */
nf_spec *nf_spec_new(nf_drafter *d, const nf_spec_params *p);
void nf_spec_free(nf_spec *sp);
const nf_spec_params *nf_spec_params_of(const nf_spec *sp);
const char *nf_spec_drafter_name(const nf_spec *sp);
nf_drafter *nf_spec_drafter(nf_spec *sp);
/* Token ids that open / close a reasoning block (-1: none); the session sets them from its tokenizer. */
void nf_spec_set_think_ids(nf_spec *sp, int32_t open, int32_t close);

/* What one step needs from its driver (the session). */
typedef struct {
    nf_backend *be;
    nf_state *st;               /* has consumed hist[0..n_hist) */
    const int32_t *hist;
    size_t n_hist;
    float *logits;              /* [n_vocab]: out, the logits after the last fed token */
    nf_sampler *smp;            /* the session's sampler: accepts every committed draft (NULL: only with pick) */
    const nf_sampler_params *sp;
    /* Greedy only (optional): the target's choice from a logit row instead of nf_sampler_sample(smp, row), for a
     * driver whose greedy rule is not the sampler's (nf-bench's probe: argmax excluding EOS). */
    int32_t (*pick)(void *user, const float *row);
    bool (*is_stop)(void *user, int32_t id); /* drafts are cut before a stop token (NULL: none) */
    void *user;
} nf_spec_io;

/* A forward of the target that keeps the drafter informed (observe): nf_forward, plus the hidden states when
 * the drafter wants them. The session's prefill uses it while a decoder is attached. */
int nf_spec_target_forward(nf_spec *sp, nf_backend *be, nf_state *st, const int32_t *toks, int T, float *logits,
                           int all_logits);

/* Start of a request: controller windows and stats reset, no pending token. */
void nf_spec_begin(nf_spec *sp);
/* A token the previous cycle already chose (sampling mode, after a rejected draft), or -1. Taking it clears it. */
int32_t nf_spec_take_pending(nf_spec *sp);
/* Feed the sampled token `tok` (already accepted by io->smp), plus up to max_extra verified drafts when the
 * controller admits speculation. On return tok and extra[0..*n_extra) are committed (accepted by io->smp too)
 * and io->logits follow the last of them. The state has consumed them, EXCEPT after a partial accept: then the
 * state was rolled back to the cycle's checkpoint and the committed tokens are "deferred" — they are fed at the
 * start of the next forward (the next feed's serial step or verify batch), which saves the separate re-run
 * forward. io->n_hist is the committed history (io->st->pos + deferred). Call nf_spec_flush before the state is
 * used by anything else. 0, or -1 with nf_fail() (state undefined). */
int nf_spec_feed(nf_spec *sp, nf_spec_io *io, int32_t tok, int max_extra, int32_t *extra, int *n_extra);
/* Feed the deferred tokens now (no-op when there are none): afterwards the state has consumed io->hist. */
int nf_spec_flush(nf_spec *sp, nf_spec_io *io);
bool nf_spec_lazy(const nf_spec *sp);
/* After a feed that returned n_extra > 0: keep only tok and the first `keep` extras (0 <= keep < n_extra),
 * e.g. the caller stopped mid-block: rolls back to the cycle's checkpoint and re-runs them (with any tokens
 * deferred before the cycle), so the state has consumed the kept history; sets io->logits.
 * The sampler's history is NOT rewound (the caller rebuilds it). Clears the pending token. 0 or -1. */
int nf_spec_truncate(nf_spec *sp, nf_spec_io *io, int keep);
const nf_spec_stats *nf_spec_stats_get(nf_spec *sp);
/* One line of the stats (acceptance length, commits per cycle, estimated speedup) into buf. */
void nf_spec_stats_line(const nf_spec *sp, char *buf, size_t cap);

#endif
