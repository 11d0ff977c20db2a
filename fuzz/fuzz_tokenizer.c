/* fuzz_tokenizer.c — libFuzzer target for the tokenizer and the chat renderer.
 *
 * Every input is treated as raw text (any bytes, invalid UTF-8 included): it must encode without error,
 * every id must be in range, and decoding must give back exactly the input bytes -- also when special-token
 * text is matched (nf_tokenize_with_specials). Inputs that parse as
 * JSON are also rendered as a conversation (messages array or {"messages","tools"} object) and the prompt
 * tokenized, so odd message shapes cannot crash the renderer. The tokenizer is the embedded model's
 * (models/tiny/tokenizer.json, or $NF_TOKENIZER); the fuzzer is run from the repository root. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "util/error.h"

static nf_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *p = getenv("NF_TOKENIZER");
    tok = nf_tokenizer_load(p ? p : "models/tiny/tokenizer.json");
    if (!tok) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", nf_error());
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    nf_tokens ids = {0};
    if (nf_tokenize_text(tok, (const char *)data, size, &ids) < 0) abort();
    for (size_t i = 0; i < ids.n; i++)
        if (ids.ids[i] < 0 || ids.ids[i] >= nf_tokenizer_n_vocab(tok)) abort();
    char *back;
    size_t n;
    if (nf_detokenize(tok, ids.ids, ids.n, &back, &n) < 0) abort();
    if (n != size || memcmp(back, data, size) != 0) abort();
    free(back);
    nf_tokens_free(&ids);
    if (nf_tokenize_with_specials(tok, (const char *)data, size, &ids) < 0) abort();
    if (nf_detokenize(tok, ids.ids, ids.n, &back, &n) < 0) abort();
    if (n != size || memcmp(back, data, size) != 0) abort();
    free(back);
    nf_tokens_free(&ids);

    json_error_t e;
    json_t *j = json_loadb((const char *)data, size, JSON_DECODE_ANY, &e);
    if (j) {
        json_t *msgs = json_is_object(j) ? json_object_get(j, "messages") : j;
        json_t *tools = json_is_object(j) ? json_object_get(j, "tools") : NULL;
        nf_chat_opts o = nf_chat_opts_default();
        o.clear_thinking = size & 1;
        nf_prompt p;
        if (nf_chat_render(msgs, tools, &o, &p) == 0) {
            nf_tokens t = {0};
            if (nf_prompt_tokenize(tok, &p, &t) < 0) abort(); /* template specials must all exist */
            nf_tokens_free(&t);
            nf_prompt_free(&p);
        } else if (!nf_error()[0]) {
            abort();
        }
        json_decref(j);
    }
    return 0;
}
