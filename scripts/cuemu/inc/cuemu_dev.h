/* cuemu device side: kernels run on the host, one fiber per CUDA thread, blocks one after another. */
#pragma once
#include <ucontext.h>
#include <vector>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <functional>
extern "C" { float nf_f16_to_f32(uint16_t); uint16_t nf_f32_to_f16(float); }

struct dim3 { unsigned x, y, z; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
struct cuemu_u3 { unsigned x, y, z; };
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __constant__
#define __shared__ static
#define __launch_bounds__(...)

struct cuemu_fiber { ucontext_t ctx; unsigned tx, ty; int done, wait; /* 0 run, 1 block bar, 2 warp bar */ };
struct cuemu_block {
    std::vector<cuemu_fiber> f;
    int cur;
    ucontext_t sched;
    dim3 bdim, gdim;
    cuemu_u3 bidx;
    std::vector<char> smem;
    double shfl[64][32];
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
struct cuemu_cfg {
    dim3 g, b;
    size_t smem;
    cuemu_cfg(dim3 g_, dim3 b_, size_t s = 0, void *st = 0) : g(g_), b(b_), smem(s) { (void)st; }
    template <class F, class... A> void run(F f, A... args) {
        std::function<void()> body = [&]() { f(args...); };
        cuemu_run_grid(g, b, smem, body);
    }
};
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
template <class T> T __ldg(const T *p) { return *p; }
template <class T> cudaError_t cudaMemcpyToSymbol(T &sym, const void *src, size_t n) { memcpy(&sym, src, n); return 0; }
