/* disk_cache.h — the on-disk state cache (--kv-disk-dir, --kv-disk-space-mb).
 *
 * KDA state cannot be rewound and a restart loses every checkpoint, so whole states are saved to disk at prompt
 * ends (message / tool boundaries: where the next turn of the same conversation will continue) and loaded back
 * when a later prompt — possibly after a restart — starts with a saved prefix that is longer than what the live
 * state can give.
 *
 * One file per saved prefix, named <hash of the prefix's token ids>-<token count>.nfkv. Inside: a header (magic,
 * version, model fingerprint, token count, payload size, FNV-1a 64 checksum of the payload), then the exact
 * tokens (authoritative: a hash match is confirmed token by token), the logits after the last token, and the
 * state arrays (KDA conv windows and recurrent states, MLA latents, pooled and open indexer keys). Files are
 * written to a temporary name and renamed into place, so a crash never leaves a half file under a real name. A
 * file that fails any check (truncated, checksum, other model, token mismatch) is skipped and deleted. When
 * the directory exceeds its budget, least recently used files go first (a load refreshes a file's time); the
 * file just written is kept. */
#ifndef NF_SERVER_DISK_CACHE_H
#define NF_SERVER_DISK_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/session.h"

typedef struct nf_disk_cache nf_disk_cache;

/* `fingerprint` identifies the model (files of another model are ignored). NULL with nf_error() if the
 * directory cannot be created. */
nf_disk_cache *nf_disk_cache_open(const char *dir, uint64_t budget_bytes, uint64_t fingerprint, int64_t min_tokens);
void nf_disk_cache_close(nf_disk_cache *c);

/* Save the session's live state (its whole history) if it has at least min_tokens and is not stored yet.
 * 1 saved, 0 skipped, -1 error (nf_error()). */
int nf_disk_cache_save(nf_disk_cache *c, nf_session *s);

/* Find the longest stored prefix of ids[0..n) longer than `better_than` tokens and make the session continue
 * from it. Returns the tokens loaded (0: nothing better stored). */
int64_t nf_disk_cache_load(nf_disk_cache *c, nf_session *s, const int32_t *ids, size_t n, int64_t better_than);

/* Files and bytes in the directory (tests, metrics). */
void nf_disk_cache_usage(nf_disk_cache *c, int *files, uint64_t *bytes);

/* FNV-1a 64 of bytes, continuing from h (start with NF_FNV_INIT). */
#define NF_FNV_INIT 0xcbf29ce484222325ULL
uint64_t nf_fnv1a(uint64_t h, const void *p, size_t n);

#endif
