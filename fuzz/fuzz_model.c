/* fuzz_model.c — libFuzzer target for hyperparameter reading and tensor binding (src/model).
 *
 * Parses the input with gguf_open_memory and, when the container is valid, runs nf_model_from_gguf: metadata
 * validation, the layout table and the binding with its shape/type checks. Whatever the input, this must not
 * crash, and a rejection must leave a message; an accepted model must have every bound tensor inside the
 * input with the size its type and shape imply, and print a summary. Seeds: tiny synthetic models written by
 * nf-synth (fuzz/corpus/model/, regenerate with scripts/make_model_corpus.sh). */
#include "formats/formats.h"
#include "gguf/gguf.h"
#include "model/layout.h"
#include "model/model.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f = gguf_open_memory(data, size);
    if (!f) return 0;
    nf_model *m = nf_model_from_gguf(f);
    if (!m) {
        if (!nf_error()[0]) abort();   /* every rejection explains itself */
        return 0;
    }
    int n;
    nf_layout_tensor *lt = nf_layout_tensors_alloc(&m->hp, &n);
    if (!lt) abort();                  /* an accepted model has a valid layout */
    for (int i = 0; i < n; i++) {
        if (lt[i].mtp) continue;
        const nf_tensor *t = lt[i].bind == NF_BIND_MODEL
                                 ? (const nf_tensor *)((const char *)m + lt[i].bind_offset)
                                 : (const nf_tensor *)((const char *)&m->layers[lt[i].layer] + lt[i].bind_offset);
        if (!t->data) abort();
        uint64_t bytes = nf_row_bytes(t->type, t->ne[0]) * (uint64_t)(nf_layout_nelements(&lt[i]) / t->ne[0]);
        const uint8_t *p = t->data;
        if (p < data || p + bytes > data + size) abort();
    }
    free(lt);
    FILE *devnull = fopen("/dev/null", "w");
    if (devnull) {
        FILE *old = stdout;
        stdout = devnull;
        nf_model_print_summary(m);
        stdout = old;
        fclose(devnull);
    }
    nf_model_free(m);
    return 0;
}
