/* cuda_indexer.cu — the DSA lightning indexer with k-pool compression and forced tail, on the GPU (the CPU
 * reference and the rules: src/cpu/indexer.c).
 *
 * Keys (LayerNorm) and gate logits of the T tokens go into the device open-pool rows; every pool they complete
 * is compressed into the pooled-key cache (one thread per channel walks the tokens in order: channels are
 * independent). Then one thread block per query scores the visible pools and selects the top budget with ties
 * to the lower pool index. Selection here is by rank counting (each pool counts the pools that rank before it),
 * exact and deterministic but quadratic in the number of pools: the correctness baseline, to be replaced by a
 * radix select for long contexts (docs: anchors §0.2). */
#include <math.h>

#include "cuda/cuda_internal.h"

/* thread = channel; tokens in order: cache key/gate, pool completed pools */
__global__ void idx_cache_kernel(const float *ik, const float *ig, const float *ape, int64_t pos0, int T, int kpool,
                                 int hd, float *open_key, float *open_gate, float *pool_key) {
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= hd) return;
    float wts[64];
    for (int t = 0; t < T; t++) {
        const int64_t a = pos0 + t;
        const int slot = (int)(a % kpool);
        open_key[(size_t)slot * hd + ch] = ik[(size_t)t * hd + ch];
        open_gate[(size_t)slot * hd + ch] = ig ? ig[(size_t)t * hd + ch] : 0.0f;
        if (slot == kpool - 1) {
            for (int m = 0; m < kpool; m++)
                wts[m] = __fadd_rn(open_gate[(size_t)m * hd + ch], ape ? ape[(size_t)m * hd + ch] : 0.0f);
            float mx = wts[0];
            for (int m = 1; m < kpool; m++) if (wts[m] > mx) mx = wts[m];
            double s = 0.0;
            for (int m = 0; m < kpool; m++) {
                wts[m] = expf(__fsub_rn(wts[m], mx));
                s += wts[m];
            }
            const float inv = (float)(1.0 / s);
            float P = 0.0f;
            for (int m = 0; m < kpool; m++)
                P = __fadd_rn(P, __fmul_rn(__fmul_rn(wts[m], inv), open_key[(size_t)m * hd + ch]));
            pool_key[(size_t)(a / kpool) * hd + ch] = P;
        }
    }
}

__device__ __forceinline__ bool ranks_before(const float *s, int a, int b) {
    return s[a] > s[b] || (s[a] == s[b] && a < b);
}

/* block = query t */
__global__ void idx_select_kernel(const float *pool_key, const float *iq, const float *hw, int64_t pos0, int nh,
                                  int hd, int kpool, int budget, int width, int tail, float *scores, int64_t ld_scores,
                                  int32_t *sel) {
    const int t = blockIdx.x;
    const int64_t a = pos0 + t;
    const int64_t n_vis = (a + 1) / kpool;
    int32_t *row = sel + (size_t)t * width;
    int64_t w;
    if (n_vis <= budget) {
        for (int64_t i = threadIdx.x; i < n_vis * kpool; i += blockDim.x) row[i] = (int32_t)i;
        w = n_vis * kpool;
    } else {
        float *sc = scores + (size_t)t * ld_scores;
        const float *q = iq + (size_t)t * nh * hd, *wt = hw + (size_t)t * nh;
        const float inv = 1.0f / sqrtf((float)hd);
        for (int64_t p = threadIdx.x; p < n_vis; p += blockDim.x) {
            const float *P = pool_key + (size_t)p * hd;
            float s = 0.0f;
            for (int h = 0; h < nh; h++) {
                float d = 0.0f;
                for (int i = 0; i < hd; i++) d += q[(size_t)h * hd + i] * P[i];
                d = __fmul_rn(d, inv);
                s = __fadd_rn(s, __fmul_rn(wt[h], d > 0.0f ? d : 0.0f));
            }
            sc[p] = s;
        }
        __syncthreads();
        for (int64_t p = threadIdx.x; p < n_vis; p += blockDim.x) {
            int64_t rank = 0;
            for (int64_t o = 0; o < n_vis && rank < budget; o++) rank += ranks_before(sc, (int)o, (int)p);
            if (rank < budget)
                for (int m = 0; m < kpool; m++) row[rank * kpool + m] = (int32_t)(p * kpool + m);
        }
        w = (int64_t)budget * kpool;
    }
    if (tail) {
        const int64_t first = n_vis * kpool;
        for (int64_t p = first + threadIdx.x; p <= a; p += blockDim.x) row[w + (p - first)] = (int32_t)p;
        w += a + 1 - first;
    }
    for (int64_t i = w + threadIdx.x; i < width; i += blockDim.x) row[i] = -1;
}

int nf_cuda_indexer_select(nf_backend *be, int il, nf_state *st, const float *x, const float *qr, int T,
                           int32_t *sel) {
    nf_cuda *c = nf_cuda_of(be);
    if (nf_cuda_state_check(st) < 0) return -1;
    const nf_hparams *hp = &c->m->hp;
    const nf_layer *L = &c->m->layers[il];
    nf_layer_state *LS = &st->L[il];
    const int n = hp->n_embd, hd = hp->idx_head_dim, nh = hp->idx_n_head, kpool = st->kpool;
    if (kpool > 64) return nf_fail("cuda indexer: kpool %d > 64 unsupported", kpool);
    if (hd > 1024) return nf_fail("cuda indexer: head dim %d > 1024 unsupported", hd);
    const float *knw = nf_cuda_vec(c, &L->idx_k_norm_w), *knb = nf_cuda_vec(c, &L->idx_k_norm_b);
    const float *ape = L->idx_ape.data ? nf_cuda_vec(c, &L->idx_ape) : nullptr;
    if (!knw || !knb || (L->idx_ape.data && !ape)) return nf_fail_prefix("layer %d indexer", il);
    const int budget = hp->idx_topk / kpool, width = nf_topk_width(hp);
    const int64_t max_vis = (st->pos + T) / kpool + 1;

    nf_cuda_scratch sc(c);
    float *ik = sc.get<float>((size_t)T * hd), *ig = L->idx_gate.data ? sc.get<float>((size_t)T * hd) : nullptr,
          *iq = sc.get<float>((size_t)T * nh * hd), *w = sc.get<float>((size_t)T * nh),
          *scores = sc.get<float>((size_t)T * max_vis);
    if (!ik || !iq || !w || !scores || (L->idx_gate.data && !ig)) return nf_fail("cuda indexer: out of device memory");
    nf_cuda_mat mk = nf_cuda_mat_of(c, &L->idx_k), mq = nf_cuda_mat_of(c, &L->idx_q_b), mp = nf_cuda_mat_of(c, &L->idx_proj);
    if (nf_cuda_matmul(c, &mk, x, T, n, ik, hd) < 0) return -1;
    if (nf_cuda_layernorm_rows(c, ik, T, hd, hp->indexer_ln_eps, knw, knb, ik) < 0) return -1;
    if (ig) {
        nf_cuda_mat mg = nf_cuda_mat_of(c, &L->idx_gate);
        if (nf_cuda_matmul(c, &mg, x, T, n, ig, hd) < 0) return -1;
    }
    idx_cache_kernel<<<(hd + 127) / 128, 128, 0, c->stream>>>(ik, ig, ape, st->pos, T, kpool, hd, LS->open_key,
                                                               LS->open_gate, LS->pool_key);
    NF_LAUNCHED();
    if (nf_cuda_matmul(c, &mq, qr, T, hp->q_lora_rank, iq, (int64_t)nh * hd) < 0) return -1;
    if (nf_cuda_matmul(c, &mp, x, T, n, w, nh) < 0) return -1;
    if (nf_cuda_scale(c, w, (int64_t)T * nh, 1.0f / sqrtf((float)nh)) < 0) return -1;
    idx_select_kernel<<<T, 256, 0, c->stream>>>(LS->pool_key, iq, w, st->pos, nh, hd, kpool, budget, width,
                                                 hp->idx_select_tail && kpool > 1, scores, max_vis, sel);
    NF_LAUNCHED();
    return 0;
}
