/* cuemu device side: kernels run on the host, one fiber per CUDA thread, blocks one after another. */
#pragma once
#include <ucontext.h>
#include <vector>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <functional>
extern "C" { float nf_f16_to_f32(uint16_t); uint16_t nf_f32_to_f16(float); }

struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct dim3 { unsigned x, y, z; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
struct cuemu_u3 { unsigned x, y, z; };
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __constant__
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

struct cuemu_fiber { ucontext_t ctx; unsigned tx, ty; int done, wait; /* 0 run, 1 block bar, 2 warp bar */ };
/* a thread's cp.async copies not landed yet (cuda_pipeline.h): committed groups oldest first, then the open one */
struct cuemu_cp { void *dst; std::vector<char> bytes; };
struct cuemu_cp_queue { std::vector<std::vector<cuemu_cp>> groups; std::vector<cuemu_cp> open; };
struct cuemu_block {
    std::vector<cuemu_fiber> f;
    int cur;
    ucontext_t sched;
    dim3 bdim, gdim;
    cuemu_u3 bidx;
    std::vector<char> smem;
    std::vector<int> vote;
    double shfl[64][32];
    uint32_t xchg[64][32][8]; /* per-warp register exchange of the emulated warp-wide instructions */
    std::vector<cuemu_cp_queue> cp; /* per thread */
    const std::function<void()> *body;
};
extern cuemu_block *cuemu_B;
inline cuemu_u3 cuemu_tid() { auto &f = cuemu_B->f[cuemu_B->cur]; return cuemu_u3{f.tx, f.ty, 0}; }
#define threadIdx (cuemu_tid())
#define blockIdx (cuemu_B->bidx)
#define blockDim (cuemu_B->bdim)
#define gridDim (cuemu_B->gdim)
void cuemu_wait(int kind);
inline void __syncthreads() { cuemu_wait(1); }
inline void __syncwarp(unsigned = 0xffffffffu) { cuemu_wait(2); }
inline int __syncthreads_or(int pred) {
    auto &B = *cuemu_B;
    B.vote[B.cur] = pred != 0;
    cuemu_wait(1);
    int r = 0;
    for (size_t i = 0; i < B.f.size(); i++) r |= !B.f[i].done && B.vote[i];
    cuemu_wait(1);
    return r;
}
template <class T> T __shfl_xor_sync(unsigned, T v, int o) {
    auto &f = cuemu_B->f[cuemu_B->cur];
    int lin = (int)(f.tx + f.ty * cuemu_B->bdim.x), w = lin / 32, lane = lin % 32;
    T *buf = (T *)cuemu_B->shfl[w];
    buf[lane] = v;
    cuemu_wait(2);
    T r = buf[lane ^ o];
    cuemu_wait(2);
    return r;
}
void cuemu_run_grid(dim3 g, dim3 b, size_t smem, const std::function<void()> &body);
/* several emulated devices (CUEMU_DEVICES=N): a kernel must be launched on a stream of the current device, and
 * a pointer argument inside a device allocation must belong to the stream's device (cuemu.cpp aborts otherwise:
 * the mistakes a pipeline over several GPUs can make, caught without the GPUs) */
void cuemu_check_launch(void *stream);
void cuemu_check_ptr(const void *p, const char *what);
template <class T> inline void cuemu_check_arg(const T &) {}
template <class T> inline void cuemu_check_arg(T *const &p) { cuemu_check_ptr((const void *)p, "kernel argument"); }
struct cuemu_cfg {
    dim3 g, b;
    size_t smem;
    cuemu_cfg(dim3 g_, dim3 b_, size_t s = 0, void *st = 0) : g(g_), b(b_), smem(s) { cuemu_check_launch(st); }
    template <class F, class... A> void run(F f, A... args) {
        (cuemu_check_arg(args), ...);
        std::function<void()> body = [&]() { f(args...); };
        cuemu_run_grid(g, b, smem, body);
    }
};
/* warp votes and exchanges (one exchange slot per warp; the lanes of a warp call them convergently) */
inline int cuemu_lane() { auto &f = cuemu_B->f[cuemu_B->cur]; return (int)(f.tx + f.ty * cuemu_B->bdim.x) % 32; }
inline int cuemu_warp_base() { auto &f = cuemu_B->f[cuemu_B->cur]; return (int)(f.tx + f.ty * cuemu_B->bdim.x) / 32 * 32; }
inline bool cuemu_live(int i) { return i < (int)cuemu_B->f.size() && !cuemu_B->f[i].done; }
template <class T> T cuemu_exchange(T v, int src_lane) {
    const int lane = cuemu_lane(), w = cuemu_warp_base() / 32;
    T *buf = (T *)cuemu_B->shfl[w];
    buf[lane] = v;
    cuemu_wait(2);
    T r = src_lane >= 0 && src_lane < 32 ? buf[src_lane] : v;
    cuemu_wait(2);
    return r;
}
template <class T> T __shfl_sync(unsigned, T v, int src) { return cuemu_exchange(v, src & 31); }
template <class T> T __shfl_up_sync(unsigned, T v, unsigned d) {
    const int lane = cuemu_lane();
    T r = cuemu_exchange(v, lane - (int)d);
    return lane >= (int)d ? r : v;
}
template <class T> T __shfl_down_sync(unsigned, T v, unsigned d) {
    const int lane = cuemu_lane();
    T r = cuemu_exchange(v, lane + (int)d);
    return lane + (int)d < 32 ? r : v;
}
inline unsigned cuemu_vote(long long v, int kind) {
    const int lane = cuemu_lane(), base = cuemu_warp_base(), w = base / 32;
    long long *buf = (long long *)cuemu_B->shfl[w];
    buf[lane] = v;
    cuemu_wait(2);
    unsigned r = 0;
    for (int j = 0; j < 32; j++)
        if (cuemu_live(base + j) && (kind == 0 ? buf[j] != 0 : buf[j] == v)) r |= 1u << j;
    cuemu_wait(2);
    return r;
}
inline unsigned __match_any_sync(unsigned, unsigned v) { return cuemu_vote((long long)v, 1); }
inline int __ffs(int v) { return __builtin_ffs(v); }
/* atomics: fibers never preempt each other, so a plain read-modify-write is atomic */
template <class T> T atomicAdd(T *p, T v) { T o = *p; *p = o + v; return o; }
template <class T> T atomicMax(T *p, T v) { T o = *p; if (v > o) *p = v; return o; }
/* blocks run one after another: every write is visible to the blocks after it */
inline void __threadfence() {}
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline int __float2int_rn(float x) { if (x != x) return 0; if (x > 2e9f) return 2147483647; if (x < -2e9f) return -2147483647; return (int)lrintf(x); }
struct __half { unsigned short x; };
inline float __half2float(__half h) { return nf_f16_to_f32(h.x); }
inline __half __float2half_rn(float f) { return __half{nf_f32_to_f16(f)}; }
inline unsigned short __half_as_ushort(__half h) { return h.x; }
inline __half __ushort_as_half(unsigned short v) { return __half{v}; }
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
template <class T> T __ldg(const T *p) { return *p; }
template <class T> T __ldcg(const T *p) { return *p; }
template <class T> cudaError_t cudaMemcpyToSymbol(T &sym, const void *src, size_t n) { memcpy(&sym, src, n); return 0; }
inline unsigned __ballot_sync(unsigned, int pred) {
    auto &f = cuemu_B->f[cuemu_B->cur];
    int lin = (int)(f.tx + f.ty * cuemu_B->bdim.x), w = lin / 32, lane = lin % 32;
    cuemu_B->xchg[w][lane][0] = pred != 0;
    cuemu_wait(2);
    unsigned m = 0;
    for (int l = 0; l < 32; l++) m |= (cuemu_B->xchg[w][l][0] & 1u) << l;
    cuemu_wait(2);
    return m;
}
inline int __popc(unsigned v) { return __builtin_popcount(v); }
/* Warp-wide tensor-core instructions (PTX ldmatrix.m8n8.x4.b16 and mma.m16n8k16.row.col.f32.bf16.bf16.f32) with
 * the PTX fragment layouts: every lane publishes its operands, then computes its own results. Every lane of the
 * warp must call them together, as on the GPU. */
inline void cuemu_ldmatrix_x4(uint32_t r[4], const void *p) {
    auto &f = cuemu_B->f[cuemu_B->cur];
    int lin = (int)(f.tx + f.ty * cuemu_B->bdim.x), w = lin / 32, lane = lin % 32;
    memcpy(cuemu_B->xchg[w][lane], &p, sizeof p);
    cuemu_wait(2);
    for (int i = 0; i < 4; i++) {
        const uint32_t *row;
        memcpy(&row, cuemu_B->xchg[w][8 * i + lane / 4], sizeof row);
        r[i] = row[lane % 4];
    }
    cuemu_wait(2);
}
/* ldmatrix .trans: lane l receives, of matrix i, the 16-bit elements [2 (l % 4)][l / 4] (low half) and
 * [2 (l % 4) + 1][l / 4] (high half) */
inline void cuemu_ldmatrix_x4_trans(uint32_t r[4], const void *p) {
    auto &f = cuemu_B->f[cuemu_B->cur];
    int lin = (int)(f.tx + f.ty * cuemu_B->bdim.x), w = lin / 32, lane = lin % 32;
    memcpy(cuemu_B->xchg[w][lane], &p, sizeof p);
    cuemu_wait(2);
    for (int i = 0; i < 4; i++) {
        const uint16_t *r0, *r1;
        memcpy(&r0, cuemu_B->xchg[w][8 * i + 2 * (lane % 4)], sizeof r0);
        memcpy(&r1, cuemu_B->xchg[w][8 * i + 2 * (lane % 4) + 1], sizeof r1);
        r[i] = (uint32_t)r0[lane / 4] | ((uint32_t)r1[lane / 4] << 16);
    }
    cuemu_wait(2);
}
inline float cuemu_bf16_at(uint32_t word, int half) { return __uint_as_float(half ? word & 0xFFFF0000u : word << 16); }
inline void cuemu_mma_bf16_16816(float c[4], const uint32_t a[4], const uint32_t b[2]) {
    auto &f = cuemu_B->f[cuemu_B->cur];
    int lin = (int)(f.tx + f.ty * cuemu_B->bdim.x), w = lin / 32, lane = lin % 32;
    uint32_t *mine = cuemu_B->xchg[w][lane];
    for (int i = 0; i < 4; i++) mine[i] = a[i];
    mine[4] = b[0];
    mine[5] = b[1];
    cuemu_wait(2);
    const int g = lane / 4, t = lane % 4;
    for (int q = 0; q < 4; q++) {
        const int row = g + 8 * (q / 2), col = 2 * t + q % 2;
        float acc = c[q];
        for (int k = 0; k < 16; k++) {
            const uint32_t *al = cuemu_B->xchg[w][(row % 8) * 4 + (k % 8) / 2];
            const uint32_t *bl = cuemu_B->xchg[w][col * 4 + (k % 8) / 2];
            acc += cuemu_bf16_at(al[row / 8 + 2 * (k / 8)], k % 2) * cuemu_bf16_at(bl[4 + k / 8], k % 2);
        }
        c[q] = acc;
    }
    cuemu_wait(2);
}
/* __byte_perm: byte n of the result is byte (s >> 4n) & 7 of y:x (CUDA ignores bit 3 of the nibble) */
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const uint64_t v = ((uint64_t)y << 32) | x;
    unsigned r = 0;
    for (int n = 0; n < 4; n++) r |= (unsigned)((v >> (8 * ((s >> (4 * n)) & 7))) & 0xFF) << (8 * n);
    return r;
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned sh) {
    return (unsigned)(((((uint64_t)hi) << 32) | lo) >> (sh & 31));
}
