/* split_plan.c — memory per pipeline stage and the balanced layer split (split_plan.h). */
#include "model/split_plan.h"

#include <string.h>

#include "util/error.h"

double nf_layer_weight_bytes(const nf_model *m, int l) {
    _Static_assert(sizeof(nf_layer) % sizeof(nf_tensor) == 0, "nf_layer holds only nf_tensor fields");
    const nf_tensor *ts = (const nf_tensor *)&m->layers[l];
    double b = 0;
    for (size_t i = 0; i < sizeof(nf_layer) / sizeof(nf_tensor); i++) b += (double)nf_tensor_bytes(&ts[i]);
    return b;
}

double nf_layer_state_bytes(const nf_hparams *hp, int l, int64_t ctx) {
    const double f = sizeof(float);
    if (hp->layer_kind[l] == NF_LAYER_KDA) {
        const double inner = (double)hp->kda_n_head * hp->kda_head_dim;
        const double conv_rows = hp->kda_conv > 1 ? hp->kda_conv - 1 : 0;
        return f * (conv_rows * 3 * inner + (double)hp->kda_n_head * hp->kda_head_dim * hp->kda_head_dim);
    }
    const int64_t kpool = hp->idx_kpool > 0 ? hp->idx_kpool : 1;
    const int64_t cap = ctx < 16 ? 16 : ctx; /* a state's smallest capacity (state.c) */
    return f * ((double)cap * hp->kv_lora_rank + (double)(cap / kpool + 1) * hp->idx_head_dim +
                2.0 * (double)kpool * hp->idx_head_dim);
}

static double head_bytes(const nf_model *m) {
    return (double)nf_tensor_bytes(&m->output_norm) + (double)nf_tensor_bytes(&m->output);
}

static void fill(const nf_model *m, int64_t ctx, int n, const nf_stage *ranges, nf_split_plan *out) {
    memset(out, 0, sizeof *out);
    out->n_stages = n;
    out->ctx = ctx;
    for (int k = 0; k < n; k++) {
        nf_stage_plan *s = &out->stage[k];
        s->layer_begin = ranges[k].layer_begin;
        s->layer_end = ranges[k].layer_end;
        for (int l = s->layer_begin; l < s->layer_end; l++) {
            s->weight_bytes += nf_layer_weight_bytes(m, l);
            s->state_bytes += nf_layer_state_bytes(&m->hp, l, ctx);
        }
        if (k == 0) s->weight_bytes += (double)nf_tensor_bytes(&m->token_embd);
        if (k == n - 1) s->weight_bytes += head_bytes(m);
    }
}

int nf_split_plan_list(const nf_model *m, int n_starts, const int *starts, int64_t ctx, nf_split_plan *out) {
    nf_stage ranges[NF_MAX_STAGES];
    if (nf_pipeline_ranges(m->hp.n_layer, n_starts, starts, ranges) < 0) return -1;
    fill(m, ctx, n_starts + 1, ranges, out);
    return 0;
}

int nf_split_plan_auto(const nf_model *m, int n_stages, int64_t ctx, nf_split_plan *out) {
    const int L = m->hp.n_layer;
    if (n_stages < 1 || n_stages > NF_MAX_STAGES || n_stages > L)
        return nf_fail("split: %d stages for a model of %d layers (1 to %d)", n_stages, L,
                       L < NF_MAX_STAGES ? L : NF_MAX_STAGES);
    /* prefix[l] = cost of layers [0, l); best[k][l] = smallest largest-stage cost splitting layers [0, l) into
     * k+1 stages (stage 0 carries the embedding); the last stage adds the head when it is closed at L */
    double prefix[NF_MAX_LAYERS + 1];
    prefix[0] = 0;
    for (int l = 0; l < L; l++)
        prefix[l + 1] = prefix[l] + nf_layer_weight_bytes(m, l) + nf_layer_state_bytes(&m->hp, l, ctx);
    const double embed = (double)nf_tensor_bytes(&m->token_embd), head = head_bytes(m);
    double best[NF_MAX_STAGES][NF_MAX_LAYERS + 1];
    int from[NF_MAX_STAGES][NF_MAX_LAYERS + 1];
    for (int l = 1; l <= L; l++) best[0][l] = embed + prefix[l] + (n_stages == 1 && l == L ? head : 0);
    for (int k = 1; k < n_stages; k++)
        for (int l = k + 1; l <= L; l++) {
            best[k][l] = -1;
            for (int b = k; b < l; b++) { /* stage k is [b, l) */
                double c = prefix[l] - prefix[b] + (k == n_stages - 1 && l == L ? head : 0);
                double worst = best[k - 1][b] > c ? best[k - 1][b] : c;
                if (best[k][l] < 0 || worst < best[k][l]) {
                    best[k][l] = worst;
                    from[k][l] = b;
                }
            }
        }
    nf_stage ranges[NF_MAX_STAGES];
    int end = L;
    for (int k = n_stages - 1; k >= 0; k--) {
        const int begin = k ? from[k][end] : 0;
        ranges[k].layer_begin = begin;
        ranges[k].layer_end = end;
        end = begin;
    }
    fill(m, ctx, n_stages, ranges, out);
    return 0;
}

void nf_split_plan_stages(const nf_split_plan *p, nf_stage *stages) {
    for (int k = 0; k < p->n_stages; k++) {
        stages[k].be = NULL;
        stages[k].layer_begin = p->stage[k].layer_begin;
        stages[k].layer_end = p->stage[k].layer_end;
    }
}

void nf_split_plan_print(FILE *f, const nf_split_plan *p, const double *free_bytes, const int *device) {
    fprintf(f, "memory plan: %d stage%s, state at %lld tokens\n", p->n_stages, p->n_stages > 1 ? "s" : "",
            (long long)p->ctx);
    for (int k = 0; k < p->n_stages; k++) {
        const nf_stage_plan *s = &p->stage[k];
        fprintf(f, "  stage %d: layers %2d..%-2d  weights %7.2f GB  state %7.2f GB", k, s->layer_begin,
                s->layer_end - 1, s->weight_bytes / 1e9, s->state_bytes / 1e9);
        if (free_bytes) fprintf(f, "  device %d: %.2f GB free", device ? device[k] : k, free_bytes[k] / 1e9);
        fputc('\n', f);
    }
}

int nf_split_plan_check(const nf_split_plan *p, const double *free_bytes, const int *device, double headroom) {
    for (int k = 0; k < p->n_stages; k++) {
        const nf_stage_plan *s = &p->stage[k];
        const double need = s->weight_bytes + s->state_bytes + headroom;
        if (need > free_bytes[k])
            return nf_fail("split: stage %d (layers %d..%d) needs %.2f GB (weights %.2f + state %.2f at %lld tokens "
                           "+ headroom %.2f) but device %d has %.2f GB free; use more devices (--gpus), move the "
                           "split (--split), or a smaller --ctx", k, s->layer_begin, s->layer_end - 1, need / 1e9,
                           s->weight_bytes / 1e9, s->state_bytes / 1e9, (long long)p->ctx, headroom / 1e9,
                           device ? device[k] : k, free_bytes[k] / 1e9);
    }
    return 0;
}
