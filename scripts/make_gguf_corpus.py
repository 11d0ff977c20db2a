#!/usr/bin/env python3
"""make_gguf_corpus.py — write the seed corpus of the GGUF fuzzer (fuzz/corpus/gguf/).

A handful of tiny valid files written with the `gguf` PyPI package (the reference writer), covering every
metadata type, arrays (numeric, bool, string), tensors of plain and block-quantized types, a custom alignment
and an empty file; plus, when build/libnf.so exists (NF_BUILD), one file from our own writer with what the
package cannot write (empty arrays, an empty tensor, 4-d shapes). The fuzzer mutates these; keeping them small keeps mutations meaningful.
Usage: python3 scripts/make_gguf_corpus.py [OUTDIR]   (default fuzz/corpus/gguf)
"""
import os
import sys

import numpy as np
import gguf

VT = gguf.GGUFValueType
QT = gguf.GGMLQuantizationType


def write(path, fill, alignment=None):
    w = gguf.GGUFWriter(path, "corpus")
    if alignment:
        w.add_custom_alignment(alignment)
    fill(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def all_kv(w):
    w.add_key_value("t.u8", 200, VT.UINT8)
    w.add_key_value("t.i8", -100, VT.INT8)
    w.add_key_value("t.u16", 60000, VT.UINT16)
    w.add_key_value("t.i16", -30000, VT.INT16)
    w.add_key_value("t.u32", 4000000000, VT.UINT32)
    w.add_key_value("t.i32", -2000000000, VT.INT32)
    w.add_key_value("t.u64", 2**63 + 5, VT.UINT64)
    w.add_key_value("t.i64", -(2**62), VT.INT64)
    w.add_key_value("t.f32", 1.5, VT.FLOAT32)
    w.add_key_value("t.f64", -2.25, VT.FLOAT64)
    w.add_key_value("t.bool", True, VT.BOOL)
    w.add_key_value("t.str", "héllo", VT.STRING)
    w.add_key_value("t.arr_i32", [1, -2, 3], VT.ARRAY, VT.INT32)
    w.add_key_value("t.arr_f32", [0.5, 1.0], VT.ARRAY, VT.FLOAT32)
    w.add_key_value("t.arr_bool", [True, False, True], VT.ARRAY, VT.BOOL)
    w.add_key_value("t.arr_str", ["a", "", "ccc"], VT.ARRAY, VT.STRING)


def tensors(w):
    w.add_uint32("t.n", 3)
    w.add_tensor("a.weight", np.arange(8, dtype=np.float32).reshape(2, 4))
    w.add_tensor("b.weight", np.arange(6, dtype=np.float16))
    w.add_tensor("c.bias", np.ones((1, 2, 3), dtype=np.float32))


def quant(w):
    # raw block bytes: one Q8_0 row of 32 elements (34 bytes) and one Q4_K row of 256 elements (144 bytes)
    w.add_tensor("q8", np.full((1, 34), 7, dtype=np.uint8), raw_dtype=QT.Q8_0)
    w.add_tensor("q4k", np.full((1, 144), 3, dtype=np.uint8), raw_dtype=QT.Q4_K)


def aligned(w):
    w.add_string("t.name", "aligned")
    w.add_tensor("x", np.arange(3, dtype=np.float32))
    w.add_tensor("y", np.arange(5, dtype=np.float32))


def ours_edge(path):
    import ctypes as C
    lib_path = os.path.join(os.environ.get("NF_BUILD", "build"), "libnf.so")
    if not os.path.exists(lib_path):
        print(f"{lib_path} not found: skipping {path}")
        return
    L = C.CDLL(os.path.abspath(lib_path))
    L.gguf_writer_create.restype = C.c_void_p
    L.gguf_writer_create.argtypes = [C.c_char_p]
    for fn in ("gguf_set_u32", "gguf_set_arr", "gguf_set_arr_str", "gguf_writer_add_tensor",
               "gguf_writer_begin_data", "gguf_writer_write_tensor", "gguf_writer_finish"):
        getattr(L, fn).argtypes = None
    w = C.c_void_p(L.gguf_writer_create(path.encode()))
    L.gguf_set_u32(w, b"general.alignment", C.c_uint32(16))
    L.gguf_set_arr(w, b"e.u8", C.c_int(int(VT.UINT8)), None, C.c_uint64(0))
    L.gguf_set_arr_str(w, b"e.str", None, C.c_uint64(0))
    shapes = [("empty", QT.F32, [0, 2]), ("cube", QT.F16, [2, 1, 2, 2])]
    for name, qt, ne in shapes:
        L.gguf_writer_add_tensor(w, name.encode(), C.c_uint32(int(qt)), C.c_uint32(len(ne)), (C.c_int64 * 4)(*ne))
    assert L.gguf_writer_begin_data(w) == 0
    assert L.gguf_writer_write_tensor(w, None, C.c_uint64(0)) == 0
    data = (C.c_uint16 * 8)(*range(8))
    assert L.gguf_writer_write_tensor(w, data, C.c_uint64(16)) == 0
    assert L.gguf_writer_finish(w) == 0


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "fuzz/corpus/gguf"
    os.makedirs(out, exist_ok=True)
    write(os.path.join(out, "all_kv.gguf"), all_kv)
    write(os.path.join(out, "tensors.gguf"), tensors)
    write(os.path.join(out, "quant.gguf"), quant)
    write(os.path.join(out, "align64.gguf"), aligned, alignment=64)
    write(os.path.join(out, "empty.gguf"), lambda w: None)
    ours_edge(os.path.join(out, "ours_edge.gguf"))


if __name__ == "__main__":
    main()
