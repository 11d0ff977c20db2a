/* split_plan.h — where a pipeline (pipeline.h) splits the layers, and what each stage will hold in memory.
 *
 * A stage holds the weights of its layers (plus token_embd on stage 0, output_norm and the lm_head on the last
 * stage) and the sequence state of its layers at the context size (f32, as state.h allocates it: per KDA layer
 * the conv window and S; per MLA layer ctx latent rows, ctx/kpool + 1 pooled keys and the open-pool rows).
 * `auto` chooses the contiguous split that minimises the largest stage (weights + state at ctx), so the most
 * loaded device holds as little as possible; an explicit list names the layers where stages 2.. start. The plan
 * is printed at load and checked against each device's free memory, so a model that does not fit is refused
 * with the numbers before any weight is copied. */
#ifndef NF_MODEL_SPLIT_PLAN_H
#define NF_MODEL_SPLIT_PLAN_H

#include <stdint.h>
#include <stdio.h>

#include "model/model.h"
#include "model/pipeline.h"

typedef struct {
    int layer_begin, layer_end;
    double weight_bytes;   /* its layers' tensors (+ embedding on stage 0, output norm and head on the last) */
    double state_bytes;    /* its layers' state at ctx tokens */
} nf_stage_plan;

typedef struct {
    int n_stages;
    int64_t ctx;
    nf_stage_plan stage[NF_MAX_STAGES];
} nf_split_plan;

/* Bytes of layer l's tensors in their stored types. */
double nf_layer_weight_bytes(const nf_model *m, int l);
/* Bytes of layer l's state holding ctx tokens (0 <= l < n_layer). */
double nf_layer_state_bytes(const nf_hparams *hp, int l, int64_t ctx);

/* The plan for explicit split points (n_starts = n_stages - 1 layers where stages 2.. start; checked as
 * nf_pipeline_ranges does). 0, or -1 with nf_error(). */
int nf_split_plan_list(const nf_model *m, int n_starts, const int *starts, int64_t ctx, nf_split_plan *out);
/* The balanced plan of n_stages (1..min(NF_MAX_STAGES, n_layer)): the contiguous split minimising the largest
 * stage's weights + state at ctx (ties: the earliest split points). 0, or -1 with nf_error(). */
int nf_split_plan_auto(const nf_model *m, int n_stages, int64_t ctx, nf_split_plan *out);

/* The stages' ranges as pipeline stages (backends left NULL). */
void nf_split_plan_stages(const nf_split_plan *p, nf_stage *stages);

/* Print the plan, a line per stage: layers, weight GB, state GB at ctx, and when free_bytes is given (per stage,
 * may be NULL) the device's free memory, device[k] naming it (NULL: the stage index). */
void nf_split_plan_print(FILE *f, const nf_split_plan *p, const double *free_bytes, const int *device);
/* 0 when every stage's weights + state + headroom fit in free_bytes[k]; else -1 with nf_error() naming the first
 * stage that does not fit, its numbers and its device. */
int nf_split_plan_check(const nf_split_plan *p, const double *free_bytes, const int *device, double headroom);

#endif
