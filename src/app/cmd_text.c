/* cmd_text.c — `nf tokenize`, `nf detokenize`, `nf render`: the text layer from the command line.
 *
 * They exist to inspect and test the tokenizer and the chat template without a model run: what ids does
 * this text get, what text do these ids stand for, what exact prompt does this conversation become. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/commands.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "util/error.h"

static char *slurp(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0, r;
    char *s = nf_xmalloc(cap);
    while ((r = fread(s + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (n + 1 == cap) s = nf_xrealloc(s, cap *= 2);
    }
    s[n] = 0;
    *len = n;
    return s;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        nf_fail("%s: %s", path, strerror(errno));
        return NULL;
    }
    char *s = slurp(f, len);
    fclose(f);
    return s;
}

static void print_piece(const char *s, size_t n) {
    putchar('\'');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c == '\\') fputs("\\\\", stdout);
        else if (c == '\'') fputs("\\'", stdout);
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
    putchar('\'');
}

static void print_ids(const nf_tokenizer *t, const nf_tokens *ids, bool ids_only) {
    for (size_t i = 0; i < ids->n; i++) {
        if (ids_only) {
            printf(i ? " %d" : "%d", ids->ids[i]);
        } else {
            size_t n;
            const char *s = nf_token_bytes(t, ids->ids[i], &n);
            printf("%6d  ", ids->ids[i]);
            print_piece(s, n);
            if (nf_token_is_special(t, ids->ids[i])) fputs("  (special)", stdout);
            putchar('\n');
        }
    }
    if (ids_only) putchar('\n');
}

int nf_cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *file = NULL;
    bool ids_only = false, special = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--text") && i + 1 < argc) text = argv[++i];
        else if (!strcmp(argv[i], "--file") && i + 1 < argc) file = argv[++i];
        else if (!strcmp(argv[i], "--ids-only")) ids_only = true;
        else if (!strcmp(argv[i], "--special")) special = true;
        else {
            fprintf(stderr, "usage: nf tokenize -m MODEL.gguf|tokenizer.json|HF_DIR [--text T | --file F] [--ids-only] [--special]\n"
                            "  text from --text, --file or stdin; special-token text (<|user|>, <think>, ...) is plain\n"
                            "  text unless --special, which matches it as the `tokenizers` library does\n");
            return 2;
        }
    }
    if (!model) nf_die("tokenize: -m MODEL is required");
    nf_tokenizer *t = nf_tokenizer_load(model);
    if (!t) nf_die("%s", nf_error());
    size_t len;
    char *buf = NULL;
    if (text) {
        len = strlen(text);
    } else if (file) {
        if (!(buf = read_file(file, &len))) nf_die("%s", nf_error());
        text = buf;
    } else {
        buf = slurp(stdin, &len);
        text = buf;
    }
    nf_tokens ids = {0};
    if ((special ? nf_tokenize_with_specials(t, text, len, &ids) : nf_tokenize_text(t, text, len, &ids)) < 0)
        nf_die("%s", nf_error());
    print_ids(t, &ids, ids_only);
    nf_tokens_free(&ids);
    free(buf);
    nf_tokenizer_free(t);
    return 0;
}

int nf_cmd_detokenize(int argc, char **argv) {
    const char *model = NULL;
    nf_tokens ids = {0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) {
            model = argv[++i];
            continue;
        }
        char *end;
        errno = 0;
        long v = strtol(argv[i], &end, 10);
        if (*argv[i] == 0 || *end || errno || v < 0 || v > INT32_MAX) {
            fprintf(stderr, "usage: nf detokenize -m MODEL ID...   ('%s' is not a token id)\n", argv[i]);
            nf_tokens_free(&ids);
            return 2;
        }
        nf_tokens_push(&ids, (int32_t)v);
    }
    if (!model) nf_die("detokenize: -m MODEL is required");
    nf_tokenizer *t = nf_tokenizer_load(model);
    if (!t) nf_die("%s", nf_error());
    char *s;
    size_t n;
    if (nf_detokenize(t, ids.ids, ids.n, &s, &n) < 0) nf_die("%s", nf_error());
    fwrite(s, 1, n, stdout);
    free(s);
    nf_tokens_free(&ids);
    nf_tokenizer_free(t);
    return 0;
}

int nf_cmd_render(int argc, char **argv) {
    const char *msgs_path = NULL, *tools_path = NULL, *model = NULL;
    nf_chat_opts o = nf_chat_opts_default();
    bool ids = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--messages") && i + 1 < argc) msgs_path = argv[++i];
        else if (!strcmp(argv[i], "--tools") && i + 1 < argc) tools_path = argv[++i];
        else if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--effort") && i + 1 < argc) o.reasoning_effort = argv[++i];
        else if (!strcmp(argv[i], "--no-think")) o.enable_thinking = false;
        else if (!strcmp(argv[i], "--clear-thinking")) o.clear_thinking = true;
        else if (!strcmp(argv[i], "--no-generation-prompt")) o.add_generation_prompt = false;
        else if (!strcmp(argv[i], "--ids")) ids = true;
        else {
            fprintf(stderr,
                    "usage: nf render --messages FILE.json [--tools FILE.json] [--no-think] [--effort low|high]\n"
                    "                 [--clear-thinking] [--no-generation-prompt] [-m MODEL --ids]\n"
                    "  FILE.json: a messages array, or a request object with \"messages\" (and \"tools\"); - = stdin\n"
                    "  prints the prompt text exactly (no newline added); --ids prints token ids instead\n");
            return 2;
        }
    }
    if (!msgs_path) nf_die("render: --messages FILE.json is required");
    if (ids && !model) nf_die("render: --ids needs -m MODEL for the tokenizer");
    json_error_t e;
    json_t *root = strcmp(msgs_path, "-") == 0 ? json_loadf(stdin, JSON_DECODE_ANY, &e)
                                               : json_load_file(msgs_path, JSON_DECODE_ANY, &e);
    if (!root) nf_die("%s: %s (line %d)", msgs_path, e.text, e.line);
    json_t *messages = root, *tools = NULL, *tools_root = NULL;
    if (json_is_object(root)) {
        messages = json_object_get(root, "messages");
        tools = json_object_get(root, "tools");
    }
    if (tools_path) {
        tools_root = json_load_file(tools_path, JSON_DECODE_ANY, &e);
        if (!tools_root) nf_die("%s: %s (line %d)", tools_path, e.text, e.line);
        tools = tools_root;
    }
    nf_prompt p;
    if (nf_chat_render(messages, tools, &o, &p) < 0) nf_die("%s: %s", msgs_path, nf_error());
    if (ids) {
        nf_tokenizer *t = nf_tokenizer_load(model);
        if (!t) nf_die("%s", nf_error());
        nf_tokens tk = {0};
        if (nf_prompt_tokenize(t, &p, &tk) < 0) nf_die("%s", nf_error());
        print_ids(t, &tk, true);
        nf_tokens_free(&tk);
        nf_tokenizer_free(t);
    } else {
        fwrite(p.text, 1, p.len, stdout);
    }
    nf_prompt_free(&p);
    json_decref(root);
    json_decref(tools_root);
    return 0;
}
