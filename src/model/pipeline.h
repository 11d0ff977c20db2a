/* pipeline.h — the forward pass split by layers over several backends (pipeline / layer-split placement,
 * issue 11: a model larger than one GPU's memory, each GPU holding its layers' weights and state).
 *
 * A pipeline is N stages; stage k runs layers [layer_begin, layer_end) on its own backend, stage 0 also embeds
 * the tokens and the last stage also runs the final norm and the head. The stages' ranges are contiguous,
 * ascending, non-empty and cover every trunk layer. Each stage runs its layers through the same block code as
 * the single-backend forward (forward.c, nf_forward_part_run); between stages the hidden streams X
 * ([T][hc_count][n_embd] f32) — and, when a later stage's first MLA layer shares the indexer selection of an
 * earlier stage's layer, that selection ([T][width] int32) — are handed over backend to backend when the stages'
 * backends are of one kind with a from_peer op (backend.h; CUDA: NCCL send/recv between two GPUs, a device copy
 * on one, cuda_peer.cu): stage k's stream buffer lives in its own memory, the next stage's copy is taken from it
 * in stream order, and the host waits for nothing between stages. Then the host enqueues stage k+1 of a chunk and
 * stage k of the next chunk without waiting, so on several GPUs a chunked prefill's stages overlap (stage 0 works
 * on chunk i+1 while stage 1 works on chunk i). Otherwise (or with NF_PIPELINE_HANDOVER=host) THROUGH THE HOST:
 * the backend's to_host, then the next backend's from_host. CUDA graphs per stage are later work (a pipeline
 * forward runs the blocks directly).
 *
 * The sequence state is one nf_state per stage holding only that stage's layers (nf_state_create_layers: no
 * memory for the other stages' caches), in the stage backend's memory. Prefill, decode, snapshot/restore and
 * reset act on every stage's state; the stages' positions move together.
 *
 * The results are bit-identical to one backend running all layers when the stages' backends compute the same
 * arithmetic (tests/c/test_pipeline.c: CPU stages against one CPU backend). */
#ifndef NF_MODEL_PIPELINE_H
#define NF_MODEL_PIPELINE_H

#include <stdint.h>

#include "model/backend.h"
#include "model/forward.h"
#include "model/state.h"

#define NF_MAX_STAGES 16

typedef struct {
    nf_backend *be;              /* not owned */
    int layer_begin, layer_end;  /* [begin, end) */
} nf_stage;

typedef struct {
    const nf_model *model;
    int n_stages;
    nf_stage stage[NF_MAX_STAGES];
    int handover_dev;            /* 1: stages hand over through from_peer (set by nf_pipeline_init), 0: the host */
} nf_pipeline;

/* Check and set up a pipeline of n stages; the hand-over goes backend to backend when every stage's backend has
 * the same from_peer op, unless NF_PIPELINE_HANDOVER=host. 0, or -1 with nf_error() naming the problem: no or too many stages,
 * a stage without a backend or on another model, an empty stage, a range outside [0, n_layer), stages not
 * contiguous and ascending, layers not covered. */
int nf_pipeline_init(nf_pipeline *p, int n, const nf_stage *stages);

/* The stage ranges from the layers where stages 2.. start (starts[0..n-2]; the pipeline has n = n_starts + 1
 * stages): stage 0 is [0, starts[0]), ..., the last [starts[n-2], n_layer). Checked as nf_pipeline_init does. */
int nf_pipeline_ranges(int n_layer, int n_starts, const int *starts, nf_stage *stages);

/* One state per stage (each holding only its stage's layers, in its backend's memory). */
typedef struct {
    int n_stages;
    nf_state *st[NF_MAX_STAGES];
} nf_pipeline_state;

nf_pipeline_state *nf_pipeline_state_create(const nf_pipeline *p, int64_t cap);
void nf_pipeline_state_free(nf_pipeline_state *ps);
void nf_pipeline_state_reset(nf_pipeline_state *ps);
/* The context limit of every stage's state (nf_state_set_limit). */
void nf_pipeline_state_set_limit(nf_pipeline_state *ps, int64_t limit);
int64_t nf_pipeline_state_pos(const nf_pipeline_state *ps);
/* Deep copy of every stage's state (nf_state_snapshot) / copy back (nf_state_restore); same pipeline. */
nf_pipeline_state *nf_pipeline_state_snapshot(const nf_pipeline_state *ps);
int nf_pipeline_state_restore(nf_pipeline_state *dst, const nf_pipeline_state *src);
/* Bytes held by all stages' states. */
size_t nf_pipeline_state_bytes(const nf_pipeline_state *ps);

/* nf_forward_ex over the pipeline: T tokens, logits (host) [T][n_vocab] when all_logits else the last row
 * (NULL: none), dump as in nf_forward, hidden (host, optional) from the last stage. */
int nf_pipeline_forward(const nf_pipeline *p, nf_pipeline_state *ps, const int32_t *tokens, int T, float *logits,
                        int all_logits, nf_topk_dump *dump, float *hidden);

/* nf_prefill over the pipeline. */
int nf_pipeline_prefill(const nf_pipeline *p, nf_pipeline_state *ps, const int32_t *tokens, int64_t n, int chunk,
                        float *logits, int all_logits, nf_topk_dump *dump);

/* The pipeline presented as one backend (pipeline_backend.c), for programs written against nf_forward and
 * nf_state (nf-bench): its `forward` runs nf_pipeline_forward, and nf_backend_state_create gives a hooked
 * nf_state over an nf_pipeline_state (reset, reserve, snapshot/restore, checkpoint/rollback and a synthetic fill
 * (state_fill.h: each stage fills its layers with the keys one state would use) act on every stage; restore also
 * copies to and from a host state holding every layer, which is how nf_state_fill_measure reads it). Its blocks cannot be called one by one, nor can it be a speculative
 * drafter's target that needs hidden states. p must outlive it; the stage backends stay the caller's. */
nf_backend *nf_pipeline_backend_create(const nf_pipeline *p);

#endif
