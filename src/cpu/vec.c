/* vec.c — row-wise elementwise helpers of the CPU backend (norms, softmax, activations), written to follow
 * HF's fp32 numerics: reductions of squares are accumulated in double so our f32 results sit as close as
 * possible to torch's (pairwise-summed) values. */
#include "cpu/cpu.h"

#include <math.h>

void nf_rmsnorm_row(const float *x, int64_t n, float eps, const float *w, float *out) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    float mean = (float)(ss / (double)n);
    float r = 1.0f / sqrtf(mean + eps);
    if (w) for (int64_t i = 0; i < n; i++) out[i] = w[i] * (x[i] * r);
    else for (int64_t i = 0; i < n; i++) out[i] = x[i] * r;
}

void nf_layernorm_row(const float *x, int64_t n, float eps, const float *w, const float *b, float *out) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += x[i];
    float mean = (float)(s / (double)n);
    double v = 0.0;
    for (int64_t i = 0; i < n; i++) v += ((double)x[i] - mean) * ((double)x[i] - mean);
    float var = (float)(v / (double)n);
    float r = 1.0f / sqrtf(var + eps);
    for (int64_t i = 0; i < n; i++) {
        float y = (x[i] - mean) * r;
        if (w) y *= w[i];
        if (b) y += b[i];
        out[i] = y;
    }
}

void nf_l2norm_row(float *x, int64_t n, float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    float d = sqrtf((float)ss + eps);
    for (int64_t i = 0; i < n; i++) x[i] = x[i] / d;
}

void nf_softmax_row(float *x, int64_t n) {
    if (n <= 0) return;
    float mx = x[0];
    for (int64_t i = 1; i < n; i++) if (x[i] > mx) mx = x[i];
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        s += x[i];
    }
    float inv = (float)(1.0 / s);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

float nf_silu(float x) { return x / (1.0f + expf(-x)); }

float nf_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

void nf_swiglu_clamped(const float *g, const float *u, int64_t n, float limit, float *out) {
    for (int64_t i = 0; i < n; i++) {
        float a = g[i], b = u[i];
        if (limit > 0.0f) {
            if (a > limit) a = limit;
            if (b > limit) b = limit;
            if (b < -limit) b = -limit;
        }
        out[i] = nf_silu(a) * b;
    }
}
