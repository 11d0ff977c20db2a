/* convert.h — a Hugging Face glm5_next checkpoint folder → one GGUF file in the llama.cpp glm5-next layout.
 *
 * The target tensor list, names, shapes and metadata come from model/layout.h and the storage type of each
 * tensor from a recipe (model/recipe.h), so the file always loads with nf_model_load. The mapping from HF names
 * to GGUF tensors and the transforms (fused conv split, -exp(A_log), kv_b split into absorbed k_b/v_b, experts
 * stacked or un-fused, FP8 block dequantization) are in convert.c and tabulated in docs/gguf.md "Converting".
 *
 * The conversion streams: every source tensor is located and shape-checked first (all problems reported
 * together), then tensors are produced one at a time (at most one tensor in f32, or for a routed-expert stack
 * one expert in f32 plus the stacked output), quantized and written. Output goes to OUT.tmp and is renamed on
 * success; on failure or cancellation the partial file is removed. MTP/NextN blocks (layers >= num_hidden_layers)
 * are converted only on request (opts.mtp): the engine does not run them yet. */
#ifndef NF_CONVERT_CONVERT_H
#define NF_CONVERT_CONVERT_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    const char *hf_dir;      /* folder with config.json and *.safetensors (tokenizer.json optional) */
    const char *out_path;    /* GGUF to write */
    const char *recipe;      /* recipe name (model/recipe.h), e.g. "q4" */
    int n_threads;           /* quantization threads; <= 0: all online CPUs */
    bool quiet;              /* no progress and no summary */
    bool no_tokenizer;       /* skip tokenizer metadata even if tokenizer.json exists */
    bool mtp;                /* also convert the MTP/NextN blocks (num_nextn_predict_layers) */
    bool dry_run;            /* plan and print the table (sources, types, sizes) without writing anything */
    FILE *log;               /* progress + summary (NULL: stderr) */
    volatile sig_atomic_t *cancel; /* optional: set non-zero (e.g. from a SIGINT handler) to stop cleanly */
} nf_convert_opts;

typedef struct {
    int n_tensors;
    uint64_t bytes_in;       /* source bytes read */
    uint64_t bytes_out;      /* tensor data bytes written */
    int n_skipped_mtp;       /* source tensors of MTP layers not converted (all of them without opts.mtp) */
    int n_ignored_vision;    /* model.visual.* and similar */
    int n_unused;            /* other source tensors no GGUF tensor used (warned about) */
    double seconds;
} nf_convert_stats;

/* Run a conversion. 0, or -1 with nf_error() (every missing/mismatched source tensor listed). stats may be NULL. */
int nf_convert(const nf_convert_opts *o, nf_convert_stats *stats);

#endif
