/* requantize.c — GGUF → GGUF with another recipe (see requantize.h). */
#include "model/requantize.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "formats/formats.h"
#include "formats/quantize_rows.h"
#include "gguf/gguf.h"
#include "model/layout.h"
#include "model/model.h"
#include "model/recipe.h"
#include "util/error.h"

#define SLAB_ELEMS ((int64_t)1 << 24) /* f32 values dequantized at once (64 MB) */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fmt_bytes(double b, char *buf, size_t n) {
    if (b >= 1e9) snprintf(buf, n, "%.2f GB", b / 1e9);
    else if (b >= 1e6) snprintf(buf, n, "%.1f MB", b / 1e6);
    else snprintf(buf, n, "%.0f kB", b / 1e3);
}

/* Keys the output sets itself. */
static bool replaced_key(const char *k) {
    return !strcmp(k, "nextflash.convert.recipe") || !strcmp(k, "general.quantization_version") ||
           !strcmp(k, "nextflash.quantize.source_recipe");
}

static char *dup_str(gguf_str s) {
    if (memchr(s.ptr, 0, s.len)) return NULL;
    char *p = malloc(s.len + 1);
    if (!p) return NULL;
    memcpy(p, s.ptr, s.len);
    p[s.len] = 0;
    return p;
}

/* Copy one key/value pair into the writer. 0 or -1. */
static int copy_kv(gguf_writer *w, const char *key, const gguf_kv *kv) {
    if (kv->type == GGUF_TYPE_ARRAY) {
        if (kv->elem_type != GGUF_TYPE_STRING) {
            gguf_set_arr(w, key, kv->elem_type, kv->data, kv->count);
            return 0;
        }
        char **v = calloc(kv->count ? kv->count : 1, sizeof *v);
        if (!v) return nf_fail("%s: out of memory", key);
        int rc = 0;
        for (uint64_t i = 0; i < kv->count && !rc; i++)
            if (!(v[i] = dup_str(gguf_arr_str(kv, i)))) rc = nf_fail("key '%s': element %llu holds a NUL byte (not copyable)", key, (unsigned long long)i);
        if (!rc) gguf_set_arr_str(w, key, (const char *const *)v, kv->count);
        for (uint64_t i = 0; i < kv->count; i++) free(v[i]);
        free(v);
        return rc;
    }
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        int64_t i64;
        float f32;
        double f64;
    } u;
    size_t sz = gguf_type_size(kv->type);
    if (kv->type != GGUF_TYPE_STRING) {
        if (!sz || sz > sizeof u) return nf_fail("key '%s': unsupported value type", key);
        memcpy(&u, kv->data, sz);
    }
    switch (kv->type) {
    case GGUF_TYPE_UINT8: gguf_set_u8(w, key, u.u8); break;
    case GGUF_TYPE_INT8: gguf_set_i8(w, key, u.i8); break;
    case GGUF_TYPE_UINT16: gguf_set_u16(w, key, u.u16); break;
    case GGUF_TYPE_INT16: gguf_set_i16(w, key, u.i16); break;
    case GGUF_TYPE_UINT32: gguf_set_u32(w, key, u.u32); break;
    case GGUF_TYPE_INT32: gguf_set_i32(w, key, u.i32); break;
    case GGUF_TYPE_UINT64: gguf_set_u64(w, key, u.u64); break;
    case GGUF_TYPE_INT64: gguf_set_i64(w, key, u.i64); break;
    case GGUF_TYPE_FLOAT32: gguf_set_f32(w, key, u.f32); break;
    case GGUF_TYPE_FLOAT64: gguf_set_f64(w, key, u.f64); break;
    case GGUF_TYPE_BOOL: gguf_set_bool(w, key, u.u8 != 0); break;
    case GGUF_TYPE_STRING: {
        uint64_t len;
        memcpy(&len, kv->data, sizeof len);
        char *s = dup_str((gguf_str){(const char *)kv->data + 8, len});
        if (!s) return nf_fail("key '%s': string holds a NUL byte (not copyable)", key);
        gguf_set_str(w, key, s);
        free(s);
        break;
    }
    default: return nf_fail("key '%s': unsupported value type %d", key, (int)kv->type);
    }
    return 0;
}

typedef struct {
    const gguf_tensor *src;
    const nf_layout_tensor *lt; /* NULL: not in the layout (copied) */
    uint32_t type;
    bool fell_back;
    uint64_t out_bytes;
} rq_item;

static void progress(const nf_requantize_opts *o, FILE *lg, bool tty, double t0, double *last, int i, int n,
                     uint64_t done, uint64_t total, const char *name, bool force) {
    if (o->quiet) return;
    double t = now_s();
    if (!force && t - *last < (tty ? 0.2 : 10.0)) return;
    *last = t;
    double el = t - t0, rate = el > 0 ? (double)done / el : 0;
    double frac = total ? (double)done / (double)total : 1.0;
    double eta = rate > 0 ? (double)(total - done) / rate : 0;
    char d[32], tt[32], rb[32], bar[24];
    fmt_bytes((double)done, d, sizeof d);
    fmt_bytes((double)total, tt, sizeof tt);
    fmt_bytes(rate, rb, sizeof rb);
    int fill = (int)(frac * 20 + 0.5);
    for (int k = 0; k < 20; k++) bar[k] = k < fill ? '#' : '.';
    bar[20] = 0;
    fprintf(lg, "%s[%s] %5.1f%% tensor %d/%d %s/%s %s/s ETA %dh%02dm%02ds %-40.40s%s", tty ? "\r" : "", bar,
            100 * frac, i, n, d, tt, rb, (int)eta / 3600, (int)eta / 60 % 60, (int)eta % 60, name, tty ? "" : "\n");
    fflush(lg);
}

int nf_requantize(const nf_requantize_opts *o, nf_requantize_stats *stats) {
    nf_requantize_stats st = {0};
    FILE *lg = o->log ? o->log : stderr;
    bool tty = isatty(fileno(lg));
    int nt = o->n_threads > 0 ? o->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (nt < 1) nt = 1;
    gguf_file *f = NULL;
    gguf_writer *w = NULL;
    nf_layout_tensor *lts = NULL;
    rq_item *items = NULL;
    float *f32 = NULL;
    uint8_t *qbuf = NULL;
    bool *used = NULL;
    int n_lt = 0, n = 0, rc = -1;

    const nf_recipe *recipe = nf_recipe_find(o->recipe ? o->recipe : "");
    if (!recipe) return -1;
    if (!o->in_path || !o->out_path) return nf_fail("requantize: input and output paths are required");
    struct stat si, so;
    if (stat(o->in_path, &si) == 0 && stat(o->out_path, &so) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
        return nf_fail("%s: output is the input file", o->out_path);

    f = gguf_open(o->in_path);
    if (!f) return -1;
    nf_hparams hp;
    if (nf_hparams_load(f, &hp) < 0) {
        nf_fail_prefix("%s", o->in_path);
        goto out;
    }
    lts = nf_layout_tensors_alloc(&hp, &n_lt);
    if (!lts) {
        nf_fail_prefix("%s", o->in_path);
        goto out;
    }
    int64_t n_in = gguf_tensor_count(f);
    items = calloc((size_t)(n_lt + n_in) + 1, sizeof *items);
    used = calloc((size_t)n_in + 1, 1);
    if (!items || !used) {
        nf_fail("out of memory");
        goto out;
    }
    /* Plan: layout tensors in layout order (each must be present with its shape), then the rest. */
    char errs[1024] = "";
    int n_err = 0;
    for (int i = 0; i < n_lt; i++) {
        const nf_layout_tensor *lt = &lts[i];
        const gguf_tensor *t = gguf_find_tensor(f, lt->name);
        if (!t) {
            /* Optional in the file: absent MTP blocks are not an error only if the layout did not ask for them. */
            if (n_err++ < 8) snprintf(errs + strlen(errs), sizeof errs - strlen(errs), "\n%s: missing", lt->name);
            continue;
        }
        bool same = true;
        for (int d = 0; d < 4; d++) same &= t->ne[d] == lt->ne[d];
        if (!same) {
            if (n_err++ < 8)
                snprintf(errs + strlen(errs), sizeof errs - strlen(errs), "\n%s: shape [%lld,%lld,%lld] differs from the layout's [%lld,%lld,%lld]",
                         lt->name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)lt->ne[0],
                         (long long)lt->ne[1], (long long)lt->ne[2]);
            continue;
        }
        rq_item *it = &items[n++];
        it->src = t;
        it->lt = lt;
        it->type = nf_recipe_type(recipe, lt, &it->fell_back);
        used[t - gguf_tensor_at(f, 0)] = true;
    }
    if (n_err) {
        nf_fail("%s: %d tensor%s do not match the glm5-next layout:%s%s", o->in_path, n_err, n_err > 1 ? "s" : "", errs,
                n_err > 8 ? "\n..." : "");
        goto out;
    }
    for (int64_t i = 0; i < n_in; i++) {
        if (used[i]) continue;
        rq_item *it = &items[n++];
        it->src = gguf_tensor_at(f, i);
        it->type = it->src->type;
        st.n_extra++;
        if (!o->quiet) fprintf(lg, "nf-quantize: note: %s is not in the glm5-next layout: copied unchanged\n", it->src->name);
    }
    uint64_t total_in = 0;
    bool any_q = false;
    for (int i = 0; i < n; i++) {
        rq_item *it = &items[i];
        int64_t rows = it->src->ne[1] * it->src->ne[2] * it->src->ne[3];
        it->out_bytes = it->type == it->src->type ? it->src->size : nf_row_bytes(it->type, it->src->ne[0]) * (uint64_t)rows;
        total_in += it->src->size;
        any_q |= nf_type_get(it->type)->quantized;
        if (it->type != it->src->type && it->lt) {
            if (!nf_type_get(it->src->type)->supported) {
                nf_fail("%s: source type %s cannot be dequantized", it->src->name, nf_type_get(it->src->type)->name);
                goto out;
            }
            if (nf_type_get(it->src->type)->quantized) st.n_from_quantized++;
        }
        if (it->fell_back) {
            st.n_fallback++;
            if (!o->quiet && st.n_fallback <= 12)
                fprintf(lg, "nf-quantize: %s: rows of %lld do not fit %s, stored as %s\n", it->src->name,
                        (long long)it->src->ne[0], nf_type_get(recipe->type[it->lt->role])->name,
                        nf_type_get(it->type)->name);
        }
    }
    if (!o->quiet && st.n_fallback > 12) fprintf(lg, "nf-quantize: ... %d fallbacks in all\n", st.n_fallback);
    if (!o->quiet && st.n_from_quantized)
        fprintf(lg, "nf-quantize: note: %d tensors are re-quantized from block-quantized data (the errors add up; "
                    "converting from the original checkpoint is more accurate)\n", st.n_from_quantized);

    /* ---- declare ---- */
    w = gguf_writer_create(o->out_path);
    if (!w) goto out;
    char src_recipe[64] = "";
    if (gguf_find(f, "nextflash.convert.recipe")) gguf_get_str(f, "nextflash.convert.recipe", src_recipe, sizeof src_recipe);
    else if (gguf_find(f, "general.nextflash.recipe")) gguf_get_str(f, "general.nextflash.recipe", src_recipe, sizeof src_recipe);
    for (int64_t i = 0; i < gguf_kv_count(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        char *key = dup_str(kv->key);
        if (!key) {
            nf_fail("%s: a metadata key holds a NUL byte", o->in_path);
            goto out;
        }
        int r = replaced_key(key) ? 0 : copy_kv(w, key, kv);
        if (r == 0 && !strcmp(key, "general.nextflash.recipe")) gguf_set_str(w, key, recipe->name);
        free(key);
        if (r < 0) {
            nf_fail_prefix("%s", o->in_path);
            goto out;
        }
    }
    if (any_q) gguf_set_u32(w, "general.quantization_version", 2);
    gguf_set_str(w, "nextflash.convert.recipe", recipe->name);
    gguf_set_str(w, "nextflash.quantize.source_recipe", src_recipe[0] ? src_recipe : "unknown");
    for (int i = 0; i < n; i++)
        if (gguf_writer_add_tensor(w, items[i].src->name, items[i].type, items[i].src->n_dims, items[i].src->ne) < 0) goto out;
    if (gguf_writer_begin_data(w) < 0) goto out;

    /* ---- stream ---- */
    double t0 = now_s(), last = -1e9;
    uint64_t done = 0;
    for (int i = 0; i < n; i++) {
        const rq_item *it = &items[i];
        const gguf_tensor *t = it->src;
        if (o->cancel && *o->cancel) {
            nf_fail("interrupted");
            goto out;
        }
        progress(o, lg, tty, t0, &last, i, n, done, total_in, t->name, false);
        if (it->type == t->type) {
            if (gguf_writer_write_tensor(w, t->data, t->size) < 0) goto out;
            st.n_copied++;
        } else {
            int64_t row_len = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
            int64_t slab = SLAB_ELEMS / row_len;
            if (slab < 1) slab = 1;
            if (slab > rows) slab = rows;
            size_t in_rb = nf_row_bytes(t->type, row_len), out_rb = nf_row_bytes(it->type, row_len);
            qbuf = malloc(it->out_bytes ? it->out_bytes : 1);
            f32 = malloc((size_t)(slab * row_len) * sizeof(float) + 1);
            if (!qbuf || !f32) {
                nf_fail("%s: out of memory", t->name);
                goto out;
            }
            for (int64_t r0 = 0; r0 < rows; r0 += slab) {
                int64_t nr = rows - r0 < slab ? rows - r0 : slab;
                const uint8_t *src = (const uint8_t *)t->data + (size_t)r0 * in_rb;
                if (nf_dequantize(t->type, src, f32, nr * row_len) < 0 ||
                    nf_quantize_rows(it->type, f32, qbuf + (size_t)r0 * out_rb, nr, row_len, nt) < 0) {
                    nf_fail_prefix("%s", t->name);
                    goto out;
                }
                if (o->cancel && *o->cancel) {
                    nf_fail("interrupted");
                    goto out;
                }
            }
            if (gguf_writer_write_tensor(w, qbuf, it->out_bytes) < 0) goto out;
            free(qbuf);
            free(f32);
            qbuf = NULL;
            f32 = NULL;
            st.n_converted++;
        }
        done += t->size;
        st.bytes_in += t->size;
        st.bytes_out += it->out_bytes;
    }
    progress(o, lg, tty, t0, &last, n, n, done, total_in, "done", true);
    if (!o->quiet && tty) fputc('\n', lg);
    int frc = gguf_writer_finish(w);
    w = NULL;
    if (frc < 0) goto out;
    st.n_tensors = n;
    st.seconds = now_s() - t0;
    if (!o->quiet) {
        /* per-type census, then totals */
        fprintf(lg, "\n%-8s %8s %14s %14s\n", "type", "tensors", "bytes in", "bytes out");
        for (uint32_t ty = 0; ty < 64; ty++) {
            int cnt = 0;
            uint64_t bi = 0, bo = 0;
            for (int i = 0; i < n; i++)
                if (items[i].type == ty) {
                    cnt++;
                    bi += items[i].src->size;
                    bo += items[i].out_bytes;
                }
            if (cnt && nf_type_get(ty)->name) fprintf(lg, "%-8s %8d %14llu %14llu\n", nf_type_get(ty)->name, cnt, (unsigned long long)bi, (unsigned long long)bo);
        }
        char bi[32], bo[32];
        fmt_bytes((double)st.bytes_in, bi, sizeof bi);
        fmt_bytes((double)st.bytes_out, bo, sizeof bo);
        fprintf(lg, "\n%d tensors (%d re-encoded, %d copied, %d not in the layout), recipe %s -> %s: %s -> %s in %.1f s -> %s\n",
                n, st.n_converted, st.n_copied, st.n_extra, src_recipe[0] ? src_recipe : "?", recipe->name, bi, bo,
                st.seconds, o->out_path);
        if (st.n_fallback) fprintf(lg, "%d tensors fell back to a smaller-block type\n", st.n_fallback);
    }
    rc = 0;
out:
    if (w) gguf_writer_abort(w);
    free(f32);
    free(qbuf);
    free(items);
    free(used);
    free(lts);
    if (f) gguf_close(f);
    if (stats) *stats = st;
    return rc;
}
