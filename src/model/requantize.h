/* requantize.h — re-quantize a glm5-next GGUF to another recipe (what `nf-quantize` runs).
 *
 * The output holds the same tensors in layout order (layout.h), each stored in the type the recipe gives its
 * role (nf_recipe_type: the same decision, fallbacks included, as nf-convert), then any tensor the layout does
 * not know, copied unchanged. Every metadata key is copied (tokenizer included); `nextflash.convert.recipe`
 * becomes the new recipe, `general.quantization_version` is 2 when some tensor is block-quantized (and dropped
 * otherwise), `nextflash.quantize.source_recipe` records the input's recipe. A tensor whose type does not change
 * is copied byte for byte; otherwise it is dequantized to f32 a slab of rows at a time and quantized with
 * nf_quantize_rows (formats/quantize_rows.h), so at most one output tensor plus one f32 slab is in memory.
 * The file is written to OUT.tmp and renamed on success; an error or cancellation removes it. */
#ifndef NF_MODEL_REQUANTIZE_H
#define NF_MODEL_REQUANTIZE_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    const char *in_path;      /* glm5-next GGUF (any recipe) */
    const char *out_path;     /* GGUF to write (must differ from in_path) */
    const char *recipe;       /* model/recipe.h name */
    int n_threads;            /* <= 0: all online CPUs */
    bool quiet;               /* nothing but errors */
    FILE *log;                /* progress + summary (NULL: stderr) */
    volatile sig_atomic_t *cancel;
} nf_requantize_opts;

typedef struct {
    int n_tensors;            /* written */
    int n_copied;             /* same type: bytes copied */
    int n_converted;          /* type changed */
    int n_fallback;           /* recipe type did not fit the rows */
    int n_extra;              /* tensors the layout does not know, copied unchanged */
    int n_from_quantized;     /* converted tensors whose source was block-quantized (errors compound) */
    uint64_t bytes_in, bytes_out;
    double seconds;
} nf_requantize_stats;

/* 0, or -1 with nf_error(). stats may be NULL. */
int nf_requantize(const nf_requantize_opts *o, nf_requantize_stats *stats);

#endif
