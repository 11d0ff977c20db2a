/* sampler.c — token sampling (contract in sampler.h).
 *
 * Work is linear in the vocabulary (copy, penalties, one exp per candidate); sorting is limited to what
 * can matter: top-k keeps k with a heap, top-p sorts only one weight bucket (top_p_cut) -- exact, not an
 * approximation. */
#include "engine/sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

struct nf_sampler {
    nf_sampler_params p;
    int32_t n_vocab;
    nf_rng rng;
    int32_t *hist;
    size_t n_hist, cap_hist;
    float *work;       /* n_vocab penalized logits */
    int32_t *cand;     /* candidate ids */
    float *cp;         /* candidate probabilities */
    int32_t *seen;     /* scratch for penalty counting */
    int32_t *count;    /* per-id counts (n_vocab), reset after use */
    int32_t *bnd;      /* top-p boundary bucket scratch (n_vocab) */
};

nf_sampler_params nf_sampler_defaults(void) {
    return (nf_sampler_params){.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.05f,
                               .repetition_penalty = 1.0f, .presence_penalty = 0.0f, .frequency_penalty = 0.0f,
                               .penalty_last_n = 64, .seed = 0};
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void nf_rng_seed(nf_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t nf_rng_next(nf_rng *r) {
    uint64_t *s = r->s, result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double nf_rng_uniform(nf_rng *r) { return (double)(nf_rng_next(r) >> 11) * 0x1.0p-53; }

nf_sampler *nf_sampler_new(const nf_sampler_params *p, int32_t n_vocab) {
    if (n_vocab <= 0) {
        nf_fail("sampler: vocabulary size %d", n_vocab);
        return NULL;
    }
    nf_sampler *s = nf_xcalloc(1, sizeof *s);
    s->p = p ? *p : nf_sampler_defaults();
    s->n_vocab = n_vocab;
    s->work = nf_xmalloc((size_t)n_vocab * sizeof *s->work);
    s->cand = nf_xmalloc((size_t)n_vocab * sizeof *s->cand);
    s->cp = nf_xmalloc((size_t)n_vocab * sizeof *s->cp);
    s->count = nf_xcalloc((size_t)n_vocab, sizeof *s->count);
    s->bnd = nf_xmalloc((size_t)n_vocab * sizeof *s->bnd);
    nf_rng_seed(&s->rng, s->p.seed);
    return s;
}

void nf_sampler_free(nf_sampler *s) {
    if (!s) return;
    free(s->hist);
    free(s->work);
    free(s->cand);
    free(s->cp);
    free(s->seen);
    free(s->count);
    free(s->bnd);
    free(s);
}

void nf_sampler_accept(nf_sampler *s, int32_t token) {
    if (s->n_hist == s->cap_hist) {
        s->cap_hist = s->cap_hist ? 2 * s->cap_hist : 256;
        s->hist = nf_xrealloc(s->hist, s->cap_hist * sizeof *s->hist);
    }
    s->hist[s->n_hist++] = token;
}

void nf_sampler_reset(nf_sampler *s) {
    s->n_hist = 0;
    nf_rng_seed(&s->rng, s->p.seed);
}

static void apply_penalties(nf_sampler *s) {
    const nf_sampler_params *p = &s->p;
    if (p->penalty_last_n == 0 || s->n_hist == 0) return;
    if (p->repetition_penalty == 1.0f && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f) return;
    size_t from = (p->penalty_last_n < 0 || (size_t)p->penalty_last_n >= s->n_hist) ? 0 : s->n_hist - (size_t)p->penalty_last_n;
    size_t w = s->n_hist - from, n_seen = 0;
    s->seen = nf_xrealloc(s->seen, (w ? w : 1) * sizeof *s->seen);
    for (size_t i = from; i < s->n_hist; i++) {
        int32_t t = s->hist[i];
        if (t < 0 || t >= s->n_vocab) continue;
        if (s->count[t]++ == 0) s->seen[n_seen++] = t;
    }
    for (size_t i = 0; i < n_seen; i++) {
        int32_t t = s->seen[i];
        float l = s->work[t];
        if (p->repetition_penalty != 1.0f && p->repetition_penalty > 0.0f)
            l = l > 0 ? l / p->repetition_penalty : l * p->repetition_penalty;
        l -= p->presence_penalty + p->frequency_penalty * (float)s->count[t];
        s->work[t] = l;
        s->count[t] = 0;
    }
}

/* candidates ordered by probability (= logit) descending, then id ascending; qsort_r (glibc) keeps the
 * key array per call, so samplers in different threads do not share state */
static int cmp_cand(const void *a, const void *b, void *key_) {
    const float *key = key_;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (key[x] > key[y]) return -1;
    if (key[x] < key[y]) return 1;
    return (x > y) - (x < y);
}

static void sort_cands(int32_t *c, size_t n, const float *key) { qsort_r(c, n, sizeof *c, cmp_cand, (void *)key); }

/* Min-heap selection of the k best ids (by key desc, id asc), result sorted. Returns the count. */
static size_t top_k_select(const float *key, int32_t n, int k, int32_t *out) {
    size_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (m < (size_t)k) {
            size_t j = m++;
            out[j] = i;
            while (j > 0) { /* heap root = worst */
                size_t q = (j - 1) / 2;
                if ((key[out[q]] < key[out[j]]) || (key[out[q]] == key[out[j]] && out[q] > out[j])) break;
                int32_t t = out[q]; out[q] = out[j]; out[j] = t;
                j = q;
            }
        } else if (key[i] > key[out[0]]) { /* strictly better than the worst (ids grow, so ties lose) */
            out[0] = i;
            size_t j = 0;
            for (;;) {
                size_t l = 2 * j + 1, r = l + 1, w = j;
                #define WORSE(a, b) (key[out[a]] < key[out[b]] || (key[out[a]] == key[out[b]] && out[a] > out[b]))
                if (l < m && WORSE(l, w)) w = l;
                if (r < m && WORSE(r, w)) w = r;
                #undef WORSE
                if (w == j) break;
                int32_t t = out[w]; out[w] = out[j]; out[j] = t;
                j = w;
            }
        }
    }
    sort_cands(out, m, key);
    return m;
}

/* Top-p on candidates whose weights (0, 1] are in s->cp: keep the shortest prefix of the order (weight desc,
 * id asc) whose mass reaches `need`. Weights are bucketed by the top 12 bits of their float encoding (which
 * orders positive floats); buckets above the one where the running mass crosses `need` are kept whole (in
 * their current order), and only that boundary bucket is sorted to find the exact cut. O(n) plus a sort of
 * one bucket, instead of sorting the vocabulary. */
#define NB 4096
static inline uint32_t wbucket(float w) {
    uint32_t bits;
    memcpy(&bits, &w, 4);
    return bits >> 19; /* positive floats: exponent and 4 mantissa bits, 0..4095 */
}

static size_t top_p_cut(nf_sampler *s, size_t n, double need, float mx, float inv_t) {
    double mass[NB] = {0};
    for (size_t i = 0; i < n; i++) mass[wbucket(s->cp[i])] += s->cp[i];
    double cum = 0;
    int boundary = -1;
    for (int b = NB - 1; b >= 0; b--) {
        if (mass[b] > 0 && cum + mass[b] >= need) { boundary = b; break; }
        cum += mass[b];
    }
    if (boundary < 0) return n; /* rounding left the total short of need: keep everything */
    size_t m = 0, nb = 0;
    for (size_t i = 0; i < n; i++) {
        int b = (int)wbucket(s->cp[i]);
        if (b > boundary) { s->cand[m] = s->cand[i]; s->cp[m] = s->cp[i]; m++; }
        else if (b == boundary) s->bnd[nb++] = s->cand[i];
    }
    sort_cands(s->bnd, nb, s->work);
    for (size_t j = 0; j < nb; j++) {
        float w = expf((s->work[s->bnd[j]] - mx) * inv_t);
        s->cand[m] = s->bnd[j];
        s->cp[m] = w;
        m++;
        cum += w;
        if (cum >= need) break;
    }
    return m;
}
#undef NB

/* Fill s->cand / s->cp with the final candidates and their unnormalised probabilities (the most likely
 * candidate has weight 1); returns the count. The draw walks candidates in this order (set by the filters:
 * id order, top-k's sorted order, top-p's kept buckets then its sorted boundary) -- deterministic. */
static size_t build(nf_sampler *s, const float *logits) {
    const nf_sampler_params *p = &s->p;
    int32_t V = s->n_vocab;
    memcpy(s->work, logits, (size_t)V * sizeof *s->work);
    for (int32_t i = 0; i < V; i++)
        if (isnan(s->work[i])) s->work[i] = -INFINITY;
    apply_penalties(s);
    if (!(p->temperature > 0.0f)) { /* greedy */
        int32_t best = 0;
        for (int32_t i = 1; i < V; i++)
            if (s->work[i] > s->work[best]) best = i;
        s->cand[0] = best;
        s->cp[0] = 1.0f;
        return 1;
    }
    size_t n;
    if (p->top_k > 0 && p->top_k < V) {
        n = top_k_select(s->work, V, p->top_k, s->cand);
    } else {
        n = (size_t)V;
        for (int32_t i = 0; i < V; i++) s->cand[i] = i;
    }
    float mx = -INFINITY;
    for (size_t i = 0; i < n; i++) mx = fmaxf(mx, s->work[s->cand[i]]);
    if (mx == -INFINITY) { /* everything masked: the lowest id */
        s->cand[0] = 0;
        s->cp[0] = 1.0f;
        return 1;
    }
    float inv_t = 1.0f / p->temperature;
    if (p->top_p >= 1.0f && p->min_p > 0.0f) {
        /* min-p alone: tokens far below the threshold cannot survive, skip their exp (the exact test on
         * the weight follows; the margin keeps rounding from deciding anything here) */
        float cut = mx + (logf(p->min_p) - 1e-3f) / inv_t;
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (s->work[s->cand[i]] >= cut) s->cand[m++] = s->cand[i];
        n = m;
    }
    double total = 0;
    for (size_t i = 0; i < n; i++) total += (s->cp[i] = expf((s->work[s->cand[i]] - mx) * inv_t));
    if (p->top_p < 1.0f) n = top_p_cut(s, n, (double)p->top_p * total, mx, inv_t);
    if (p->min_p > 0.0f) { /* relative to the most likely token, whose weight is 1 */
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (s->cp[i] >= p->min_p) { s->cand[m] = s->cand[i]; s->cp[m] = s->cp[i]; m++; }
        n = m;
    }
    return n;
}

int32_t nf_sampler_sample(nf_sampler *s, const float *logits) {
    size_t n = build(s, logits);
    if (n == 1) return s->cand[0];
    double total = 0;
    for (size_t i = 0; i < n; i++) total += s->cp[i];
    double u = nf_rng_uniform(&s->rng) * total, acc = 0;
    for (size_t i = 0; i < n; i++) {
        acc += s->cp[i];
        if (u < acc) return s->cand[i];
    }
    return s->cand[n - 1];
}

void nf_sampler_probs(nf_sampler *s, const float *logits, float *probs) {
    size_t n = build(s, logits);
    double total = 0;
    for (size_t i = 0; i < n; i++) total += s->cp[i];
    memset(probs, 0, (size_t)s->n_vocab * sizeof *probs);
    for (size_t i = 0; i < n; i++) probs[s->cand[i]] = (float)(s->cp[i] / total);
}
