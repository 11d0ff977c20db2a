/* cuemu: the cp.async primitives of <cuda_pipeline.h>. A copy lands as late as the hardware may land it: when
 * __pipeline_wait_prior(n) leaves at most n newer committed groups of the thread pending, or when the thread
 * ends; so a read of a destination before its wait (or by another thread before a barrier that follows the wait)
 * sees the old bytes, as it can on the GPU. The source is read at issue (the kernels copy inputs that do not
 * change while they run). */
#pragma once
#include "cuda_runtime.h"
inline void __pipeline_memcpy_async(void *dst, const void *src, size_t n, size_t zfill = 0) {
    cuemu_cp c{dst, std::vector<char>(n, 0)};
    memcpy(c.bytes.data(), src, n - zfill);
    cuemu_B->cp[cuemu_B->cur].open.push_back(std::move(c));
}
inline void __pipeline_commit() {
    auto &q = cuemu_B->cp[cuemu_B->cur];
    q.groups.push_back(std::move(q.open));
    q.open.clear();
}
inline void cuemu_cp_land(cuemu_cp_queue &q, size_t keep) {
    while (q.groups.size() > keep) {
        for (auto &c : q.groups.front()) memcpy(c.dst, c.bytes.data(), c.bytes.size());
        q.groups.erase(q.groups.begin());
    }
}
inline void __pipeline_wait_prior(size_t n) { cuemu_cp_land(cuemu_B->cp[cuemu_B->cur], n); }
