/* sampler.h — choosing the next token from logits: greedy, temperature, top-k, top-p, min-p, repetition /
 * presence / frequency penalties, with our own seeded PRNG so a (seed, logits sequence) always gives the
 * same tokens on every machine.
 *
 * Order (as Hugging Face generation applies its processors): penalties on the raw logits → temperature →
 * top-k → top-p → min-p → draw. Penalties look at the last `penalty_last_n` accepted tokens (-1: all):
 *   repetition (CTRL/HF): a seen token's logit is divided by r if positive, multiplied by r if negative;
 *   presence / frequency (OpenAI): logit -= presence·[count > 0] + frequency·count.
 * temperature <= 0 means greedy (argmax after penalties; ties go to the lowest id). top_k <= 0, top_p >= 1
 * and min_p <= 0 disable those filters. Candidates are ordered by probability, then id, so ties are
 * deterministic. The PRNG is xoshiro256** seeded through splitmix64. */
#ifndef NF_ENGINE_SAMPLER_H
#define NF_ENGINE_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    float temperature;
    int top_k;
    float top_p;
    float min_p;
    float repetition_penalty;  /* 1 = off */
    float presence_penalty;    /* 0 = off */
    float frequency_penalty;   /* 0 = off */
    int penalty_last_n;        /* tokens of history the penalties see; -1 = all, 0 = none */
    uint64_t seed;
} nf_sampler_params;

/* temperature 1, top_k 0, top_p 1, min_p 0.05 (ds4's defaults, spec §5), no penalties, last_n 64, seed 0. */
nf_sampler_params nf_sampler_defaults(void);

typedef struct nf_sampler nf_sampler;

nf_sampler *nf_sampler_new(const nf_sampler_params *p, int32_t n_vocab);
void nf_sampler_free(nf_sampler *s);
/* Record a token of the sequence (prompt or generated) for the penalties. */
void nf_sampler_accept(nf_sampler *s, int32_t token);
/* Forget the history and restart the PRNG from the seed. */
void nf_sampler_reset(nf_sampler *s);
/* Choose a token from n_vocab logits (not modified). Does not accept it: call nf_sampler_accept. */
int32_t nf_sampler_sample(nf_sampler *s, const float *logits);
/* The final distribution the draw would use, written to probs[n_vocab] (0 for filtered tokens; greedy
 * gives a one-hot). For tests and for reporting. */
void nf_sampler_probs(nf_sampler *s, const float *logits, float *probs);

/* The PRNG on its own: state from a seed, next 64 bits, uniform double in [0, 1). */
typedef struct { uint64_t s[4]; } nf_rng;
void nf_rng_seed(nf_rng *r, uint64_t seed);
uint64_t nf_rng_next(nf_rng *r);
double nf_rng_uniform(nf_rng *r);

#endif
