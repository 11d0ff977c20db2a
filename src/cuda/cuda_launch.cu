/* cuda_launch.cu — the PDL switch of cuda_launch.h (NF_CUDA_PDL=off|on, default on), read once per process. */
#include "cuda/cuda_launch.h"

#include <stdlib.h>
#include <string.h>

int nf_cuda_pdl_enabled(void) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("NF_CUDA_PDL");
        on = !(e && (!strcmp(e, "off") || !strcmp(e, "0")));
    }
    return on;
}
