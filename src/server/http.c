/* http.c — libmicrohttpd glue: routing, limits, authentication, CORS, and the connection side of a job
 * (waiting, streaming, keepalives, disconnects). See http.h. */
#include "server/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/api.h"
#include "server/metrics.h"
#include "server/request.h"
#include "text/tokenizer.h"
#include "util/error.h"

struct nf_server {
    nf_server_opts o;
    struct MHD_Daemon *d;
    int port;
};

typedef enum { R_NONE = 0, R_MESSAGES, R_COUNT, R_CHAT, R_RESPONSES, R_TOKENIZE, R_DETOKENIZE, R_MODELS, R_MODEL,
               R_HEALTH, R_METRICS } route;

typedef struct {
    route rt;
    nf_api api;          /* error shape */
    char *body;
    size_t n, cap;
    bool too_large;
    bool answered;
} conn_ctx;

/* state of one streaming response (owned by the MHD response: freed in stream_free) */
typedef struct {
    nf_server *srv;
    struct MHD_Connection *conn;
    int fd;
    nf_job *job;
    nf_resp resp;
    nf_buf out;
    size_t sent;         /* bytes of out already handed to MHD */
    bool finished;
    double last_write;
} stream_ctx;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- responses ------------------------------------------------------------------------------------------ */

static void add_common_headers(nf_server *s, struct MHD_Response *r, const char *ctype) {
    if (ctype) MHD_add_response_header(r, "Content-Type", ctype);
    if (s->o.cors) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(r, "Access-Control-Allow-Headers", "*");
    }
}

static void count_status(int status) {
    if (status < 300) nf_metric_add(NF_M_REQ_2XX, 1);
    else if (status < 500) nf_metric_add(NF_M_REQ_4XX, 1);
    else nf_metric_add(NF_M_REQ_5XX, 1);
}

/* takes ownership of body */
static enum MHD_Result send_body(nf_server *s, struct MHD_Connection *c, int status, char *body, size_t n,
                                 const char *ctype) {
    struct MHD_Response *r = MHD_create_response_from_buffer(n, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    add_common_headers(s, r, ctype);
    if (status == 503 || status == 429) MHD_add_response_header(r, "Retry-After", "1");
    count_status(status);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_json(nf_server *s, struct MHD_Connection *c, int status, json_t *o) {
    char *b = nf_json_compact(o);
    json_decref(o);
    return send_body(s, c, status, b, strlen(b), "application/json");
}

static enum MHD_Result send_error(nf_server *s, struct MHD_Connection *c, nf_api api, const nf_srv_error *e) {
    char *b = nf_error_json(api, e);
    return send_body(s, c, e->status, b, strlen(b), "application/json");
}

static enum MHD_Result fail(nf_server *s, struct MHD_Connection *c, nf_api api, int status, const char *type,
                            const char *msg) {
    nf_srv_error e;
    nf_srv_err(&e, status, type, NULL, "%s", msg);
    return send_error(s, c, api, &e);
}

/* ---- connection liveness -------------------------------------------------------------------------------- */

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* true when the peer closed the connection (or it broke) */
static bool client_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL | POLLRDHUP)) return true;
    if (p.revents & POLLIN) {
        char b;
        ssize_t r = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (r == 0) return true;
        if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
    }
    return false;
}

/* ---- GET endpoints ---------------------------------------------------------------------------------------- */

static json_t *model_obj(nf_server *s) {
    return json_pack("{s:s,s:s,s:s,s:I,s:s,s:s,s:I,s:I,s:{s:I,s:I,s:b}}", "id", s->o.model_id, "object", "model", "type",
                     "model", "created", (json_int_t)time(NULL), "owned_by", "nextflash", "display_name", s->o.model_id,
                     "context_length", (json_int_t)s->o.n_ctx, "max_model_len", (json_int_t)s->o.n_ctx, "top_provider",
                     "context_length", (json_int_t)s->o.n_ctx, "max_completion_tokens", (json_int_t)s->o.n_ctx,
                     "is_moderated", 0);
}

static enum MHD_Result get_models(nf_server *s, struct MHD_Connection *c) {
    json_t *m = model_obj(s);
    json_object_set_new(m, "created_at", json_string("2026-01-01T00:00:00Z"));
    return send_json(s, c, 200, json_pack("{s:s,s:[o],s:b,s:s,s:s}", "object", "list", "data", m, "has_more", 0,
                                          "first_id", s->o.model_id, "last_id", s->o.model_id));
}

static bool model_known(nf_server *s, const char *id) { return !strcmp(id, s->o.model_id); }

/* ---- token endpoints ------------------------------------------------------------------------------------- */

static enum MHD_Result post_tokenize(nf_server *s, struct MHD_Connection *c, conn_ctx *cc) {
    nf_srv_error e;
    json_t *root = nf_req_load_json(cc->body, cc->n, &e);
    if (!root) return send_error(s, c, NF_API_CHAT, &e);
    json_t *content = json_object_get(root, "content");
    if (!json_is_string(content)) {
        json_decref(root);
        nf_srv_err(&e, 400, "invalid_request_error", "content", "content: expected a string");
        return send_error(s, c, NF_API_CHAT, &e);
    }
    json_t *wp = json_object_get(root, "with_pieces");
    if (wp && !json_is_boolean(wp)) {
        json_decref(root);
        nf_srv_err(&e, 400, "invalid_request_error", "with_pieces", "with_pieces: expected a boolean");
        return send_error(s, c, NF_API_CHAT, &e);
    }
    nf_tokens t = {0};
    nf_tokenize_text(s->o.tok, json_string_value(content), json_string_length(content), &t);
    json_t *arr = json_array();
    for (size_t i = 0; i < t.n; i++) {
        if (json_is_true(wp)) {
            size_t bl;
            const char *b = nf_token_bytes(s->o.tok, t.ids[i], &bl);
            json_array_append_new(arr, json_pack("{s:i,s:o}", "id", t.ids[i], "piece", nf_jstr(b, bl)));
        } else {
            json_array_append_new(arr, json_integer(t.ids[i]));
        }
    }
    nf_tokens_free(&t);
    json_decref(root);
    return send_json(s, c, 200, json_pack("{s:o}", "tokens", arr));
}

static enum MHD_Result post_detokenize(nf_server *s, struct MHD_Connection *c, conn_ctx *cc) {
    nf_srv_error e;
    json_t *root = nf_req_load_json(cc->body, cc->n, &e);
    if (!root) return send_error(s, c, NF_API_CHAT, &e);
    json_t *toks = json_object_get(root, "tokens");
    if (!json_is_array(toks)) {
        json_decref(root);
        nf_srv_err(&e, 400, "invalid_request_error", "tokens", "tokens: expected an array of token ids");
        return send_error(s, c, NF_API_CHAT, &e);
    }
    size_t n = json_array_size(toks), i;
    int32_t *ids = nf_xmalloc((n ? n : 1) * sizeof *ids);
    json_t *v;
    int32_t nv = nf_tokenizer_n_vocab(s->o.tok);
    json_array_foreach(toks, i, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= nv) {
            free(ids);
            json_decref(root);
            nf_srv_err(&e, 400, "invalid_request_error", "tokens", "tokens[%zu]: expected a token id in [0, %d)", i, nv);
            return send_error(s, c, NF_API_CHAT, &e);
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    char *text;
    size_t len;
    int rc = nf_detokenize(s->o.tok, ids, n, &text, &len);
    free(ids);
    json_decref(root);
    if (rc < 0) return fail(s, c, NF_API_CHAT, 400, "invalid_request_error", "tokens: cannot be decoded");
    json_t *o = json_pack("{s:o}", "content", nf_jstr(text, len));
    free(text);
    return send_json(s, c, 200, o);
}

/* ---- inference -------------------------------------------------------------------------------------------- */

static void pump_events(stream_ctx *sc) {
    bool done;
    nf_ev *evs = nf_job_wait(sc->job, 100, &done);
    for (nf_ev *e = evs; e; e = e->next) nf_resp_event(&sc->resp, e, &sc->out);
    nf_ev_free_list(evs);
    if (done && !sc->finished) {
        const nf_job_result *r = &sc->job->res;
        if (r->finish == NF_FIN_ERROR) nf_resp_stream_error(&sc->resp, r->error, &sc->out);
        else if (r->finish != NF_FIN_CANCELLED) nf_resp_end(&sc->resp, r, &sc->out);
        sc->finished = true;
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_ctx *sc = cls;
    for (;;) {
        if (sc->sent < sc->out.n) {
            size_t n = sc->out.n - sc->sent;
            if (n > max) n = max;
            memcpy(buf, sc->out.s + sc->sent, n);
            sc->sent += n;
            if (sc->sent == sc->out.n) {
                nf_buf_reset(&sc->out);
                sc->sent = 0;
            }
            sc->last_write = now_s();
            return (ssize_t)n;
        }
        if (sc->finished) {
            if (sc->job->res.finish == NF_FIN_CANCELLED) return MHD_CONTENT_READER_END_WITH_ERROR;
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        pump_events(sc);
        if (sc->out.n) continue;
        if (client_gone(sc->fd)) {
            nf_job_cancel(sc->job);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (!sc->finished && now_s() - sc->last_write >= sc->srv->o.keepalive_s) nf_resp_keepalive(&sc->resp, &sc->out);
    }
}

static void stream_free(void *cls) {
    stream_ctx *sc = cls;
    if (!sc->finished) nf_job_cancel(sc->job);
    nf_resp_free(&sc->resp);
    nf_buf_free(&sc->out);
    nf_job_release(sc->job);
    free(sc);
}

static enum MHD_Result post_inference(nf_server *s, struct MHD_Connection *c, conn_ctx *cc) {
    nf_srv_request req;
    nf_srv_error e;
    nf_api api = cc->rt == R_COUNT ? NF_API_ANTHROPIC : cc->api;
    if (nf_req_parse(api, cc->body, cc->n, cc->rt == R_COUNT, &req, &e) < 0) return send_error(s, c, cc->api, &e);
    if (s->o.strict_models && req.model[0] && !model_known(s, req.model)) {
        nf_srv_err(&e, 404, "not_found_error", "model", "model: \"%.100s\" is not served here (serving %s)", req.model,
                   s->o.model_id);
        if (api != NF_API_ANTHROPIC) snprintf(e.code, sizeof e.code, "model_not_found");
        nf_req_free(&req);
        return send_error(s, c, cc->api, &e);
    }
    nf_srv_prompt p;
    if (nf_req_prompt(&req, s->o.tok, &p, &e) < 0) {
        nf_req_free(&req);
        return send_error(s, c, cc->api, &e);
    }
    if (cc->rt == R_COUNT) {
        json_t *o = json_pack("{s:I}", "input_tokens", (json_int_t)p.n);
        nf_srv_prompt_free(&p);
        nf_req_free(&req);
        return send_json(s, c, 200, o);
    }
    if ((int64_t)p.n >= s->o.n_ctx) {
        if (api == NF_API_ANTHROPIC)
            nf_srv_err(&e, 400, "invalid_request_error", "messages", "prompt is too long: %zu tokens > %lld maximum", p.n,
                       (long long)s->o.n_ctx - 1);
        else {
            nf_srv_err(&e, 400, "invalid_request_error", "messages",
                       "This model's maximum context length is %lld tokens. However, your messages resulted in %zu tokens.",
                       (long long)s->o.n_ctx, p.n);
            snprintf(e.code, sizeof e.code, "context_length_exceeded");
        }
        e.n_prompt_tokens = (int64_t)p.n;
        e.n_ctx = s->o.n_ctx;
        nf_srv_prompt_free(&p);
        nf_req_free(&req);
        return send_error(s, c, cc->api, &e);
    }
    int64_t room = s->o.n_ctx - (int64_t)p.n;
    int64_t max_tokens = req.max_tokens > 0 ? req.max_tokens : s->o.default_max_tokens > 0 ? s->o.default_max_tokens : room;
    if (max_tokens > room) max_tokens = room;
    bool thinking = req.thinking;
    size_t n_prompt = p.n;
    nf_job *job = nf_job_new(&req, p.ids, p.n, p.marks, p.n_marks, max_tokens, thinking);
    p.ids = NULL;
    p.marks = NULL;

    stream_ctx *sc = nf_xcalloc(1, sizeof *sc);
    sc->srv = s;
    sc->conn = c;
    sc->fd = conn_fd(c);
    sc->job = job;
    nf_resp_init(&sc->resp, &job->req, (int64_t)n_prompt);
    sc->last_write = now_s();
    nf_resp_begin(&sc->resp, &sc->out); /* the opening event, before the job is even queued */
    nf_worker_submit(s->o.worker, job);

    if (job->req.stream) {
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, sc, stream_free);
        if (!r) {
            stream_free(sc);
            return MHD_NO;
        }
        add_common_headers(s, r, "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        MHD_add_response_header(r, "X-Accel-Buffering", "no");
        count_status(200);
        enum MHD_Result ret = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return ret;
    }

    /* non-streaming: wait here (this is the connection's own thread), watching the client */
    while (!sc->finished) {
        pump_events(sc);
        if (!sc->finished && client_gone(sc->fd)) {
            nf_job_cancel(job);
            stream_free(sc);
            return MHD_NO; /* nobody to answer */
        }
    }
    enum MHD_Result ret;
    const nf_job_result *res = &job->res;
    if (res->finish == NF_FIN_ERROR) {
        ret = fail(s, c, cc->api, 500, cc->api == NF_API_ANTHROPIC ? "api_error" : "server_error", res->error);
    } else if (res->finish == NF_FIN_CANCELLED) {
        ret = fail(s, c, cc->api, 503, cc->api == NF_API_ANTHROPIC ? "overloaded_error" : "server_error",
                   "the request was cancelled");
    } else {
        size_t n;
        char *b = nf_buf_take(&sc->out, &n);
        ret = send_body(s, c, 200, b, n, "application/json");
    }
    stream_free(sc);
    return ret;
}

/* ---- dispatch --------------------------------------------------------------------------------------------- */

static route find_route(const char *url, const char *method, nf_api *api, bool *method_ok) {
    struct { const char *path, *method; route rt; nf_api api; } t[] = {
        {"/v1/messages", "POST", R_MESSAGES, NF_API_ANTHROPIC},
        {"/v1/messages/count_tokens", "POST", R_COUNT, NF_API_ANTHROPIC},
        {"/v1/chat/completions", "POST", R_CHAT, NF_API_CHAT},
        {"/chat/completions", "POST", R_CHAT, NF_API_CHAT},
        {"/v1/responses", "POST", R_RESPONSES, NF_API_RESPONSES},
        {"/responses", "POST", R_RESPONSES, NF_API_RESPONSES},
        {"/tokenize", "POST", R_TOKENIZE, NF_API_CHAT},
        {"/detokenize", "POST", R_DETOKENIZE, NF_API_CHAT},
        {"/v1/models", "GET", R_MODELS, NF_API_CHAT},
        {"/models", "GET", R_MODELS, NF_API_CHAT},
        {"/health", "GET", R_HEALTH, NF_API_CHAT},
        {"/v1/health", "GET", R_HEALTH, NF_API_CHAT},
        {"/metrics", "GET", R_METRICS, NF_API_CHAT},
    };
    *api = !strncmp(url, "/v1/messages", 12) ? NF_API_ANTHROPIC : NF_API_CHAT;
    *method_ok = true;
    size_t ul = strlen(url);
    while (ul > 1 && url[ul - 1] == '/') ul--;
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        if (strlen(t[i].path) == ul && !strncmp(url, t[i].path, ul)) {
            *api = t[i].api;
            *method_ok = !strcmp(method, t[i].method);
            return t[i].rt;
        }
    if (!strncmp(url, "/v1/models/", 11) && url[11]) {
        *method_ok = !strcmp(method, "GET");
        return R_MODEL;
    }
    return R_NONE;
}

static bool authorized(nf_server *s, struct MHD_Connection *c) {
    if (!s->o.api_key || !*s->o.api_key) return true;
    const char *k = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    if (k && !strcmp(k, s->o.api_key)) return true;
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (a && !strncasecmp(a, "Bearer ", 7)) {
        a += 7;
        while (*a == ' ') a++;
        if (!strcmp(a, s->o.api_key)) return true;
    }
    return false;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    nf_server *s = cls;
    conn_ctx *cc = *con_cls;
    if (!cc) {
        nf_metric_add(NF_M_REQUESTS, 1);
        cc = nf_xcalloc(1, sizeof *cc);
        *con_cls = cc;
        if (!strcmp(method, "OPTIONS")) {
            cc->answered = true;
            return send_body(s, c, 204, nf_xstrdup(""), 0, NULL);
        }
        bool mok;
        cc->rt = find_route(url, method, &cc->api, &mok);
        if (cc->rt == R_NONE) {
            cc->answered = true;
            nf_srv_error e;
            nf_srv_err(&e, 404, "not_found_error", NULL, "unknown endpoint %s %.200s", method, url);
            return send_error(s, c, cc->api, &e);
        }
        if (!mok) {
            cc->answered = true;
            return fail(s, c, cc->api, 405, "invalid_request_error", "method not allowed for this endpoint");
        }
        if (cc->rt != R_HEALTH && !authorized(s, c)) {
            cc->answered = true;
            return fail(s, c, cc->api, 401, "authentication_error", "invalid or missing API key");
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(cl, &end, 10);
            if (errno || end == cl || v > s->o.max_body) {
                cc->answered = true;
                return fail(s, c, cc->api, 413, "request_too_large", "request body too large");
            }
        }
        return MHD_YES;
    }
    if (cc->answered) { /* rejected early: swallow any body */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cc->too_large) {
            if (cc->n + *upload_size > s->o.max_body) {
                cc->too_large = true;
                free(cc->body);
                cc->body = NULL;
                cc->n = cc->cap = 0;
            } else {
                if (cc->n + *upload_size + 1 > cc->cap) {
                    cc->cap = (cc->n + *upload_size + 1) * 2;
                    if (cc->cap > s->o.max_body + 1) cc->cap = s->o.max_body + 1;
                    cc->body = nf_xrealloc(cc->body, cc->cap);
                }
                memcpy(cc->body + cc->n, upload, *upload_size);
                cc->n += *upload_size;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    cc->answered = true;
    if (cc->too_large) return fail(s, c, cc->api, 413, "request_too_large", "request body too large");
    switch (cc->rt) {
    case R_HEALTH:
        return send_json(s, c, 200, json_pack("{s:s}", "status", "ok"));
    case R_METRICS: {
        char *m = nf_metrics_render(nf_worker_queue_len(s->o.worker), nf_worker_busy(s->o.worker), s->o.n_ctx);
        return send_body(s, c, 200, m, strlen(m), "text/plain; version=0.0.4");
    }
    case R_MODELS:
        return get_models(s, c);
    case R_MODEL: {
        const char *id = url + 11;
        if (!model_known(s, id)) {
            nf_srv_error e;
            nf_srv_err(&e, 404, "not_found_error", "model", "model \"%.100s\" not found", id);
            snprintf(e.code, sizeof e.code, "model_not_found");
            return send_error(s, c, NF_API_CHAT, &e);
        }
        json_t *m = model_obj(s);
        json_object_set_new(m, "created_at", json_string("2026-01-01T00:00:00Z"));
        return send_json(s, c, 200, m);
    }
    case R_TOKENIZE:
        return post_tokenize(s, c, cc);
    case R_DETOKENIZE:
        return post_detokenize(s, c, cc);
    default:
        return post_inference(s, c, cc);
    }
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)c, (void)toe;
    conn_ctx *cc = *con_cls;
    if (!cc) return;
    free(cc->body);
    free(cc);
    *con_cls = NULL;
}

static void log_mhd(void *cls, const char *fmt, va_list ap) {
    (void)cls, (void)fmt, (void)ap; /* MHD's own messages (connection resets, timeouts) are routine here */
}

nf_server *nf_server_start(const nf_server_opts *o) {
    nf_server *s = nf_xcalloc(1, sizeof *s);
    s->o = *o;
    if (!s->o.host) s->o.host = "127.0.0.1";
    if (!s->o.max_body) s->o.max_body = 32u << 20;
    if (s->o.timeout_s <= 0) s->o.timeout_s = 60;
    if (s->o.keepalive_s <= 0) s->o.keepalive_s = 5;
    if (s->o.max_connections <= 0) s->o.max_connections = 64;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o->port)};
    const char *h = !strcmp(s->o.host, "localhost") ? "127.0.0.1" : s->o.host;
    if (inet_pton(AF_INET, h, &sa.sin_addr) != 1) {
        nf_fail("--host %s: not an IPv4 address", s->o.host);
        free(s);
        return NULL;
    }
    s->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                                MHD_USE_ERROR_LOG,
                            (uint16_t)o->port, NULL, NULL, handler, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->o.timeout_s, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)s->o.max_connections, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(128 * 1024),
                            MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_EXTERNAL_LOGGER, log_mhd, s,
                            MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u, MHD_OPTION_END);
    if (!s->d) {
        nf_fail("cannot listen on %s:%d: %s", s->o.host, o->port, strerror(errno));
        free(s);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_LISTEN_FD);
    struct sockaddr_in got;
    socklen_t gl = sizeof got;
    if (di && getsockname(di->listen_fd, (struct sockaddr *)&got, &gl) == 0) s->port = ntohs(got.sin_port);
    else s->port = o->port;
    return s;
}

int nf_server_port(const nf_server *s) { return s->port; }

void nf_server_quiesce(nf_server *s) {
    if (!s) return;
    int fd = MHD_quiesce_daemon(s->d);
    if (fd >= 0) close(fd);
}

void nf_server_stop(nf_server *s) {
    if (!s) return;
    MHD_stop_daemon(s->d);
    free(s);
}
