/* gguf_read.c — opening and validating a GGUF file (v3, and v2 which has the same layout).
 *
 * The file is untrusted input. Parsing goes through a cursor that checks every read against the file size
 * before touching a byte; every count is bounded by the bytes left (so a count of 2^63 fails at once instead
 * of wrapping or allocating), and tables grow only as entries are actually parsed. Sizes and offsets use
 * overflow-checked arithmetic. The first problem found ends the open with one message of the form
 * "<path>: offset <byte>: <what is wrong>" in nf_error(). After a successful open every kv, string record and
 * tensor range is known to lie inside the file, so the accessors need no further checks.
 *
 * Host byte order is assumed little-endian (x86-64, aarch64), like the files. */
#include "gguf/gguf_internal.h"

#include "formats/formats.h"
#include "util/error.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC "GGUF"
#define MIN_KV_BYTES 13      /* u64 key length + 1-byte key + u32 type + 1-byte value */
#define MIN_TENSOR_BYTES 33  /* u64 name length + 1-byte name + u32 n_dims + one u64 dim + u32 type + u64 offset */

typedef struct {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
    const char *path;
} cursor;

/* "<path>: offset <off>: <message>" */
__attribute__((format(printf, 3, 4)))
static int fail_at(const cursor *c, uint64_t off, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return nf_fail("%s: offset %" PRIu64 ": %s", c->path, off, msg);
}

/* A printable, bounded copy of a name from the file for messages (garbage bytes become '?'). */
static const char *printable(const void *p, uint64_t len, char *buf, size_t bufsize) {
    const uint8_t *s = p;
    size_t n = len < bufsize - 4 ? (size_t)len : bufsize - 4, i;
    for (i = 0; i < n; i++) buf[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? (char)s[i] : '?';
    if (n < len) { memcpy(buf + i, "...", 3); i += 3; }
    buf[i] = 0;
    return buf;
}

static uint64_t left(const cursor *c) { return c->size - c->pos; }

static int need(cursor *c, uint64_t n, const char *what) {
    if (n > left(c))
        return fail_at(c, c->pos, "unexpected end of file reading %s (needs %" PRIu64 " bytes, file size %" PRIu64 ")",
                       what, n, c->size);
    return 0;
}

static int rd_u32(cursor *c, uint32_t *v, const char *what) {
    if (need(c, 4, what)) return -1;
    memcpy(v, c->base + c->pos, 4);
    c->pos += 4;
    return 0;
}

static int rd_u64(cursor *c, uint64_t *v, const char *what) {
    if (need(c, 8, what)) return -1;
    memcpy(v, c->base + c->pos, 8);
    c->pos += 8;
    return 0;
}

/* A (u64 length, bytes) string; `what` names it in messages. */
static int rd_str(cursor *c, gguf_str *s, const char *what) {
    uint64_t off = c->pos, len;
    if (rd_u64(c, &len, what)) return -1;
    if (len > left(c))
        return fail_at(c, off, "%s length %" PRIu64 " runs past end of file (size %" PRIu64 ")", what, len, c->size);
    s->ptr = (const char *)c->base + c->pos;
    s->len = len;
    c->pos += len;
    return 0;
}

static bool type_known(uint32_t t) { return t < GGUF_TYPE_COUNT; }

/* Parse one key/value at the cursor into e. */
static int parse_kv(cursor *c, gguf_kv_entry *e) {
    char kb[80];
    gguf_kv *kv = &e->kv;
    kv->offset = c->pos;
    if (rd_str(c, &kv->key, "key")) return -1;
    if (kv->key.len == 0) return fail_at(c, kv->offset, "empty key");
    if (memchr(kv->key.ptr, 0, kv->key.len))
        return fail_at(c, kv->offset, "key '%s' contains a NUL byte", printable(kv->key.ptr, kv->key.len, kb, sizeof kb));
    const char *kname = printable(kv->key.ptr, kv->key.len, kb, sizeof kb);

    uint64_t toff = c->pos;
    uint32_t type;
    if (rd_u32(c, &type, "value type")) return -1;
    if (!type_known(type)) return fail_at(c, toff, "key '%s': unknown value type %" PRIu32, kname, type);
    kv->type = (gguf_type)type;
    kv->elem_type = (gguf_type)type;
    kv->count = 1;

    if (type == GGUF_TYPE_ARRAY) {
        uint32_t et;
        toff = c->pos;
        if (rd_u32(c, &et, "array element type")) return -1;
        if (!type_known(et)) return fail_at(c, toff, "key '%s': unknown array element type %" PRIu32, kname, et);
        if (et == GGUF_TYPE_ARRAY) return fail_at(c, toff, "key '%s': arrays of arrays are not supported", kname);
        kv->elem_type = (gguf_type)et;
        toff = c->pos;
        if (rd_u64(c, &kv->count, "array length")) return -1;
    }

    uint64_t voff = c->pos;
    kv->data = c->base + c->pos;
    if (kv->elem_type == GGUF_TYPE_STRING) {
        if (kv->count > left(c) / 8)
            return fail_at(c, toff, "key '%s': array of %" PRIu64 " strings runs past end of file (size %" PRIu64 ")",
                           kname, kv->count, c->size);
        if (type == GGUF_TYPE_ARRAY) {
            /* count <= bytes left / 8, so this allocation is bounded by the file size */
            e->strs = malloc((size_t)(kv->count ? kv->count : 1) * sizeof *e->strs);
            if (!e->strs) return fail_at(c, toff, "key '%s': out of memory for %" PRIu64 " strings", kname, kv->count);
        }
        for (uint64_t i = 0; i < kv->count; i++) {
            gguf_str s;
            if (e->strs) e->strs[i] = c->base + c->pos;
            if (rd_str(c, &s, type == GGUF_TYPE_ARRAY ? "string array element" : "string value"))
                return nf_fail_prefix("key '%s'", kname);
        }
        return 0;
    }

    size_t es = gguf_type_size(kv->elem_type);
    if (kv->count > left(c) / es)
        return fail_at(c, voff, "key '%s': %" PRIu64 " values of type %s run past end of file (size %" PRIu64 ")", kname,
                       kv->count, gguf_type_name(kv->elem_type), c->size);
    if (kv->elem_type == GGUF_TYPE_BOOL) {
        for (uint64_t i = 0; i < kv->count; i++)
            if (c->base[c->pos + i] > 1)
                return fail_at(c, c->pos + i, "key '%s': bool value %u is neither 0 nor 1", kname, c->base[c->pos + i]);
    }
    c->pos += kv->count * es;
    return 0;
}

static bool mul_ovf(uint64_t a, uint64_t b, uint64_t *r) { return __builtin_mul_overflow(a, b, r); }

/* Parse one tensor info (name, dims, type, offset) and compute its size. */
static int parse_tensor(cursor *c, gguf_tensor *t, uint64_t alignment) {
    char nb[80];
    uint64_t off = c->pos;
    gguf_str name;
    if (rd_str(c, &name, "tensor name")) return -1;
    if (name.len == 0) return fail_at(c, off, "empty tensor name");
    if (name.len >= sizeof t->name)
        return fail_at(c, off, "tensor name length %" PRIu64 " exceeds %zu bytes", name.len, sizeof t->name - 1);
    if (memchr(name.ptr, 0, name.len))
        return fail_at(c, off, "tensor name '%s' contains a NUL byte", printable(name.ptr, name.len, nb, sizeof nb));
    memcpy(t->name, name.ptr, name.len);
    t->name[name.len] = 0;
    const char *tn = printable(name.ptr, name.len, nb, sizeof nb);

    uint64_t doff = c->pos;
    if (rd_u32(c, &t->n_dims, "tensor n_dims")) return -1;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return fail_at(c, doff, "tensor '%s': n_dims %" PRIu32 " out of range 1..%d", tn, t->n_dims, GGUF_MAX_DIMS);
    uint64_t nelem = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t v;
        doff = c->pos;
        if (rd_u64(c, &v, "tensor dimension")) return -1;
        if (v > (uint64_t)INT64_MAX)
            return fail_at(c, doff, "tensor '%s': dimension %" PRIu32 " is %" PRIu64 " (does not fit in int64)", tn, d, v);
        if (mul_ovf(nelem, v, &nelem) || nelem > (uint64_t)INT64_MAX)
            return fail_at(c, doff, "tensor '%s': element count overflows int64", tn);
        t->ne[d] = (int64_t)v;
    }

    uint64_t toff = c->pos;
    if (rd_u32(c, &t->type, "tensor type")) return -1;
    const nf_type_info *ti = nf_type_get(t->type);
    if (!ti->name || ti->block_size <= 0 || ti->block_bytes == 0)
        return fail_at(c, toff, "tensor '%s': unknown tensor type id %" PRIu32, tn, t->type);
    if (t->ne[0] % ti->block_size)
        return fail_at(c, toff, "tensor '%s': ne[0] = %" PRId64 " is not a multiple of the %s block size %" PRId64, tn,
                       t->ne[0], ti->name, ti->block_size);
    uint64_t rows = nelem && t->ne[0] ? nelem / (uint64_t)t->ne[0] : 0, size;
    if (mul_ovf((uint64_t)t->ne[0] / (uint64_t)ti->block_size, ti->block_bytes, &size) || mul_ovf(size, rows, &size))
        return fail_at(c, toff, "tensor '%s': byte size overflows", tn);
    t->size = size;

    uint64_t ooff = c->pos;
    if (rd_u64(c, &t->offset, "tensor data offset")) return -1;
    if (t->offset % alignment)
        return fail_at(c, ooff, "tensor '%s': data offset %" PRIu64 " is not a multiple of the alignment %" PRIu64, tn,
                       t->offset, alignment);
    return 0;
}

/* ---- sorting helpers (qsort_r with the file as context) ---- */

static int cmp_strs(const char *a, uint64_t al, const char *b, uint64_t bl) {
    int r = memcmp(a, b, al < bl ? al : bl);
    if (r) return r;
    return al < bl ? -1 : al > bl;
}

static int cmp_kv_idx(const void *pa, const void *pb, void *ctx) {
    const gguf_file *f = ctx;
    const gguf_kv *a = &f->kvs[*(const int64_t *)pa].kv, *b = &f->kvs[*(const int64_t *)pb].kv;
    int r = cmp_strs(a->key.ptr, a->key.len, b->key.ptr, b->key.len);
    if (r) return r;
    return a->offset < b->offset ? -1 : a->offset > b->offset;
}

static int cmp_tensor_name(const void *pa, const void *pb, void *ctx) {
    const gguf_file *f = ctx;
    int64_t ia = *(const int64_t *)pa, ib = *(const int64_t *)pb;
    int r = strcmp(f->tensors[ia].name, f->tensors[ib].name);
    if (r) return r;
    return ia < ib ? -1 : ia > ib;
}

static int cmp_tensor_offset(const void *pa, const void *pb, void *ctx) {
    const gguf_file *f = ctx;
    int64_t ia = *(const int64_t *)pa, ib = *(const int64_t *)pb;
    uint64_t a = f->tensors[ia].offset, b = f->tensors[ib].offset;
    if (a != b) return a < b ? -1 : 1;
    return ia < ib ? -1 : ia > ib;
}

/* Grow a table to hold at least n entries (doubling, so memory follows what was actually parsed). */
static int grow(void **p, int64_t *cap, int64_t n, size_t elem) {
    if (n <= *cap) return 0;
    int64_t nc = *cap ? *cap * 2 : 64;
    if (nc < n) nc = n;
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q) return -1;
    memset((char *)q + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
    *p = q;
    *cap = nc;
    return 0;
}

/* ---- the parse ---- */

static int parse(gguf_file *f) {
    cursor cur = {f->base, f->size, 0, f->path}, *c = &cur;
    char kb[80];

    if (f->size < 4 || memcmp(f->base, GGUF_MAGIC, 4) != 0) {
        if (f->size < 4) return fail_at(c, 0, "not a GGUF file (only %" PRIu64 " bytes)", f->size);
        return fail_at(c, 0, "not a GGUF file (magic is '%s', expected 'GGUF')", printable(f->base, 4, kb, sizeof kb));
    }
    c->pos = 4;
    if (rd_u32(c, &f->version, "version")) return -1;
    if (f->version == 1) return fail_at(c, 4, "GGUF version 1 is not supported (it used 32-bit counts; re-convert the file)");
    if (f->version == 0x03000000u || f->version == 0x02000000u)
        return fail_at(c, 4, "big-endian GGUF files are not supported");
    if (f->version != 2 && f->version != 3)
        return fail_at(c, 4, "unsupported GGUF version %" PRIu32 " (expected 3)", f->version);

    uint64_t n_tensors, n_kv;
    if (rd_u64(c, &n_tensors, "tensor count")) return -1;
    if (rd_u64(c, &n_kv, "metadata kv count")) return -1;
    /* Every entry takes a minimum number of bytes: counts the file cannot hold are rejected before any
     * allocation or loop depends on them. */
    if (n_kv > left(c) / MIN_KV_BYTES)
        return fail_at(c, 16, "metadata kv count %" PRIu64 " is impossible in a file of size %" PRIu64
                       " (each entry needs at least %d bytes)", n_kv, f->size, MIN_KV_BYTES);
    if (n_tensors > (left(c) - n_kv * MIN_KV_BYTES) / MIN_TENSOR_BYTES)
        return fail_at(c, 8, "tensor count %" PRIu64 " is impossible in a file of size %" PRIu64
                       " (each tensor info needs at least %d bytes)", n_tensors, f->size, MIN_TENSOR_BYTES);

    /* metadata */
    int64_t cap = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        if (grow((void **)&f->kvs, &cap, (int64_t)i + 1, sizeof *f->kvs)) return fail_at(c, c->pos, "out of memory");
        f->n_kv = (int64_t)i + 1;
        if (parse_kv(c, &f->kvs[i])) return -1;
    }
    f->kv_sorted = malloc((size_t)(n_kv ? n_kv : 1) * sizeof *f->kv_sorted);
    if (!f->kv_sorted) return fail_at(c, c->pos, "out of memory");
    for (uint64_t i = 0; i < n_kv; i++) f->kv_sorted[i] = (int64_t)i;
    qsort_r(f->kv_sorted, (size_t)n_kv, sizeof *f->kv_sorted, cmp_kv_idx, f);
    for (uint64_t i = 1; i < n_kv; i++) {
        const gguf_kv *a = &f->kvs[f->kv_sorted[i - 1]].kv, *b = &f->kvs[f->kv_sorted[i]].kv;
        if (!cmp_strs(a->key.ptr, a->key.len, b->key.ptr, b->key.len))
            return fail_at(c, b->offset, "duplicate key '%s' (first at offset %" PRIu64 ")",
                           printable(b->key.ptr, b->key.len, kb, sizeof kb), a->offset);
    }

    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *al = gguf_find(f, "general.alignment");
    if (al) {
        uint32_t a;
        if (al->type != GGUF_TYPE_UINT32)
            return fail_at(c, al->offset, "general.alignment has type %s, expected uint32", gguf_type_name(al->type));
        memcpy(&a, al->data, 4);
        if (a == 0 || (a & (a - 1)))
            return fail_at(c, al->offset, "general.alignment %" PRIu32 " is not a nonzero power of two", a);
        f->alignment = a;
    }

    /* tensor infos */
    cap = 0;
    int64_t cap2 = 0;
    for (uint64_t i = 0; i < n_tensors; i++) {
        if (grow((void **)&f->tensors, &cap, (int64_t)i + 1, sizeof *f->tensors) ||
            grow((void **)&f->tensor_info_off, &cap2, (int64_t)i + 1, sizeof *f->tensor_info_off))
            return fail_at(c, c->pos, "out of memory");
        f->n_tensors = (int64_t)i + 1;
        f->tensor_info_off[i] = c->pos;
        if (parse_tensor(c, &f->tensors[i], f->alignment)) return -1;
    }

    /* data section: starts at the next multiple of the alignment */
    uint64_t pad = (f->alignment - c->pos % f->alignment) % f->alignment;
    f->data_offset = c->pos + pad;   /* pos <= size < 2^63 and pad < 2^32: no overflow */
    uint64_t avail = f->size >= f->data_offset ? f->size - f->data_offset : 0;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        if (t->offset > avail || t->size > avail - t->offset)
            return fail_at(c, f->tensor_info_off[i], "tensor '%s': data at offset %" PRIu64 " + %" PRIu64 " bytes (data section"
                           " starts at %" PRIu64 ") runs past end of file (size %" PRIu64 ")",
                           printable(t->name, strlen(t->name), kb, sizeof kb), t->offset, t->size, f->data_offset, f->size);
        t->data = f->base + f->data_offset + t->offset;
    }

    /* names unique, ranges disjoint */
    f->tensor_sorted = malloc((size_t)(f->n_tensors ? f->n_tensors : 1) * sizeof *f->tensor_sorted);
    if (!f->tensor_sorted) return fail_at(c, c->pos, "out of memory");
    for (int64_t i = 0; i < f->n_tensors; i++) f->tensor_sorted[i] = i;
    qsort_r(f->tensor_sorted, (size_t)f->n_tensors, sizeof *f->tensor_sorted, cmp_tensor_offset, f);
    int64_t prev = -1;
    for (int64_t k = 0; k < f->n_tensors; k++) {
        int64_t i = f->tensor_sorted[k];
        if (f->tensors[i].size == 0) continue;
        if (prev >= 0 && f->tensors[prev].offset + f->tensors[prev].size > f->tensors[i].offset) {
            char nb2[80];
            return fail_at(c, f->tensor_info_off[i], "tensor '%s' data [%" PRIu64 ", +%" PRIu64 ") overlaps tensor '%s' data [%"
                           PRIu64 ", +%" PRIu64 ")", printable(f->tensors[i].name, strlen(f->tensors[i].name), kb, sizeof kb),
                           f->tensors[i].offset, f->tensors[i].size,
                           printable(f->tensors[prev].name, strlen(f->tensors[prev].name), nb2, sizeof nb2),
                           f->tensors[prev].offset, f->tensors[prev].size);
        }
        prev = i;
    }
    qsort_r(f->tensor_sorted, (size_t)f->n_tensors, sizeof *f->tensor_sorted, cmp_tensor_name, f);
    for (int64_t k = 1; k < f->n_tensors; k++) {
        int64_t a = f->tensor_sorted[k - 1], b = f->tensor_sorted[k];
        if (!strcmp(f->tensors[a].name, f->tensors[b].name))
            return fail_at(c, f->tensor_info_off[b], "duplicate tensor name '%s' (first at offset %" PRIu64 ")",
                           printable(f->tensors[b].name, strlen(f->tensors[b].name), kb, sizeof kb), f->tensor_info_off[a]);
    }
    return 0;
}

static gguf_file *open_common(gguf_file *f) {
    if (parse(f)) {
        gguf_close(f);
        return NULL;
    }
    return f;
}

gguf_file *gguf_open_memory(const void *data, size_t size) {
    static const uint8_t empty[1];
    gguf_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup("<memory>"))) {
        free(f);
        nf_fail("<memory>: out of memory");
        return NULL;
    }
    f->base = data ? data : empty;
    f->size = data ? size : 0;
    return open_common(f);
}

gguf_file *gguf_open(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        nf_fail("%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        nf_fail("%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        nf_fail("%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    gguf_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        close(fd);
        nf_fail("%s: out of memory", path);
        return NULL;
    }
    f->size = (uint64_t)st.st_size;
    if (f->size == 0) {
        static const uint8_t empty[1];
        f->base = empty;
    } else {
        void *m = mmap(NULL, (size_t)f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            nf_fail("%s: cannot map %" PRIu64 " bytes: %s", path, f->size, strerror(errno));
            close(fd);
            free(f->path);
            free(f);
            return NULL;
        }
        f->base = m;
        f->mapped = true;
    }
    close(fd);
    return open_common(f);
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    if (f->mapped) munmap((void *)f->base, (size_t)f->size);
    for (int64_t i = 0; i < f->n_kv; i++) free(f->kvs[i].strs);
    free(f->kvs);
    free(f->kv_sorted);
    free(f->tensors);
    free(f->tensor_info_off);
    free(f->tensor_sorted);
    free(f->path);
    free(f);
}

uint32_t gguf_version(const gguf_file *f) { return f->version; }
uint64_t gguf_alignment(const gguf_file *f) { return f->alignment; }
const char *gguf_path(const gguf_file *f) { return f->path; }

int64_t gguf_kv_count(const gguf_file *f) { return f->n_kv; }
const gguf_kv *gguf_kv_at(const gguf_file *f, int64_t i) {
    return i >= 0 && i < f->n_kv ? &f->kvs[i].kv : NULL;
}

const gguf_kv *gguf_find(const gguf_file *f, const char *key) {
    uint64_t kl = strlen(key);
    int64_t lo = 0, hi = f->n_kv;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        const gguf_kv *kv = &f->kvs[f->kv_sorted[mid]].kv;
        int r = cmp_strs(kv->key.ptr, kv->key.len, key, kl);
        if (r == 0) return kv;
        if (r < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

int64_t gguf_tensor_count(const gguf_file *f) { return f->n_tensors; }
const gguf_tensor *gguf_tensor_at(const gguf_file *f, int64_t i) {
    return i >= 0 && i < f->n_tensors ? &f->tensors[i] : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    int64_t lo = 0, hi = f->n_tensors;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        const gguf_tensor *t = &f->tensors[f->tensor_sorted[mid]];
        int r = strcmp(t->name, name);
        if (r == 0) return t;
        if (r < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}
