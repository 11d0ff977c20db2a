/* gguf.h — reading and writing GGUF v3 files.
 *
 * GGUF is the container every model of ours lives in: a header, typed key/value metadata, a table of tensor
 * infos, then aligned tensor data. The reader maps the file and validates every count, length, offset, type
 * and alignment against the file size before anything is used, so a corrupt or truncated file gives one
 * error line naming the problem and its byte offset (nf_error()) instead of a crash. The writer streams: the
 * caller declares every key and tensor first (names, types, shapes), then writes tensor data one tensor at a
 * time, so converting a 300B-parameter checkpoint needs only one tensor in memory.
 *
 * Shapes are in ggml order: ne[0] is the contiguous (innermost) dimension. */
#ifndef NF_GGUF_H
#define NF_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

/* Metadata value types, numbered as in the GGUF specification. */
typedef enum {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
} gguf_type;

/* A string inside the mapped file: not NUL-terminated. */
typedef struct {
    const char *ptr;
    uint64_t len;
} gguf_str;

typedef struct {
    gguf_str key;
    gguf_type type;       /* GGUF_TYPE_ARRAY for arrays */
    gguf_type elem_type;  /* element type of an array (== type for scalars) */
    uint64_t count;       /* number of elements (1 for scalars) */
    const void *data;     /* scalars and numeric arrays: packed little-endian values inside the mapping;
                             strings: points at the first (u64 length, bytes) record */
    uint64_t offset;      /* byte offset of the key in the file (for messages) */
} gguf_kv;

typedef struct {
    char name[256];       /* NUL-terminated copy (GGUF names are short; longer is rejected) */
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* unused dims are 1 */
    uint32_t type;        /* tensor type id (formats/formats.h, ggml numbering) */
    uint64_t offset;      /* relative to the start of the data section */
    uint64_t size;        /* bytes, from the type's block layout */
    const void *data;     /* inside the mapping */
} gguf_tensor;

typedef struct gguf_file gguf_file;

/* Open and validate a file (read-only mmap). NULL on failure, message in nf_error(). */
gguf_file *gguf_open(const char *path);
/* Parse an in-memory image (the caller keeps `data` alive). Used by the fuzzer and tests. */
gguf_file *gguf_open_memory(const void *data, size_t size);
void gguf_close(gguf_file *f);

uint32_t gguf_version(const gguf_file *f);
uint64_t gguf_alignment(const gguf_file *f);
const char *gguf_path(const gguf_file *f);   /* "<memory>" for gguf_open_memory */

/* ---- metadata ---- */
int64_t gguf_kv_count(const gguf_file *f);
const gguf_kv *gguf_kv_at(const gguf_file *f, int64_t i);
const gguf_kv *gguf_find(const gguf_file *f, const char *key); /* NULL if absent */

/* Typed getters. Each returns 0 on success, -1 if the key is missing or has an incompatible type (message
 * names key and types). Integer getters accept any integer type whose value fits; float getters accept
 * float32/float64 and integers. */
int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
int gguf_get_f32(const gguf_file *f, const char *key, float *out);
int gguf_get_bool(const gguf_file *f, const char *key, bool *out);
/* Copies into buf (NUL-terminated, truncation is an error). */
int gguf_get_str(const gguf_file *f, const char *key, char *buf, size_t bufsize);

/* Array access. gguf_arr_str returns element i of a string array (bounds-checked at open time). */
gguf_str gguf_arr_str(const gguf_kv *kv, uint64_t i);
/* Element i of a numeric array converted to double / int64 (0 if out of range or not numeric). */
double gguf_arr_f64(const gguf_kv *kv, uint64_t i);
int64_t gguf_arr_i64(const gguf_kv *kv, uint64_t i);
/* Size in bytes of one element of a numeric type (0 for string/array). */
size_t gguf_type_size(gguf_type t);
const char *gguf_type_name(gguf_type t);

/* ---- tensors ---- */
int64_t gguf_tensor_count(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, int64_t i);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name); /* NULL if absent */

/* ---- writer ---- */
typedef struct gguf_writer gguf_writer;

/* Start a file. Nothing is written until gguf_writer_begin_data. */
gguf_writer *gguf_writer_create(const char *path);
void gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment); /* also writes general.alignment */

/* Key setters (a key set twice keeps the last value). */
void gguf_set_u8(gguf_writer *w, const char *key, uint8_t v);
void gguf_set_i8(gguf_writer *w, const char *key, int8_t v);
void gguf_set_u16(gguf_writer *w, const char *key, uint16_t v);
void gguf_set_i16(gguf_writer *w, const char *key, int16_t v);
void gguf_set_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_set_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_set_u64(gguf_writer *w, const char *key, uint64_t v);
void gguf_set_i64(gguf_writer *w, const char *key, int64_t v);
void gguf_set_f32(gguf_writer *w, const char *key, float v);
void gguf_set_f64(gguf_writer *w, const char *key, double v);
void gguf_set_bool(gguf_writer *w, const char *key, bool v);
void gguf_set_str(gguf_writer *w, const char *key, const char *v);
/* Numeric array: `elem_type` is a scalar numeric type or GGUF_TYPE_BOOL; `data` holds n packed values. */
void gguf_set_arr(gguf_writer *w, const char *key, gguf_type elem_type, const void *data, uint64_t n);
void gguf_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, uint64_t n);

/* Declare a tensor; returns its index. Data are written later, in declaration order. */
int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const int64_t *ne);
/* Write header, metadata and tensor infos. Returns 0 or -1. */
int gguf_writer_begin_data(gguf_writer *w);
/* Write the data of the next declared tensor; `size` must equal its computed size. Returns 0 or -1. */
int gguf_writer_write_tensor(gguf_writer *w, const void *data, uint64_t size);
/* Finish (checks every declared tensor was written), close and free. Returns 0 or -1 (file removed). */
int gguf_writer_finish(gguf_writer *w);
/* Abandon: close, remove the partial file and free. */
void gguf_writer_abort(gguf_writer *w);

#endif
