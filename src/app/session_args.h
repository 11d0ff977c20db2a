/* backend_arg.h — the programs' --backend cpu|cuda option (nf run/chat, nf-server): the name check and the
 * session's backend factory. The CUDA factory exists in the builds `make cuda` makes (NF_CUDA defined); elsewhere
 * "cuda" is refused with a message that says how to get it. */
#ifndef NF_BACKEND_ARG_H
#define NF_BACKEND_ARG_H

#include "engine/session.h"

/* 0 with *factory set (NULL: the CPU backend) for "cpu" or "cuda"; -1 with nf_error() otherwise. prog names the
 * program in the message of a build without CUDA (build/cuda/<prog> is the one to run). */
int nf_backend_arg(const char *name, const char *prog, nf_backend_factory *factory);

#endif
