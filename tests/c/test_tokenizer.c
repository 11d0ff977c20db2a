/* test_tokenizer.c — the BPE tokenizer on a hand-made vocabulary whose results can be worked out on paper
 * (merge order, leftmost ties, the GLM split keeping contractions and 3-digit groups apart, invalid UTF-8),
 * the GGUF loader (keys written by nf_tokenizer_write_gguf_meta, wrong model/pre rejected with a message),
 * and error cases. The 1 MB cross-check against the `tokenizers` library is tests/py/test_tokenizer.py. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "text/hf_tokenizer.h"
#include "text/tokenizer.h"
#include "util/error.h"

/* byte b in the GPT-2 byte-level alphabet, UTF-8 encoded */
static void alpha(int b, char out[4]) {
    int n = 0, cp = -1;
    for (int x = 0; x < 256; x++) {
        bool keep = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
        int c = keep ? x : 256 + n++;
        if (x == b) cp = c;
    }
    if (cp < 0x80) { out[0] = (char)cp; out[1] = 0; }
    else { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); out[2] = 0; }
}

typedef struct {
    char *tok[300];
    int32_t type[300];
    int n;
} vocab;

static void add(vocab *v, const char *s, int type) {
    v->tok[v->n] = strdup(s);
    v->type[v->n++] = type;
}

/* ids 0..255: bytes; then the given multi-byte tokens; then two specials */
static nf_tokenizer *make(const char *const *extra, int n_extra, const char *const *merges, int n_merges, const char *pre) {
    vocab v = {.n = 0};
    for (int b = 0; b < 256; b++) {
        char a[4];
        alpha(b, a);
        add(&v, a, NF_TOKTYPE_NORMAL);
    }
    for (int i = 0; i < n_extra; i++) add(&v, extra[i], NF_TOKTYPE_NORMAL);
    add(&v, "<|user|>", NF_TOKTYPE_CONTROL);
    add(&v, "<think>", NF_TOKTYPE_USER_DEFINED);
    nf_tokenizer_desc d = {.pre = pre, .n_vocab = (uint32_t)v.n, .tokens = (const char *const *)v.tok, .types = v.type,
                           .n_merges = (uint32_t)n_merges, .merges = merges, .special = {-1, -1, -1, -1, -1, -1}};
    nf_tokenizer *t = nf_tokenizer_build(&d);
    for (int i = 0; i < v.n; i++) free(v.tok[i]);
    return t;
}

static void expect_ids(const nf_tokenizer *t, const char *text, const int32_t *want, size_t n) {
    nf_tokens ids = {0};
    cr_assert_eq(nf_tokenize_text(t, text, strlen(text), &ids), 0);
    cr_assert_eq(ids.n, n, "'%s': %zu ids, want %zu", text, ids.n, n);
    for (size_t i = 0; i < n; i++) cr_assert_eq(ids.ids[i], want[i], "'%s' id %zu: %d want %d", text, i, ids.ids[i], want[i]);
    char *back;
    size_t bl;
    cr_assert_eq(nf_detokenize(t, ids.ids, ids.n, &back, &bl), 0);
    cr_assert_eq(bl, strlen(text));
    cr_assert(memcmp(back, text, bl) == 0);
    free(back);
    nf_tokens_free(&ids);
}

Test(tokenizer, merge_order_by_rank_not_position) {
    /* ids: 256 "bc", 257 "ab", 258 "abc" */
    const char *extra[] = {"bc", "ab", "abc"};
    const char *merges[] = {"b c", "a b", "a bc"};
    nf_tokenizer *t = make(extra, 3, merges, 3, "glm4");
    cr_assert_not_null(t, "%s", nf_error());
    /* "abc": (b,c) has rank 0 < (a,b) rank 1, so bc first, then a+bc */
    expect_ids(t, "abc", (int32_t[]){258}, 1);
    /* "abab": a+b twice -> ab ab (no "ab ab" merge) */
    expect_ids(t, "abab", (int32_t[]){257, 257}, 2);
    nf_tokenizer_free(t);
}

Test(tokenizer, leftmost_tie) {
    const char *extra[] = {"aa"};
    const char *merges[] = {"a a"};
    nf_tokenizer *t = make(extra, 1, merges, 1, "glm4");
    cr_assert_not_null(t);
    expect_ids(t, "aaa", (int32_t[]){256, 'a'}, 2);
    expect_ids(t, "aaaa", (int32_t[]){256, 256}, 2);
    nf_tokenizer_free(t);
}

Test(tokenizer, glm_split_keeps_words_apart) {
    /* "t'" would merge first without pre-tokenization; the split makes "it" and "'s" separate words */
    const char *extra[] = {"t'", "it", "'s", "12", "123", "45", "34"};
    const char *merges[] = {"3 4", "t '", "i t", "' s", "1 2", "12 3", "4 5"};
    nf_tokenizer *t = make(extra, 7, merges, 7, "glm4");
    cr_assert_not_null(t, "%s", nf_error());
    expect_ids(t, "it's", (int32_t[]){257, 258}, 2);
    expect_ids(t, "it'S", (int32_t[]){257, '\'', 'S'}, 3); /* case-insensitive group, but no 'S token */
    /* digits in groups of three: 123|45, so the rank-0 "3 4" never applies */
    expect_ids(t, "12345", (int32_t[]){260, 261}, 2);
    nf_tokenizer_free(t);
}

Test(tokenizer, special_text_is_plain_and_pieces) {
    nf_tokenizer *t = make(NULL, 0, NULL, 0, "glm4");
    cr_assert_not_null(t);
    int32_t user = nf_token_id(t, "<|user|>"), think = nf_token_id(t, "<think>");
    cr_assert_eq(user, 256);
    cr_assert_eq(think, 257);
    cr_assert(nf_token_is_special(t, user) && nf_token_is_special(t, think) && !nf_token_is_special(t, 'a'));
    nf_tokens ids = {0};
    cr_assert_eq(nf_tokenize_text(t, "<|user|>", 8, &ids), 0);
    cr_assert_eq(ids.n, 8); /* plain bytes */
    nf_tokens_free(&ids);
    const char *pieces[] = {"<|user|>", "hi", "<think>"};
    size_t lens[] = {8, 2, 7};
    bool sp[] = {true, false, true};
    cr_assert_eq(nf_tokenize_pieces(t, 3, pieces, lens, sp, &ids), 0);
    cr_assert_eq(ids.n, 4);
    cr_assert_eq(ids.ids[0], user);
    cr_assert_eq(ids.ids[3], think);
    nf_tokens_free(&ids);
    cr_assert_eq(nf_tokenize_with_specials(t, "a<|user|>hi<think><thin", 23, &ids), 0);
    cr_assert_eq(ids.n, 1 + 1 + 2 + 1 + 5); /* a, <|user|>, h, i, <think>, <thin as bytes */
    cr_assert_eq(ids.ids[1], user);
    cr_assert_eq(ids.ids[4], think);
    nf_tokens_free(&ids);
    const char *bad[] = {"<|nope|>"};
    size_t bl[] = {8};
    bool bs[] = {true};
    cr_assert_eq(nf_tokenize_pieces(t, 1, bad, bl, bs, &ids), -1);
    cr_assert(strstr(nf_error(), "<|nope|>") != NULL);
    nf_tokens_free(&ids);
    nf_tokenizer_free(t);
}

Test(tokenizer, invalid_utf8_bytes_roundtrip) {
    nf_tokenizer *t = make(NULL, 0, NULL, 0, "glm4");
    const char s[] = "ok \xff\xfe \xc3 \xe2\x82 \xed\xa0\x80 \xc0\xaf end";
    nf_tokens ids = {0};
    cr_assert_eq(nf_tokenize_text(t, s, sizeof s - 1, &ids), 0);
    cr_assert_eq(ids.n, sizeof s - 1); /* byte vocabulary only: one id per byte */
    char *back;
    size_t n;
    cr_assert_eq(nf_detokenize(t, ids.ids, ids.n, &back, &n), 0);
    cr_assert_eq(n, sizeof s - 1);
    cr_assert(memcmp(back, s, n) == 0);
    free(back);
    int32_t oob = 99999;
    cr_assert_eq(nf_detokenize(t, &oob, 1, &back, &n), -1);
    nf_tokens_free(&ids);
    nf_tokenizer_free(t);
}

Test(tokenizer, build_errors) {
    const char *m1[] = {"a b"};
    cr_assert_null(make(NULL, 0, m1, 1, "glm4")); /* result "ab" missing */
    cr_assert(strstr(nf_error(), "missing") != NULL, "%s", nf_error());
    const char *m2[] = {"ab"};
    cr_assert_null(make(NULL, 0, m2, 1, "glm4"));
    cr_assert(strstr(nf_error(), "'A B'") != NULL, "%s", nf_error());
    cr_assert_null(make(NULL, 0, NULL, 0, "qwen2"));
    cr_assert(strstr(nf_error(), "pre-tokenizer") != NULL);
    const char *toks[] = {"a"};
    nf_tokenizer_desc d = {.pre = "glm4", .n_vocab = 1, .tokens = toks};
    cr_assert_null(nf_tokenizer_build(&d));
    cr_assert(strstr(nf_error(), "byte 0x00") != NULL, "%s", nf_error());
}

Test(tokenizer, gguf_meta_roundtrip_and_rejects) {
    char path[] = "/tmp/nf-test-tok-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    gguf_writer *w = gguf_writer_create(path);
    cr_assert_not_null(w);
    cr_assert_eq(nf_tokenizer_write_gguf_meta("models/tiny", w), 0, "%s", nf_error());
    cr_assert_eq(gguf_writer_begin_data(w), 0);
    cr_assert_eq(gguf_writer_finish(w), 0, "%s", nf_error());
    nf_tokenizer *a = nf_tokenizer_load(path), *b = nf_tokenizer_load("models/tiny/tokenizer.json");
    cr_assert_not_null(a, "%s", nf_error());
    cr_assert_not_null(b, "%s", nf_error());
    const char *text = "GLM-5.3 tokenizer: it's 2026, 你好 🌍\n\n\tdone";
    nf_tokens x = {0}, y = {0};
    nf_tokenize_text(a, text, strlen(text), &x);
    nf_tokenize_text(b, text, strlen(text), &y);
    cr_assert_eq(x.n, y.n);
    cr_assert(memcmp(x.ids, y.ids, x.n * sizeof *x.ids) == 0);
    cr_assert_eq(nf_token_id(a, "<|user|>"), nf_token_id(b, "<|user|>"));
    cr_assert_eq(nf_tokenizer_special_ids(a).eos, nf_token_id(b, "<|endoftext|>"));
    cr_assert_eq(nf_tokenizer_special_ids(a).eot, nf_token_id(b, "<|user|>"));
    cr_assert_eq(nf_tokenizer_special_ids(a).eom, nf_token_id(b, "<|observation|>"));
    nf_tokens_free(&x);
    nf_tokens_free(&y);
    nf_tokenizer_free(a);
    nf_tokenizer_free(b);

    w = gguf_writer_create(path); /* not byte-level BPE */
    gguf_set_str(w, "tokenizer.ggml.model", "llama");
    cr_assert_eq(gguf_writer_begin_data(w), 0);
    cr_assert_eq(gguf_writer_finish(w), 0);
    cr_assert_null(nf_tokenizer_load(path));
    cr_assert(strstr(nf_error(), "llama") != NULL, "%s", nf_error());
    w = gguf_writer_create(path); /* no tokens */
    gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
    cr_assert_eq(gguf_writer_begin_data(w), 0);
    cr_assert_eq(gguf_writer_finish(w), 0);
    cr_assert_null(nf_tokenizer_load(path));
    cr_assert(strstr(nf_error(), "tokens") != NULL, "%s", nf_error());
    unlink(path);
    cr_assert_eq(nf_tokenizer_write_gguf_meta("/nonexistent-dir", NULL), -1);
    cr_assert(strstr(nf_error(), "/nonexistent-dir") != NULL, "%s", nf_error());
}

/* tokenizer.json variants GLM does not use are refused, each with a message saying what */
static const char *write_json(const char *dir, const char *body) {
    static char path[256];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(body, f);
    fclose(f);
    return path;
}

Test(tokenizer, hf_reader_refuses_what_glm_does_not_use) {
    char dir[] = "/tmp/nf-test-hf-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    const char *pre_ok = "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":"
                         "{\"Regex\":\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?"
                         "[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\","
                         "\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]}";
    char buf[4096];
    struct { const char *model, *pre, *norm, *want; } cases[] = {
        {"{\"type\":\"WordPiece\",\"vocab\":{}}", pre_ok, "null", "WordPiece"},
        {"{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[],\"byte_fallback\":true}", pre_ok, "null", "byte_fallback"},
        {"{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}", pre_ok, "{\"type\":\"NFC\"}", "normalizer"},
        {"{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}", "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"use_regex\":true}",
         "null", "pre_tokenizer"},
        {"{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}",
         "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\s+\"},"
         "\"behavior\":\"Isolated\"},{\"type\":\"ByteLevel\"}]}", "null", "regex"},
        {"{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}", pre_ok, "null", "byte 0x00"}, /* loads, then no byte tokens */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(buf, sizeof buf, "{\"model\":%s,%s,\"normalizer\":%s,\"added_tokens\":[]}", cases[i].model, cases[i].pre,
                 cases[i].norm);
        write_json(dir, buf);
        cr_assert_null(nf_tokenizer_load_hf(dir), "case %zu loaded", i);
        cr_assert(strstr(nf_error(), cases[i].want) != NULL, "case %zu: '%s' lacks '%s'", i, nf_error(), cases[i].want);
    }
    write_json(dir, "{\"model\": [");
    cr_assert_null(nf_tokenizer_load_hf(dir));
    cr_assert(strstr(nf_error(), "tokenizer.json") != NULL);
    char path[300];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    unlink(path);
    rmdir(dir);
}
