/* cuda_synth.cu — the weight upload of a synthetic model made in memory (model/synth.h, NF_SYNTH_DEVICE mode).
 *
 * Such a model's tensors sit in one host region laid out like a GGUF data section, but its large matrices are
 * virtual: their host pages were never written. The device copy of the region is allocated as for a file
 * (a tensor's device address stays its offset in the region, so every block kernel works unchanged); host
 * tensors are copied, and each virtual tensor is made on the GPU: block i is a copy of pool block
 * nf_synth_pool_index(key, i) of the tensor's (type, sigma) pool, which the host built already scaled. The
 * kernel only copies 16-bit words (every block size of the pools is even, every tensor starts at an
 * NF_SYNTH_ALIGN boundary), so ~100 GB are made at memory speed, and the bytes equal nf_synth_virtual_fill's. */
#include <stdlib.h>

#include "cuda/cuda_internal.h"
#include "cuda/cuda_launch.h"

/* dst[w] = word w of the tensor; I is the index type (32-bit when the tensor has < 2^32 words: cheaper division). */
template <typename I>
__global__ void synth_fill_kernel(uint16_t *dst, I n_words, const uint16_t *pool, uint32_t words_per_block,
                                  uint32_t n_blocks, uint64_t key) {
    NF_PDL_ENTER();
    for (I w = (I)blockIdx.x * blockDim.x + threadIdx.x; w < n_words; w += (I)gridDim.x * blockDim.x) {
        const I i = w / words_per_block;
        const uint32_t j = (uint32_t)(w - i * words_per_block);
        dst[w] = pool[(size_t)nf_synth_pool_index(key, (uint64_t)i, n_blocks) * words_per_block + j];
    }
}

/* The seeded block pools on the device (freed when the upload returns, whatever the path) and each pool's
 * offset in them. */
struct synth_pools_dev {
    uint8_t *p = nullptr;
    size_t *off = nullptr;  /* n_pools + 1 entries */
    size_t bytes = 0;
    ~synth_pools_dev() {
        if (p) cudaFree(p);
        free(off);
    }
    /* offsets and total size only (host memory); then upload() */
    int plan(const nf_synth *s) {
        off = (size_t *)calloc((size_t)s->n_pools + 1, sizeof *off);
        if (!off) return nf_fail("cuda backend: out of memory");
        for (int i = 0; i < s->n_pools; i++) {
            off[i] = bytes;
            bytes += (size_t)s->pools[i].n_blocks * s->pools[i].block_bytes;
        }
        return 0;
    }
    cudaError_t upload(const nf_synth *s) {
        cudaError_t e = bytes ? cudaMalloc((void **)&p, bytes) : cudaSuccess;
        for (int i = 0; e == cudaSuccess && i < s->n_pools; i++)
            e = cudaMemcpy(p + off[i], s->pools[i].bytes, (size_t)s->pools[i].n_blocks * s->pools[i].block_bytes,
                           cudaMemcpyHostToDevice);
        return e;
    }
};

/* make virtual tensor t at device address dst from its pool (one fill kernel on the backend's stream) */
static cudaError_t fill_virtual(nf_cuda *c, const nf_synth *s, const synth_pools_dev &pools, const nf_synth_tensor *t,
                                uint8_t *dst) {
    const nf_synth_pool *p = &s->pools[t->pool];
    const uint32_t wpb = p->block_bytes / 2;
    const uint64_t n_words = t->bytes / 2;
    const uint16_t *src = (const uint16_t *)(pools.p + pools.off[t->pool]);
    const uint64_t want = (n_words + 255) / 256;
    const unsigned grid = (unsigned)(want < 16384 ? want : 16384);
    if (n_words < ((uint64_t)1 << 32) - 16384ull * 256) /* w + grid stride stays below 2^32 */
        nf_launch(synth_fill_kernel<uint32_t>, grid, 256, 0, c->stream, (uint16_t *)dst, (uint32_t)n_words, src, wpb,
                  p->n_blocks, t->key);
    else
        nf_launch(synth_fill_kernel<uint64_t>, grid, 256, 0, c->stream, (uint16_t *)dst, n_words, src, wpb, p->n_blocks,
                  t->key);
    return cudaGetLastError();
}

/* pageable copies may return before their DMA completes, and the fills run on the backend's stream */
static int finish(cudaError_t e) {
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) return nf_fail("cuda backend: making the synthetic weights: %s", cudaGetErrorString(e));
    return 0;
}

int nf_cuda_synth_upload(nf_cuda *c) {
    const nf_synth *s = c->m->synth;
    synth_pools_dev pools;
    if (pools.plan(s) < 0) return -1;
    c->hbase = s->region;
    c->hsize = s->region_bytes;
    if (nf_cuda_check_fits(c, c->hsize + pools.bytes) < 0) return -1;
    cudaError_t e = cudaMalloc((void **)&c->dweights, c->hsize);
    if (e == cudaSuccess) e = pools.upload(s);
    /* host tensors: runs of consecutive host tensors in one copy each (alignment gaps are zero pages) */
    for (int i = 0; e == cudaSuccess && i < s->n_tensors;) {
        if (s->tensors[i].virt) {
            i++;
            continue;
        }
        const uint64_t lo = s->tensors[i].offset;
        uint64_t hi = lo + s->tensors[i].bytes;
        for (i++; i < s->n_tensors && !s->tensors[i].virt; i++) hi = s->tensors[i].offset + s->tensors[i].bytes;
        e = cudaMemcpy(c->dweights + lo, s->region + lo, (size_t)(hi - lo), cudaMemcpyHostToDevice);
    }
    for (int i = 0; e == cudaSuccess && i < s->n_tensors; i++)
        if (s->tensors[i].virt) e = fill_virtual(c, s, pools, &s->tensors[i], c->dweights + s->tensors[i].offset);
    return finish(e);
}

/* A layer-range backend (backend_cuda.cu upload_layers: c->segs set, c->dweights allocated for them): the
 * synthetic tensors that lie in its segments, host ones copied, virtual ones made by the fill kernel at their
 * place in the packed segments; the others are not made at all. */
int nf_cuda_synth_upload_segs(nf_cuda *c) {
    const nf_synth *s = c->m->synth;
    synth_pools_dev pools;
    if (pools.plan(s) < 0) return -1;
    cudaError_t e = pools.upload(s);
    for (int i = 0; e == cudaSuccess && i < s->n_tensors; i++) {
        const nf_synth_tensor *t = &s->tensors[i];
        const uint8_t *host = s->region + t->offset;
        uint8_t *d = nullptr;
        for (int k = 0; k < c->n_segs && !d; k++)
            if (host >= c->segs[k].hlo && host < c->segs[k].hhi) d = c->dweights + c->segs[k].doff + (host - c->segs[k].hlo);
        if (!d) continue; /* another stage's tensor */
        e = t->virt ? fill_virtual(c, s, pools, t, d) : cudaMemcpy(d, host, (size_t)t->bytes, cudaMemcpyHostToDevice);
    }
    return finish(e);
}

const nf_synth_tensor *nf_cuda_synth_virtual(const nf_cuda *c, const void *host_data) {
    const nf_synth_tensor *t = c->m->synth ? nf_synth_find(c->m->synth, host_data) : nullptr;
    return t && t->virt ? t : nullptr;
}
