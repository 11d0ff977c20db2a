/* spec_args.c — the speculative-decoding command-line options of nf run/chat and nf-server (see spec_args.h). */
#include "app/spec_args.h"

#include <stdlib.h>
#include <string.h>

#include "util/error.h"

void nf_spec_args_init(nf_spec_args *a) {
    memset(a, 0, sizeof *a);
    a->params = nf_spec_defaults();
}

/* the drafter names nf_drafter_from_spec knows; checked before any model is loaded so a typo fails at once */
static bool draft_form_ok(const char *v) {
    return !strcmp(v, "lookup") || !strcmp(v, "mtp") || (!strncmp(v, "model:", 6) && v[6]);
}

int nf_spec_args_take(nf_spec_args *a, int argc, char **argv, int *i) {
    const char *opt = argv[*i];
    bool known = !strcmp(opt, "--draft") || !strcmp(opt, "--draft-max") || !strcmp(opt, "--spec-mode") ||
                 !strcmp(opt, "--spec-set");
    if (!known) return 0;
    if (*i + 1 >= argc) return nf_fail("%s: missing value", opt);
    const char *v = argv[++*i];
    if (!strcmp(opt, "--draft")) {
        if (!draft_form_ok(v)) return nf_fail("--draft: expected lookup, mtp or model:FILE, got '%s'", v);
        a->draft = v;
        return 1;
    }
    a->tuned = true;
    if (!strcmp(opt, "--draft-max")) {
        char *end;
        long k = strtol(v, &end, 10);
        if (end == v || *end || k < 1 || k > 32) return nf_fail("--draft-max: expected 1..32, got '%s'", v);
        a->params.draft_max = (int)k;
    } else if (!strcmp(opt, "--spec-mode")) {
        if (nf_spec_mode_parse(v, &a->params.mode) < 0) return nf_fail_prefix("--spec-mode");
    } else if (nf_spec_params_set(&a->params, v) < 0) {
        return nf_fail_prefix("--spec-set");
    }
    return 1;
}

int nf_spec_args_check(const nf_spec_args *a) {
    if (a->tuned && !a->draft) return nf_fail("--draft-max, --spec-mode and --spec-set need --draft D");
    return 0;
}

nf_spec *nf_spec_args_make(const nf_spec_args *a, const nf_model *target, int n_threads) {
    nf_drafter *d = nf_drafter_from_spec(a->draft, target, n_threads);
    if (!d) return NULL;
    return nf_spec_new(d, &a->params);
}

void nf_spec_args_usage(FILE *f, int indent, int width) {
    static const char *const lines[][2] = {
        {"--draft D", "speculative decoding with drafter D: lookup (prompt n-grams), mtp, or"},
        {"", "model:FILE (a draft GGUF with the same tokenizer); see docs/speculative.md"},
        {"--draft-max K", "drafts verified per cycle (1..32, default 6)"},
        {"--spec-mode M", "serial | conservative (default: speculate while it pays) | speculative"},
        {"--spec-set K=V", "any speculative parameter (reasoning=1, window, margin, warmup, backoff_min,"},
        {"", "backoff_max, min_cycles, no_defer, seed; docs/speculative.md), repeatable"},
    };
    for (size_t k = 0; k < sizeof lines / sizeof lines[0]; k++)
        fprintf(f, "%*s%-*s%s\n", indent, "", width, lines[k][0], lines[k][1]);
}
