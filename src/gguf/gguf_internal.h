/* gguf_internal.h — the reader's private state, shared by gguf_read.c (parsing, validation) and gguf_kv.c
 * (typed getters, array access). Not part of the public contract (gguf.h).
 *
 * Every kv handed out by the reader is the first member of a gguf_kv_entry, so gguf_arr_str can reach the
 * per-array index of string records (built at open time) from a plain `const gguf_kv *`: element i of a
 * 150k-entry vocabulary is then O(1) instead of a walk over i length-prefixed records. */
#ifndef NF_GGUF_INTERNAL_H
#define NF_GGUF_INTERNAL_H

#include "gguf/gguf.h"

typedef struct {
    gguf_kv kv;             /* must stay the first member (see gguf_arr_str) */
    const uint8_t **strs;   /* string arrays: start of each (u64 length, bytes) record; NULL otherwise */
} gguf_kv_entry;

struct gguf_file {
    char *path;             /* as given, or "<memory>" */
    const uint8_t *base;    /* the whole file */
    uint64_t size;
    bool mapped;            /* base is our mmap (unmap at close) */
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;   /* absolute offset of the data section */

    int64_t n_kv;
    gguf_kv_entry *kvs;
    int64_t *kv_sorted;     /* kv indices sorted by key (binary search, duplicate check) */

    int64_t n_tensors;
    gguf_tensor *tensors;
    uint64_t *tensor_info_off; /* byte offset of each tensor info (for messages) */
    int64_t *tensor_sorted; /* tensor indices sorted by name */
};

#endif
