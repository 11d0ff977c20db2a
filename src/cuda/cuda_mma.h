/* cuda_mma.h — the tensor-core primitives the prefill kernels share (the tiled GEMM of cuda_gemm.cu, the MLA
 * attention core's bf16 paths in cuda_mla.cu and cuda_mla_flash.cu): bf16 rounding of two floats, ldmatrix x4
 * (plain and .trans) and mma.sync m16n8k16 (bf16 in, f32 accumulate). On the CPU emulation (scripts/cuemu) the
 * warp-wide instructions are emulated with the PTX fragment layouts (cuemu_dev.h). Device code only: include
 * from .cu files. */
#ifndef NF_CUDA_MMA_H
#define NF_CUDA_MMA_H

#include <stdint.h>

/* two floats rounded to bf16 (nearest even), lo in the low half */
#ifdef __CUDACC__
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
#else
__device__ __forceinline__ uint32_t bf16_bits(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) { return bf16_bits(lo) | (bf16_bits(hi) << 16); }
#endif
/* four 8x8 b16 matrices from shared memory; lane l gives the address of row l % 8 of matrix l / 8 */
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const uint16_t *p) {
#ifdef __CUDACC__
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#else
    cuemu_ldmatrix_x4(r, p);
#endif
}
/* four 8x8 b16 matrices transposed (ldmatrix .trans): lane l gives the address of row l % 8 of matrix l / 8 and
 * receives, of matrix i, the elements [2 (l % 4)][l / 4] and [2 (l % 4) + 1][l / 4] */
__device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], const uint16_t *p) {
#ifdef __CUDACC__
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#else
    cuemu_ldmatrix_x4_trans(r, p);
#endif
}
/* c (16x8 f32) += a (16x16 bf16, row) * b (16x8 bf16, col) */
__device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], const uint32_t b[2]) {
#ifdef __CUDACC__
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    cuemu_mma_bf16_16816(c, a, b);
#endif
}

#endif
