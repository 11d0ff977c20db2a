/* cmd_logits.c — `nf logits`: teacher-forced logits of every position of a token sequence, the engine's
 * parity interface against the reference (transformers) fixtures.
 *
 *   nf logits -m MODEL.gguf --tokens IDS_FILE --out OUT.f32 [--chunk N] [--topk-indices OUT.i32] [--threads N]
 *             [--backend cpu|cuda]
 *
 * IDS_FILE holds whitespace-separated token ids. OUT.f32 receives raw little-endian float32 logits,
 * [positions][n_vocab] row-major. --chunk N prefills N tokens per forward call (default: all in one call;
 * 1 = token-by-token decode); the results must not depend on it. --topk-indices writes the DSA indexer's
 * selected positions as int32 [mla_layers][positions][width] (width = index_topk + index_kpool - 1 with the
 * forced tail, else index_topk; MLA layers in layer order; a shared-indexer layer gets the selection it
 * reused), each row: the selected pools' token positions (pools in descending score order when the budget
 * is exceeded, else ascending), then the tail, -1 padded — compare rows as sets, like the fixtures'
 * topk.i32. Timing goes to stderr. --backend cuda (builds with NF_CUDA only: `make cuda`) runs the forward on
 * the GPU with the state in device memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app/commands.h"
#include "cpu/backend_cpu.h"
#ifdef NF_CUDA
#include "cuda/backend_cuda.h"
#endif
#include "model/forward.h"
#include "model/model.h"
#include "model/state.h"
#include "util/ctx_arg.h"
#include "util/error.h"

static void usage(FILE *f) {
    fprintf(f, "usage: nf logits -m MODEL.gguf --tokens IDS_FILE --out OUT.f32 [--chunk N] [--topk-indices OUT.i32]"
               " [--threads N] [--backend cpu|cuda] [--ctx N]\n"
               "\nTeacher-forced logits of every position: raw little-endian float32 [positions][vocab].\n"
               "  --chunk N          tokens per forward call (default: all; 1 = token-by-token decode)\n"
               "  --topk-indices F   int32 [mla_layers][positions][index_topk + kpool - 1]: indexer selections\n"
               "  --threads N        CPU threads (default: NF_THREADS or all cores)\n"
               "  --backend B        cpu (default) or cuda (GPU builds only: make cuda)\n"
               "  --ctx N            context size: more positions than N are refused before any work (default and\n"
               "                     maximum: the model's context length)\n");
}

static int32_t *read_ids(const char *path, int64_t *n) {
    FILE *f = fopen(path, "r");
    if (!f) return (void)nf_fail("cannot open %s", path), NULL;
    int64_t cap = 1024, k = 0;
    int32_t *ids = nf_xmalloc((size_t)cap * sizeof *ids);
    long long v;
    int r;
    while ((r = fscanf(f, "%lld", &v)) == 1) {
        if (v < 0 || v > INT32_MAX) {
            fclose(f);
            free(ids);
            return (void)nf_fail("%s: token id %lld out of range", path, v), NULL;
        }
        if (k == cap) ids = nf_xrealloc(ids, (size_t)(cap *= 2) * sizeof *ids);
        ids[k++] = (int32_t)v;
    }
    int bad = r != EOF;
    fclose(f);
    if (bad) {
        free(ids);
        return (void)nf_fail("%s: not a list of whitespace-separated integers (after %lld ids)", path, (long long)k), NULL;
    }
    if (k == 0) {
        free(ids);
        return (void)nf_fail("%s: no token ids", path), NULL;
    }
    *n = k;
    return ids;
}

static int write_file(const char *path, const void *data, size_t bytes) {
    FILE *f = fopen(path, "wb");
    if (!f) return nf_fail("cannot create %s", path);
    size_t w = fwrite(data, 1, bytes, f);
    if (fclose(f) != 0 || w != bytes) return nf_fail("%s: write failed", path);
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int nf_cmd_logits(int argc, char **argv) {
    const char *model = NULL, *tokens = NULL, *out = NULL, *topk = NULL, *backend = "cpu";
    int chunk = 0, threads = 0;
    int64_t ctx = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && more) model = argv[++i];
        else if (!strcmp(a, "--tokens") && more) tokens = argv[++i];
        else if (!strcmp(a, "--out") && more) out = argv[++i];
        else if (!strcmp(a, "--topk-indices") && more) topk = argv[++i];
        else if (!strcmp(a, "--chunk") && more) chunk = atoi(argv[++i]);
        else if (!strcmp(a, "--threads") && more) threads = atoi(argv[++i]);
        else if (!strcmp(a, "--backend") && more) backend = argv[++i];
        else if (!strcmp(a, "--ctx") && more) {
            if (nf_parse_ctx_arg(argv[++i], &ctx) < 0) {
                fprintf(stderr, "%s logits: %s\n", nf_progname, nf_error());
                return 2;
            }
        }
        else {
            fprintf(stderr, "%s logits: unknown or incomplete option '%s'\n", nf_progname, a);
            usage(stderr);
            return 2;
        }
    }
    if (!model || !tokens || !out) {
        usage(stderr);
        return 2;
    }
    if (strcmp(backend, "cpu") && strcmp(backend, "cuda")) {
        fprintf(stderr, "%s logits: unknown backend '%s' (cpu or cuda)\n", nf_progname, backend);
        return 2;
    }
#ifndef NF_CUDA
    if (!strcmp(backend, "cuda")) {
        fprintf(stderr, "%s: error: this build has no CUDA backend; build with `make cuda` and use build/cuda/nf\n",
                nf_progname);
        return 2;
    }
#endif
    int64_t n = 0;
    int32_t *ids = read_ids(tokens, &n);
    if (!ids) {
        fprintf(stderr, "%s: error: %s\n", nf_progname, nf_error());
        return 1;
    }
    nf_model *m = nf_model_load(model);
    if (!m) {
        fprintf(stderr, "%s: error: %s\n", nf_progname, nf_error());
        free(ids);
        return 1;
    }
    const int64_t train = m->hp.n_ctx_train;
    if ((ctx > 0 && train > 0 && ctx > train) || n > (ctx > 0 ? ctx : train > 0 ? train : n)) {
        if (ctx > 0 && train > 0 && ctx > train)
            fprintf(stderr, "%s logits: refused: --ctx %lld exceeds the model's context length %lld\n", nf_progname,
                    (long long)ctx, (long long)train);
        else
            fprintf(stderr, "%s logits: refused: %s holds %lld positions; the context size is %lld (%s)\n", nf_progname,
                    tokens, (long long)n, (long long)(ctx > 0 ? ctx : train),
                    ctx > 0 ? "--ctx" : "the model's context length");
        nf_model_free(m);
        free(ids);
        return 2;
    }
    int rc = 1;
    nf_backend *be = NULL;
#ifdef NF_CUDA
    if (!strcmp(backend, "cuda")) be = nf_backend_cuda_create(m, 0);
    else
#endif
        be = nf_cpu_backend_create(m, threads);
    nf_state *st = be ? nf_backend_state_create(be, n) : NULL;
    if (st) nf_state_set_limit(st, ctx > 0 ? ctx : train);
    const int64_t V = m->hp.n_vocab;
    float *logits = malloc((size_t)n * V * sizeof(float));
    nf_topk_dump dump = {0}, *dp = NULL;
    int n_mla = nf_mla_layer_count(&m->hp), width = nf_topk_width(&m->hp);
    if (topk && n_mla > 0) {
        dump.n_pos = n;
        dump.buf = malloc((size_t)n_mla * n * width * sizeof(int32_t));
        dp = &dump;
    }
    if (!be || !st || !logits || (dp && !dump.buf)) {
        if (!logits || (dp && !dump.buf)) nf_fail("out of memory for %lld positions", (long long)n);
        goto done;
    }
    for (int64_t i = 0; i < n; i++)
        if (ids[i] >= V) {
            nf_fail("%s: token id %d at position %lld >= vocabulary size %lld", tokens, ids[i], (long long)i, (long long)V);
            goto done;
        }
    double t0 = now_s();
    if (nf_prefill(be, st, ids, n, chunk, logits, 1, dp) < 0) goto done;
    double dt = now_s() - t0;
    fprintf(stderr, "logits: %lld positions in %.3f s (%.1f tokens/s, chunk %d)\n", (long long)n, dt,
            (double)n / (dt > 0 ? dt : 1e-9), chunk > 0 ? chunk : (int)n);
    if (write_file(out, logits, (size_t)n * V * sizeof(float)) < 0) goto done;
    if (topk) {
        if (n_mla == 0) {
            if (write_file(topk, "", 0) < 0) goto done;
        } else if (write_file(topk, dump.buf, (size_t)n_mla * n * width * sizeof(int32_t)) < 0) goto done;
    }
    rc = 0;
done:
    if (rc) fprintf(stderr, "%s: error: %s\n", nf_progname, nf_error());
    free(dump.buf);
    free(logits);
    nf_state_free(st);
    nf_backend_free(be);
    nf_model_free(m);
    free(ids);
    return rc;
}
