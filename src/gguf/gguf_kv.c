/* gguf_kv.c — metadata value types and the typed getters over a validated file.
 *
 * The reader has already checked that every value lies inside the file, so these functions only convert:
 * values are read with memcpy (they are packed, unaligned, little-endian), integer getters accept any integer
 * type whose value fits the requested one, and every refusal names the key and both types. */
#include "gguf/gguf_internal.h"

#include "util/error.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

static const struct { const char *name; size_t size; } type_info[GGUF_TYPE_COUNT] = {
    [GGUF_TYPE_UINT8] = {"uint8", 1},     [GGUF_TYPE_INT8] = {"int8", 1},
    [GGUF_TYPE_UINT16] = {"uint16", 2},   [GGUF_TYPE_INT16] = {"int16", 2},
    [GGUF_TYPE_UINT32] = {"uint32", 4},   [GGUF_TYPE_INT32] = {"int32", 4},
    [GGUF_TYPE_FLOAT32] = {"float32", 4}, [GGUF_TYPE_BOOL] = {"bool", 1},
    [GGUF_TYPE_STRING] = {"string", 0},   [GGUF_TYPE_ARRAY] = {"array", 0},
    [GGUF_TYPE_UINT64] = {"uint64", 8},   [GGUF_TYPE_INT64] = {"int64", 8},
    [GGUF_TYPE_FLOAT64] = {"float64", 8},
};

size_t gguf_type_size(gguf_type t) { return (unsigned)t < GGUF_TYPE_COUNT ? type_info[t].size : 0; }
const char *gguf_type_name(gguf_type t) { return (unsigned)t < GGUF_TYPE_COUNT ? type_info[t].name : "unknown"; }

static bool is_int(gguf_type t) {
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_INT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_INT16 ||
           t == GGUF_TYPE_UINT32 || t == GGUF_TYPE_INT32 || t == GGUF_TYPE_UINT64 || t == GGUF_TYPE_INT64;
}
static bool is_signed(gguf_type t) {
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 || t == GGUF_TYPE_INT64;
}
static bool is_float(gguf_type t) { return t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64; }

/* Element i of a numeric value of type t at p, as a signed (*s) or unsigned (*u) 64-bit integer. */
static void load_int(gguf_type t, const void *p, uint64_t i, int64_t *s, uint64_t *u) {
    const uint8_t *b = (const uint8_t *)p + i * type_info[t].size;
    *s = 0;
    *u = 0;
    switch (t) {
    case GGUF_TYPE_UINT8: *u = b[0]; break;
    case GGUF_TYPE_BOOL: *u = b[0]; break;
    case GGUF_TYPE_INT8: { int8_t v; memcpy(&v, b, 1); *s = v; break; }
    case GGUF_TYPE_UINT16: { uint16_t v; memcpy(&v, b, 2); *u = v; break; }
    case GGUF_TYPE_INT16: { int16_t v; memcpy(&v, b, 2); *s = v; break; }
    case GGUF_TYPE_UINT32: { uint32_t v; memcpy(&v, b, 4); *u = v; break; }
    case GGUF_TYPE_INT32: { int32_t v; memcpy(&v, b, 4); *s = v; break; }
    case GGUF_TYPE_UINT64: memcpy(u, b, 8); break;
    case GGUF_TYPE_INT64: memcpy(s, b, 8); break;
    default: break;
    }
}

static double load_f64(gguf_type t, const void *p, uint64_t i) {
    const uint8_t *b = (const uint8_t *)p + i * type_info[t].size;
    if (t == GGUF_TYPE_FLOAT32) { float v; memcpy(&v, b, 4); return v; }
    if (t == GGUF_TYPE_FLOAT64) { double v; memcpy(&v, b, 8); return v; }
    int64_t s;
    uint64_t u;
    load_int(t, p, i, &s, &u);
    return is_signed(t) ? (double)s : (double)u;
}

/* The scalar kv for key, or NULL with a message. `want` names the expected kind in messages. */
static const gguf_kv *scalar(const gguf_file *f, const char *key, const char *want) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) {
        nf_fail("%s: key '%s' not found", f->path, key);
        return NULL;
    }
    if (kv->type == GGUF_TYPE_ARRAY) {
        nf_fail("%s: key '%s' is an array of %s, expected %s", f->path, key, gguf_type_name(kv->elem_type), want);
        return NULL;
    }
    return kv;
}

/* Integer value of key within [lo, hi] (signed range given as int64; hi_u for the unsigned top). */
static int get_int(const gguf_file *f, const char *key, const char *want, int64_t lo, uint64_t hi, int64_t *out_s,
                   uint64_t *out_u) {
    const gguf_kv *kv = scalar(f, key, want);
    if (!kv) return -1;
    if (!is_int(kv->type))
        return nf_fail("%s: key '%s' has type %s, expected %s", f->path, key, gguf_type_name(kv->type), want);
    int64_t s;
    uint64_t u;
    load_int(kv->type, kv->data, 0, &s, &u);
    if (is_signed(kv->type)) {
        if (s < lo || (s > 0 && (uint64_t)s > hi))
            return nf_fail("%s: key '%s' value %" PRId64 " does not fit in %s", f->path, key, s, want);
        *out_s = s;
        *out_u = (uint64_t)s;
    } else {
        if (u > hi) return nf_fail("%s: key '%s' value %" PRIu64 " does not fit in %s", f->path, key, u, want);
        *out_s = (int64_t)u;
        *out_u = u;
    }
    return 0;
}

int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    int64_t s;
    uint64_t u;
    if (get_int(f, key, "uint32", 0, UINT32_MAX, &s, &u)) return -1;
    *out = (uint32_t)u;
    return 0;
}

int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out) {
    int64_t s;
    uint64_t u;
    if (get_int(f, key, "int64", INT64_MIN, INT64_MAX, &s, &u)) return -1;
    *out = s;
    return 0;
}

int gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv = scalar(f, key, "float32");
    if (!kv) return -1;
    if (!is_int(kv->type) && !is_float(kv->type))
        return nf_fail("%s: key '%s' has type %s, expected float32", f->path, key, gguf_type_name(kv->type));
    double v = load_f64(kv->type, kv->data, 0);
    if (isfinite(v) && fabs(v) > FLT_MAX)
        return nf_fail("%s: key '%s' value %g does not fit in float32", f->path, key, v);
    *out = (float)v;
    return 0;
}

int gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
    const gguf_kv *kv = scalar(f, key, "bool");
    if (!kv) return -1;
    if (kv->type != GGUF_TYPE_BOOL)
        return nf_fail("%s: key '%s' has type %s, expected bool", f->path, key, gguf_type_name(kv->type));
    *out = *(const uint8_t *)kv->data != 0;
    return 0;
}

int gguf_get_str(const gguf_file *f, const char *key, char *buf, size_t bufsize) {
    const gguf_kv *kv = scalar(f, key, "string");
    if (!kv) return -1;
    if (kv->type != GGUF_TYPE_STRING)
        return nf_fail("%s: key '%s' has type %s, expected string", f->path, key, gguf_type_name(kv->type));
    gguf_str s = gguf_arr_str(kv, 0);
    if (s.len >= bufsize)
        return nf_fail("%s: key '%s': string of %" PRIu64 " bytes does not fit a buffer of %zu", f->path, key, s.len,
                       bufsize);
    if (memchr(s.ptr, 0, s.len)) return nf_fail("%s: key '%s': string contains a NUL byte", f->path, key);
    memcpy(buf, s.ptr, s.len);
    buf[s.len] = 0;
    return 0;
}

gguf_str gguf_arr_str(const gguf_kv *kv, uint64_t i) {
    gguf_str s = {NULL, 0};
    if (!kv || kv->elem_type != GGUF_TYPE_STRING || i >= kv->count) return s;
    const uint8_t *rec;
    if (kv->type == GGUF_TYPE_STRING) rec = kv->data;
    else {
        const gguf_kv_entry *e = (const gguf_kv_entry *)kv;  /* kv is the entry's first member */
        if (!e->strs) return s;
        rec = e->strs[i];
    }
    memcpy(&s.len, rec, 8);
    s.ptr = (const char *)rec + 8;
    return s;
}

static bool numeric(const gguf_kv *kv, uint64_t i) {
    return kv && i < kv->count && (is_int(kv->elem_type) || is_float(kv->elem_type) || kv->elem_type == GGUF_TYPE_BOOL);
}

double gguf_arr_f64(const gguf_kv *kv, uint64_t i) {
    return numeric(kv, i) ? load_f64(kv->elem_type, kv->data, i) : 0.0;
}

int64_t gguf_arr_i64(const gguf_kv *kv, uint64_t i) {
    if (!numeric(kv, i)) return 0;
    if (is_float(kv->elem_type)) {
        double v = load_f64(kv->elem_type, kv->data, i);
        if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0)) return 0;  /* nan / out of range */
        return (int64_t)v;
    }
    int64_t s;
    uint64_t u;
    load_int(kv->elem_type, kv->data, i, &s, &u);
    return is_signed(kv->elem_type) ? s : u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)u;  /* clamp huge uint64 */
}
