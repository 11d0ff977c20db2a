/* split_args.h — the one parser of the layer-split options (`--gpus N`, `--split auto|L1,L2,...`), so every
 * program that runs a pipeline (model/pipeline.h; nf-bench today) accepts and refuses the same values with the
 * same messages, and the one place that turns them into a split plan (model/split_plan.h).
 *
 *   --gpus N        N pipeline stages (1..16); on CUDA stage k runs on device k % device_count
 *   --split auto    balance the stages by weight bytes + state bytes at the context size (default)
 *   --split L1,...  the layers where stages 2.. start (ascending; N-1 of them; without --gpus, N = count + 1) */
#ifndef NF_APP_SPLIT_ARGS_H
#define NF_APP_SPLIT_ARGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "model/split_plan.h"

typedef struct {
    int gpus;                        /* 0: not given */
    bool list;                       /* --split L1,... given (else auto) */
    int n_starts;
    int starts[NF_MAX_STAGES - 1];
} nf_split_args;

void nf_split_args_init(nf_split_args *a);
/* If argv[*i] is --gpus or --split: consume it and its value (*i moves to the value) and return 1; another
 * option: 0; a missing or bad value: -1 with nf_error() naming the option and the value. */
int nf_split_args_take(nf_split_args *a, int argc, char **argv, int *i);
/* After the command line: --gpus N and a list of other than N-1 points are refused (0, or -1 with nf_error()). */
int nf_split_args_check(const nf_split_args *a);
/* Stages the options ask for (1 when neither was given). */
int nf_split_args_stages(const nf_split_args *a);
/* The plan for a model at ctx tokens of state: auto or the list (whose points are checked against the model
 * here). 0, or -1 with nf_error(). */
int nf_split_args_plan(const nf_split_args *a, const nf_model *m, int64_t ctx, nf_split_plan *out);
/* The options' --help lines; `indent` spaces before each option, the text from column indent + width. */
void nf_split_args_usage(FILE *f, int indent, int width);

#endif
