/* recipe.h — quantization recipes: a recipe name maps each tensor role (layout.h) to a storage type.
 *
 * nf-convert and nf-synth both pick types here, so a recipe means the same thing everywhere (docs/gguf.md
 * "Recipes"). Param roles (norms, biases, hc base/scale, KDA conv/dt_bias/ssm_a, indexer ape) are F32 in every
 * recipe. When a matrix's row length (ne[0]) is not a multiple of the wanted type's block size the type falls
 * back along IQ2_XXS/Q2_K/Q4_K/Q6_K (256) -> Q8_0 (32) -> BF16 (1); nf_recipe_type reports whether it did.
 *
 *   f32   everything F32
 *   bf16  matrices BF16; hc fn, router, indexer.proj/compressor gate and params F32
 *   q8    matrices Q8_0;  hc fn, router, indexer.proj/compressor gate and params F32
 *   q4    routed experts Q4_K; attention, KDA, indexer q/k, shared/dense FFN, embeddings, output, eh_proj Q8_0;
 *         hc fn, router, indexer.proj/compressor gate and params F32
 *   q2    as q4 but routed gate/up IQ2_XXS, routed down Q2_K */
#ifndef NF_MODEL_RECIPE_H
#define NF_MODEL_RECIPE_H

#include <stdbool.h>
#include <stdint.h>

#include "model/layout.h"

typedef struct {
    const char *name;
    const char *description;
    uint32_t type[NF_ROLE_COUNT];   /* wanted nf_type per role */
} nf_recipe;

/* Recipe by name (case-insensitive). NULL with nf_error() listing the known names. */
const nf_recipe *nf_recipe_find(const char *name);
/* The i-th recipe (NULL past the end), for listings. */
const nf_recipe *nf_recipe_at(int i);
/* "f32, bf16, q8, q4, q2" */
const char *nf_recipe_names(void);

/* The type `type` falls back to for rows of row_len elements (itself when it fits). */
uint32_t nf_type_fit(uint32_t type, int64_t row_len);
/* Storage type for one layout tensor under recipe r. *fell_back (optional) is set when the wanted type did
 * not fit the row length and a fallback was taken. */
uint32_t nf_recipe_type(const nf_recipe *r, const nf_layout_tensor *t, bool *fell_back);

#endif
