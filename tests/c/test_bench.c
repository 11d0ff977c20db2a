/* test_bench.c — nf-bench's library pieces (src/bench): the frontier rules nf-ab re-computes, argmax without EOS
 * and top-K ordering, the ids hash (known answers from the Python FNV-1a of scripts/ab/exact.py), the byte model's
 * regimes on the embedded model (dense below the 131-token boundary, selected rows + pooled keys beyond), and the
 * whole bench against the engine session: the probe's gen_ids_hash at every frontier equals the hash of the greedy
 * (EOS-excluded) tokens the session API decodes from the same prompt. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench.h"
#include "bench/byte_model.h"
#include "bench/frontiers.h"
#include "bench/probe.h"
#include "bench/token_seq.h"
#include "engine/session.h"
#include "model/model.h"
#include "util/error.h"

#define TINY "models/tiny/nf-tiny-bf16.gguf"

static void assert_list(const int64_t *got, int n, const int64_t *want, int n_want) {
    cr_assert_eq(n, n_want, "got %d frontiers, want %d", n, n_want);
    for (int i = 0; i < n; i++) cr_assert_eq(got[i], want[i], "frontier %d: %lld, want %lld", i, (long long)got[i], (long long)want[i]);
}

Test(bench, sweep_rule) {
    int64_t *f;
    int n = nf_bench_sweep(2048, 65536, 0, 2, &f);
    assert_list(f, n, (int64_t[]){2048, 4096, 8192, 16384, 32768, 65536}, 6);
    free(f);
    n = nf_bench_sweep(2016, 4096, 2048, 1, &f); /* linear, the last clamped to max */
    assert_list(f, n, (int64_t[]){2016, 4064, 4096}, 3);
    free(f);
    n = nf_bench_sweep(10, 30, 0, 1.5, &f); /* ceil(22.5) = 23, ceil(34.5) clamped */
    assert_list(f, n, (int64_t[]){10, 15, 23, 30}, 4);
    free(f);
    n = nf_bench_sweep(3, 6, 0, 1.1, &f); /* ceil(3.3) = 4 but at least prev + 1 each time */
    assert_list(f, n, (int64_t[]){3, 4, 5, 6}, 4);
    free(f);
    n = nf_bench_sweep(64, 64, 1, 1, &f);
    assert_list(f, n, (int64_t[]){64}, 1);
    free(f);
    cr_assert_eq(nf_bench_sweep(100, 50, 1, 1, &f), -1);
    cr_assert(strstr(nf_error(), "below"), "%s", nf_error());
    cr_assert_eq(nf_bench_sweep(1, 50, 0, 1, &f), -1);
    cr_assert_eq(nf_bench_sweep(0, 50, 1, 1, &f), -1);
    cr_assert_eq(nf_bench_sweep(1, 50, 1, 0.5, &f), -1);
}

Test(bench, frontier_list) {
    int64_t *f;
    int n = nf_bench_frontier_list("64,160,2048", &f);
    assert_list(f, n, (int64_t[]){64, 160, 2048}, 3);
    free(f);
    const char *bad[] = {"", "64,64", "160,64", "a", "64,", ",64", "64,,160", "-1", "0", "64, 160", "64x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(nf_bench_frontier_list(bad[i], &f), -1, "'%s' accepted", bad[i]);
}

Test(bench, argmax_excluding_eos) {
    float l[] = {1, 5, 3, 5, NAN, 2};
    cr_assert_eq(nf_argmax_excluding(l, 6, -1), 1); /* tie 1/3: the lower id */
    cr_assert_eq(nf_argmax_excluding(l, 6, 1), 3);  /* the excluded id never wins */
    float n[] = {NAN, NAN, 0.5f};
    cr_assert_eq(nf_argmax_excluding(n, 3, -1), 2); /* NaN never beats a number */
    cr_assert_eq(nf_argmax_excluding(n, 2, 0), 1);  /* all NaN: lowest candidate */
}

Test(bench, topk_order) {
    float l[] = {0.5f, 2, NAN, 2, -INFINITY, 7, 0.5f};
    int32_t ids[7];
    float v[7];
    nf_topk_logits(l, 7, 7, ids, v);
    const int32_t want[] = {5, 1, 3, 0, 6, 4, 2};
    for (int i = 0; i < 7; i++) cr_assert_eq(ids[i], want[i], "rank %d: id %d, want %d", i, ids[i], want[i]);
    nf_topk_logits(l, 7, 3, ids, v);
    cr_assert(ids[0] == 5 && ids[1] == 1 && ids[2] == 3 && v[0] == 7 && v[2] == 2);
}

Test(bench, ids_hash_known_answers) {
    /* values from scripts/ab/exact.py fnv64 */
    cr_assert_eq(nf_ids_fnv64(NF_FNV64_INIT, NULL, 0), 0xcbf29ce484222325ull);
    cr_assert_eq(nf_ids_fnv64(NF_FNV64_INIT, (int32_t[]){0}, 1), 0x4d25767f9dce13f5ull);
    cr_assert_eq(nf_ids_fnv64(NF_FNV64_INIT, (int32_t[]){1, 2, 3}, 3), 0xfd1f0f4381eb0395ull);
    cr_assert_eq(nf_ids_fnv64(NF_FNV64_INIT, (int32_t[]){154820, 7, -1}, 3), 0x8e683e950922deacull);
}

Test(bench, byte_model_regimes) {
    nf_model *m = nf_model_load(TINY);
    cr_assert_not_null(m, "%s", nf_error());
    const nf_hparams *hp = &m->hp;
    int n_mla = 0, n_full = 0, n_kda = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        n_mla += hp->layer_kind[l] == NF_LAYER_MLA;
        n_full += hp->layer_kind[l] == NF_LAYER_MLA && !hp->indexer_shared[l];
        n_kda += hp->layer_kind[l] == NF_LAYER_KDA;
    }
    cr_assert(n_mla > 0 && n_kda > 0 && hp->idx_kpool == 4 && hp->idx_topk == 128 && hp->idx_select_tail);
    const double row = 4.0 * hp->kv_lora_rank, key = 4.0 * hp->idx_head_dim;
    nf_decode_bytes b0, b;
    cr_assert_eq(nf_decode_bytes_at(m, 0, &b0), 0, "%s", nf_error());
    cr_assert(b0.weights > 0);
    cr_assert_float_eq(b0.kda_state, n_kda * 4.0 * (hp->kda_n_head * hp->kda_head_dim * hp->kda_head_dim +
                                                   (hp->kda_conv - 1) * 3.0 * hp->kda_n_head * hp->kda_head_dim), 1e-6);
    for (int64_t pos = 0; pos < 300; pos++) {
        cr_assert_eq(nf_decode_bytes_at(m, pos, &b), 0);
        cr_assert_eq(b.weights, b0.weights);
        cr_assert_eq(b.kda_state, b0.kda_state);
        if (pos <= 130) { /* dense: every position 0..pos, no scoring */
            cr_assert_float_eq(b.latent, (double)(pos + 1) * row * n_mla, 1e-6, "pos %lld", (long long)pos);
            cr_assert_eq(b.index_keys, 0, "pos %lld", (long long)pos);
        } else { /* 32 pools of 4 + the open tail; every complete pooled key scored */
            cr_assert_float_eq(b.latent, (double)(128 + (pos + 1) % 4) * row * n_mla, 1e-6, "pos %lld", (long long)pos);
            cr_assert_float_eq(b.index_keys, (double)((pos + 1) / 4) * key * n_full, 1e-6, "pos %lld", (long long)pos);
        }
        cr_assert_eq(nf_decode_bytes_total(&b), b.weights + b.kda_state + b.latent + b.index_keys);
    }
    /* state in use grows by one latent row per MLA layer per token, one pooled key per 4 */
    cr_assert_float_eq(nf_state_bytes_at(hp, 8) - nf_state_bytes_at(hp, 4), 4 * row * n_mla + key * n_mla, 1e-6);
    nf_model_free(m);
}

static uint64_t fnv_bytes(const int32_t *ids, int n) { /* the hash over the little-endian bytes, written out */
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++) {
        uint32_t v = (uint32_t)ids[i];
        unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
        for (int k = 0; k < 4; k++) h = (h ^ b[k]) * 0x100000001b3ull;
    }
    return h;
}

Test(bench, probe_hash_equals_session_greedy, .timeout = 300) {
    const int64_t fr[] = {64, 160};
    const int G = 12;
    char csv[64];
    snprintf(csv, sizeof csv, "/tmp/nf-test-bench-%d.csv", (int)getpid());
    nf_bench_opts o = {.model_path = TINY, .seed = 7, .backend = "cpu", .n_threads = 2, .frontiers = fr,
                       .n_frontiers = 2, .gen = G, .chunk = 32, .warmup = 0, .csv_path = csv, .dump_topk = 20,
                       .probe_bytes = 8 << 20};
    cr_assert_eq(nf_bench_run(&o), 0);
    FILE *f = fopen(csv, "r");
    cr_assert_not_null(f);
    char line[1024];
    cr_assert_not_null(fgets(line, sizeof line, f));
    const char *contract = "ctx,prefill_tokens,prefill_tps,gen_tokens,gen_tps,state_bytes,bytes_per_token,"
                           "decode_gbps,bw_fraction,gen_ids_hash,";
    cr_assert(!strncmp(line, contract, strlen(contract)), "header: %s", line);
    unsigned long long hash[2];
    for (int i = 0; i < 2; i++) {
        cr_assert_not_null(fgets(line, sizeof line, f));
        long long ctx;
        char *p = line;
        ctx = strtoll(p, &p, 10);
        cr_assert_eq(ctx, fr[i]);
        for (int c = 0; c < 9; c++) p = strchr(p, ',') + 1; /* to the 10th column */
        hash[i] = strtoull(p, NULL, 16);
    }
    fclose(f);
    unlink(csv);

    nf_session_opts so = nf_session_opts_default();
    so.n_threads = 2;
    so.prefill_chunk = 32;
    so.n_ctx = 512;
    nf_session *s = nf_session_create(TINY, &so);
    cr_assert_not_null(s, "%s", nf_error());
    const nf_hparams *hp = &nf_session_model(s)->hp;
    nf_token_seq seq;
    nf_token_seq_synthetic(7, hp->n_vocab, hp->eos_id, 160, &seq);
    for (int i = 0; i < 2; i++) {
        nf_prefill_stats st;
        cr_assert_eq(nf_session_set_prompt(s, seq.ids, (size_t)fr[i], NULL, 0, NULL, &st), 0, "%s", nf_error());
        int32_t gen[12];
        for (int k = 0; k < G; k++) {
            const float *l = nf_session_logits(s);
            int32_t best = -1;
            for (int32_t v = 0; v < hp->n_vocab; v++)
                if (v != hp->eos_id && (best < 0 || l[v] > l[best])) best = v;
            gen[k] = best;
            cr_assert_eq(nf_session_prefill(s, &best, 1, NULL, 0, NULL, &st), 0, "%s", nf_error());
        }
        cr_assert_eq(hash[i], fnv_bytes(gen, G), "ctx %lld: bench %016llx, session %016llx", (long long)fr[i],
                     hash[i], (unsigned long long)fnv_bytes(gen, G));
    }
    nf_token_seq_free(&seq);
    nf_session_free(s);
}
