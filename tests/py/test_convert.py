"""test_convert.py — nf-convert (HF glm5_next checkpoint → GGUF) checked tensor by tensor against the sources.

The safetensors files are parsed here by hand (8-byte header length, JSON, raw data; BF16/F16/F32/F8_E4M3 +
128x128 block scales), independently of our C reader, and the documented HF → GGUF mapping (docs/gguf.md
"Converting") is re-implemented in numpy. With the f32 recipe every GGUF tensor must equal its expected value
(bit-exact; -exp(A_log) to 1 ulp); the set of GGUF tensor names must be exactly the expected set. semantic.json
(made with the HF modules by scripts/make_convert_fixtures.py) checks that the converted tensors *mean* what
HF's weights mean (MLA absorbed k_b/v_b vs HF's expand_kv, experts vs HF's fused experts, KDA gate, conv).
Quantized recipes must produce files nf_model_load accepts (through build/libnf.so), with the recipe's types
and values close to the f32 ones. Bad inputs must fail with a clear message and leave no output file.

Fixtures: tests/data/convert/{bf16 (sharded, tokenizer), fp8, fused} and the forward-pass fixtures
tests/data/fixtures/{base,shared} (F32 checkpoints).
"""
import ctypes as C
import json
import os
import shutil
import struct
import subprocess

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import quants as gq  # noqa: E402

BUILD = os.environ.get("NF_BUILD", "build")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data")
CONV = os.path.join(DATA, "convert")
NF_CONVERT = os.path.join(BUILD, "nf-convert")

FIXTURES = {
    "bf16": os.path.join(CONV, "bf16"),
    "fp8": os.path.join(CONV, "fp8"),
    "fused": os.path.join(CONV, "fused"),
    "base": os.path.join(DATA, "fixtures", "base"),
    "shared": os.path.join(DATA, "fixtures", "shared"),
}


# ---------------------------------------------------------------- safetensors by hand

def f8_e4m3_table():
    v = np.arange(256)
    s = np.where(v >> 7, -1.0, 1.0)
    e = (v >> 3) & 15
    m = v & 7
    x = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e.astype(np.float64) - 7))
    x = np.where((e == 15) & (m == 7), np.nan, x)
    return (s * x).astype(np.float32)


F8 = f8_e4m3_table()


def read_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        out[k] = (v["dtype"], tuple(v["shape"]), data[b:e])
    return out


def load_checkpoint(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else ["model.safetensors"]
    raw = {}
    for f in files:
        raw.update(read_safetensors(os.path.join(d, f)))
    return raw


def to_f32(raw, name, block=128):
    dt, shape, b = raw[name]
    if dt == "F32":
        a = np.frombuffer(b, np.float32)
    elif dt == "BF16":
        a = (np.frombuffer(b, np.uint16).astype(np.uint32) << 16).view(np.float32)
    elif dt == "F16":
        a = np.frombuffer(b, np.float16).astype(np.float32)
    elif dt == "F8_E4M3":
        q = F8[np.frombuffer(b, np.uint8)].reshape(shape)
        s = to_f32(raw, name + "_scale_inv")
        s = np.repeat(np.repeat(s, block, 0), block, 1)[:shape[0], :shape[1]]
        return (q * s).astype(np.float32)
    else:
        raise ValueError(dt)
    return a.reshape(shape).copy()


# ---------------------------------------------------------------- expected GGUF tensors (torch order)

def text_config(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    return cfg.get("text_config") or cfg


def expected_tensors(d, mtp=False):
    raw = load_checkpoint(d)
    tc = text_config(d)
    get = lambda n: to_f32(raw, n)  # noqa: E731

    def src(*names):
        for n in names:
            for p in ("model.language_model.", ""):
                if p + n in raw:
                    return get(p + n)
        raise KeyError(names[0])

    L = tc["num_hidden_layers"]
    lt = tc.get("layer_types") or ["linear_attention" if i % 4 != 3 else "indexed_attention" for i in range(L)]
    mlt = tc.get("mlp_layer_types") or ["dense" if i < 3 else "sparse" for i in range(L)]
    it = tc.get("indexer_types") or ["full"] * L
    H, nope, v, kv = tc["num_attention_heads"], tc["qk_nope_head_dim"], tc["v_head_dim"], tc["kv_lora_rank"]
    E, I = tc["n_routed_experts"], tc["moe_intermediate_size"]
    exp = {"token_embd.weight": src("embed_tokens.weight"), "output_norm.weight": src("norm.weight"),
           "output.weight": get("lm_head.weight")}
    nn = tc.get("num_nextn_predict_layers", 0) if mtp else 0
    lt, mlt, it = lt[:L] + ["indexed_attention"] * nn, mlt[:L] + ["sparse"] * nn, it[:L] + ["full"] * nn
    for i in range(L + nn):
        b, s = f"blk.{i}.", f"layers.{i}."
        exp[b + "attn_norm.weight"] = src(s + "input_layernorm.weight")
        exp[b + "ffn_norm.weight"] = src(s + "post_attention_layernorm.weight")
        if i >= L:   # MTP block: no hc; nextn tensors
            exp[b + "nextn.eh_proj.weight"] = src(s + "eh_proj.weight")
            exp[b + "nextn.enorm.weight"] = src(s + "enorm.weight")
            exp[b + "nextn.hnorm.weight"] = src(s + "hnorm.weight")
            exp[b + "nextn.shared_head_norm.weight"] = src(s + "shared_head.norm.weight")
        else:
            for site, alt in (("attn", "attn_hc"), ("ffn", "ffn_hc")):
                for part in ("fn", "base", "scale"):
                    exp[f"{b}hc_{site}_{part}.weight"] = src(f"{s}hc_{site}_{part}", f"{s}{alt}.{part}")
        a = s + "self_attn."
        if lt[i] == "linear_attention":
            for g, h in (("attn_q", "q_proj"), ("attn_k", "k_proj"), ("attn_v", "v_proj"), ("ssm_beta", "b_proj"),
                         ("ssm_g_a", "g_a_proj"), ("ssm_g_b", "g_b_proj"), ("ssm_norm", "o_norm"),
                         ("attn_output", "o_proj")):
                exp[f"{b}{g}.weight"] = src(f"{a}{h}.weight")
            exp[b + "ssm_f_a.weight"] = src(a + "f_a_proj.weight", a + "forget_gate.f_a_proj.weight")
            exp[b + "ssm_f_b.weight"] = src(a + "f_b_proj.weight", a + "forget_gate.f_b_proj.weight")
            exp[b + "ssm_dt.bias"] = src(a + "dt_bias", a + "forget_gate.dt_bias")
            exp[b + "ssm_a"] = -np.exp(src(a + "A_log", a + "forget_gate.A_log"))
            try:
                conv = [src(f"{a}{c}_conv1d.weight") for c in "qkv"]
            except KeyError:
                conv = np.split(src(a + "conv1d.weight"), 3, axis=0)
            for c, w in zip("qkv", conv):
                exp[f"{b}ssm_conv1d_{c}.weight"] = w
        else:
            for g, h in (("attn_q_a", "q_a_proj"), ("attn_q_a_norm", "q_a_layernorm"), ("attn_q_b", "q_b_proj"),
                         ("attn_kv_a_mqa", "kv_a_proj_with_mqa"), ("attn_kv_a_norm", "kv_a_layernorm"),
                         ("attn_output", "o_proj")):
                exp[f"{b}{g}.weight"] = src(f"{a}{h}.weight")
            kvb = src(a + "kv_b_proj.weight").reshape(H, nope + v, kv)
            exp[b + "attn_k_b.weight"] = np.ascontiguousarray(kvb[:, :nope, :].transpose(0, 2, 1))  # [H, kv, nope]
            exp[b + "attn_v_b.weight"] = np.ascontiguousarray(kvb[:, nope:, :])                     # [H, v, kv]
            if it[i] == "full":
                x = a + "indexer."
                exp[b + "indexer.attn_q_b.weight"] = src(x + "wq_b.weight")
                exp[b + "indexer.attn_k.weight"] = src(x + "wk.weight")
                exp[b + "indexer.k_norm.weight"] = src(x + "k_norm.weight")
                exp[b + "indexer.k_norm.bias"] = src(x + "k_norm.bias")
                exp[b + "indexer.proj.weight"] = src(x + "weights_proj.weight")
                exp[b + "indexer_compressor_gate.weight"] = src(x + "index_kpool_compress_gate")
                exp[b + "indexer_compressor_ape.weight"] = src(x + "index_kpool_compress_ape")
        m = s + "mlp."
        if mlt[i] == "dense":
            for g in ("gate", "up", "down"):
                exp[f"{b}ffn_{g}.weight"] = src(f"{m}{g}_proj.weight")
        else:
            exp[b + "ffn_gate_inp.weight"] = src(m + "gate.weight")
            exp[b + "exp_probs_b.bias"] = src(m + "gate.e_score_correction_bias")
            try:
                for g in ("gate", "up", "down"):
                    exp[f"{b}ffn_{g}_exps.weight"] = np.stack(
                        [src(f"{m}experts.{e}.{g}_proj.weight") for e in range(E)])
            except KeyError:
                gu = src(m + "experts.gate_up_proj")
                exp[b + "ffn_gate_exps.weight"] = gu[:, :I, :]
                exp[b + "ffn_up_exps.weight"] = gu[:, I:, :]
                exp[b + "ffn_down_exps.weight"] = src(m + "experts.down_proj")
            for g in ("gate", "up", "down"):
                exp[f"{b}ffn_{g}_shexp.weight"] = src(f"{m}shared_experts.{g}_proj.weight")
    return exp


# ---------------------------------------------------------------- running the converter

@pytest.fixture(scope="module")
def lib():
    path = os.path.join(BUILD, "libnf.so")
    if not os.path.exists(path):
        pytest.fail(f"{path} missing: run make first")
    L = C.CDLL(os.path.abspath(path))
    L.nf_model_load.restype = C.c_void_p
    L.nf_model_load.argtypes = [C.c_char_p]
    L.nf_model_free.argtypes = [C.c_void_p]
    L.nf_error.restype = C.c_char_p
    return L


def convert(src, out, recipe="f32", extra=()):
    if not os.path.exists(NF_CONVERT):
        pytest.fail(f"{NF_CONVERT} missing: run make first")
    return subprocess.run([NF_CONVERT, src, "-o", str(out), "--recipe", recipe, "-t", "2", *extra],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """f32 conversions of every fixture, done once."""
    d = tmp_path_factory.mktemp("conv")
    out = {}
    for name, src in FIXTURES.items():
        if not os.path.exists(os.path.join(src, "config.json")):
            continue
        p = d / f"{name}.gguf"
        r = convert(src, p)
        assert r.returncode == 0, f"{name}: {r.stderr[-2000:]}"
        out[name] = (p, r.stderr)
    return out


def gguf_tensors(path):
    rd = gguf.GGUFReader(str(path))
    out = {}
    for t in rd.tensors:
        a = t.data
        if t.tensor_type not in (gguf.GGMLQuantizationType.F32,):
            a = gq.dequantize(a, t.tensor_type)
        out[t.name] = (t.tensor_type, [int(x) for x in t.shape], np.asarray(a, np.float32).reshape(
            tuple(reversed([int(x) for x in t.shape]))))
    return rd, out


def field(rd, key):
    f = rd.fields[key]
    return f.contents()


# ---------------------------------------------------------------- tests

@pytest.mark.parametrize("name", list(FIXTURES))
def test_f32_every_tensor_exact(converted, name):
    if name not in converted:
        pytest.skip(f"fixture {name} not present")
    path, _ = converted[name]
    exp = expected_tensors(FIXTURES[name])
    _, got = gguf_tensors(path)
    assert set(got) == set(exp), f"missing {sorted(set(exp) - set(got))[:5]} extra {sorted(set(got) - set(exp))[:5]}"
    for k, want in exp.items():
        typ, ne, a = got[k]
        assert typ == gguf.GGMLQuantizationType.F32, k
        assert ne == list(reversed(want.shape)) or [n for n in ne if n != 1] == [n for n in reversed(want.shape) if n != 1], \
            f"{k}: ggml shape {ne} vs source {want.shape}"
        want = want.reshape(a.shape)
        if k.endswith("ssm_a"):
            np.testing.assert_allclose(a, want, rtol=2e-7, err_msg=k)
        else:
            assert np.array_equal(a, want), f"{k}: max diff {np.abs(a - want).max()}"


def test_metadata(converted):
    rd = gguf.GGUFReader(str(converted["fp8"][0]))
    tc = text_config(FIXTURES["fp8"])
    A = "glm5-next."
    assert field(rd, "general.architecture") == "glm5-next"
    assert field(rd, A + "block_count") == tc["num_hidden_layers"]  # MTP not converted: block_count = trunk
    assert A + "nextn_predict_layers" not in rd.fields
    assert field(rd, A + "embedding_length") == 160
    assert list(field(rd, A + "attention.head_count_kv")) == [0, 1, 0]
    assert field(rd, A + "leading_dense_block_count") == 1
    assert field(rd, A + "attention.indexer.kpool") == 4
    assert field(rd, A + "attention.q_lora_rank") == 144
    assert field(rd, A + "kda.head_dim") == 16
    assert abs(field(rd, A + "kda.gate_lower_bound") + 5.0) < 1e-6
    assert field(rd, "tokenizer.ggml.eos_token_id") == 1
    assert field(rd, "tokenizer.ggml.bos_token_id") == 2
    rd = gguf.GGUFReader(str(converted["bf16"][0]))
    assert field(rd, A + "kda.head_count") == 4 and field(rd, A + "attention.head_count") == 2
    assert list(field(rd, "tokenizer.ggml.eos_token_ids")) == text_config(FIXTURES["bf16"])["eos_token_id"]


def test_tokenizer_metadata(converted):
    rd = gguf.GGUFReader(str(converted["bf16"][0]))
    tok = json.load(open(os.path.join(FIXTURES["bf16"], "tokenizer.json")))
    assert field(rd, "tokenizer.ggml.model") == "gpt2"
    assert field(rd, "tokenizer.ggml.pre") == "glm4"
    tokens = field(rd, "tokenizer.ggml.tokens")
    assert len(tokens) == text_config(FIXTURES["bf16"])["vocab_size"]
    for t, i in tok["model"]["vocab"].items():
        assert tokens[i] == t
    for a in tok["added_tokens"]:
        assert tokens[a["id"]] == a["content"]
    assert len(field(rd, "tokenizer.ggml.merges")) == len(tok["model"]["merges"])
    assert "[gMASK]" in field(rd, "tokenizer.chat_template")
    # no tokenizer.json: no tokenizer keys
    assert "tokenizer.ggml.tokens" not in gguf.GGUFReader(str(converted["fp8"][0])).fields


def test_semantic_vs_hf(converted):
    sem = json.load(open(os.path.join(CONV, "semantic.json")))
    _, t = gguf_tensors(converted["bf16"][0])
    m = sem["mla"]
    b = f"blk.{m['layer']}."
    kb, vb = t[b + "attn_k_b.weight"][2], t[b + "attn_v_b.weight"][2]   # [H, kv, nope], [H, v, kv]
    c, q = np.array(m["latent"], np.float64), np.array(m["q"], np.float64)
    qt = np.einsum("hcd,hd->hc", kb, q)                                 # absorbed query (spec 2.4)
    np.testing.assert_allclose(qt @ c, m["scores"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(np.einsum("hjc,c->hj", vb, c), m["values"], rtol=1e-4, atol=1e-6)
    e = sem["experts"]
    b = f"blk.{e['layer']}."
    x = np.array(e["x"], np.float64)
    g, u, d = (t[b + f"ffn_{n}_exps.weight"][2].astype(np.float64) for n in ("gate", "up", "down"))
    for k, y in enumerate(e["y"]):
        gx, ux = g[k] @ x, u[k] @ x
        np.testing.assert_allclose(d[k] @ (gx / (1 + np.exp(-gx)) * ux), y, rtol=1e-4, atol=1e-6)
    kg = sem["kda_gate"]
    b = f"blk.{kg['layer']}."
    x = np.array(kg["x"], np.float64)
    f = t[b + "ssm_f_b.weight"][2] @ (t[b + "ssm_f_a.weight"][2] @ x) + t[b + "ssm_dt.bias"][2]
    ssm_a = t[b + "ssm_a"][2].astype(np.float64)
    nh = ssm_a.shape[0]
    f = f.reshape(nh, -1)
    gate = kg["lower_bound"] / (1 + np.exp(f * ssm_a[:, None]))         # lb*sigmoid(-(f*ssm_a)) (llama.cpp form)
    np.testing.assert_allclose(gate.flatten(), kg["g"], rtol=1e-4, atol=1e-6)
    conv = np.concatenate([t[b + f"ssm_conv1d_{c}.weight"][2].reshape(-1, 4) for c in "qkv"])
    np.testing.assert_array_equal(conv, np.array(sem["kda_conv"]["weight"], np.float32))


def test_mtp_block(lib, converted, tmp_path):
    assert "tensors of MTP layers" in converted["fused"][1] and "use --mtp" in converted["fused"][1]
    out = tmp_path / "mtp.gguf"
    r = convert(FIXTURES["fused"], out, "f32", ["--mtp"])
    assert r.returncode == 0, r.stderr
    exp = expected_tensors(FIXTURES["fused"], mtp=True)
    rd, got = gguf_tensors(out)
    assert set(got) == set(exp)
    assert any(k.startswith("blk.2.nextn.") for k in got)
    for k, want in exp.items():
        a = got[k][2]
        if k.endswith("ssm_a"):
            np.testing.assert_allclose(a, want.reshape(a.shape), rtol=2e-7)
        else:
            assert np.array_equal(a, want.reshape(a.shape)), k
    assert field(rd, "glm5-next.block_count") == 3 and field(rd, "glm5-next.nextn_predict_layers") == 1
    assert list(field(rd, "glm5-next.attention.head_count_kv")) == [0, 1, 1]
    m = lib.nf_model_load(str(out).encode())
    assert m, lib.nf_error().decode()
    lib.nf_model_free(m)
    r = convert(FIXTURES["fused"], tmp_path / "q.gguf", "q4", ["--mtp", "-q"])
    assert r.returncode == 0, r.stderr
    # the fp8 fixture's MTP layer is incomplete: --mtp lists what is missing
    err = expect_fail(FIXTURES["fp8"], tmp_path / "f.gguf", "blk.3.attn_q_a.weight", "layers.3.self_attn.q_a_proj",
                      extra=["--mtp"])
    assert "problems" in err


def test_fp8_mtp_and_vision_skipped(converted):
    path, log = converted["fp8"]
    assert "6 tensors of MTP layers" in log
    assert "1 vision tensors" in log
    _, t = gguf_tensors(path)
    assert not [k for k in t if k.startswith("blk.3.")]


@pytest.mark.parametrize("fixture", ["bf16", "fp8", "fused"])
@pytest.mark.parametrize("recipe", ["bf16", "q8", "q4", "q2"])
def test_recipes_load(lib, converted, tmp_path, fixture, recipe):
    out = tmp_path / f"{fixture}-{recipe}.gguf"
    r = convert(FIXTURES[fixture], out, recipe, ["--quiet"])
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # --quiet
    m = lib.nf_model_load(str(out).encode())
    assert m, lib.nf_error().decode()
    lib.nf_model_free(m)
    nf = os.path.join(BUILD, "nf")
    if os.path.exists(nf):
        r = subprocess.run([nf, "info", str(out)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "glm5-next" in r.stdout, r.stderr
    _, q = gguf_tensors(out)
    _, f = gguf_tensors(converted[fixture][0])
    T = gguf.GGMLQuantizationType
    assert set(q) == set(f)
    for k, (typ, ne, a) in q.items():
        ref = f[k][2]
        if typ == T.F32:
            assert np.array_equal(a, ref), k
            continue
        err = np.abs(a - ref).max() / max(np.abs(ref).max(), 1e-12)
        tol = {T.BF16: 0.01, T.Q8_0: 0.02, T.Q4_K: 0.2, T.Q2_K: 0.6, T.IQ2_XXS: 0.8}[typ]
        assert err < tol, f"{k} {typ.name}: relative error {err}"
    if fixture == "bf16":   # hidden 256: routed gate/up rows fit 256-blocks
        want = {"q4": T.Q4_K, "q2": T.IQ2_XXS, "q8": T.Q8_0, "bf16": T.BF16}[recipe]
        assert q["blk.1.ffn_gate_exps.weight"][0] == want
        assert q["blk.1.ffn_gate_inp.weight"][0] == T.F32


# ---------------------------------------------------------------- bad inputs

def copy_fixture(tmp_path, name):
    d = tmp_path / name
    shutil.copytree(FIXTURES[name], d)
    return d


def edit_config(d, fn):
    p = d / "config.json"
    cfg = json.load(open(p))
    fn(cfg.get("text_config", cfg), cfg)
    json.dump(cfg, open(p, "w"))


def expect_fail(d, out, *needles, recipe="f32", extra=()):
    r = convert(str(d), out, recipe, extra)
    assert r.returncode != 0
    err = r.stderr
    for n in needles:
        assert n in err, f"{n!r} not in: {err}"
    assert not os.path.exists(out) and not os.path.exists(str(out) + ".tmp")
    return err


@pytest.mark.parametrize("edit,needles", [
    (lambda t, c: t.pop("hidden_size"), ["hidden_size", "missing"]),
    (lambda t, c: t.update(qk_rope_head_dim=64), ["qk_rope_head_dim = 64"]),
    (lambda t, c: t.update(hc_mult=8), ["hc_mult = 8"]),
    (lambda t, c: t["layer_types"].__setitem__(1, "sliding_attention"), ["layer_types[1]", "sliding_attention"]),
    (lambda t, c: t["mlp_layer_types"].__setitem__(0, "moe"), ["mlp_layer_types[0]"]),
    (lambda t, c: t.update(scoring_func="softmax"), ["scoring_func", "softmax"]),
    (lambda t, c: t.update(hidden_act="gelu"), ["hidden_act"]),
    (lambda t, c: t.update(index_topk=10), ["index_topk", "index_kpool"]),
    (lambda t, c: t.update(topk_group=1, n_group=2), ["topk_group"]),
    (lambda t, c: t.update(linear_attn_config={"gate_lower_bound": None, "safe_gate": False},
                           linear_lower_bound=None), ["linear_lower_bound"]),
    (lambda t, c: c["quantization_config"].update(weight_block_size=[64, 64]), ["weight_block_size"]),
    (lambda t, c: c["quantization_config"].update(quant_method="gptq"), ["quant_method", "gptq"]),
    (lambda t, c: c.update(model_type="llama"), ["model_type", "llama"]),
    (lambda t, c: t.update(intermediate_size=140), ["blk.0.ffn_gate.weight", "expected"]),
    (lambda t, c: t.update(num_hidden_layers=4), ["layer_types has 3 entries"]),
])
def test_bad_config(tmp_path, edit, needles):
    d = copy_fixture(tmp_path, "fp8")
    edit_config(d, edit)
    expect_fail(d, tmp_path / "o.gguf", "config.json" if "blk." not in needles[0] else "", *needles)


def test_bad_json(tmp_path):
    d = copy_fixture(tmp_path, "fused")
    (d / "config.json").write_text('{"model_type": "glm5_next_text", ')
    expect_fail(d, tmp_path / "o.gguf", "config.json")


def test_corrupt_safetensors_header(tmp_path):
    d = copy_fixture(tmp_path, "fused")
    p = d / "model.safetensors"
    raw = bytearray(p.read_bytes())
    (n,) = struct.unpack("<Q", raw[:8])
    raw[8:12] = b'{"a"'                              # no longer valid JSON
    p.write_bytes(bytes(raw))
    expect_fail(d, tmp_path / "o.gguf", "model.safetensors", "JSON header")
    p.write_bytes(struct.pack("<Q", 1 << 40) + bytes(raw[8:]))   # header length past the end
    expect_fail(d, tmp_path / "o.gguf", "header length")
    raw2 = open(os.path.join(FIXTURES["fused"], "model.safetensors"), "rb").read()
    p.write_bytes(raw2[:len(raw2) - 100])            # truncated data section
    expect_fail(d, tmp_path / "o.gguf", "past the data section")


def test_missing_shard(tmp_path):
    d = copy_fixture(tmp_path, "bf16")
    os.remove(d / "model-00002-of-00002.safetensors")
    expect_fail(d, tmp_path / "o.gguf", "model-00002-of-00002.safetensors", "missing")


def write_safetensors(path, tensors):
    hdr, off, blobs = {}, 0, []
    for k, (dt, shape, b) in tensors.items():
        hdr[k] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(hdr).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def test_missing_tensor_and_scale(tmp_path):
    d = copy_fixture(tmp_path, "fp8")
    raw = read_safetensors(d / "model.safetensors")
    raw.pop("model.language_model.layers.1.self_attn.q_b_proj.weight_scale_inv")
    raw.pop("model.language_model.layers.2.mlp.experts.3.up_proj.weight")
    raw.pop("model.language_model.layers.0.self_attn.A_log")
    write_safetensors(d / "model.safetensors", raw)
    err = expect_fail(d, tmp_path / "o.gguf", "3 problems", "blk.1.attn_q_b.weight", "_scale_inv",
                      "layers.2.mlp.experts.3.up_proj.weight", "blk.0.ssm_a", "A_log")
    assert err.count("\n") >= 3


def test_unknown_recipe_and_usage(tmp_path):
    r = convert(FIXTURES["fused"], tmp_path / "o.gguf", "q3_weird")
    assert r.returncode != 0 and "q3_weird" in r.stderr and "q4" in r.stderr
    r = subprocess.run([NF_CONVERT, "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--recipe" in r.stdout and "q2" in r.stdout
    r = subprocess.run([NF_CONVERT, FIXTURES["fused"]], capture_output=True, text=True)
    assert r.returncode != 0 and "-o" in r.stderr
    r = subprocess.run([NF_CONVERT, str(tmp_path / "nope"), "-o", str(tmp_path / "o.gguf")], capture_output=True,
                       text=True)
    assert r.returncode != 0 and "not a folder" in r.stderr


def test_tied_embeddings(tmp_path):
    d = copy_fixture(tmp_path, "fused")
    raw = read_safetensors(d / "model.safetensors")
    raw.pop("lm_head.weight")
    write_safetensors(d / "model.safetensors", raw)
    expect_fail(d, tmp_path / "o.gguf", "output.weight", "lm_head.weight not found")
    edit_config(d, lambda t, c: t.update(tie_word_embeddings=True))
    out = tmp_path / "t.gguf"
    r = convert(str(d), out)
    assert r.returncode == 0, r.stderr
    _, t = gguf_tensors(out)
    assert np.array_equal(t["output.weight"][2], t["token_embd.weight"][2])


def test_dry_run(tmp_path):
    r = subprocess.run([os.path.abspath(NF_CONVERT), FIXTURES["fp8"], "--dry-run", "-r", "q4"], capture_output=True, text=True,
                       timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "dry run: nothing written" in r.stderr and "blk.1.attn_k_b.weight" in r.stderr
    assert os.listdir(tmp_path) == []
    d = copy_fixture(tmp_path, "fp8")
    edit_config(d, lambda t, c: t.update(hc_mult=2))
    r = subprocess.run([NF_CONVERT, str(d), "--dry-run"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "hc_mult" in r.stderr


def test_release_scale_dry_run(tmp_path):
    """The released architecture, header-only (sparse data): the whole plan maps, with the published census."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("make_release_sparse",
                                                  os.path.join(ROOT, "scripts", "make_release_sparse.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    d = tmp_path / "glm53"
    n, total = mod.make(str(d))
    assert n == 75761 and total > 300e9
    for recipe in ("f32", "bf16", "q8", "q4", "q2"):
        r = subprocess.run([NF_CONVERT, str(d), "--dry-run", "-r", recipe], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-3000:]
        assert f"1383 tensors, recipe {recipe}" in r.stderr       # trunk census of a release GGUF (spec 4.1)
        assert "fell back" not in r.stderr and "warning" not in r.stderr
        assert "skipped: 1760 MTP-layer tensors, 0 vision tensors, 0 unused" in r.stderr
    r = subprocess.run([NF_CONVERT, str(d), "--dry-run", "-r", "q4", "--mtp"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "1412 tensors, recipe q4" in r.stderr and "185.27 GB" in r.stderr   # + 29 NextN tensors
    assert "blk.45.nextn.eh_proj.weight" in r.stderr and "blk.45.ffn_gate_exps.weight" in r.stderr
