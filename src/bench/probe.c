/* probe.c — the pieces of the greedy probe that do not touch the model: argmax without EOS, the top-K of a
 * logit row for the step dump, and the ids hash (contracts in probe.h). */
#include "bench/probe.h"

#include <math.h>

/* a ranks above b (value desc, NaN lowest, then lower id) */
static int above(float va, int32_t a, float vb, int32_t b) {
    int na = isnan(va), nb = isnan(vb);
    if (na != nb) return nb;
    if (!na && va != vb) return va > vb;
    return a < b;
}

int32_t nf_argmax_excluding(const float *logits, int32_t n, int32_t exclude) {
    int32_t best = -1;
    for (int32_t i = 0; i < n; i++) {
        if (i == exclude) continue;
        if (best < 0 || above(logits[i], i, logits[best], best)) best = i;
    }
    return best;
}

void nf_topk_logits(const float *logits, int32_t n, int k, int32_t *ids, float *vals) {
    if (k > n) k = n;
    int have = 0;
    for (int32_t i = 0; i < n; i++) {
        float v = logits[i];
        if (have == k && !above(v, i, vals[k - 1], ids[k - 1])) continue;
        int j = have < k ? have++ : k - 1; /* insertion into the sorted prefix */
        while (j > 0 && above(v, i, vals[j - 1], ids[j - 1])) {
            vals[j] = vals[j - 1];
            ids[j] = ids[j - 1];
            j--;
        }
        vals[j] = v;
        ids[j] = i;
    }
}

uint64_t nf_ids_fnv64(uint64_t h, const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)ids[i];
        for (int b = 0; b < 4; b++) {
            h ^= (v >> (8 * b)) & 0xffu;
            h *= 0x100000001b3ull;
        }
    }
    return h;
}
