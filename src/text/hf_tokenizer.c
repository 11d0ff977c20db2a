/* hf_tokenizer.c — read a Hugging Face tokenizer.json (+ tokenizer_config.json) into the GGUF tokenizer
 * representation: write it as tokenizer.ggml.* keys (the converter) or build an nf_tokenizer directly (tests,
 * `nf tokenize -m DIR`).
 *
 * Only what GLM uses is accepted, and anything else is refused with a message rather than silently
 * tokenized differently: model type BPE without dropout/prefixes/byte fallback, no normalizer, and a
 * pre-tokenizer that is the GLM split regex (Split, Isolated) followed by ByteLevel(use_regex=false).
 * Added tokens become CONTROL (special=true) or USER_DEFINED (special=false) tokens at their ids; ids that
 * no entry uses become "[PAD<id>]" UNUSED tokens, as llama.cpp's converter does. */
#include "text/hf_tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "text/tokenizer.h"
#include "util/error.h"

typedef struct {
    uint32_t n_vocab;
    char **tokens;
    int32_t *types;
    uint32_t n_merges;
    char **merges;
    bool ignore_merges;
    char pre[16];
    nf_special_ids special;
    char *chat_template;  /* NULL if none */
} hf_tok;

static void hf_tok_free(hf_tok *h) {
    if (h->tokens)
        for (uint32_t i = 0; i < h->n_vocab; i++) free(h->tokens[i]);
    free(h->tokens);
    free(h->types);
    if (h->merges)
        for (uint32_t i = 0; i < h->n_merges; i++) free(h->merges[i]);
    free(h->merges);
    free(h->chat_template);
    memset(h, 0, sizeof *h);
}

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static char *path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = nf_xmalloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static char *read_text_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *s = nf_xmalloc(cap);
    size_t r;
    while ((r = fread(s + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (n + 1 == cap) s = nf_xrealloc(s, cap *= 2);
    }
    fclose(f);
    s[n] = 0;
    return s;
}

/* The pre-tokenizer must be the GLM split regex then ByteLevel without its own regex. */
static int check_pre_tokenizer(json_t *pt, const char *path) {
    const char *want = nf_pretokenizer_hf_regex("glm4");
    if (!json_is_object(pt)) return nf_fail("%s: no pre_tokenizer (expected GLM's Split regex + ByteLevel)", path);
    const char *type = json_string_value(json_object_get(pt, "type"));
    if (!type || strcmp(type, "Sequence") != 0)
        return nf_fail("%s: pre_tokenizer type '%s' is not supported (expected a Sequence of Split + ByteLevel)",
                       path, type ? type : "?");
    json_t *seq = json_object_get(pt, "pretokenizers");
    bool split_ok = false, bl_ok = false;
    size_t i;
    json_t *p;
    json_array_foreach(seq, i, p) {
        const char *pty = json_string_value(json_object_get(p, "type"));
        if (pty && !strcmp(pty, "Split")) {
            const char *rx = json_string_value(json_object_get(json_object_get(p, "pattern"), "Regex"));
            const char *beh = json_string_value(json_object_get(p, "behavior"));
            if (!rx || strcmp(rx, want) != 0)
                return nf_fail("%s: the Split regex is not GLM's pre-tokenizer regex (unsupported)", path);
            if (!beh || strcmp(beh, "Isolated") != 0 || json_is_true(json_object_get(p, "invert")))
                return nf_fail("%s: Split behavior must be Isolated, not inverted", path);
            split_ok = true;
        } else if (pty && !strcmp(pty, "ByteLevel")) {
            if (json_is_true(json_object_get(p, "use_regex")) || json_is_true(json_object_get(p, "add_prefix_space")))
                return nf_fail("%s: ByteLevel with use_regex/add_prefix_space is not supported", path);
            bl_ok = true;
        } else {
            return nf_fail("%s: pre-tokenizer '%s' is not supported", path, pty ? pty : "?");
        }
    }
    if (!split_ok || !bl_ok) return nf_fail("%s: pre_tokenizer must contain Split(GLM regex) and ByteLevel", path);
    return 0;
}

/* A special token given in tokenizer_config.json as a string or {"content": ...}. */
static const char *cfg_token(json_t *cfg, const char *key) {
    json_t *v = json_object_get(cfg, key);
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v)) return json_string_value(json_object_get(v, "content"));
    return NULL;
}

static int32_t find_added(const hf_tok *h, const char *content) {
    if (!content) return -1;
    for (uint32_t i = 0; i < h->n_vocab; i++)
        if (h->types[i] != NF_TOKTYPE_NORMAL && !strcmp(h->tokens[i], content)) return (int32_t)i;
    return -1;
}

static int hf_read(const char *path, hf_tok *h) {
    memset(h, 0, sizeof *h);
    h->special = (nf_special_ids){-1, -1, -1, -1, -1, -1};
    char *dir = NULL, *json_path;
    if (is_dir(path)) {
        dir = nf_xstrdup(path);
        json_path = path_join(path, "tokenizer.json");
    } else {
        json_path = nf_xstrdup(path);
        const char *slash = strrchr(path, '/');
        dir = slash ? strndup(path, (size_t)(slash - path)) : nf_xstrdup(".");
    }
    json_error_t jerr;
    json_t *root = json_load_file(json_path, 0, &jerr);
    int rc = -1;
    if (!root) {
        nf_fail("%s: %s (line %d)", json_path, jerr.text, jerr.line);
        goto out;
    }
    json_t *model = json_object_get(root, "model");
    const char *mtype = json_string_value(json_object_get(model, "type"));
    if (!mtype || strcmp(mtype, "BPE") != 0) {
        nf_fail("%s: model type '%s' is not supported (need BPE)", json_path, mtype ? mtype : "?");
        goto out;
    }
    if (json_is_true(json_object_get(model, "byte_fallback")) ||
        json_is_string(json_object_get(model, "continuing_subword_prefix")) ||
        json_is_string(json_object_get(model, "end_of_word_suffix")) ||
        json_is_number(json_object_get(model, "dropout"))) {
        nf_fail("%s: BPE options (byte_fallback, prefixes/suffixes, dropout) are not supported", json_path);
        goto out;
    }
    json_t *norm = json_object_get(root, "normalizer");
    if (norm && !json_is_null(norm)) {
        nf_fail("%s: a normalizer is not supported (GLM has none)", json_path);
        goto out;
    }
    if (check_pre_tokenizer(json_object_get(root, "pre_tokenizer"), json_path) < 0) goto out;
    snprintf(h->pre, sizeof h->pre, "glm4");
    h->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));

    json_t *vocab = json_object_get(model, "vocab"), *added = json_object_get(root, "added_tokens");
    if (!json_is_object(vocab)) {
        nf_fail("%s: model.vocab missing", json_path);
        goto out;
    }
    int64_t max_id = -1;
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= (1 << 30)) {
            nf_fail("%s: vocab entry '%.40s' has a bad id", json_path, key);
            goto out;
        }
        if (json_integer_value(v) > max_id) max_id = json_integer_value(v);
    }
    size_t i;
    json_array_foreach(added, i, v) {
        json_t *id = json_object_get(v, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= (1 << 30) ||
            !json_is_string(json_object_get(v, "content"))) {
            nf_fail("%s: added_tokens[%zu] needs an id and a content", json_path, i);
            goto out;
        }
        if (json_integer_value(id) > max_id) max_id = json_integer_value(id);
    }
    if (max_id < 0) {
        nf_fail("%s: empty vocabulary", json_path);
        goto out;
    }
    h->n_vocab = (uint32_t)(max_id + 1);
    /* Pad to the model's embedding rows (config.json vocab_size), as llama.cpp's converter does. */
    char *conf_path = path_join(dir, "config.json");
    json_t *conf = json_load_file(conf_path, 0, &jerr);
    free(conf_path);
    if (conf) {
        json_t *vs = json_object_get(conf, "vocab_size");
        if (!json_is_integer(vs)) vs = json_object_get(json_object_get(conf, "text_config"), "vocab_size");
        if (json_is_integer(vs) && json_integer_value(vs) > (json_int_t)h->n_vocab &&
            json_integer_value(vs) < (1 << 30))
            h->n_vocab = (uint32_t)json_integer_value(vs);
        json_decref(conf);
    }
    h->tokens = nf_xcalloc(h->n_vocab, sizeof *h->tokens);
    h->types = nf_xcalloc(h->n_vocab, sizeof *h->types);
    json_object_foreach(vocab, key, v) {
        uint32_t id = (uint32_t)json_integer_value(v);
        free(h->tokens[id]);
        h->tokens[id] = nf_xstrdup(key);
        h->types[id] = NF_TOKTYPE_NORMAL;
    }
    json_array_foreach(added, i, v) {
        uint32_t id = (uint32_t)json_integer_value(json_object_get(v, "id"));
        free(h->tokens[id]);
        h->tokens[id] = nf_xstrdup(json_string_value(json_object_get(v, "content")));
        h->types[id] = json_is_true(json_object_get(v, "special")) ? NF_TOKTYPE_CONTROL : NF_TOKTYPE_USER_DEFINED;
    }
    for (uint32_t id = 0; id < h->n_vocab; id++) {
        if (h->tokens[id]) continue;
        char buf[32];
        snprintf(buf, sizeof buf, "[PAD%u]", id);
        h->tokens[id] = nf_xstrdup(buf);
        h->types[id] = NF_TOKTYPE_UNUSED;
    }

    json_t *merges = json_object_get(model, "merges");
    if (!json_is_array(merges)) {
        nf_fail("%s: model.merges missing", json_path);
        goto out;
    }
    h->n_merges = (uint32_t)json_array_size(merges);
    h->merges = nf_xcalloc(h->n_merges ? h->n_merges : 1, sizeof *h->merges);
    json_array_foreach(merges, i, v) {
        if (json_is_string(v)) {
            h->merges[i] = nf_xstrdup(json_string_value(v));
        } else if (json_is_array(v) && json_array_size(v) == 2 && json_is_string(json_array_get(v, 0)) &&
                   json_is_string(json_array_get(v, 1))) {
            const char *a = json_string_value(json_array_get(v, 0)), *b = json_string_value(json_array_get(v, 1));
            size_t n = strlen(a) + strlen(b) + 2;
            h->merges[i] = nf_xmalloc(n);
            snprintf(h->merges[i], n, "%s %s", a, b);
        } else {
            nf_fail("%s: merges[%zu] is neither \"A B\" nor [\"A\", \"B\"]", json_path, i);
            goto out;
        }
    }

    /* Special ids: tokenizer_config.json when present, GLM's conventions otherwise. */
    char *cfg_path = path_join(dir, "tokenizer_config.json");
    json_t *cfg = json_load_file(cfg_path, 0, &jerr);
    free(cfg_path);
    const char *eos = cfg ? cfg_token(cfg, "eos_token") : NULL;
    const char *pad = cfg ? cfg_token(cfg, "pad_token") : NULL;
    const char *bos = cfg ? cfg_token(cfg, "bos_token") : NULL;
    const char *unk = cfg ? cfg_token(cfg, "unk_token") : NULL;
    h->special.eos = find_added(h, eos ? eos : "<|endoftext|>");
    h->special.pad = find_added(h, pad ? pad : "<|endoftext|>");
    h->special.bos = find_added(h, bos ? bos : "[gMASK]");
    h->special.unk = find_added(h, unk);
    h->special.eot = find_added(h, "<|user|>");
    h->special.eom = find_added(h, "<|observation|>");
    const char *tmpl = cfg ? json_string_value(json_object_get(cfg, "chat_template")) : NULL;
    if (tmpl) {
        h->chat_template = nf_xstrdup(tmpl);
    } else {
        char *jp = path_join(dir, "chat_template.jinja");
        h->chat_template = read_text_file(jp);
        free(jp);
    }
    if (cfg) json_decref(cfg);
    rc = 0;
out:
    if (root) json_decref(root);
    free(json_path);
    free(dir);
    if (rc < 0) hf_tok_free(h);
    return rc;
}

nf_tokenizer *nf_tokenizer_load_hf(const char *path) {
    hf_tok h;
    if (hf_read(path, &h) < 0) return NULL;
    nf_tokenizer_desc d = {
        .pre = h.pre, .n_vocab = h.n_vocab, .tokens = (const char *const *)h.tokens, .types = h.types,
        .n_merges = h.n_merges, .merges = (const char *const *)h.merges, .ignore_merges = h.ignore_merges,
        .special = h.special,
    };
    nf_tokenizer *t = nf_tokenizer_build(&d);
    if (!t) nf_fail_prefix("%s", path);
    hf_tok_free(&h);
    return t;
}

int nf_tokenizer_write_gguf_meta(const char *hf_dir, gguf_writer *w) {
    hf_tok h;
    if (hf_read(hf_dir, &h) < 0) return -1;
    /* Build once to prove the result loads (merges refer to real tokens, every byte has a token). */
    nf_tokenizer_desc d = {
        .pre = h.pre, .n_vocab = h.n_vocab, .tokens = (const char *const *)h.tokens, .types = h.types,
        .n_merges = h.n_merges, .merges = (const char *const *)h.merges, .ignore_merges = h.ignore_merges,
        .special = h.special,
    };
    nf_tokenizer *t = nf_tokenizer_build(&d);
    if (!t) {
        nf_fail_prefix("%s", hf_dir);
        hf_tok_free(&h);
        return -1;
    }
    nf_tokenizer_free(t);
    gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_set_str(w, "tokenizer.ggml.pre", h.pre);
    gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)h.tokens, h.n_vocab);
    gguf_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, h.types, h.n_vocab);
    gguf_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)h.merges, h.n_merges);
    if (h.ignore_merges) gguf_set_bool(w, "tokenizer.ggml.ignore_merges", true);
    if (h.special.bos >= 0) gguf_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)h.special.bos);
    if (h.special.eos >= 0) gguf_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)h.special.eos);
    if (h.special.pad >= 0) gguf_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)h.special.pad);
    if (h.special.unk >= 0) gguf_set_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)h.special.unk);
    if (h.special.eot >= 0) gguf_set_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)h.special.eot);
    if (h.special.eom >= 0) gguf_set_u32(w, "tokenizer.ggml.eom_token_id", (uint32_t)h.special.eom);
    gguf_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    if (h.chat_template) gguf_set_str(w, "tokenizer.chat_template", h.chat_template);
    hf_tok_free(&h);
    return 0;
}
