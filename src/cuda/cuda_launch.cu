/* cuda_launch.cu — the PDL switch of cuda_launch.h.
 *
 * NF_CUDA_PDL=decode (default): PDL for the launches of forwards of at most NF_CUDA_GEMV_MAX_VECTORS tokens
 * (decode, short verifies), plain stream order for prefill chunks; on: always; off: never. The backend tells the
 * size of each forward with nf_cuda_pdl_forward(T) (its embedding lookup, the first op of a forward). */
#include "cuda/cuda_launch.h"
#include "cuda/cuda_gemv.h"

#include <stdlib.h>
#include <string.h>

static int g_mode = -1; /* 0 off, 1 on, 2 decode */
static int g_active = 1;

static int mode(void) {
    if (g_mode < 0) {
        const char *e = getenv("NF_CUDA_PDL");
        g_mode = !e || !*e || !strcmp(e, "decode") ? 2 : !strcmp(e, "off") || !strcmp(e, "0") ? 0 : 1;
    }
    return g_mode;
}

void nf_cuda_pdl_forward(int T) {
    const int m = mode();
    g_active = m == 1 || (m == 2 && T <= NF_CUDA_GEMV_MAX_VECTORS);
}

int nf_cuda_pdl_enabled(void) { return mode() && g_active; }
