/* test_flop_model.c — the prefill FLOP model of nf-bench (bench/flop_model.h): the routed experts scale with
 * n_expert_used and nothing else does, the matmul part is 2 x parameters per token, attention follows the
 * selection rule (every row while dense, index_topk plus the open tail beyond), the indexer scores every pooled
 * key only beyond the dense regime, spans add up, and glm53's active parameters land at the published ~18B
 * (16.1B of trunk matrices + 1.27B of embedding and lm_head, which a prefill does not multiply per token). */
#include <criterion/criterion.h>

#include "bench/flop_model.h"
#include "model/synth.h"

static nf_hparams preset(const char *name) {
    nf_hparams hp;
    cr_assert_eq(nf_synth_preset(name, &hp), 0);
    return hp;
}

Test(flop_model, experts_scale_with_the_routed_count) {
    nf_hparams hp = preset("tiny");
    double p1, p2;
    hp.n_expert_used = 1;
    cr_assert_eq(nf_active_matrix_params(&hp, &p1), 0);
    hp.n_expert_used = 2;
    cr_assert_eq(nf_active_matrix_params(&hp, &p2), 0);
    int n_moe = 0;
    for (int l = 0; l < hp.n_layer; l++) n_moe += hp.layer_moe[l];
    cr_assert_gt(n_moe, 0);
    cr_assert_float_eq(p2 - p1, 3.0 * hp.n_embd * hp.n_ff_exp * n_moe, 0.5); /* gate, up, down of one expert */
}

Test(flop_model, parts_follow_the_selection_rule) {
    nf_hparams hp = preset("tiny"); /* index_topk 16, kpool 4: dense while (p+1)/4 <= 4 */
    double params;
    cr_assert_eq(nf_active_matrix_params(&hp, &params), 0);
    int n_mla = 0, n_kda = 0, n_idx = 0;
    for (int l = 0; l < hp.n_layer; l++) {
        if (hp.layer_kind[l] == NF_LAYER_MLA) {
            n_mla++;
            n_idx += !hp.indexer_shared[l];
        } else {
            n_kda++;
        }
    }
    cr_assert(n_mla > 0 && n_kda > 0 && n_idx > 0);
    const double per_row = 4.0 * hp.n_head * hp.kv_lora_rank * n_mla;
    nf_prefill_flops f;
    cr_assert_eq(nf_prefill_flops_span(&hp, 10, 11, &f), 0); /* dense: 11 rows */
    cr_assert_float_eq(f.matmul, 2.0 * params, 1);
    cr_assert_float_eq(f.attention, 11 * per_row, 1);
    cr_assert_float_eq(f.indexer, 0, 0);
    cr_assert_float_eq(f.kda, 6.0 * hp.kda_n_head * hp.kda_head_dim * hp.kda_head_dim * n_kda, 1);
    cr_assert_eq(nf_prefill_flops_span(&hp, 1001, 1002, &f), 0); /* 250 pools visible: 16 rows + 2 tail rows */
    cr_assert_float_eq(f.attention, 18 * per_row, 1);
    cr_assert_float_eq(f.indexer, 2.0 * hp.idx_n_head * hp.idx_head_dim * 250 * n_idx, 1);
    nf_prefill_flops a, b, ab;
    cr_assert_eq(nf_prefill_flops_span(&hp, 0, 700, &a), 0);
    cr_assert_eq(nf_prefill_flops_span(&hp, 700, 3000, &b), 0);
    cr_assert_eq(nf_prefill_flops_span(&hp, 0, 3000, &ab), 0);
    cr_assert_float_eq(nf_prefill_flops_total(&a) + nf_prefill_flops_total(&b), nf_prefill_flops_total(&ab),
                       1e-9 * nf_prefill_flops_total(&ab));
}

Test(flop_model, glm53_active_parameters) {
    nf_hparams hp = preset("glm53");
    double params;
    cr_assert_eq(nf_active_matrix_params(&hp, &params), 0);
    const double head_and_embd = 2.0 * hp.n_embd * hp.n_vocab;
    cr_assert(params > 15.5e9 && params < 16.7e9, "%.4g", params);
    cr_assert(params + head_and_embd > 17e9 && params + head_and_embd < 18.5e9, "%.4g", params + head_and_embd);
}
