"""Cross-check of our tensor formats (src/formats) against the `gguf` Python package.

For every supported format: quantize random tensors with OUR quantizer (nf_quantize through ctypes), store them
in a GGUF file with gguf.GGUFWriter, read the file back with gguf.GGUFReader, dequantize with
gguf.quants.dequantize and require the result to equal OUR dequantization bit for bit. Where the gguf package
can quantize a type itself (F16, BF16, Q8_0), our bytes must equal its bytes. Also: nf_vec_dot against the
gguf-dequantized dot, the f16/bf16 scalar conversions against numpy for every half value and many floats."""
import ctypes
import os

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as T  # noqa: E402
from gguf import quants  # noqa: E402

BUILD = os.environ.get("NF_BUILD", "build")
lib = ctypes.CDLL(os.path.join(BUILD, "libnf.so"))
lib.nf_quantize.restype = ctypes.c_size_t
lib.nf_quantize.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                            ctypes.c_void_p]
lib.nf_dequantize.restype = ctypes.c_int
lib.nf_dequantize.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
lib.nf_row_bytes.restype = ctypes.c_size_t
lib.nf_row_bytes.argtypes = [ctypes.c_uint32, ctypes.c_int64]
lib.nf_vec_dot_type.restype = ctypes.c_uint32
lib.nf_vec_dot_type.argtypes = [ctypes.c_uint32]
lib.nf_quantize_activation.restype = None
lib.nf_quantize_activation.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
lib.nf_vec_dot.restype = ctypes.c_float
lib.nf_vec_dot.argtypes = [ctypes.c_uint32, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p]
lib.nf_vec_dot_f32.restype = ctypes.c_float
lib.nf_vec_dot_f32.argtypes = [ctypes.c_uint32, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p]
lib.nf_f32_to_f16.restype = ctypes.c_uint16
lib.nf_f32_to_f16.argtypes = [ctypes.c_float]
lib.nf_f32_to_bf16.restype = ctypes.c_uint16
lib.nf_f32_to_bf16.argtypes = [ctypes.c_float]

TYPES = [T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_K, T.Q6_K, T.Q2_K, T.IQ2_XXS]
GGUF_CAN_QUANTIZE = {T.F16, T.BF16, T.Q8_0}
# Reconstruction error bounds: RMSE / RMS of the signal over the non-tiny distributions. Measured on 64x1024
# (normal/uniform/heavy/sparse): F16 2.1e-4, BF16 1.7e-3, Q8_0 .004-.009, Q6_K .014-.026, Q4_K .045-.093,
# Q2_K .19-.41, IQ2_XXS .32-.50 (no importance vector; up to .68 on smaller heavy-tailed samples).
REL_RMSE_MAX = {T.F32: 0.0, T.F16: 3e-4, T.BF16: 2.5e-3, T.Q8_0: 0.012, T.Q6_K: 0.035, T.Q4_K: 0.12,
                T.Q2_K: 0.5, T.IQ2_XXS: 0.75}


def ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def our_quantize(x, qtype, imatrix=None):
    x = np.ascontiguousarray(x, dtype=np.float32)
    rows, cols = x.shape
    out = np.zeros(lib.nf_row_bytes(int(qtype), x.size), dtype=np.uint8)
    im = None
    if imatrix is not None:
        im = np.ascontiguousarray(imatrix, dtype=np.float32)
    n = lib.nf_quantize(int(qtype), ptr(x), ptr(out), x.size, cols, ptr(im) if im is not None else None)
    assert n == out.size
    return out.reshape(rows, -1)


def our_dequantize(q, qtype, shape):
    out = np.empty(shape, dtype=np.float32)
    assert lib.nf_dequantize(int(qtype), ptr(np.ascontiguousarray(q)), ptr(out), out.size) == 0
    return out


def data(dist, shape, seed):
    rng = np.random.default_rng(seed)
    if dist == "normal":
        return rng.standard_normal(shape).astype(np.float32)
    if dist == "uniform":
        return rng.uniform(-3, 7, shape).astype(np.float32)
    if dist == "heavy":       # student-t: outliers, like real weights
        return (0.02 * rng.standard_t(3, shape)).astype(np.float32)
    if dist == "sparse":      # many exact zeros and some constant runs
        x = rng.standard_normal(shape).astype(np.float32)
        x[rng.random(shape) < 0.6] = 0
        x[:, :64] = 0.25
        return x
    if dist == "tiny":        # f16 subnormal range scales
        return (1e-6 * rng.standard_normal(shape)).astype(np.float32)
    raise ValueError(dist)


DISTS = ["normal", "uniform", "heavy", "sparse", "tiny"]
SHAPES = [(1, 256), (3, 512), (16, 1024)]


def bits_equal(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_gguf_file_roundtrip_bit_exact(qtype, tmp_path):
    """Our bytes in a GGUF file decode under gguf's dequantize exactly as under ours."""
    tensors = {}
    for di, dist in enumerate(DISTS):
        for si, shape in enumerate(SHAPES):
            x = data(dist, shape, 1000 * di + si)
            tensors[f"t.{dist}.{si}"] = (x, our_quantize(x, qtype))
    path = tmp_path / "formats.gguf"
    w = gguf.GGUFWriter(str(path), "nftest")
    for name, (x, q) in tensors.items():
        w.add_tensor(name, q, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    r = gguf.GGUFReader(str(path))
    assert len(r.tensors) == len(tensors)
    for t in r.tensors:
        x, q = tensors[t.name]
        assert t.tensor_type == qtype
        raw = np.ascontiguousarray(t.data).view(np.uint8).reshape(q.shape)
        assert np.array_equal(raw, q), t.name
        ref = quants.dequantize(raw, qtype).astype(np.float32, copy=False).reshape(x.shape)
        ours = our_dequantize(q, qtype, x.shape)
        assert bits_equal(ours, ref), f"{t.name}: {np.sum(ours.view(np.uint32) != ref.view(np.uint32))} differ"
        if dist_of(t.name) != "tiny":
            rel = np.sqrt(np.mean((ours - x) ** 2)) / np.sqrt(np.mean(x ** 2))
            assert rel <= REL_RMSE_MAX[qtype] + 1e-7, f"{t.name}: relative rmse {rel}"


def dist_of(name):
    return name.split(".")[1]


@pytest.mark.parametrize("qtype", sorted(GGUF_CAN_QUANTIZE), ids=lambda t: t.name)
@pytest.mark.parametrize("dist", DISTS + ["huge"])
def test_bytes_equal_gguf_quantize(qtype, dist):
    """Where gguf can quantize a type, our quantizer produces the same bytes."""
    for si, shape in enumerate(SHAPES):
        if dist == "huge":
            x = (data("normal", shape, si) * 1e5).astype(np.float32)
            x.flat[:: 7] *= 1e30
        else:
            x = data(dist, shape, 77 + si)
        with np.errstate(over="ignore"):      # huge values overflow f16 (scales) by design, in both
            ref = quants.quantize(x, qtype)
        ref = np.ascontiguousarray(ref).view(np.uint8).reshape(shape[0], -1)
        with np.errstate(over="ignore"):
            ours = our_quantize(x, qtype)
        assert np.array_equal(ours, ref), f"{qtype.name} {dist} {shape}"


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_vec_dot_matches_gguf_dequantized_dot(qtype):
    rng = np.random.default_rng(int(qtype) + 5)
    for n in (256, 2048):
        w = rng.standard_normal(n).astype(np.float32)
        x = rng.standard_normal(n).astype(np.float32)
        q = our_quantize(w.reshape(1, n), qtype)
        wd = quants.dequantize(q, qtype).astype(np.float32).reshape(n)
        exact = float(np.dot(wd.astype(np.float64), x.astype(np.float64)))
        scale = float(np.sqrt(np.sum(wd.astype(np.float64) ** 2) * np.sum(x.astype(np.float64) ** 2)))
        f32 = lib.nf_vec_dot_f32(int(qtype), n, ptr(q), ptr(x))
        assert abs(f32 - exact) <= 1e-5 * scale, (f32, exact)
        vt = lib.nf_vec_dot_type(int(qtype))
        act = np.zeros(lib.nf_row_bytes(vt, n), dtype=np.uint8)
        lib.nf_quantize_activation(int(qtype), ptr(x), ptr(act), n)
        d = lib.nf_vec_dot(int(qtype), n, ptr(q), ptr(act))
        # 8-bit activations: error ~ |w|*|x| * 2^-8 / sqrt-ish; a loose, still-failing-if-wrong bound
        tol = 1e-5 * scale if vt == T.F32 else 0.01 * scale
        assert abs(d - exact) <= tol, (qtype.name, n, d, exact, scale)


def test_f16_all_halves_and_random_floats():
    h = np.arange(65536, dtype=np.uint16)
    ours = our_dequantize(h.view(np.uint8), T.F16, (65536,))
    assert bits_equal(ours, h.view(np.float16).astype(np.float32))
    rng = np.random.default_rng(3)
    u = rng.integers(0, 2 ** 32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    special = np.array([0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001, 0x7fbfffff,
                        0x477fefff, 0x477ff000, 0x477ff001, 0x477fffff, 0x47800000, 0x38800000, 0x387fffff,
                        0x33800000, 0x33000000, 0x33000001, 0x32ffffff, 0x00000001, 0x3f801000, 0x3f803000,
                        0x3f800fff, 0x3f801001], dtype=np.uint32)
    # every float of a few exponent ranges around the f16 subnormal / normal / overflow boundaries, sampled
    ranges = [np.arange(e << 23, (e + 1) << 23, 97, dtype=np.uint32) for e in (100, 102, 103, 112, 113, 127, 142, 143)]
    f = np.concatenate([u, special, special | 0x80000000] + ranges).view(np.float32)
    with np.errstate(all="ignore"):
        ref16 = f.astype(np.float16).view(np.uint16)
    ours16 = np.zeros(f.size * 2, dtype=np.uint8)
    assert lib.nf_quantize(int(T.F16), ptr(f), ptr(ours16), f.size, f.size, None) == f.size * 2
    bad = ours16.view(np.uint16) != ref16
    assert not bad.any(), [(hex(a), hex(b), hex(c)) for a, b, c in
                           zip(f.view(np.uint32)[bad][:5], ref16[bad][:5], ours16.view(np.uint16)[bad][:5])]
    # the scalar entry points agree with the array path (non-nan values; ctypes passes floats as doubles)
    with np.errstate(over="ignore"):
        for v in f[:2000]:
            if not np.isnan(v):
                assert lib.nf_f32_to_f16(float(v)) == np.float32(v).astype(np.float16).view(np.uint16)


def test_bf16_random_and_special():
    rng = np.random.default_rng(4)
    u = rng.integers(0, 2 ** 32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    ties = (rng.integers(0, 2 ** 16, 4096, dtype=np.uint64).astype(np.uint32) << 16) | 0x8000
    special = np.array([0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffffffff, 0x7f7fffff,
                        0x7f7f8000, 0x00008000, 0x00018000, 0x00000001], dtype=np.uint32)
    f = np.concatenate([u, ties, special]).view(np.float32)
    ref = quants.quantize(f, T.BF16).view(np.uint16)
    ours = np.zeros(f.size * 2, dtype=np.uint8)
    assert lib.nf_quantize(int(T.BF16), ptr(f), ptr(ours), f.size, f.size, None) == f.size * 2
    assert np.array_equal(ours.view(np.uint16), ref)
    back = our_dequantize(ref.view(np.uint8), T.BF16, (f.size,))
    assert bits_equal(back, quants.dequantize(ref.view(np.uint8), T.BF16).reshape(-1))


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q6_K, T.Q2_K, T.IQ2_XXS], ids=lambda t: t.name)
def test_imatrix_path_decodes_and_helps(qtype):
    """With an importance vector, the file still decodes identically under gguf, and the weighted error on
    the important columns is not worse than without it."""
    rng = np.random.default_rng(9)
    x = data("heavy", (8, 512), 11)
    im = np.ones(512, dtype=np.float32)
    im[rng.choice(512, 32, replace=False)] = 100.0
    q = our_quantize(x, qtype, im)
    ref = quants.dequantize(q, qtype).reshape(x.shape)
    ours = our_dequantize(q, qtype, x.shape)
    assert bits_equal(ours, ref)
    q0 = our_quantize(x, qtype)
    e_im = np.sum(im * (ours - x) ** 2)
    e_no = np.sum(im * (our_dequantize(q0, qtype, x.shape) - x) ** 2)
    assert e_im <= e_no * 1.02, (e_im, e_no)


def test_error_ordering_normal_data():
    """More bits, less error: Q8_0 < Q6_K < Q4_K < Q2_K, IQ2_XXS, on gaussian data."""
    x = data("normal", (32, 1024), 21)
    err = {}
    for qtype in [T.Q8_0, T.Q6_K, T.Q4_K, T.Q2_K, T.IQ2_XXS]:
        y = our_dequantize(our_quantize(x, qtype), qtype, x.shape)
        err[qtype] = np.sqrt(np.mean((y - x) ** 2)) / np.sqrt(np.mean(x ** 2))
    assert err[T.Q8_0] < err[T.Q6_K] < err[T.Q4_K] < min(err[T.Q2_K], err[T.IQ2_XXS]), err
    assert err[T.IQ2_XXS] < 0.4 and err[T.Q2_K] < 0.35, err


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_random_bytes_decode_like_gguf(qtype):
    """Arbitrary block contents (every grid index, sign pattern, scale code, nibble) decode bit-identically.
    The f16 block scales are kept finite (bit 14 cleared) so that nan payloads do not enter the comparison,
    except for the plain f16/bf16/f32 types where every pattern is compared."""
    rng = np.random.default_rng(100 + int(qtype))
    bs, ts = gguf.GGML_QUANT_SIZES[qtype]
    nblk = 4096
    raw = rng.integers(0, 256, (nblk, ts), dtype=np.uint8)
    scale_fields = {T.Q8_0: [0], T.Q4_K: [0, 2], T.Q6_K: [208], T.Q2_K: [80, 82], T.IQ2_XXS: [0]}
    for off in scale_fields.get(qtype, []):
        raw[:, off + 1] &= 0xBF
    if qtype == T.F32:
        raw[:, 3] &= 0xBF                     # numpy and C agree on f32 nans anyway; keep it simple
    ours = our_dequantize(raw.reshape(-1), qtype, (nblk * bs,))
    ref = quants.dequantize(raw, qtype).astype(np.float32, copy=False).reshape(-1)
    assert bits_equal(ours, ref), np.sum(ours.view(np.uint32) != ref.view(np.uint32))
