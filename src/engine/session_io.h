/* session_io.h — moving a session's whole live state in and out (an additive extension of session.h, defined in
 * session.c), for the server's on-disk state cache (src/server/disk_cache.c).
 *
 * nf_session_state gives read access to the live state (it has consumed nf_session_tokens; the logits that
 * follow are nf_session_logits). nf_session_adopt makes the session continue from a saved state instead:
 * the live state becomes a copy of `st` (which has consumed exactly ids[0..n)), `logits` are the logits after
 * ids[n-1]; the old history and checkpoints are dropped and a checkpoint is taken at n. */
#ifndef NF_ENGINE_SESSION_IO_H
#define NF_ENGINE_SESSION_IO_H

#include <stddef.h>
#include <stdint.h>

#include "engine/session.h"
#include "model/state.h"

const nf_state *nf_session_state(const nf_session *s);
/* 0, or -1 with nf_error() (the session is then empty). */
int nf_session_adopt(nf_session *s, const int32_t *ids, size_t n, const nf_state *st, const float *logits);

#endif
