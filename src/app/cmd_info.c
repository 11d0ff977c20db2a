/* cmd_info.c — `nf info MODEL`: load a glm5-next GGUF with nf_model_load (every tensor bound and checked)
 * and print the summary. On a mismatch it prints the complete list, one tensor per line. */
#include <stdio.h>
#include <string.h>

#include "app/commands.h"
#include "model/model.h"
#include "util/error.h"

int nf_cmd_info(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: nf info MODEL.gguf\n\nLoads the model (hyperparameters, every tensor bound with shape and type\n"
               "checks) and prints a summary: dimensions, layer pattern, parameters and bytes by type.\n");
        return 0;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: nf info MODEL.gguf\n");
        return 2;
    }
    nf_model *m = nf_model_load(argv[1]);
    if (!m) {
        const char *all = nf_model_mismatches();
        if (*all) {
            fprintf(stderr, "%s: error: %s: tensors do not match the glm5-next layout:\n%s", nf_progname, argv[1], all);
            return 1;
        }
        fprintf(stderr, "%s: error: %s\n", nf_progname, nf_error());
        return 1;
    }
    nf_model_print_summary(m);
    nf_model_free(m);
    return 0;
}
