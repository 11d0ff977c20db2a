/* chat_template.h — the GLM-5.3-Flash chat template, hand-written in C.
 *
 * nf_chat_render turns an OpenAI-style conversation (Jansson: an array of {role, content, reasoning_content,
 * tool_calls, tool_call_id, ...}) and an optional tools array into the exact prompt bytes that transformers'
 * apply_chat_template produces with the released template (tests/data/chat/cases.json holds transformers'
 * renderings; tests/c/test_chat_template.c compares bytes). The layout, in short (spec §5):
 *   [gMASK]<sop><|system|>Reasoning Effort: Max            (Low/High when asked, Max otherwise)
 *   <|system|>\n# Tools ... <tools>\n{json per tool}\n</tools> ... XML format:\n<tool_call>{function-name}...
 *   <|user|>TEXT   <|system|>TEXT
 *   <|assistant|><think>REASONING</think>ANSWER<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>
 *   <|observation|><tool_response>RESULT</tool_response>...   (one block per run of tool messages)
 *   <|assistant|><think>                                  (generation prompt)
 * Reasoning of past turns is kept unless clear_thinking (then only turns after the last user message keep
 * it); reasoning is read from reasoning_content, thinking or reasoning (first non-null, as transformers
 * aliases them) or from "<think>...</think>" inside content. Tool results are reordered to follow the
 * assistant's tool_calls when every id matches uniquely. JSON values are printed as Python's
 * json.dumps(ensure_ascii=False) prints them (key order kept, ", " and ": " separators, float repr).
 *
 * Thinking off (enable_thinking = false) is not part of the released template: the generation prompt then
 * ends "<|assistant|><think></think>", the form the template gives past turns without reasoning.
 *
 * The result keeps track of which bytes are special tokens that the TEMPLATE emitted (role markers,
 * <think>, <tool_call>, ...): nf_prompt_tokenize encodes those by id and everything that came from the
 * request as plain text, so text typed by a user can never become a control token. */
#ifndef NF_TEXT_CHAT_TEMPLATE_H
#define NF_TEXT_CHAT_TEMPLATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "text/tokenizer.h"

typedef struct {
    bool add_generation_prompt;  /* end with "<|assistant|><think>" */
    bool enable_thinking;        /* false: generation prompt ends "<think></think>" */
    const char *reasoning_effort;/* "low" / "high"; anything else (or NULL) renders Max */
    bool clear_thinking;         /* drop reasoning of turns before the last user message */
} nf_chat_opts;

/* add_generation_prompt = true, enable_thinking = true, effort NULL (Max), clear_thinking = false. */
nf_chat_opts nf_chat_opts_default(void);

typedef struct {
    size_t off, len;
    bool special;   /* one special token whose text is text[off, off+len) */
} nf_prompt_piece;

typedef struct {
    char *text;     /* NUL-terminated rendering */
    size_t len;
    nf_prompt_piece *pieces; /* covers text in order; adjacent text pieces are merged */
    size_t n_pieces;
} nf_prompt;

/* Render. `tools` may be NULL. Returns 0, or -1 with nf_error() (not an array, a message that is not an
 * object, tool-call arguments that are neither an object nor a JSON string holding one). */
int nf_chat_render(const json_t *messages, const json_t *tools, const nf_chat_opts *opts, nf_prompt *out);
void nf_prompt_free(nf_prompt *p);

/* Token ids of a rendered prompt (special pieces by id, the rest as text). */
int nf_prompt_tokenize(const nf_tokenizer *t, const nf_prompt *p, nf_tokens *out);

/* Python json.dumps(v, ensure_ascii=False) of a Jansson value; malloc'ed, NUL-terminated. */
char *nf_json_dumps_py(const json_t *v, size_t *len);
/* Python repr() of a double, e.g. 1.0, 1e-07, 1e+20, 0.1. Writes at most 32 bytes including the NUL. */
void nf_py_float_repr(double d, char out[32]);

/* Is this exact string one of GLM's added/special token texts (<|user|>, <think>, ...)? */
bool nf_glm_is_special_text(const char *s, size_t n);

#endif
