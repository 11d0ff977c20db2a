/* safetensors.c — validating reader for .safetensors files and sharded checkpoints (see safetensors.h).
 *
 * Every number taken from a header is checked before it is used: the header length against the file size,
 * each shape and byte range against overflow and the data section, each byte count against the dtype, and
 * ranges against each other. The header is parsed with Jansson (duplicate keys rejected). Files are mapped
 * read-only; st_release drops a tensor's pages after use so converting a checkpoint far larger than RAM keeps
 * only a few tensors resident. */
#include "convert/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/error.h"

#define ST_MAX_HEADER (100u << 20) /* the format's own limit on the JSON header (100 MB) */

struct st_file {
    char *path;
    const uint8_t *base;   /* whole file (or memory image) */
    size_t size;
    bool mapped;
    const uint8_t *data;   /* data section */
    uint64_t data_size;
    st_tensor *tensors;    /* sorted by name */
    int64_t count;
    char **meta_keys, **meta_vals;
    int64_t n_meta;
};

struct st_checkpoint {
    st_file **files;
    int n_files;
    const st_tensor **index; /* all tensors of all files, sorted by name */
    int64_t count;
    int64_t fp8_rows, fp8_cols;
};

static const struct {
    const char *name;
    st_dtype dtype;
    size_t size;
} dtype_table[] = {
    {"BOOL", ST_BOOL, 1}, {"U8", ST_U8, 1},     {"I8", ST_I8, 1},     {"I16", ST_I16, 2},
    {"U16", ST_U16, 2},   {"I32", ST_I32, 4},   {"U32", ST_U32, 4},   {"I64", ST_I64, 8},
    {"U64", ST_U64, 8},   {"F16", ST_F16, 2},   {"BF16", ST_BF16, 2}, {"F32", ST_F32, 4},
    {"F64", ST_F64, 8},   {"F8_E4M3", ST_F8_E4M3, 1}, {"F8_E5M2", ST_F8_E5M2, 1},
};

const char *st_dtype_name(st_dtype d) {
    for (size_t i = 0; i < sizeof dtype_table / sizeof dtype_table[0]; i++)
        if (dtype_table[i].dtype == d) return dtype_table[i].name;
    return "unknown";
}

size_t st_dtype_size(st_dtype d) {
    for (size_t i = 0; i < sizeof dtype_table / sizeof dtype_table[0]; i++)
        if (dtype_table[i].dtype == d) return dtype_table[i].size;
    return 0;
}

/* ---- FP8 E4M3 (fn): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities; S.1111.111 is NaN ---- */
static float f8_table[256];
static pthread_once_t f8_once = PTHREAD_ONCE_INIT;

static void f8_init(void) {
    for (int v = 0; v < 256; v++) {
        int s = v >> 7, e = (v >> 3) & 15, m = v & 7;
        float x;
        if (e == 15 && m == 7) x = NAN;
        else if (e == 0) x = ldexpf((float)m / 8.0f, -6);
        else x = ldexpf(1.0f + (float)m / 8.0f, e - 7);
        f8_table[v] = s ? -x : x;
    }
}

float st_f8_e4m3_to_f32(uint8_t v) {
    pthread_once(&f8_once, f8_init);
    return f8_table[v];
}

/* ---- one file ---- */

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static int cmp_by_begin(const void *a, const void *b) {
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static void file_free(st_file *f) {
    if (!f) return;
    for (int64_t i = 0; i < f->count; i++) free(f->tensors[i].name);
    free(f->tensors);
    for (int64_t i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_vals[i]);
    }
    free(f->meta_keys);
    free(f->meta_vals);
    if (f->mapped && f->base) munmap((void *)f->base, f->size);
    free(f->path);
    free(f);
}

void st_file_close(st_file *f) { file_free(f); }

/* Read a JSON integer that must be >= 0. */
static bool json_nonneg(const json_t *v, int64_t *out) {
    if (!json_is_integer(v)) return false;
    json_int_t x = json_integer_value(v);
    if (x < 0) return false;
    *out = (int64_t)x;
    return true;
}

static int parse_entry(st_file *f, const char *key, json_t *v, st_tensor *t) {
    const char *p = f->path;
    if (!key[0]) return nf_fail("%s: tensor with an empty name in the header", p);
    if (strlen(key) > 4096) return nf_fail("%s: tensor name longer than 4096 bytes in the header", p);
    if (!json_is_object(v)) return nf_fail("%s: tensor '%s': header entry is not an object", p, key);
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd)) return nf_fail("%s: tensor '%s': missing or non-string \"dtype\"", p, key);
    if (!json_is_array(js)) return nf_fail("%s: tensor '%s': missing or non-array \"shape\"", p, key);
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return nf_fail("%s: tensor '%s': \"data_offsets\" must be an array [begin, end]", p, key);

    const char *ds = json_string_value(jd);
    t->dtype = ST_UNKNOWN;
    size_t esize = 0;
    for (size_t i = 0; i < sizeof dtype_table / sizeof dtype_table[0]; i++)
        if (!strcmp(ds, dtype_table[i].name)) {
            t->dtype = dtype_table[i].dtype;
            esize = dtype_table[i].size;
        }
    snprintf(t->dtype_name, sizeof t->dtype_name, "%s", ds);

    size_t nd = json_array_size(js);
    if (nd > ST_MAX_DIMS) return nf_fail("%s: tensor '%s': %zu dimensions (at most %d supported)", p, key, nd, ST_MAX_DIMS);
    t->n_dims = (uint32_t)nd;
    int64_t n = 1;
    for (size_t i = 0; i < nd; i++) {
        int64_t d;
        if (!json_nonneg(json_array_get(js, i), &d))
            return nf_fail("%s: tensor '%s': shape[%zu] is not a non-negative integer", p, key, i);
        t->shape[i] = d;
        if (__builtin_mul_overflow(n, d, &n) || n > ((int64_t)1 << 56))
            return nf_fail("%s: tensor '%s': shape overflows", p, key);
    }
    for (size_t i = nd; i < ST_MAX_DIMS; i++) t->shape[i] = 1;
    t->n_elements = n;

    int64_t b, e;
    if (!json_nonneg(json_array_get(jo, 0), &b) || !json_nonneg(json_array_get(jo, 1), &e))
        return nf_fail("%s: tensor '%s': data_offsets are not non-negative integers", p, key);
    if (b > e) return nf_fail("%s: tensor '%s': data_offsets begin %lld > end %lld", p, key, (long long)b, (long long)e);
    if ((uint64_t)e > f->data_size)
        return nf_fail("%s: tensor '%s': data_offsets end %lld is past the data section (%llu bytes; file truncated?)",
                       p, key, (long long)e, (unsigned long long)f->data_size);
    if (esize) {
        uint64_t bytes = (uint64_t)n * esize;
        if ((uint64_t)(e - b) != bytes)
            return nf_fail("%s: tensor '%s': %lld bytes of data but dtype %s x %lld elements needs %llu", p, key,
                           (long long)(e - b), ds, (long long)n, (unsigned long long)bytes);
    }
    t->begin = (uint64_t)b;
    t->end = (uint64_t)e;
    t->data = f->data + b;
    return 0;
}

static st_file *file_parse(st_file *f) {
    const char *p = f->path;
    if (f->size < 8) {
        nf_fail("%s: %zu bytes is too small for a safetensors file (8-byte header length + JSON)", p, f->size);
        goto fail;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | f->base[i];
    if (hlen < 2 || hlen > f->size - 8 || hlen > ST_MAX_HEADER) {
        nf_fail("%s: header length %llu does not fit the file (%zu bytes); not a safetensors file or truncated", p,
                (unsigned long long)hlen, f->size);
        goto fail;
    }
    f->data = f->base + 8 + hlen;
    f->data_size = f->size - 8 - hlen;

    json_error_t jerr;
    json_t *root = json_loadb((const char *)f->base + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        nf_fail("%s: bad JSON header at byte %d: %s", p, jerr.position + 8, jerr.text);
        goto fail;
    }
    if (!json_is_object(root)) {
        nf_fail("%s: the JSON header is not an object", p);
        json_decref(root);
        goto fail;
    }
    size_t n = json_object_size(root);
    f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
    if (!f->tensors) {
        nf_fail("%s: out of memory", p);
        json_decref(root);
        goto fail;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(v)) {
                nf_fail("%s: \"__metadata__\" is not an object", p);
                json_decref(root);
                goto fail;
            }
            size_t m = json_object_size(v);
            f->meta_keys = calloc(m ? m : 1, sizeof(char *));
            f->meta_vals = calloc(m ? m : 1, sizeof(char *));
            const char *mk;
            json_t *mv;
            json_object_foreach(v, mk, mv) {
                if (!json_is_string(mv)) continue;
                f->meta_keys[f->n_meta] = strdup(mk);
                f->meta_vals[f->n_meta] = strdup(json_string_value(mv));
                f->n_meta++;
            }
            continue;
        }
        st_tensor *t = &f->tensors[f->count];
        memset(t, 0, sizeof *t);
        if (parse_entry(f, key, v, t) < 0) {
            json_decref(root);
            goto fail;
        }
        t->name = strdup(key);
        f->count++;
    }
    json_decref(root);

    /* Ranges must not overlap (zero-size tensors excepted). */
    if (f->count > 1) {
        const st_tensor **by = malloc((size_t)f->count * sizeof *by);
        for (int64_t i = 0; i < f->count; i++) by[i] = &f->tensors[i];
        qsort(by, (size_t)f->count, sizeof *by, cmp_by_begin);
        const st_tensor *prev = NULL;
        for (int64_t i = 0; i < f->count; i++) {
            if (by[i]->begin == by[i]->end) continue;
            if (prev && by[i]->begin < prev->end) {
                nf_fail("%s: tensors '%s' and '%s' have overlapping data ranges", p, prev->name, by[i]->name);
                free(by);
                goto fail;
            }
            prev = by[i];
        }
        free(by);
    }
    qsort(f->tensors, (size_t)f->count, sizeof *f->tensors, cmp_tensor_name);
    return f;
fail:
    file_free(f);
    return NULL;
}

st_file *st_file_open_memory(const void *data, size_t size) {
    st_file *f = calloc(1, sizeof *f);
    if (!f) {
        nf_fail("out of memory");
        return NULL;
    }
    f->path = strdup("<memory>");
    f->base = data;
    f->size = size;
    return file_parse(f);
}

st_file *st_file_open(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        nf_fail("%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        nf_fail("%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    st_file *f = calloc(1, sizeof *f);
    f->path = strdup(path);
    f->size = (size_t)sb.st_size;
    if (f->size >= 8) {
        void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            nf_fail("%s: mmap failed: %s", path, strerror(errno));
            close(fd);
            file_free(f);
            return NULL;
        }
        f->base = m;
        f->mapped = true;
    } else {
        f->base = (const uint8_t *)"";
    }
    close(fd);
    return file_parse(f);
}

int64_t st_file_count(const st_file *f) { return f->count; }
const st_tensor *st_file_at(const st_file *f, int64_t i) { return i >= 0 && i < f->count ? &f->tensors[i] : NULL; }

const st_tensor *st_file_find(const st_file *f, const char *name) {
    st_tensor key = {.name = (char *)name};
    return bsearch(&key, f->tensors, (size_t)f->count, sizeof *f->tensors, cmp_tensor_name);
}

const char *st_file_metadata(const st_file *f, const char *key) {
    for (int64_t i = 0; i < f->n_meta; i++)
        if (!strcmp(f->meta_keys[i], key)) return f->meta_vals[i];
    return NULL;
}

/* ---- checkpoints ---- */

static int cmp_tensor_ptr_name(const void *a, const void *b) {
    return strcmp((*(const st_tensor *const *)a)->name, (*(const st_tensor *const *)b)->name);
}

void st_close(st_checkpoint *c) {
    if (!c) return;
    for (int i = 0; i < c->n_files; i++) file_free(c->files[i]);
    free(c->files);
    free(c->index);
    free(c);
}

/* Build the merged, sorted index; a name present in two files is an error. */
static st_checkpoint *ckpt_finish(st_checkpoint *c) {
    int64_t total = 0;
    for (int i = 0; i < c->n_files; i++) total += c->files[i]->count;
    c->index = malloc((size_t)(total ? total : 1) * sizeof *c->index);
    for (int i = 0; i < c->n_files; i++)
        for (int64_t j = 0; j < c->files[i]->count; j++) {
            c->files[i]->tensors[j].shard = i;
            c->index[c->count++] = &c->files[i]->tensors[j];
        }
    qsort(c->index, (size_t)c->count, sizeof *c->index, cmp_tensor_ptr_name);
    for (int64_t i = 1; i < c->count; i++)
        if (!strcmp(c->index[i - 1]->name, c->index[i]->name)) {
            nf_fail("tensor '%s' appears in both %s and %s", c->index[i]->name,
                    c->files[c->index[i - 1]->shard]->path, c->files[c->index[i]->shard]->path);
            st_close(c);
            return NULL;
        }
    c->fp8_rows = c->fp8_cols = 128;
    return c;
}

st_checkpoint *st_open_files(const char *const *paths, int n) {
    st_checkpoint *c = calloc(1, sizeof *c);
    c->files = calloc((size_t)(n ? n : 1), sizeof *c->files);
    for (int i = 0; i < n; i++) {
        st_file *f = st_file_open(paths[i]);
        if (!f) {
            st_close(c);
            return NULL;
        }
        c->files[c->n_files++] = f;
    }
    return ckpt_finish(c);
}

st_checkpoint *st_open_memory(const void *data, size_t size) {
    st_file *f = st_file_open_memory(data, size);
    if (!f) return NULL;
    st_checkpoint *c = calloc(1, sizeof *c);
    c->files = calloc(1, sizeof *c->files);
    c->files[c->n_files++] = f;
    return ckpt_finish(c);
}

static char *path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *s = malloc(n);
    snprintf(s, n, "%s/%s", dir, name);
    return s;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static st_checkpoint *open_index(const char *dir, const char *index_path) {
    json_error_t jerr;
    json_t *root = json_load_file(index_path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        nf_fail("%s: bad JSON at line %d: %s", index_path, jerr.line, jerr.text);
        return NULL;
    }
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm) || json_object_size(wm) == 0) {
        nf_fail("%s: no \"weight_map\" object", index_path);
        json_decref(root);
        return NULL;
    }
    /* The distinct shard names, sorted. */
    size_t n = json_object_size(wm), n_shards = 0;
    char **shards = calloc(n, sizeof *shards);
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v) {
        if (!json_is_string(v)) {
            nf_fail("%s: weight_map[\"%s\"] is not a file name", index_path, key);
            goto fail;
        }
        const char *s = json_string_value(v);
        if (!s[0] || s[0] == '/' || strstr(s, "..")) {
            nf_fail("%s: weight_map[\"%s\"] names an unsafe shard path \"%s\"", index_path, key, s);
            goto fail;
        }
        bool seen = false;
        for (size_t i = 0; i < n_shards && !seen; i++) seen = !strcmp(shards[i], s);
        if (!seen) shards[n_shards++] = (char *)s;
    }
    qsort(shards, n_shards, sizeof *shards, cmp_str);

    st_checkpoint *c = calloc(1, sizeof *c);
    c->files = calloc(n_shards, sizeof *c->files);
    for (size_t i = 0; i < n_shards; i++) {
        char *p = path_join(dir, shards[i]);
        if (access(p, F_OK) != 0) {
            nf_fail("shard %s listed in %s is missing", p, index_path);
            free(p);
            st_close(c);
            goto fail;
        }
        st_file *f = st_file_open(p);
        free(p);
        if (!f) {
            st_close(c);
            goto fail;
        }
        c->files[c->n_files++] = f;
    }
    /* Every name of the map must be in its shard (files[i] is shards[i]). */
    json_object_foreach(wm, key, v) {
        const char *s = json_string_value(v);
        char **hit = bsearch(&s, shards, n_shards, sizeof *shards, cmp_str);
        if (hit && !st_file_find(c->files[hit - shards], key)) {
            nf_fail("tensor '%s' is listed in %s for %s but that shard does not contain it", key, index_path, s);
            st_close(c);
            goto fail;
        }
    }
    free(shards);
    json_decref(root);
    return ckpt_finish(c);
fail:
    free(shards);
    json_decref(root);
    return NULL;
}

st_checkpoint *st_open_dir(const char *dir) {
    char *index_path = path_join(dir, "model.safetensors.index.json");
    if (access(index_path, F_OK) == 0) {
        st_checkpoint *c = open_index(dir, index_path);
        free(index_path);
        return c;
    }
    free(index_path);
    char *single = path_join(dir, "model.safetensors");
    if (access(single, F_OK) == 0) {
        const char *paths[1] = {single};
        st_checkpoint *c = st_open_files(paths, 1);
        free(single);
        return c;
    }
    free(single);
    DIR *d = opendir(dir);
    if (!d) {
        nf_fail("%s: cannot open folder: %s", dir, strerror(errno));
        return NULL;
    }
    char **names = NULL;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l > 12 && !strcmp(de->d_name + l - 12, ".safetensors")) {
            names = realloc(names, (size_t)(n + 1) * sizeof *names);
            names[n++] = path_join(dir, de->d_name);
        }
    }
    closedir(d);
    if (n == 0) {
        nf_fail("%s: no model.safetensors, model.safetensors.index.json or *.safetensors file", dir);
        return NULL;
    }
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    st_checkpoint *c = st_open_files((const char *const *)names, n);
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return c;
}

int64_t st_count(const st_checkpoint *c) { return c->count; }
const st_tensor *st_at(const st_checkpoint *c, int64_t i) { return i >= 0 && i < c->count ? c->index[i] : NULL; }

const st_tensor *st_find(const st_checkpoint *c, const char *name) {
    st_tensor key = {.name = (char *)name};
    const st_tensor *kp = &key;
    const st_tensor **r = bsearch(&kp, c->index, (size_t)c->count, sizeof *c->index, cmp_tensor_ptr_name);
    return r ? *r : NULL;
}

int st_shard_count(const st_checkpoint *c) { return c->n_files; }
const char *st_shard_path(const st_checkpoint *c, int shard) {
    return shard >= 0 && shard < c->n_files ? c->files[shard]->path : NULL;
}

uint64_t st_total_bytes(const st_checkpoint *c) {
    uint64_t s = 0;
    for (int64_t i = 0; i < c->count; i++) s += c->index[i]->end - c->index[i]->begin;
    return s;
}

void st_set_fp8_block(st_checkpoint *c, int64_t rows, int64_t cols) {
    c->fp8_rows = rows;
    c->fp8_cols = cols;
}

/* ---- reading ---- */

static float load_elem(st_dtype d, const uint8_t *p, int64_t i) {
    switch (d) {
    case ST_F32: {
        float x;
        memcpy(&x, p + 4 * i, 4);
        return x;
    }
    case ST_BF16: {
        uint32_t u = (uint32_t)(p[2 * i] | p[2 * i + 1] << 8) << 16;
        float x;
        memcpy(&x, &u, 4);
        return x;
    }
    case ST_F16: {
        /* IEEE half -> float */
        uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
        uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, u;
        if (e == 0) {
            if (m == 0) u = s;
            else {
                float x = ldexpf((float)m, -24);
                memcpy(&u, &x, 4);
                u |= s;
            }
        } else if (e == 31) u = s | 0x7f800000u | (m << 13);
        else u = s | ((e + 112) << 23) | (m << 13);
        float x;
        memcpy(&x, &u, 4);
        return x;
    }
    case ST_F64: {
        double x;
        memcpy(&x, p + 8 * i, 8);
        return (float)x;
    }
    default: return NAN;
    }
}

static bool is_float_dtype(st_dtype d) { return d == ST_F32 || d == ST_BF16 || d == ST_F16 || d == ST_F64; }

static const st_tensor *scale_of(const st_checkpoint *c, const st_tensor *t) {
    char buf[4200];
    snprintf(buf, sizeof buf, "%s_scale_inv", t->name);
    return st_find(c, buf);
}

int st_check_readable(const st_checkpoint *c, const st_tensor *t) {
    if (is_float_dtype(t->dtype)) return 0;
    if (t->dtype != ST_F8_E4M3)
        return nf_fail("tensor '%s': dtype %s cannot be converted (expected BF16, F16, F32 or F8_E4M3)", t->name,
                       t->dtype_name);
    const st_tensor *s = scale_of(c, t);
    if (!s) return nf_fail("tensor '%s' is F8_E4M3 but '%s_scale_inv' (its block scales) is missing", t->name, t->name);
    if (t->n_dims != 2)
        return nf_fail("tensor '%s': F8_E4M3 with block scales must be 2-D, got %u dimensions", t->name, t->n_dims);
    if (!is_float_dtype(s->dtype))
        return nf_fail("tensor '%s': dtype %s of the scales is not F32/BF16/F16", s->name, s->dtype_name);
    int64_t er = (t->shape[0] + c->fp8_rows - 1) / c->fp8_rows, ec = (t->shape[1] + c->fp8_cols - 1) / c->fp8_cols;
    if (s->n_dims != 2 || s->shape[0] != er || s->shape[1] != ec)
        return nf_fail("tensor '%s': scales of shape [%lld,%lld] do not match %lldx%lld blocks of [%lld,%lld]", s->name,
                       (long long)s->shape[0], (long long)(s->n_dims > 1 ? s->shape[1] : 1), (long long)c->fp8_rows,
                       (long long)c->fp8_cols, (long long)t->shape[0], (long long)t->shape[1]);
    return 0;
}

int st_read_f32(const st_checkpoint *c, const st_tensor *t, int64_t first, int64_t n, float *dst) {
    if (first < 0 || n < 0 || first + n > t->n_elements)
        return nf_fail("tensor '%s': read of [%lld, %lld) outside its %lld elements", t->name, (long long)first,
                       (long long)(first + n), (long long)t->n_elements);
    if (st_check_readable(c, t) < 0) return -1;
    if (t->dtype == ST_F32) {
        memcpy(dst, t->data + 4 * first, (size_t)n * 4);
        return 0;
    }
    if (t->dtype == ST_BF16) {
        const uint8_t *p = t->data + 2 * first;
        for (int64_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)(p[2 * i] | p[2 * i + 1] << 8) << 16;
            memcpy(&dst[i], &u, 4);
        }
        return 0;
    }
    if (t->dtype != ST_F8_E4M3) {
        for (int64_t i = 0; i < n; i++) dst[i] = load_elem(t->dtype, t->data, first + i);
        return 0;
    }
    pthread_once(&f8_once, f8_init);
    const st_tensor *s = scale_of(c, t);
    int64_t cols = t->shape[1], scols = s->shape[1];
    int64_t i = 0;
    while (i < n) {
        int64_t idx = first + i, r = idx / cols, col = idx % cols;
        int64_t run = cols - col < n - i ? cols - col : n - i; /* rest of this row */
        for (int64_t k = 0; k < run;) {
            int64_t cb = (col + k) / c->fp8_cols, cend = (cb + 1) * c->fp8_cols - col;
            if (cend > run) cend = run;
            float sc = load_elem(s->dtype, s->data, (r / c->fp8_rows) * scols + cb);
            for (; k < cend; k++) dst[i + k] = f8_table[t->data[idx + k]] * sc;
        }
        i += run;
    }
    return 0;
}

static void advise(const st_checkpoint *c, const st_tensor *t, int advice) {
    const st_file *f = c->files[t->shard];
    if (!f->mapped || t->end == t->begin) return;
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)t->data, b = a + (t->end - t->begin);
    a &= ~(uintptr_t)(pg - 1);
    madvise((void *)a, b - a, advice);
}

void st_prefetch(const st_checkpoint *c, const st_tensor *t) {
    if (t->end - t->begin > (512u << 20)) return; /* a huge range would only evict what we are using */
    advise(c, t, MADV_WILLNEED);
    const st_tensor *s = t->dtype == ST_F8_E4M3 ? scale_of(c, t) : NULL;
    if (s && s != t) advise(c, s, MADV_WILLNEED);
}

void st_release(const st_checkpoint *c, const st_tensor *t) {
    advise(c, t, MADV_DONTNEED);
    const st_tensor *s = t->dtype == ST_F8_E4M3 ? scale_of(c, t) : NULL;
    if (s && s != t) st_release(c, s);
}

const char *st_source_desc(const st_checkpoint *c, const st_tensor *t) {
    static _Thread_local char buf[48];
    if (t->dtype == ST_F8_E4M3) {
        const st_tensor *s = scale_of(c, t);
        snprintf(buf, sizeof buf, "F8_E4M3+%s", s ? s->dtype_name : "?");
        return buf;
    }
    snprintf(buf, sizeof buf, "%s", t->dtype_name);
    return buf;
}
