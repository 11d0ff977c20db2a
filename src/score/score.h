/* score.h — floor 4: teacher-forced scoring of a reference set against one model (what nf-score runs).
 *
 * A reference set is JSONL, one case per line:
 *   {"id": "c001", "prompt_tokens": [ids...] | "prompt": "text",
 *    "continuation_tokens": [ids...] | "continuation": "text",
 *    "ref_nll": 4.2,                      optional: the reference's mean NLL of the continuation
 *    "ref_greedy_prefix": 7,              optional: the reference's own full-pass greedy prefix
 *    "ref_topk": [[[id, logprob], ...] per continuation token]   optional: the reference's top-k log-probs}
 * Token ids win over text; text is encoded with the model's tokenizer without special-token recognition.
 *
 * Per case the model runs ONE teacher-forced prefill of prompt + continuation (all logits), and:
 *   nll            mean over continuation tokens c_i of -log softmax(logits at the position before c_i)[c_i]
 *   first match    argmax after the prompt == c_0
 *   greedy prefix  the number of leading continuation tokens equal to the argmax at their position. While the
 *                  argmax equals the continuation, a greedy decode's context IS the teacher-forced context, and
 *                  the engine gives bit-identical logits for prefill and token-by-token decode
 *                  (tests/c/test_forward_state.c), so this is exactly the length of the prefix a greedy decode
 *                  from the prompt reproduces — without running one.
 *   top-k          with ref_topk: mean |logprob - reference logprob| over the reference's top-k entries, and how
 *                  many positions' argmax equals the reference's top-1.
 * The argmax of every continuation position is kept, so two models can be compared position by position. */
#ifndef NF_SCORE_SCORE_H
#define NF_SCORE_SCORE_H

#include <stdbool.h>
#include <stdint.h>

#include "model/backend.h"
#include "model/model.h"
#include "model/state.h"
#include "text/tokenizer.h"

typedef struct {
    char *id;
    int32_t *prompt;
    int n_prompt;
    int32_t *cont;
    int n_cont;
    double ref_nll;          /* NAN when absent */
    int ref_greedy_prefix;   /* -1 when absent */
    int ref_k;               /* entries per position in ref_ids / ref_lp (0: none) */
    int32_t *ref_ids;        /* [n_cont][ref_k] */
    float *ref_lp;           /* [n_cont][ref_k] */
} nf_score_case;

typedef struct {
    nf_score_case *cases;
    int n;
} nf_score_set;

/* Load a JSONL reference set. `tok` (may be NULL) encodes cases given as text; without it every case needs
 * token ids. 0, or -1 with nf_error() naming the file, line and field. */
int nf_score_set_load(const char *path, const nf_tokenizer *tok, nf_score_set *out);
void nf_score_set_free(nf_score_set *s);

typedef struct {
    double nll_sum;          /* sum over the continuation tokens */
    int n_tok;
    bool first_match;
    int greedy_prefix;
    double topk_abs_dlp_sum; /* over the reference top-k entries (0 without ref_topk) */
    int topk_n;              /* entries summed */
    int top1_agree;          /* positions whose argmax == the reference top-1 (ref_topk only) */
    int32_t *argmax;         /* [n_cont] (owned; nf_score_result_free) */
    double seconds;
} nf_score_result;

/* Score one case: `st` is reset and reused (its capacity grows as needed). Token ids must be < n_vocab.
 * 0, or -1 with nf_error(). */
int nf_score_case_run(nf_backend *be, nf_state *st, const nf_model *m, const nf_score_case *c, nf_score_result *r);
void nf_score_result_free(nf_score_result *r);

/* Weight bytes one decoded token reads from the model file: every trunk tensor once, except the token
 * embedding (one row) and the routed experts (n_expert_used of n_expert). */
double nf_score_weight_bytes_per_token(const nf_model *m);

#endif
