/* hf_config.h — a Hugging Face glm5_next config.json → nf_hparams (plus what the converter needs to know).
 *
 * Accepts the released layout (text fields nested under "text_config", model_type glm5_next) and a flat
 * text-only config (model_type glm5_next_text, or glm5_next without text_config), exactly as transformers'
 * Glm5NextConfig does. Every field the model depends on is read from the file; a field that is absent takes the
 * value transformers itself would give it (its class default or its __post_init__ derivation: layer_types,
 * mlp_layer_types, indexer_types, linear_attn_config, index_kpool 16 ...). The core dimensions are required.
 * A value we do not implement (qk_rope_head_dim > 0, an unknown layer type, hc_mult != 4, scoring_func other than
 * sigmoid, a quantization_config other than fp8 128x128 blocks, ...) is refused with an error naming the field. */
#ifndef NF_CONVERT_HF_CONFIG_H
#define NF_CONVERT_HF_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

#define NF_HF_MAX_EOS 8

typedef struct {
    nf_hparams hp;              /* n_nextn is 0: MTP layers are not converted yet (see n_mtp_config) */
    int n_mtp_config;           /* num_nextn_predict_layers from the file (0 if absent) */
    bool tie_embeddings;        /* tie_word_embeddings: output = token_embd when lm_head is absent */
    bool fp8;                   /* quantization_config: fp8 e4m3 with block scales */
    int64_t fp8_block[2];       /* weight_block_size (rows, cols) */
    int32_t eos_ids[NF_HF_MAX_EOS];
    int n_eos;
    char model_type[64];
    char defaulted[512];        /* comma-separated notable fields taken from HF defaults (for the log) */
} nf_hf_config;

/* Parse config.json text. 0, or -1 with nf_error() naming the field. */
int nf_hf_config_parse(const char *json, size_t len, nf_hf_config *out);
/* Read <path> (a config.json). */
int nf_hf_config_load(const char *path, nf_hf_config *out);

#endif
