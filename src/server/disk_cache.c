/* disk_cache.c — the on-disk state cache (see disk_cache.h). */
#include "server/disk_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/session_io.h"
#include "model/state.h"
#include "util/error.h"

#define MAGIC "NFKVC\0\0\1"
#define VERSION 1u

typedef struct {
    char magic[8];
    uint32_t version, header_bytes;
    uint64_t fingerprint;
    uint64_t n_tokens;
    uint64_t key;
    uint64_t payload_bytes;
    uint64_t checksum;
    uint64_t created;
    uint32_t dims[8]; /* n_layer, conv_rows, conv_width, kda_heads, kda_hd, kv_lora, idx_hd, kpool */
    uint32_t n_vocab, reserved;
} file_header;

struct nf_disk_cache {
    char *dir;
    uint64_t budget;
    uint64_t fingerprint;
    int64_t min_tokens;
    pthread_mutex_t mu;
};

uint64_t nf_fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static uint64_t key_of(const int32_t *ids, size_t n) { return nf_fnv1a(NF_FNV_INIT, ids, n * sizeof *ids); }

nf_disk_cache *nf_disk_cache_open(const char *dir, uint64_t budget_bytes, uint64_t fingerprint, int64_t min_tokens) {
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        nf_fail("--kv-disk-dir %s: %s", dir, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
        nf_fail("--kv-disk-dir %s: not a directory", dir);
        return NULL;
    }
    nf_disk_cache *c = nf_xcalloc(1, sizeof *c);
    c->dir = nf_xstrdup(dir);
    c->budget = budget_bytes;
    c->fingerprint = fingerprint;
    c->min_tokens = min_tokens > 0 ? min_tokens : 1;
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void nf_disk_cache_close(nf_disk_cache *c) {
    if (!c) return;
    pthread_mutex_destroy(&c->mu);
    free(c->dir);
    free(c);
}

static void file_name(const nf_disk_cache *c, char *out, size_t cap, uint64_t key, uint64_t n) {
    snprintf(out, cap, "%s/%016" PRIx64 "-%" PRIu64 ".nfkv", c->dir, key, n);
}

/* ---- state (de)serialisation ---------------------------------------------------------------------------- */

typedef struct {
    FILE *f;
    uint64_t sum, bytes;
    bool bad;
} io;

static void put(io *w, const void *p, size_t n) {
    if (w->bad || !n) return;
    if (fwrite(p, 1, n, w->f) != n) w->bad = true;
    w->sum = nf_fnv1a(w->sum, p, n);
    w->bytes += n;
}

static void get(io *r, void *p, size_t n) {
    if (r->bad || !n) return;
    if (fread(p, 1, n, r->f) != n) {
        r->bad = true;
        return;
    }
    r->sum = nf_fnv1a(r->sum, p, n);
    r->bytes += n;
}

static void dims_of(const nf_state *st, uint32_t d[8]) {
    d[0] = (uint32_t)st->n_layer, d[1] = (uint32_t)st->conv_rows, d[2] = (uint32_t)st->conv_width;
    d[3] = (uint32_t)st->kda_heads, d[4] = (uint32_t)st->kda_hd, d[5] = (uint32_t)st->kv_lora;
    d[6] = (uint32_t)st->idx_hd, d[7] = (uint32_t)st->kpool;
}

/* the arrays of a state in file order; `rd` reads into st (already sized), else writes from it */
static void state_io(io *x, nf_state *st, bool rd) {
    size_t conv = (size_t)st->conv_rows * st->conv_width, S = (size_t)st->kda_heads * st->kda_hd * st->kda_hd;
    size_t open = (size_t)st->kpool * st->idx_hd;
    for (int l = 0; l < st->n_layer; l++) {
        nf_layer_state *L = &st->L[l];
        uint32_t kind = (uint32_t)L->kind;
        if (rd) {
            uint32_t k = 0;
            get(x, &k, sizeof k);
            if (k != kind) x->bad = true;
        } else {
            put(x, &kind, sizeof kind);
        }
        if (x->bad) return;
        void (*op)(io *, void *, size_t) = rd ? get : (void (*)(io *, void *, size_t))put;
        if (L->kind == NF_LAYER_KDA) {
            op(x, L->conv, conv * sizeof(float));
            op(x, L->S, S * sizeof(float));
        } else {
            op(x, L->latent, (size_t)st->pos * st->kv_lora * sizeof(float));
            op(x, L->pool_key, (size_t)(st->pos / st->kpool) * st->idx_hd * sizeof(float));
            op(x, L->open_key, open * sizeof(float));
            op(x, L->open_gate, open * sizeof(float));
        }
    }
}

/* ---- save ------------------------------------------------------------------------------------------------- */

static void evict(nf_disk_cache *c, const char *keep);

int nf_disk_cache_save(nf_disk_cache *c, nf_session *s) {
    size_t n;
    const int32_t *ids = nf_session_tokens(s, &n);
    const float *logits = nf_session_logits(s);
    const nf_state *st = nf_session_state(s);
    if ((int64_t)n < c->min_tokens || !logits || st->hooks || st->pos != (int64_t)n) return 0;
    uint64_t key = key_of(ids, n);
    char path[4096], tmp[4200];
    file_name(c, path, sizeof path, key, n);
    pthread_mutex_lock(&c->mu);
    if (access(path, F_OK) == 0) {
        pthread_mutex_unlock(&c->mu);
        return 0;
    }
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        pthread_mutex_unlock(&c->mu);
        return nf_fail("disk cache: %s: %s", tmp, strerror(errno));
    }
    const nf_model *m = nf_session_model(s);
    file_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, MAGIC, 8);
    h.version = VERSION;
    h.header_bytes = sizeof h;
    h.fingerprint = c->fingerprint;
    h.n_tokens = n;
    h.key = key;
    h.created = (uint64_t)time(NULL);
    dims_of(st, h.dims);
    h.n_vocab = (uint32_t)m->hp.n_vocab;
    io w = {.f = f, .sum = NF_FNV_INIT};
    if (fwrite(&h, sizeof h, 1, f) != 1) w.bad = true;
    put(&w, ids, n * sizeof *ids);
    put(&w, logits, (size_t)m->hp.n_vocab * sizeof(float));
    state_io(&w, (nf_state *)st, false);
    h.payload_bytes = w.bytes;
    h.checksum = w.sum;
    if (!w.bad && (fseek(f, 0, SEEK_SET) != 0 || fwrite(&h, sizeof h, 1, f) != 1)) w.bad = true;
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) w.bad = true;
    if (fclose(f) != 0) w.bad = true;
    if (w.bad || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        pthread_mutex_unlock(&c->mu);
        return nf_fail("disk cache: writing %s failed: %s", path, strerror(e));
    }
    evict(c, path);
    pthread_mutex_unlock(&c->mu);
    return 1;
}

/* ---- eviction --------------------------------------------------------------------------------------------- */

typedef struct {
    char name[300];
    uint64_t bytes;
    struct timespec mtime;
} fent;

static int list_files(nf_disk_cache *c, fent **out) {
    DIR *d = opendir(c->dir);
    if (!d) return 0;
    int n = 0, cap = 0;
    fent *v = NULL;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 5, ".nfkv") || l >= sizeof v->name) continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", c->dir, de->d_name);
        struct stat st;
        if (stat(p, &st) < 0 || !S_ISREG(st.st_mode)) continue;
        if (n == cap) v = nf_xrealloc(v, (size_t)(cap = cap ? cap * 2 : 16) * sizeof *v);
        snprintf(v[n].name, sizeof v[n].name, "%s", de->d_name);
        v[n].bytes = (uint64_t)st.st_size;
        v[n].mtime = st.st_mtim;
        n++;
    }
    closedir(d);
    *out = v;
    return n;
}

static int older(const void *a, const void *b) {
    const fent *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec) return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
    return strcmp(x->name, y->name);
}

static void evict(nf_disk_cache *c, const char *keep) {
    if (!c->budget) return;
    fent *v = NULL;
    int n = list_files(c, &v);
    uint64_t total = 0;
    for (int i = 0; i < n; i++) total += v[i].bytes;
    qsort(v, (size_t)n, sizeof *v, older);
    const char *keep_base = strrchr(keep, '/') ? strrchr(keep, '/') + 1 : keep;
    for (int i = 0; i < n && total > c->budget; i++) {
        if (!strcmp(v[i].name, keep_base)) continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", c->dir, v[i].name);
        if (unlink(p) == 0) total -= v[i].bytes;
    }
    free(v);
}

void nf_disk_cache_usage(nf_disk_cache *c, int *files, uint64_t *bytes) {
    fent *v = NULL;
    pthread_mutex_lock(&c->mu);
    int n = list_files(c, &v);
    pthread_mutex_unlock(&c->mu);
    uint64_t t = 0;
    for (int i = 0; i < n; i++) t += v[i].bytes;
    free(v);
    *files = n;
    *bytes = t;
}

/* ---- load ------------------------------------------------------------------------------------------------- */

static void drop(const char *path, const char *why) {
    fprintf(stderr, "nf-server: disk cache: skipping %s (%s)\n", path, why);
    unlink(path);
}

/* Read and check one file against ids; on success the session continues from it. */
static int load_file(nf_disk_cache *c, nf_session *s, const char *path, const int32_t *ids, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    file_header h;
    const nf_model *m = nf_session_model(s);
    const nf_state *live = nf_session_state(s);
    uint32_t dims[8];
    dims_of(live, dims);
    if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, MAGIC, 8) || h.version != VERSION ||
        h.header_bytes != sizeof h) {
        fclose(f);
        drop(path, "bad header");
        return 0;
    }
    if (h.fingerprint != c->fingerprint || memcmp(h.dims, dims, sizeof dims) || h.n_vocab != (uint32_t)m->hp.n_vocab) {
        fclose(f);
        return 0; /* another model's file: not ours to delete */
    }
    if (h.n_tokens == 0 || h.n_tokens > n) {
        fclose(f);
        return 0;
    }
    size_t nt = (size_t)h.n_tokens;
    int32_t *toks = nf_xmalloc(nt * sizeof *toks);
    float *logits = nf_xmalloc((size_t)m->hp.n_vocab * sizeof(float));
    nf_state *st = nf_state_create(&m->hp, (int64_t)nt);
    io r = {.f = f, .sum = NF_FNV_INIT};
    int rc = 0;
    if (!st) goto out;
    get(&r, toks, nt * sizeof *toks);
    if (r.bad || memcmp(toks, ids, nt * sizeof *toks)) {
        if (!r.bad) rc = 0; /* a hash collision: not this prefix */
        else drop(path, "truncated");
        goto out;
    }
    get(&r, logits, (size_t)m->hp.n_vocab * sizeof(float));
    st->pos = (int64_t)nt;
    state_io(&r, st, true);
    char extra;
    if (r.bad || r.bytes != h.payload_bytes || fread(&extra, 1, 1, f) != 0) {
        drop(path, "truncated or wrong size");
        goto out;
    }
    if (r.sum != h.checksum) {
        drop(path, "checksum mismatch");
        goto out;
    }
    if (nf_session_adopt(s, toks, nt, st, logits) < 0) {
        fprintf(stderr, "nf-server: disk cache: %s: %s\n", path, nf_error());
        goto out;
    }
    utimensat(AT_FDCWD, path, NULL, 0); /* recently used */
    rc = 1;
out:
    fclose(f);
    nf_state_free(st);
    free(toks);
    free(logits);
    return rc;
}

int64_t nf_disk_cache_load(nf_disk_cache *c, nf_session *s, const int32_t *ids, size_t n, int64_t better_than) {
    fent *v = NULL;
    pthread_mutex_lock(&c->mu);
    int nf = list_files(c, &v);
    /* candidates: token count in (better_than, n], hash of that prefix equal to the name; longest first */
    int64_t loaded = 0;
    for (;;) {
        int best = -1;
        uint64_t best_n = 0;
        for (int i = 0; i < nf; i++) {
            uint64_t key, cnt;
            if (!v[i].name[0] || sscanf(v[i].name, "%16" SCNx64 "-%" SCNu64 ".nfkv", &key, &cnt) != 2) continue;
            if ((int64_t)cnt <= better_than || cnt > n || cnt <= best_n) continue;
            if (key_of(ids, (size_t)cnt) != key) continue;
            best = i, best_n = cnt;
        }
        if (best < 0) break;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", c->dir, v[best].name);
        if (load_file(c, s, p, ids, n)) {
            loaded = (int64_t)best_n;
            break;
        }
        v[best].name[0] = 0; /* unusable: try the next longest */
    }
    pthread_mutex_unlock(&c->mu);
    free(v);
    return loaded;
}
