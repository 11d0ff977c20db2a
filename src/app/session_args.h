/* session_args.h — the session options the programs that open one share (nf run/chat, nf-server): --backend
 * cpu|cuda (the name check and the session's backend factory; the CUDA factory exists in the builds `make cuda`
 * makes, NF_CUDA defined, elsewhere "cuda" is refused with a message that says how to get it) and
 * --prefill-chunk N. */
#ifndef NF_SESSION_ARGS_H
#define NF_SESSION_ARGS_H

#include "engine/session.h"

/* 0 with *factory set (NULL: the CPU backend) for "cpu" or "cuda"; -1 with nf_error() otherwise. prog names the
 * program in the message of a build without CUDA (build/cuda/<prog> is the one to run). */
int nf_backend_arg(const char *name, const char *prog, nf_backend_factory *factory);
/* 0 with *chunk set for a whole number of tokens in 1..65536 (the session's prefill_chunk); -1 with nf_error()
 * otherwise */
int nf_prefill_chunk_arg(const char *v, int *chunk);

#endif
