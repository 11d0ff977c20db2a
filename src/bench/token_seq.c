/* token_seq.c — where nf-bench's token sequence comes from: a text file, an ids file or a seed (token_seq.h). */
#include "bench/token_seq.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        nf_fail("%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = nf_xmalloc(cap + 1);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) buf = nf_xrealloc(buf, (cap *= 2) + 1);
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        nf_fail("%s: read error", path);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

static int check_range(const char *path, const nf_token_seq *s, int32_t n_vocab) {
    for (int64_t i = 0; i < s->n; i++)
        if (s->ids[i] < 0 || s->ids[i] >= n_vocab)
            return nf_fail("%s: token id %d at position %lld is outside the model's vocabulary [0, %d)", path,
                           (int)s->ids[i], (long long)i, (int)n_vocab);
    return 0;
}

int nf_token_seq_text(const nf_tokenizer *tok, const char *path, int32_t n_vocab, nf_token_seq *out) {
    out->ids = NULL;
    out->n = 0;
    size_t len;
    char *text = read_file(path, &len);
    if (!text) return -1;
    nf_tokens t = {0};
    int r = nf_tokenize_text(tok, text, len, &t);
    free(text);
    if (r < 0) {
        nf_tokens_free(&t);
        return nf_fail_prefix("%s", path);
    }
    out->ids = t.ids;
    out->n = (int64_t)t.n;
    if (check_range(path, out, n_vocab) < 0) {
        nf_token_seq_free(out);
        return -1;
    }
    return 0;
}

int nf_token_seq_ids(const char *path, int32_t n_vocab, nf_token_seq *out) {
    out->ids = NULL;
    out->n = 0;
    size_t len;
    char *text = read_file(path, &len);
    if (!text) return -1;
    nf_tokens t = {0};
    const char *p = text;
    for (;;) {
        while (isspace((unsigned char)*p)) p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && !isspace((unsigned char)*end))) {
            nf_fail("%s: item %zu is not a token id", path, t.n + 1);
            nf_tokens_free(&t);
            free(text);
            return -1;
        }
        nf_tokens_push(&t, (int32_t)v);
        p = end;
    }
    free(text);
    out->ids = t.ids;
    out->n = (int64_t)t.n;
    if (check_range(path, out, n_vocab) < 0) {
        nf_token_seq_free(out);
        return -1;
    }
    return 0;
}

static uint64_t splitmix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void nf_token_seq_synthetic(uint64_t seed, int32_t n_vocab, int32_t eos, int64_t n, nf_token_seq *out) {
    out->ids = nf_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *out->ids);
    out->n = n;
    for (int64_t i = 0; i < n; i++) {
        int32_t id = (int32_t)(splitmix64(seed + (uint64_t)i * 0x9e3779b97f4a7c15ull) % (uint64_t)n_vocab);
        if (id == eos) id = (id + 1) % n_vocab;
        out->ids[i] = id;
    }
}

void nf_token_seq_free(nf_token_seq *s) {
    free(s->ids);
    s->ids = NULL;
    s->n = 0;
}
