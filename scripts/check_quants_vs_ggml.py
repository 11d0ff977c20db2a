#!/usr/bin/env python3
"""Compare our quantizers with ggml's own (a development check, not part of `make test`).

usage: scripts/check_quants_vs_ggml.py GGML_DIR [BUILD]

GGML_DIR is a ggml source tree (for example vendor/llama.cpp/ggml inside the llama-cpp-python source
distribution: `pip download --no-deps llama-cpp-python`, unpack it in /tmp). Only ggml-quants.c is compiled, in
a temporary directory, together with a few stub functions; nothing from it enters this repository.

Checks, on four distributions of 64 x 1024 values: our weights-only quantizers for q8_0, q6_K, q4_K, q2_K and
the q8_K activation quantizer produce the same bytes as ggml's quantize_row_*_ref (exit status 1 if not); and
prints the error of our importance-matrix paths (K-quants, iq2_xxs) next to ggml's quantize_* ones, which use a
different scale refinement and so are not expected to be byte-identical."""
import ctypes
import os
import subprocess
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "py"))

SHIM = r"""
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
void ggml_abort(const char *file, int line, const char *fmt, ...) { fprintf(stderr, "%s:%d %s\n", file, line, fmt); abort(); }
static size_t bs(int t) { return t == 8 ? 32 : (t >= 10 && t <= 16) ? 256 : 1; }
static size_t ts(int t) { switch (t) { case 0: return 4; case 8: return 34; case 10: return 84; case 12: return 144;
    case 14: return 210; case 15: return 292; case 16: return 66; default: return 2; } }
size_t ggml_type_size(int t) { return ts(t); }
size_t ggml_row_size(int t, int64_t ne) { return ts(t) * (size_t)ne / bs(t); }
const char *ggml_type_name(int t) { (void)t; return "?"; }
"""


def build(ggml_dir, tmp):
    shim = os.path.join(tmp, "shim.c")
    with open(shim, "w") as f:
        f.write(SHIM)
    so = os.path.join(tmp, "libggmlq.so")
    # baseline x86-64 and -ffp-contract=off: ggml's scalar reference code, no fused multiply-add
    subprocess.check_call(["gcc", "-O2", "-std=gnu11", "-ffp-contract=off", "-fPIC", "-shared",
                           "-I" + os.path.join(ggml_dir, "include"), "-I" + os.path.join(ggml_dir, "src"),
                           os.path.join(ggml_dir, "src", "ggml-quants.c"), shim, "-o", so, "-lm"])
    return ctypes.CDLL(so)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    if len(sys.argv) > 2:
        os.environ["NF_BUILD"] = sys.argv[2]
    import test_formats_gguf as t
    from gguf import GGMLQuantizationType as T

    with tempfile.TemporaryDirectory() as tmp:
        g = build(sys.argv[1], tmp)
        P = ctypes.c_void_p
        ref_fn = {T.Q8_0: "quantize_row_q8_0_ref", T.Q6_K: "quantize_row_q6_K_ref",
                  T.Q4_K: "quantize_row_q4_K_ref", T.Q2_K: "quantize_row_q2_K_ref", 15: "quantize_row_q8_K_ref"}
        imp_fn = {T.Q6_K: "quantize_q6_K", T.Q4_K: "quantize_q4_K", T.Q2_K: "quantize_q2_K",
                  T.IQ2_XXS: "quantize_iq2_xxs"}
        for name in ref_fn.values():
            getattr(g, name).argtypes = [P, P, ctypes.c_int64]
        for name in imp_fn.values():
            getattr(g, name).argtypes = [P, P, ctypes.c_int64, ctypes.c_int64, P]
            getattr(g, name).restype = ctypes.c_size_t
        g.iq2xs_init_impl.argtypes = [ctypes.c_int]
        g.iq2xs_init_impl(int(T.IQ2_XXS))

        def rel(x, y, w):
            return float(np.sqrt(np.sum(w * (y - x) ** 2) / np.sum(w * x ** 2)))

        bad = 0
        for dist in ["normal", "uniform", "heavy", "sparse"]:
            x = t.data(dist, (64, 1024), 5)
            for qt, fn in ref_fn.items():
                ours = np.zeros(t.lib.nf_row_bytes(int(qt), x.size), np.uint8)
                t.lib.nf_quantize(int(qt), t.ptr(x), t.ptr(ours), x.size, 1024, None)
                ref = np.zeros_like(ours)
                getattr(g, fn)(x.ctypes.data, ref.ctypes.data, x.size)
                same = np.array_equal(ours, ref)
                bad += not same
                print(f"{dist:8s} {getattr(qt, 'name', 'Q8_K'):8s} weights-only bytes equal to ggml: {same}")
            im = np.ascontiguousarray(np.random.default_rng(3).uniform(0.1, 10, 1024).astype(np.float32))
            w = np.tile(im, (64, 1))
            for qt, fn in imp_fn.items():
                ours = t.our_quantize(x, qt, im)
                ref = np.zeros(ours.size, np.uint8)
                getattr(g, fn)(x.ctypes.data, ref.ctypes.data, 64, 1024, im.ctypes.data)
                eo = rel(x, t.our_dequantize(ours, qt, x.shape), w)
                er = rel(x, t.our_dequantize(ref, qt, x.shape), w)
                print(f"{dist:8s} {qt.name:8s} imatrix weighted rel. rmse: ours {eo:.5f}  ggml {er:.5f}")
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
