/* tokenizer.c — byte-level BPE with the GLM pre-tokenizer (see tokenizer.h for the contract).
 *
 * Data structures: every id keeps the bytes it decodes to; two open-addressing hash maps find an id from
 * bytes (normal tokens for BPE, added/special tokens by content); a third maps an adjacent id pair to its
 * merge rank and result. A word is merged with a binary heap of candidate pairs (rank, position) and a
 * doubly linked list of live symbols, O(n log n) per word; stale heap entries are skipped when popped. */
#include "text/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/error.h"

/* The split regex of GLM-4 / GLM-4.5 / GLM-5 tokenizer.json (a Split pre-tokenizer, behaviour Isolated,
 * followed by ByteLevel with use_regex false); llama.cpp calls this pre-tokenizer "glm4"/"chatglm-bpe":
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * The library runs it with Oniguruma, whose \s is Unicode White_Space. PCRE2's \s (UCP) is the same set plus
 * U+180E MONGOLIAN VOWEL SEPARATOR (its \h keeps it), so \s is spelled out as White_Space below; an
 * exhaustive check over every code point (scripts/check_pretokenizer_unicode.py) found no other difference
 * for \p{L}, \p{N} and \s. */
#define WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
static const char GLM4_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|"
    "[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+";
/* The regex as written in tokenizer.json (what hf_tokenizer.c accepts). */
static const char GLM4_REGEX_HF[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const char *nf_pretokenizer_hf_regex(const char *pre) {
    if (!pre) return NULL;
    if (!strcmp(pre, "glm4") || !strcmp(pre, "chatglm-bpe") || !strcmp(pre, "llama-bpe")) return GLM4_REGEX_HF;
    return NULL;
}

const char *nf_pretokenizer_regex(const char *pre) {
    if (!pre) return NULL;
    if (!strcmp(pre, "glm4") || !strcmp(pre, "chatglm-bpe") || !strcmp(pre, "llama-bpe")) return GLM4_REGEX;
    return NULL;
}

/* ---- small helpers ---------------------------------------------------------------------------------- */

void nf_tokens_push(nf_tokens *t, int32_t id) {
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 64;
        t->ids = nf_xrealloc(t->ids, t->cap * sizeof *t->ids);
    }
    t->ids[t->n++] = id;
}

void nf_tokens_free(nf_tokens *t) {
    free(t->ids);
    t->ids = NULL;
    t->n = t->cap = 0;
}

static uint64_t hash_bytes(const char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

/* Byte-level alphabet (GPT-2): printable bytes map to themselves, the rest to U+0100 + n in byte order. */
static void byte_alphabet(uint32_t byte_to_cp[256], int16_t cp_to_byte[324]) {
    int n = 0;
    for (int i = 0; i < 324; i++) cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        byte_to_cp[b] = keep ? (uint32_t)b : (uint32_t)(256 + n++);
        cp_to_byte[byte_to_cp[b]] = (int16_t)b;
    }
}

/* Decode one UTF-8 sequence at p (n bytes left). Returns its length (1-4) and the code point, or 0 if the
 * bytes at p do not start a valid sequence (overlong, surrogate, > U+10FFFF, truncated). */
static int utf8_decode(const uint8_t *p, size_t n, uint32_t *cp) {
    uint8_t c = p[0];
    if (c < 0x80) { *cp = c; return 1; }
    int len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; v = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; v = c & 0x07; min = 0x10000; }
    else return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (p[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

/* ---- the tokenizer ---------------------------------------------------------------------------------- */

typedef struct {
    int32_t *slot;     /* id, or -1 for empty */
    size_t mask;
} strmap;

typedef struct {
    uint64_t *key;     /* (left << 32) | right, UINT64_MAX for empty */
    uint32_t *rank;
    int32_t *result;
    size_t mask;
} pairmap;

struct nf_tokenizer {
    char pre[32];
    int32_t n_vocab;
    char **bytes;          /* decoded bytes of each id (NUL-terminated copies) */
    uint32_t *len;
    uint8_t *type;
    strmap normal;         /* BPE vocabulary: bytes -> id, normal tokens only */
    strmap added;          /* control / user-defined / unused tokens: content -> id */
    pairmap merges;
    int32_t byte_id[256];  /* id of the single-byte token for each byte */
    bool ignore_merges;
    nf_special_ids special;
    pcre2_code *re;
    int32_t *specials;         /* control and user-defined ids (for nf_tokenize_with_specials) */
    size_t n_specials;
    bool special_first[256];   /* first bytes of those tokens */
};

static void strmap_init(strmap *m, size_t n) {
    size_t cap = pow2_at_least(n * 2 + 1);
    m->slot = nf_xmalloc(cap * sizeof *m->slot);
    for (size_t i = 0; i < cap; i++) m->slot[i] = -1;
    m->mask = cap - 1;
}

static int32_t strmap_get(const nf_tokenizer *t, const strmap *m, const char *p, size_t n) {
    if (!m->slot) return -1;
    for (size_t i = hash_bytes(p, n) & m->mask;; i = (i + 1) & m->mask) {
        int32_t id = m->slot[i];
        if (id < 0) return -1;
        if (t->len[id] == n && memcmp(t->bytes[id], p, n) == 0) return id;
    }
}

/* Insert id (keyed by its bytes); the first id inserted for some bytes wins. */
static void strmap_put(const nf_tokenizer *t, strmap *m, int32_t id) {
    for (size_t i = hash_bytes(t->bytes[id], t->len[id]) & m->mask;; i = (i + 1) & m->mask) {
        int32_t o = m->slot[i];
        if (o < 0) { m->slot[i] = id; return; }
        if (t->len[o] == t->len[id] && memcmp(t->bytes[o], t->bytes[id], t->len[id]) == 0) return;
    }
}

static void pairmap_init(pairmap *m, size_t n) {
    size_t cap = pow2_at_least(n * 2 + 1);
    m->key = nf_xmalloc(cap * sizeof *m->key);
    m->rank = nf_xmalloc(cap * sizeof *m->rank);
    m->result = nf_xmalloc(cap * sizeof *m->result);
    for (size_t i = 0; i < cap; i++) m->key[i] = UINT64_MAX;
    m->mask = cap - 1;
}

static inline uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

static bool pairmap_get(const pairmap *m, int32_t a, int32_t b, uint32_t *rank, int32_t *result) {
    uint64_t k = pair_key(a, b);
    for (size_t i = hash_u64(k) & m->mask;; i = (i + 1) & m->mask) {
        if (m->key[i] == UINT64_MAX) return false;
        if (m->key[i] == k) { *rank = m->rank[i]; *result = m->result[i]; return true; }
    }
}

/* First (lowest-rank) merge of a pair wins, as in the library. */
static void pairmap_put(pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t result) {
    uint64_t k = pair_key(a, b);
    for (size_t i = hash_u64(k) & m->mask;; i = (i + 1) & m->mask) {
        if (m->key[i] == k) return;
        if (m->key[i] == UINT64_MAX) { m->key[i] = k; m->rank[i] = rank; m->result[i] = result; return; }
    }
}

void nf_tokenizer_free(nf_tokenizer *t) {
    if (!t) return;
    if (t->bytes)
        for (int32_t i = 0; i < t->n_vocab; i++) free(t->bytes[i]);
    free(t->bytes);
    free(t->len);
    free(t->type);
    free(t->normal.slot);
    free(t->added.slot);
    free(t->merges.key);
    free(t->merges.rank);
    free(t->merges.result);
    free(t->specials);
    if (t->re) pcre2_code_free(t->re);
    free(t);
}

static bool is_added_type(int type) {
    return type == NF_TOKTYPE_CONTROL || type == NF_TOKTYPE_USER_DEFINED || type == NF_TOKTYPE_UNUSED ||
           type == NF_TOKTYPE_UNKNOWN;
}

/* Turn a GGUF string of the byte-level alphabet back into bytes. Returns false if some character is not
 * in the alphabet (the caller then keeps the literal text). */
static bool alphabet_to_bytes(const int16_t cp_to_byte[324], const char *s, size_t n, char *out, uint32_t *out_len) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = utf8_decode((const uint8_t *)s + i, n - i, &cp);
        if (l == 0 || cp >= 324 || cp_to_byte[cp] < 0) return false;
        out[o++] = (char)cp_to_byte[cp];
        i += (size_t)l;
    }
    *out_len = (uint32_t)o;
    return true;
}

nf_tokenizer *nf_tokenizer_build(const nf_tokenizer_desc *d) {
    const char *rx = nf_pretokenizer_regex(d->pre);
    if (!rx) {
        nf_fail("unsupported pre-tokenizer '%s' (supported: glm4)", d->pre ? d->pre : "(none)");
        return NULL;
    }
    if (d->n_vocab == 0 || d->n_vocab > (1u << 30)) {
        nf_fail("bad vocabulary size %u", d->n_vocab);
        return NULL;
    }
    nf_tokenizer *t = nf_xcalloc(1, sizeof *t);
    snprintf(t->pre, sizeof t->pre, "%s", d->pre);
    t->n_vocab = (int32_t)d->n_vocab;
    t->ignore_merges = d->ignore_merges;
    t->special = d->special;
    t->bytes = nf_xcalloc(d->n_vocab, sizeof *t->bytes);
    t->len = nf_xcalloc(d->n_vocab, sizeof *t->len);
    t->type = nf_xcalloc(d->n_vocab, sizeof *t->type);

    uint32_t byte_to_cp[256];
    int16_t cp_to_byte[324];
    byte_alphabet(byte_to_cp, cp_to_byte);

    for (uint32_t i = 0; i < d->n_vocab; i++) {
        const char *s = d->tokens[i] ? d->tokens[i] : "";
        size_t n = d->token_lens ? d->token_lens[i] : strlen(s);
        int type = d->types ? d->types[i] : NF_TOKTYPE_NORMAL;
        if (type < 1 || type > 6) type = NF_TOKTYPE_NORMAL;
        t->type[i] = (uint8_t)type;
        t->bytes[i] = nf_xmalloc(n + 1);
        if (is_added_type(type) || !alphabet_to_bytes(cp_to_byte, s, n, t->bytes[i], &t->len[i])) {
            memcpy(t->bytes[i], s, n);
            t->len[i] = (uint32_t)n;
        }
        t->bytes[i][t->len[i]] = 0;
    }

    strmap_init(&t->normal, d->n_vocab);
    strmap_init(&t->added, 64);
    size_t n_added = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (is_added_type(t->type[i])) n_added++;
    }
    free(t->added.slot);
    strmap_init(&t->added, n_added);
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (is_added_type(t->type[i])) strmap_put(t, &t->added, i);
        else if (t->len[i] > 0) strmap_put(t, &t->normal, i);
    }
    t->specials = nf_xmalloc((n_added ? n_added : 1) * sizeof *t->specials);
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if ((t->type[i] == NF_TOKTYPE_CONTROL || t->type[i] == NF_TOKTYPE_USER_DEFINED) && t->len[i] > 0) {
            t->specials[t->n_specials++] = i;
            t->special_first[(uint8_t)t->bytes[i][0]] = true;
        }
    }
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        t->byte_id[b] = strmap_get(t, &t->normal, &c, 1);
        if (t->byte_id[b] < 0) {
            nf_fail("vocabulary has no token for byte 0x%02x (not a byte-level BPE vocabulary)", b);
            nf_tokenizer_free(t);
            return NULL;
        }
    }

    pairmap_init(&t->merges, d->n_merges);
    char *buf = NULL;
    size_t bufcap = 0;
    for (uint32_t r = 0; r < d->n_merges; r++) {
        const char *m = d->merges[r] ? d->merges[r] : "";
        size_t n = d->merge_lens ? d->merge_lens[r] : strlen(m);
        const char *sp = memchr(m, ' ', n);
        if (!sp || sp == m || sp == m + n - 1) {
            nf_fail("merge %u is not 'A B': '%.*s'", r, (int)(n > 60 ? 60 : n), m);
            free(buf);
            nf_tokenizer_free(t);
            return NULL;
        }
        if (n + 1 > bufcap) { bufcap = 2 * n + 16; buf = nf_xrealloc(buf, bufcap); }
        uint32_t la, lb;
        char *a = buf, *b;
        if (!alphabet_to_bytes(cp_to_byte, m, (size_t)(sp - m), a, &la) ||
            !alphabet_to_bytes(cp_to_byte, sp + 1, n - (size_t)(sp - m) - 1, (b = a + la), &lb)) {
            nf_fail("merge %u has characters outside the byte-level alphabet", r);
            free(buf);
            nf_tokenizer_free(t);
            return NULL;
        }
        int32_t ia = strmap_get(t, &t->normal, a, la), ib = strmap_get(t, &t->normal, b, lb);
        int32_t ic = strmap_get(t, &t->normal, a, la + lb);  /* a and b are contiguous in buf */
        if (ia < 0 || ib < 0 || ic < 0) {
            nf_fail("merge %u ('%.*s') refers to a token missing from the vocabulary", r, (int)(n > 60 ? 60 : n), m);
            free(buf);
            nf_tokenizer_free(t);
            return NULL;
        }
        pairmap_put(&t->merges, ia, ib, r, ic);
    }
    free(buf);

    int err;
    PCRE2_SIZE erroff;
    t->re = pcre2_compile((PCRE2_SPTR)rx, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &erroff, NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        nf_fail("pre-tokenizer regex: %s at %zu", (const char *)msg, (size_t)erroff);
        nf_tokenizer_free(t);
        return NULL;
    }
    pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE); /* optional: interpretation is the fallback */
    return t;
}

int32_t nf_tokenizer_n_vocab(const nf_tokenizer *t) { return t->n_vocab; }
const char *nf_tokenizer_pre(const nf_tokenizer *t) { return t->pre; }
nf_special_ids nf_tokenizer_special_ids(const nf_tokenizer *t) { return t->special; }

int32_t nf_token_id_n(const nf_tokenizer *t, const char *text, size_t len) {
    int32_t id = strmap_get(t, &t->added, text, len);
    return id >= 0 ? id : strmap_get(t, &t->normal, text, len);
}

int32_t nf_token_id(const nf_tokenizer *t, const char *text) { return nf_token_id_n(t, text, strlen(text)); }

const char *nf_token_bytes(const nf_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) { *len = 0; return NULL; }
    *len = t->len[id];
    return t->bytes[id];
}

int nf_token_type(const nf_tokenizer *t, int32_t id) {
    return (id < 0 || id >= t->n_vocab) ? 0 : t->type[id];
}

bool nf_token_is_special(const nf_tokenizer *t, int32_t id) {
    int ty = nf_token_type(t, id);
    return ty == NF_TOKTYPE_CONTROL || ty == NF_TOKTYPE_USER_DEFINED;
}

int nf_detokenize(const nf_tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *len) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab) {
            *out = NULL;
            *len = 0;
            return nf_fail("token id %d out of range [0, %d)", ids[i], t->n_vocab);
        }
        total += t->len[ids[i]];
    }
    char *s = nf_xmalloc(total + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(s + o, t->bytes[ids[i]], t->len[ids[i]]);
        o += t->len[ids[i]];
    }
    s[o] = 0;
    *out = s;
    *len = o;
    return 0;
}

/* ---- BPE of one word -------------------------------------------------------------------------------- */

typedef struct { int32_t id, prev, next; } sym;
typedef struct { uint32_t rank; int32_t pos, left, right; } cand;

typedef struct {
    sym *s;
    cand *h;
    size_t s_cap, h_cap, h_n;
} scratch;

static inline bool cand_less(const cand *a, const cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(scratch *w, cand c) {
    if (w->h_n == w->h_cap) {
        w->h_cap = w->h_cap ? w->h_cap * 2 : 256;
        w->h = nf_xrealloc(w->h, w->h_cap * sizeof *w->h);
    }
    size_t i = w->h_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &w->h[p])) break;
        w->h[i] = w->h[p];
        i = p;
    }
    w->h[i] = c;
}

static cand heap_pop(scratch *w) {
    cand top = w->h[0], last = w->h[--w->h_n];
    size_t i = 0, n = w->h_n;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const cand *best = &last;
        if (l < n && cand_less(&w->h[l], best)) { m = l; best = &w->h[l]; }
        if (r < n && cand_less(&w->h[r], best)) { m = r; }
        if (m == i) break;
        w->h[i] = w->h[m];
        i = m;
    }
    if (n > 0) w->h[i] = last;
    return top;
}

static void try_pair(const nf_tokenizer *t, scratch *w, int32_t pos) {
    int32_t nx = w->s[pos].next;
    if (nx < 0) return;
    uint32_t rank;
    int32_t res;
    if (pairmap_get(&t->merges, w->s[pos].id, w->s[nx].id, &rank, &res))
        heap_push(w, (cand){rank, pos, w->s[pos].id, w->s[nx].id});
}

static void bpe_word(const nf_tokenizer *t, scratch *w, const uint8_t *p, size_t n, nf_tokens *out) {
    if (n == 1) { nf_tokens_push(out, t->byte_id[p[0]]); return; }
    if (t->ignore_merges) {
        int32_t id = strmap_get(t, &t->normal, (const char *)p, n);
        if (id >= 0) { nf_tokens_push(out, id); return; }
    }
    if (n > w->s_cap) {
        w->s_cap = n * 2;
        w->s = nf_xrealloc(w->s, w->s_cap * sizeof *w->s);
    }
    for (size_t i = 0; i < n; i++)
        w->s[i] = (sym){t->byte_id[p[i]], (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1};
    w->h_n = 0;
    for (size_t i = 0; i + 1 < n; i++) try_pair(t, w, (int32_t)i);
    while (w->h_n > 0) {
        cand c = heap_pop(w);
        sym *a = &w->s[c.pos];
        if (a->id != c.left || a->next < 0 || w->s[a->next].id != c.right) continue; /* stale */
        uint32_t rank;
        int32_t res;
        pairmap_get(&t->merges, c.left, c.right, &rank, &res);
        sym *b = &w->s[a->next];
        a->id = res;
        a->next = b->next;
        if (b->next >= 0) w->s[b->next].prev = c.pos;
        b->id = -1;
        if (a->prev >= 0) try_pair(t, w, a->prev);
        try_pair(t, w, c.pos);
    }
    for (int32_t i = 0; i >= 0; i = w->s[i].next) nf_tokens_push(out, w->s[i].id);
}

/* Pre-tokenize one valid UTF-8 run and BPE each word. */
static int encode_run(const nf_tokenizer *t, scratch *w, pcre2_match_data *md, const uint8_t *s, size_t n,
                      nf_tokens *out) {
    size_t off = 0;
    uint32_t opts = PCRE2_NO_UTF_CHECK;
    while (off < n) {
        int rc = pcre2_match(t->re, s, n, off, opts, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !(opts & PCRE2_NO_JIT)) {
            opts |= PCRE2_NO_JIT;
            continue;
        }
        if (rc == PCRE2_ERROR_NOMATCH) {
            bpe_word(t, w, s + off, n - off, out);
            break;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return nf_fail("pre-tokenizer: %s", (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t a = ov[0], b = ov[1];
        if (a > off) bpe_word(t, w, s + off, a - off, out);
        if (b <= a) { /* empty match (impossible with our regex): take one character as a word */
            uint32_t cp;
            int l = utf8_decode(s + a, n - a, &cp);
            b = a + (size_t)(l > 0 ? l : 1);
        }
        bpe_word(t, w, s + a, b - a, out);
        off = b;
    }
    return 0;
}

int nf_tokenize_text(const nf_tokenizer *t, const char *text, size_t len, nf_tokens *out) {
    const uint8_t *s = (const uint8_t *)text;
    scratch w = {0};
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(t->re, NULL);
    if (!md) return nf_fail("out of memory (regex match data)");
    int rc = 0;
    size_t i = 0;
    while (i < len && rc == 0) {
        size_t j = i;
        uint32_t cp;
        int l;
        while (j < len && (l = utf8_decode(s + j, len - j, &cp)) > 0) j += (size_t)l;
        if (j > i) rc = encode_run(t, &w, md, s + i, j - i, out);
        if (j < len && rc == 0) { /* one invalid byte: a word of its own */
            nf_tokens_push(out, t->byte_id[s[j]]);
            j++;
        }
        i = j;
    }
    pcre2_match_data_free(md);
    free(w.s);
    free(w.h);
    return rc;
}

int nf_tokenize_with_specials(const nf_tokenizer *t, const char *text, size_t len, nf_tokens *out) {
    size_t start = 0, i = 0;
    while (i < len) {
        int32_t best = -1;
        size_t best_len = 0;
        if (t->special_first[(uint8_t)text[i]]) {
            for (size_t k = 0; k < t->n_specials; k++) {
                int32_t id = t->specials[k];
                size_t l = t->len[id];
                if (l > best_len && l <= len - i && memcmp(t->bytes[id], text + i, l) == 0) {
                    best = id;
                    best_len = l;
                }
            }
        }
        if (best < 0) {
            i++;
            continue;
        }
        if (i > start && nf_tokenize_text(t, text + start, i - start, out) < 0) return -1;
        nf_tokens_push(out, best);
        i += best_len;
        start = i;
    }
    if (len > start && nf_tokenize_text(t, text + start, len - start, out) < 0) return -1;
    return 0;
}

int nf_tokenize_pieces(const nf_tokenizer *t, size_t n_pieces, const char *const *pieces, const size_t *lens,
                       const bool *special, nf_tokens *out) {
    for (size_t i = 0; i < n_pieces; i++) {
        if (special[i]) {
            int32_t id = strmap_get(t, &t->added, pieces[i], lens[i]);
            if (id < 0) return nf_fail("special token '%.*s' is not in the vocabulary", (int)lens[i], pieces[i]);
            nf_tokens_push(out, id);
        } else if (nf_tokenize_text(t, pieces[i], lens[i], out) < 0) {
            return -1;
        }
    }
    return 0;
}

/* ---- GGUF loader ------------------------------------------------------------------------------------ */

static int32_t opt_id(const gguf_file *f, const char *key) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv || kv->type == GGUF_TYPE_ARRAY) return -1;
    uint32_t v;
    if (gguf_get_u32(f, key, &v) < 0) { nf_clear_error(); return -1; }
    return (int32_t)v;
}

nf_tokenizer *nf_tokenizer_from_gguf(const gguf_file *f) {
    char model[64], pre[64] = "glm4";
    if (gguf_get_str(f, "tokenizer.ggml.model", model, sizeof model) < 0) return NULL;
    if (strcmp(model, "gpt2") != 0) {
        nf_fail("tokenizer.ggml.model is '%s', only 'gpt2' (byte-level BPE) is supported", model);
        return NULL;
    }
    if (gguf_find(f, "tokenizer.ggml.pre") && gguf_get_str(f, "tokenizer.ggml.pre", pre, sizeof pre) < 0)
        return NULL;
    const gguf_kv *tk = gguf_find(f, "tokenizer.ggml.tokens");
    const gguf_kv *mk = gguf_find(f, "tokenizer.ggml.merges");
    const gguf_kv *ty = gguf_find(f, "tokenizer.ggml.token_type");
    if (!tk || tk->type != GGUF_TYPE_ARRAY || tk->elem_type != GGUF_TYPE_STRING) {
        nf_fail("tokenizer.ggml.tokens missing or not a string array");
        return NULL;
    }
    if (!mk || mk->type != GGUF_TYPE_ARRAY || mk->elem_type != GGUF_TYPE_STRING) {
        nf_fail("tokenizer.ggml.merges missing or not a string array");
        return NULL;
    }
    if (ty && (ty->type != GGUF_TYPE_ARRAY || ty->count != tk->count)) {
        nf_fail("tokenizer.ggml.token_type has %llu entries for %llu tokens", (unsigned long long)ty->count,
                (unsigned long long)tk->count);
        return NULL;
    }
    if (tk->count == 0 || tk->count > (1u << 30) || mk->count > (1u << 30)) {
        nf_fail("tokenizer.ggml.tokens/merges: bad count");
        return NULL;
    }
    uint32_t nv = (uint32_t)tk->count, nm = (uint32_t)mk->count;
    const char **toks = nf_xmalloc(nv * sizeof *toks);
    uint32_t *tlens = nf_xmalloc(nv * sizeof *tlens);
    int32_t *types = nf_xmalloc(nv * sizeof *types);
    const char **merges = nf_xmalloc((nm ? nm : 1) * sizeof *merges);
    uint32_t *mlens = nf_xmalloc((nm ? nm : 1) * sizeof *mlens);
    for (uint32_t i = 0; i < nv; i++) {
        gguf_str s = gguf_arr_str(tk, i);
        toks[i] = s.ptr;
        tlens[i] = (uint32_t)s.len;
        types[i] = ty ? (int32_t)gguf_arr_i64(ty, i) : NF_TOKTYPE_NORMAL;
    }
    for (uint32_t i = 0; i < nm; i++) {
        gguf_str s = gguf_arr_str(mk, i);
        merges[i] = s.ptr;
        mlens[i] = (uint32_t)s.len;
    }
    bool ign = false;
    if (gguf_find(f, "tokenizer.ggml.ignore_merges") && gguf_get_bool(f, "tokenizer.ggml.ignore_merges", &ign) < 0)
        nf_clear_error();
    nf_tokenizer_desc d = {
        .pre = pre, .n_vocab = nv, .tokens = toks, .token_lens = tlens, .types = types,
        .n_merges = nm, .merges = merges, .merge_lens = mlens, .ignore_merges = ign,
        .special = {opt_id(f, "tokenizer.ggml.bos_token_id"), opt_id(f, "tokenizer.ggml.eos_token_id"),
                    opt_id(f, "tokenizer.ggml.padding_token_id"), opt_id(f, "tokenizer.ggml.eot_token_id"),
                    opt_id(f, "tokenizer.ggml.eom_token_id"), opt_id(f, "tokenizer.ggml.unknown_token_id")},
    };
    nf_tokenizer *t = nf_tokenizer_build(&d);
    free(toks);
    free(tlens);
    free(types);
    free(merges);
    free(mlens);
    return t;
}

nf_tokenizer *nf_tokenizer_load(const char *path) {
    struct stat st;
    size_t n = strlen(path);
    if ((stat(path, &st) == 0 && S_ISDIR(st.st_mode)) || (n >= 5 && !strcmp(path + n - 5, ".json")))
        return nf_tokenizer_load_hf(path);
    gguf_file *f = gguf_open(path);
    if (!f) return NULL;
    nf_tokenizer *t = nf_tokenizer_from_gguf(f);
    if (!t && strncmp(nf_error(), path, strlen(path)) != 0) nf_fail_prefix("%s", path);
    gguf_close(f);
    return t;
}
