/* test_prefill_progress.c — prefill progress of a session (nf_session_set_progress, engine/session.h): reported
 * between chunks with growing counts and the prefill's total, a last report when a reported prefill finishes,
 * none when the interval is longer than the prefill or progress is off; the line the CLI and the server print. */
#include <criterion/criterion.h>

#include <string.h>

#include "engine/session.h"
#include "util/error.h"

#define TINY_MODEL "models/tiny/nf-tiny-bf16.gguf"

typedef struct {
    int calls;
    int64_t done[64], total[64];
    double seconds[64];
} seen;

static void record(void *user, int64_t done, int64_t total, double seconds) {
    seen *s = user;
    if (s->calls < 64) {
        s->done[s->calls] = done;
        s->total[s->calls] = total;
        s->seconds[s->calls] = seconds;
    }
    s->calls++;
}

static nf_session *open_tiny(void) {
    nf_session_opts o = nf_session_opts_default();
    o.n_threads = 2;
    o.prefill_chunk = 16;
    nf_session *s = nf_session_create(TINY_MODEL, &o);
    cr_assert_not_null(s, "%s", nf_error());
    return s;
}

Test(prefill_progress, every_chunk_then_done, .timeout = 120) {
    nf_session *s = open_tiny();
    seen got = {0};
    nf_session_set_progress(s, record, &got, 0);
    int32_t ids[100];
    for (int i = 0; i < 100; i++) ids[i] = 50 + i;
    cr_assert_eq(nf_session_prefill(s, ids, 100, NULL, 0, NULL, NULL), 0);
    cr_assert_eq(got.calls, 7, "%d reports", got.calls); /* 6 chunks of 16, then 4 */
    for (int k = 0; k < 7; k++) {
        cr_assert_eq(got.done[k], k < 6 ? 16 * (k + 1) : 100);
        cr_assert_eq(got.total[k], 100);
        cr_assert(k == 0 || got.seconds[k] >= got.seconds[k - 1]);
    }
    /* a set_prompt that reuses the first 100 tokens counts only what it prefills */
    int32_t more[120];
    memcpy(more, ids, sizeof ids);
    for (int i = 100; i < 120; i++) more[i] = 300 + i;
    got.calls = 0;
    cr_assert_eq(nf_session_set_prompt(s, more, 120, NULL, 0, NULL, NULL), 0);
    cr_assert_eq(got.calls, 2);
    cr_assert(got.done[0] == 16 && got.done[1] == 20 && got.total[1] == 20, "%lld %lld %lld", (long long)got.done[0],
              (long long)got.done[1], (long long)got.total[1]);
    nf_session_free(s);
}

Test(prefill_progress, quiet_when_short_or_off, .timeout = 120) {
    nf_session *s = open_tiny();
    seen got = {0};
    int32_t ids[64];
    for (int i = 0; i < 64; i++) ids[i] = 70 + i;
    nf_session_set_progress(s, record, &got, 1e6); /* interval longer than the prefill */
    cr_assert_eq(nf_session_prefill(s, ids, 64, NULL, 0, NULL, NULL), 0);
    cr_assert_eq(got.calls, 0);
    nf_session_reset(s);
    nf_session_set_progress(s, record, &got, -1);  /* off */
    cr_assert_eq(nf_session_prefill(s, ids, 64, NULL, 0, NULL, NULL), 0);
    cr_assert_eq(got.calls, 0);
    nf_session_free(s);
}

Test(prefill_progress, line) {
    char b[200];
    nf_prefill_progress_line(b, sizeof b, 4096, 62000, 3.45);
    cr_assert_str_eq(b, "prefill 4096/62000 tokens (6.6%), 1187.2 t/s, ~49 s left");
    nf_prefill_progress_line(b, sizeof b, 62000, 62000, 52.0);
    cr_assert_str_eq(b, "prefill 62000/62000 tokens (100.0%), 1192.3 t/s, 52.0 s");
}
