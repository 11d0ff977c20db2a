/* prefix_cache.h — in-RAM copies of conversations the live state had to give up.
 *
 * There is one live state. When a request for another conversation arrives (a Claude Code subagent, a second
 * client), the live state is rolled back or reset and the first conversation's state is gone; when that
 * conversation continues, it would be prefilled from scratch. So before a prompt discards a substantial part of
 * the live history, the worker hands the live state to this cache: a full snapshot of the state (its whole
 * history: prompt and generated turn), the logits after it, and a checkpoint at its last prompt end with the
 * logits there. A later prompt that extends the snapshot's tokens resumes from the snapshot; one that extends
 * only the prompt-end part (the client re-rendered the generated turn differently) resumes from the snapshot
 * rolled back to that checkpoint (valid: the state only moved forward from there).
 *
 * Entries are kept least-recently-used first within a byte budget; an entry whose tokens are a prefix of a
 * newer one of the same conversation is replaced by it. Used by the worker thread only. */
#ifndef NF_SERVER_PREFIX_CACHE_H
#define NF_SERVER_PREFIX_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/session.h"
#include "model/state.h"

typedef struct nf_prefix_cache nf_prefix_cache;

nf_prefix_cache *nf_prefix_cache_new(uint64_t budget_bytes);
void nf_prefix_cache_free(nf_prefix_cache *c);

/* Keep a copy of the session's live state. `ck` (may be NULL or empty) is a checkpoint of the live state at an
 * earlier position (its last prompt end) and `ck_logits` the logits there: both are taken over (ck is zeroed,
 * ck_logits freed by the cache in every case). 1 kept, 0 not (too big, already held), -1 error. */
int nf_prefix_cache_put(nf_prefix_cache *c, nf_session *s, nf_state_ckpt *ck, float *ck_logits);

/* Resume the session from the longest held prefix of ids[0..n) longer than better_than tokens. Returns the
 * tokens resumed (0: none). */
int64_t nf_prefix_cache_get(nf_prefix_cache *c, nf_session *s, const int32_t *ids, size_t n, int64_t better_than);

int nf_prefix_cache_count(const nf_prefix_cache *c);

#endif
