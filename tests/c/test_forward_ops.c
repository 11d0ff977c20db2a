/* test_forward_ops.c — the CPU backend's individual ops, each against a hand-checkable value or an
 * independent double-precision formulation: the mHC Sinkhorn projection, the k-pool softmax pooling, top-k
 * tie order, the KDA recurrence step against the matrix form and against HF's chunked (WY) form, the
 * threaded matmul over every weight type against dequantize-then-f32-dot, and the thread pool itself. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/matmul.h"
#include "cpu/threads.h"
#include "formats/formats.h"

static double urand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0;
}

Test(forward_ops, sinkhorn_uniform_logits_give_uniform_matrix) {
    float c[16];
    for (int i = 0; i < 16; i++) c[i] = 0.7f;
    nf_hc_sinkhorn(c, 4, 20, 1e-6f);
    for (int i = 0; i < 16; i++) cr_assert_float_eq(c[i], 0.25f, 1e-5f, "entry %d = %g", i, c[i]);
}

Test(forward_ops, sinkhorn_is_doubly_stochastic_and_follows_hf_order) {
    uint64_t s = 5;
    float c[16];
    double ref[16];
    for (int i = 0; i < 16; i++) c[i] = (float)(4.0 * urand(&s) - 2.0);
    /* double-precision reference of HF's order: softmax over j, +eps, column pass, then 19 x (row, column) */
    for (int i = 0; i < 4; i++) {
        double mx = -1e30, sum = 0;
        for (int j = 0; j < 4; j++) mx = fmax(mx, c[i * 4 + j]);
        for (int j = 0; j < 4; j++) sum += exp(c[i * 4 + j] - mx);
        for (int j = 0; j < 4; j++) ref[i * 4 + j] = exp(c[i * 4 + j] - mx) / sum + 1e-6;
    }
    for (int it = 0; it < 20; it++) {
        if (it) for (int i = 0; i < 4; i++) {
            double r = 1e-6;
            for (int j = 0; j < 4; j++) r += ref[i * 4 + j];
            for (int j = 0; j < 4; j++) ref[i * 4 + j] /= r;
        }
        for (int j = 0; j < 4; j++) {
            double r = 1e-6;
            for (int i = 0; i < 4; i++) r += ref[i * 4 + j];
            for (int i = 0; i < 4; i++) ref[i * 4 + j] /= r;
        }
    }
    nf_hc_sinkhorn(c, 4, 20, 1e-6f);
    for (int k = 0; k < 16; k++) cr_assert(fabs(c[k] - ref[k]) < 1e-6, "entry %d: %g vs %g", k, c[k], ref[k]);
    for (int j = 0; j < 4; j++) {
        double col = 0, row = 0;
        for (int i = 0; i < 4; i++) col += c[i * 4 + j], row += c[j * 4 + i];
        cr_assert(fabs(col - 1.0) < 1e-5, "column %d sums to %g", j, col);
        cr_assert(fabs(row - 1.0) < 2e-3, "row %d sums to %g", j, row);
    }
}

Test(forward_ops, kpool_softmax_pooling_by_hand) {
    /* kpool 2, two channels. channel 0: gates (0, ln 3) -> weights (1/4, 3/4); keys (4, 8) -> 7.
     * channel 1: gates (1, 1) + ape (ln 3, 0) -> weights (3/4, 1/4); keys (-4, 4) -> -2. */
    float key[4] = {4, -4, 8, 4};
    float gate[4] = {0, 1, logf(3.0f), 1};
    float ape[4] = {0, logf(3.0f), 0, 0};
    float P[2];
    nf_kpool_compress(key, gate, ape, 2, 2, P);
    cr_assert_float_eq(P[0], 7.0f, 1e-5f, "%g", P[0]);
    cr_assert_float_eq(P[1], -2.0f, 1e-5f, "%g", P[1]);
    nf_kpool_compress(key, gate, NULL, 2, 2, P); /* no ape: channel 1 is a plain mean */
    cr_assert_float_eq(P[1], 0.0f, 1e-5f, "%g", P[1]);
}

Test(forward_ops, topk_descending_ties_by_ascending_index) {
    float s[6] = {1, 3, 3, 2, 3, -1};
    int32_t out[6];
    cr_assert_eq(nf_topk_desc(s, 6, 2, out), 2);
    cr_assert(out[0] == 1 && out[1] == 2, "got %d %d", out[0], out[1]);
    cr_assert_eq(nf_topk_desc(s, 6, 4, out), 4);
    cr_assert(out[0] == 1 && out[1] == 2 && out[2] == 4 && out[3] == 3, "got %d %d %d %d", out[0], out[1], out[2], out[3]);
    cr_assert_eq(nf_topk_desc(s, 6, 1, out), 1);
    cr_assert_eq(out[0], 1);
    cr_assert_eq(nf_topk_desc(s, 3, 9, out), 3);
}

static const float *cmp_scores;
static int cmp_rank(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (cmp_scores[i] != cmp_scores[j]) return cmp_scores[i] > cmp_scores[j] ? -1 : 1;
    return (i > j) - (i < j);
}

Test(forward_ops, topk_matches_full_sort_with_many_ties) {
    enum { NS = 1000 };
    static float s[NS];
    static int32_t ref[NS], got[NS];
    uint64_t seed = 17;
    for (int i = 0; i < NS; i++) s[i] = (float)(int)(urand(&seed) * 20); /* 20 distinct values */
    for (int i = 0; i < NS; i++) ref[i] = i;
    cmp_scores = s;
    qsort(ref, NS, sizeof ref[0], cmp_rank);
    int ks[] = {1, 2, 7, 64, 512, 999, 1000};
    for (size_t q = 0; q < sizeof ks / sizeof ks[0]; q++) {
        cr_assert_eq(nf_topk_desc(s, NS, ks[q], got), ks[q]);
        cr_assert(memcmp(got, ref, sizeof(int32_t) * ks[q]) == 0, "k = %d differs from the full sort", ks[q]);
    }
}

/* KDA: one head, dk = dv = D, T tokens of random (already normalised) q, k, v, g < 0, beta in (0,1) */
#define KD 8
#define KT 11
typedef struct {
    float q[KT][KD], k[KT][KD], v[KT][KD], g[KT][KD], beta[KT];
} kda_case;

static void make_case(kda_case *c, uint64_t seed) {
    for (int t = 0; t < KT; t++) {
        double nq = 0, nk = 0;
        for (int i = 0; i < KD; i++) {
            c->q[t][i] = (float)(urand(&seed) - 0.5);
            c->k[t][i] = (float)(urand(&seed) - 0.5);
            c->v[t][i] = (float)(2 * urand(&seed) - 1);
            c->g[t][i] = (float)(-5.0 * urand(&seed));
            nq += c->q[t][i] * c->q[t][i];
            nk += c->k[t][i] * c->k[t][i];
        }
        for (int i = 0; i < KD; i++) {
            c->q[t][i] /= (float)(sqrt(nq) * sqrt(KD));
            c->k[t][i] /= (float)sqrt(nk);
        }
        c->beta[t] = (float)urand(&seed);
    }
}

Test(forward_ops, kda_step_matches_matrix_form) {
    kda_case c;
    make_case(&c, 11);
    float S[KD * KD] = {0}, o[KD];
    double R[KD][KD] = {{0}};
    for (int t = 0; t < KT; t++) {
        nf_kda_step(S, KD, KD, c.q[t], c.k[t], c.v[t], c.g[t], c.beta[t], o);
        /* S' = diag(exp g) S;  S'' = S' + beta k (v - S'^T k)^T;  o = S''^T q */
        double kv[KD];
        for (int i = 0; i < KD; i++)
            for (int j = 0; j < KD; j++) R[i][j] *= exp((double)c.g[t][i]);
        for (int j = 0; j < KD; j++) {
            kv[j] = 0;
            for (int i = 0; i < KD; i++) kv[j] += R[i][j] * c.k[t][i];
        }
        for (int i = 0; i < KD; i++)
            for (int j = 0; j < KD; j++) R[i][j] += c.beta[t] * c.k[t][i] * (c.v[t][j] - kv[j]);
        for (int j = 0; j < KD; j++) {
            double r = 0;
            for (int i = 0; i < KD; i++) r += R[i][j] * c.q[t][i];
            cr_assert(fabs(r - o[j]) < 1e-5, "t %d j %d: %g vs %g", t, j, o[j], r);
        }
    }
}

/* HF's chunk_kimi_delta_attention for one head in double (chunk C, zero-padded), initial state zero. */
static void kda_chunked_ref(const kda_case *c, int C, double out[KT][KD]) {
    int nchunks = (KT + C - 1) / C;
    double S[KD][KD] = {{0}};
    for (int n = 0; n < nchunks; n++) {
        double q[16][KD] = {{0}}, k[16][KD] = {{0}}, v[16][KD] = {{0}}, g[16][KD] = {{0}}, b[16] = {0};
        for (int r = 0; r < C; r++) {
            int t = n * C + r;
            if (t >= KT) continue;
            for (int i = 0; i < KD; i++) q[r][i] = c->q[t][i], k[r][i] = c->k[t][i], v[r][i] = c->v[t][i], g[r][i] = c->g[t][i];
            b[r] = c->beta[t];
        }
        for (int r = 1; r < C; r++) /* cumulative gate */
            for (int i = 0; i < KD; i++) g[r][i] += g[r - 1][i];
        /* A[i][j] = -sum_d beta_i k_i[d] k_j[d] exp(g_i[d] - g_j[d]) for j < i, then forward substitution */
        double A[16][16] = {{0}};
        for (int i = 0; i < C; i++)
            for (int j = 0; j < i; j++) {
                double s = 0;
                for (int d = 0; d < KD; d++) s += b[i] * k[i][d] * k[j][d] * exp(g[i][d] - g[j][d]);
                A[i][j] = -s;
            }
        for (int i = 1; i < C; i++) {
            double row[16];
            for (int j = 0; j < i; j++) row[j] = A[i][j];
            for (int j = 0; j < i; j++) {
                double s = row[j];
                for (int m = 0; m < i; m++) s += row[m] * A[m][j];
                A[i][j] = s;
            }
        }
        for (int i = 0; i < C; i++) A[i][i] += 1.0;
        double u[16][KD], w[16][KD]; /* u = A (v*beta), w = A (k*beta*exp(g)) */
        for (int i = 0; i < C; i++)
            for (int d = 0; d < KD; d++) {
                double su = 0, sw = 0;
                for (int j = 0; j < C; j++) {
                    su += A[i][j] * v[j][d] * b[j];
                    sw += A[i][j] * k[j][d] * b[j] * exp(g[j][d]);
                }
                u[i][d] = su;
                w[i][d] = sw;
            }
        double vnew[16][KD];
        for (int i = 0; i < C; i++)
            for (int d = 0; d < KD; d++) {
                double s = 0;
                for (int e = 0; e < KD; e++) s += w[i][e] * S[e][d];
                vnew[i][d] = u[i][d] - s;
            }
        for (int i = 0; i < C; i++) {
            int t = n * C + i;
            for (int d = 0; d < KD; d++) {
                double inter = 0, intra = 0;
                for (int e = 0; e < KD; e++) inter += q[i][e] * exp(g[i][e]) * S[e][d];
                for (int j = 0; j <= i; j++) {
                    double a = 0;
                    for (int e = 0; e < KD; e++) a += q[i][e] * k[j][e] * exp(g[i][e] - g[j][e]);
                    intra += a * vnew[j][d];
                }
                if (t < KT) out[t][d] = inter + intra;
            }
        }
        double Sn[KD][KD];
        for (int e = 0; e < KD; e++)
            for (int d = 0; d < KD; d++) {
                double s = S[e][d] * exp(g[C - 1][e]);
                for (int j = 0; j < C; j++) s += k[j][e] * exp(g[C - 1][e] - g[j][e]) * vnew[j][d];
                Sn[e][d] = s;
            }
        memcpy(S, Sn, sizeof S);
    }
}

Test(forward_ops, kda_recurrence_equals_hf_chunked_form) {
    kda_case c;
    make_case(&c, 23);
    for (int C = 1; C <= 16; C *= 2) {
        double ref[KT][KD];
        kda_chunked_ref(&c, C, ref);
        float S[KD * KD] = {0}, o[KD];
        for (int t = 0; t < KT; t++) {
            nf_kda_step(S, KD, KD, c.q[t], c.k[t], c.v[t], c.g[t], c.beta[t], o);
            for (int j = 0; j < KD; j++)
                cr_assert(fabs(o[j] - ref[t][j]) < 1e-5, "chunk %d t %d j %d: %g vs %g", C, t, j, o[j], ref[t][j]);
        }
    }
}

Test(forward_ops, matmul_threaded_matches_naive_for_every_weight_type) {
    /* Every weight type: the product is the dequantized weights dotted with the f32 activation (activations
     * are never quantized). Each output must equal nf_dot_f32 of the nf_dequantize'd row bit for bit, for one
     * token (fused kernels), five tokens (row buffer), threaded or not, and lie within f32 rounding of the
     * double-precision dot: |y - ref| <= 1e-6 * sum |w*x| (f32 accumulation of 512 terms in 32 partial sums
     * errs by ~2^-24 * sqrt(16) of it; quantizing the activation to Q8_0 / Q8_K instead, as ggml does, moves
     * these dots by 1.3e-6 to 6.6e-4 of sum |w*x| (measured on 200 rows per type), so the bound rejects it). */
    const int n = 512, rows = 70, T = 5;
    uint64_t s = 99;
    float *w = malloc(sizeof(float) * n * rows), *x = malloc(sizeof(float) * n * T);
    float *y = malloc(sizeof(float) * rows * T), *y1 = malloc(sizeof(float) * rows * T);
    float *deq = malloc(sizeof(float) * n * rows);
    for (int i = 0; i < n * rows; i++) w[i] = (float)(urand(&s) - 0.5);
    for (int i = 0; i < n * T; i++) x[i] = (float)(urand(&s) - 0.5);
    nf_pool *pool = nf_pool_create(3);
    const uint32_t types[] = {NF_TYPE_F32, NF_TYPE_F16, NF_TYPE_BF16, NF_TYPE_Q8_0,
                              NF_TYPE_Q4_K, NF_TYPE_Q6_K, NF_TYPE_Q2_K, NF_TYPE_IQ2_XXS};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t type = types[ti];
        const char *name = nf_type_get(type)->name;
        size_t rb = nf_row_bytes(type, n);
        void *q = malloc(rb * rows);
        for (int r = 0; r < rows; r++) {
            if (type == NF_TYPE_F32) memcpy((char *)q + rb * r, w + r * n, rb);
            else nf_quantize(type, w + r * n, (char *)q + rb * r, n, n, NULL);
            cr_assert_eq(nf_dequantize(type, (char *)q + rb * r, deq + r * n, n), 0);
        }
        nf_tensor t = {.name = "w", .data = q, .type = type, .n_dims = 2, .ne = {n, rows, 1, 1}};
        nf_mat m = nf_mat_of(&t);
        nf_matmul(pool, &m, x, T, n, y, rows);
        for (int tt = 0; tt < T; tt++) nf_matmul_serial(&m, x + tt * n, 1, n, y1 + tt * rows, rows);
        for (int tt = 0; tt < T; tt++)
            for (int r = 0; r < rows; r++) {
                const float *wr = deq + r * n, *xt = x + tt * n;
                const float want = nf_dot_f32(wr, xt, n), got = y[tt * rows + r], got1 = y1[tt * rows + r];
                cr_assert(got == want && got1 == want, "%s t %d r %d: T=%d %.9g, T=1 %.9g, nf_dot_f32 %.9g", name, tt,
                          r, T, got, got1, want);
                double ref = 0, mag = 0;
                for (int i = 0; i < n; i++) {
                    ref += (double)wr[i] * xt[i];
                    mag += fabs((double)wr[i] * xt[i]);
                }
                cr_assert(fabs(got - ref) <= 1e-6 * mag, "%s t %d r %d: %.9g vs exact %.9g (sum |wx| %g)", name, tt, r,
                          got, ref, mag);
            }
        free(q);
    }
    nf_pool_free(pool);
    free(w);
    free(x);
    free(y);
    free(y1);
    free(deq);
}

static void count_task(void *ctx, int64_t i, int thread) {
    (void)thread;
    atomic_llong *sum = ctx;
    atomic_fetch_add(sum, i + 1);
}

Test(forward_ops, pool_runs_every_task_once) {
    nf_pool *p = nf_pool_create(4);
    cr_assert_not_null(p);
    for (int rep = 0; rep < 200; rep++) {
        atomic_llong sum = 0;
        int64_t n = rep % 37 + 1;
        nf_pool_run(p, n, count_task, &sum);
        cr_assert_eq(atomic_load(&sum), n * (n + 1) / 2);
    }
    nf_pool_free(p);
}
