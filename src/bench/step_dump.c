/* step_dump.c — the JSON-lines writer of nf-bench --dump-steps (format in step_dump.h). */
#include "bench/step_dump.h"

#include <math.h>

#include "bench/probe.h"
#include "util/error.h"

static int finish(FILE *f) {
    if (fputc('\n', f) == EOF || fflush(f) != 0 || ferror(f)) return nf_fail("step dump: write failed");
    return 0;
}

int nf_step_dump_frontier(FILE *f, int64_t ctx, const int32_t *prompt_ids, int64_t n_prompt, int gen, int topk) {
    fprintf(f, "{\"type\":\"frontier\",\"ctx\":%lld,\"prompt_tokens\":%lld,\"gen_tokens\":%d,\"topk\":%d,\"prompt_ids\":[",
            (long long)ctx, (long long)n_prompt, gen, topk);
    for (int64_t i = 0; i < n_prompt; i++) fprintf(f, i ? ",%d" : "%d", (int)prompt_ids[i]);
    fprintf(f, "],\"prompt_fnv64\":\"%016llx\"}",
            (unsigned long long)nf_ids_fnv64(NF_FNV64_INIT, prompt_ids, (size_t)n_prompt));
    return finish(f);
}

static void print_logit(FILE *f, float v) {
    if (isnan(v)) fputs("\"nan\"", f);
    else if (isinf(v)) fputs(v > 0 ? "\"inf\"" : "\"-inf\"", f);
    else fprintf(f, "%.9g", (double)v);
}

int nf_step_dump_step(FILE *f, int64_t ctx, int step, int32_t token, const int32_t *ids, const float *vals, int k) {
    fprintf(f, "{\"type\":\"step\",\"ctx\":%lld,\"step\":%d,\"token\":%d,\"topk\":[", (long long)ctx, step, (int)token);
    for (int j = 0; j < k; j++) {
        fprintf(f, j ? ",[%d," : "[%d,", (int)ids[j]);
        print_logit(f, vals[j]);
        fputc(']', f);
    }
    fputs("]}", f);
    return finish(f);
}

int nf_step_dump_end(FILE *f, int64_t ctx, int steps, uint64_t gen_hash) {
    fprintf(f, "{\"type\":\"end\",\"ctx\":%lld,\"steps\":%d,\"gen_ids_fnv64\":\"%016llx\"}", (long long)ctx, steps,
            (unsigned long long)gen_hash);
    return finish(f);
}
