/* formats.h — tensor element formats, bit-compatible with ggml.
 *
 * "Formats are data": each type is described once (name, block size, bytes per block) in a table that the
 * GGUF reader, the converter, the model binder, the CPU dot products and the CUDA repacking all share.
 * Type ids follow ggml's numbering so our files and llama.cpp's are interchangeable.
 *
 * Supported: F32, F16, BF16, Q8_0, Q4_K, Q6_K, Q2_K, IQ2_XXS (and Q8_K as the activation format of the
 * K-quant and IQ dot products). Each has dequantize, a reference quantizer and a CPU dot product. */
#ifndef NF_FORMATS_H
#define NF_FORMATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    NF_TYPE_F32 = 0,
    NF_TYPE_F16 = 1,
    NF_TYPE_Q4_0 = 2,
    NF_TYPE_Q4_1 = 3,
    NF_TYPE_Q5_0 = 6,
    NF_TYPE_Q5_1 = 7,
    NF_TYPE_Q8_0 = 8,
    NF_TYPE_Q8_1 = 9,
    NF_TYPE_Q2_K = 10,
    NF_TYPE_Q3_K = 11,
    NF_TYPE_Q4_K = 12,
    NF_TYPE_Q5_K = 13,
    NF_TYPE_Q6_K = 14,
    NF_TYPE_Q8_K = 15,
    NF_TYPE_IQ2_XXS = 16,
    NF_TYPE_IQ2_XS = 17,
    NF_TYPE_IQ3_XXS = 18,
    NF_TYPE_IQ1_S = 19,
    NF_TYPE_IQ4_NL = 20,
    NF_TYPE_IQ3_S = 21,
    NF_TYPE_IQ2_S = 22,
    NF_TYPE_IQ4_XS = 23,
    NF_TYPE_I8 = 24,
    NF_TYPE_I16 = 25,
    NF_TYPE_I32 = 26,
    NF_TYPE_I64 = 27,
    NF_TYPE_F64 = 28,
    NF_TYPE_IQ1_M = 29,
    NF_TYPE_BF16 = 30,
    NF_TYPE_COUNT = 40
} nf_type;

typedef struct {
    const char *name;     /* "q4_K" style, as ggml prints it; NULL for unknown ids */
    int64_t block_size;   /* elements per block (1 for plain types) */
    size_t block_bytes;   /* bytes per block */
    bool supported;       /* we can dequantize / dot it */
    bool quantized;       /* block-quantized (needs a dot product with a quantized activation) */
} nf_type_info;

/* Info for a type id; the entry's name is NULL for ids we do not know. Never NULL. */
const nf_type_info *nf_type_get(uint32_t type);
/* Type by name ("q8_0", "Q8_0", "bf16", ...; case-insensitive). -1 if unknown. */
int nf_type_from_name(const char *name);
/* Bytes of n elements of `type`. n must be a multiple of the block size (returns 0 otherwise). */
size_t nf_row_bytes(uint32_t type, int64_t n);

/* Half-precision conversions (IEEE binary16 and bfloat16; round to nearest even, like ggml). */
float nf_f16_to_f32(uint16_t h);
uint16_t nf_f32_to_f16(float f);
float nf_bf16_to_f32(uint16_t h);
uint16_t nf_f32_to_bf16(float f);

/* Dequantize n elements (a multiple of the block size) of `type`. Returns 0, or -1 for unsupported types. */
int nf_dequantize(uint32_t type, const void *src, float *dst, int64_t n);

/* Reference quantizer: n elements (a multiple of the block size) of f32 to `type`. `imatrix` is an optional
 * per-column importance vector of length `row_len` (used by IQ2_XXS and the K-quants like ggml's
 * quantize_*_impl; NULL means the weights-only path). For row-wise use call it once per row. Returns the bytes
 * written, or 0 for unsupported types. */
size_t nf_quantize(uint32_t type, const float *src, void *dst, int64_t n, int64_t row_len, const float *imatrix);

/* Type the activation vector is converted to for nf_vec_dot with weights of `type`, as ggml does:
 * F32/F16/BF16 -> F32 (activations stay exact), Q8_0 -> Q8_0, K-quants and IQ2_XXS -> Q8_K.
 * NF_TYPE_COUNT (not a type) for types without a dot product. */
uint32_t nf_vec_dot_type(uint32_t type);
/* Convert an f32 activation vector of length n into nf_vec_dot_type(type) layout in dst (F32: a copy). */
void nf_quantize_activation(uint32_t type, const float *x, void *dst, int64_t n);
/* Dot product of one weight row (type) with an activation prepared by nf_quantize_activation. On an
 * unsupported type or an n that is not a multiple of the block size: NAN, with nf_error set (same for
 * nf_vec_dot_f32; nf_quantize_activation then writes nothing). */
float nf_vec_dot(uint32_t type, int64_t n, const void *w_row, const void *x_act);

/* Dot of one weight row of any supported type with an f32 vector, in f32: the values nf_dequantize gives times
 * x, nothing else rounded (exact with respect to the stored weights). For the block-quantized types with AVX2
 * and FMA the blocks are decoded in registers and summed with fused multiply-adds in eight-lane accumulators:
 * values 32g+8k .. 32g+8k+7 into accumulator k (k < 4), then ((s0 + s1) + (s2 + s3)) and a lane sum
 * (low + high half, then pairs), which is exactly the CPU matmul's nf_dot_f32 on the dequantized row. The CPU
 * backend uses it for one-token products with quantized weights. */
float nf_vec_dot_f32(uint32_t type, int64_t n, const void *w_row, const float *x);

#endif
