/* gguf_write.c — the streaming GGUF v3 writer.
 *
 * The caller declares every key and tensor first; gguf_writer_begin_data then writes the header, metadata,
 * tensor infos (with offsets computed from the declared shapes) and the padding up to the data section, and
 * gguf_writer_write_tensor appends one tensor's bytes at a time, in declaration order, each padded to the
 * alignment. Only one tensor needs to be in memory at once.
 *
 * Everything goes to "<path>.tmp", renamed to <path> only when gguf_writer_finish has flushed, synced and
 * closed it without error: a failed or interrupted conversion never leaves a half-written file under the final
 * name, and abort/failure removes the temporary. Every write is checked (a full disk gives "No space left on
 * device" naming the file). Setters return nothing, so the first problem they meet (bad key, bad array type,
 * out of memory) is remembered and reported by begin_data/finish. */
#include "gguf/gguf.h"

#include "formats/formats.h"
#include "util/error.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    char *key;
    gguf_type type, elem_type;
    uint64_t count;
    uint8_t *blob;      /* the value as serialized after the type (and, for arrays, element type + count) */
    size_t blob_len;
} wkv;

typedef struct {
    char name[256];
    uint32_t type, n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint64_t size, offset;
} wtensor;

enum { W_DECLARING, W_DATA, W_FAILED };

struct gguf_writer {
    char *path, *tmp;
    FILE *fp;
    char *iobuf;
    wkv *kvs;
    size_t n_kv, cap_kv;
    wtensor *ts;
    size_t n_t, cap_t;
    size_t *hash;       /* open-addressing set of tensor indices + 1 by name (0 = empty), for duplicate checks */
    size_t hash_cap;    /* power of two, kept at least twice n_t */
    size_t next;        /* next tensor to write */
    uint64_t alignment;
    int state;
    char err[1024];     /* first error (the setters cannot return one) */
};

__attribute__((format(printf, 2, 3)))
static int wfail(gguf_writer *w, const char *fmt, ...) {
    if (!w->err[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->err, sizeof w->err, fmt, ap);
        va_end(ap);
    }
    return nf_fail("%s", w->err);
}

/* A failure that leaves the output unusable: later calls keep failing with the same message. */
__attribute__((format(printf, 2, 3)))
static int wbreak(gguf_writer *w, const char *fmt, ...) {
    if (!w->err[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->err, sizeof w->err, fmt, ap);
        va_end(ap);
    }
    w->state = W_FAILED;
    return nf_fail("%s", w->err);
}

gguf_writer *gguf_writer_create(const char *path) {
    if (!path || !*path) {
        nf_fail("gguf writer: empty output path");
        return NULL;
    }
    gguf_writer *w = calloc(1, sizeof *w);
    size_t n = strlen(path);
    if (!w || !(w->path = strdup(path)) || !(w->tmp = malloc(n + 5))) {
        if (w) free(w->path);
        free(w);
        nf_fail("%s: out of memory", path);
        return NULL;
    }
    memcpy(w->tmp, path, n);
    memcpy(w->tmp + n, ".tmp", 5);
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    return w;
}

static void set_kv(gguf_writer *w, const char *key, gguf_type type, gguf_type elem, uint64_t count, uint8_t *blob,
                   size_t len) {
    if (w->state != W_DECLARING) {
        free(blob);
        wbreak(w, "%s: key '%s' set after the data section was started", w->path, key ? key : "(null)");
        return;
    }
    if (!key || !*key) {
        free(blob);
        wfail(w, "%s: empty metadata key", w->path);
        return;
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kvs[i].key, key)) continue;
        free(w->kvs[i].blob);  /* a key set twice keeps its position and the last value */
        w->kvs[i] = (wkv){w->kvs[i].key, type, elem, count, blob, len};
        return;
    }
    if (w->n_kv == w->cap_kv) {
        size_t nc = w->cap_kv ? 2 * w->cap_kv : 32;
        wkv *k = realloc(w->kvs, nc * sizeof *k);
        if (!k) {
            free(blob);
            wfail(w, "%s: out of memory", w->path);
            return;
        }
        w->kvs = k;
        w->cap_kv = nc;
    }
    char *kc = strdup(key);
    if (!kc) {
        free(blob);
        wfail(w, "%s: out of memory", w->path);
        return;
    }
    w->kvs[w->n_kv++] = (wkv){kc, type, elem, count, blob, len};
}

static void set_scalar(gguf_writer *w, const char *key, gguf_type t, const void *v, size_t n) {
    uint8_t *b = malloc(n);
    if (!b) {
        wfail(w, "%s: out of memory", w->path);
        return;
    }
    memcpy(b, v, n);
    set_kv(w, key, t, t, 1, b, n);
}

void gguf_set_u8(gguf_writer *w, const char *key, uint8_t v) { set_scalar(w, key, GGUF_TYPE_UINT8, &v, 1); }
void gguf_set_i8(gguf_writer *w, const char *key, int8_t v) { set_scalar(w, key, GGUF_TYPE_INT8, &v, 1); }
void gguf_set_u16(gguf_writer *w, const char *key, uint16_t v) { set_scalar(w, key, GGUF_TYPE_UINT16, &v, 2); }
void gguf_set_i16(gguf_writer *w, const char *key, int16_t v) { set_scalar(w, key, GGUF_TYPE_INT16, &v, 2); }
void gguf_set_u32(gguf_writer *w, const char *key, uint32_t v) { set_scalar(w, key, GGUF_TYPE_UINT32, &v, 4); }
void gguf_set_i32(gguf_writer *w, const char *key, int32_t v) { set_scalar(w, key, GGUF_TYPE_INT32, &v, 4); }
void gguf_set_u64(gguf_writer *w, const char *key, uint64_t v) { set_scalar(w, key, GGUF_TYPE_UINT64, &v, 8); }
void gguf_set_i64(gguf_writer *w, const char *key, int64_t v) { set_scalar(w, key, GGUF_TYPE_INT64, &v, 8); }
void gguf_set_f32(gguf_writer *w, const char *key, float v) { set_scalar(w, key, GGUF_TYPE_FLOAT32, &v, 4); }
void gguf_set_f64(gguf_writer *w, const char *key, double v) { set_scalar(w, key, GGUF_TYPE_FLOAT64, &v, 8); }
void gguf_set_bool(gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    set_scalar(w, key, GGUF_TYPE_BOOL, &b, 1);
}

/* (u64 length, bytes) records for n strings. */
static uint8_t *str_records(const char *const *strs, uint64_t n, size_t *len) {
    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) total += 8 + strlen(strs[i] ? strs[i] : "");
    uint8_t *b = malloc(total ? total : 1), *p = b;
    if (!b) return NULL;
    for (uint64_t i = 0; i < n; i++) {
        const char *s = strs[i] ? strs[i] : "";
        uint64_t l = strlen(s);
        memcpy(p, &l, 8);
        memcpy(p + 8, s, l);
        p += 8 + l;
    }
    *len = total;
    return b;
}

void gguf_set_str(gguf_writer *w, const char *key, const char *v) {
    size_t len;
    const char *one[1] = {v};
    uint8_t *b = str_records(one, 1, &len);
    if (!b) {
        wfail(w, "%s: out of memory", w->path);
        return;
    }
    set_kv(w, key, GGUF_TYPE_STRING, GGUF_TYPE_STRING, 1, b, len);
}

void gguf_set_arr(gguf_writer *w, const char *key, gguf_type elem_type, const void *data, uint64_t n) {
    size_t es = gguf_type_size(elem_type);
    if (es == 0) {
        wfail(w, "%s: key '%s': array element type %s is not a numeric type (use gguf_set_arr_str for strings)",
              w->path, key ? key : "(null)", gguf_type_name(elem_type));
        return;
    }
    if (n > SIZE_MAX / es) {
        wfail(w, "%s: key '%s': array of %" PRIu64 " elements is too large", w->path, key ? key : "(null)", n);
        return;
    }
    uint8_t *b = malloc(n ? n * es : 1);
    if (!b) {
        wfail(w, "%s: out of memory", w->path);
        return;
    }
    if (n) memcpy(b, data, n * es);
    if (elem_type == GGUF_TYPE_BOOL)
        for (uint64_t i = 0; i < n; i++) b[i] = b[i] ? 1 : 0;
    set_kv(w, key, GGUF_TYPE_ARRAY, elem_type, n, b, n * es);
}

void gguf_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
    size_t len;
    uint8_t *b = str_records(strs, n, &len);
    if (!b) {
        wfail(w, "%s: out of memory", w->path);
        return;
    }
    set_kv(w, key, GGUF_TYPE_ARRAY, GGUF_TYPE_STRING, n, b, len);
}

void gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment) {
    /* the value is checked in begin_data, where general.alignment is the single source of truth */
    gguf_set_u32(w, "general.alignment", alignment);
}

static size_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;  /* FNV-1a */
    while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return (size_t)h;
}

/* Slot of `name` in the hash set: the slot holding it, or the empty slot where it would go. */
static size_t hash_slot(const gguf_writer *w, const char *name) {
    size_t m = w->hash_cap - 1, i = name_hash(name) & m;
    while (w->hash[i] && strcmp(w->ts[w->hash[i] - 1].name, name)) i = (i + 1) & m;
    return i;
}

/* Make room for one more name (rehash into twice the size when half full). */
static int hash_reserve(gguf_writer *w) {
    if (2 * (w->n_t + 1) <= w->hash_cap) return 0;
    size_t nc = w->hash_cap ? 2 * w->hash_cap : 256, *old = w->hash, oc = w->hash_cap;
    size_t *h = calloc(nc, sizeof *h);
    if (!h) return -1;
    w->hash = h;
    w->hash_cap = nc;
    for (size_t i = 0; i < oc; i++)
        if (old[i]) w->hash[hash_slot(w, w->ts[old[i] - 1].name)] = old[i];
    free(old);
    return 0;
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const int64_t *ne) {
    if (w->state != W_DECLARING) return wbreak(w, "%s: tensor '%s' declared after the data section was started", w->path, name);
    size_t nl = name ? strlen(name) : 0;
    if (nl == 0 || nl >= sizeof w->ts[0].name)
        return nf_fail("%s: tensor name '%s' must be 1..%zu bytes", w->path, name ? name : "(null)",
                       sizeof w->ts[0].name - 1);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return nf_fail("%s: tensor '%s': n_dims %" PRIu32 " out of range 1..%d", w->path, name, n_dims, GGUF_MAX_DIMS);
    const nf_type_info *ti = nf_type_get(type);
    if (!ti->name) return nf_fail("%s: tensor '%s': unknown tensor type id %" PRIu32, w->path, name, type);
    uint64_t nelem = 1, rows = 1, size;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 0) return nf_fail("%s: tensor '%s': negative dimension %" PRId64, w->path, name, ne[d]);
        if (__builtin_mul_overflow(nelem, (uint64_t)ne[d], &nelem) || nelem > (uint64_t)INT64_MAX)
            return nf_fail("%s: tensor '%s': element count overflows", w->path, name);
        if (d > 0) rows *= (uint64_t)ne[d];
    }
    if (ne[0] % ti->block_size)
        return nf_fail("%s: tensor '%s': ne[0] = %" PRId64 " is not a multiple of the %s block size %" PRId64, w->path,
                       name, ne[0], ti->name, ti->block_size);
    if (__builtin_mul_overflow((uint64_t)ne[0] / (uint64_t)ti->block_size, ti->block_bytes, &size) ||
        __builtin_mul_overflow(size, rows, &size))
        return nf_fail("%s: tensor '%s': byte size overflows", w->path, name);
    if (hash_reserve(w)) return wfail(w, "%s: out of memory", w->path);
    size_t slot = hash_slot(w, name);
    if (w->hash[slot]) return nf_fail("%s: duplicate tensor name '%s'", w->path, name);
    if (w->n_t == w->cap_t) {
        size_t nc = w->cap_t ? 2 * w->cap_t : 64;
        wtensor *t = realloc(w->ts, nc * sizeof *t);
        if (!t) return wfail(w, "%s: out of memory", w->path);
        w->ts = t;
        w->cap_t = nc;
    }
    wtensor *t = &w->ts[w->n_t];
    memset(t, 0, sizeof *t);
    memcpy(t->name, name, nl + 1);
    t->type = type;
    t->n_dims = n_dims;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = (uint32_t)d < n_dims ? ne[d] : 1;
    t->size = size;
    w->hash[slot] = ++w->n_t;
    return (int)w->n_t - 1;
}

/* ---- output ---- */

static int wr(gguf_writer *w, const void *p, size_t n) {
    if (w->state == W_FAILED) return nf_fail("%s", w->err);
    if (n && fwrite(p, 1, n, w->fp) != n) return wbreak(w, "%s: write failed: %s", w->tmp, strerror(errno));
    return 0;
}
static int wr_u32(gguf_writer *w, uint32_t v) { return wr(w, &v, 4); }
static int wr_u64(gguf_writer *w, uint64_t v) { return wr(w, &v, 8); }

static int wr_pad(gguf_writer *w, uint64_t n) {
    static const uint8_t zeros[4096];
    while (n) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        if (wr(w, zeros, k)) return -1;
        n -= k;
    }
    return 0;
}

static uint64_t pad_to(uint64_t pos, uint64_t a) { return (a - pos % a) % a; }

int gguf_writer_begin_data(gguf_writer *w) {
    if (w->state == W_FAILED || w->err[0]) return wbreak(w, "%s", w->err);
    if (w->state != W_DECLARING) return nf_fail("%s: gguf_writer_begin_data called twice", w->path);

    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kvs[i].key, "general.alignment")) continue;
        uint32_t a;
        if (w->kvs[i].type != GGUF_TYPE_UINT32)
            return wbreak(w, "%s: general.alignment must be uint32, not %s", w->path, gguf_type_name(w->kvs[i].type));
        memcpy(&a, w->kvs[i].blob, 4);
        if (a == 0 || (a & (a - 1))) return wbreak(w, "%s: alignment %" PRIu32 " is not a nonzero power of two", w->path, a);
        w->alignment = a;
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        w->ts[i].offset = off;
        uint64_t padded = w->ts[i].size + pad_to(w->ts[i].size, w->alignment);
        if (padded < w->ts[i].size || __builtin_add_overflow(off, padded, &off))
            return wbreak(w, "%s: total tensor data size overflows", w->path);
    }

    w->fp = fopen(w->tmp, "wbe");
    if (!w->fp) return wbreak(w, "%s: cannot create: %s", w->tmp, strerror(errno));
    w->state = W_DATA;
    if ((w->iobuf = malloc(1 << 20))) setvbuf(w->fp, w->iobuf, _IOFBF, 1 << 20);

    uint64_t pos = 0;
    if (wr(w, "GGUF", 4) || wr_u32(w, 3) || wr_u64(w, w->n_t) || wr_u64(w, w->n_kv)) return -1;
    pos += 24;
    for (size_t i = 0; i < w->n_kv; i++) {
        const wkv *k = &w->kvs[i];
        uint64_t kl = strlen(k->key);
        if (wr_u64(w, kl) || wr(w, k->key, kl) || wr_u32(w, k->type)) return -1;
        pos += 12 + kl;
        if (k->type == GGUF_TYPE_ARRAY) {
            if (wr_u32(w, k->elem_type) || wr_u64(w, k->count)) return -1;
            pos += 12;
        }
        if (wr(w, k->blob, k->blob_len)) return -1;
        pos += k->blob_len;
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->ts[i];
        uint64_t nl = strlen(t->name);
        if (wr_u64(w, nl) || wr(w, t->name, nl) || wr_u32(w, t->n_dims)) return -1;
        for (uint32_t d = 0; d < t->n_dims; d++)
            if (wr_u64(w, (uint64_t)t->ne[d])) return -1;
        if (wr_u32(w, t->type) || wr_u64(w, t->offset)) return -1;
        pos += 8 + nl + 4 + 8 * (uint64_t)t->n_dims + 4 + 8;
    }
    return wr_pad(w, pad_to(pos, w->alignment));
}

int gguf_writer_write_tensor(gguf_writer *w, const void *data, uint64_t size) {
    if (w->state == W_FAILED) return nf_fail("%s", w->err);
    if (w->state != W_DATA) return nf_fail("%s: gguf_writer_write_tensor before gguf_writer_begin_data", w->path);
    if (w->next >= w->n_t) return nf_fail("%s: more tensor data written than the %zu tensors declared", w->path, w->n_t);
    const wtensor *t = &w->ts[w->next];
    if (size != t->size)
        return nf_fail("%s: tensor '%s': %" PRIu64 " bytes given, its shape and type need %" PRIu64, w->path, t->name,
                       size, t->size);
    if (wr(w, data, size) || wr_pad(w, pad_to(size, w->alignment))) return -1;
    w->next++;
    return 0;
}

static void free_writer(gguf_writer *w) {
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        free(w->kvs[i].blob);
    }
    free(w->kvs);
    free(w->ts);
    free(w->hash);
    free(w->iobuf);
    free(w->path);
    free(w->tmp);
    free(w);
}

void gguf_writer_abort(gguf_writer *w) {
    if (!w) return;
    if (w->fp) {
        fclose(w->fp);
        unlink(w->tmp);
    }
    free_writer(w);
}

int gguf_writer_finish(gguf_writer *w) {
    if (!w) return nf_fail("gguf_writer_finish: no writer");
    if (w->state == W_DECLARING) gguf_writer_begin_data(w);
    if (w->state == W_DATA && w->next < w->n_t)
        wbreak(w, "%s: only %zu of %zu declared tensors were written (next: '%s')", w->path, w->next, w->n_t,
               w->ts[w->next].name);
    if (w->state == W_DATA) {
        FILE *fp = w->fp;
        w->fp = NULL;
        int bad = fflush(fp) != 0 || fsync(fileno(fp)) != 0;
        int e = errno;
        if (fclose(fp) != 0 && !bad) {
            bad = 1;
            e = errno;
        }
        if (bad) wbreak(w, "%s: write failed: %s", w->tmp, strerror(e));
        else if (rename(w->tmp, w->path) != 0) wbreak(w, "%s: cannot rename to %s: %s", w->tmp, w->path, strerror(errno));
        else {
            free_writer(w);
            nf_clear_error();
            return 0;
        }
        unlink(w->tmp);
    }
    char msg[sizeof w->err];
    memcpy(msg, w->err, sizeof msg);
    gguf_writer_abort(w);
    return nf_fail("%s", msg);
}
