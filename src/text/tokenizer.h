/* tokenizer.h — byte-level BPE tokenizer (GGUF `tokenizer.ggml.model = gpt2`, pre-tokenizer `glm4`).
 *
 * Text becomes token ids in three steps, exactly as the Hugging Face `tokenizers` library does for GLM:
 *   1. pre-tokenization: the text is split into words by the GLM-4/GLM-5 regex (PCRE2, UTF + UCP), each
 *      matched piece and each unmatched gap being one word (the library's "Isolated" split);
 *   2. each word is seen as its UTF-8 bytes, one initial symbol per byte (the byte-level alphabet);
 *   3. adjacent symbols are merged, lowest merge rank first (ties: leftmost), until no ranked pair is left.
 * Decoding concatenates the bytes each id stands for (special tokens stand for their literal text).
 *
 * Special tokens ([gMASK], <|user|>, <think>, ...) are never recognised inside text: nf_tokenize_text treats
 * "<|user|>" typed by a user as plain characters. Only the chat renderer, which knows where a role marker
 * belongs, asks for a special token by name (nf_token_id / nf_tokenize_prompt), so a prompt cannot be
 * forged from user content.
 *
 * Invalid UTF-8 (possible in our input, impossible in the library's Rust strings) never fails: each maximal
 * valid run is pre-tokenized normally and every invalid byte becomes a word of its own, so
 * decode(encode(x)) == x for every byte string.
 *
 * A tokenizer is immutable after loading and may be used from several threads at once. */
#ifndef NF_TEXT_TOKENIZER_H
#define NF_TEXT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

typedef struct nf_tokenizer nf_tokenizer;

/* GGUF token types (llama.cpp numbering). */
enum { NF_TOKTYPE_NORMAL = 1, NF_TOKTYPE_UNKNOWN = 2, NF_TOKTYPE_CONTROL = 3, NF_TOKTYPE_USER_DEFINED = 4,
       NF_TOKTYPE_UNUSED = 5, NF_TOKTYPE_BYTE = 6 };

/* A growable list of token ids. Zero-initialise; free with nf_tokens_free. */
typedef struct {
    int32_t *ids;
    size_t n, cap;
} nf_tokens;

void nf_tokens_push(nf_tokens *t, int32_t id);
void nf_tokens_free(nf_tokens *t);

/* Load from GGUF metadata (tokenizer.ggml.*). NULL with nf_error() on failure. The tokenizer copies what it
 * needs; the file may be closed afterwards. */
nf_tokenizer *nf_tokenizer_from_gguf(const gguf_file *f);
/* Load from a Hugging Face tokenizer.json (a file path, or a directory holding tokenizer.json). */
nf_tokenizer *nf_tokenizer_load_hf(const char *path);
/* Load from a GGUF file path or, if `path` is a directory or ends in .json, a Hugging Face tokenizer. */
nf_tokenizer *nf_tokenizer_load(const char *path);
void nf_tokenizer_free(nf_tokenizer *t);

int32_t nf_tokenizer_n_vocab(const nf_tokenizer *t);
/* The GGUF pre-tokenizer name the tokenizer was built for ("glm4"). */
const char *nf_tokenizer_pre(const nf_tokenizer *t);

/* Encode text (no special-token recognition), appending to `out`. Returns 0, or -1 (only on internal
 * regex failures, which never happen for valid tokenizers). */
int nf_tokenize_text(const nf_tokenizer *t, const char *text, size_t len, nf_tokens *out);

/* Encode text in which added/special token texts ARE recognised, as the `tokenizers` library does
 * (leftmost-longest match of every control / user-defined token's text; the rest as text). Only for
 * trusted input: raw prompts written by the operator, debugging. Never for request content. */
int nf_tokenize_with_specials(const nf_tokenizer *t, const char *text, size_t len, nf_tokens *out);

/* The id of a token by its exact text: special/added tokens by content ("<|user|>"), normal tokens by the
 * bytes they stand for. -1 if there is none. */
int32_t nf_token_id(const nf_tokenizer *t, const char *text);
/* Same for a byte string of known length. */
int32_t nf_token_id_n(const nf_tokenizer *t, const char *text, size_t len);

/* The bytes token `id` decodes to (not NUL-terminated); NULL and *len = 0 for an out-of-range id. */
const char *nf_token_bytes(const nf_tokenizer *t, int32_t id, size_t *len);
/* The token's GGUF type (NF_TOKTYPE_*), 0 for an out-of-range id. */
int nf_token_type(const nf_tokenizer *t, int32_t id);
/* True for control and user-defined (added) tokens. */
bool nf_token_is_special(const nf_tokenizer *t, int32_t id);

/* Decode ids into a malloc'ed NUL-terminated byte string (*len without the NUL). Out-of-range ids are an
 * error (-1). */
int nf_detokenize(const nf_tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *len);

/* Well-known ids from metadata, -1 when absent. */
typedef struct {
    int32_t bos, eos, pad, eot, eom, unk;
} nf_special_ids;
nf_special_ids nf_tokenizer_special_ids(const nf_tokenizer *t);

/* Encode a prompt made of alternating pieces: text pieces are tokenized, special pieces are looked up by
 * exact content and must exist. `pieces[i]` has length `lens[i]`; `special[i]` says which kind it is.
 * Returns 0, or -1 naming an unknown special token. */
int nf_tokenize_pieces(const nf_tokenizer *t, size_t n_pieces, const char *const *pieces, const size_t *lens,
                       const bool *special, nf_tokens *out);

/* Internal constructor shared by the GGUF and Hugging Face loaders. `tokens[i]` are the GGUF strings (the
 * byte-level alphabet for normal tokens, literal text for control/user-defined ones); `merges` are "A B"
 * strings in rank order. Exposed for tests. */
typedef struct {
    const char *pre;               /* "glm4" */
    uint32_t n_vocab;
    const char *const *tokens;
    const uint32_t *token_lens;    /* may be NULL: NUL-terminated strings */
    const int32_t *types;          /* may be NULL: all normal */
    uint32_t n_merges;
    const char *const *merges;
    const uint32_t *merge_lens;    /* may be NULL */
    bool ignore_merges;            /* HF BPE option: a word that is one vocab entry is emitted directly */
    nf_special_ids special;
} nf_tokenizer_desc;
nf_tokenizer *nf_tokenizer_build(const nf_tokenizer_desc *d);

/* The pre-tokenizer regex for a GGUF pre name as we run it (PCRE2 syntax, \s spelled out as Oniguruma's
 * White_Space), and as tokenizer.json writes it; NULL if unsupported. */
const char *nf_pretokenizer_regex(const char *pre);
const char *nf_pretokenizer_hf_regex(const char *pre);

#endif
