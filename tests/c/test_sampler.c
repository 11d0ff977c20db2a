/* test_sampler.c — sampling on distributions small enough to check by hand: logits log(1..4) give
 * probabilities .1 .2 .3 .4, and each filter / penalty has a value that can be worked out on paper.
 * Also: greedy ties, determinism for a seed, empirical frequencies, large-vocabulary top-p exactness. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampler.h"

static const float L4[4] = {0.0f, 0.69314718f, 1.09861229f, 1.38629436f}; /* log 1, 2, 3, 4 */

static nf_sampler_params plain(void) {
    nf_sampler_params p = nf_sampler_defaults();
    p.min_p = 0;
    p.seed = 42;
    return p;
}

static void probs_of(const nf_sampler_params *p, const float *logits, int n, float *out, const int32_t *hist, int nh) {
    nf_sampler *s = nf_sampler_new(p, n);
    cr_assert_not_null(s);
    for (int i = 0; i < nh; i++) nf_sampler_accept(s, hist[i]);
    nf_sampler_probs(s, logits, out);
    nf_sampler_free(s);
}

#define EXPECT4(p, a, b, c, d)                                                                  \
    do {                                                                                        \
        float w_[4] = {a, b, c, d};                                                             \
        for (int i_ = 0; i_ < 4; i_++)                                                          \
            cr_assert_float_eq(p[i_], w_[i_], 1e-5, "token %d: %g, want %g", i_, p[i_], w_[i_]); \
    } while (0)

Test(sampler, temperature_and_filters_by_hand) {
    float pr[4];
    nf_sampler_params p = plain();
    probs_of(&p, L4, 4, pr, NULL, 0);
    EXPECT4(pr, .1f, .2f, .3f, .4f);
    p.temperature = 0.5f; /* squares: 1 4 9 16 over 30 */
    probs_of(&p, L4, 4, pr, NULL, 0);
    EXPECT4(pr, 1 / 30.f, 4 / 30.f, 9 / 30.f, 16 / 30.f);
    p = plain();
    p.top_k = 2;
    probs_of(&p, L4, 4, pr, NULL, 0);
    EXPECT4(pr, 0, 0, 3 / 7.f, 4 / 7.f);
    p = plain();
    p.top_p = 0.5f; /* .4 < .5, .4+.3 >= .5 */
    probs_of(&p, L4, 4, pr, NULL, 0);
    EXPECT4(pr, 0, 0, 3 / 7.f, 4 / 7.f);
    p.top_p = 0.39f; /* .4 alone reaches it */
    probs_of(&p, L4, 4, pr, NULL, 0);
    EXPECT4(pr, 0, 0, 0, 1);
    p = plain();
    p.min_p = 0.5f; /* keep p >= .5 * .4 = .2 */
    probs_of(&p, L4, 4, pr, NULL, 0);
    EXPECT4(pr, 0, 2 / 9.f, 3 / 9.f, 4 / 9.f);
    p = plain();
    p.top_k = 3;
    p.top_p = 0.6f; /* top-3: .2 .3 .4 -> /.9: .444 .333 .222; .444+.333 >= .6 */
    p.min_p = 0.7f; /* then keep >= .7 * .444 = .311: .333 and .444 stay */
    probs_of(&p, L4, 4, pr, NULL, 0);
    EXPECT4(pr, 0, 0, 3 / 7.f, 4 / 7.f);
    p.min_p = 0.8f; /* >= .356: only token 3 */
    probs_of(&p, L4, 4, pr, NULL, 0);
    EXPECT4(pr, 0, 0, 0, 1);
}

Test(sampler, penalties_by_hand) {
    float pr[4];
    nf_sampler_params p = plain();
    p.repetition_penalty = 2.0f; /* token 3 seen: log 4 / 2 = log 2 -> weights 1 2 3 2 */
    int32_t h1[] = {3};
    probs_of(&p, L4, 4, pr, h1, 1);
    EXPECT4(pr, 1 / 8.f, 2 / 8.f, 3 / 8.f, 2 / 8.f);
    float neg[4] = {-1.0f, 0, 0, 0}; /* negative logits are multiplied: -1 * 2 = -2 */
    int32_t h0[] = {0};
    probs_of(&p, neg, 4, pr, h0, 1);
    float z = expf(-2) + 3;
    EXPECT4(pr, expf(-2) / z, 1 / z, 1 / z, 1 / z);
    p = plain();
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f; /* token 2 seen twice: log 3 - (.5 + .5) -> weight 3/e */
    int32_t h2[] = {2, 2};
    probs_of(&p, L4, 4, pr, h2, 2);
    z = 1 + 2 + 3 / expf(1) + 4;
    EXPECT4(pr, 1 / z, 2 / z, 3 / expf(1) / z, 4 / z);
    p.penalty_last_n = 1; /* only the last token is seen: count 1 -> log 3 - .75 */
    int32_t h3[] = {2, 2, 0};
    probs_of(&p, L4, 4, pr, h3, 3);
    z = 1 / expf(.75f) + 2 + 3 + 4;
    EXPECT4(pr, 1 / expf(.75f) / z, 2 / z, 3 / z, 4 / z);
}

Test(sampler, greedy_and_ties) {
    float l[5] = {1, 3, 3, -INFINITY, 2};
    nf_sampler_params p = plain();
    p.temperature = 0;
    nf_sampler *s = nf_sampler_new(&p, 5);
    for (int i = 0; i < 10; i++) cr_assert_eq(nf_sampler_sample(s, l), 1);
    nf_sampler_accept(s, 1);
    nf_sampler_free(s);
    p.repetition_penalty = 1.5f; /* seen token 1 drops to 2: token 2 wins */
    s = nf_sampler_new(&p, 5);
    nf_sampler_accept(s, 1);
    cr_assert_eq(nf_sampler_sample(s, l), 2);
    nf_sampler_free(s);
    float nanl[3] = {NAN, 0.5f, NAN};
    p = plain();
    s = nf_sampler_new(&p, 3);
    for (int i = 0; i < 20; i++) cr_assert_eq(nf_sampler_sample(s, nanl), 1);
    nf_sampler_free(s);
}

Test(sampler, deterministic_for_a_seed) {
    nf_sampler_params p = plain();
    int32_t a[200], b[200], c[200];
    for (int run = 0; run < 3; run++) {
        p.seed = run == 2 ? 43 : 42;
        nf_sampler *s = nf_sampler_new(&p, 4);
        for (int i = 0; i < 200; i++) (run == 0 ? a : run == 1 ? b : c)[i] = nf_sampler_sample(s, L4);
        nf_sampler_free(s);
    }
    cr_assert(memcmp(a, b, sizeof a) == 0);
    cr_assert(memcmp(a, c, sizeof a) != 0);
    /* reset restarts the same stream */
    nf_sampler *s = nf_sampler_new(&p, 4);
    int32_t x = nf_sampler_sample(s, L4), y = nf_sampler_sample(s, L4);
    nf_sampler_reset(s);
    cr_assert_eq(nf_sampler_sample(s, L4), x);
    cr_assert_eq(nf_sampler_sample(s, L4), y);
    nf_sampler_free(s);
}

Test(sampler, empirical_frequencies) {
    nf_sampler_params p = plain();
    nf_sampler *s = nf_sampler_new(&p, 4);
    int cnt[4] = {0};
    const int N = 200000;
    for (int i = 0; i < N; i++) cnt[nf_sampler_sample(s, L4)]++;
    nf_sampler_free(s);
    for (int i = 0; i < 4; i++) {
        double want = (i + 1) / 10.0, sd = sqrt(want * (1 - want) / N);
        cr_assert(fabs(cnt[i] / (double)N - want) < 5 * sd, "token %d: %g vs %g", i, cnt[i] / (double)N, want);
    }
}

static const double *g_w;
static int by_weight_desc(const void *a, const void *b) {
    double x = g_w[*(const int *)a], y = g_w[*(const int *)b];
    return x > y ? -1 : x < y ? 1 : (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

Test(sampler, large_vocab_top_p_exact) {
    /* 50000 tokens, a few large logits and a long flat tail: top-p must equal a full sort's answer */
    const int V = 50000;
    float *l = malloc(V * sizeof *l), *pr = malloc(V * sizeof *pr);
    nf_rng r;
    nf_rng_seed(&r, 9);
    for (int i = 0; i < V; i++) l[i] = (float)(nf_rng_uniform(&r) * 2.0);
    l[123] = 12;
    l[777] = 11;
    l[40000] = 10.5f;
    nf_sampler_params p = plain();
    p.top_p = 0.95f;
    probs_of(&p, l, V, pr, NULL, 0);
    /* reference: sort all weights */
    double *w = malloc(V * sizeof *w), tot = 0;
    int *idx = malloc(V * sizeof *idx);
    for (int i = 0; i < V; i++) { w[i] = exp(l[i] - 12.0); tot += w[i]; idx[i] = i; }
    g_w = w;
    qsort(idx, V, sizeof *idx, by_weight_desc);
    double cum = 0;
    int keep = 0;
    while (cum < 0.95 * tot) cum += w[idx[keep++]];
    int nz = 0;
    for (int i = 0; i < V; i++) nz += pr[i] > 0;
    cr_assert_eq(nz, keep, "kept %d, full sort keeps %d", nz, keep);
    for (int i = 0; i < keep; i++) cr_assert(pr[idx[i]] > 0);
    free(l); free(pr); free(w); free(idx);
}
