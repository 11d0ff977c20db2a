/* test_gguf.c — the GGUF reader and writer: round trips of every metadata type, arrays and tensor types,
 * alignment, the writer's failure handling (temporary file, short writes), and hand-corrupted files that must
 * each be rejected with a message naming the problem (truncation at every byte, bad magic and version, huge
 * counts, unknown types, misaligned and out-of-range data, duplicates, overlaps). */
#include <criterion/criterion.h>

#include "formats/formats.h"
#include "gguf/gguf.h"
#include "util/error.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers ---- */

static char tmpdir[64];

static const char *tmp_path(const char *name) {
    static char buf[4][256];
    static int k;
    if (!tmpdir[0]) {
        strcpy(tmpdir, "/tmp/nf-test-gguf-XXXXXX");
        cr_assert_not_null(mkdtemp(tmpdir));
    }
    char *p = buf[k++ & 3];
    snprintf(p, 256, "%s/%s", tmpdir, name);
    return p;
}

/* Remove the test's temporary directory (each Criterion test runs in its own process). */
static void cleanup(void) {
    if (!tmpdir[0]) return;
    DIR *d = opendir(tmpdir);
    if (d) {
        struct dirent *e;
        char p[512];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
                unlink(p);
            }
        closedir(d);
    }
    rmdir(tmpdir);
}

TestSuite(gguf, .fini = cleanup);

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    cr_assert_not_null(fp, "cannot open %s", path);
    fseek(fp, 0, SEEK_END);
    *n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *b = malloc(*n ? *n : 1);
    cr_assert_eq(fread(b, 1, *n, fp), *n);
    fclose(fp);
    return b;
}

static void write_all(const char *path, const void *b, size_t n) {
    FILE *fp = fopen(path, "wb");
    cr_assert_not_null(fp);
    cr_assert_eq(fwrite(b, 1, n, fp), n);
    fclose(fp);
}

#define assert_err(substr)                                                                                        \
    cr_assert(strstr(nf_error(), (substr)) != NULL, "error '%s' should mention '%s'", nf_error(), (substr))

static uint32_t lcg = 12345;
static uint8_t rnd8(void) { return (uint8_t)((lcg = lcg * 1664525u + 1013904223u) >> 24); }

/* A hand-built image for corrupt-file tests. */
typedef struct {
    uint8_t b[8192];
    size_t n;
} img;

static void put(img *m, const void *p, size_t n) {
    cr_assert(m->n + n <= sizeof m->b);
    memcpy(m->b + m->n, p, n);
    m->n += n;
}
static void put_u32(img *m, uint32_t v) { put(m, &v, 4); }
static void put_u64(img *m, uint64_t v) { put(m, &v, 8); }
static void put_str(img *m, const char *s) {
    put_u64(m, strlen(s));
    put(m, s, strlen(s));
}
static void header(img *m, uint64_t n_tensors, uint64_t n_kv) {
    m->n = 0;
    put(m, "GGUF", 4);
    put_u32(m, 3);
    put_u64(m, n_tensors);
    put_u64(m, n_kv);
}
/* tensor info with a 1-d or 2-d shape */
static void tinfo(img *m, const char *name, uint32_t type, int64_t ne0, int64_t ne1, uint64_t off) {
    put_str(m, name);
    put_u32(m, ne1 ? 2 : 1);
    put_u64(m, (uint64_t)ne0);
    if (ne1) put_u64(m, (uint64_t)ne1);
    put_u32(m, type);
    put_u64(m, off);
}
static void pad_to(img *m, size_t a) {
    while (m->n % a) m->b[m->n++] = 0;
}
static void zeros(img *m, size_t n) {
    cr_assert(m->n + n <= sizeof m->b);
    memset(m->b + m->n, 0, n);
    m->n += n;
}

static gguf_file *open_img(const img *m) {
    nf_clear_error();
    return gguf_open_memory(m->b, m->n);
}

#define assert_rejected(m, substr)                                                                                \
    do {                                                                                                          \
        gguf_file *f_ = open_img(m);                                                                              \
        cr_assert_null(f_, "corrupt image should be rejected (%s)", (substr));                                    \
        assert_err(substr);                                                                                       \
        cr_assert(strchr(nf_error(), '\n') == NULL, "one line: %s", nf_error());                                  \
    } while (0)

/* ---- round trips ---- */

Test(gguf, roundtrip_every_kv_type) {
    const char *path = tmp_path("kv.gguf");
    gguf_writer *w = gguf_writer_create(path);
    cr_assert_not_null(w);
    gguf_set_u8(w, "t.u8", 200);
    gguf_set_i8(w, "t.i8", -100);
    gguf_set_u16(w, "t.u16", 60000);
    gguf_set_i16(w, "t.i16", -30000);
    gguf_set_u32(w, "t.u32", 4000000000u);
    gguf_set_i32(w, "t.i32", -2000000000);
    gguf_set_u64(w, "t.u64", 18000000000000000000ull);
    gguf_set_i64(w, "t.i64", -4611686018427387904ll);
    gguf_set_f32(w, "t.f32", 1.5f);
    gguf_set_f64(w, "t.f64", -2.25);
    gguf_set_bool(w, "t.bool", true);
    gguf_set_bool(w, "t.false", false);
    gguf_set_str(w, "t.str", "h\xc3\xa9llo");
    gguf_set_str(w, "t.empty", "");
    int32_t ai[3] = {1, -2, 3};
    gguf_set_arr(w, "t.arr_i32", GGUF_TYPE_INT32, ai, 3);
    double ad[2] = {0.25, -1e300};
    gguf_set_arr(w, "t.arr_f64", GGUF_TYPE_FLOAT64, ad, 2);
    uint16_t au[4] = {0, 1, 65535, 7};
    gguf_set_arr(w, "t.arr_u16", GGUF_TYPE_UINT16, au, 4);
    bool ab[3] = {true, false, true};
    gguf_set_arr(w, "t.arr_bool", GGUF_TYPE_BOOL, ab, 3);
    const char *as[4] = {"a", "", "ccc", "\xe4\xb8\xad"};
    gguf_set_arr_str(w, "t.arr_str", as, 4);
    gguf_set_arr(w, "t.arr_empty", GGUF_TYPE_UINT8, NULL, 0);
    gguf_set_arr_str(w, "t.arr_str_empty", NULL, 0);
    gguf_set_u32(w, "t.twice", 1);
    gguf_set_str(w, "t.twice", "second");  /* last value wins, even with another type */
    cr_assert_eq(gguf_writer_finish(w), 0, "%s", nf_error());
    cr_assert(!exists(tmp_path("kv.gguf.tmp")), "temporary file must be gone");

    gguf_file *f = gguf_open(path);
    cr_assert_not_null(f, "%s", nf_error());
    cr_assert_eq(gguf_version(f), 3);
    cr_assert_eq(gguf_alignment(f), GGUF_DEFAULT_ALIGNMENT);
    cr_assert_eq(gguf_kv_count(f), 22);
    cr_assert_eq(gguf_tensor_count(f), 0);
    cr_assert_str_eq(gguf_path(f), path);
    /* declaration order is kept */
    cr_assert_eq(gguf_kv_at(f, 0)->key.len, 4);
    cr_assert(!memcmp(gguf_kv_at(f, 0)->key.ptr, "t.u8", 4));
    cr_assert_null(gguf_kv_at(f, 22));
    cr_assert_null(gguf_kv_at(f, -1));

    struct { const char *key; gguf_type type; double v; } nums[] = {
        {"t.u8", GGUF_TYPE_UINT8, 200},         {"t.i8", GGUF_TYPE_INT8, -100},
        {"t.u16", GGUF_TYPE_UINT16, 60000},     {"t.i16", GGUF_TYPE_INT16, -30000},
        {"t.u32", GGUF_TYPE_UINT32, 4e9},       {"t.i32", GGUF_TYPE_INT32, -2e9},
        {"t.u64", GGUF_TYPE_UINT64, 1.8e19},    {"t.i64", GGUF_TYPE_INT64, -4611686018427387904.0},
        {"t.f32", GGUF_TYPE_FLOAT32, 1.5},      {"t.f64", GGUF_TYPE_FLOAT64, -2.25},
        {"t.bool", GGUF_TYPE_BOOL, 1},          {"t.false", GGUF_TYPE_BOOL, 0},
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        const gguf_kv *kv = gguf_find(f, nums[i].key);
        cr_assert_not_null(kv, "%s", nums[i].key);
        cr_assert_eq(kv->type, nums[i].type, "%s", nums[i].key);
        cr_assert_eq(kv->elem_type, nums[i].type);
        cr_assert_eq(kv->count, 1);
        cr_assert_eq(gguf_arr_f64(kv, 0), nums[i].v, "%s: %g", nums[i].key, gguf_arr_f64(kv, 0));
    }
    cr_assert_eq(gguf_arr_i64(gguf_find(f, "t.i64"), 0), -4611686018427387904ll);
    uint64_t u64;
    memcpy(&u64, gguf_find(f, "t.u64")->data, 8);
    cr_assert_eq(u64, 18000000000000000000ull);

    char buf[64];
    cr_assert_eq(gguf_get_str(f, "t.str", buf, sizeof buf), 0);
    cr_assert_str_eq(buf, "h\xc3\xa9llo");
    cr_assert_eq(gguf_get_str(f, "t.empty", buf, sizeof buf), 0);
    cr_assert_str_eq(buf, "");
    cr_assert_eq(gguf_get_str(f, "t.twice", buf, sizeof buf), 0);
    cr_assert_str_eq(buf, "second");

    const gguf_kv *kv = gguf_find(f, "t.arr_i32");
    cr_assert_eq(kv->type, GGUF_TYPE_ARRAY);
    cr_assert_eq(kv->elem_type, GGUF_TYPE_INT32);
    cr_assert_eq(kv->count, 3);
    cr_assert_eq(gguf_arr_i64(kv, 1), -2);
    cr_assert_eq(gguf_arr_i64(kv, 3), 0, "out of range gives 0");
    kv = gguf_find(f, "t.arr_f64");
    cr_assert_eq(gguf_arr_f64(kv, 0), 0.25);
    cr_assert_eq(gguf_arr_f64(kv, 1), -1e300);
    kv = gguf_find(f, "t.arr_u16");
    cr_assert_eq(gguf_arr_i64(kv, 2), 65535);
    kv = gguf_find(f, "t.arr_bool");
    cr_assert_eq(kv->elem_type, GGUF_TYPE_BOOL);
    cr_assert_eq(gguf_arr_i64(kv, 0), 1);
    cr_assert_eq(gguf_arr_i64(kv, 1), 0);
    kv = gguf_find(f, "t.arr_str");
    cr_assert_eq(kv->elem_type, GGUF_TYPE_STRING);
    cr_assert_eq(kv->count, 4);
    for (int i = 0; i < 4; i++) {
        gguf_str s = gguf_arr_str(kv, (uint64_t)i);
        cr_assert_eq(s.len, strlen(as[i]));
        cr_assert(!memcmp(s.ptr, as[i], s.len));
    }
    cr_assert_null(gguf_arr_str(kv, 4).ptr);
    cr_assert_eq(gguf_arr_f64(kv, 0), 0.0, "strings are not numeric");
    cr_assert_eq(gguf_find(f, "t.arr_empty")->count, 0);
    cr_assert_eq(gguf_find(f, "t.arr_str_empty")->count, 0);
    cr_assert_null(gguf_find(f, "t.missing"));
    cr_assert_null(gguf_find(f, "t.u"));  /* prefix of a key is not the key */
    gguf_close(f);
}

Test(gguf, getters_convert_and_explain) {
    const char *path = tmp_path("get.gguf");
    gguf_writer *w = gguf_writer_create(path);
    gguf_set_u8(w, "small", 7);
    gguf_set_i32(w, "neg", -5);
    gguf_set_u64(w, "big", 5000000000ull);
    gguf_set_u64(w, "huge", 18000000000000000000ull);
    gguf_set_f64(w, "f64", 0.125);
    gguf_set_f64(w, "f64big", 1e300);
    gguf_set_bool(w, "flag", true);
    gguf_set_str(w, "name", "glm5-next");
    uint32_t arr[2] = {1, 2};
    gguf_set_arr(w, "arr", GGUF_TYPE_UINT32, arr, 2);
    cr_assert_eq(gguf_writer_finish(w), 0, "%s", nf_error());
    gguf_file *f = gguf_open(path);
    cr_assert_not_null(f, "%s", nf_error());

    uint32_t u;
    int64_t i;
    float x;
    bool b;
    char buf[16];
    cr_assert_eq(gguf_get_u32(f, "small", &u), 0);
    cr_assert_eq(u, 7);
    cr_assert_eq(gguf_get_i64(f, "neg", &i), 0);
    cr_assert_eq(i, -5);
    cr_assert_eq(gguf_get_i64(f, "big", &i), 0);
    cr_assert_eq(i, 5000000000ll);
    cr_assert_eq(gguf_get_u32(f, "neg", &u), -1);
    assert_err("neg");
    assert_err("does not fit in uint32");
    cr_assert_eq(gguf_get_u32(f, "big", &u), -1);
    assert_err("5000000000");
    cr_assert_eq(gguf_get_i64(f, "huge", &i), -1);
    assert_err("does not fit in int64");
    cr_assert_eq(gguf_get_f32(f, "f64", &x), 0);
    cr_assert_eq(x, 0.125f);
    cr_assert_eq(gguf_get_f32(f, "small", &x), 0, "integers are accepted as floats");
    cr_assert_eq(x, 7.0f);
    cr_assert_eq(gguf_get_f32(f, "f64big", &x), -1);
    assert_err("does not fit in float32");
    cr_assert_eq(gguf_get_u32(f, "f64", &u), -1);
    assert_err("has type float64, expected uint32");
    cr_assert_eq(gguf_get_bool(f, "flag", &b), 0);
    cr_assert(b);
    cr_assert_eq(gguf_get_bool(f, "small", &b), -1);
    assert_err("has type uint8, expected bool");
    cr_assert_eq(gguf_get_str(f, "name", buf, sizeof buf), 0);
    cr_assert_str_eq(buf, "glm5-next");
    cr_assert_eq(gguf_get_str(f, "name", buf, 9), -1, "truncation is an error");
    assert_err("does not fit");
    cr_assert_eq(gguf_get_str(f, "small", buf, sizeof buf), -1);
    assert_err("expected string");
    cr_assert_eq(gguf_get_u32(f, "arr", &u), -1);
    assert_err("is an array of uint32");
    cr_assert_eq(gguf_get_u32(f, "nope", &u), -1);
    assert_err("key 'nope' not found");
    assert_err(path);
    gguf_close(f);
}

/* Random bytes for a tensor of `type` with shape ne (2-d). */
typedef struct {
    const char *name;
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[4];
    uint8_t *data;
    uint64_t size;
} tspec;

static void write_tensors(const char *path, tspec *ts, int n, uint32_t alignment) {
    gguf_writer *w = gguf_writer_create(path);
    cr_assert_not_null(w);
    if (alignment) gguf_writer_set_alignment(w, alignment);
    gguf_set_str(w, "general.architecture", "test");
    for (int i = 0; i < n; i++) {
        int64_t rows = 1;
        for (uint32_t d = 1; d < ts[i].n_dims; d++) rows *= ts[i].ne[d];
        ts[i].size = nf_row_bytes(ts[i].type, ts[i].ne[0]) * (uint64_t)rows;
        ts[i].data = malloc(ts[i].size ? ts[i].size : 1);
        for (uint64_t k = 0; k < ts[i].size; k++) ts[i].data[k] = rnd8();
        cr_assert_eq(gguf_writer_add_tensor(w, ts[i].name, ts[i].type, ts[i].n_dims, ts[i].ne), i, "%s", nf_error());
    }
    cr_assert_eq(gguf_writer_begin_data(w), 0, "%s", nf_error());
    for (int i = 0; i < n; i++) cr_assert_eq(gguf_writer_write_tensor(w, ts[i].data, ts[i].size), 0, "%s", nf_error());
    cr_assert_eq(gguf_writer_finish(w), 0, "%s", nf_error());
}

static void check_tensors(const char *path, tspec *ts, int n, uint64_t alignment) {
    gguf_file *f = gguf_open(path);
    cr_assert_not_null(f, "%s", nf_error());
    cr_assert_eq(gguf_alignment(f), alignment);
    cr_assert_eq(gguf_tensor_count(f), n);
    const uint8_t *first = gguf_tensor_at(f, 0)->data;
    for (int i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        cr_assert_str_eq(t->name, ts[i].name);
        cr_assert_eq(gguf_find_tensor(f, ts[i].name), t);
        cr_assert_eq(t->type, ts[i].type);
        cr_assert_eq(t->n_dims, ts[i].n_dims);
        for (int d = 0; d < 4; d++) cr_assert_eq(t->ne[d], (uint32_t)d < ts[i].n_dims ? ts[i].ne[d] : 1);
        cr_assert_eq(t->size, ts[i].size, "%s: size %lu vs %lu", t->name, (unsigned long)t->size, (unsigned long)ts[i].size);
        cr_assert_eq(t->offset % alignment, 0);
        cr_assert_eq((uint64_t)((const uint8_t *)t->data - first), t->offset);
        cr_assert(!memcmp(t->data, ts[i].data, t->size), "%s: bytes differ", t->name);
    }
    cr_assert_null(gguf_find_tensor(f, "absent"));
    cr_assert_null(gguf_tensor_at(f, n));
    gguf_close(f);
}

Test(gguf, roundtrip_tensors_of_several_types) {
    tspec ts[] = {
        {"f32", NF_TYPE_F32, 2, {5, 3, 1, 1}, NULL, 0},
        {"f16", NF_TYPE_F16, 1, {7, 1, 1, 1}, NULL, 0},
        {"bf16", NF_TYPE_BF16, 3, {4, 2, 3, 1}, NULL, 0},
        {"blk.0.q8_0", NF_TYPE_Q8_0, 2, {64, 3, 1, 1}, NULL, 0},
        {"blk.0.q4_K", NF_TYPE_Q4_K, 2, {512, 2, 1, 1}, NULL, 0},
        {"blk.0.q6_K", NF_TYPE_Q6_K, 4, {256, 1, 2, 2}, NULL, 0},
        {"blk.0.q2_K", NF_TYPE_Q2_K, 1, {256, 1, 1, 1}, NULL, 0},
        {"blk.0.iq2_xxs", NF_TYPE_IQ2_XXS, 2, {256, 3, 1, 1}, NULL, 0},
        {"zero", NF_TYPE_F32, 2, {0, 4, 1, 1}, NULL, 0},
    };
    int n = sizeof ts / sizeof ts[0];
    const char *path = tmp_path("tensors.gguf");
    write_tensors(path, ts, n, 0);
    check_tensors(path, ts, n, GGUF_DEFAULT_ALIGNMENT);
    cr_assert_eq(ts[3].size, 2 * 34 * 3);
    cr_assert_eq(ts[4].size, 2 * 144 * 2);
    for (int i = 0; i < n; i++) free(ts[i].data);
}

Test(gguf, custom_alignment) {
    tspec ts[] = {
        {"a", NF_TYPE_F32, 1, {3, 1, 1, 1}, NULL, 0},
        {"b", NF_TYPE_F16, 1, {5, 1, 1, 1}, NULL, 0},
        {"c", NF_TYPE_Q8_0, 1, {32, 1, 1, 1}, NULL, 0},
    };
    const char *path = tmp_path("align.gguf");
    write_tensors(path, ts, 3, 256);
    check_tensors(path, ts, 3, 256);
    size_t n;
    uint8_t *b = read_all(path, &n);
    cr_assert_eq(n % 256, 0, "data section and each tensor are padded");
    gguf_file *f = gguf_open_memory(b, n);
    cr_assert_not_null(f);
    cr_assert_eq((uint64_t)((const uint8_t *)gguf_tensor_at(f, 0)->data - b) % 256, 0);
    cr_assert_eq(gguf_tensor_at(f, 1)->offset, 256);
    cr_assert_eq(gguf_tensor_at(f, 2)->offset, 512);
    gguf_close(f);
    free(b);
    for (int i = 0; i < 3; i++) free(ts[i].data);
}

/* ---- writer failure handling ---- */

Test(gguf, writer_rejects_bad_declarations) {
    const char *path = tmp_path("bad.gguf");
    gguf_writer *w = gguf_writer_create(path);
    int64_t ne[2] = {33, 2};
    cr_assert_eq(gguf_writer_add_tensor(w, "q", NF_TYPE_Q8_0, 2, ne), -1);
    assert_err("not a multiple of the q8_0 block size 32");
    cr_assert_eq(gguf_writer_add_tensor(w, "x", 99, 2, ne), -1);
    assert_err("unknown tensor type id 99");
    cr_assert_eq(gguf_writer_add_tensor(w, "x", NF_TYPE_F32, 5, ne), -1);
    assert_err("n_dims 5");
    cr_assert_eq(gguf_writer_add_tensor(w, "", NF_TYPE_F32, 1, ne), -1);
    cr_assert_eq(gguf_writer_add_tensor(w, "x", NF_TYPE_F32, 2, ne), 0);
    cr_assert_eq(gguf_writer_add_tensor(w, "x", NF_TYPE_F32, 2, ne), -1);
    assert_err("duplicate tensor name 'x'");
    int64_t huge[4] = {INT64_MAX / 2, 4, 1, 1};
    cr_assert_eq(gguf_writer_add_tensor(w, "h", NF_TYPE_F32, 2, huge), -1);
    assert_err("overflows");
    cr_assert_eq(gguf_writer_begin_data(w), 0, "%s", nf_error());
    float d[66] = {0};
    cr_assert_eq(gguf_writer_write_tensor(w, d, 4), -1);
    assert_err("4 bytes given");
    assert_err("need 264");
    cr_assert_eq(gguf_writer_finish(w), -1, "one tensor was never written");
    assert_err("only 0 of 1");
    cr_assert(!exists(path) && !exists(tmp_path("bad.gguf.tmp")), "failure leaves no file");
}

Test(gguf, writer_bad_alignment_and_array_type) {
    gguf_writer *w = gguf_writer_create(tmp_path("al.gguf"));
    gguf_writer_set_alignment(w, 48);
    cr_assert_eq(gguf_writer_finish(w), -1);
    assert_err("alignment 48 is not a nonzero power of two");
    cr_assert(!exists(tmp_path("al.gguf")));

    w = gguf_writer_create(tmp_path("arr.gguf"));
    gguf_set_arr(w, "k", GGUF_TYPE_STRING, NULL, 1);
    cr_assert_eq(gguf_writer_begin_data(w), -1);
    assert_err("not a numeric type");
    gguf_writer_abort(w);
}

Test(gguf, abort_removes_temporary) {
    const char *path = tmp_path("abort.gguf");
    gguf_writer *w = gguf_writer_create(path);
    int64_t ne[1] = {8};
    gguf_writer_add_tensor(w, "t", NF_TYPE_F32, 1, ne);
    cr_assert_eq(gguf_writer_begin_data(w), 0);
    cr_assert(exists(tmp_path("abort.gguf.tmp")), "data goes to <path>.tmp");
    cr_assert(!exists(path));
    gguf_writer_abort(w);
    cr_assert(!exists(tmp_path("abort.gguf.tmp")));
    cr_assert(!exists(path));
}

Test(gguf, failed_write_is_reported_and_cleaned_up) {
    /* a 64 KiB file limit makes the writes fail like a full disk would */
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {65536, 65536};
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    const char *path = tmp_path("full.gguf");
    gguf_writer *w = gguf_writer_create(path);
    int64_t ne[1] = {1 << 16};
    gguf_writer_add_tensor(w, "a", NF_TYPE_F32, 1, ne);
    gguf_writer_add_tensor(w, "b", NF_TYPE_F32, 1, ne);
    float *d = calloc(1 << 16, 4);
    cr_assert_eq(gguf_writer_begin_data(w), 0);
    int r = gguf_writer_write_tensor(w, d, 1 << 18);
    if (r == 0) r = gguf_writer_write_tensor(w, d, 1 << 18);
    if (r == 0) r = gguf_writer_finish(w);
    else gguf_writer_abort(w);
    cr_assert_eq(r, -1, "writing past the limit must fail");
    assert_err("File too large");
    assert_err("full.gguf.tmp");
    cr_assert(!exists(path) && !exists(tmp_path("full.gguf.tmp")));
    free(d);
}

Test(gguf, overwrites_existing_file_only_on_success) {
    const char *path = tmp_path("keep.gguf");
    write_all(path, "old", 3);
    gguf_writer *w = gguf_writer_create(path);
    gguf_set_u32(w, "x", 1);
    cr_assert_eq(gguf_writer_begin_data(w), 0);
    gguf_writer_abort(w);
    size_t n;
    uint8_t *b = read_all(path, &n);
    cr_assert(n == 3 && !memcmp(b, "old", 3), "an aborted write keeps the old file");
    free(b);
    w = gguf_writer_create(path);
    gguf_set_u32(w, "x", 1);
    cr_assert_eq(gguf_writer_finish(w), 0);
    gguf_file *f = gguf_open(path);
    cr_assert_not_null(f, "%s", nf_error());
    gguf_close(f);
}

/* ---- corrupt files ---- */

/* A small valid file whose last tensor ends exactly at the end of the file (no trailing padding), so that
 * every strict prefix is invalid. */
static uint8_t *small_valid(size_t *n) {
    const char *path = tmp_path("small.gguf");
    gguf_writer *w = gguf_writer_create(path);
    gguf_set_str(w, "general.architecture", "test");
    gguf_set_u32(w, "a.u32", 5);
    const char *s[2] = {"x", "yz"};
    gguf_set_arr_str(w, "a.strs", s, 2);
    float fl[2] = {1, 2};
    gguf_set_arr(w, "a.f32s", GGUF_TYPE_FLOAT32, fl, 2);
    gguf_set_bool(w, "a.b", true);
    int64_t ne1[1] = {32}, ne2[2] = {4, 2};
    gguf_writer_add_tensor(w, "q", NF_TYPE_Q8_0, 1, ne1);  /* 34 bytes, padded to 64 */
    gguf_writer_add_tensor(w, "f", NF_TYPE_F32, 2, ne2);   /* 32 bytes: ends the file */
    cr_assert_eq(gguf_writer_begin_data(w), 0);
    uint8_t q[34] = {1, 2, 3}, fd[32] = {4, 5};
    cr_assert_eq(gguf_writer_write_tensor(w, q, 34), 0);
    cr_assert_eq(gguf_writer_write_tensor(w, fd, 32), 0);
    cr_assert_eq(gguf_writer_finish(w), 0, "%s", nf_error());
    return read_all(path, n);
}

Test(gguf, truncation_at_every_byte_is_rejected) {
    size_t n;
    uint8_t *full = small_valid(&n);
    gguf_file *f = gguf_open_memory(full, n);
    cr_assert_not_null(f, "%s", nf_error());
    gguf_close(f);
    for (size_t k = 0; k < n; k++) {
        /* an exact-size heap copy so any over-read would hit unowned memory */
        uint8_t *b = malloc(k ? k : 1);
        memcpy(b, full, k);
        nf_clear_error();
        f = gguf_open_memory(k ? b : NULL, k);
        cr_assert_null(f, "prefix of %zu of %zu bytes must be rejected", k, n);
        cr_assert(nf_error()[0], "prefix %zu: message expected", k);
        cr_assert(strstr(nf_error(), "<memory>: offset ") == nf_error(), "prefix %zu: '%s'", k, nf_error());
        cr_assert(strstr(nf_error(), "end of file") || strstr(nf_error(), "not a GGUF file") ||
                      strstr(nf_error(), "impossible in a file"),
                  "prefix %zu: '%s'", k, nf_error());
        free(b);
    }
    /* the same through the mmap path, for a few lengths */
    const char *path = tmp_path("trunc.gguf");
    size_t cuts[] = {0, 3, 20, n / 2, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        write_all(path, full, cuts[i]);
        cr_assert_null(gguf_open(path));
        assert_err(path);
    }
    free(full);
}

Test(gguf, bad_magic_and_version) {
    img m;
    header(&m, 0, 0);
    memcpy(m.b, "GGUG", 4);
    assert_rejected(&m, "offset 0: not a GGUF file (magic is 'GGUG'");
    header(&m, 0, 0);
    memcpy(m.b + 4, &(uint32_t){1}, 4);
    assert_rejected(&m, "offset 4: GGUF version 1 is not supported");
    memcpy(m.b + 4, &(uint32_t){4}, 4);
    assert_rejected(&m, "unsupported GGUF version 4");
    memcpy(m.b + 4, &(uint32_t){0x03000000u}, 4);
    assert_rejected(&m, "big-endian");
    memcpy(m.b + 4, &(uint32_t){2}, 4);
    gguf_file *f = open_img(&m);
    cr_assert_not_null(f, "v2 has the v3 layout: %s", nf_error());
    cr_assert_eq(gguf_version(f), 2);
    gguf_close(f);
}

Test(gguf, huge_counts) {
    img m;
    header(&m, 0, 1ull << 63);
    assert_rejected(&m, "offset 16: metadata kv count 9223372036854775808 is impossible");
    header(&m, UINT64_MAX, 0);
    assert_rejected(&m, "offset 8: tensor count 18446744073709551615 is impossible");
    /* string length 2^64-1 */
    header(&m, 0, 1);
    put_u64(&m, UINT64_MAX);
    zeros(&m, 16);
    assert_rejected(&m, "offset 24: key length 18446744073709551615 runs past end of file");
    /* string value far too long */
    header(&m, 0, 1);
    put_str(&m, "k");
    put_u32(&m, GGUF_TYPE_STRING);
    put_u64(&m, 99999999);
    zeros(&m, 16);
    assert_rejected(&m, "offset 37: string value length 99999999 runs past end of file (size 61)");
    assert_rejected(&m, "key 'k'");
    /* numeric array count that would overflow count * 8 */
    header(&m, 0, 1);
    put_str(&m, "arr");
    put_u32(&m, GGUF_TYPE_ARRAY);
    put_u32(&m, GGUF_TYPE_UINT64);
    put_u64(&m, (1ull << 61) + 1);
    zeros(&m, 16);
    assert_rejected(&m, "2305843009213693953 values of type uint64 run past end of file");
    /* string array count */
    header(&m, 0, 1);
    put_str(&m, "arr");
    put_u32(&m, GGUF_TYPE_ARRAY);
    put_u32(&m, GGUF_TYPE_STRING);
    put_u64(&m, 1ull << 62);
    zeros(&m, 16);
    assert_rejected(&m, "array of 4611686018427387904 strings runs past end of file");
}

Test(gguf, bad_kv_types) {
    img m;
    header(&m, 0, 1);
    put_str(&m, "k");
    put_u32(&m, 99);
    zeros(&m, 8);
    assert_rejected(&m, "offset 33: key 'k': unknown value type 99");
    header(&m, 0, 1);
    put_str(&m, "k");
    put_u32(&m, GGUF_TYPE_ARRAY);
    put_u32(&m, 13);
    put_u64(&m, 0);
    assert_rejected(&m, "unknown array element type 13");
    header(&m, 0, 1);
    put_str(&m, "k");
    put_u32(&m, GGUF_TYPE_ARRAY);
    put_u32(&m, GGUF_TYPE_ARRAY);
    put_u64(&m, 0);
    assert_rejected(&m, "arrays of arrays are not supported");
    header(&m, 0, 1);
    put_str(&m, "k");
    put_u32(&m, GGUF_TYPE_BOOL);
    put(&m, "\x02", 1);
    assert_rejected(&m, "bool value 2 is neither 0 nor 1");
    header(&m, 0, 1);
    put_str(&m, "");
    put_u32(&m, GGUF_TYPE_UINT8);
    put(&m, "\x02", 1);
    assert_rejected(&m, "empty key");
    header(&m, 0, 2);
    put_str(&m, "dup");
    put_u32(&m, GGUF_TYPE_UINT8);
    put(&m, "\x01", 1);
    put_str(&m, "dup");
    put_u32(&m, GGUF_TYPE_UINT8);
    put(&m, "\x02", 1);
    assert_rejected(&m, "offset 40: duplicate key 'dup' (first at offset 24)");
    /* garbage in a key is shown safely */
    header(&m, 0, 1);
    put_str(&m, "a\nb");
    put_u32(&m, 77);
    assert_rejected(&m, "key 'a?b'");
}

Test(gguf, bad_alignment_key) {
    img m;
    header(&m, 0, 1);
    put_str(&m, "general.alignment");
    put_u32(&m, GGUF_TYPE_UINT32);
    put_u32(&m, 48);
    assert_rejected(&m, "offset 24: general.alignment 48 is not a nonzero power of two");
    header(&m, 0, 1);
    put_str(&m, "general.alignment");
    put_u32(&m, GGUF_TYPE_UINT32);
    put_u32(&m, 0);
    assert_rejected(&m, "general.alignment 0 is not");
    header(&m, 0, 1);
    put_str(&m, "general.alignment");
    put_u32(&m, GGUF_TYPE_UINT64);
    put_u64(&m, 32);
    assert_rejected(&m, "general.alignment has type uint64, expected uint32");
}

/* One tensor info `info` (built by fill) followed by a data section of `data_bytes` zero bytes. */
#define ONE_TENSOR(m, data_bytes, ...)                                                                             \
    do {                                                                                                          \
        header(m, 1, 0);                                                                                          \
        __VA_ARGS__;                                                                                              \
        pad_to(m, 32);                                                                                            \
        zeros(m, data_bytes);                                                                                     \
    } while (0)

Test(gguf, bad_tensor_infos) {
    img m;
    ONE_TENSOR(&m, 64, tinfo(&m, "w", 99, 4, 0, 0));
    assert_rejected(&m, "offset 45: tensor 'w': unknown tensor type id 99");
    ONE_TENSOR(&m, 64, tinfo(&m, "w", 3 /* id 4,5 unused in ggml; 3 is q4_1 */, 4, 0, 0));
    assert_rejected(&m, "ne[0] = 4 is not a multiple of the q4_1 block size 32");
    ONE_TENSOR(&m, 64, tinfo(&m, "w", 4, 32, 0, 0));
    assert_rejected(&m, "unknown tensor type id 4");
    ONE_TENSOR(&m, 64, put_str(&m, "w"); put_u32(&m, 5); put_u64(&m, 1); put_u64(&m, 1); put_u64(&m, 1); put_u64(&m, 1);
               put_u64(&m, 1); put_u32(&m, 0); put_u64(&m, 0));
    assert_rejected(&m, "offset 33: tensor 'w': n_dims 5 out of range 1..4");
    ONE_TENSOR(&m, 64, put_str(&m, "w"); put_u32(&m, 0); put_u32(&m, 0); put_u64(&m, 0));
    assert_rejected(&m, "n_dims 0 out of range");
    ONE_TENSOR(&m, 64, tinfo(&m, "w", NF_TYPE_F32, 1ll << 62, 1ll << 62, 0));
    assert_rejected(&m, "tensor 'w': element count overflows");
    ONE_TENSOR(&m, 64, tinfo(&m, "w", NF_TYPE_F32, -1, 0, 0));
    assert_rejected(&m, "does not fit in int64");
    ONE_TENSOR(&m, 64, tinfo(&m, "w", NF_TYPE_F32, 1ll << 62, 0, 0));
    assert_rejected(&m, "tensor 'w': byte size overflows");
    ONE_TENSOR(&m, 64, tinfo(&m, "", NF_TYPE_F32, 4, 0, 0));
    assert_rejected(&m, "empty tensor name");
    char longname[300];
    memset(longname, 'n', 299);
    longname[299] = 0;
    ONE_TENSOR(&m, 64, tinfo(&m, longname, NF_TYPE_F32, 4, 0, 0));
    assert_rejected(&m, "tensor name length 299 exceeds 255 bytes");
}

Test(gguf, bad_tensor_data_ranges) {
    img m;
    /* misaligned offset */
    ONE_TENSOR(&m, 64, tinfo(&m, "w", NF_TYPE_F32, 4, 0, 16));
    assert_rejected(&m, "offset 49: tensor 'w': data offset 16 is not a multiple of the alignment 32");
    /* data past end of file: 8 floats need 32 bytes, only 16 present */
    ONE_TENSOR(&m, 16, tinfo(&m, "w", NF_TYPE_F32, 8, 0, 0));
    assert_rejected(&m, "offset 24: tensor 'w': data at offset 0 + 32 bytes (data section starts at 64) runs past end of file (size 80)");
    /* offset far past end, and offset + size overflowing */
    ONE_TENSOR(&m, 64, tinfo(&m, "w", NF_TYPE_F32, 8, 0, 1ull << 40));
    assert_rejected(&m, "runs past end of file");
    ONE_TENSOR(&m, 64, tinfo(&m, "w", NF_TYPE_F32, 8, 0, UINT64_MAX - 31));
    assert_rejected(&m, "runs past end of file");
    /* a valid one, for contrast */
    ONE_TENSOR(&m, 32, tinfo(&m, "w", NF_TYPE_F32, 8, 0, 0));
    gguf_file *f = open_img(&m);
    cr_assert_not_null(f, "%s", nf_error());
    cr_assert_eq(gguf_tensor_at(f, 0)->data, m.b + 64);
    gguf_close(f);
}

Test(gguf, duplicate_and_overlapping_tensors) {
    img m;
    header(&m, 2, 0);
    tinfo(&m, "w", NF_TYPE_F32, 8, 0, 0);
    tinfo(&m, "w", NF_TYPE_F32, 8, 0, 32);
    pad_to(&m, 32);
    zeros(&m, 64);
    assert_rejected(&m, "offset 57: duplicate tensor name 'w' (first at offset 24)");
    header(&m, 2, 0);
    tinfo(&m, "a", NF_TYPE_F32, 16, 0, 0);
    tinfo(&m, "b", NF_TYPE_F32, 8, 0, 32);
    pad_to(&m, 32);
    zeros(&m, 96);
    assert_rejected(&m, "tensor 'b' data [32, +32) overlaps tensor 'a' data [0, +64)");
    /* two tensors sharing one range */
    header(&m, 2, 0);
    tinfo(&m, "a", NF_TYPE_F32, 8, 0, 0);
    tinfo(&m, "b", NF_TYPE_F32, 8, 0, 0);
    pad_to(&m, 32);
    zeros(&m, 32);
    assert_rejected(&m, "overlaps");
}

Test(gguf, open_errors_name_the_file) {
    cr_assert_null(gguf_open("/nonexistent/x.gguf"));
    assert_err("/nonexistent/x.gguf: cannot open");
    cr_assert_null(gguf_open("/tmp"));
    assert_err("not a regular file");
    const char *path = tmp_path("empty.gguf");
    write_all(path, "", 0);
    cr_assert_null(gguf_open(path));
    assert_err("not a GGUF file");
    assert_err(path);
}

Test(gguf, lookup_among_many_keys_and_tensors) {
    const char *path = tmp_path("many.gguf");
    gguf_writer *w = gguf_writer_create(path);
    enum { NK = 1000, NT = 300 };
    char name[64];
    for (int i = 0; i < NK; i++) {
        int k = (i * 7919) % NK;  /* a permutation: declaration order differs from sorted order */
        snprintf(name, sizeof name, "k.%d", k);
        gguf_set_i32(w, name, k);
    }
    int64_t ne[1] = {32};
    for (int i = 0; i < NT; i++) {
        snprintf(name, sizeof name, "blk.%d.w", (i * 101) % NT);
        cr_assert_eq(gguf_writer_add_tensor(w, name, NF_TYPE_Q8_0, 1, ne), i);
    }
    cr_assert_eq(gguf_writer_begin_data(w), 0);
    uint8_t blk[34];
    for (int i = 0; i < NT; i++) {
        memset(blk, (i * 101) % NT, sizeof blk);
        cr_assert_eq(gguf_writer_write_tensor(w, blk, 34), 0);
    }
    cr_assert_eq(gguf_writer_finish(w), 0, "%s", nf_error());
    gguf_file *f = gguf_open(path);
    cr_assert_not_null(f, "%s", nf_error());
    for (int k = 0; k < NK; k++) {
        int64_t v;
        snprintf(name, sizeof name, "k.%d", k);
        cr_assert_eq(gguf_get_i64(f, name, &v), 0, "%s", nf_error());
        cr_assert_eq(v, k);
    }
    for (int k = 0; k < NT; k++) {
        snprintf(name, sizeof name, "blk.%d.w", k);
        const gguf_tensor *t = gguf_find_tensor(f, name);
        cr_assert_not_null(t, "%s", name);
        cr_assert_eq(((const uint8_t *)t->data)[33], k % 256);
    }
    cr_assert_null(gguf_find(f, "k.1000"));
    cr_assert_null(gguf_find(f, "k."));
    cr_assert_null(gguf_find_tensor(f, "blk.300.w"));
    gguf_close(f);
}

Test(gguf, writer_cannot_create_output) {
    gguf_writer *w = gguf_writer_create("/nonexistent-dir/x.gguf");
    cr_assert_not_null(w);
    gguf_set_u32(w, "x", 1);
    cr_assert_eq(gguf_writer_finish(w), -1);
    assert_err("/nonexistent-dir/x.gguf.tmp: cannot create: No such file or directory");
}

Test(gguf, declarations_after_begin_data_fail_the_file) {
    const char *path = tmp_path("late.gguf");
    gguf_writer *w = gguf_writer_create(path);
    gguf_set_u32(w, "a", 1);
    cr_assert_eq(gguf_writer_begin_data(w), 0);
    gguf_set_u32(w, "b", 2);  /* too late: the metadata is already written */
    cr_assert_eq(gguf_writer_finish(w), -1);
    assert_err("key 'b' set after the data section was started");
    cr_assert(!exists(path) && !exists(tmp_path("late.gguf.tmp")));
}
