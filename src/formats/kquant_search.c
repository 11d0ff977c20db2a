/* kquant_search.c — the scale searches behind the K-quant reference quantizers.
 *
 * Both follow the approach of ggml's reference quantizers (written here from the description of the method):
 *  - nf_make_qx_quants: symmetric levels q in [-nmax, nmax-1], x ~ scale*q. Start from scale = max/-nmax
 *    (the value of largest magnitude lands on -nmax), then try 18 nearby inverse scales and keep the one whose
 *    weighted least-squares fit explains most of the signal (largest sumlx^2/suml2).
 *  - nf_make_qkx2_quants: asymmetric levels q in [0, nmax], x ~ scale*q + min with min <= 0. Start from the
 *    min/max fit, then try nstep+1 inverse scales (rmin + rdelta*k + nmax)/(max - min), solving for the best
 *    (scale, min) by weighted least squares at each, and keep the one with the lowest weighted error (squared,
 *    or absolute when use_mad). Returns the scale and stores -min (a non-negative offset) in *the_min. */
#include <string.h>
#include "formats/quants.h"

#define GROUP_MAX_EPS 1e-15f

float nf_make_qx_quants(int n, int nmax, const float *x, int8_t *L, int rmse_type, const float *qw) {
    float max = 0.0f, amax = 0.0f;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = -(float)nmax / max;
    if (rmse_type == 0) {
        for (int i = 0; i < n; i++) L[i] = (int8_t)(nmax + nf_clampi(nf_nearest_int(iscale * x[i]), -nmax, nmax - 1));
        return 1.0f / iscale;
    }
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < n; i++) {
        int l = nf_clampi(nf_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        float w = qw ? qw[i] : rmse_type == 1 ? x[i] * x[i] : rmse_type == 2 ? 1.0f
                 : rmse_type == 3 ? fabsf(x[i]) : sqrtf(fabsf(x[i]));
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0.0f;
        for (int i = 0; i < n; i++) {
            int l = nf_clampi(nf_nearest_int(iscale * x[i]), -nmax, nmax - 1);
            float w = qw ? qw[i] : rmse_type == 1 ? x[i] * x[i] : rmse_type == 2 ? 1.0f
                     : rmse_type == 3 ? fabsf(x[i]) : sqrtf(fabsf(x[i]));
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + nf_clampi(nf_nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

float nf_make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                          uint8_t *Laux, float rmin, float rdelta, int nstep, int use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0.0f) min = 0.0f;
    if (!(max > min)) {                     /* constant (or nan) group: everything is the offset */
        memset(L, 0, (size_t)n);
        *the_min = min == min ? -min : 0.0f;
        return 0.0f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1.0f / iscale;
    float best_error = 0.0f;
    for (int i = 0; i < n; i++) {
        int l = nf_clampi(nf_nearest_int(iscale * (x[i] - min)), 0, nmax);
        L[i] = (uint8_t)l;
        float diff = scale * (float)l + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
        for (int i = 0; i < n; i++) {
            int l = nf_clampi(nf_nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * (float)l;
            sum_l2 += w * (float)l * (float)l;
            sum_xl += w * (float)l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0.0f) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0.0f) {
                this_min = 0.0f;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0.0f;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * (float)Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

void nf_refine_scale_min(const float *x, const float *w, uint8_t *L, int n, int qmax, int code_max, float df,
                         float mf, int *sc, int *m) {
    const int s0 = *sc, m0 = *m;
    double be = -1;
    uint8_t Lb[32], Lt[32];
    memcpy(Lb, L, (size_t)n);
    for (int ds = -1; ds <= 1; ds++)
        for (int dm_ = -1; dm_ <= 1; dm_++) {
            const int s = s0 + ds, mm = m0 + dm_;
            if (s < 0 || s > code_max || mm < 0 || mm > code_max) continue;
            const float d = df * (float)s, dm = mf * (float)mm;
            double e = 0;
            for (int l = 0; l < n; l++) {
                const float xv = x[l];
                Lt[l] = d > 0.0f ? (uint8_t)nf_clampi(nf_nearest_int((xv + dm) / d), 0, qmax) : L[l];
                const double y = (double)d * Lt[l] - dm - xv;
                e += w[l] * y * y;
            }
            if (be < 0 || e < be) { be = e; *sc = s; *m = mm; memcpy(Lb, Lt, (size_t)n); }
        }
    memcpy(L, Lb, (size_t)n);
}
