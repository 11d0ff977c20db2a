/* test_ctx_limits.c — the context size refused where it is enforced below the command lines: the state's own limit
 * (a reserve, and so a forward, past it fails with the numbers and changes nothing; growth stops at the limit
 * instead of doubling past it), the session (a context beyond the model's context length is refused before any
 * backend memory; a prefill past --ctx is refused), and nf-bench's memory budget (the numbers it refuses with,
 * glm53:q2 at 1M tokens on a 141 GB GPU). The command-line entry points are tests/py/test_ctx_limits.py. */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "bench/mem_budget.h"
#include "cpu/backend_cpu.h"
#include "engine/session.h"
#include "model/forward.h"
#include "model/state.h"
#include "model/synth.h"
#include "util/error.h"

#define TINY_MODEL "models/tiny/nf-tiny-bf16.gguf"

static nf_hparams tiny(void) {
    nf_hparams hp;
    cr_assert_eq(nf_synth_preset("tiny", &hp), 0);
    return hp;
}

Test(ctx_limits, state_reserve_refuses_past_the_limit_and_clamps_growth) {
    nf_hparams hp = tiny();
    nf_state *st = nf_state_create(&hp, 16);
    nf_state_set_limit(st, 100);
    cr_assert_eq(nf_state_reserve(st, 40), 0);
    cr_assert_eq(st->cap, 64);                       /* doubling below the limit */
    cr_assert_eq(nf_state_reserve(st, 70), 0);
    cr_assert_eq(st->cap, 100, "growth clamped to the limit, got %lld", (long long)st->cap);
    cr_assert_lt(nf_state_reserve(st, 101), 0);
    cr_assert(strstr(nf_error(), "101 tokens exceed the context size of 100 tokens"), "%s", nf_error());
    cr_assert_eq(st->cap, 100);
    nf_state_set_limit(st, 0);                       /* no limit: doubles again */
    cr_assert_eq(nf_state_reserve(st, 101), 0);
    cr_assert_eq(st->cap, 200);
    nf_state_free(st);
}

Test(ctx_limits, forward_past_the_state_limit_is_refused_and_changes_nothing, .timeout = 120) {
    nf_hparams hp = tiny();
    const nf_recipe *r = NULL;
    cr_assert_eq(nf_synth_spec_parse("tiny:f32", &hp, &r), 0);
    nf_model *m = nf_synth_model_create(&hp, r, 1, NF_SYNTH_HOST);
    nf_backend *be = nf_cpu_backend_create(m, 2);
    nf_state *st = nf_backend_state_create(be, 16);
    nf_state_set_limit(st, 20);
    int32_t toks[24];
    for (int i = 0; i < 24; i++) toks[i] = 7 + i;
    float *logits = malloc((size_t)hp.n_vocab * sizeof *logits);
    cr_assert_eq(nf_prefill(be, st, toks, 18, 8, logits, 0, NULL), 0);
    cr_assert_lt(nf_forward(be, st, toks + 18, 3, logits, 0, NULL), 0);
    cr_assert(strstr(nf_error(), "21 tokens exceed the context size of 20"), "%s", nf_error());
    cr_assert_eq(st->pos, 18);
    cr_assert_eq(nf_forward(be, st, toks + 18, 2, logits, 0, NULL), 0); /* exactly the limit */
    cr_assert_eq(st->pos, 20);
    free(logits);
    nf_state_free(st);
    nf_backend_free(be);
    nf_model_free(m);
}

Test(ctx_limits, session_ctx_beyond_the_model_and_prefill_past_ctx, .timeout = 120) {
    nf_session_opts o = nf_session_opts_default();
    o.n_threads = 2;
    o.n_ctx = 1048577;                               /* the embedded model's context length is 1048576 */
    cr_assert_null(nf_session_create(TINY_MODEL, &o));
    cr_assert(strstr(nf_error(), "context size 1048577 exceeds the model's context length 1048576"), "%s", nf_error());
    o.n_ctx = 1048576;                               /* accepted: the state grows on demand */
    nf_session *s = nf_session_create(TINY_MODEL, &o);
    cr_assert_not_null(s, "%s", nf_error());
    cr_assert_eq(nf_session_n_ctx(s), 1048576);
    nf_session_free(s);
    o.n_ctx = 8;
    s = nf_session_create(TINY_MODEL, &o);
    cr_assert_not_null(s, "%s", nf_error());
    int32_t ids[12];
    for (int i = 0; i < 12; i++) ids[i] = 100 + i;
    cr_assert_lt(nf_session_prefill(s, ids, 12, NULL, 0, NULL, NULL), 0);
    cr_assert(strstr(nf_error(), "exceed the context size 8"), "%s", nf_error());
    size_t n;
    nf_session_tokens(s, &n);
    cr_assert_eq(n, 0);
    nf_session_free(s);
}

Test(ctx_limits, bench_memory_budget_numbers) {
    nf_hparams hp;
    cr_assert_eq(nf_synth_preset("glm53", &hp), 0);
    /* glm53: 23.4 KiB of state per token (f32 latent rows + pooled keys of the MLA layers) */
    nf_bench_mem b;
    const int64_t cap = 1048576 + 32;
    nf_bench_mem_plan(&hp, 97.62e9, cap, 0, 2.0 * (1 << 30), &b);
    cr_assert_float_eq(b.state / 1048576.0 / 1024.0, 23.4, 0.15, "%.2f KiB/token", b.state / 1048576.0 / 1024.0);
    char msg[512];
    cr_assert_eq(nf_bench_mem_check(&b, cap, 141e9, "free on the GPU", msg, sizeof msg), 0); /* 1M fits an H200 */
    /* with the snapshot of the prefill method, the same run is ~25 GB larger */
    nf_bench_mem s;
    nf_bench_mem_plan(&hp, 97.62e9, cap, 1048576, 2.0 * (1 << 30), &s);
    cr_assert_float_eq(s.total - b.total, s.snapshot, 1);
    cr_assert_gt(s.snapshot, 24e9);
    cr_assert_lt(nf_bench_mem_check(&s, cap, 141e9, "free on the GPU", msg, sizeof msg), 0);
    cr_assert(strstr(msg, "97.62 GB weights") && strstr(msg, "for 1048608 tokens") && strstr(msg, "snapshot") &&
              strstr(msg, "141.00 GB are free on the GPU"), "%s", msg);
}
