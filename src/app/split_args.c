/* split_args.c — the layer-split command-line options (see split_args.h). */
#include "app/split_args.h"

#include <stdlib.h>
#include <string.h>

#include "util/error.h"

void nf_split_args_init(nf_split_args *a) { memset(a, 0, sizeof *a); }

static int parse_list(nf_split_args *a, const char *v) {
    a->n_starts = 0;
    const char *p = v;
    for (;;) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',') || x < 1 || x >= NF_MAX_LAYERS)
            return nf_fail("--split: expected auto or ascending layer indices like 20,40, got '%s'", v);
        if (a->n_starts == NF_MAX_STAGES - 1)
            return nf_fail("--split: at most %d split points (%d stages), got '%s'", NF_MAX_STAGES - 1, NF_MAX_STAGES, v);
        if (a->n_starts > 0 && x <= a->starts[a->n_starts - 1])
            return nf_fail("--split: split points must be ascending, got '%s'", v);
        a->starts[a->n_starts++] = (int)x;
        if (!*end) break;
        p = end + 1;
    }
    a->list = true;
    return 0;
}

int nf_split_args_take(nf_split_args *a, int argc, char **argv, int *i) {
    const char *opt = argv[*i];
    if (strcmp(opt, "--gpus") && strcmp(opt, "--split")) return 0;
    if (*i + 1 >= argc) return nf_fail("%s: missing value", opt);
    const char *v = argv[++*i];
    if (!strcmp(opt, "--gpus")) {
        char *end;
        long n = strtol(v, &end, 10);
        if (end == v || *end || n < 1 || n > NF_MAX_STAGES)
            return nf_fail("--gpus: expected 1..%d, got '%s'", NF_MAX_STAGES, v);
        a->gpus = (int)n;
        return 1;
    }
    if (!strcmp(v, "auto")) {
        a->list = false;
        a->n_starts = 0;
        return 1;
    }
    return parse_list(a, v) < 0 ? -1 : 1;
}

int nf_split_args_check(const nf_split_args *a) {
    if (a->list && a->gpus && a->n_starts != a->gpus - 1)
        return nf_fail("--split: %d split point%s make%s %d stages, but --gpus asks for %d", a->n_starts,
                       a->n_starts == 1 ? "" : "s", a->n_starts == 1 ? "s" : "", a->n_starts + 1, a->gpus);
    return 0;
}

int nf_split_args_stages(const nf_split_args *a) {
    if (a->list) return a->n_starts + 1;
    return a->gpus ? a->gpus : 1;
}

int nf_split_args_plan(const nf_split_args *a, const nf_model *m, int64_t ctx, nf_split_plan *out) {
    if (nf_split_args_check(a) < 0) return -1;
    if (a->list) return nf_split_plan_list(m, a->n_starts, a->starts, ctx, out) < 0 ? nf_fail_prefix("--split") : 0;
    return nf_split_plan_auto(m, nf_split_args_stages(a), ctx, out) < 0 ? nf_fail_prefix("--gpus") : 0;
}

void nf_split_args_usage(FILE *f, int indent, int width) {
    static const char *const lines[][2] = {
        {"--gpus N", "split the layers into N pipeline stages (1..16); with --backend cuda stage k"},
        {"", "runs on device k % device_count (one GPU: all stages share it)"},
        {"--split S", "auto (default: balance weights + state at --ctx) or L1,L2,... the layers"},
        {"", "where stages 2.. start; the memory plan is printed at load"},
    };
    for (size_t k = 0; k < sizeof lines / sizeof lines[0]; k++)
        fprintf(f, "%*s%-*s%s\n", indent, "", width, lines[k][0], lines[k][1]);
}
