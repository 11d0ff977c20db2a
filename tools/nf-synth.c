/* nf-synth — write a synthetic glm5-next GGUF of any dimensions with deterministic seeded random weights.
 *
 * Thin: flags -> nf_hparams (a preset, then overrides) -> nf_synth_write (src/model/synth.c). The file is the
 * exact layout nf_model_load binds (src/model/layout.c), in any recipe (src/model/recipe.c). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats/formats.h"
#include "model/layout.h"
#include "model/recipe.h"
#include "model/synth.h"
#include "util/error.h"

static void usage(FILE *o) {
    fprintf(o,
"usage: nf-synth --out FILE --recipe R [--preset tiny|glm53] [--seed S] [dimension overrides]\n"
"       nf-synth --dry-run PRESET[:RECIPE] [dimension overrides]\n"
"\n"
"Writes a glm5-next GGUF (llama.cpp layout, docs/gguf.md) with deterministic random weights: the same seed\n"
"gives the same weights in every recipe. Tensors are written one at a time (one tensor in memory).\n"
"\n"
"  --out FILE          output path (written to FILE.tmp, renamed when complete)\n"
"  --recipe R          f32 | bf16 | q8 | q4 | q2   (docs/gguf.md \"Recipes\")\n"
"  --preset P          tiny (default: ~10M params, every feature) | glm53 (released GLM-5.3-Flash dims, ~320B)\n"
"  --seed S            PRNG seed (default 1)\n"
"  --dry-run           print the layout summary (tensors, parameters, bytes) and write nothing; without a\n"
"                      recipe, one line per recipe (e.g. nf-synth --dry-run glm53)\n"
"  PRESET:RECIPE       the same as --preset PRESET --recipe RECIPE (e.g. glm53:q2, as nf-bench --synthetic)\n"
"                      (PRESET@N: the preset's first N trunk layers, e.g. glm53@32 = --preset glm53 --layers 32)\n"
"  --quiet             no progress output\n"
"\n"
"dimension overrides (applied after the preset):\n"
"  --layers N          trunk layers                 --nextn N         MTP blocks after the trunk\n"
"  --hidden N          embedding width              --vocab N         vocabulary rows\n"
"  --ctx N             context_length               --mla-every N     MLA at i %% N == N-1, KDA elsewhere (default 4)\n"
"  --layer-types S     explicit kinds, one char per trunk layer: K (KDA) or M (MLA); overrides --mla-every\n"
"  --indexer-types S   one char per trunk layer: F (own indexer) or S (shared; MLA layers only)\n"
"  --heads N           MLA heads                    --q-lora N        q LoRA rank\n"
"  --kv-lora N         kv LoRA rank (latent)        --qk-nope N       MLA key head dim\n"
"  --v-head N          MLA value head dim\n"
"  --kda-heads N       KDA heads                    --kda-head-dim N  KDA head dim (also the gate rank)\n"
"  --conv N            KDA conv kernel              --gate-rank N     KDA f/g low rank\n"
"  --idx-heads N       indexer heads                --idx-dim N       indexer head dim\n"
"  --topk N            indexer top-k tokens         --kpool N         indexer pool size\n"
"  --select-tail 0|1   force-select the incomplete pool tail\n"
"  --ff N              dense FFN width              --ff-exp N        expert width\n"
"  --experts N         routed experts               --experts-used N  experts per token\n"
"  --shared-experts N  shared experts               --dense-lead N    leading dense layers\n"
"  --hc N              hyper-connection streams     --sinkhorn N      Sinkhorn iterations\n"
"  --swiglu-limit X    SwiGLU clamp (0 = none)      --expert-scale X  routed weight scale\n"
"  --rms-eps X         RMSNorm eps                  --gate-lower-bound X  KDA gate bound\n");
}

static long parse_int(const char *flag, const char *v, long lo, long hi) {
    if (!v) nf_die("%s needs a value", flag);
    errno = 0;
    char *end;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end) nf_die("%s: expected an integer, got '%s'", flag, v);
    if (x < lo || x > hi) nf_die("%s: %ld is out of range [%ld, %ld]", flag, x, lo, hi);
    return x;
}

static float parse_float(const char *flag, const char *v, double lo, double hi) {
    if (!v) nf_die("%s needs a value", flag);
    errno = 0;
    char *end;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= lo && x <= hi)) nf_die("%s: expected a number in [%g, %g], got '%s'", flag, lo, hi, v);
    return (float)x;
}

static bool flag_given(int argc, char **argv, const char *flag) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], flag)) return true;
    return false;
}

static int progress_last;
static time_t progress_t0;
static void progress(void *ctx, int index, int count, const nf_layout_tensor *t, uint64_t done, uint64_t total) {
    (void)ctx;
    time_t now = time(NULL);
    if (index + 1 < count && now == progress_last) return;
    progress_last = (int)now;
    fprintf(stderr, "\r[%5d/%5d] %8.2f / %.2f GB  %3.0f%%  %lds  %-40.40s", index + 1, count, done / 1e9, total / 1e9,
            total ? 100.0 * (double)done / (double)total : 100.0, (long)(now - progress_t0), t->name);
    if (index + 1 == count) fputc('\n', stderr);
}

/* Tensor census of hp under recipe r on stdout; returns the total bytes. */
static uint64_t summarize(const nf_hparams *hp, const char *preset, const nf_recipe *r, uint64_t seed, bool quiet) {
    int n;
    nf_layout_tensor *lt = nf_layout_tensors_alloc(hp, &n);
    if (!lt) nf_die("%s", nf_error());
    int64_t params = 0, trunk = 0;
    uint64_t bytes = 0, trunk_bytes = 0;
    int fallbacks = 0;
    for (int i = 0; i < n; i++) {
        bool fb;
        uint32_t t = nf_recipe_type(r, &lt[i], &fb);
        int64_t ne = nf_layout_nelements(&lt[i]);
        uint64_t b = nf_synth_tensor_bytes(&lt[i], t);
        params += ne;
        bytes += b;
        if (!lt[i].mtp) trunk += ne, trunk_bytes += b;
        if (fb) {
            fallbacks++;
            if (!quiet)
                fprintf(stderr, "nf-synth: %s: rows of %lld do not fit %s, stored as %s\n", lt[i].name,
                        (long long)lt[i].ne[0], nf_type_get(r->type[lt[i].role])->name, nf_type_get(t)->name);
        }
    }
    free(lt);
    printf("preset %s, recipe %s, seed %llu: %d layers (+%d MTP), n_embd %d, vocab %d\n", preset, r->name,
           (unsigned long long)seed, hp->n_layer, hp->n_nextn, hp->n_embd, hp->n_vocab);
    printf("%d tensors, %lld parameters (%lld trunk), %.3f GB (%.3f GB trunk), %d recipe fallbacks\n", n,
           (long long)params, (long long)trunk, bytes / 1e9, trunk_bytes / 1e9, fallbacks);
    return bytes;
}

int main(int argc, char **argv) {
    nf_progname = "nf-synth";
    const char *out = NULL, *recipe_name = NULL, *preset = "tiny", *layer_types = NULL, *indexer_types = NULL;
    uint64_t seed = 1;
    bool dry = false, quiet = false, gate_rank_set = false;
    int mla_every = 4;

    const char *spec = NULL;   /* PRESET or PRESET:RECIPE, the one positional argument */
    static char spec_preset[64];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "--preset")) {
            if (i + 1 >= argc) nf_die("--preset needs a value");
            preset = argv[++i];
        } else if (a[0] == '-') {
            if (strcmp(a, "--dry-run") && strcmp(a, "--quiet")) i++;   /* every other flag takes a value */
        } else {
            if (spec) nf_die("unexpected argument '%s' (one PRESET[:RECIPE] at most)", a);
            spec = a;
        }
    }
    if (spec) {
        if (flag_given(argc, argv, "--preset")) nf_die("give the preset once: '%s' or --preset", spec);
        const char *colon = strchr(spec, ':');
        size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
        if (n == 0 || n >= sizeof spec_preset) nf_die("'%s': expected PRESET[:RECIPE], e.g. glm53:q2", spec);
        memcpy(spec_preset, spec, n);
        preset = spec_preset;
        if (colon) {
            if (flag_given(argc, argv, "--recipe")) nf_die("give the recipe once: '%s' or --recipe", spec);
            recipe_name = colon + 1;
        }
    }
    nf_hparams hp;
    if (nf_synth_preset(preset, &hp) < 0) nf_die("%s: %s", spec ? spec : "--preset", nf_error());

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define INT(flag, field, lo, hi) if (!strcmp(a, flag)) { hp.field = (int)parse_int(flag, v, lo, hi); i++; continue; }
#define FLT(flag, field, lo, hi) if (!strcmp(a, flag)) { hp.field = parse_float(flag, v, lo, hi); i++; continue; }
        if (!strcmp(a, "--preset")) { i++; continue; }
        if (a == spec) continue;
        if (!strcmp(a, "--out")) { if (!v) nf_die("--out needs a value"); out = v; i++; continue; }
        if (!strcmp(a, "--recipe")) { if (!v) nf_die("--recipe needs a value"); recipe_name = v; i++; continue; }
        if (!strcmp(a, "--seed")) { seed = (uint64_t)parse_int("--seed", v, 0, LONG_MAX); i++; continue; }
        if (!strcmp(a, "--dry-run")) { dry = true; continue; }
        if (!strcmp(a, "--quiet")) { quiet = true; continue; }
        if (!strcmp(a, "--mla-every")) { mla_every = (int)parse_int(a, v, 1, NF_MAX_LAYERS); i++; continue; }
        if (!strcmp(a, "--layer-types")) { if (!v) nf_die("--layer-types needs a value"); layer_types = v; i++; continue; }
        if (!strcmp(a, "--indexer-types")) { if (!v) nf_die("--indexer-types needs a value"); indexer_types = v; i++; continue; }
        if (!strcmp(a, "--gate-rank")) { hp.kda_gate_rank = (int)parse_int(a, v, 1, 1 << 20); gate_rank_set = true; i++; continue; }
        if (!strcmp(a, "--select-tail")) { hp.idx_select_tail = parse_int(a, v, 0, 1); i++; continue; }
        INT("--layers", n_layer, 1, NF_MAX_LAYERS)
        INT("--nextn", n_nextn, 0, NF_MAX_LAYERS)
        INT("--hidden", n_embd, 1, 1 << 20)
        INT("--vocab", n_vocab, 1, 1 << 24)
        INT("--ctx", n_ctx_train, 1, INT_MAX)
        INT("--heads", n_head, 1, 1 << 16)
        INT("--q-lora", q_lora_rank, 1, 1 << 20)
        INT("--kv-lora", kv_lora_rank, 1, 1 << 20)
        INT("--qk-nope", qk_nope_dim, 1, 1 << 16)
        INT("--v-head", v_head_dim, 1, 1 << 16)
        INT("--kda-heads", kda_n_head, 1, 1 << 16)
        INT("--kda-head-dim", kda_head_dim, 1, 1 << 16)
        INT("--conv", kda_conv, 1, 64)
        INT("--idx-heads", idx_n_head, 1, 1 << 16)
        INT("--idx-dim", idx_head_dim, 1, 1 << 16)
        INT("--topk", idx_topk, 1, 1 << 24)
        INT("--kpool", idx_kpool, 1, 1 << 16)
        INT("--ff", n_ff, 1, 1 << 24)
        INT("--ff-exp", n_ff_exp, 1, 1 << 24)
        INT("--experts", n_expert, 1, 1 << 16)
        INT("--experts-used", n_expert_used, 1, 1 << 16)
        INT("--shared-experts", n_expert_shared, 0, 64)
        INT("--dense-lead", n_dense_lead, 0, NF_MAX_LAYERS)
        INT("--hc", hc_count, 1, 64)
        INT("--sinkhorn", hc_sinkhorn_iters, 1, 10000)
        FLT("--swiglu-limit", swiglu_limit, 0, 1e6)
        FLT("--expert-scale", expert_weights_scale, -1e6, 1e6)
        FLT("--rms-eps", rms_eps, 1e-12, 1)
        FLT("--gate-lower-bound", kda_gate_lower_bound, -1e6, 0)
#undef INT
#undef FLT
        nf_die("unknown argument '%s' (see --help)", a);
    }
    if (!gate_rank_set) hp.kda_gate_rank = hp.kda_head_dim;
    /* preset values that no longer fit an override are clamped; values the user gave are checked */
    if (!flag_given(argc, argv, "--dense-lead") && hp.n_dense_lead > hp.n_layer) hp.n_dense_lead = hp.n_layer;
    if (!flag_given(argc, argv, "--experts-used") && hp.n_expert_used > hp.n_expert) hp.n_expert_used = hp.n_expert;
    if (hp.n_dense_lead > hp.n_layer) nf_die("--dense-lead: %d exceeds --layers %d", hp.n_dense_lead, hp.n_layer);
    if (hp.n_layer + hp.n_nextn > NF_MAX_LAYERS)
        nf_die("--layers + --nextn: %d blocks exceed the limit of %d", hp.n_layer + hp.n_nextn, NF_MAX_LAYERS);
    if (layer_types) {
        if ((int)strlen(layer_types) != hp.n_layer)
            nf_die("--layer-types: %zu characters for %d layers", strlen(layer_types), hp.n_layer);
        for (int i = 0; i < hp.n_layer; i++) {
            char c = layer_types[i];
            if (c != 'K' && c != 'M') nf_die("--layer-types: character %d is '%c', expected K or M", i, c);
            hp.layer_kind[i] = c == 'M' ? NF_LAYER_MLA : NF_LAYER_KDA;
        }
        mla_every = 0;
    }
    nf_synth_derive(&hp, mla_every);
    if (indexer_types) {
        if ((int)strlen(indexer_types) != hp.n_layer)
            nf_die("--indexer-types: %zu characters for %d layers", strlen(indexer_types), hp.n_layer);
        for (int i = 0; i < hp.n_layer; i++) {
            char c = indexer_types[i];
            if (c != 'F' && c != 'S') nf_die("--indexer-types: character %d is '%c', expected F or S", i, c);
            if (c == 'S' && hp.layer_kind[i] != NF_LAYER_MLA)
                nf_die("--indexer-types: layer %d is not an MLA layer and cannot share an indexer", i);
            hp.indexer_shared[i] = c == 'S';
        }
    }
    if (hp.n_expert_used > hp.n_expert) nf_die("--experts-used: %d exceeds --experts %d", hp.n_expert_used, hp.n_expert);
    if (hp.idx_topk % hp.idx_kpool) nf_die("--topk: %d is not a multiple of --kpool %d", hp.idx_topk, hp.idx_kpool);
    if (nf_hparams_validate(&hp) < 0) nf_die("%s", nf_error());

    if (!recipe_name && !dry) nf_die("--recipe is required (%s)", nf_recipe_names());
    if (!out && !dry) nf_die("--out is required (or --dry-run)");
    if (!recipe_name) {   /* dry run of every recipe */
        for (int i = 0; nf_recipe_at(i); i++) summarize(&hp, preset, nf_recipe_at(i), seed, true);
        return 0;
    }
    const nf_recipe *r = nf_recipe_find(recipe_name);
    if (!r) nf_die("--recipe: %s", nf_error());
    uint64_t bytes = summarize(&hp, preset, r, seed, quiet);
    if (dry) return 0;

    progress_t0 = time(NULL);
    bool show = !quiet && bytes > (64u << 20);
    if (nf_synth_write(out, &hp, r, seed, show ? progress : NULL, NULL, NULL) < 0) nf_die("%s", nf_error());
    printf("wrote %s\n", out);
    return 0;
}
