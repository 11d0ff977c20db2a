/* nf-quantize — re-quantize a glm5-next GGUF to another recipe (f32, bf16, q8, q4, q2).
 *
 * Thin wrapper over nf_requantize (src/model/requantize.h): same per-role types and fallbacks as nf-convert,
 * all metadata (tokenizer included) copied, tensors streamed one at a time to OUT.tmp, renamed when complete.
 * SIGINT/SIGTERM stop it cleanly (no output file). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/recipe.h"
#include "model/requantize.h"
#include "util/error.h"

static volatile sig_atomic_t cancel_flag = 0;

static void on_signal(int sig) {
    (void)sig;
    cancel_flag = 1;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: nf-quantize IN.gguf OUT.gguf --recipe R [options]\n"
            "\n"
            "Re-quantize a glm5-next GGUF: every tensor takes the type recipe R gives its role (the same table\n"
            "and fallbacks as nf-convert); tensors whose type does not change are copied byte for byte; all\n"
            "metadata (tokenizer included) is copied. Re-quantizing already block-quantized weights compounds\n"
            "their error: convert from the original checkpoint when you have it.\n"
            "\n"
            "options:\n"
            "  -r, --recipe R        target recipe (required):\n");
    for (int i = 0; nf_recipe_at(i); i++)
        fprintf(f, "                          %-5s %s\n", nf_recipe_at(i)->name, nf_recipe_at(i)->description);
    fprintf(f,
            "  -t, --threads N       quantization threads (default: all CPUs)\n"
            "  -q, --quiet           no progress and no summary\n"
            "  -h, --help            this help\n");
}

int main(int argc, char **argv) {
    nf_progname = "nf-quantize";
    nf_requantize_opts o = {.cancel = &cancel_flag};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VAL() do { if (!val) nf_die("%s needs a value (see --help)", a); i++; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-r") || !strcmp(a, "--recipe")) {
            NEED_VAL();
            o.recipe = val;
        } else if (!strncmp(a, "--recipe=", 9)) {
            o.recipe = a + 9;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            NEED_VAL();
            char *end;
            long v = strtol(val, &end, 10);
            if (*end || v < 1 || v > 1024) nf_die("--threads: '%s' is not a positive number", val);
            o.n_threads = (int)v;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            o.quiet = true;
        } else if (a[0] == '-' && a[1]) {
            nf_die("unknown option '%s' (see --help)", a);
        } else if (!o.in_path) {
            o.in_path = a;
        } else if (!o.out_path) {
            o.out_path = a;
        } else {
            nf_die("unexpected argument '%s' (see --help)", a);
        }
#undef NEED_VAL
    }
    if (!o.in_path || !o.out_path) {
        usage(stderr);
        return 2;
    }
    if (!o.recipe) nf_die("no recipe: use --recipe R (%s)", nf_recipe_names());
    if (!nf_recipe_find(o.recipe)) nf_die("%s", nf_error());

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    if (nf_requantize(&o, NULL) < 0) {
        if (!o.quiet && isatty(2)) fputc('\n', stderr);
        if (cancel_flag) {
            fprintf(stderr, "%s: interrupted, no output written\n", nf_progname);
            return 130;
        }
        nf_die("%s", nf_error());
    }
    return cancel_flag ? 130 : 0;
}
