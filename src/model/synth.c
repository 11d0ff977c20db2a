/* synth.c — presets and deterministic random weights for synthetic glm5-next models (see synth.h).
 *
 * Values come from a counter-based generator: element i of a tensor is derived from splitmix64 of
 * (seed, hash(name), i), Box-Muller for normals. So any chunk of any tensor can be produced independently,
 * and the weights do not depend on the recipe or on the write order. */
#include "model/synth.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/threads.h"
#include "formats/formats.h"
#include "util/error.h"

/* ---- presets ---- */

static int nf_synth_preset_full(const char *name, nf_hparams *hp);

void nf_synth_derive(nf_hparams *hp, int mla_every) {
    if (hp->n_layer > NF_MAX_LAYERS) return;   /* nf_hparams_validate reports it */
    hp->n_layer_total = hp->n_layer + hp->n_nextn;
    for (int i = 0; i < hp->n_layer; i++) {
        if (mla_every > 0) hp->layer_kind[i] = (i % mla_every == mla_every - 1) ? NF_LAYER_MLA : NF_LAYER_KDA;
        hp->layer_moe[i] = i >= hp->n_dense_lead;
        if (hp->layer_kind[i] != NF_LAYER_MLA) hp->indexer_shared[i] = 0;
    }
    for (int i = hp->n_layer; i < NF_MAX_LAYERS; i++) hp->layer_kind[i] = hp->layer_moe[i] = hp->indexer_shared[i] = 0;
}

/* "PRESET@N": the preset cut to its first N trunk layers (same kinds, MLA every 4th; the MTP block kept). Why: the
 * full glm53:q2 needs ~100 GB, which one 80 GB H100 cannot hold; glm53@32:q2 runs the same per-layer kernels at the
 * same shapes, so per-layer times, kernels per layer and bw_fraction can be compared there (never its t/s with
 * the full model's). Returns the trunk layer count, 0 without a suffix, -1 (nf_fail) if malformed. */
static int layer_suffix(const char *name, char *base, size_t cap) {
    const char *at = strchr(name, '@');
    size_t n = at ? (size_t)(at - name) : strlen(name);
    if (n >= cap) return nf_fail("preset name \"%s\" too long", name);
    memcpy(base, name, n);
    base[n] = 0;
    if (!at) return 0;
    char *end;
    long v = strtol(at + 1, &end, 10);
    if (end == at + 1 || *end || v < 1 || v > NF_MAX_LAYERS)
        return nf_fail("preset \"%s\": expected PRESET@LAYERS with LAYERS a positive trunk layer count, e.g. glm53@32", name);
    return (int)v;
}

int nf_synth_preset(const char *name, nf_hparams *hp) {
    char base[64];
    int layers = layer_suffix(name, base, sizeof base);
    if (layers < 0) return -1;
    if (nf_synth_preset_full(base, hp) < 0) return -1;
    if (layers) {
        if (layers > hp->n_layer)
            return nf_fail("preset \"%s\": %s has %d trunk layers; @%d asks for more", name, base, hp->n_layer, layers);
        if (layers <= hp->n_dense_lead)
            return nf_fail("preset \"%s\": @%d keeps only dense layers (%s has %d dense lead layers); keep at least "
                           "one MoE layer", name, layers, base, hp->n_dense_lead);
        hp->n_layer = layers;
        nf_synth_derive(hp, 4);
    }
    return 0;
}

static int nf_synth_preset_full(const char *name, nf_hparams *hp) {
    memset(hp, 0, sizeof *hp);
    strcpy(hp->arch, "glm5-next");
    hp->bos_id = hp->eos_id = hp->pad_id = -1;
    hp->rms_eps = 1e-5f;
    hp->indexer_ln_eps = 1e-6f;
    hp->kda_gate_lower_bound = -5.0f;
    hp->idx_select_tail = true;
    hp->expert_weights_scale = 2.5f;
    hp->expert_weights_norm = true;
    hp->swiglu_limit = 10.0f;
    hp->hc_count = 4;
    hp->hc_sinkhorn_iters = 20;
    hp->hc_eps = 1e-6f;
    if (!strcmp(name, "glm53")) {
        hp->n_layer = 45; hp->n_nextn = 1;
        hp->n_embd = 4096; hp->n_vocab = 154880; hp->n_ctx_train = 1048576;
        hp->n_head = 64; hp->q_lora_rank = 1536; hp->kv_lora_rank = 512; hp->qk_nope_dim = 256; hp->v_head_dim = 256;
        hp->kda_n_head = 64; hp->kda_head_dim = 128; hp->kda_conv = 4; hp->kda_gate_rank = 128;
        hp->idx_n_head = 32; hp->idx_head_dim = 128; hp->idx_topk = 2048; hp->idx_kpool = 4;
        hp->n_ff = 12288; hp->n_ff_exp = 2048; hp->n_expert = 288; hp->n_expert_used = 8; hp->n_expert_shared = 1;
        hp->n_dense_lead = 3;
        hp->bos_id = -1; hp->eos_id = 154820; hp->pad_id = 154820;
    } else if (!strcmp(name, "tiny")) {
        hp->n_layer = 4; hp->n_nextn = 1;
        hp->n_embd = 256; hp->n_vocab = 4096; hp->n_ctx_train = 4096;
        hp->n_head = 4; hp->q_lora_rank = 128; hp->kv_lora_rank = 64; hp->qk_nope_dim = 64; hp->v_head_dim = 64;
        hp->kda_n_head = 4; hp->kda_head_dim = 64; hp->kda_conv = 4; hp->kda_gate_rank = 64;
        hp->idx_n_head = 4; hp->idx_head_dim = 64; hp->idx_topk = 16; hp->idx_kpool = 4;
        hp->n_ff = 512; hp->n_ff_exp = 256; hp->n_expert = 8; hp->n_expert_used = 2; hp->n_expert_shared = 1;
        hp->n_dense_lead = 1;
    } else {
        return nf_fail("unknown preset \"%s\" (known: tiny, glm53)", name);
    }
    nf_synth_derive(hp, 4);
    return 0;
}

/* ---- values ---- */

static inline uint64_t mix64(uint64_t z) {   /* splitmix64 finaliser */
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t hash_name(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;   /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static inline double unit(uint64_t h) { return ((double)(h >> 11) + 0.5) * (1.0 / 9007199254740992.0); } /* (0,1) */

typedef enum { DIST_NORMAL, DIST_CONST, DIST_DT_BIAS, DIST_NEG_EXP_ALOG } dist_kind;

typedef struct {
    dist_kind kind;
    double a;       /* normal: sigma; const: value */
} dist;

static const char *local_name(const char *name) {
    if (strncmp(name, "blk.", 4)) return name;
    const char *p = strchr(name + 4, '.');
    return p ? p + 1 : name;
}

static dist pick(const nf_hparams *hp, const nf_layout_tensor *t) {
    const char *n = local_name(t->name);
    double fan = (double)t->ne[0];
    double resid = 1.0 / sqrt(2.0 * (hp->n_layer > 0 ? hp->n_layer : 1));
    switch (t->role) {
    case NF_ROLE_NORM:
        if (!strcmp(n, "exp_probs_b.bias")) return (dist){DIST_NORMAL, 0.01};
        if (strstr(n, ".bias")) return (dist){DIST_CONST, 0.0};
        return (dist){DIST_CONST, 1.0};
    case NF_ROLE_HC_PARAM:
        if (strstr(n, "_scale")) return (dist){DIST_CONST, 1.0};
        return (dist){DIST_NORMAL, 0.1};    /* base */
    case NF_ROLE_HC_FN: return (dist){DIST_NORMAL, 0.5 / sqrt(fan)};
    case NF_ROLE_KDA_PARAM:
        if (!strcmp(n, "ssm_dt.bias")) return (dist){DIST_DT_BIAS, 0};
        if (!strcmp(n, "ssm_a")) return (dist){DIST_NEG_EXP_ALOG, 0};
        return (dist){DIST_NORMAL, 1.0 / sqrt((double)t->ne[0])};   /* conv taps */
    case NF_ROLE_INDEXER_PARAM: return (dist){DIST_NORMAL, 0.1};      /* ape */
    case NF_ROLE_EMBD: return (dist){DIST_NORMAL, 1.0};
    case NF_ROLE_MLA:
        if (!strcmp(n, "attn_k_b.weight")) return (dist){DIST_NORMAL, 1.0 / sqrt((double)t->ne[1])};
        if (!strcmp(n, "attn_output.weight")) return (dist){DIST_NORMAL, resid / sqrt(fan)};
        return (dist){DIST_NORMAL, 1.0 / sqrt(fan)};
    case NF_ROLE_KDA:
        if (!strcmp(n, "attn_output.weight")) return (dist){DIST_NORMAL, resid / sqrt(fan)};
        return (dist){DIST_NORMAL, 1.0 / sqrt(fan)};
    case NF_ROLE_DENSE_FFN: case NF_ROLE_SHEXP:
        if (strstr(n, "ffn_down")) return (dist){DIST_NORMAL, resid / sqrt(fan)};
        return (dist){DIST_NORMAL, 1.0 / sqrt(fan)};
    case NF_ROLE_EXP_DOWN: return (dist){DIST_NORMAL, resid / sqrt(fan)};
    default: return (dist){DIST_NORMAL, 1.0 / sqrt(fan)};
    }
}

void nf_synth_values(const nf_hparams *hp, const nf_layout_tensor *t, uint64_t seed, int64_t first, int64_t n,
                     float *dst) {
    dist d = pick(hp, t);
    uint64_t key = mix64(seed ^ mix64(hash_name(t->name)));
    for (int64_t k = 0; k < n; k++) {
        uint64_t i = (uint64_t)(first + k);
        switch (d.kind) {
        case DIST_CONST:
            dst[k] = (float)d.a;
            break;
        case DIST_NORMAL: {
            uint64_t pair = i >> 1;
            double u1 = unit(mix64(key ^ (2 * pair))), u2 = unit(mix64(key ^ (2 * pair + 1) ^ 0x5bd1e995u));
            double r = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
            dst[k] = (float)(d.a * r * ((i & 1) ? sin(th) : cos(th)));
            break;
        }
        case DIST_DT_BIAS: {   /* inverse softplus of dt, dt = exp(U(ln 1e-3, ln 1e-1)) clamped >= 1e-4 */
            double dt = exp(log(1e-3) + unit(mix64(key ^ i)) * (log(1e-1) - log(1e-3)));
            if (dt < 1e-4) dt = 1e-4;
            dst[k] = (float)(dt + log(-expm1(-dt)));
            break;
        }
        case DIST_NEG_EXP_ALOG: {   /* ssm_a = -exp(A_log), A_log ~ U(-0.5, 0.5) around HF's bounded init 0 */
            double alog = unit(mix64(key ^ i)) - 0.5;
            dst[k] = (float)-exp(alog);
            break;
        }
        }
    }
}

/* ---- writing ---- */

/* f32 rows -> storage type. Thread-safe (no error state touched); -1 if the quantizer refused. */
static int encode(uint32_t type, const float *src, uint8_t *dst, int64_t rows, int64_t row_len, size_t row_bytes) {
    switch (type) {
    case NF_TYPE_F32:
        memcpy(dst, src, (size_t)(rows * row_len) * 4);
        return 0;
    case NF_TYPE_F16:
        for (int64_t i = 0; i < rows * row_len; i++) {
            uint16_t h = nf_f32_to_f16(src[i]);
            memcpy(dst + 2 * i, &h, 2);
        }
        return 0;
    case NF_TYPE_BF16:
        for (int64_t i = 0; i < rows * row_len; i++) {
            uint16_t h = nf_f32_to_bf16(src[i]);
            memcpy(dst + 2 * i, &h, 2);
        }
        return 0;
    default:
        for (int64_t r = 0; r < rows; r++)
            if (nf_quantize(type, src + r * row_len, dst + (size_t)r * row_bytes, row_len, row_len, NULL) != row_bytes)
                return -1;
        return 0;
    }
}

typedef struct {
    const nf_hparams *hp;
    const nf_layout_tensor *t;
    uint64_t seed;
    uint32_t type;
    int64_t row_len, rows, rows_per_task;
    size_t row_bytes;
    uint8_t *out;
    float **bufs;            /* one scratch buffer of rows_per_task * row_len floats per thread */
    volatile int failed;
} fill_job;

static void fill_task(void *ctx, int64_t task, int thread) {
    fill_job *j = ctx;
    int64_t r0 = task * j->rows_per_task;
    int64_t nr = j->rows - r0 < j->rows_per_task ? j->rows - r0 : j->rows_per_task;
    if (nr <= 0 || j->failed) return;
    float *buf = j->bufs[thread];
    nf_synth_values(j->hp, j->t, j->seed, r0 * j->row_len, nr * j->row_len, buf);
    if (encode(j->type, buf, j->out + (size_t)r0 * j->row_bytes, nr, j->row_len, j->row_bytes) < 0) j->failed = 1;
}

uint64_t nf_synth_block_key(uint64_t seed, const char *name) {
    return mix64(mix64(seed ^ 0x706f6f6c626c6bull) ^ hash_name(name));   /* "poolblk": not the values' key */
}

int nf_synth_sigma(const nf_hparams *hp, const nf_layout_tensor *t, double *sigma) {
    dist d = pick(hp, t);
    if (d.kind != DIST_NORMAL) return 0;
    if (sigma) *sigma = d.a;
    return 1;
}

uint64_t nf_synth_tensor_bytes(const nf_layout_tensor *t, uint32_t type) {
    return (uint64_t)nf_row_bytes(type, t->ne[0]) * (uint64_t)(nf_layout_nelements(t) / t->ne[0]);
}

int nf_synth_encode(const nf_hparams *hp, const nf_layout_tensor *t, uint64_t seed, uint32_t type, uint8_t *out,
                    nf_pool *pool) {
    const int64_t task_elems = 1 << 16;
    fill_job j = {hp, t, seed, type, t->ne[0], nf_layout_nelements(t) / t->ne[0], 0, nf_row_bytes(type, t->ne[0]),
                  out, NULL, 0};
    j.rows_per_task = task_elems / j.row_len > 0 ? task_elems / j.row_len : 1;
    int n_threads = pool ? nf_pool_size(pool) : 1;
    j.bufs = nf_xcalloc((size_t)n_threads, sizeof *j.bufs);
    for (int k = 0; k < n_threads; k++) j.bufs[k] = nf_xmalloc((size_t)(j.rows_per_task * j.row_len) * sizeof(float));
    int64_t n_tasks = (j.rows + j.rows_per_task - 1) / j.rows_per_task;
    if (pool)
        nf_pool_run(pool, n_tasks, fill_task, &j);
    else
        for (int64_t k = 0; k < n_tasks; k++) fill_task(&j, k, 0);
    for (int k = 0; k < n_threads; k++) free(j.bufs[k]);
    free(j.bufs);
    if (j.failed) return nf_fail("%s: quantizing to %s failed", t->name, nf_type_get(type)->name);
    return 0;
}

int nf_synth_write(const char *path, const nf_hparams *hp, const nf_recipe *r, uint64_t seed,
                   nf_synth_progress progress, void *ctx, int *n_fallback) {
    int n;
    nf_layout_tensor *lt = nf_layout_tensors_alloc(hp, &n);
    if (!lt) return -1;
    uint32_t *types = nf_xcalloc((size_t)n, sizeof *types);
    int fallbacks = 0;
    uint64_t total = 0, done = 0;
    nf_pool *pool = NULL;
    gguf_writer *w = gguf_writer_create(path);
    if (!w) { free(lt); free(types); return -1; }
    if (nf_layout_write_hparams(hp, w) < 0) goto fail;
    gguf_set_str(w, "general.name", "nextflash synthetic glm5-next");
    gguf_set_str(w, "general.nextflash.recipe", r->name);
    gguf_set_u64(w, "general.nextflash.seed", seed);
    for (int i = 0; i < n; i++) {
        bool fb = false;
        types[i] = nf_recipe_type(r, &lt[i], &fb);
        fallbacks += fb;
        total += nf_synth_tensor_bytes(&lt[i], types[i]);
        if (gguf_writer_add_tensor(w, lt[i].name, types[i], lt[i].n_dims, lt[i].ne) < 0) goto fail;
    }
    if (gguf_writer_begin_data(w) < 0) goto fail;

    /* Rows are generated and encoded in parallel (values do not depend on the split); one tensor is in memory. */
    pool = nf_pool_create(total > (4u << 20) ? 0 : 1);
    if (!pool) { nf_fail("cannot start worker threads"); goto fail; }
    for (int i = 0; i < n; i++) {
        const nf_layout_tensor *t = &lt[i];
        size_t size = (size_t)nf_synth_tensor_bytes(t, types[i]);
        uint8_t *out = malloc(size ? size : 1);
        if (!out) { nf_fail("out of memory for %s (%zu bytes)", t->name, size); goto fail; }
        if (nf_synth_encode(hp, t, seed, types[i], out, pool) < 0) { free(out); goto fail; }
        int rc = gguf_writer_write_tensor(w, out, size);
        free(out);
        if (rc < 0) goto fail;
        done += size;
        if (progress) progress(ctx, i, n, t, done, total);
    }
    nf_pool_free(pool);
    free(lt);
    free(types);
    if (n_fallback) *n_fallback = fallbacks;
    return gguf_writer_finish(w);
fail:
    if (pool) nf_pool_free(pool);
    gguf_writer_abort(w);
    free(lt);
    free(types);
    return -1;
}
