/* synth.h — synthetic glm5-next models: presets and deterministic seeded random weights.
 *
 * A synthetic model is any nf_hparams (a preset, then any dimension overridden) written in the layout of
 * layout.h with a recipe of recipe.h. Every value is a pure function of (seed, tensor name, element index), so
 * the same seed gives the same weights in every recipe and whatever the write order. Scales keep activations
 * finite through all layers: matrices ~ N(0, 1/sqrt(fan_in)), residual outputs further scaled by
 * 1/sqrt(2 n_layer), norms 1, hc base small and scale 1, A_log and dt_bias in the HF init ranges, router bias
 * small. Tensors are generated and written one at a time, so a glm53-sized file needs one tensor in memory. */
#ifndef NF_MODEL_SYNTH_H
#define NF_MODEL_SYNTH_H

#include <stdint.h>

#include "model/layout.h"
#include "model/model.h"
#include "model/recipe.h"

/* Fill hp with a preset: "tiny" (~10M parameters, every feature: KDA + MLA, dense + MoE, hc 4, indexer
 * kpool 4, one MTP block) or "glm53" (the released GLM-5.3-Flash dimensions, spec §1). -1 if unknown. */
int nf_synth_preset(const char *name, nf_hparams *hp);
/* Recompute the derived per-layer arrays after a dimension override: layer kinds (MLA where i % mla_every ==
 * mla_every-1; mla_every 0 keeps the current kinds), layer_moe from n_dense_lead, n_layer_total. */
void nf_synth_derive(nf_hparams *hp, int mla_every);

/* Values of elements [first, first+n) of tensor t (flattened, ne[0] fastest). */
void nf_synth_values(const nf_hparams *hp, const nf_layout_tensor *t, uint64_t seed, int64_t first, int64_t n,
                     float *dst);

typedef void (*nf_synth_progress)(void *ctx, int index, int count, const nf_layout_tensor *t, uint64_t bytes_done,
                                  uint64_t bytes_total);

/* Write a whole model. Returns 0, or -1 (partial file removed). The number of tensors whose recipe type fell back
 * to a wider one (rows not a multiple of the block size) is stored in *n_fallback when given. */
int nf_synth_write(const char *path, const nf_hparams *hp, const nf_recipe *r, uint64_t seed,
                   nf_synth_progress progress, void *ctx, int *n_fallback);

#endif
