/* nf-convert — convert a Hugging Face glm5_next checkpoint folder to a GGUF file (llama.cpp glm5-next layout).
 *
 * Thin wrapper over nf_convert (src/convert/convert.h): parses flags, installs a SIGINT/SIGTERM handler that
 * stops the conversion cleanly (no partial output file), prints the error on failure. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "convert/convert.h"
#include "model/recipe.h"
#include "util/error.h"

static volatile sig_atomic_t cancel_flag = 0;

static void on_signal(int sig) {
    (void)sig;
    cancel_flag = 1;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: nf-convert HF_DIR -o OUT.gguf [--recipe R] [options]\n"
            "       nf-convert HF_DIR --dry-run [--recipe R]\n"
            "\n"
            "Convert a Hugging Face glm5_next checkpoint (config.json + model.safetensors or a sharded\n"
            "model.safetensors.index.json; BF16/F16/F32 or FP8 E4M3 with 128x128 block scales) to one GGUF file\n"
            "in the llama.cpp glm5-next layout. Tokenizer metadata is added when tokenizer.json is present.\n"
            "The file is written to OUT.gguf.tmp and renamed when complete.\n"
            "\n"
            "options:\n"
            "  -o, --output PATH     output GGUF (required)\n"
            "  -r, --recipe R        storage types per tensor role (default q4):\n");
    for (int i = 0; nf_recipe_at(i); i++)
        fprintf(f, "                          %-5s %s\n", nf_recipe_at(i)->name, nf_recipe_at(i)->description);
    fprintf(f,
            "  -t, --threads N       quantization threads (default: all CPUs)\n"
            "      --no-tokenizer    do not write tokenizer metadata\n"
            "      --mtp             also convert the MTP/NextN block(s) (blk.N for N >= num_hidden_layers;\n"
            "                        the engine does not run them yet; default: skipped)\n"
            "  -n, --dry-run         check the checkpoint and print the plan (sources, types, sizes); write nothing\n"
            "  -q, --quiet           no progress bar and no per-tensor summary\n"
            "  -h, --help            this help\n"
            "\n"
            "The vision tower is not converted.\n");
}

int main(int argc, char **argv) {
    nf_progname = "nf-convert";
    nf_convert_opts o = {.recipe = "q4", .cancel = &cancel_flag};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VAL() do { if (!val) nf_die("%s needs a value (see --help)", a); i++; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            NEED_VAL();
            o.out_path = val;
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
        } else if (!strcmp(a, "-n") || !strcmp(a, "--dry-run")) {
            o.dry_run = true;
        } else if (!strcmp(a, "--mtp")) {
            o.mtp = true;
        } else if (!strcmp(a, "--no-tokenizer")) {
            o.no_tokenizer = true;
        } else if (a[0] == '-' && a[1]) {
            nf_die("unknown option '%s' (see --help)", a);
        } else if (!o.hf_dir) {
            o.hf_dir = a;
        } else {
            nf_die("unexpected argument '%s' (one HF_DIR only; see --help)", a);
        }
#undef NEED_VAL
    }
    if (!o.hf_dir) {
        usage(stderr);
        return 2;
    }
    if (!o.out_path && !o.dry_run) nf_die("no output file: use -o OUT.gguf (see --help)");
    if (!o.out_path) o.out_path = "(dry run)";
    if (!nf_recipe_find(o.recipe)) nf_die("%s", nf_error());

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    if (nf_convert(&o, NULL) < 0) {
        if (!o.quiet && isatty(2)) fputc('\n', stderr); /* end the progress line */
        if (cancel_flag) {
            fprintf(stderr, "%s: interrupted, no output written\n", nf_progname);
            return 130;
        }
        nf_die("%s", nf_error());
    }
    return cancel_flag ? 130 : 0;
}
