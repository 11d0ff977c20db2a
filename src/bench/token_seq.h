/* token_seq.h — the one token sequence nf-bench walks to its frontiers.
 *
 * Three sources, each deterministic so that two builds (an nf-ab A/B) see the same ids:
 *   - a text file, tokenized once as plain text (no special-token recognition, no chat template, no BOS) with
 *     the model's tokenizer or --tokenizer; frontier F uses the first F ids of that one tokenization, so every
 *     frontier's prompt is a prefix of the next (nf-ab exact checks it);
 *   - an ids file: whitespace-separated decimal token ids (as `nf logits --tokens` reads);
 *   - none: a synthetic sequence from a seed: x_i = splitmix64(seed + i * golden), id = x_i mod n_vocab, the EOS
 *     id skipped (it becomes EOS + 1, mod n_vocab). */
#ifndef NF_BENCH_TOKEN_SEQ_H
#define NF_BENCH_TOKEN_SEQ_H

#include <stdint.h>

#include "text/tokenizer.h"

typedef struct {
    int32_t *ids;
    int64_t n;
} nf_token_seq;

/* Each returns 0 or -1 with nf_error() (unreadable file, not ids, an id outside [0, n_vocab)). */
int nf_token_seq_text(const nf_tokenizer *tok, const char *path, int32_t n_vocab, nf_token_seq *out);
int nf_token_seq_ids(const char *path, int32_t n_vocab, nf_token_seq *out);
void nf_token_seq_synthetic(uint64_t seed, int32_t n_vocab, int32_t eos, int64_t n, nf_token_seq *out);
void nf_token_seq_free(nf_token_seq *s);

#endif
