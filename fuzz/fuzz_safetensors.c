/* fuzz_safetensors.c — libFuzzer target for the safetensors reader (and, for inputs starting with '{', the
 * config.json parser of the converter).
 *
 * Any byte string must either be rejected with a message or yield tensors whose every byte range lies inside
 * the input; reading each readable tensor (first and last elements, FP8 with its block scales) must stay in
 * bounds. ASan/UBSan turn any violation into a crash. Seeds: fuzz/corpus/safetensors/. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "convert/hf_config.h"
#include "convert/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 0 && data[0] == '{') {
        nf_hf_config cfg;
        nf_hf_config_parse((const char *)data, size, &cfg);
        return 0;
    }
    st_checkpoint *c = st_open_memory(data, size);
    if (!c) return 0;
    float buf[64];
    for (int64_t i = 0; i < st_count(c); i++) {
        const st_tensor *t = st_at(c, i);
        if (t->data < data || t->data + (t->end - t->begin) > data + size) __builtin_trap();
        if (st_find(c, t->name) != t) __builtin_trap();
        if (st_check_readable(c, t) < 0 || t->n_elements == 0) continue;
        int64_t n = t->n_elements < 64 ? t->n_elements : 64;
        st_read_f32(c, t, 0, n, buf);
        st_read_f32(c, t, t->n_elements - n, n, buf);
        (void)st_source_desc(c, t);
    }
    st_close(c);
    return 0;
}
