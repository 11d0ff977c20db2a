/* nf-server — HTTP server for coding agents: Anthropic Messages, OpenAI Chat Completions and Responses over one
 * model (docs/server.md). Thin: parse flags, make the session, the worker and the HTTP front (src/server/). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/session_args.h"
#include "app/spec_args.h"
#include "engine/session.h"
#include "server/disk_cache.h"
#include "server/http.h"
#include "server/prefix_cache.h"
#include "server/worker.h"
#include "util/ctx_arg.h"
#include "util/error.h"

/* a second Ctrl-C / TERM during shutdown ends the process at once */
static void hard_exit(int sig) {
    (void)sig;
    _exit(130);
}

static void usage(void) {
    fprintf(stderr,
            "usage: nf-server -m MODEL.gguf [options]\n"
            "  --host ADDR            listen address (default 127.0.0.1; 0.0.0.0 for all interfaces)\n"
            "  --port N               port (default 8000; 0 = any free port)\n"
            "  --api-key KEY          require this key (Authorization: Bearer KEY or x-api-key: KEY); env NF_API_KEY\n"
            "  --cors                 answer browsers (Access-Control-Allow-Origin: *)\n"
            "  --ctx N                context length (default min(model context, 4096); at most the model's)\n"
            "  --progress-log S       log a long prefill's progress to stderr every S seconds (default 5; 0: every\n"
            "                         chunk; off)\n"
            "  --threads N            CPU threads (default: all)\n"
            "  --backend B            cpu (default) or cuda (GPU builds only: make cuda, build/cuda/nf-server)\n"
            "  --prefill-chunk N      tokens per forward call while prefilling (default 256 on the CPU, 4096 with\n"
            "                         --backend cuda)\n"
            "  --model-id NAME        the id clients see (default: the model file name without .gguf)\n"
            "  --strict-models        refuse requests naming another model (default: any name is accepted)\n"
            "  --max-tokens N         default output budget when a request gives none\n"
            "  --max-body-mb N        request body limit (default 32)\n"
            "  --timeout S            idle connection timeout in seconds (default 60)\n"
            "  --keepalive S          streaming keepalive interval in seconds (default 5)\n"
            "  --max-connections N    concurrent connections (default 64)\n"
            "  --checkpoints N        state checkpoints kept for prefix reuse (default 16)\n"
            "  --ram-cache-mb N       RAM for copies of conversations the live state gave up (default 2048; 0: off)\n"
            "  --kv-disk-dir DIR      save states to DIR at prompt ends and resume from them (survives restarts)\n"
            "  --kv-disk-space-mb N   disk budget of DIR (default 4096; least recently used files go first)\n"
            "  --kv-disk-min-tokens N only save prompts of at least N tokens (default 512)\n"
            "  --allow-forced-output  honour the request field nf_force_output (tests only)\n");
    nf_spec_args_usage(stderr, 2, 23);
}

/* long prefills in the server log (the one worker's session; clients see the protocol's keepalives) */
static void log_progress(void *user, int64_t done, int64_t total, double seconds) {
    (void)user;
    char line[200];
    nf_prefill_progress_line(line, sizeof line, done, total, seconds);
    fprintf(stderr, "nf-server: %s\n", line);
}

int main(int argc, char **argv) {
    const char *model = NULL, *model_id = NULL;
    nf_server_opts so = {.host = "127.0.0.1", .port = 8000, .api_key = getenv("NF_API_KEY")};
    nf_session_opts sess = nf_session_opts_default();
    sess.max_checkpoints = 16;
    nf_worker_opts wo = {0};
    const char *disk_dir = NULL;
    long long disk_mb = 4096, disk_min = 512, ram_mb = 2048;
    double progress_s = 5;
    nf_spec_args spec;
    nf_spec_args_init(&spec);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        int taken = nf_spec_args_take(&spec, argc, argv, &i);
        if (taken < 0) {
            fprintf(stderr, "nf-server: %s\n", nf_error());
            return 2;
        }
        if (taken) continue;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && more) model = argv[++i];
        else if (!strcmp(a, "--host") && more) so.host = argv[++i];
        else if (!strcmp(a, "--port") && more) so.port = atoi(argv[++i]);
        else if (!strcmp(a, "--api-key") && more) so.api_key = argv[++i];
        else if (!strcmp(a, "--cors")) so.cors = true;
        else if (!strcmp(a, "--ctx") && more) {
            if (nf_parse_ctx_arg(argv[++i], &sess.n_ctx) < 0) {
                fprintf(stderr, "nf-server: %s\n", nf_error());
                return 2;
            }
        }
        else if (!strcmp(a, "--threads") && more) sess.n_threads = atoi(argv[++i]);
        else if (!strcmp(a, "--backend") && more) {
            if (nf_backend_arg(argv[++i], "nf-server", &sess.backend) < 0) {
                fprintf(stderr, "nf-server: error: %s\n", nf_error());
                return 2;
            }
        }
        else if (!strcmp(a, "--prefill-chunk") && more) {
            if (nf_prefill_chunk_arg(argv[++i], &sess.prefill_chunk) < 0) {
                fprintf(stderr, "nf-server: %s\n", nf_error());
                return 2;
            }
        }
        else if (!strcmp(a, "--progress-log") && more) {
            const char *v = argv[++i];
            char *end;
            progress_s = strcmp(v, "off") ? strtod(v, &end) : -1;
            if (strcmp(v, "off") && (end == v || *end || !(progress_s >= 0) || progress_s > 1e9)) {
                fprintf(stderr, "nf-server: --progress-log: expected seconds >= 0 or off, got '%s'\n", v);
                return 2;
            }
        }
        else if (!strcmp(a, "--model-id") && more) model_id = argv[++i];
        else if (!strcmp(a, "--strict-models")) so.strict_models = true;
        else if (!strcmp(a, "--max-tokens") && more) so.default_max_tokens = atoll(argv[++i]);
        else if (!strcmp(a, "--max-body-mb") && more) so.max_body = (size_t)atoll(argv[++i]) << 20;
        else if (!strcmp(a, "--timeout") && more) so.timeout_s = atoi(argv[++i]);
        else if (!strcmp(a, "--keepalive") && more) so.keepalive_s = atof(argv[++i]);
        else if (!strcmp(a, "--max-connections") && more) so.max_connections = atoi(argv[++i]);
        else if (!strcmp(a, "--checkpoints") && more) sess.max_checkpoints = atoi(argv[++i]);
        else if (!strcmp(a, "--allow-forced-output")) wo.allow_forced_output = true;
        else if (!strcmp(a, "--kv-disk-dir") && more) disk_dir = argv[++i];
        else if (!strcmp(a, "--ram-cache-mb") && more) ram_mb = atoll(argv[++i]);
        else if (!strcmp(a, "--kv-disk-space-mb") && more) disk_mb = atoll(argv[++i]);
        else if (!strcmp(a, "--kv-disk-min-tokens") && more) disk_min = atoll(argv[++i]);
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        else { usage(); fprintf(stderr, "nf-server: unknown or incomplete option %s\n", a); return 2; }
    }
    if (!model) { usage(); return 2; }
    if (nf_spec_args_check(&spec) < 0) { fprintf(stderr, "nf-server: %s\n", nf_error()); return 2; }
    if (so.port < 0 || so.port > 65535) { fprintf(stderr, "nf-server: --port out of range\n"); return 2; }

    /* SIGINT/SIGTERM are blocked in every thread (the worker and the HTTP threads inherit the mask) and taken
     * by the main thread with sigwait */
    signal(SIGPIPE, SIG_IGN);
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    nf_session *s = nf_session_create(model, &sess);
    if (!s) { fprintf(stderr, "nf-server: %s\n", nf_error()); return 1; }
    if (!nf_session_tokenizer(s)) { fprintf(stderr, "nf-server: %s has no tokenizer\n", model); return 1; }
    nf_session_set_progress(s, log_progress, NULL, progress_s);
    if (spec.draft) { /* every request then decodes through the speculative decoder (docs/speculative.md) */
        nf_spec *sp = nf_spec_args_make(&spec, nf_session_model(s), sess.n_threads);
        if (!sp) {
            fprintf(stderr, "nf-server: --draft %s: %s\n", spec.draft, nf_error());
            nf_session_free(s);
            return 2;
        }
        nf_session_set_spec(s, sp);
    }
    char idbuf[256];
    if (!model_id) {
        const char *b = strrchr(model, '/');
        snprintf(idbuf, sizeof idbuf, "%s", b ? b + 1 : model);
        size_t n = strlen(idbuf);
        if (n > 5 && !strcmp(idbuf + n - 5, ".gguf")) idbuf[n - 5] = 0;
        model_id = idbuf;
    }
    if (disk_dir) {
        /* model fingerprint: file size, dimensions, vocabulary (states of another model are never loaded) */
        struct stat mst;
        const nf_hparams *hp = &nf_session_model(s)->hp;
        uint64_t fp = NF_FNV_INIT;
        if (stat(model, &mst) == 0) fp = nf_fnv1a(fp, &mst.st_size, sizeof mst.st_size);
        int dims[] = {hp->n_layer, hp->n_embd, hp->n_vocab, hp->kv_lora_rank, hp->kda_n_head, hp->kda_head_dim};
        fp = nf_fnv1a(fp, dims, sizeof dims);
        wo.disk = nf_disk_cache_open(disk_dir, (uint64_t)disk_mb << 20, fp, disk_min);
        if (!wo.disk) { fprintf(stderr, "nf-server: %s\n", nf_error()); return 1; }
    }
    if (ram_mb > 0) wo.ram = nf_prefix_cache_new((uint64_t)ram_mb << 20);
    nf_worker *w = nf_worker_start(s, &wo);
    if (!w) { fprintf(stderr, "nf-server: %s\n", nf_error()); return 1; }
    so.model_id = model_id;
    so.n_ctx = nf_session_n_ctx(s);
    so.tok = nf_session_tokenizer(s);
    so.worker = w;
    nf_server *srv = nf_server_start(&so);
    if (!srv) { fprintf(stderr, "nf-server: %s\n", nf_error()); return 1; }
    printf("nf-server: listening on http://%s:%d (model %s, context %lld)\n", so.host, nf_server_port(srv), model_id,
           (long long)so.n_ctx);
    fflush(stdout);
    int sig = 0;
    sigwait(&sigs, &sig);
    signal(SIGINT, hard_exit);
    signal(SIGTERM, hard_exit);
    pthread_sigmask(SIG_UNBLOCK, &sigs, NULL);
    fprintf(stderr, "nf-server: shutting down\n");
    nf_server_quiesce(srv);  /* no new connections */
    nf_worker_stop(w);       /* running and queued jobs end as cancelled; their streams close */
    nf_server_stop(srv);
    nf_worker_free(w);
    nf_session_free(s);
    nf_disk_cache_close(wo.disk);
    nf_prefix_cache_free(wo.ram);
    return 0;
}
