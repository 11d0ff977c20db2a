/* test_session.c — the engine session (src/engine/session.h) on a synthetic tiny model (F32) with the GLM
 * fixture tokenizer (tests/data/convert/bf16/tokenizer.json: the GLM special tokens at small ids):
 * prefix reuse (extension, divergence rolled back to a checkpoint, a strict prefix) gives bit-identical logits
 * to a fresh prefill of the whole prompt and prefills only what it must; greedy generation is deterministic;
 * a cancel flag stops within one token and leaves a state from which generation continues exactly like an
 * uninterrupted run; stop tokens are resolved by name; UTF-8 pieces are assembled across tokens. */
#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/session.h"
#include "model/recipe.h"
#include "model/synth.h"
#include "util/error.h"

#define TOKENIZER "tests/data/convert/bf16/tokenizer.json"

static char path[128];
static int32_t toks[64];

static void setup(void) {
    nf_hparams hp;
    cr_assert_eq(nf_synth_preset("tiny", &hp), 0);
    hp.n_nextn = 0;
    hp.n_vocab = 312; /* the fixture tokenizer's ids: 300 byte-level/merged + 12 GLM specials */
    nf_synth_derive(&hp, 0);
    snprintf(path, sizeof path, "/tmp/nf-test-session-%d.gguf", (int)getpid());
    cr_assert_eq(nf_synth_write(path, &hp, nf_recipe_find("f32"), 11, NULL, NULL, NULL), 0, "%s", nf_error());
    uint64_t s = 5;
    for (int i = 0; i < 64; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((s >> 33) % 300); /* ordinary tokens (specials are >= 300) */
    }
}

static void teardown(void) { unlink(path); }

static nf_session *open_s(int chunk) {
    nf_session_opts o = nf_session_opts_default();
    o.n_threads = 2;
    o.prefill_chunk = chunk;
    o.tokenizer = TOKENIZER;
    o.sampler.temperature = 0; /* greedy */
    nf_session *s = nf_session_create(path, &o);
    cr_assert_not_null(s, "%s", nf_error());
    return s;
}

static void assert_logits_eq(nf_session *a, nf_session *b) {
    const float *la = nf_session_logits(a), *lb = nf_session_logits(b);
    cr_assert_not_null(la);
    cr_assert_not_null(lb);
    int V = nf_session_model(a)->hp.n_vocab;
    cr_assert(!memcmp(la, lb, (size_t)V * sizeof(float)), "logits differ");
    size_t na, nb;
    const int32_t *ta = nf_session_tokens(a, &na), *tb = nf_session_tokens(b, &nb);
    cr_assert_eq(na, nb);
    cr_assert(!memcmp(ta, tb, na * sizeof *ta));
}

/* The fresh reference: a new session that prefilled ids in one go. */
static nf_session *fresh(const int32_t *ids, size_t n) {
    nf_session *r = open_s(0);
    cr_assert_eq(nf_session_prefill(r, ids, n, NULL, 0, NULL, NULL), 0, "%s", nf_error());
    return r;
}

TestSuite(session, .init = setup, .fini = teardown, .timeout = 120);

Test(session, extension_prefills_only_the_suffix) {
    nf_session *s = open_s(5);
    nf_prefill_stats st;
    cr_assert_eq(nf_session_set_prompt(s, toks, 20, NULL, 0, NULL, &st), 0, "%s", nf_error());
    cr_assert_eq(st.reused, 0);
    cr_assert_eq(st.prefilled, 20);
    cr_assert_eq(nf_session_set_prompt(s, toks, 33, NULL, 0, NULL, &st), 0, "%s", nf_error());
    cr_assert_eq(st.reused, 20);
    cr_assert_eq(st.prefilled, 13);
    nf_session *r = fresh(toks, 33);
    assert_logits_eq(s, r);
    /* the same prompt again: nothing to do */
    cr_assert_eq(nf_session_set_prompt(s, toks, 33, NULL, 0, NULL, &st), 0);
    cr_assert_eq(st.prefilled, 0);
    cr_assert_eq(st.reused, 33);
    assert_logits_eq(s, r);
    nf_session_free(r);
    nf_session_free(s);
}

Test(session, divergence_rolls_back_to_the_latest_checkpoint) {
    nf_session *s = open_s(7);
    int64_t marks[] = {10, 24};
    nf_prefill_stats st;
    cr_assert_eq(nf_session_set_prompt(s, toks, 40, marks, 2, NULL, &st), 0, "%s", nf_error());
    int64_t ck[8];
    int n = nf_session_checkpoints(s, ck, 8);
    cr_assert_eq(n, 3);
    cr_assert_eq(ck[0], 10);
    cr_assert_eq(ck[1], 24);
    cr_assert_eq(ck[2], 40);
    /* diverge at 30: back to the checkpoint at 24, prefill 24..45 */
    int32_t alt[45];
    memcpy(alt, toks, sizeof alt);
    alt[30] = (alt[30] + 1) % 300;
    cr_assert_eq(nf_session_set_prompt(s, alt, 45, NULL, 0, NULL, &st), 0, "%s", nf_error());
    cr_assert_eq(st.reused, 24);
    cr_assert_eq(st.prefilled, 21);
    n = nf_session_checkpoints(s, ck, 8);
    cr_assert_eq(n, 3); /* 10, 24 and the new end 45; the one at 40 belonged to the old history */
    cr_assert_eq(ck[2], 45);
    nf_session *r = fresh(alt, 45);
    assert_logits_eq(s, r);
    nf_session_free(r);
    /* diverge before any checkpoint: full reset */
    alt[3] = (alt[3] + 1) % 300;
    cr_assert_eq(nf_session_set_prompt(s, alt, 12, NULL, 0, NULL, &st), 0, "%s", nf_error());
    cr_assert_eq(st.reused, 0);
    cr_assert_eq(st.prefilled, 12);
    r = fresh(alt, 12);
    assert_logits_eq(s, r);
    nf_session_free(r);
    nf_session_free(s);
}

Test(session, strict_prefix_and_truncate) {
    nf_session *s = open_s(4);
    nf_prefill_stats st;
    cr_assert_eq(nf_session_set_prompt(s, toks, 16, NULL, 0, NULL, &st), 0);
    cr_assert_eq(nf_session_set_prompt(s, toks, 30, NULL, 0, NULL, &st), 0);
    /* back to exactly the checkpoint at 16: nothing recomputed, logits restored */
    cr_assert_eq(nf_session_set_prompt(s, toks, 16, NULL, 0, NULL, &st), 0);
    cr_assert_eq(st.prefilled, 0);
    nf_session *r = fresh(toks, 16);
    assert_logits_eq(s, r);
    nf_session_free(r);
    /* a prefix between checkpoints: from 16, prefill up to 22 */
    cr_assert_eq(nf_session_set_prompt(s, toks, 30, NULL, 0, NULL, &st), 0);
    cr_assert_eq(nf_session_truncate(s, 22), 0, "%s", nf_error());
    r = fresh(toks, 22);
    assert_logits_eq(s, r);
    nf_session_free(r);
    nf_session_free(s);
}

typedef struct {
    int32_t ids[256];
    int n;
    int cancel_at;                 /* set the flag while handling this index (-1: never) */
    volatile sig_atomic_t *flag;
    char text[4096];
    size_t n_text;
} rec;

static int record(void *user, const nf_gen_token *t) {
    rec *r = user;
    if (t->id >= 0) r->ids[r->n++] = t->id;
    if (r->n_text + t->len < sizeof r->text) {
        memcpy(r->text + r->n_text, t->text, t->len);
        r->n_text += t->len;
    }
    if (r->flag && t->index == r->cancel_at) *r->flag = 1;
    return 0;
}

Test(session, greedy_generation_is_deterministic) {
    rec a = {.cancel_at = -1}, b = {.cancel_at = -1};
    nf_gen_opts g = {.max_tokens = 24, .ignore_stop = true};
    nf_gen_stats st;
    nf_session *s1 = open_s(8), *s2 = open_s(3);
    cr_assert_eq(nf_session_set_prompt(s1, toks, 20, NULL, 0, NULL, NULL), 0);
    cr_assert_eq(nf_session_set_prompt(s2, toks, 20, NULL, 0, NULL, NULL), 0);
    cr_assert_eq(nf_session_generate(s1, &g, record, &a, &st), 0, "%s", nf_error());
    cr_assert_eq(st.stop, NF_STOP_MAX_TOKENS);
    cr_assert_eq(st.n_tokens, 24);
    cr_assert_eq(st.n_decoded, 24);
    cr_assert_geq(st.ttft_s, 0);
    cr_assert_eq(nf_session_generate(s2, &g, record, &b, &st), 0, "%s", nf_error());
    cr_assert_eq(a.n, 24);
    cr_assert(!memcmp(a.ids, b.ids, sizeof a.ids[0] * 24));
    /* not all the same token (the model is not degenerate), and the state holds prompt + output */
    int diff = 0;
    for (int i = 1; i < a.n; i++) diff += a.ids[i] != a.ids[0];
    cr_assert_gt(diff, 0);
    size_t n;
    const int32_t *h = nf_session_tokens(s1, &n);
    cr_assert_eq(n, 44);
    cr_assert(!memcmp(h + 20, a.ids, 24 * sizeof *h));
    nf_session_free(s1);
    nf_session_free(s2);
}

Test(session, cancel_stops_within_one_token_and_continues_exactly) {
    volatile sig_atomic_t flag = 0;
    nf_gen_stats st;
    /* reference: 30 tokens uninterrupted */
    rec ref = {.cancel_at = -1};
    nf_session *r = open_s(8);
    cr_assert_eq(nf_session_set_prompt(r, toks, 18, NULL, 0, NULL, NULL), 0);
    nf_gen_opts g30 = {.max_tokens = 30, .ignore_stop = true};
    cr_assert_eq(nf_session_generate(r, &g30, record, &ref, &st), 0);
    cr_assert_eq(ref.n, 30);

    /* cancelled while token 11 is handled: it is kept (fed back), nothing after it */
    rec a = {.cancel_at = 11, .flag = &flag};
    nf_session *s = open_s(8);
    cr_assert_eq(nf_session_set_prompt(s, toks, 18, NULL, 0, NULL, NULL), 0);
    nf_gen_opts g = {.max_tokens = 30, .cancel = &flag, .ignore_stop = true};
    cr_assert_eq(nf_session_generate(s, &g, record, &a, &st), 0);
    cr_assert_eq(st.stop, NF_STOP_CANCEL);
    cr_assert_eq(st.n_tokens, 12);
    cr_assert_eq(a.n, 12);
    size_t n;
    nf_session_tokens(s, &n);
    cr_assert_eq(n, 18 + 12);

    /* the same state as a run that stopped there naturally (max_tokens = 12) */
    rec m = {.cancel_at = -1};
    nf_session *s12 = open_s(8);
    cr_assert_eq(nf_session_set_prompt(s12, toks, 18, NULL, 0, NULL, NULL), 0);
    nf_gen_opts g12 = {.max_tokens = 12, .ignore_stop = true};
    cr_assert_eq(nf_session_generate(s12, &g12, record, &m, &st), 0);
    assert_logits_eq(s, s12);

    /* a flag already set: nothing is generated */
    cr_assert_eq(nf_session_generate(s, &g, record, &a, &st), 0);
    cr_assert_eq(st.n_tokens, 0);
    cr_assert_eq(st.stop, NF_STOP_CANCEL);

    /* continue: the remaining 18 tokens equal the uninterrupted run's */
    flag = 0;
    a.cancel_at = -1;
    nf_gen_opts g18 = {.max_tokens = 18, .cancel = &flag, .ignore_stop = true};
    cr_assert_eq(nf_session_generate(s, &g18, record, &a, &st), 0);
    cr_assert_eq(a.n, 30);
    cr_assert(!memcmp(a.ids, ref.ids, 30 * sizeof a.ids[0]));
    assert_logits_eq(s, r);
    nf_session_free(s12);
    nf_session_free(s);
    nf_session_free(r);
}

Test(session, cancelled_prefill_keeps_the_invariants) {
    volatile sig_atomic_t flag = 1;
    nf_session *s = open_s(4);
    nf_prefill_stats st;
    cr_assert_eq(nf_session_prefill(s, toks, 20, NULL, 0, &flag, &st), 1);
    cr_assert(st.cancelled);
    size_t n;
    nf_session_tokens(s, &n);
    cr_assert_eq(n, 0);
    cr_assert_null(nf_session_logits(s));
    flag = 0;
    cr_assert_eq(nf_session_prefill(s, toks, 20, NULL, 0, &flag, &st), 0);
    nf_session *r = fresh(toks, 20);
    assert_logits_eq(s, r);
    nf_session_free(r);
    nf_session_free(s);
}

Test(session, stop_tokens_by_name) {
    nf_session *s = open_s(0);
    const nf_tokenizer *t = nf_session_tokenizer(s);
    cr_assert_not_null(t);
    const char *names[] = {"<|endoftext|>", "<|user|>", "<|observation|>"};
    for (int i = 0; i < 3; i++) {
        int32_t id = nf_token_id(t, names[i]);
        cr_assert_geq(id, 0, "%s", names[i]);
        cr_assert(nf_session_is_stop(s, id), "%s", names[i]);
    }
    cr_assert_not(nf_session_is_stop(s, nf_token_id(t, "<|assistant|>")));
    cr_assert_not(nf_session_is_stop(s, toks[0]));
    nf_session_free(s);
}

Test(session, bad_input_is_rejected) {
    nf_session *s = open_s(0);
    int32_t bad[2] = {1, 99999};
    cr_assert_eq(nf_session_prefill(s, bad, 2, NULL, 0, NULL, NULL), -1);
    cr_assert(strstr(nf_error(), "out of range"), "%s", nf_error());
    cr_assert_eq(nf_session_generate(s, NULL, NULL, NULL, NULL), -1);
    cr_assert(strstr(nf_error(), "empty"), "%s", nf_error());
    cr_assert_eq(nf_session_set_prompt(s, toks, 0, NULL, 0, NULL, NULL), -1);
    nf_session_free(s);
    nf_session_opts o = nf_session_opts_default();
    o.n_ctx = 10;
    o.tokenizer = TOKENIZER;
    s = nf_session_create(path, &o);
    cr_assert_not_null(s, "%s", nf_error());
    cr_assert_eq(nf_session_prefill(s, toks, 11, NULL, 0, NULL, NULL), -1);
    cr_assert(strstr(nf_error(), "context"), "%s", nf_error());
    cr_assert_eq(nf_session_prefill(s, toks, 8, NULL, 0, NULL, NULL), 0);
    nf_gen_opts g = {.ignore_stop = true};
    nf_gen_stats st;
    cr_assert_eq(nf_session_generate(s, &g, NULL, NULL, &st), 0);
    cr_assert_eq(st.stop, NF_STOP_CTX_FULL);
    cr_assert_eq(st.n_tokens, 2);
    nf_session_free(s);
    cr_assert_null(nf_session_create("/nonexistent/model.gguf", NULL));
}

/* ---- UTF-8 assembly ---- */

static size_t feed(nf_utf8_asm *a, const char *b, size_t n, char *acc, size_t at) {
    size_t len;
    const char *o = nf_utf8_feed(a, b, n, &len);
    memcpy(acc + at, o, len);
    return at + len;
}

Test(session_utf8, split_sequences_are_held_back) {
    nf_utf8_asm a = {0};
    char acc[256];
    size_t len, at = 0;
    /* "é" = C3 A9, "€" = E2 82 AC, "😀" = F0 9F 98 80, fed one byte at a time */
    const char *s = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z";
    size_t n = strlen(s);
    for (size_t i = 0; i < n; i++) {
        size_t before = at;
        at = feed(&a, s + i, 1, acc, at);
        /* each release is whole characters: never a lone lead or continuation byte at the end */
        if (at > before) {
            unsigned char last = (unsigned char)acc[at - 1];
            cr_assert(last < 0x80 || (last & 0xC0) == 0x80);
        }
    }
    cr_assert_eq(at, n);
    cr_assert(!memcmp(acc, s, n));
    /* nothing released while incomplete */
    nf_utf8_feed(&a, "\xF0\x9F", 2, &len);
    cr_assert_eq(len, 0);
    nf_utf8_feed(&a, "\x98", 1, &len);
    cr_assert_eq(len, 0);
    const char *o = nf_utf8_feed(&a, "\x80!", 2, &len);
    cr_assert_eq(len, 5);
    cr_assert(!memcmp(o, "\xF0\x9F\x98\x80!", 5));
    nf_utf8_free(&a);
}

Test(session_utf8, invalid_bytes_become_replacement_characters) {
    nf_utf8_asm a = {0};
    size_t len;
    /* lone continuation, overlong lead C0, a lead interrupted by ASCII, a surrogate ED A0 */
    const char *o = nf_utf8_feed(&a, "\x80x\xC0y\xE2\x82z\xED\xA0", 9, &len);
    const char *want = "\xEF\xBF\xBDx\xEF\xBF\xBDy\xEF\xBF\xBDz\xEF\xBF\xBD\xEF\xBF\xBD";
    cr_assert_eq(len, strlen(want));
    cr_assert(!memcmp(o, want, len));
    /* an incomplete tail at the end becomes one U+FFFD on flush */
    nf_utf8_feed(&a, "ok\xE2\x82", 4, &len);
    cr_assert_eq(len, 2);
    o = nf_utf8_flush(&a, &len);
    cr_assert_eq(len, 3);
    cr_assert(!memcmp(o, "\xEF\xBF\xBD", 3));
    o = nf_utf8_flush(&a, &len);
    cr_assert_eq(len, 0);
    nf_utf8_free(&a);
}

Test(session, generated_pieces_are_valid_utf8_and_match_the_tokens) {
    /* the random model emits byte tokens freely: the concatenated pieces must be valid UTF-8 and equal the
     * detokenized ids wherever those are valid */
    nf_session *s = open_s(0);
    cr_assert_eq(nf_session_set_prompt(s, toks, 10, NULL, 0, NULL, NULL), 0);
    nf_sampler_params p = nf_sampler_defaults();
    p.seed = 9;
    p.min_p = 0;
    nf_session_set_sampler(s, &p);
    rec a = {.cancel_at = -1};
    nf_gen_opts g = {.max_tokens = 120, .ignore_stop = true};
    cr_assert_eq(nf_session_generate(s, &g, record, &a, NULL), 0);
    /* validate UTF-8 of the concatenation */
    nf_utf8_asm v = {0};
    size_t len;
    const char *o = nf_utf8_feed(&v, a.text, a.n_text, &len);
    cr_assert_eq(len, a.n_text);
    cr_assert(!memcmp(o, a.text, len), "pieces are not valid UTF-8");
    nf_utf8_free(&v);
    /* the same text as assembling the detokenized bytes */
    char *dt;
    size_t dn;
    cr_assert_eq(nf_detokenize(nf_session_tokenizer(s), a.ids, (size_t)a.n, &dt, &dn), 0);
    nf_utf8_asm w = {0};
    const char *o1 = nf_utf8_feed(&w, dt, dn, &len);
    char *want = malloc(len + 8);
    memcpy(want, o1, len);
    size_t wl = len;
    const char *o2 = nf_utf8_flush(&w, &len);
    memcpy(want + wl, o2, len);
    wl += len;
    cr_assert_eq(wl, a.n_text);
    cr_assert(!memcmp(want, a.text, wl));
    free(want);
    free(dt);
    nf_utf8_free(&w);
    nf_session_free(s);
}

Test(session, checkpoint_limit_drops_the_oldest) {
    nf_session_opts o = nf_session_opts_default();
    o.n_threads = 2;
    o.max_checkpoints = 2;
    o.tokenizer = TOKENIZER;
    o.sampler.temperature = 0;
    nf_session *s = nf_session_create(path, &o);
    cr_assert_not_null(s, "%s", nf_error());
    int64_t marks[] = {5, 9, 13};
    cr_assert_eq(nf_session_set_prompt(s, toks, 20, marks, 3, NULL, NULL), 0, "%s", nf_error());
    int64_t ck[4];
    cr_assert_eq(nf_session_checkpoints(s, ck, 4), 2);
    cr_assert_eq(ck[0], 13);
    cr_assert_eq(ck[1], 20);
    /* a divergence below every kept checkpoint resets and still gives the right logits */
    int32_t alt[20];
    memcpy(alt, toks, sizeof alt);
    alt[10] = (alt[10] + 1) % 300;
    nf_prefill_stats st;
    cr_assert_eq(nf_session_set_prompt(s, alt, 20, NULL, 0, NULL, &st), 0);
    cr_assert_eq(st.reused, 0);
    nf_session *r = fresh(alt, 20);
    assert_logits_eq(s, r);
    nf_session_free(r);
    /* reset: empty, no checkpoints */
    nf_session_reset(s);
    size_t n;
    nf_session_tokens(s, &n);
    cr_assert_eq(n, 0);
    cr_assert_eq(nf_session_checkpoints(s, ck, 4), 0);
    cr_assert_null(nf_session_logits(s));
    nf_session_free(s);
}

Test(session, sampler_replacement_and_generation_after_reuse) {
    /* generation after a rollback sees the same sampler history as a fresh session with the same prompt */
    nf_session *s = open_s(6), *r = open_s(6);
    nf_sampler_params p = nf_sampler_defaults();
    p.seed = 42;
    p.repetition_penalty = 1.3f;
    nf_session_set_sampler(s, &p);
    nf_session_set_sampler(r, &p);
    cr_assert_eq(nf_session_set_prompt(s, toks, 30, NULL, 0, NULL, NULL), 0);
    nf_gen_opts g = {.max_tokens = 10, .ignore_stop = true};
    cr_assert_eq(nf_session_generate(s, &g, NULL, NULL, NULL), 0);
    cr_assert_eq(nf_session_set_prompt(s, toks, 25, NULL, 0, NULL, NULL), 0); /* back into the prompt */
    nf_session_set_sampler(s, &p);                                             /* PRNG from the seed again */
    cr_assert_eq(nf_session_set_prompt(r, toks, 25, NULL, 0, NULL, NULL), 0);
    rec a = {.cancel_at = -1}, b = {.cancel_at = -1};
    cr_assert_eq(nf_session_generate(s, &g, record, &a, NULL), 0);
    cr_assert_eq(nf_session_generate(r, &g, record, &b, NULL), 0);
    cr_assert_eq(a.n, 10);
    cr_assert(!memcmp(a.ids, b.ids, sizeof a.ids[0] * 10));
    nf_session_free(s);
    nf_session_free(r);
}
