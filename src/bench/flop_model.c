/* flop_model.c — FLOPs of a prefill from the hyperparameters (the model is described in flop_model.h). The matrix
 * part walks the layout table, like byte_model.c's weight bytes, so a tensor added to the layout is counted; the
 * attended rows follow the same selection rule as the byte model. */
#include "bench/flop_model.h"

#include <stdlib.h>

#include "model/layout.h"
#include "util/error.h"

int nf_active_matrix_params(const nf_hparams *hp, double *out) {
    int n;
    nf_layout_tensor *lt = nf_layout_tensors_alloc(hp, &n);
    if (!lt) return nf_fail_prefix("flop model");
    double total = 0;
    for (int i = 0; i < n; i++) {
        const nf_layout_tensor *w = &lt[i];
        if (w->mtp) continue;
        double params = (double)w->ne[0] * (double)w->ne[1] * (double)w->ne[2] * (double)w->ne[3];
        switch (w->role) {
        case NF_ROLE_EMBD: case NF_ROLE_OUTPUT: case NF_ROLE_NORM: case NF_ROLE_HC_PARAM: case NF_ROLE_KDA_PARAM:
        case NF_ROLE_INDEXER_PARAM: case NF_ROLE_NEXTN_PROJ:
            params = 0;
            break;
        case NF_ROLE_EXP_GATE: case NF_ROLE_EXP_UP: case NF_ROLE_EXP_DOWN:
            params = params / (double)w->ne[2] * (double)hp->n_expert_used;
            break;
        default: break;
        }
        total += params;
    }
    free(lt);
    *out = total;
    return 0;
}

int nf_prefill_flops_span(const nf_hparams *hp, int64_t from, int64_t to, nf_prefill_flops *out) {
    double params;
    if (nf_active_matrix_params(hp, &params) < 0) return -1;
    int n_mla = 0, n_idx = 0, n_kda = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        if (hp->layer_kind[l] == NF_LAYER_KDA) n_kda++;
        else {
            n_mla++;
            n_idx += !hp->indexer_shared[l];
        }
    }
    const int64_t kpool = hp->idx_kpool > 0 ? hp->idx_kpool : 1;
    const int64_t budget = hp->idx_topk / kpool;
    const int tail = hp->idx_select_tail && kpool > 1;
    double rows = 0, pools = 0;
    for (int64_t p = from; p < to; p++) { /* selection rule of byte_model.c at query position p */
        const int64_t n_vis = (p + 1) / kpool;
        const int dense = n_vis <= budget;
        rows += (double)((dense ? n_vis : budget) * kpool + (tail ? (p + 1) - n_vis * kpool : 0));
        if (!dense) pools += (double)n_vis;
    }
    const double n_tok = (double)(to > from ? to - from : 0);
    out->matmul = 2.0 * params * n_tok;
    out->attention = 4.0 * hp->n_head * (double)hp->kv_lora_rank * rows * n_mla;
    out->indexer = 2.0 * hp->idx_n_head * (double)hp->idx_head_dim * pools * n_idx;
    out->kda = 6.0 * hp->kda_n_head * (double)hp->kda_head_dim * hp->kda_head_dim * n_tok * n_kda;
    return 0;
}

double nf_prefill_flops_total(const nf_prefill_flops *f) { return f->matmul + f->attention + f->indexer + f->kda; }
