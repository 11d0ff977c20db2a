"""test_gguf_compat.py — our GGUF reader/writer against the reference `gguf` package, both directions.

(1) Files written by gguf.GGUFWriter (every metadata type, arrays, F32/F16/BF16/Q8_0 tensors, a custom
    alignment) are read by our reader (through build/libnf.so with ctypes) and by `nf-gguf --json`; keys, types,
    values, tensor names, shapes, types and bytes must match what the package wrote.
(2) Files written by our writer (through ctypes) are read by gguf.GGUFReader with the same comparison.
"""
import ctypes as C
import json
import os
import subprocess

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

BUILD = os.environ.get("NF_BUILD", "build")
VT = gguf.GGUFValueType
QT = gguf.GGMLQuantizationType


class GStr(C.Structure):
    _fields_ = [("ptr", C.c_void_p), ("len", C.c_uint64)]


class GKv(C.Structure):
    _fields_ = [("key", GStr), ("type", C.c_int), ("elem_type", C.c_int), ("count", C.c_uint64),
                ("data", C.c_void_p), ("offset", C.c_uint64)]


class GTensor(C.Structure):
    _fields_ = [("name", C.c_char * 256), ("n_dims", C.c_uint32), ("ne", C.c_int64 * 4), ("type", C.c_uint32),
                ("offset", C.c_uint64), ("size", C.c_uint64), ("data", C.c_void_p)]


@pytest.fixture(scope="module")
def lib():
    path = os.path.join(BUILD, "libnf.so")
    if not os.path.exists(path):
        pytest.fail(f"{path} missing: run make first")
    L = C.CDLL(os.path.abspath(path))
    L.gguf_open.restype = C.c_void_p
    L.gguf_open.argtypes = [C.c_char_p]
    L.gguf_close.argtypes = [C.c_void_p]
    L.nf_error.restype = C.c_char_p
    L.gguf_version.restype = C.c_uint32
    L.gguf_version.argtypes = [C.c_void_p]
    L.gguf_alignment.restype = C.c_uint64
    L.gguf_alignment.argtypes = [C.c_void_p]
    L.gguf_kv_count.restype = C.c_int64
    L.gguf_kv_count.argtypes = [C.c_void_p]
    L.gguf_kv_at.restype = C.POINTER(GKv)
    L.gguf_kv_at.argtypes = [C.c_void_p, C.c_int64]
    L.gguf_tensor_count.restype = C.c_int64
    L.gguf_tensor_count.argtypes = [C.c_void_p]
    L.gguf_tensor_at.restype = C.POINTER(GTensor)
    L.gguf_tensor_at.argtypes = [C.c_void_p, C.c_int64]
    L.gguf_arr_str.restype = GStr
    L.gguf_arr_str.argtypes = [C.POINTER(GKv), C.c_uint64]
    L.gguf_type_size.restype = C.c_size_t
    L.gguf_type_size.argtypes = [C.c_int]
    L.gguf_writer_create.restype = C.c_void_p
    L.gguf_writer_create.argtypes = [C.c_char_p]
    for name, ct in [("u8", C.c_uint8), ("i8", C.c_int8), ("u16", C.c_uint16), ("i16", C.c_int16),
                     ("u32", C.c_uint32), ("i32", C.c_int32), ("u64", C.c_uint64), ("i64", C.c_int64),
                     ("f32", C.c_float), ("f64", C.c_double), ("bool", C.c_bool), ("str", C.c_char_p)]:
        fn = getattr(L, "gguf_set_" + name)
        fn.restype = None
        fn.argtypes = [C.c_void_p, C.c_char_p, ct]
    L.gguf_set_arr.restype = None
    L.gguf_set_arr.argtypes = [C.c_void_p, C.c_char_p, C.c_int, C.c_void_p, C.c_uint64]
    L.gguf_set_arr_str.restype = None
    L.gguf_set_arr_str.argtypes = [C.c_void_p, C.c_char_p, C.POINTER(C.c_char_p), C.c_uint64]
    L.gguf_writer_set_alignment.restype = None
    L.gguf_writer_set_alignment.argtypes = [C.c_void_p, C.c_uint32]
    L.gguf_writer_add_tensor.restype = C.c_int
    L.gguf_writer_add_tensor.argtypes = [C.c_void_p, C.c_char_p, C.c_uint32, C.c_uint32, C.POINTER(C.c_int64)]
    L.gguf_writer_begin_data.argtypes = [C.c_void_p]
    L.gguf_writer_write_tensor.argtypes = [C.c_void_p, C.c_void_p, C.c_uint64]
    L.gguf_writer_finish.argtypes = [C.c_void_p]
    return L


NP_OF = {VT.UINT8: np.uint8, VT.INT8: np.int8, VT.UINT16: np.uint16, VT.INT16: np.int16, VT.UINT32: np.uint32,
         VT.INT32: np.int32, VT.FLOAT32: np.float32, VT.BOOL: np.bool_, VT.UINT64: np.uint64, VT.INT64: np.int64,
         VT.FLOAT64: np.float64}

# (key, value, type, element type) — one of everything
KVS = [
    ("t.u8", 200, VT.UINT8, None),
    ("t.i8", -100, VT.INT8, None),
    ("t.u16", 60000, VT.UINT16, None),
    ("t.i16", -30000, VT.INT16, None),
    ("t.u32", 4000000000, VT.UINT32, None),
    ("t.i32", -2000000000, VT.INT32, None),
    ("t.u64", 2**63 + 5, VT.UINT64, None),
    ("t.i64", -(2**62) - 3, VT.INT64, None),
    ("t.f32", 1.5, VT.FLOAT32, None),
    ("t.f64", -2.0 / 3.0, VT.FLOAT64, None),
    ("t.bool", True, VT.BOOL, None),
    ("t.bool_f", False, VT.BOOL, None),
    ("t.str", "h\u00e9llo \u4e2d", VT.STRING, None),
    ("t.arr_u8", [0, 1, 255], VT.ARRAY, VT.UINT8),
    ("t.arr_i16", [-1, 2, -32768], VT.ARRAY, VT.INT16),
    ("t.arr_u32", [7, 4000000000], VT.ARRAY, VT.UINT32),
    ("t.arr_i32", [1, -2, 3], VT.ARRAY, VT.INT32),
    ("t.arr_i64", [-(2**40), 5], VT.ARRAY, VT.INT64),
    ("t.arr_u64", [2**64 - 1, 0], VT.ARRAY, VT.UINT64),
    ("t.arr_f32", [0.5, -1.25, 3.0e-8], VT.ARRAY, VT.FLOAT32),
    ("t.arr_f64", [0.1, 1e300], VT.ARRAY, VT.FLOAT64),
    ("t.arr_bool", [True, False, True], VT.ARRAY, VT.BOOL),
    ("t.arr_str", ["a", "", "ccc", "\u00fc\u00df"], VT.ARRAY, VT.STRING),
]


def rng_tensors():
    rng = np.random.default_rng(7)
    q8 = rng.integers(0, 256, size=(3, 2 * 34), dtype=np.uint8)  # 3 rows of 64 Q8_0 elements
    bf = rng.integers(0, 65536, size=(2, 6), dtype=np.uint16)    # raw bf16 bits
    return [
        # name, numpy data, ggml type, ne (ggml order)
        ("tok.weight", rng.standard_normal((3, 5)).astype(np.float32), QT.F32, [5, 3]),
        ("blk.0.norm", rng.standard_normal(7).astype(np.float16), QT.F16, [7]),
        ("blk.0.cube", rng.standard_normal((2, 3, 4)).astype(np.float32), QT.F32, [4, 3, 2]),
        ("blk.0.bf16", bf, QT.BF16, [6, 2]),
        ("blk.0.q8", q8, QT.Q8_0, [64, 3]),
    ]


def expected_value(val, vtype, sub):
    """The value as our reader should report it (floats rounded to their stored precision)."""
    t = sub if vtype == VT.ARRAY else vtype
    vals = val if vtype == VT.ARRAY else [val]
    if t == VT.FLOAT32:
        vals = [float(np.float32(v)) for v in vals]
    return vals


def read_ours(lib, path):
    """Everything our reader sees: ({key: (type, elem_type, [values])}, [tensors], version, alignment)."""
    f = lib.gguf_open(path.encode())
    assert f, lib.nf_error().decode()
    try:
        kvs = {}
        for i in range(lib.gguf_kv_count(f)):
            kv = lib.gguf_kv_at(f, i)
            k = kv.contents
            key = C.string_at(k.key.ptr, k.key.len).decode()
            if k.elem_type == VT.STRING:
                vals = []
                for j in range(k.count):
                    s = lib.gguf_arr_str(kv, j)
                    vals.append(C.string_at(s.ptr, s.len).decode() if s.len else "")
            else:
                vt = VT(k.elem_type)
                n = k.count * lib.gguf_type_size(k.elem_type)
                raw = C.string_at(k.data, n) if n else b""
                vals = np.frombuffer(raw, dtype=NP_OF[vt]).tolist()
            kvs[key] = (VT(k.type), VT(k.elem_type), vals)
        tensors = []
        for i in range(lib.gguf_tensor_count(f)):
            t = lib.gguf_tensor_at(f, i).contents
            tensors.append((t.name.decode(), t.type, list(t.ne[: t.n_dims]), t.offset,
                            C.string_at(t.data, t.size) if t.size else b""))
        return kvs, tensors, lib.gguf_version(f), lib.gguf_alignment(f)
    finally:
        lib.gguf_close(f)


def write_with_package(path, alignment=None):
    w = gguf.GGUFWriter(path, "compat")
    if alignment:
        w.add_custom_alignment(alignment)
    for key, val, vt, sub in KVS:
        w.add_key_value(key, val, vt, sub)
    tens = rng_tensors()
    for name, data, qt, ne in tens:
        if qt in (QT.F32, QT.F16):
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data.view(np.uint8) if qt == QT.BF16 else data, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tens


@pytest.mark.parametrize("alignment", [None, 64])
def test_package_written_file_read_by_ours(lib, tmp_path, alignment):
    path = str(tmp_path / "pkg.gguf")
    tens = write_with_package(path, alignment)
    kvs, tensors, version, align = read_ours(lib, path)
    assert version == 3
    assert align == (alignment or 32)
    assert kvs["general.architecture"] == (VT.STRING, VT.STRING, ["compat"])
    for key, val, vt, sub in KVS:
        assert key in kvs, key
        t, et, vals = kvs[key]
        assert t == vt, key
        assert et == (sub if vt == VT.ARRAY else vt), key
        assert vals == expected_value(val, vt, sub), key
    assert [t[0] for t in tensors] == [t[0] for t in tens]
    for (name, data, qt, ne), (tname, ttype, tne, toff, tbytes) in zip(tens, tensors):
        assert ttype == int(qt), name
        assert tne == ne, name
        assert toff % align == 0
        assert tbytes == data.tobytes(), name


def test_package_written_file_through_nf_gguf_json(lib, tmp_path):
    path = str(tmp_path / "pkg.gguf")
    tens = write_with_package(path)
    out = subprocess.run([os.path.join(BUILD, "nf-gguf"), "--json", path], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    j = json.loads(out.stdout)
    assert j["version"] == 3 and j["alignment"] == 32
    meta = {m["key"]: m for m in j["metadata"]}
    ref = gguf.GGUFReader(path)
    for key, field in ref.fields.items():
        if key.startswith("GGUF."):
            continue
        m = meta[key]
        want = field.contents()
        got = m["value"]
        if field.types[0] == VT.ARRAY:
            assert m["type"] == "array" and m["count"] == len(want)
        if key == "t.u64":
            got = int(got)  # above 2^63-1: given as a string
        if key == "t.arr_u64":
            got = [int(v) for v in got]
        if key == "t.arr_f32":
            want = [float(np.float32(v)) for v in want]
        assert got == want, key
    assert [t["name"] for t in j["tensors"]] == [t[0] for t in tens]
    for t, (name, data, qt, ne) in zip(j["tensors"], tens):
        assert t["type_id"] == int(qt) and t["ne"] == ne and t["size"] == data.nbytes, name
    # the text listing works too
    out = subprocess.run([os.path.join(BUILD, "nf-gguf"), path], capture_output=True, text=True)
    assert out.returncode == 0 and "blk.0.q8" in out.stdout and "q8_0" in out.stdout


def test_nf_gguf_reports_corruption(tmp_path):
    path = str(tmp_path / "pkg.gguf")
    write_with_package(path)
    data = open(path, "rb").read()
    bad = str(tmp_path / "bad.gguf")
    open(bad, "wb").write(data[: len(data) - 40])
    out = subprocess.run([os.path.join(BUILD, "nf-gguf"), bad], capture_output=True, text=True)
    assert out.returncode == 1
    assert "bad.gguf: offset" in out.stderr and "runs past end of file" in out.stderr, out.stderr


def write_with_ours(lib, path, alignment=None):
    w = lib.gguf_writer_create(path.encode())
    assert w
    if alignment:
        lib.gguf_writer_set_alignment(w, alignment)
    lib.gguf_set_str(w, b"general.architecture", b"ours")
    setters = {VT.UINT8: "u8", VT.INT8: "i8", VT.UINT16: "u16", VT.INT16: "i16", VT.UINT32: "u32",
               VT.INT32: "i32", VT.UINT64: "u64", VT.INT64: "i64", VT.FLOAT32: "f32", VT.FLOAT64: "f64",
               VT.BOOL: "bool"}
    keep = []
    for key, val, vt, sub in KVS:
        k = key.encode()
        if vt == VT.STRING:
            lib.gguf_set_str(w, k, val.encode())
        elif vt == VT.ARRAY and sub == VT.STRING:
            arr = (C.c_char_p * len(val))(*[s.encode() for s in val])
            keep.append(arr)
            lib.gguf_set_arr_str(w, k, arr, len(val))
        elif vt == VT.ARRAY:
            a = np.array(val, dtype=NP_OF[sub])
            keep.append(a)
            lib.gguf_set_arr(w, k, int(sub), a.ctypes.data, len(val))
        else:
            getattr(lib, "gguf_set_" + setters[vt])(w, k, val)
    tens = rng_tensors()
    for name, data, qt, ne in tens:
        nea = (C.c_int64 * len(ne))(*ne)
        assert lib.gguf_writer_add_tensor(w, name.encode(), int(qt), len(ne), nea) >= 0, lib.nf_error()
    assert lib.gguf_writer_begin_data(w) == 0, lib.nf_error()
    for name, data, qt, ne in tens:
        b = np.ascontiguousarray(data)
        assert lib.gguf_writer_write_tensor(w, b.ctypes.data, b.nbytes) == 0, lib.nf_error()
    assert lib.gguf_writer_finish(w) == 0, lib.nf_error()
    return tens


@pytest.mark.parametrize("alignment", [None, 128])
def test_our_file_read_by_package(lib, tmp_path, alignment):
    path = str(tmp_path / "ours.gguf")
    tens = write_with_ours(lib, path, alignment)
    assert not os.path.exists(path + ".tmp")
    ref = gguf.GGUFReader(path)
    fields = {k: f for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    expect_keys = ["general.architecture"] + [k for k, *_ in KVS] + (["general.alignment"] if alignment else [])
    assert sorted(fields) == sorted(expect_keys)
    assert fields["general.architecture"].contents() == "ours"
    if alignment:
        assert fields["general.alignment"].contents() == alignment
        assert ref.alignment == alignment
    for key, val, vt, sub in KVS:
        f = fields[key]
        assert f.types[0] == vt, key
        if vt == VT.ARRAY:
            assert f.types[1] == sub, key
        got = f.contents()
        want = expected_value(val, vt, sub)
        if vt != VT.ARRAY:
            want = want[0]
        if sub == VT.FLOAT32 or vt == VT.FLOAT32:
            got = [float(np.float32(v)) for v in got] if isinstance(got, list) else float(np.float32(got))
        assert got == want, key
    assert [t.name for t in ref.tensors] == [t[0] for t in tens]
    for rt, (name, data, qt, ne) in zip(ref.tensors, tens):
        assert rt.tensor_type == qt, name
        assert [int(x) for x in rt.shape] == ne, name
        assert rt.n_bytes == data.nbytes, name
        assert rt.data.tobytes() == data.tobytes(), name
        assert rt.data_offset % (alignment or 32) == 0
    # and our reader agrees with itself
    kvs, tensors, _, align = read_ours(lib, path)
    assert align == (alignment or 32)
    assert [t[4] for t in tensors] == [np.ascontiguousarray(d).tobytes() for _, d, _, _ in tens]


def test_nf_gguf_json_survives_invalid_utf8(lib, tmp_path):
    path = str(tmp_path / "bytes.gguf")
    w = lib.gguf_writer_create(path.encode())
    lib.gguf_set_str(w, b"bad.utf8", b"ok\xff\xfe end")
    lib.gguf_set_str(w, b"ctl", b"line1\nline2\t\"q\"")
    assert lib.gguf_writer_finish(w) == 0, lib.nf_error()
    out = subprocess.run([os.path.join(BUILD, "nf-gguf"), "--json", path], capture_output=True)
    assert out.returncode == 0, out.stderr
    meta = {m["key"]: m["value"] for m in json.loads(out.stdout.decode("utf-8"))["metadata"]}
    assert meta["bad.utf8"] == "ok?? end"
    assert meta["ctl"] == "line1\nline2\t\"q\""
    out = subprocess.run([os.path.join(BUILD, "nf-gguf"), path], capture_output=True)
    assert out.returncode == 0 and b'"line1\\nline2\\t\\"q\\""' in out.stdout, out.stdout
