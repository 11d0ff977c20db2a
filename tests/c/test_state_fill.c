/* test_state_fill.c — the synthetic state fill (model/state_fill.h, nf-bench --fill synthetic) on the CPU: which
 * rows it writes and at what RMS, the bytes in use after it, that filling in steps equals one fill, that the
 * measured scales are the RMS of what is there, refusals, and that a tiny model decodes from a filled state at
 * depth with finite logits and an indexer selection that reaches into the filled rows. The CUDA fill is checked
 * against this host fill bit for bit in tests/gpu/test_synth.c (also under scripts/cuemu). */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/byte_model.h"
#include "cpu/backend_cpu.h"
#include "model/forward.h"
#include "model/state_fill.h"
#include "model/synth.h"

static nf_hparams tiny(void) {
    nf_hparams hp;
    cr_assert_eq(nf_synth_preset("tiny", &hp), 0);
    return hp;
}

static double rms_of(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s / (double)n);
}

static int all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

Test(state_fill, rows_rms_and_bytes) {
    nf_hparams hp = tiny();
    nf_state *st = nf_state_create(&hp, 16);
    nf_state_fill_scales sc;
    nf_state_fill_scales_unit(&hp, &sc);
    for (int l = 0; l < hp.n_layer; l++) sc.L[l].latent = 0.5f + 0.25f * (float)l; /* per-layer scale is honoured */
    const int64_t to = 1001;
    cr_assert_eq(nf_state_fill(st, to, 7, &sc), 0);
    cr_assert_eq(st->pos, to);
    cr_assert_geq(st->cap, to);
    const size_t lora = (size_t)hp.kv_lora_rank, hd = (size_t)hp.idx_head_dim, kp = (size_t)hp.idx_kpool;
    double expect_bytes = 0;
    int n_mla = 0;
    for (int l = 0; l < hp.n_layer; l++) {
        nf_layer_state *L = &st->L[l];
        if (L->kind == NF_LAYER_KDA) {
            size_t s_n = (size_t)hp.kda_n_head * hp.kda_head_dim * hp.kda_head_dim;
            size_t c_n = (size_t)(hp.kda_conv - 1) * 3 * hp.kda_n_head * hp.kda_head_dim;
            cr_assert(all_finite(L->S, s_n) && all_finite(L->conv, c_n));
            cr_assert_float_eq(rms_of(L->S, s_n), 1.0 / sqrt(hp.kda_head_dim), 0.02 / sqrt(hp.kda_head_dim));
            cr_assert_float_eq(rms_of(L->conv, c_n), 1.0, 0.02);
            expect_bytes += 4.0 * (double)(s_n + c_n);
            continue;
        }
        n_mla++;
        cr_assert(all_finite(L->latent, (size_t)to * lora));
        cr_assert_float_eq(rms_of(L->latent, (size_t)to * lora), sc.L[l].latent, 0.01 * sc.L[l].latent, "layer %d", l);
        /* every row its own: no two consecutive rows equal */
        for (int64_t t = 1; t < to; t++)
            cr_assert_neq(memcmp(L->latent + (size_t)(t - 1) * lora, L->latent + (size_t)t * lora, lora * 4), 0);
        cr_assert(all_finite(L->pool_key, (size_t)(to / kp) * hd));
        cr_assert_float_eq(rms_of(L->pool_key, (size_t)(to / kp) * hd), 1.0, 0.03);
        cr_assert(all_finite(L->open_key, kp * hd) && all_finite(L->open_gate, kp * hd));
        expect_bytes += 4.0 * (double)((size_t)to * lora + (size_t)(to / kp) * hd + 2 * kp * hd);
    }
    cr_assert_gt(n_mla, 0);
    cr_assert_float_eq(nf_state_bytes_at(&hp, to), expect_bytes, 0.5);
    cr_assert_geq((double)nf_state_bytes(st), expect_bytes);
    nf_state_free(st);
}

Test(state_fill, steps_equal_one_fill_and_unit_is_deterministic) {
    nf_hparams hp = tiny();
    nf_state_fill_scales sc;
    nf_state_fill_scales_unit(&hp, &sc);
    nf_state *a = nf_state_create(&hp, 16), *b = nf_state_create(&hp, 16);
    cr_assert_eq(nf_state_fill(a, 37, 3, &sc), 0);
    cr_assert_eq(nf_state_fill(a, 38, 3, &sc), 0);
    cr_assert_eq(nf_state_fill(a, 514, 3, &sc), 0);
    cr_assert_eq(nf_state_fill(b, 514, 3, &sc), 0);
    const size_t lora = (size_t)hp.kv_lora_rank, hd = (size_t)hp.idx_head_dim, kp = (size_t)hp.idx_kpool;
    for (int l = 0; l < hp.n_layer; l++) {
        nf_layer_state *A = &a->L[l], *B = &b->L[l];
        if (A->kind == NF_LAYER_KDA) {
            cr_assert_eq(memcmp(A->S, B->S, (size_t)hp.kda_n_head * hp.kda_head_dim * hp.kda_head_dim * 4), 0);
            continue;
        }
        cr_assert_eq(memcmp(A->latent, B->latent, 514 * lora * 4), 0, "layer %d", l);
        cr_assert_eq(memcmp(A->pool_key, B->pool_key, (514 / kp) * hd * 4), 0, "layer %d", l);
        /* the open pool's slots (tokens 512, 513) */
        cr_assert_eq(memcmp(A->open_key, B->open_key, 2 * hd * 4), 0);
        cr_assert_eq(memcmp(A->open_gate, B->open_gate, 2 * hd * 4), 0);
    }
    /* another seed, other values */
    nf_state *c = nf_state_create(&hp, 16);
    cr_assert_eq(nf_state_fill(c, 514, 4, &sc), 0);
    int l_mla = 0;
    while (hp.layer_kind[l_mla] != NF_LAYER_MLA) l_mla++;
    cr_assert_neq(memcmp(b->L[l_mla].latent, c->L[l_mla].latent, lora * 4), 0);
    /* the unit variable: RMS 1, inside [-sqrt 3, sqrt 3), mean ~0 */
    double s = 0, s2 = 0;
    for (uint64_t e = 0; e < 100000; e++) {
        float u = nf_state_fill_unit(12345, e);
        cr_assert(u >= -1.7320509f && u < 1.7320509f);
        s += u;
        s2 += (double)u * u;
    }
    cr_assert_float_eq(s / 1e5, 0.0, 0.02);
    cr_assert_float_eq(sqrt(s2 / 1e5), 1.0, 0.01);
    nf_state_free(a);
    nf_state_free(b);
    nf_state_free(c);
}

Test(state_fill, measure_reads_back_the_scales_and_refusals) {
    nf_hparams hp = tiny();
    nf_state_fill_scales sc, got;
    nf_state_fill_scales_unit(&hp, &sc);
    for (int l = 0; l < hp.n_layer; l++) {
        sc.L[l].latent = 0.3f;
        sc.L[l].pool_key = 2.0f;
        sc.L[l].open_key = 1.5f;
        sc.L[l].open_gate = 0.7f;
        sc.L[l].kda_S = 0.05f;
        sc.L[l].conv = 0.9f;
    }
    nf_state *st = nf_state_create(&hp, 16);
    cr_assert_lt(nf_state_fill_measure(&hp, st, &got), 0);        /* empty: no complete pool */
    cr_assert_eq(nf_state_fill(st, 2000, 9, &sc), 0);
    cr_assert_eq(nf_state_fill_measure(&hp, st, &got), 0);
    for (int l = 0; l < hp.n_layer; l++) {
        if (hp.layer_kind[l] == NF_LAYER_KDA) {
            cr_assert_float_eq(got.L[l].kda_S, 0.05, 0.002);
            cr_assert_float_eq(got.L[l].conv, 0.9, 0.03);
            continue;
        }
        cr_assert_float_eq(got.L[l].latent, 0.3, 0.005);
        cr_assert_float_eq(got.L[l].pool_key, 2.0, 0.05);
        cr_assert_float_eq(got.L[l].open_key, 1.5, 0.2);
        cr_assert_float_eq(got.L[l].open_gate, 0.7, 0.1);
    }
    cr_assert_lt(nf_state_fill(st, 1999, 9, &sc), 0);               /* below the position */
    sc.n_layer = hp.n_layer + 1;
    cr_assert_lt(nf_state_fill(st, 3000, 9, &sc), 0);               /* scales of another model */
    cr_assert_eq(st->pos, 2000);
    nf_state_free(st);
}

Test(state_fill, tiny_model_decodes_at_depth_from_a_filled_state, .timeout = 300) {
    nf_hparams hp = tiny();
    const nf_recipe *r = NULL;
    cr_assert_eq(nf_synth_spec_parse("tiny:f32", &hp, &r), 0);
    nf_model *m = nf_synth_model_create(&hp, r, 1, NF_SYNTH_HOST);
    cr_assert_not_null(m);
    nf_backend *be = nf_cpu_backend_create(m, 2);
    cr_assert_not_null(be);
    const int64_t prefix = 40, depth = 3500;
    nf_state *st = nf_backend_state_create(be, depth + 2);
    int32_t toks[64];
    for (int i = 0; i < 64; i++) toks[i] = (int32_t)((i * 977 + 13) % hp.n_vocab);
    float *logits = malloc((size_t)hp.n_vocab * sizeof *logits);
    cr_assert_eq(nf_prefill(be, st, toks, prefix, 16, logits, 0, NULL), 0);
    nf_state_fill_scales sc;
    cr_assert_eq(nf_state_fill_measure(&hp, st, &sc), 0);
    for (int l = 0; l < hp.n_layer; l++)
        if (hp.layer_kind[l] == NF_LAYER_MLA) cr_assert_gt(sc.L[l].latent, 0);
    cr_assert_eq(nf_state_fill(st, depth, 5, &sc), 0);

    const int width = nf_topk_width(&hp), n_mla = nf_mla_layer_count(&hp);
    int32_t *sel = malloc((size_t)n_mla * (depth + 1) * width * sizeof *sel);
    for (size_t i = 0; i < (size_t)n_mla * (depth + 1) * width; i++) sel[i] = -2;
    nf_topk_dump dump = {.buf = sel, .n_pos = depth + 1};
    cr_assert_eq(nf_forward(be, st, &toks[50], 1, logits, 0, &dump), 0);
    cr_assert_eq(st->pos, depth + 1);
    cr_assert(all_finite(logits, (size_t)hp.n_vocab));
    /* the query at `depth` selected index_topk positions deep in the filled rows, each once */
    for (int k = 0; k < n_mla; k++) {
        const int32_t *row = sel + ((size_t)k * (depth + 1) + depth) * width;
        int deep = 0, valid = 0;
        for (int i = 0; i < width; i++) {
            if (row[i] < 0) continue;
            cr_assert_leq(row[i], depth);
            valid++;
            deep += row[i] >= prefix;
            for (int j = 0; j < i; j++) cr_assert_neq(row[i], row[j]);
        }
        cr_assert_geq(valid, hp.idx_topk, "MLA layer %d: %d positions", k, valid);
        cr_assert_gt(deep, hp.idx_topk / 2);
    }
    /* and keeps decoding */
    for (int s = 0; s < 3; s++) {
        cr_assert_eq(nf_forward(be, st, &toks[51 + s], 1, logits, 0, NULL), 0);
        cr_assert(all_finite(logits, (size_t)hp.n_vocab));
    }
    free(sel);
    free(logits);
    nf_state_free(st);
    nf_backend_free(be);
    nf_model_free(m);
}
