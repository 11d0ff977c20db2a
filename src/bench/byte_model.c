/* byte_model.c — bytes read per decode token (the model is described in byte_model.h and docs/performance.md).
 *
 * The weight part walks the one layout table (model/layout.h) rather than the nf_layer fields, so a tensor added
 * to the layout is counted without touching this file; its stored type comes from the bound tensor. The state
 * part follows the indexer's selection rule of src/cpu/indexer.c (dense while every complete pool fits in the
 * top-k budget, then top-k pools plus the open tail). */
#include "bench/byte_model.h"

#include <stdlib.h>

#include "formats/formats.h"
#include "model/layout.h"
#include "util/error.h"

static const nf_tensor *bound_tensor(const nf_model *m, const nf_layout_tensor *w) {
    if (w->bind == NF_BIND_MODEL) return (const nf_tensor *)((const char *)m + w->bind_offset);
    if (w->bind == NF_BIND_LAYER) return (const nf_tensor *)((const char *)&m->layers[w->layer] + w->bind_offset);
    return NULL;
}

int nf_decode_weight_bytes(const nf_model *m, double *out) {
    const nf_hparams *hp = &m->hp;
    int n;
    nf_layout_tensor *lt = nf_layout_tensors_alloc(hp, &n);
    if (!lt) return nf_fail_prefix("byte model");
    double total = 0;
    for (int i = 0; i < n; i++) {
        const nf_layout_tensor *w = &lt[i];
        if (w->mtp) continue;
        const nf_tensor *t = bound_tensor(m, w);
        if (!t || t->n_dims == 0) {
            free(lt);
            return nf_fail("byte model: %s is not bound in the model", w->name);
        }
        size_t row = nf_row_bytes(t->type, t->ne[0]);
        if (row == 0) {
            free(lt);
            return nf_fail("byte model: %s: no row size for type %u and row length %lld", w->name, t->type,
                           (long long)t->ne[0]);
        }
        double rows = (double)t->ne[1] * (double)t->ne[2] * (double)t->ne[3];
        double bytes = (double)row * rows;
        switch (w->role) {
        case NF_ROLE_EMBD: bytes = (double)row; break; /* one token's row */
        case NF_ROLE_EXP_GATE:
        case NF_ROLE_EXP_UP:
        case NF_ROLE_EXP_DOWN: /* ne[2] experts, n_expert_used of them routed to */
            bytes = bytes / (double)t->ne[2] * (double)hp->n_expert_used;
            break;
        default: break;
        }
        total += bytes;
    }
    free(lt);
    *out = total;
    return 0;
}

void nf_decode_state_reads(const nf_hparams *hp, int64_t pos, nf_decode_bytes *out) {
    const double f32 = 4.0;
    const int64_t kpool = hp->idx_kpool > 0 ? hp->idx_kpool : 1;
    const int64_t budget = hp->idx_topk / kpool;          /* pools the selection keeps */
    const int64_t n_vis = (pos + 1) / kpool;               /* complete pools the query sees */
    const int tail = hp->idx_select_tail && kpool > 1;
    const int dense = n_vis <= budget;
    const int64_t open_rows = tail ? (pos + 1) - n_vis * kpool : 0;
    const int64_t rows_attended = (dense ? n_vis : budget) * kpool + open_rows;
    out->weights = 0;
    out->kda_state = out->latent = out->index_keys = 0;
    const double kda_s = (double)hp->kda_n_head * hp->kda_head_dim * hp->kda_head_dim;
    const double kda_conv = (double)(hp->kda_conv > 1 ? hp->kda_conv - 1 : 0) * 3.0 * hp->kda_n_head * hp->kda_head_dim;
    for (int l = 0; l < hp->n_layer; l++) {
        if (hp->layer_kind[l] == NF_LAYER_KDA) {
            out->kda_state += (kda_s + kda_conv) * f32;
        } else {
            out->latent += (double)rows_attended * hp->kv_lora_rank * f32;
            if (!dense && !hp->indexer_shared[l]) out->index_keys += (double)n_vis * hp->idx_head_dim * f32;
        }
    }
}

int nf_decode_bytes_at(const nf_model *m, int64_t pos, nf_decode_bytes *out) {
    nf_decode_state_reads(&m->hp, pos, out);
    return nf_decode_weight_bytes(m, &out->weights);
}

double nf_decode_bytes_total(const nf_decode_bytes *b) { return b->weights + b->kda_state + b->latent + b->index_keys; }

double nf_state_bytes_at(const nf_hparams *hp, int64_t pos) {
    const double f32 = 4.0;
    const int64_t kpool = hp->idx_kpool > 0 ? hp->idx_kpool : 1;
    double total = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        if (hp->layer_kind[l] == NF_LAYER_KDA) {
            total += (double)hp->kda_n_head * hp->kda_head_dim * hp->kda_head_dim * f32;
            total += (double)(hp->kda_conv > 1 ? hp->kda_conv - 1 : 0) * 3.0 * hp->kda_n_head * hp->kda_head_dim * f32;
        } else {
            total += (double)pos * hp->kv_lora_rank * f32;
            total += (double)(pos / kpool) * hp->idx_head_dim * f32;
            total += 2.0 * (double)kpool * hp->idx_head_dim * f32;
        }
    }
    return total;
}
