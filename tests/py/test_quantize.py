"""test_quantize.py — nf-quantize (GGUF → GGUF with another recipe, src/model/requantize.c).

- Same decisions as nf-convert: converting a checkpoint with the f32 (or bf16) recipe and re-quantizing the result
  to recipe R gives tensor data byte-identical to nf-convert -r R from the checkpoint (the sources are exactly
  representable, so only the recipe table, the fallbacks and the quantizer are being compared): the convert
  fixtures' bf16 checkpoint (hidden 256, so routed experts take Q4_K / IQ2_XXS / Q2_K) and tests/data/fixtures/base.
- f32 → f32 copies every tensor's bytes unchanged; every metadata key (tokenizer included) is preserved (read back
  with the gguf package) except the recipe keys, which name the new recipe.
- The embedded model (models/tiny/nf-tiny-bf16.gguf) → q8 loads through nf_model_load (`nf info`).
- Errors: unknown recipe, missing input, output = input, a GGUF that is not glm5-next: clear message, exit != 0,
  no output and no .tmp left.
"""
import os
import subprocess

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BUILD = os.path.abspath(os.environ.get("NF_BUILD", os.path.join(ROOT, "build")))
WORK = os.path.join(BUILD, "test-quantize")
TINY = os.path.join(ROOT, "models", "tiny", "nf-tiny-bf16.gguf")
SOURCES = {
    "convert-bf16": os.path.join(ROOT, "tests", "data", "convert", "bf16"),
    "base": os.path.join(ROOT, "tests", "data", "fixtures", "base"),
}
RECIPE_KEYS = {"nextflash.convert.recipe", "general.quantization_version", "nextflash.quantize.source_recipe",
               "general.name"}


def tool(name):
    p = os.path.join(BUILD, name)
    assert os.path.exists(p), f"{p} not built"
    return p


def run(args, ok=True):
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if ok:
        assert r.returncode == 0, f"{' '.join(args)}: {r.stderr}"
    return r


def convert(src, recipe):
    os.makedirs(WORK, exist_ok=True)
    out = os.path.join(WORK, f"conv-{src}-{recipe}.gguf")
    if not os.path.exists(out):
        run([tool("nf-convert"), SOURCES[src], "-o", out, "-r", recipe, "-q"])
    return out


def quantize(inp, recipe, tag):
    out = os.path.join(WORK, f"rq-{tag}-{recipe}.gguf")
    r = run([tool("nf-quantize"), inp, out, "--recipe", recipe])
    return out, r.stderr


def tensors(path):
    rd = gguf.GGUFReader(path)
    return {t.name: (int(t.tensor_type), [int(x) for x in t.shape], bytes(t.data.tobytes())) for t in rd.tensors}


def fields(path):
    rd = gguf.GGUFReader(path)
    out = {}
    for k, f in rd.fields.items():
        if k.startswith("GGUF."):
            continue
        out[k] = ([int(t) for t in f.types], [bytes(f.parts[i].tobytes()) for i in f.data])
    return out


@pytest.mark.parametrize("src,base", [("convert-bf16", "f32"), ("convert-bf16", "bf16"), ("base", "f32")])
@pytest.mark.parametrize("recipe", ["bf16", "q8", "q4", "q2"])
def test_same_bytes_as_nf_convert(src, base, recipe):
    want = tensors(convert(src, recipe))
    got_path, log = quantize(convert(src, base), recipe, f"{src}-{base}")
    got = tensors(got_path)
    assert list(got) == list(want), "tensor order/names differ from nf-convert's"
    for name in want:
        assert got[name][0] == want[name][0], f"{name}: type {got[name][0]} vs nf-convert {want[name][0]}"
        assert got[name][1] == want[name][1], f"{name}: shape"
        assert got[name][2] == want[name][2], f"{name}: data differ from nf-convert -r {recipe}"
    assert "tensors" in log and recipe in log, log   # summary printed
    f = fields(got_path)
    assert f["nextflash.convert.recipe"][1][0] == recipe.encode()
    assert ("general.quantization_version" in f) == (recipe != "bf16")


def test_f32_to_f32_identical_and_metadata_preserved():
    src = convert("convert-bf16", "f32")
    out, log = quantize(src, "f32", "ident")
    a, b = tensors(src), tensors(out)
    assert list(a) == list(b)
    for name in a:
        assert a[name] == b[name], f"{name} changed"
    fa, fb = fields(src), fields(out)
    assert any(k.startswith("tokenizer.ggml.tokens") for k in fa), "fixture has no tokenizer"
    for k, v in fa.items():
        if k in RECIPE_KEYS:
            continue
        assert k in fb, f"key {k} lost"
        assert fb[k] == v, f"key {k} changed"
    assert fb["nextflash.quantize.source_recipe"][1][0] == b"f32"
    assert "(0 re-encoded" in log, log


def test_embedded_bf16_to_q8_loads():
    if not os.path.exists(TINY):
        pytest.skip("models/tiny/nf-tiny-bf16.gguf not present")
    out, _ = quantize(TINY, "q8", "tiny")
    r = run([tool("nf"), "info", out])
    assert "q8_0" in r.stdout and "tensors" in r.stdout, r.stdout
    fa, fb = fields(TINY), fields(out)
    for k in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.eos_token_ids"):
        if k in fa:
            assert fb[k] == fa[k], k
    t = tensors(out)
    # embedding/output/matrices q8_0, norms f32; F32-only roles stay f32
    assert t["token_embd.weight"][0] == 8 and t["output_norm.weight"][0] == 0
    # the q8 values are the bf16 ones within q8_0's error
    rd = gguf.GGUFReader(TINY)
    src = {x.name: x for x in rd.tensors}["token_embd.weight"]
    w = gguf.quants.dequantize(src.data, src.tensor_type).reshape(-1)
    rq = {x.name: x for x in gguf.GGUFReader(out).tensors}["token_embd.weight"]
    q = gguf.quants.dequantize(rq.data, rq.tensor_type).reshape(-1)
    assert np.abs(q - w).max() <= np.abs(w).max() / 127 * 0.51 + 1e-6


def test_errors_leave_no_file(tmp_path):
    src = convert("base", "f32")
    out = str(tmp_path / "out.gguf")
    cases = [
        ([src, out, "--recipe", "q3"], "unknown recipe"),
        ([str(tmp_path / "missing.gguf"), out, "--recipe", "q8"], "missing.gguf"),
        ([src, src, "--recipe", "q8"], "output is the input"),
        ([src, out], "no recipe"),
    ]
    # a valid GGUF that is not a glm5-next model
    w = gguf.GGUFWriter(str(tmp_path / "other.gguf"), "llama")
    w.add_uint32("llama.block_count", 1)
    w.add_tensor("x", np.zeros((4, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    cases.append(([str(tmp_path / "other.gguf"), out, "--recipe", "q8"], "architecture"))
    for args, msg in cases:
        r = run([tool("nf-quantize")] + args, ok=False)
        assert r.returncode != 0, args
        assert msg in r.stderr, f"{args}: {r.stderr}"
        assert not os.path.exists(out) and not os.path.exists(out + ".tmp"), args
    assert os.path.getsize(src) > 0
