/* recipe.c — the recipe table (role -> storage type) and the block-size fallback (see recipe.h). */
#include "model/recipe.h"

#include <strings.h>

#include "formats/formats.h"
#include "util/error.h"

#define F32 NF_TYPE_F32
#define BF16 NF_TYPE_BF16
#define Q8 NF_TYPE_Q8_0
#define Q4K NF_TYPE_Q4_K
#define Q2K NF_TYPE_Q2_K
#define IQ2 NF_TYPE_IQ2_XXS

/* Roles that stay F32 in every recipe: params, and the small precision-sensitive matrices (hc fn, router,
 * indexer weights projection and compressor gate). */
#define SMALL_F32 \
    [NF_ROLE_NORM] = F32, [NF_ROLE_HC_PARAM] = F32, [NF_ROLE_KDA_PARAM] = F32, [NF_ROLE_INDEXER_PARAM] = F32, \
    [NF_ROLE_HC_FN] = F32, [NF_ROLE_ROUTER] = F32, [NF_ROLE_INDEXER_SMALL] = F32

#define BIG(t) \
    [NF_ROLE_EMBD] = t, [NF_ROLE_OUTPUT] = t, [NF_ROLE_KDA] = t, [NF_ROLE_MLA] = t, [NF_ROLE_INDEXER] = t, \
    [NF_ROLE_DENSE_FFN] = t, [NF_ROLE_SHEXP] = t, [NF_ROLE_NEXTN_PROJ] = t

static const nf_recipe recipes[] = {
    {"f32", "everything F32",
     {SMALL_F32, BIG(F32), [NF_ROLE_EXP_GATE] = F32, [NF_ROLE_EXP_UP] = F32, [NF_ROLE_EXP_DOWN] = F32}},
    {"bf16", "matrices BF16; norms, hc, router, indexer small tensors F32",
     {SMALL_F32, BIG(BF16), [NF_ROLE_EXP_GATE] = BF16, [NF_ROLE_EXP_UP] = BF16, [NF_ROLE_EXP_DOWN] = BF16}},
    {"q8", "matrices Q8_0; norms, hc, router, indexer small tensors F32",
     {SMALL_F32, BIG(Q8), [NF_ROLE_EXP_GATE] = Q8, [NF_ROLE_EXP_UP] = Q8, [NF_ROLE_EXP_DOWN] = Q8}},
    {"q4", "routed experts Q4_K; other matrices Q8_0; norms, hc, router, indexer small tensors F32",
     {SMALL_F32, BIG(Q8), [NF_ROLE_EXP_GATE] = Q4K, [NF_ROLE_EXP_UP] = Q4K, [NF_ROLE_EXP_DOWN] = Q4K}},
    {"q2", "routed gate/up IQ2_XXS, down Q2_K; other matrices Q8_0; norms, hc, router, indexer small tensors F32",
     {SMALL_F32, BIG(Q8), [NF_ROLE_EXP_GATE] = IQ2, [NF_ROLE_EXP_UP] = IQ2, [NF_ROLE_EXP_DOWN] = Q2K}},
};
#define N_RECIPES ((int)(sizeof recipes / sizeof recipes[0]))

const char *nf_recipe_names(void) { return "f32, bf16, q8, q4, q2"; }

const nf_recipe *nf_recipe_at(int i) { return i >= 0 && i < N_RECIPES ? &recipes[i] : NULL; }

const nf_recipe *nf_recipe_find(const char *name) {
    for (int i = 0; name && i < N_RECIPES; i++)
        if (!strcasecmp(recipes[i].name, name)) return &recipes[i];
    nf_fail("unknown recipe \"%s\" (known: %s)", name ? name : "", nf_recipe_names());
    return NULL;
}

uint32_t nf_type_fit(uint32_t type, int64_t row_len) {
    for (;;) {
        const nf_type_info *ti = nf_type_get(type);
        if (ti->block_size > 0 && row_len > 0 && row_len % ti->block_size == 0) return type;
        switch (ti->block_size) {
        case 256: type = Q8; break;          /* K-quants and IQ -> Q8_0 */
        case 32:  type = BF16; break;        /* Q8_0 (and other 32-blocks) -> BF16 */
        default:  return F32;                /* unknown type or empty rows */
        }
    }
}

uint32_t nf_recipe_type(const nf_recipe *r, const nf_layout_tensor *t, bool *fell_back) {
    uint32_t want = nf_role_is_param(t->role) ? F32 : r->type[t->role];
    uint32_t got = nf_type_fit(want, t->ne[0]);
    if (fell_back) *fell_back = got != want;
    return got;
}
