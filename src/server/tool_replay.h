/* tool_replay.h — exact replay of assistant turns that ended in tool calls, keyed by tool-call id.
 *
 * A stateless client sends the whole conversation again on every turn. Its echo of our last assistant turn
 * (reasoning, text, tool calls with parsed arguments) re-renders through the chat template into tokens that
 * need not equal what the model sampled: the template strips the text, writes arguments in its own JSON
 * style, drops the model's whitespace between tags, and BPE may split the same bytes differently. The live
 * state holds the sampled tokens, so the new prompt would diverge from it at that turn and everything after
 * would be prefilled again.
 *
 * So when a turn ends with tool calls, the worker stores the turn's exact tokens (after <|assistant|>, up to
 * the stop token) under each tool-call id, with a canonical form of what the client will see (reasoning, text,
 * tool names and arguments). When a later request contains an assistant message whose tool-call id is known
 * and whose visible content equals that canonical form, the message's rendered tokens are replaced by the
 * stored ones: the prompt then extends the live history exactly. A client that edited the turn gets the
 * template's rendering. Bounded (oldest entries dropped first); process-wide and thread-safe. */
#ifndef NF_SERVER_TOOL_REPLAY_H
#define NF_SERVER_TOOL_REPLAY_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* Canonical form of an assistant turn: reasoning, text (both as given), [[name, arguments-object], ...].
 * malloc'ed JSON text. `calls` is an OpenAI-shaped tool_calls array (function.name, function.arguments as an
 * object or a JSON string); leading/trailing whitespace of the text is ignored, as the template strips it. */
char *nf_replay_canon(const char *reasoning, const char *text, const json_t *calls);

/* Store a turn under every id in ids[0..n_ids). */
void nf_replay_store(const char *const *ids, int n_ids, const int32_t *toks, size_t n, const char *canon);
/* Look a turn up by one of its ids; if found and its canonical form equals `canon`, copy its tokens
 * (malloc'ed *toks, *n) and return 1; else 0. */
int nf_replay_lookup(const char *id, const char *canon, int32_t **toks, size_t *n);
/* Entries held (tests). */
int nf_replay_count(void);

#endif
