/* fuzz_gguf.c — libFuzzer target for the GGUF reader.
 *
 * Parses the input with gguf_open_memory; when it is accepted, walks every kv (all getters, every array
 * element) and every tensor (lookup by name, first and last data byte), so AddressSanitizer sees any read the
 * validation failed to bound. A rejected input must leave a one-line message. */
#include "gguf/gguf.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

static volatile uint64_t sink;
static volatile double fsink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f = gguf_open_memory(data, size);
    if (!f) {
        const char *e = nf_error();
        if (!e[0] || strchr(e, '\n')) abort();  /* every rejection explains itself on one line */
        return 0;
    }
    for (int64_t i = 0; i < gguf_kv_count(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        char key[512];
        size_t kl = kv->key.len < sizeof key - 1 ? (size_t)kv->key.len : sizeof key - 1;
        memcpy(key, kv->key.ptr, kl);
        key[kl] = 0;
        if (kl == kv->key.len && gguf_find(f, key) != kv) abort();  /* lookup must find the same entry */
        uint32_t u32; int64_t i64; float f32 = 0; bool b; char buf[64];
        gguf_get_u32(f, key, &u32);
        gguf_get_i64(f, key, &i64);
        gguf_get_f32(f, key, &f32);
        gguf_get_bool(f, key, &b);
        gguf_get_str(f, key, buf, sizeof buf);
        fsink += f32;
        sink += strlen(gguf_type_name(kv->type)) + gguf_type_size(kv->elem_type);
        for (uint64_t j = 0; j < kv->count; j++) {
            if (kv->elem_type == GGUF_TYPE_STRING) {
                gguf_str s = gguf_arr_str(kv, j);
                if (!s.ptr) abort();
                if (s.len) sink += (uint8_t)s.ptr[0] + (uint8_t)s.ptr[s.len - 1];
            } else {
                sink += (uint64_t)gguf_arr_i64(kv, j);
                fsink += gguf_arr_f64(kv, j);
            }
        }
        sink += (uint64_t)gguf_arr_i64(kv, kv->count) + gguf_arr_str(kv, kv->count).len;  /* out of range: 0 */
    }
    for (int64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (gguf_find_tensor(f, t->name) != t) abort();
        if (t->size) sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->size - 1];
    }
    sink += gguf_version(f) + gguf_alignment(f) + strlen(gguf_path(f));
    gguf_close(f);
    return 0;
}
