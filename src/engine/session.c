/* session.c — the live conversation: model + backend + one sequence state + tokenizer + sampler, with prefix
 * reuse through checkpoints and a streaming generate loop (contract in session.h).
 *
 * The one rule everything here keeps: the state has consumed exactly hist[0..n_hist), and when n_hist > 0,
 * `logits` follow hist[n_hist-1]. Prefill appends chunk by chunk (history and logits updated after every
 * chunk, so a cancel between chunks keeps the rule); generate feeds each emitted non-stop token back before
 * looking at the cancel flag again; a rollback restores the logits saved with the checkpoint. */
#include "engine/session.h"
#include "engine/session_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/backend_cpu.h"
#include "engine/spec.h"
#include "model/forward.h"
#include "model/state.h"
#include "util/error.h"

typedef struct {
    nf_state_ckpt ck;
    float *logits; /* [n_vocab] following the token before ck.pos */
} sess_ckpt;

struct nf_session {
    nf_model *m;
    nf_backend *be;
    nf_state *st;
    nf_tokenizer *tok;
    nf_sampler *smp;
    nf_sampler_params sp;
    int64_t n_vocab;

    int32_t *hist;
    size_t n_hist, cap_hist;
    float *logits;
    bool have_logits;

    sess_ckpt *cks;
    int n_ck, max_ck;

    int64_t n_ctx;
    int chunk;
    int32_t *stops;
    int n_stops;

    size_t smp_synced; /* history tokens the sampler has accepted */
    bool smp_dirty;    /* the history was cut below smp_synced: rebuild */

    double t_prefill;  /* start of the latest prefill call */
    bool prefill_since_gen;

    nf_utf8_asm utf;

    nf_spec *spec;     /* optional speculative decoder (nf_session_set_spec; spec.h) */

    nf_prefill_progress progress; /* nf_session_set_progress */
    void *progress_user;
    double progress_every;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- UTF-8 assembly ---------------------------------------------------------------------------------- */

static void out_put(nf_utf8_asm *a, size_t *n, const void *p, size_t k) {
    if (*n + k > a->cap) {
        size_t c = a->cap ? a->cap : 64;
        while (c < *n + k) c *= 2;
        a->out = nf_xrealloc(a->out, c);
        a->cap = c;
    }
    memcpy(a->out + *n, p, k);
    *n += k;
}

static const unsigned char REPL[3] = {0xEF, 0xBF, 0xBD};

/* Length of the sequence a lead byte starts (0: invalid lead) and the allowed range of its second byte. */
static int utf8_lead(unsigned char c, unsigned char *lo, unsigned char *hi) {
    *lo = 0x80, *hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) {
        if (c == 0xE0) *lo = 0xA0;
        if (c == 0xED) *hi = 0x9F;
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (c == 0xF0) *lo = 0x90;
        if (c == 0xF4) *hi = 0x8F;
        return 4;
    }
    return 0;
}

static void out_init(nf_utf8_asm *a) {
    if (!a->out) {
        a->cap = 64;
        a->out = nf_xmalloc(a->cap);
    }
}

const char *nf_utf8_feed(nf_utf8_asm *a, const char *bytes, size_t n, size_t *len) {
    size_t o = 0;
    out_init(a);
    /* work on pend ++ bytes without copying bytes: index i < n_pend reads pend */
    size_t total = (size_t)a->n_pend + n;
    unsigned char pend[4];
    int np = a->n_pend;
    memcpy(pend, a->pend, sizeof pend);
    a->n_pend = 0;
#define AT(i) ((i) < (size_t)np ? pend[i] : (unsigned char)bytes[(i) - np])
    size_t i = 0;
    while (i < total) {
        unsigned char c = AT(i), lo, hi;
        int need = utf8_lead(c, &lo, &hi);
        if (need == 1) {
            out_put(a, &o, &c, 1);
            i++;
            continue;
        }
        if (need == 0) {
            out_put(a, &o, REPL, 3);
            i++;
            continue;
        }
        size_t j = 1;
        int bad = 0;
        for (; j < (size_t)need && i + j < total; j++) {
            unsigned char d = AT(i + j);
            if (j == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF)) {
                bad = 1;
                break;
            }
        }
        if (bad) { /* maximal valid subpart -> one U+FFFD; the offending byte is looked at again */
            out_put(a, &o, REPL, 3);
            i += j;
            continue;
        }
        if (j < (size_t)need) { /* incomplete at the end: keep for the next feed */
            for (size_t k = 0; k < j; k++) a->pend[k] = AT(i + k);
            a->n_pend = (int)j;
            break;
        }
        for (size_t k = 0; k < (size_t)need; k++) {
            unsigned char d = AT(i + k);
            out_put(a, &o, &d, 1);
        }
        i += (size_t)need;
    }
#undef AT
    *len = o;
    return a->out;
}

const char *nf_utf8_flush(nf_utf8_asm *a, size_t *len) {
    size_t o = 0;
    out_init(a);
    if (a->n_pend) out_put(a, &o, REPL, 3);
    a->n_pend = 0;
    *len = o;
    return a->out;
}

void nf_utf8_free(nf_utf8_asm *a) {
    free(a->out);
    memset(a, 0, sizeof *a);
}

/* ---- setup ----------------------------------------------------------------------------------------------- */

nf_session_opts nf_session_opts_default(void) {
    nf_session_opts o;
    memset(&o, 0, sizeof o);
    o.sampler = nf_sampler_defaults();
    return o;
}

static void add_stop(nf_session *s, int32_t id) {
    if (id < 0 || id >= s->n_vocab) return;
    for (int i = 0; i < s->n_stops; i++)
        if (s->stops[i] == id) return;
    s->stops = nf_xrealloc(s->stops, (size_t)(s->n_stops + 1) * sizeof *s->stops);
    s->stops[s->n_stops++] = id;
}

nf_session *nf_session_create(const char *path, const nf_session_opts *opts) {
    nf_session_opts o = opts ? *opts : nf_session_opts_default();
    nf_model *m = nf_model_load(path);
    if (!m) return NULL;
    if (o.n_ctx > 0 && m->hp.n_ctx_train > 0 && o.n_ctx > m->hp.n_ctx_train) { /* before any backend memory */
        nf_fail("context size %lld exceeds the model's context length %d (--ctx at most %d)", (long long)o.n_ctx,
                m->hp.n_ctx_train, m->hp.n_ctx_train);
        nf_model_free(m);
        return NULL;
    }
    nf_session *s = nf_xcalloc(1, sizeof *s);
    s->m = m;
    s->n_vocab = m->hp.n_vocab;
    nf_backend_factory make = o.backend ? o.backend : nf_cpu_backend_create;
    s->be = make(m, o.n_threads);
    if (!s->be) goto fail;
    if (o.tokenizer) {
        s->tok = nf_tokenizer_load(o.tokenizer);
        if (!s->tok) goto fail;
    } else if (gguf_find(m->file, "tokenizer.ggml.model")) {
        s->tok = nf_tokenizer_from_gguf(m->file);
        if (!s->tok) {
            nf_fail_prefix("%s: tokenizer", path);
            goto fail;
        }
    }
    s->n_ctx = o.n_ctx > 0 ? o.n_ctx : (m->hp.n_ctx_train > 0 && m->hp.n_ctx_train < 4096 ? m->hp.n_ctx_train : 4096);
    s->chunk = o.prefill_chunk > 0 ? o.prefill_chunk : s->be->prefill_chunk > 0 ? s->be->prefill_chunk : 256;
    s->max_ck = o.max_checkpoints > 0 ? o.max_checkpoints : 8;
    s->st = nf_backend_state_create(s->be, s->n_ctx < 1024 ? s->n_ctx : 1024); /* device state on a GPU backend */
    if (!s->st) goto fail;
    nf_state_set_limit(s->st, s->n_ctx); /* a forward past --ctx is refused by the state itself */
    s->logits = nf_xmalloc((size_t)s->n_vocab * sizeof(float));
    s->sp = o.sampler;
    s->smp = nf_sampler_new(&s->sp, (int32_t)s->n_vocab);
    if (!s->smp) goto fail;
    if (s->tok) {
        static const char *const names[] = {"<|endoftext|>", "<|user|>", "<|observation|>"};
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) add_stop(s, nf_token_id(s->tok, names[i]));
        nf_special_ids sp = nf_tokenizer_special_ids(s->tok);
        add_stop(s, sp.eos);
        add_stop(s, sp.eot);
    }
    add_stop(s, m->hp.eos_id);
    for (int i = 0; i < o.n_extra_stop; i++) add_stop(s, o.extra_stop[i]);
    return s;
fail:
    nf_session_free(s);
    return NULL;
}

static void drop_ckpts_from(nf_session *s, int k) {
    for (int i = k; i < s->n_ck; i++) {
        nf_state_ckpt_free(&s->cks[i].ck);
        free(s->cks[i].logits);
    }
    if (k < s->n_ck) s->n_ck = k;
}

void nf_session_free(nf_session *s) {
    if (!s) return;
    nf_spec_free(s->spec);
    drop_ckpts_from(s, 0);
    free(s->cks);
    nf_sampler_free(s->smp);
    free(s->logits);
    free(s->hist);
    free(s->stops);
    nf_utf8_free(&s->utf);
    nf_state_free(s->st);
    nf_tokenizer_free(s->tok);
    nf_backend_free(s->be);
    nf_model_free(s->m);
    free(s);
}

void nf_session_set_progress(nf_session *s, nf_prefill_progress fn, void *user, double every_s) {
    s->progress = fn;
    s->progress_user = user;
    s->progress_every = every_s;
}

void nf_prefill_progress_line(char *buf, size_t n, int64_t done, int64_t total, double seconds) {
    const double tps = seconds > 0 ? (double)done / seconds : 0;
    if (done < total && tps > 0)
        snprintf(buf, n, "prefill %lld/%lld tokens (%.1f%%), %.1f t/s, ~%.0f s left", (long long)done,
                 (long long)total, 100.0 * (double)done / (double)total, tps, (double)(total - done) / tps);
    else
        snprintf(buf, n, "prefill %lld/%lld tokens (%.1f%%), %.1f t/s, %.1f s", (long long)done, (long long)total,
                 total ? 100.0 * (double)done / (double)total : 100.0, tps, seconds);
}

const nf_model *nf_session_model(const nf_session *s) { return s->m; }
const nf_tokenizer *nf_session_tokenizer(const nf_session *s) { return s->tok; }
nf_backend *nf_session_backend(nf_session *s) { return s->be; }
int64_t nf_session_n_ctx(const nf_session *s) { return s->n_ctx; }

const int32_t *nf_session_tokens(const nf_session *s, size_t *n) {
    *n = s->n_hist;
    return s->hist;
}

const float *nf_session_logits(const nf_session *s) { return s->n_hist && s->have_logits ? s->logits : NULL; }

bool nf_session_is_stop(const nf_session *s, int32_t id) {
    for (int i = 0; i < s->n_stops; i++)
        if (s->stops[i] == id) return true;
    return false;
}

int nf_session_checkpoints(const nf_session *s, int64_t *pos, int max) {
    for (int i = 0; i < s->n_ck && i < max; i++) pos[i] = s->cks[i].ck.pos;
    return s->n_ck;
}

void nf_session_set_sampler(nf_session *s, const nf_sampler_params *p) {
    nf_sampler *n = nf_sampler_new(p, (int32_t)s->n_vocab);
    if (!n) return;
    nf_sampler_free(s->smp);
    s->smp = n;
    s->sp = *p;
    s->smp_synced = 0;
    s->smp_dirty = false;
}

void nf_session_reset(nf_session *s) {
    nf_state_reset(s->st);
    drop_ckpts_from(s, 0);
    s->n_hist = 0;
    s->have_logits = false;
    if (s->smp_synced) s->smp_dirty = true;
    s->utf.n_pend = 0;
}

/* ---- history, checkpoints, rollback ---------------------------------------------------------------------- */

static void hist_push(nf_session *s, const int32_t *ids, size_t n) {
    if (s->n_hist + n > s->cap_hist) {
        size_t c = s->cap_hist ? s->cap_hist : 256;
        while (c < s->n_hist + n) c *= 2;
        s->hist = nf_xrealloc(s->hist, c * sizeof *s->hist);
        s->cap_hist = c;
    }
    memcpy(s->hist + s->n_hist, ids, n * sizeof *ids);
    s->n_hist += n;
}

int nf_session_checkpoint(nf_session *s) {
    if (s->n_hist == 0 || !s->have_logits) return 0;
    if (s->n_ck && s->cks[s->n_ck - 1].ck.pos == (int64_t)s->n_hist) return 0;
    if (s->n_ck == s->max_ck) { /* drop the oldest */
        nf_state_ckpt_free(&s->cks[0].ck);
        free(s->cks[0].logits);
        memmove(s->cks, s->cks + 1, (size_t)(s->n_ck - 1) * sizeof *s->cks);
        s->n_ck--;
    }
    sess_ckpt c;
    memset(&c, 0, sizeof c);
    if (nf_state_checkpoint(s->st, &c.ck) < 0) return -1;
    c.logits = malloc((size_t)s->n_vocab * sizeof(float));
    if (!c.logits) {
        nf_state_ckpt_free(&c.ck);
        return nf_fail("session: out of memory for a checkpoint");
    }
    memcpy(c.logits, s->logits, (size_t)s->n_vocab * sizeof(float));
    s->cks = nf_xrealloc(s->cks, (size_t)(s->n_ck + 1) * sizeof *s->cks);
    s->cks[s->n_ck++] = c;
    return 0;
}

/* Cut the history to at most `target` tokens using the latest checkpoint at or below target (or a reset).
 * Returns the new length (<= target), or -1 (session reset). */
static int64_t rollback_to(nf_session *s, size_t target) {
    if (target >= s->n_hist) return (int64_t)s->n_hist;
    int k = s->n_ck - 1;
    while (k >= 0 && s->cks[k].ck.pos > (int64_t)target) k--;
    if (k < 0) {
        nf_session_reset(s);
        return 0;
    }
    if (nf_state_rollback(s->st, &s->cks[k].ck) < 0) {
        nf_session_reset(s);
        return -1;
    }
    s->n_hist = (size_t)s->cks[k].ck.pos;
    memcpy(s->logits, s->cks[k].logits, (size_t)s->n_vocab * sizeof(float));
    s->have_logits = true;
    drop_ckpts_from(s, k + 1);
    if (s->n_hist < s->smp_synced) s->smp_dirty = true;
    s->utf.n_pend = 0;
    return (int64_t)s->n_hist;
}

/* ---- prefill ------------------------------------------------------------------------------------------- */

int nf_session_prefill(nf_session *s, const int32_t *ids, size_t n, const int64_t *marks, int n_marks,
                       volatile sig_atomic_t *cancel, nf_prefill_stats *stp) {
    nf_prefill_stats local;
    nf_prefill_stats *st = stp ? stp : &local;
    memset(st, 0, sizeof *st);
    st->reused = (int64_t)s->n_hist;
    s->t_prefill = now_s();
    s->prefill_since_gen = true;
    if (n == 0) return 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= s->n_vocab)
            return nf_fail("prefill: token id %d at %zu out of range [0, %lld)", ids[i], i, (long long)s->n_vocab);
    if ((int64_t)(s->n_hist + n) > s->n_ctx)
        return nf_fail("prefill: %zu + %zu tokens exceed the context size %lld", s->n_hist, n, (long long)s->n_ctx);
    int mi = 0;
    size_t i = 0;
    double t0 = now_s(), t_report = t0;
    bool reported = false;
    while (i < n) {
        if (cancel && *cancel) {
            st->cancelled = true;
            st->seconds = now_s() - t0;
            return 1;
        }
        size_t T = n - i < (size_t)s->chunk ? n - i : (size_t)s->chunk;
        int64_t base = (int64_t)s->n_hist;
        while (mi < n_marks && marks[mi] <= base) mi++;
        if (mi < n_marks && marks[mi] < base + (int64_t)T) T = (size_t)(marks[mi] - base);
        int frc = s->spec ? nf_spec_target_forward(s->spec, s->be, s->st, ids + i, (int)T, s->logits, 0) /* drafter sees it */
                          : nf_forward(s->be, s->st, ids + i, (int)T, s->logits, 0, NULL);
        if (frc < 0) {
            nf_fail_prefix("prefill");
            nf_session_reset(s);
            return -1;
        }
        hist_push(s, ids + i, T);
        s->have_logits = true;
        st->prefilled += (int64_t)T;
        i += T;
        if (s->progress && s->progress_every >= 0) { /* the last report of a reported prefill says it finished */
            const double t = now_s();
            if (t - t_report >= s->progress_every || (i == n && reported)) {
                s->progress(s->progress_user, (int64_t)i, (int64_t)n, t - t0);
                t_report = t;
                reported = true;
            }
        }
        if (mi < n_marks && marks[mi] == (int64_t)s->n_hist && nf_session_checkpoint(s) < 0) {
            nf_session_reset(s);
            return -1;
        }
    }
    st->seconds = now_s() - t0;
    return 0;
}

int nf_session_set_prompt(nf_session *s, const int32_t *ids, size_t n, const int64_t *marks, int n_marks,
                          volatile sig_atomic_t *cancel, nf_prefill_stats *stp) {
    nf_prefill_stats local;
    nf_prefill_stats *st = stp ? stp : &local;
    memset(st, 0, sizeof *st);
    double t_start = now_s();
    if (n == 0) return nf_fail("set_prompt: empty prompt");
    if ((int64_t)n > s->n_ctx) /* refuse before touching the state */
        return nf_fail("set_prompt: %zu tokens exceed the context size %lld", n, (long long)s->n_ctx);
    size_t c = 0;
    while (c < n && c < s->n_hist && s->hist[c] == ids[c]) c++;
    /* keep c tokens; when the prompt is a strict prefix of the history we still need the logits after ids[n-1] */
    int64_t p = rollback_to(s, c);
    if (p < 0) return -1;
    int rc = 0;
    if ((size_t)p < n) {
        rc = nf_session_prefill(s, ids + p, n - (size_t)p, marks, n_marks, cancel, st);
        if (rc < 0) return -1;
    }
    st->reused = p;
    s->t_prefill = t_start;
    s->prefill_since_gen = true;
    if (rc == 0 && nf_session_checkpoint(s) < 0) {
        nf_session_reset(s);
        return -1;
    }
    return rc;
}

int nf_session_truncate(nf_session *s, size_t n) {
    if (n >= s->n_hist) return 0;
    int32_t *keep = nf_xmalloc((n ? n : 1) * sizeof *keep);
    memcpy(keep, s->hist, n * sizeof *keep);
    int64_t p = rollback_to(s, n);
    int rc = p < 0 ? -1 : 0;
    if (rc == 0 && (size_t)p < n) rc = nf_session_prefill(s, keep + p, n - (size_t)p, NULL, 0, NULL, NULL);
    free(keep);
    return rc < 0 ? -1 : 0;
}

/* ---- generation ------------------------------------------------------------------------------------------ */

const char *nf_stop_reason_name(nf_stop_reason r) {
    switch (r) {
    case NF_STOP_NONE: return "none";
    case NF_STOP_TOKEN: return "stop token";
    case NF_STOP_MAX_TOKENS: return "max tokens";
    case NF_STOP_CANCEL: return "cancelled";
    case NF_STOP_CALLBACK: return "stopped by caller";
    case NF_STOP_CTX_FULL: return "context full";
    case NF_STOP_ERROR: return "error";
    }
    return "?";
}

static void sync_sampler(nf_session *s) {
    if (s->smp_dirty) {
        nf_sampler_reset(s->smp);
        s->smp_synced = 0;
        s->smp_dirty = false;
    }
    for (size_t i = s->smp_synced; i < s->n_hist; i++) nf_sampler_accept(s->smp, s->hist[i]);
    s->smp_synced = s->n_hist;
}

/* ---- speculative decoding hook (spec.h) ------------------------------------------------------------------- */

void nf_session_set_spec(nf_session *s, nf_spec *sp) {
    if (s->spec && s->spec != sp) nf_spec_free(s->spec);
    s->spec = sp;
    if (sp && s->tok) nf_spec_set_think_ids(sp, nf_token_id(s->tok, "<think>"), nf_token_id(s->tok, "</think>"));
}

nf_spec *nf_session_spec(nf_session *s) { return s->spec; }

static bool spec_is_stop(void *user, int32_t id) { return nf_session_is_stop(user, id); }

/* Feed `tok` through the speculative decoder and emit the verified drafts it commits with it (each one is a
 * generated token: callback, history, stats). A callback stop in the middle of a block truncates the state to
 * the emitted tokens. 0 or -1. */
static int spec_feed(nf_session *s, const nf_gen_opts *g, int32_t tok, nf_token_fn cb, void *user, nf_gen_stats *st,
                     int *stop_req) {
    int64_t room = s->n_ctx - (int64_t)s->n_hist - 1; /* tokens that may follow tok */
    int64_t left = g->max_tokens > 0 ? g->max_tokens - st->n_tokens : room;
    int64_t mx = room < left ? room : left;
    if (mx > 32) mx = 32;
    if (mx < 0 || *stop_req) mx = 0; /* the caller stops after tok: no drafts */
    nf_spec_io io = {.be = s->be, .st = s->st, .hist = s->hist, .n_hist = s->n_hist, .logits = s->logits,
                     .smp = s->smp, .sp = &s->sp, .is_stop = g->ignore_stop ? NULL : spec_is_stop, .user = s};
    int32_t extra[32];
    int ne = 0;
    if (nf_spec_feed(s->spec, &io, tok, (int)mx, extra, &ne) < 0) return -1;
    hist_push(s, &tok, 1);
    st->n_decoded++;
    for (int i = 0; i < ne; i++) {
        nf_gen_token ev = {.id = extra[i], .index = st->n_tokens};
        size_t blen = 0;
        const char *bytes = s->tok ? nf_token_bytes(s->tok, extra[i], &blen) : NULL;
        ev.text = nf_utf8_feed(&s->utf, bytes ? bytes : "", bytes ? blen : 0, &ev.len);
        st->n_tokens++;
        hist_push(s, &extra[i], 1);
        st->n_decoded++;
        if (cb && cb(user, &ev)) {
            *stop_req = 1;
            if (i + 1 < ne) { /* drop the fed but unemitted rest of the block */
                if (nf_spec_truncate(s->spec, &io, i + 1) < 0) return -1;
                s->smp_dirty = true; /* the sampler saw the whole block: rebuild it from the history */
            }
            break;
        }
    }
    if (!s->smp_dirty) s->smp_synced = s->n_hist;
    return 0;
}

int nf_session_generate(nf_session *s, const nf_gen_opts *gp, nf_token_fn cb, void *user, nf_gen_stats *stp) {
    nf_gen_opts g;
    memset(&g, 0, sizeof g);
    if (gp) g = *gp;
    nf_gen_stats local;
    nf_gen_stats *st = stp ? stp : &local;
    memset(st, 0, sizeof *st);
    st->stop_token = -1;
    if (!s->n_hist || !s->have_logits) return nf_fail("generate: the history is empty (prefill a prompt first)");
    double t0 = now_s(), t_first = t0;
    double t_from = s->prefill_since_gen ? s->t_prefill : t0;
    s->prefill_since_gen = false;
    sync_sampler(s);
    s->utf.n_pend = 0;
    if (s->spec) nf_spec_begin(s->spec);
    int rc = 0;
    for (;;) {
        if (g.cancel && *g.cancel) { st->stop = NF_STOP_CANCEL; break; }
        if (g.max_tokens > 0 && st->n_tokens >= g.max_tokens) { st->stop = NF_STOP_MAX_TOKENS; break; }
        if ((int64_t)s->n_hist >= s->n_ctx) { st->stop = NF_STOP_CTX_FULL; break; }
        int32_t tok = s->spec ? nf_spec_take_pending(s->spec) : -1; /* a token a spec cycle already chose */
        if (tok < 0) tok = nf_sampler_sample(s->smp, s->logits);
        if (st->n_tokens == 0) {
            t_first = now_s();
            st->ttft_s = t_first - t_from;
        }
        nf_gen_token ev = {.id = tok, .index = st->n_tokens};
        size_t blen = 0;
        const char *bytes = s->tok ? nf_token_bytes(s->tok, tok, &blen) : NULL;
        ev.text = nf_utf8_feed(&s->utf, bytes ? bytes : "", bytes ? blen : 0, &ev.len);
        st->n_tokens++;
        if (!g.ignore_stop && nf_session_is_stop(s, tok)) {
            ev.is_stop = true;
            st->stop = NF_STOP_TOKEN;
            st->stop_token = tok;
            if (cb) cb(user, &ev);
            break;
        }
        int stop_req = cb ? cb(user, &ev) : 0;
        nf_sampler_accept(s->smp, tok);
        if (s->spec) { /* feed tok (with tokens a cycle deferred) plus any verified drafts (emitted here) */
            if (spec_feed(s, &g, tok, cb, user, st, &stop_req) < 0) {
                nf_fail_prefix("generate (speculative)");
                nf_session_reset(s);
                st->stop = NF_STOP_ERROR;
                rc = -1;
                break;
            }
            if (stop_req) { st->stop = NF_STOP_CALLBACK; break; }
            continue;
        }
        if (nf_forward(s->be, s->st, &tok, 1, s->logits, 0, NULL) < 0) {
            nf_fail_prefix("generate");
            nf_session_reset(s);
            st->stop = NF_STOP_ERROR;
            rc = -1;
            break;
        }
        hist_push(s, &tok, 1);
        s->smp_synced = s->n_hist;
        st->n_decoded++;
        if (stop_req) { st->stop = NF_STOP_CALLBACK; break; }
    }
    if (s->spec && rc == 0) { /* feed tokens whose forward a speculative cycle deferred (spec.h) */
        nf_spec_io io = {.be = s->be, .st = s->st, .hist = s->hist, .n_hist = s->n_hist, .logits = s->logits,
                         .smp = s->smp, .sp = &s->sp, .user = s};
        if (nf_spec_flush(s->spec, &io) < 0) {
            nf_fail_prefix("generate (speculative)");
            nf_session_reset(s);
            st->stop = NF_STOP_ERROR;
            rc = -1;
        }
    }
    size_t fl = 0;
    const char *f = nf_utf8_flush(&s->utf, &fl);
    if (fl && cb && rc == 0) {
        nf_gen_token ev = {.id = -1, .index = st->n_tokens, .text = f, .len = fl};
        cb(user, &ev);
    }
    st->decode_s = st->n_tokens ? now_s() - t_first : 0;
    return rc;
}

/* ---- whole-state export / import (engine/session_io.h; the server's on-disk state cache) ----------------------- */

const nf_state *nf_session_state(const nf_session *s) { return s->st; }

int nf_session_adopt(nf_session *s, const int32_t *ids, size_t n, const nf_state *st, const float *logits) {
    if (n == 0 || st->pos != (int64_t)n) return nf_fail("adopt: the state holds %lld tokens, not %zu", (long long)st->pos, n);
    if ((int64_t)n > s->n_ctx) return nf_fail("adopt: %zu tokens exceed the context size %lld", n, (long long)s->n_ctx);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= s->n_vocab) return nf_fail("adopt: token id %d out of range", ids[i]);
    nf_session_reset(s);
    if (nf_state_restore(s->st, st) < 0) {
        nf_session_reset(s);
        return -1;
    }
    hist_push(s, ids, n);
    memcpy(s->logits, logits, (size_t)s->n_vocab * sizeof(float));
    s->have_logits = true;
    if (nf_session_checkpoint(s) < 0) {
        nf_session_reset(s);
        return -1;
    }
    return 0;
}
