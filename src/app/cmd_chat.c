/* cmd_chat.c — `nf run` (one-shot generation) and `nf chat` (interactive multi-turn chat): the engine session
 * (src/engine/session.h) from the command line.
 *
 *   nf run  [-m MODEL] -p PROMPT [options]     render the chat template, generate, stream, print speed
 *   nf chat [-m MODEL] [options]               a conversation kept in the live state between turns
 *
 * Output: the visible answer goes to stdout; reasoning goes to stderr (dimmed on a terminal), tool calls are
 * printed on stdout as "[tool call] NAME {arguments}". The output parser (src/text/output_parser.h) does the
 * split, so no tag text ever leaks. Speed lines go to stderr.
 *
 * Chat keeps the live state between turns: a new turn renders the whole conversation with the template and,
 * when that text extends the rendering of the previous conversation, only the new bytes (the "<|user|>...
 * <|assistant|><think>" of the turn) are tokenized and prefilled; the previous answer stays in the state as
 * the tokens the model actually produced. Otherwise (e.g. the template re-renders history differently) the
 * whole prompt goes through nf_session_set_prompt, which still reuses the longest matching prefix.
 * Ctrl-C during a generation stops it (the partial answer stays in the conversation and the state); Ctrl-C
 * during a prefill undoes the turn; Ctrl-D at the prompt exits (status 0), Ctrl-C at the prompt too (130).
 * Line editing and history come from libedit when stdin is a terminal. */
#include <editline/readline.h>
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "app/session_args.h"
#include "app/commands.h"
#include "engine/session.h"
#include "app/spec_args.h"
#include "engine/spec.h"
#include "text/chat_template.h"
#include "text/output_parser.h"
#include "text/tokenizer.h"
#include "util/ctx_arg.h"
#include "util/error.h"

#define DEFAULT_MODEL_REL "models/tiny/nf-tiny-bf16.gguf"

static volatile sig_atomic_t g_cancel;
/* nf chat waiting for a line: Ctrl-C exits at once (terminal settings restored; only async-signal-safe calls),
 * whatever state the line editor is in. */
static volatile sig_atomic_t g_at_prompt;
static struct termios g_tio;
static int g_have_tio;

static void on_sigint(int sig) {
    (void)sig;
    if (g_at_prompt) {
        if (g_have_tio) tcsetattr(0, TCSANOW, &g_tio);
        if (write(1, "\n", 1) < 0) { /* nothing to do */ }
        _exit(130);
    }
    g_cancel = 1;
}

static void install_sigint(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: a blocking read returns EINTR */
    sigaction(SIGINT, &sa, NULL);
}

/* ---- options --------------------------------------------------------------------------------------------- */

typedef struct {
    const char *model, *tokenizer, *prompt, *prompt_file, *system, *effort;
    nf_backend_factory backend; /* --backend (NULL: cpu) */
    int prefill_chunk;          /* --prefill-chunk (0: the session's default) */
    bool think, raw, ignore_stop;
    int64_t max_tokens;
    int threads;
    int64_t ctx;
    double progress;        /* --progress S: prefill progress on stderr every S seconds (< 0: off) */
    nf_sampler_params sp;
    nf_spec_args spec;      /* --draft, --draft-max, --spec-mode, --spec-set (app/spec_args.h) */
} cli_opts;

static void usage(FILE *f, bool chat) {
    if (chat)
        fprintf(f, "usage: nf chat [-m MODEL] [options]\n\n"
                   "Interactive chat; the conversation stays in the model state between turns (only the new turn\n"
                   "is prefilled). Commands: /think /nothink /reset /ctx /help /quit. Ctrl-C stops a generation,\n"
                   "Ctrl-C or Ctrl-D at the prompt exits.\n\n");
    else
        fprintf(f, "usage: nf run [-m MODEL] -p PROMPT [options]\n\n"
                   "One-shot generation: renders the chat template (unless --raw), streams the answer to stdout\n"
                   "(reasoning on stderr), prints prefill/decode speed on stderr.\n\n");
    fprintf(f, "  -m, --model PATH      GGUF model (default: $NF_MODEL, else " DEFAULT_MODEL_REL " of the repo)\n"
               "      --tokenizer PATH  tokenizer (GGUF or tokenizer.json) when the model has none\n");
    if (!chat)
        fprintf(f, "  -p, --prompt TEXT     the user message (or the raw text with --raw)\n"
                   "  -f, --file PATH       read the prompt from a file ('-' = stdin)\n"
                   "      --raw             no chat template: the prompt text is the whole input, output unparsed\n");
    fprintf(f, "  -n, --max-tokens N    tokens to generate at most (default %d)\n"
               "      --system TEXT     system message\n"
               "      --think | --no-think   reasoning on (default) or off\n"
               "      --effort low|high reasoning effort (default: Max)\n"
               "      --temp T --top-k K --top-p P --min-p M --seed S --repeat-penalty R --repeat-last-n N\n"
               "                        sampling (defaults: temp 1, top-k off, top-p 1, min-p 0.05, seed 0;\n"
               "                        --temp 0 is greedy)\n"
               "      --ignore-stop     do not stop at stop tokens (benchmarks; -n still applies)\n"
               "  -t, --threads N       CPU threads (default: NF_THREADS or all cores)\n"
               "      --backend B       cpu (default) or cuda (GPU builds only: make cuda, build/cuda/nf)\n"
               "      --prefill-chunk N tokens per forward call while prefilling (default 256 on the CPU, 4096 with\n"
               "                        --backend cuda)\n"
               "  -c, --ctx N           context size in tokens (default: min(model context, 4096); <= the model's)\n"
               "      --progress S      prefill progress on stderr every S seconds of a long prefill (default 2;\n"
               "                        0: every chunk; off)\n",
            chat ? 1024 : 256);
    nf_spec_args_usage(f, 6, 18);
}

static bool opt_is(const char *a, const char *s, const char *l) { return (s && !strcmp(a, s)) || !strcmp(a, l); }

static int parse_opts(int argc, char **argv, bool chat, cli_opts *o) {
    memset(o, 0, sizeof *o);
    o->think = true;
    o->progress = 2;
    o->max_tokens = chat ? 1024 : 256;
    o->sp = nf_sampler_defaults();
    nf_spec_args_init(&o->spec);
    int taken;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(s, l) opt_is(a, s, l)
#define NEED() do { if (!v) { fprintf(stderr, "%s: %s needs a value\n", nf_progname, a); return 2; } i++; } while (0)
        if (OPT("-h", "--help")) {
            usage(stdout, chat);
            return 1;
        } else if (OPT("-m", "--model")) { NEED(); o->model = v; }
        else if (OPT(NULL, "--tokenizer")) { NEED(); o->tokenizer = v; }
        else if (OPT(NULL, "--backend")) {
            NEED();
            if (nf_backend_arg(v, "nf", &o->backend) < 0) {
                fprintf(stderr, "%s: error: %s\n", nf_progname, nf_error());
                return 2;
            }
        }
        else if (OPT(NULL, "--prefill-chunk")) {
            NEED();
            if (nf_prefill_chunk_arg(v, &o->prefill_chunk) < 0) {
                fprintf(stderr, "%s: %s\n", nf_progname, nf_error());
                return 2;
            }
        }
        else if (!chat && OPT("-p", "--prompt")) { NEED(); o->prompt = v; }
        else if (!chat && OPT("-f", "--file")) { NEED(); o->prompt_file = v; }
        else if (!chat && OPT(NULL, "--raw")) o->raw = true;
        else if (OPT("-n", "--max-tokens")) { NEED(); o->max_tokens = atoll(v); }
        else if (OPT(NULL, "--system")) { NEED(); o->system = v; }
        else if (OPT(NULL, "--ignore-stop")) o->ignore_stop = true;
        else if (OPT(NULL, "--think")) o->think = true;
        else if (OPT(NULL, "--no-think")) o->think = false;
        else if (OPT(NULL, "--effort")) {
            NEED();
            if (strcmp(v, "low") && strcmp(v, "high") && strcmp(v, "max")) {
                fprintf(stderr, "%s: --effort: expected low, high or max, got '%s'\n", nf_progname, v);
                return 2;
            }
            o->effort = strcmp(v, "max") ? v : NULL;
        } else if (OPT(NULL, "--temp")) { NEED(); o->sp.temperature = (float)atof(v); }
        else if (OPT(NULL, "--top-k")) { NEED(); o->sp.top_k = atoi(v); }
        else if (OPT(NULL, "--top-p")) { NEED(); o->sp.top_p = (float)atof(v); }
        else if (OPT(NULL, "--min-p")) { NEED(); o->sp.min_p = (float)atof(v); }
        else if (OPT(NULL, "--seed")) { NEED(); o->sp.seed = strtoull(v, NULL, 10); }
        else if (OPT(NULL, "--repeat-penalty")) { NEED(); o->sp.repetition_penalty = (float)atof(v); }
        else if (OPT(NULL, "--repeat-last-n")) { NEED(); o->sp.penalty_last_n = atoi(v); }
        else if (OPT("-t", "--threads")) { NEED(); o->threads = atoi(v); }
        else if (OPT(NULL, "--progress")) {
            NEED();
            char *end;
            o->progress = strcmp(v, "off") ? strtod(v, &end) : -1;
            if (strcmp(v, "off") && (end == v || *end || !(o->progress >= 0) || o->progress > 1e9)) {
                fprintf(stderr, "%s: --progress: expected seconds >= 0 or off, got '%s'\n", nf_progname, v);
                return 2;
            }
        } else if (OPT("-c", "--ctx")) {
            NEED();
            if (nf_parse_ctx_arg(v, &o->ctx) < 0) {
                fprintf(stderr, "%s: %s\n", nf_progname, nf_error());
                return 2;
            }
        }
        else if ((taken = nf_spec_args_take(&o->spec, argc, argv, &i)) != 0) {
            if (taken < 0) {
                fprintf(stderr, "%s: %s\n", nf_progname, nf_error());
                return 2;
            }
        }
        else {
            fprintf(stderr, "%s %s: unknown or incomplete option '%s'\n", nf_progname, chat ? "chat" : "run", a);
            usage(stderr, chat);
            return 2;
        }
#undef OPT
#undef NEED
    }
    if (nf_spec_args_check(&o->spec) < 0) {
        fprintf(stderr, "%s: %s\n", nf_progname, nf_error());
        return 2;
    }
    return 0;
}

static bool file_exists(const char *p) { return p && access(p, R_OK) == 0; }

/* -m, else $NF_MODEL, else the embedded model next to the program (build/nf -> ../models/...), else ./models. */
static const char *resolve_model(const char *given, char *buf, size_t cap) {
    if (given) return given;
    const char *env = getenv("NF_MODEL");
    if (env && *env) return env;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(buf, cap, "%s/../" DEFAULT_MODEL_REL, exe);
            if (file_exists(buf)) return buf;
        }
    }
    if (file_exists(DEFAULT_MODEL_REL)) return DEFAULT_MODEL_REL;
    nf_fail("no model given (-m) and the embedded model " DEFAULT_MODEL_REL " is not there (not built yet?)");
    return NULL;
}

/* a long prefill says where it is (nf_session_set_progress; short ones finish before the first report) */
static void print_progress(void *user, int64_t done, int64_t total, double seconds) {
    (void)user;
    char line[200];
    nf_prefill_progress_line(line, sizeof line, done, total, seconds);
    fprintf(stderr, "%s\n", line);
}

static nf_session *open_session(const cli_opts *o) {
    char buf[4200];
    const char *path = resolve_model(o->model, buf, sizeof buf);
    if (!path) return NULL;
    nf_session_opts so = nf_session_opts_default();
    so.n_threads = o->threads;
    so.n_ctx = o->ctx;
    so.tokenizer = o->tokenizer;
    so.sampler = o->sp;
    so.backend = o->backend;
    so.prefill_chunk = o->prefill_chunk;
    nf_session *s = nf_session_create(path, &so);
    if (!s) return NULL;
    nf_session_set_progress(s, print_progress, NULL, o->progress);
    if (!nf_session_tokenizer(s)) {
        nf_session_free(s);
        nf_fail("%s has no tokenizer metadata: pass --tokenizer (a GGUF or tokenizer.json)", path);
        return NULL;
    }
    if (o->spec.draft) { /* speculative decoding (engine/spec.h) */
        nf_spec_args sa = o->spec;
        sa.params.seed = o->sp.seed;
        nf_spec *sp = nf_spec_args_make(&sa, nf_session_model(s), o->threads);
        if (!sp) {
            nf_session_free(s);
            return NULL;
        }
        nf_session_set_spec(s, sp);
    }
    return s;
}

/* ---- output ---------------------------------------------------------------------------------------------- */

typedef struct {
    bool tty_out, tty_err;
    bool raw;
    int mode;            /* 0 nothing yet, NF_OUT_REASONING, NF_OUT_TEXT */
    bool out_nl;         /* last byte written to stdout was a newline (or nothing written) */
    nf_output_parser *parser;
    /* the assistant message being built (chat history) */
    char *content, *reasoning;
    size_t n_content, n_reasoning, cap_content, cap_reasoning;
    json_t *tool_calls;
} sink;

static void buf_add(char **b, size_t *n, size_t *cap, const char *s, size_t len) {
    if (*n + len + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *n + len + 1) c *= 2;
        *b = nf_xrealloc(*b, c);
        *cap = c;
    }
    memcpy(*b + *n, s, len);
    *n += len;
    (*b)[*n] = 0;
}

static void end_reasoning(sink *k) {
    if (k->mode != NF_OUT_REASONING) return;
    if (k->tty_err) fputs("\033[0m", stderr);
    fputs("\n", stderr);
    fflush(stderr);
}

/* Generated text to a stream. On a terminal, control characters other than newline and tab (a model can emit
 * ESC sequences) are shown as U+FFFD instead of being interpreted. */
static void emit(FILE *f, bool tty, const char *s, size_t n) {
    if (!tty) {
        fwrite(s, 1, n, f);
        return;
    }
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && !(((unsigned char)s[j] < 0x20 && s[j] != '\n' && s[j] != '\t') || s[j] == 0x7f)) j++;
        fwrite(s + i, 1, j - i, f);
        if (j < n) fputs("\xEF\xBF\xBD", f), j++;
        i = j;
    }
}

static void write_out(sink *k, const char *s, size_t n) {
    if (!n) return;
    emit(stdout, k->tty_out, s, n);
    fflush(stdout);
    k->out_nl = s[n - 1] == '\n';
}

static void on_parsed(void *user, const nf_out_event *ev) {
    sink *k = user;
    switch (ev->kind) {
    case NF_OUT_REASONING:
        if (k->mode != NF_OUT_REASONING) {
            if (k->tty_err) fputs("\033[2m", stderr);
            else fputs("[reasoning] ", stderr);
            k->mode = NF_OUT_REASONING;
        }
        emit(stderr, k->tty_err, ev->text, ev->len);
        fflush(stderr);
        buf_add(&k->reasoning, &k->n_reasoning, &k->cap_reasoning, ev->text, ev->len);
        break;
    case NF_OUT_TEXT:
        end_reasoning(k);
        k->mode = NF_OUT_TEXT;
        write_out(k, ev->text, ev->len);
        buf_add(&k->content, &k->n_content, &k->cap_content, ev->text, ev->len);
        break;
    case NF_OUT_TOOL_CALL: {
        end_reasoning(k);
        k->mode = NF_OUT_TEXT;
        char *args = json_dumps(ev->arguments, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!k->out_nl) write_out(k, "\n", 1);
        printf("[tool call] %s %s\n", ev->name, args ? args : "{}");
        fflush(stdout);
        k->out_nl = true;
        free(args);
        json_t *call = json_pack("{s:s,s:{s:s,s:O}}", "type", "function", "function", "name", ev->name,
                                 "arguments", ev->arguments);
        if (call) json_array_append_new(k->tool_calls, call);
        break;
    }
    case NF_OUT_END:
        break;
    }
}

static void sink_init(sink *k, bool raw, bool in_reasoning) {
    memset(k, 0, sizeof *k);
    k->tty_out = isatty(1);
    k->tty_err = isatty(2);
    k->raw = raw;
    k->out_nl = true;
    k->tool_calls = json_array();
    if (!raw) {
        nf_output_parser_opts po = {.in_reasoning = in_reasoning, .tools = NULL};
        k->parser = nf_output_parser_new(&po, on_parsed, k);
    }
}

static void sink_finish(sink *k) {
    if (k->parser) nf_output_parser_finish(k->parser);
    end_reasoning(k);
    k->mode = 0;
    if (!k->out_nl) write_out(k, "\n", 1);
}

static void sink_free(sink *k) {
    nf_output_parser_free(k->parser);
    free(k->content);
    free(k->reasoning);
    json_decref(k->tool_calls);
    memset(k, 0, sizeof *k);
}

static int on_token(void *user, const nf_gen_token *t) {
    sink *k = user;
    if (k->raw) {
        if (!t->is_stop) write_out(k, t->text, t->len);
    } else {
        nf_output_parser_feed(k->parser, t->text, t->len);
    }
    return 0;
}

static double rate(int64_t n, double s) { return s > 0 ? (double)n / s : 0.0; }

/* ---- prompts --------------------------------------------------------------------------------------------- */

/* {"role": role, "content": text}, text made valid UTF-8 first (JSON strings must be; invalid bytes from a
 * terminal or a file become U+FFFD). */
static json_t *message(const char *role, const char *text) {
    nf_utf8_asm a = {0};
    size_t n1, n2;
    const char *t1 = nf_utf8_feed(&a, text, strlen(text), &n1);
    char *v = nf_xmalloc(n1 + 4);
    memcpy(v, t1, n1);
    const char *t2 = nf_utf8_flush(&a, &n2);
    memcpy(v + n1, t2, n2);
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string(role));
    json_object_set_new(m, "content", json_stringn(v, n1 + n2));
    free(v);
    nf_utf8_free(&a);
    return m;
}

static json_t *base_messages(const cli_opts *o) {
    json_t *m = json_array();
    if (o->system) json_array_append_new(m, message("system", o->system));
    return m;
}

static nf_chat_opts chat_opts(const cli_opts *o, bool think, bool gen) {
    nf_chat_opts co = nf_chat_opts_default();
    co.add_generation_prompt = gen;
    co.enable_thinking = think;
    co.reasoning_effort = o->effort;
    return co;
}

/* Tokens of the rendered prompt from byte offset `from` on (special pieces by id, text as text). -1 when
 * `from` falls inside a special piece. */
static int prompt_tokens_from(const nf_tokenizer *t, const nf_prompt *p, size_t from, nf_tokens *out) {
    for (size_t i = 0; i < p->n_pieces; i++) {
        const nf_prompt_piece *pc = &p->pieces[i];
        if (pc->off + pc->len <= from) continue;
        size_t start = pc->off < from ? from : pc->off;
        if (pc->special) {
            if (start != pc->off) return -1;
            int32_t id = nf_token_id_n(t, p->text + pc->off, pc->len);
            if (id < 0)
                return nf_fail("special token '%.*s' is not in the vocabulary", (int)pc->len, p->text + pc->off);
            nf_tokens_push(out, id);
        } else if (nf_tokenize_text(t, p->text + start, pc->off + pc->len - start, out) < 0) {
            return -1;
        }
    }
    return 0;
}

/* ---- nf run ---------------------------------------------------------------------------------------------- */

static char *read_all(const char *path) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return (void)nf_fail("%s: %s", path, strerror(errno)), NULL;
    size_t n = 0, cap = 4096, r;
    char *s = nf_xmalloc(cap);
    while ((r = fread(s + n, 1, cap - n - 1, f)) > 0)
        if ((n += r) + 1 == cap) s = nf_xrealloc(s, cap *= 2);
    s[n] = 0;
    if (f != stdin) fclose(f);
    return s;
}

int nf_cmd_run(int argc, char **argv) {
    cli_opts o;
    int pr = parse_opts(argc, argv, false, &o);
    if (pr) return pr == 1 ? 0 : 2;
    char *file_text = NULL;
    if (o.prompt_file) {
        if (!(file_text = read_all(o.prompt_file))) {
            fprintf(stderr, "%s: error: %s\n", nf_progname, nf_error());
            return 1;
        }
        o.prompt = file_text;
    }
    if (!o.prompt) {
        fprintf(stderr, "%s run: a prompt is required (-p TEXT or -f FILE)\n", nf_progname);
        usage(stderr, false);
        return 2;
    }
    nf_session *s = open_session(&o);
    if (!s) {
        fprintf(stderr, "%s: error: %s\n", nf_progname, nf_error());
        free(file_text);
        return 1;
    }
    const nf_tokenizer *tok = nf_session_tokenizer(s);
    nf_tokens ids = {0};
    int rc = 1;
    sink k;
    sink_init(&k, o.raw, !o.raw && o.think);
    if (o.raw) {
        if (nf_tokenize_text(tok, o.prompt, strlen(o.prompt), &ids) < 0) goto done;
    } else {
        json_t *msgs = base_messages(&o);
        json_array_append_new(msgs, message("user", o.prompt));
        nf_chat_opts co = chat_opts(&o, o.think, true);
        nf_prompt p = {0};
        int r = nf_chat_render(msgs, NULL, &co, &p);
        json_decref(msgs);
        if (r < 0) goto done;
        r = nf_prompt_tokenize(tok, &p, &ids);
        nf_prompt_free(&p);
        if (r < 0) goto done;
    }
    if (ids.n == 0) {
        nf_fail("the prompt is empty");
        goto done;
    }
    install_sigint();
    nf_prefill_stats ps;
    int r = nf_session_set_prompt(s, ids.ids, ids.n, NULL, 0, &g_cancel, &ps);
    if (r < 0) goto done;
    if (r == 1) {
        fprintf(stderr, "\n(interrupted during prefill)\n");
        rc = 130;
        goto done;
    }
    nf_gen_opts g = {.max_tokens = o.max_tokens, .cancel = &g_cancel, .ignore_stop = o.ignore_stop};
    nf_gen_stats gs;
    if (nf_session_generate(s, &g, on_token, &k, &gs) < 0) goto done;
    sink_finish(&k);
    if (gs.stop == NF_STOP_CANCEL) fprintf(stderr, "(interrupted)\n");
    fprintf(stderr, "prefill: %lld tokens in %.3f s (%.1f tokens/s)\n", (long long)ps.prefilled, ps.seconds,
            rate(ps.prefilled, ps.seconds));
    fprintf(stderr, "decode: %lld tokens in %.3f s (%.1f tokens/s), time to first token %.3f s, stop: %s\n",
            (long long)gs.n_tokens, gs.decode_s, rate(gs.n_decoded, gs.decode_s), gs.ttft_s,
            nf_stop_reason_name(gs.stop));
    if (nf_session_spec(s)) {
        char line[512];
        nf_spec_stats_line(nf_session_spec(s), line, sizeof line);
        fprintf(stderr, "%s\n", line);
    }
    rc = gs.stop == NF_STOP_CANCEL ? 130 : 0;
done:
    if (rc == 1) fprintf(stderr, "%s: error: %s\n", nf_progname, nf_error());
    sink_free(&k);
    nf_tokens_free(&ids);
    nf_session_free(s);
    free(file_text);
    return rc;
}

/* ---- nf chat --------------------------------------------------------------------------------------------- */

typedef struct {
    cli_opts *o;
    nf_session *s;
    json_t *msgs;       /* the conversation so far (system, user, assistant, ...) */
    bool think;
} chat;

static void chat_help(void) {
    printf("commands:\n"
           "  /think      reasoning on for the next turns\n"
           "  /nothink    reasoning off for the next turns\n"
           "  /reset      forget the conversation (empty state)\n"
           "  /ctx        tokens used / context size\n"
           "  /help       this list\n"
           "  /quit       exit (also Ctrl-D, or Ctrl-C at the prompt)\n"
           "Ctrl-C during an answer stops it; the partial answer stays in the conversation.\n");
}

static void chat_ctx(chat *c) {
    size_t n;
    nf_session_tokens(c->s, &n);
    int64_t ck[64];
    int nck = nf_session_checkpoints(c->s, ck, 64);
    printf("ctx: %zu / %lld tokens, %zu messages, %d checkpoints, thinking %s\n", n,
           (long long)nf_session_n_ctx(c->s), json_array_size(c->msgs), nck, c->think ? "on" : "off");
}

/* One turn: prefill the new user message (only what the live state does not hold yet), generate, record. */
static void chat_turn(chat *c, const char *text) {
    nf_session *s = c->s;
    const nf_tokenizer *tok = nf_session_tokenizer(s);
    size_t pre_len;
    nf_session_tokens(s, &pre_len);
    if (nf_session_checkpoint(s) < 0) fprintf(stderr, "warning: %s\n", nf_error());

    json_t *next = json_deep_copy(c->msgs);
    json_array_append_new(next, message("user", text));
    nf_chat_opts co_new = chat_opts(c->o, c->think, true), co_old = chat_opts(c->o, c->think, false);
    nf_prompt pn = {0}, po = {0};
    nf_tokens ids = {0};
    bool append = false;
    int r = nf_chat_render(next, NULL, &co_new, &pn);
    if (r == 0 && pre_len > 0 && json_array_size(c->msgs) > 0 && nf_chat_render(c->msgs, NULL, &co_old, &po) == 0 &&
        po.len <= pn.len && !memcmp(po.text, pn.text, po.len)) {
        append = prompt_tokens_from(tok, &pn, po.len, &ids) == 0;
        if (!append) ids.n = 0;
    }
    if (r == 0 && !append) r = nf_prompt_tokenize(tok, &pn, &ids);
    nf_prompt_free(&po);
    nf_prompt_free(&pn);
    if (r < 0) {
        fprintf(stderr, "error: %s\n", nf_error());
        json_decref(next);
        nf_tokens_free(&ids);
        return;
    }

    g_cancel = 0;
    nf_prefill_stats ps;
    r = append ? nf_session_prefill(s, ids.ids, ids.n, NULL, 0, &g_cancel, &ps)
               : nf_session_set_prompt(s, ids.ids, ids.n, NULL, 0, &g_cancel, &ps);
    nf_tokens_free(&ids);
    if (r != 0) {
        if (r < 0) fprintf(stderr, "error: %s\n", nf_error());
        else fprintf(stderr, "\n(interrupted during prefill: turn dropped)\n");
        if (nf_session_truncate(s, pre_len) < 0) fprintf(stderr, "error: %s\n", nf_error());
        json_decref(next);
        return;
    }
    nf_session_checkpoint(s);

    sink k;
    sink_init(&k, false, c->think);
    nf_gen_opts g = {.max_tokens = c->o->max_tokens, .cancel = &g_cancel, .ignore_stop = c->o->ignore_stop};
    nf_gen_stats gs;
    r = nf_session_generate(s, &g, on_token, &k, &gs);
    sink_finish(&k);
    if (r < 0) {
        fprintf(stderr, "error: %s (conversation reset)\n", nf_error());
        json_decref(c->msgs);
        c->msgs = base_messages(c->o);
        json_decref(next);
        sink_free(&k);
        return;
    }
    json_t *am = message("assistant", k.content ? k.content : "");
    if (k.n_reasoning) json_object_set_new(am, "reasoning_content", json_string(k.reasoning));
    if (json_array_size(k.tool_calls)) json_object_set(am, "tool_calls", k.tool_calls);
    json_array_append_new(next, am);
    json_decref(c->msgs);
    c->msgs = next;
    sink_free(&k);

    size_t used;
    nf_session_tokens(s, &used);
    if (gs.stop == NF_STOP_CANCEL) fprintf(stderr, "(interrupted: the partial answer stays in the conversation)\n");
    else if (gs.stop == NF_STOP_CTX_FULL) fprintf(stderr, "(context full: /reset to start over)\n");
    fprintf(stderr, "[prefill %lld tokens (%lld reused) %.1f tokens/s | decode %lld tokens %.1f tokens/s | "
                    "ttft %.3f s | ctx %zu/%lld | %s]\n",
            (long long)ps.prefilled, (long long)ps.reused, rate(ps.prefilled, ps.seconds), (long long)gs.n_tokens,
            rate(gs.n_decoded, gs.decode_s), gs.ttft_s, used, (long long)nf_session_n_ctx(s),
            nf_stop_reason_name(gs.stop));
}

/* A line from the terminal (libedit) or from a pipe. NULL at end of input or on Ctrl-C. malloc'ed. */
static char *read_line(bool tty) {
    if (tty) {
        char *l = readline("> ");
        if (l && *l) add_history(l);
        return l;
    }
    size_t cap = 256, n = 0;
    char *l = nf_xmalloc(cap);
    int ch;
    while ((ch = getchar()) != EOF && ch != '\n') {
        if (n + 2 > cap) l = nf_xrealloc(l, cap *= 2);
        l[n++] = (char)ch;
    }
    if (ch == EOF && (n == 0 || g_cancel)) {
        free(l);
        return NULL;
    }
    l[n] = 0;
    return l;
}

int nf_cmd_chat(int argc, char **argv) {
    cli_opts o;
    int pr = parse_opts(argc, argv, true, &o);
    if (pr) return pr == 1 ? 0 : 2;
    nf_session *s = open_session(&o);
    if (!s) {
        fprintf(stderr, "%s: error: %s\n", nf_progname, nf_error());
        return 1;
    }
    chat c = {.o = &o, .s = s, .msgs = base_messages(&o), .think = o.think};
    bool tty = isatty(0);
    if (tty) {
        using_history();
        g_have_tio = tcgetattr(0, &g_tio) == 0;
    }
    install_sigint();
    fprintf(stderr, "nf chat: context %lld tokens, thinking %s. /help for commands, Ctrl-D to quit.\n",
            (long long)nf_session_n_ctx(s), c.think ? "on" : "off");
    for (;;) {
        g_cancel = 0;
        if (!tty) { fputs("> ", stdout); fflush(stdout); }
        g_at_prompt = 1;
        char *line = read_line(tty);
        g_at_prompt = 0;
        if (!line || g_cancel) {
            if (!tty || g_cancel) fputc('\n', stdout);
            free(line);
            break;
        }
        char *t = line;
        while (*t == ' ' || *t == '\t') t++;
        size_t n = strlen(t);
        while (n && (t[n - 1] == ' ' || t[n - 1] == '\t' || t[n - 1] == '\r')) t[--n] = 0;
        if (!n) { free(line); continue; }
        if (!strcmp(t, "/quit") || !strcmp(t, "/exit")) { free(line); break; }
        else if (!strcmp(t, "/help")) chat_help();
        else if (!strcmp(t, "/ctx")) chat_ctx(&c);
        else if (!strcmp(t, "/think")) { c.think = true; printf("thinking on\n"); }
        else if (!strcmp(t, "/nothink")) { c.think = false; printf("thinking off\n"); }
        else if (!strcmp(t, "/reset")) {
            nf_session_reset(s);
            json_decref(c.msgs);
            c.msgs = base_messages(&o);
            printf("conversation reset\n");
        } else if (t[0] == '/' && t[1] && !strchr(t, ' ') && strlen(t) < 16) {
            printf("unknown command %s (/help lists them)\n", t);
        } else {
            chat_turn(&c, t);
        }
        fflush(stdout);
        free(line);
    }
    json_decref(c.msgs);
    nf_session_free(s);
    return 0;
}
