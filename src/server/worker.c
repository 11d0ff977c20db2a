/* worker.c — the job queue and the one inference worker (see worker.h). */
#include "server/worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "server/disk_cache.h"
#include "server/metrics.h"
#include "server/prefix_cache.h"
#include "server/sse.h"
#include "server/tool_replay.h"
#include "engine/session_io.h"
#include "engine/spec.h"
#include "text/output_parser.h"
#include "util/error.h"

struct nf_worker {
    nf_session *s;
    nf_worker_opts o;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    nf_job *qhead, *qtail;
    nf_job *running;
    nf_state_ckpt prompt_ck;   /* the live state at its last prompt end (pos 0: none) */
    float *prompt_logits;
    int qlen;
    bool busy, stop, stopped;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- jobs --------------------------------------------------------------------------------------------- */

nf_job *nf_job_new(nf_srv_request *req, int32_t *tokens, size_t n, int64_t *marks, int n_marks, int64_t max_tokens,
                   bool prompt_thinking) {
    nf_job *j = nf_xcalloc(1, sizeof *j);
    j->req = *req;
    memset(req, 0, sizeof *req);
    j->tokens = tokens;
    j->n_tokens = n;
    j->marks = marks;
    j->n_marks = n_marks;
    j->max_tokens = max_tokens;
    j->prompt_thinking = prompt_thinking;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->t_submit = now_s();
    return j;
}

void nf_ev_free_list(nf_ev *e) {
    while (e) {
        nf_ev *n = e->next;
        free(e->text);
        free(e->id);
        free(e->name);
        json_decref(e->args);
        free(e);
        e = n;
    }
}

void nf_job_release(nf_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int r = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (r > 0) return;
    nf_req_free(&j->req);
    free(j->tokens);
    free(j->marks);
    nf_ev_free_list(j->head);
    free(j->res.stop_seq);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void nf_job_cancel(nf_job *j) { j->cancel = 1; }

nf_ev *nf_job_wait(nf_job *j, int timeout_ms, bool *done) {
    pthread_mutex_lock(&j->mu);
    if (!j->head && !j->done && timeout_ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
    }
    nf_ev *e = j->head;
    j->head = j->tail = NULL;
    *done = j->done;
    pthread_mutex_unlock(&j->mu);
    return e;
}

static void job_push(nf_job *j, nf_ev *e) {
    pthread_mutex_lock(&j->mu);
    if (j->tail) j->tail->next = e;
    else j->head = e;
    j->tail = e;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static void job_finish(nf_job *j) {
    pthread_mutex_lock(&j->mu);
    j->done = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* ---- one generation ------------------------------------------------------------------------------------ */

typedef struct {
    nf_job *job;
    const nf_session *s;
    int n_tools;
    bool parser_done;
    bool stop_hit;
    char *pend;       /* visible text held back while it could still begin a stop sequence */
    size_t npend, cap;
    size_t max_stop;
    nf_buf reasoning, text; /* the whole turn as the client will see it (tool replay) */
    json_t *calls;          /* [{id, function:{name, arguments}}] */
} gen_ctx;

static void random_id(char *out, const char *prefix) {
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char rnd[24];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        static unsigned long ctr;
        unsigned long x = (unsigned long)time(NULL) ^ (++ctr * 0x9E3779B97F4A7C15UL);
        for (size_t i = 0; i < sizeof rnd; i++) rnd[i] = (unsigned char)(x >> (i % 8 * 8)) ^ (unsigned char)(i * 31);
    }
    size_t n = strlen(prefix);
    memcpy(out, prefix, n);
    for (size_t i = 0; i < sizeof rnd; i++) out[n + i] = al[rnd[i] % 62];
    out[n + sizeof rnd] = 0;
}

static void emit_text(gen_ctx *c, nf_ev_kind kind, const char *s, size_t n) {
    if (!n) return;
    nf_buf_add(kind == NF_EV_REASONING ? &c->reasoning : &c->text, s, n);
    nf_ev *e = nf_xcalloc(1, sizeof *e);
    e->kind = kind;
    e->text = nf_xmalloc(n + 1);
    memcpy(e->text, s, n);
    e->text[n] = 0;
    e->len = n;
    job_push(c->job, e);
}

/* length of the longest prefix of s[0..n) ending on a UTF-8 character boundary that is <= want */
static size_t utf8_cut(const char *s, size_t n, size_t want) {
    if (want >= n) return n;
    while (want > 0 && ((unsigned char)s[want] & 0xC0) == 0x80) want--;
    return want;
}

static void visible_text(gen_ctx *c, const char *s, size_t n) {
    nf_job *j = c->job;
    if (c->stop_hit) return;
    if (!j->req.n_stop) {
        emit_text(c, NF_EV_TEXT, s, n);
        return;
    }
    if (c->npend + n + 1 > c->cap) {
        c->cap = (c->npend + n + 1) * 2;
        c->pend = nf_xrealloc(c->pend, c->cap);
    }
    memcpy(c->pend + c->npend, s, n);
    c->npend += n;
    /* earliest match of any stop sequence */
    size_t best = (size_t)-1;
    int which = -1;
    for (int i = 0; i < j->req.n_stop; i++) {
        const char *st = j->req.stop[i];
        size_t sl = strlen(st);
        const char *hit = memmem(c->pend, c->npend, st, sl);
        if (hit && (size_t)(hit - c->pend) < best) best = (size_t)(hit - c->pend), which = i;
    }
    if (which >= 0) {
        emit_text(c, NF_EV_TEXT, c->pend, best);
        c->npend = 0;
        c->stop_hit = true;
        free(j->res.stop_seq);
        j->res.stop_seq = nf_xstrdup(j->req.stop[which]);
        return;
    }
    size_t keep = c->max_stop - 1;
    if (c->npend > keep) {
        size_t out = utf8_cut(c->pend, c->npend, c->npend - keep);
        emit_text(c, NF_EV_TEXT, c->pend, out);
        memmove(c->pend, c->pend + out, c->npend - out);
        c->npend -= out;
    }
}

static void on_parsed(void *user, const nf_out_event *ev) {
    gen_ctx *c = user;
    switch (ev->kind) {
    case NF_OUT_REASONING:
        if (!c->stop_hit) emit_text(c, NF_EV_REASONING, ev->text, ev->len);
        break;
    case NF_OUT_TEXT:
        visible_text(c, ev->text, ev->len);
        break;
    case NF_OUT_TOOL_CALL: {
        if (c->stop_hit) break;
        if (c->npend) { /* text before the call can no longer grow into a stop sequence */
            emit_text(c, NF_EV_TEXT, c->pend, c->npend);
            c->npend = 0;
        }
        nf_ev *e = nf_xcalloc(1, sizeof *e);
        e->kind = NF_EV_TOOL_CALL;
        e->text = nf_xmalloc(ev->len + 1);
        memcpy(e->text, ev->text, ev->len);
        e->text[ev->len] = 0;
        e->len = ev->len;
        e->name = nf_xstrdup(ev->name);
        e->args = json_incref(ev->arguments);
        char id[40];
        random_id(id, c->job->req.api == NF_API_ANTHROPIC ? "toolu_" : "call_");
        e->id = nf_xstrdup(id);
        c->n_tools++;
        json_array_append_new(c->calls, json_pack("{s:s,s:{s:s,s:O}}", "id", id, "function", "name", ev->name,
                                                  "arguments", ev->arguments));
        job_push(c->job, e);
        break;
    }
    case NF_OUT_END:
        c->parser_done = true;
        break;
    }
}

static int on_token(void *user, const nf_gen_token *t) {
    void **pp = user;
    gen_ctx *c = pp[0];
    nf_output_parser *p = pp[1];
    if (t->len) nf_output_parser_feed(p, t->text, t->len);
    return c->stop_hit || c->parser_done || c->job->cancel;
}

/* Tokenize forced output text, recognising the model's special token texts (<tool_call>, </think>, ...). */
static void tokenize_forced(const nf_tokenizer *tk, const char *s, nf_tokens *out) {
    size_t n = strlen(s), start = 0, i = 0;
    while (i < n) {
        size_t sl = 0;
        if (s[i] == '<' || s[i] == '[') {
            char close = s[i] == '<' ? '>' : ']';
            for (size_t k = i + 1; k < n && k - i < 24; k++)
                if (s[k] == close) {
                    int32_t id = nf_token_id_n(tk, s + i, k + 1 - i);
                    if (id >= 0 && nf_token_is_special(tk, id)) sl = k + 1 - i;
                    break;
                }
        }
        if (sl) {
            if (i > start) nf_tokenize_text(tk, s + start, i - start, out);
            nf_tokens_push(out, nf_token_id_n(tk, s + i, sl));
            i += sl;
            start = i;
        } else {
            i++;
        }
    }
    if (n > start) nf_tokenize_text(tk, s + start, n - start, out);
}

/* Store the exact tokens of this tool-call turn under its tool ids (tool_replay.h): from after the prompt's
 * last <|assistant|> to the end of the live history (the stop token was not fed). */
static void remember_turn(nf_session *s, const nf_job *j, gen_ctx *c) {
    int32_t asst = nf_token_id(nf_session_tokenizer(s), "<|assistant|>");
    size_t a = j->n_tokens;
    while (a > 0 && j->tokens[a - 1] != asst) a--;
    if (a == 0) return;
    size_t nh;
    const int32_t *h = nf_session_tokens(s, &nh);
    if (nh <= a || memcmp(h, j->tokens, a * sizeof *h)) return;
    size_t n_ids = json_array_size(c->calls), i;
    const char **ids = nf_xmalloc(n_ids * sizeof *ids);
    json_t *call;
    json_array_foreach(c->calls, i, call) ids[i] = json_string_value(json_object_get(call, "id"));
    char *canon = nf_replay_canon(c->reasoning.s ? c->reasoning.s : "", c->text.s ? c->text.s : "", c->calls);
    nf_replay_store(ids, (int)n_ids, h + a, nh - a, canon);
    free(canon);
    free(ids);
}

static void run_job(nf_worker *w, nf_job *j) {
    nf_session *s = w->s;
    nf_job_result *r = &j->res;
    r->queue_s = now_s() - j->t_submit;
    r->prompt_tokens = (int64_t)j->n_tokens;
    if (j->cancel) {
        r->finish = NF_FIN_CANCELLED;
        nf_metric_add(NF_M_CANCELLED, 1);
        return;
    }
    pthread_mutex_lock(&j->mu);
    j->started = true;
    pthread_mutex_unlock(&j->mu);

    nf_session_set_sampler(s, &j->req.sp);
    if (w->o.disk || w->o.ram) {
        /* how much of the live history this prompt can keep (the session rolls back to a checkpoint <= the
         * common prefix) */
        size_t nh, c = 0;
        const int32_t *h = nf_session_tokens(s, &nh);
        while (c < nh && c < j->n_tokens && h[c] == j->tokens[c]) c++;
        int64_t usable = 0;
        if (c == nh) {
            usable = (int64_t)nh;
        } else {
            int64_t pos[64];
            int k = nf_session_checkpoints(s, pos, 64);
            for (int i = 0; i < k && i < 64; i++)
                if (pos[i] <= (int64_t)c && pos[i] > usable) usable = pos[i];
        }
        int64_t lost = (int64_t)nh - usable;
        if (w->o.ram && lost >= 64 && lost * 4 >= (int64_t)nh) { /* another conversation: keep this one in RAM */
            nf_prefix_cache_put(w->o.ram, s, &w->prompt_ck, w->prompt_logits);
            w->prompt_logits = NULL;
        }
        if (w->o.ram) {
            r->ram_tokens = nf_prefix_cache_get(w->o.ram, s, j->tokens, j->n_tokens, usable);
            if (r->ram_tokens > 0) {
                usable = r->ram_tokens;
                nf_metric_add(NF_M_RAM_HITS, 1);
            }
        }
        if (w->o.disk) { /* a saved state that covers more of the prompt than the live state can give */
            r->disk_tokens = nf_disk_cache_load(w->o.disk, s, j->tokens, j->n_tokens, usable);
            if (r->disk_tokens > 0) nf_metric_add(NF_M_DISK_HITS, 1);
        }
    }
    /* the prompt-end checkpoint is re-taken after this prompt (the state may move below it now) */
    if (w->prompt_ck.pos > 0) nf_state_ckpt_free(&w->prompt_ck);
    memset(&w->prompt_ck, 0, sizeof w->prompt_ck);
    free(w->prompt_logits);
    w->prompt_logits = NULL;
    nf_prefill_stats pst;
    int rc = nf_session_set_prompt(s, j->tokens, j->n_tokens, j->marks, j->n_marks, &j->cancel, &pst);
    r->cached_tokens = pst.reused;
    r->prefilled = pst.prefilled;
    r->prefill_s = pst.seconds;
    nf_metric_add(NF_M_PROMPT_TOKENS, (int64_t)j->n_tokens);
    nf_metric_add(NF_M_CACHED_TOKENS, pst.reused);
    nf_metric_add(NF_M_PREFILL_TOKENS, pst.prefilled);
    nf_metric_add(NF_M_PREFILL_US, (int64_t)(pst.seconds * 1e6));
    if (pst.reused > 0) nf_metric_add(NF_M_CACHE_HITS, 1);
    if (rc < 0) {
        r->finish = NF_FIN_ERROR;
        snprintf(r->error, sizeof r->error, "prefill failed: %s", nf_error());
        return;
    }
    if (rc == 1) {
        r->finish = NF_FIN_CANCELLED;
        nf_metric_add(NF_M_CANCELLED, 1);
        return;
    }
    if (w->o.ram && nf_state_checkpoint(nf_session_state(s), &w->prompt_ck) == 0) {
        size_t nv = (size_t)nf_session_model(s)->hp.n_vocab;
        w->prompt_logits = nf_xmalloc(nv * sizeof(float));
        memcpy(w->prompt_logits, nf_session_logits(s), nv * sizeof(float));
    }
    if (w->o.disk) { /* the prompt end is where this conversation's next turn will continue */
        int sv = nf_disk_cache_save(w->o.disk, s);
        if (sv > 0) nf_metric_add(NF_M_DISK_SAVES, 1);
        else if (sv < 0) fprintf(stderr, "nf-server: %s\n", nf_error());
    }

    gen_ctx c = {.job = j, .s = s, .calls = json_array()};
    for (int i = 0; i < j->req.n_stop; i++) {
        size_t l = strlen(j->req.stop[i]);
        if (l > c.max_stop) c.max_stop = l;
    }
    nf_output_parser_opts po = {.in_reasoning = j->prompt_thinking, .tools = j->req.tools};
    nf_output_parser *p = nf_output_parser_new(&po, on_parsed, &c);
    void *pp[2] = {&c, p};
    nf_gen_stats gst;
    memset(&gst, 0, sizeof gst);
    double t0 = now_s();
    if (j->req.force_output && w->o.allow_forced_output) {
        /* test hook: teacher-force the given output through the model instead of sampling */
        nf_tokens ft = {0};
        tokenize_forced(nf_session_tokenizer(s), j->req.force_output, &ft);
        size_t n = ft.n;
        if (j->max_tokens > 0 && (int64_t)n > j->max_tokens) n = (size_t)j->max_tokens;
        bool last_stop = n && n == ft.n && nf_session_is_stop(s, ft.ids[n - 1]);
        size_t feed = last_stop ? n - 1 : n;
        nf_prefill_stats fst;
        int frc = feed ? nf_session_prefill(s, ft.ids, feed, NULL, 0, &j->cancel, &fst) : 0;
        if (frc < 0) {
            rc = -1;
        } else {
            for (size_t i = 0; i < n && !c.stop_hit && !c.parser_done; i++) {
                size_t bl;
                const char *b = nf_token_bytes(nf_session_tokenizer(s), ft.ids[i], &bl);
                nf_output_parser_feed(p, b, bl);
                gst.n_tokens++;
            }
            gst.stop = last_stop ? NF_STOP_TOKEN : (int64_t)n < (int64_t)ft.n ? NF_STOP_MAX_TOKENS : NF_STOP_CALLBACK;
            if (frc == 1) gst.stop = NF_STOP_CANCEL;
        }
        nf_tokens_free(&ft);
    } else {
        nf_gen_opts g = {.max_tokens = j->max_tokens, .cancel = &j->cancel};
        rc = nf_session_generate(s, &g, on_token, pp, &gst);
        if (nf_session_spec(s)) { /* per request: the decoder's stats restart with every generate call */
            const nf_spec_stats *ss = nf_spec_stats_get(nf_session_spec(s));
            nf_metric_add(NF_M_SPEC_CYCLES, ss->cycles);
            nf_metric_add(NF_M_SPEC_DRAFTED, ss->drafted);
            nf_metric_add(NF_M_SPEC_ACCEPTED, ss->accepted);
            char line[512];
            nf_spec_stats_line(nf_session_spec(s), line, sizeof line);
            fprintf(stderr, "nf-server: %s\n", line);
        }
    }
    nf_output_parser_finish(p);
    nf_output_parser_free(p);
    if (c.npend && !c.stop_hit) emit_text(&c, NF_EV_TEXT, c.pend, c.npend);
    free(c.pend);
    r->decode_s = now_s() - t0;
    r->completion_tokens = gst.n_tokens;
    nf_metric_add(NF_M_GEN_TOKENS, gst.n_tokens);
    nf_metric_add(NF_M_DECODE_US, (int64_t)(r->decode_s * 1e6));
    if (rc < 0 || gst.stop == NF_STOP_ERROR) {
        r->finish = NF_FIN_ERROR;
        snprintf(r->error, sizeof r->error, "generation failed: %s", nf_error());
    } else if (c.stop_hit) {
        r->finish = NF_FIN_STOP_SEQ;
    } else if (j->cancel) {
        r->finish = NF_FIN_CANCELLED;
        nf_metric_add(NF_M_CANCELLED, 1);
    } else if (c.n_tools > 0) {
        r->finish = NF_FIN_TOOL_CALLS;
    } else if (gst.stop == NF_STOP_MAX_TOKENS || gst.stop == NF_STOP_CTX_FULL) {
        r->finish = NF_FIN_LENGTH;
    } else {
        r->finish = NF_FIN_STOP;
    }
    if (r->finish == NF_FIN_TOOL_CALLS) remember_turn(s, j, &c);
    nf_buf_free(&c.reasoning);
    nf_buf_free(&c.text);
    json_decref(c.calls);
}

static void *worker_main(void *arg) {
    nf_worker *w = arg;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        while (!w->qhead && !w->stop) pthread_cond_wait(&w->cv, &w->mu);
        nf_job *j = w->qhead;
        if (!j) {
            pthread_mutex_unlock(&w->mu);
            break;
        }
        w->qhead = j->qnext;
        if (!w->qhead) w->qtail = NULL;
        w->qlen--;
        w->busy = true;
        w->running = j;
        if (w->stop) j->cancel = 1;
        pthread_mutex_unlock(&w->mu);
        run_job(w, j);
        nf_metric_add(NF_M_GENERATIONS, 1);
        pthread_mutex_lock(&w->mu);
        w->running = NULL;
        w->busy = false;
        pthread_mutex_unlock(&w->mu);
        job_finish(j);
        nf_job_release(j);
    }
    return NULL;
}

nf_worker *nf_worker_start(nf_session *s, const nf_worker_opts *o) {
    nf_worker *w = nf_xcalloc(1, sizeof *w);
    w->s = s;
    if (o) w->o = *o;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->th, NULL, worker_main, w)) {
        free(w);
        nf_fail("worker: cannot start a thread");
        return NULL;
    }
    return w;
}

void nf_worker_stop(nf_worker *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    if (w->running) w->running->cancel = 1;
    for (nf_job *j = w->qhead; j; j = j->qnext) j->cancel = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL);
    pthread_mutex_lock(&w->mu);
    w->stopped = true; /* kept allocated: connection threads may still submit until the HTTP side stops */
    pthread_mutex_unlock(&w->mu);
}

void nf_worker_free(nf_worker *w) {
    if (!w) return;
    if (w->prompt_ck.pos > 0) nf_state_ckpt_free(&w->prompt_ck);
    free(w->prompt_logits);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}

int nf_worker_submit(nf_worker *w, nf_job *j) {
    pthread_mutex_lock(&w->mu);
    if (w->stop) { /* shutting down: the job ends at once */
        pthread_mutex_unlock(&w->mu);
        j->cancel = 1;
        j->res.finish = NF_FIN_CANCELLED;
        job_finish(j);
        return 0;
    }
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
    int ahead = w->qlen + (w->busy ? 1 : 0);
    j->qnext = NULL;
    if (w->qtail) w->qtail->qnext = j;
    else w->qhead = j;
    w->qtail = j;
    w->qlen++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return ahead;
}

int nf_worker_queue_len(nf_worker *w) {
    pthread_mutex_lock(&w->mu);
    int n = w->qlen;
    pthread_mutex_unlock(&w->mu);
    return n;
}

bool nf_worker_busy(nf_worker *w) {
    pthread_mutex_lock(&w->mu);
    bool b = w->busy;
    pthread_mutex_unlock(&w->mu);
    return b;
}
