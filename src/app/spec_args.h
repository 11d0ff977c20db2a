/* spec_args.h — the one parser of the speculative-decoding command-line options (`--draft D`, `--draft-max K`,
 * `--spec-mode M`, `--spec-set K=V`) shared by `nf run/chat` and nf-server, so both accept and refuse the same
 * values with the same messages, and the one place that turns them into a decoder (engine/spec.h). */
#ifndef NF_APP_SPEC_ARGS_H
#define NF_APP_SPEC_ARGS_H

#include <stdbool.h>
#include <stdio.h>

#include "engine/spec.h"

typedef struct {
    const char *draft;     /* lookup | mtp | model:FILE (NULL: serial decoding) */
    nf_spec_params params; /* the defaults with every option applied in command-line order */
    bool tuned;            /* a --draft-max / --spec-mode / --spec-set was given */
} nf_spec_args;

void nf_spec_args_init(nf_spec_args *a);
/* If argv[*i] is one of the options: consume it and its value (*i moves to the value) and return 1; not one of
 * them: 0; a missing or bad value: -1 with nf_error() naming the option and the value. A --draft value is
 * checked for its form here (the drafter itself is made by nf_spec_args_make). */
int nf_spec_args_take(nf_spec_args *a, int argc, char **argv, int *i);
/* After the command line: tuning options without --draft are refused (0, or -1 with nf_error()). */
int nf_spec_args_check(const nf_spec_args *a);
/* The decoder the options ask for (a->draft set): NULL with nf_error() when the drafter cannot be made (no MTP
 * block, an unreadable draft model, another vocabulary). */
nf_spec *nf_spec_args_make(const nf_spec_args *a, const nf_model *target, int n_threads);
/* The options' --help lines; `indent` spaces before each option, the text from column indent + width. */
void nf_spec_args_usage(FILE *f, int indent, int width);

#endif
