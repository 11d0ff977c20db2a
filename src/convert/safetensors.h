/* safetensors.h — reading Hugging Face .safetensors checkpoints (one file or a sharded set).
 *
 * A safetensors file is an 8-byte little-endian header length, a JSON header mapping each tensor name to
 * {dtype, shape, data_offsets}, then the raw little-endian data. The reader maps each file read-only and
 * validates every entry (known dtype, non-negative shape, offsets inside the data section, byte size equal to
 * elements x element size, no overlapping ranges) before anything is used, so a corrupt file is one error line
 * naming the file, the tensor and the problem rather than a crash. A sharded checkpoint is the set of files
 * named by model.safetensors.index.json ("weight_map"); every name there must be found in the named shard.
 *
 * The converter needs tensors as f32: st_read_f32 converts BF16/F16/F32/F64 and dequantizes F8_E4M3 weights
 * with their block-scale companion `<name>_scale_inv` (DeepSeek/GLM "fp8 128x128": value x scale of its
 * [row/128][col/128] block). Shapes here are PyTorch order (shape[0] outermost). */
#ifndef NF_CONVERT_SAFETENSORS_H
#define NF_CONVERT_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 8

typedef enum {
    ST_UNKNOWN = 0, /* a dtype string we do not know: listed, never readable */
    ST_BOOL, ST_U8, ST_I8, ST_I16, ST_U16, ST_I32, ST_U32, ST_I64, ST_U64,
    ST_F16, ST_BF16, ST_F32, ST_F64, ST_F8_E4M3, ST_F8_E5M2,
    ST_DTYPE_COUNT
} st_dtype;

typedef struct {
    char *name;                 /* NUL-terminated */
    st_dtype dtype;
    char dtype_name[16];        /* as written in the header (e.g. "F8_E4M3") */
    uint32_t n_dims;
    int64_t shape[ST_MAX_DIMS]; /* PyTorch order */
    int64_t n_elements;
    uint64_t begin, end;        /* byte range inside the data section */
    const uint8_t *data;        /* inside the mapping */
    int shard;                  /* index of the file holding it */
} st_tensor;

typedef struct st_file st_file;        /* one .safetensors file */
typedef struct st_checkpoint st_checkpoint; /* one or more files (shards) */

/* One file. NULL with nf_error() on failure. */
st_file *st_file_open(const char *path);
/* Parse an in-memory image (the caller keeps `data` alive). Used by the fuzzer and tests. */
st_file *st_file_open_memory(const void *data, size_t size);
void st_file_close(st_file *f);
int64_t st_file_count(const st_file *f);
const st_tensor *st_file_at(const st_file *f, int64_t i);
const st_tensor *st_file_find(const st_file *f, const char *name);
/* The "__metadata__" string value for key, NULL if absent. */
const char *st_file_metadata(const st_file *f, const char *key);

/* A checkpoint folder: model.safetensors.index.json if present (every shard it names), else
 * model.safetensors, else the single *.safetensors file of the folder. NULL with nf_error() on failure. */
st_checkpoint *st_open_dir(const char *dir);
/* A checkpoint of one in-memory image (the caller keeps `data` alive). Fuzzer and tests. */
st_checkpoint *st_open_memory(const void *data, size_t size);
/* A checkpoint made of explicit files (tests). */
st_checkpoint *st_open_files(const char *const *paths, int n);
void st_close(st_checkpoint *c);
int64_t st_count(const st_checkpoint *c);
const st_tensor *st_at(const st_checkpoint *c, int64_t i);
const st_tensor *st_find(const st_checkpoint *c, const char *name);
int st_shard_count(const st_checkpoint *c);
const char *st_shard_path(const st_checkpoint *c, int shard);
/* Bytes of all tensors' data. */
uint64_t st_total_bytes(const st_checkpoint *c);

const char *st_dtype_name(st_dtype d);
size_t st_dtype_size(st_dtype d); /* 0 for ST_UNKNOWN */

/* FP8 E4M3 (fn variant: no infinities, 0x7f/0xff NaN) to float. */
float st_f8_e4m3_to_f32(uint8_t v);

/* Block size of FP8 weight scales (rows, cols); 128x128 unless set from the checkpoint's quantization_config. */
void st_set_fp8_block(st_checkpoint *c, int64_t rows, int64_t cols);

/* Can t be read as f32? (a float dtype, or F8_E4M3 with a valid 2-D `<name>_scale_inv` companion). 0 or -1 with
 * a message naming the tensor. */
int st_check_readable(const st_checkpoint *c, const st_tensor *t);
/* Read elements [first, first+n) (flat PyTorch index) of t as f32 into dst. F8_E4M3 is dequantized with its
 * block scales. Returns 0 or -1 with a message. */
int st_read_f32(const st_checkpoint *c, const st_tensor *t, int64_t first, int64_t n, float *dst);
/* Ask the kernel to start reading t's pages (and its scales) now, so I/O overlaps the current tensor's work. */
void st_prefetch(const st_checkpoint *c, const st_tensor *t);
/* Tell the kernel we are done with t's pages (keeps resident memory at a few tensors). */
void st_release(const st_checkpoint *c, const st_tensor *t);
/* A printable description of how t is stored: "BF16", "F8_E4M3+scale" ... */
const char *st_source_desc(const st_checkpoint *c, const st_tensor *t);

#endif
