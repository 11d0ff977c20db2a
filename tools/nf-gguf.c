/* nf-gguf.c — inspect a GGUF file: header, metadata and tensor table (like gguf-dump).
 *
 *   nf-gguf FILE            human-readable listing (long arrays abbreviated)
 *   nf-gguf --full FILE     every array element
 *   nf-gguf --json FILE     machine-readable JSON on stdout (every element; used by the Python cross-checks)
 *
 * The file goes through the same validating reader as the engine, so `nf-gguf` is also the quickest way to see
 * why a file is rejected: the error names the byte offset and the problem. Exit status 0 ok, 1 error. */
#include "formats/formats.h"
#include "gguf/gguf.h"
#include "util/error.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEXT_ARRAY_ITEMS 8

static void usage(FILE *out) {
    fprintf(out,
            "usage: nf-gguf [--json | --full] FILE\n"
            "  Print the header, metadata and tensor table of a GGUF file.\n"
            "  --full   print every array element (default: the first %d)\n"
            "  --json   JSON on stdout: {path, version, alignment, metadata: [{key, type, [elem_type, count,] value}],\n"
            "           tensors: [{name, type, type_id, ne, offset, size}]}; uint64 values above 2^63-1 and\n"
            "           non-finite floats are given as strings\n",
            TEXT_ARRAY_ITEMS);
}

/* ---- text ---- */

static void print_escaped(const char *p, uint64_t n, uint64_t max) {
    putchar('"');
    for (uint64_t i = 0; i < n && i < max; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
    putchar('"');
    if (n > max) printf("...(%" PRIu64 " bytes)", n);
}

static void print_elem(const gguf_kv *kv, uint64_t i, bool full) {
    gguf_type t = kv->elem_type;
    if (t == GGUF_TYPE_STRING) {
        gguf_str s = gguf_arr_str(kv, i);
        print_escaped(s.ptr, s.len, full ? UINT64_MAX : 200);
    } else if (t == GGUF_TYPE_BOOL) {
        fputs(gguf_arr_i64(kv, i) ? "true" : "false", stdout);
    } else if (t == GGUF_TYPE_FLOAT32) {
        printf("%.9g", gguf_arr_f64(kv, i));
    } else if (t == GGUF_TYPE_FLOAT64) {
        printf("%.17g", gguf_arr_f64(kv, i));
    } else if (t == GGUF_TYPE_UINT64) {
        uint64_t v;
        memcpy(&v, (const uint8_t *)kv->data + 8 * i, 8);
        printf("%" PRIu64, v);
    } else {
        printf("%" PRId64, gguf_arr_i64(kv, i));
    }
}

static void print_text(const gguf_file *f, bool full) {
    printf("%s: GGUF v%" PRIu32 ", %" PRId64 " metadata keys, %" PRId64 " tensors, alignment %" PRIu64 "\n",
           gguf_path(f), gguf_version(f), gguf_kv_count(f), gguf_tensor_count(f), gguf_alignment(f));
    printf("\nmetadata:\n");
    for (int64_t i = 0; i < gguf_kv_count(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        char type[48];
        if (kv->type == GGUF_TYPE_ARRAY)
            snprintf(type, sizeof type, "%s[%" PRIu64 "]", gguf_type_name(kv->elem_type), kv->count);
        else
            snprintf(type, sizeof type, "%s", gguf_type_name(kv->type));
        printf("%6" PRId64 "  %-44.*s %-16s ", i, (int)(kv->key.len < 200 ? kv->key.len : 200), kv->key.ptr, type);
        if (kv->type == GGUF_TYPE_ARRAY) {
            uint64_t n = full ? kv->count : (kv->count < TEXT_ARRAY_ITEMS ? kv->count : TEXT_ARRAY_ITEMS);
            putchar('[');
            for (uint64_t j = 0; j < n; j++) {
                if (j) fputs(", ", stdout);
                print_elem(kv, j, full);
            }
            if (n < kv->count) printf(", ... %" PRIu64 " more", kv->count - n);
            putchar(']');
        } else {
            print_elem(kv, 0, full);
        }
        putchar('\n');
    }
    printf("\ntensors:\n");
    uint64_t total = 0;
    for (int64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        char shape[128];
        int n = snprintf(shape, sizeof shape, "[");
        for (uint32_t d = 0; d < t->n_dims; d++)
            n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%" PRId64, d ? ", " : "", t->ne[d]);
        snprintf(shape + n, sizeof shape - (size_t)n, "]");
        printf("%6" PRId64 "  %-44s %-8s %-28s offset %-12" PRIu64 " size %" PRIu64 "\n", i, t->name,
               nf_type_get(t->type)->name, shape, t->offset, t->size);
        total += t->size;
    }
    printf("\n%" PRId64 " tensors, %" PRIu64 " bytes of tensor data (%.2f GiB)\n", gguf_tensor_count(f), total,
           (double)total / (1024.0 * 1024 * 1024));
}

/* ---- json ---- */

/* A JSON string from raw bytes; invalid UTF-8 bytes become '?' so the output stays valid JSON. */
static json_t *jstr(const char *p, uint64_t n) {
    json_t *j = json_stringn(p ? p : "", (size_t)n);
    if (j) return j;
    char *c = nf_xmalloc((size_t)n + 1);
    for (uint64_t i = 0; i < n; i++) c[i] = (unsigned char)p[i] >= 0x80 ? '?' : p[i];
    j = json_stringn(c, (size_t)n);
    free(c);
    return j;
}

static json_t *jreal(double v) {
    if (isfinite(v)) return json_real(v);
    return json_string(isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
}

static json_t *jelem(const gguf_kv *kv, uint64_t i) {
    switch (kv->elem_type) {
    case GGUF_TYPE_STRING: {
        gguf_str s = gguf_arr_str(kv, i);
        return jstr(s.ptr, s.len);
    }
    case GGUF_TYPE_BOOL: return json_boolean(gguf_arr_i64(kv, i) != 0);
    case GGUF_TYPE_FLOAT32:
    case GGUF_TYPE_FLOAT64: return jreal(gguf_arr_f64(kv, i));
    case GGUF_TYPE_UINT64: {
        uint64_t v;
        memcpy(&v, (const uint8_t *)kv->data + 8 * i, 8);
        if (v <= (uint64_t)INT64_MAX) return json_integer((json_int_t)v);
        char b[32];
        snprintf(b, sizeof b, "%" PRIu64, v);
        return json_string(b);
    }
    default: return json_integer(gguf_arr_i64(kv, i));
    }
}

static void print_json(const gguf_file *f) {
    json_t *root = json_object(), *meta = json_array(), *tens = json_array();
    json_object_set_new(root, "path", json_string(gguf_path(f)));
    json_object_set_new(root, "version", json_integer(gguf_version(f)));
    json_object_set_new(root, "alignment", json_integer((json_int_t)gguf_alignment(f)));
    for (int64_t i = 0; i < gguf_kv_count(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        json_t *o = json_object();
        json_object_set_new(o, "key", jstr(kv->key.ptr, kv->key.len));
        json_object_set_new(o, "type", json_string(gguf_type_name(kv->type)));
        if (kv->type == GGUF_TYPE_ARRAY) {
            json_t *a = json_array();
            for (uint64_t j = 0; j < kv->count; j++) json_array_append_new(a, jelem(kv, j));
            json_object_set_new(o, "elem_type", json_string(gguf_type_name(kv->elem_type)));
            json_object_set_new(o, "count", json_integer((json_int_t)kv->count));
            json_object_set_new(o, "value", a);
        } else {
            json_object_set_new(o, "value", jelem(kv, 0));
        }
        json_array_append_new(meta, o);
    }
    for (int64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        json_t *o = json_object(), *ne = json_array();
        for (uint32_t d = 0; d < t->n_dims; d++) json_array_append_new(ne, json_integer(t->ne[d]));
        json_object_set_new(o, "name", json_string(t->name));
        json_object_set_new(o, "type", json_string(nf_type_get(t->type)->name));
        json_object_set_new(o, "type_id", json_integer(t->type));
        json_object_set_new(o, "ne", ne);
        json_object_set_new(o, "offset", json_integer((json_int_t)t->offset));
        json_object_set_new(o, "size", json_integer((json_int_t)t->size));
        json_array_append_new(tens, o);
    }
    json_object_set_new(root, "metadata", meta);
    json_object_set_new(root, "tensors", tens);
    if (json_dumpf(root, stdout, JSON_INDENT(1) | JSON_PRESERVE_ORDER) != 0) nf_die("cannot write JSON");
    putchar('\n');
    json_decref(root);
}

int main(int argc, char **argv) {
    nf_progname = "nf-gguf";
    bool json = false, full = false;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--full")) full = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            usage(stderr);
            nf_die("unknown option '%s'", argv[i]);
        } else if (path) {
            usage(stderr);
            nf_die("one FILE expected");
        } else path = argv[i];
    }
    if (!path) {
        usage(stderr);
        return 1;
    }
    gguf_file *f = gguf_open(path);
    if (!f) nf_die("%s", nf_error());
    if (json) print_json(f);
    else print_text(f, full);
    gguf_close(f);
    if (fflush(stdout) != 0) nf_die("cannot write output");
    return 0;
}
