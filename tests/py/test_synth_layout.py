"""Cross-check of nf-synth's output (src/model/layout.c, synth.c, recipe.c) with the `gguf` Python package.

The tiny preset written by nf-synth must parse with gguf.GGUFReader; its metadata must carry the llama.cpp
glm5-next keys with the expected types and values; tensor names and shapes must follow the documented shape
formulas (docs/gguf.md "glm5-next layout", restated independently here); and because weights are a function of
(seed, name, index) only, the q8/q4/q2 files dequantized by the gguf package must be close to the f32 file and
the bf16 file must be the f32 file rounded to bf16."""
import os
import subprocess

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as T  # noqa: E402
from gguf import quants  # noqa: E402

BUILD = os.environ.get("NF_BUILD", "build")
SYNTH = os.path.join(BUILD, "nf-synth")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("synth")
    out = {}
    for r in ("f32", "bf16", "q8", "q4", "q2"):
        p = d / f"tiny-{r}.gguf"
        subprocess.run([SYNTH, "--out", str(p), "--recipe", r, "--seed", "5", "--quiet"], check=True,
                       stdout=subprocess.DEVNULL)
        out[r] = gguf.GGUFReader(str(p))
    return out


def kv(reader, key):
    f = reader.fields[key]
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        return [f.parts[i][0].item() for i in f.data]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode()
    return f.parts[f.data[0]][0].item()


def test_metadata(files):
    r = files["f32"]
    assert kv(r, "general.architecture") == "glm5-next"
    P = "glm5-next."
    assert kv(r, P + "block_count") == 5
    assert kv(r, P + "nextn_predict_layers") == 1
    assert kv(r, P + "embedding_length") == 256
    assert kv(r, P + "attention.head_count_kv") == [0, 0, 0, 1, 1]
    assert kv(r, P + "attention.indexer.kpool") == 4
    assert kv(r, P + "attention.indexer.top_k") == 16
    assert kv(r, P + "attention.indexer.kpool_select_tail") is True
    assert kv(r, P + "hyper_connection.count") == 4
    assert kv(r, P + "expert_gating_func") == 2
    assert kv(r, P + "leading_dense_block_count") == 1
    assert kv(r, P + "attention.key_length") == kv(r, P + "attention.kv_lora_rank")
    assert kv(r, P + "swiglu_clamp_exp") == pytest.approx([10.0] * 5)
    assert abs(kv(r, P + "kda.gate_lower_bound") + 5.0) < 1e-6


def expected_shapes():
    """The documented shape formulas for the tiny preset, restated independently of layout.c."""
    E, V, hc = 256, 4096, 4
    M = (2 + hc) * hc
    Hk, dk, r, c = 4, 64, 64, 4
    I = Hk * dk
    H, qr, kr, dn, dv = 4, 128, 64, 64, 64
    Hi, di, p = 4, 64, 4
    F, Fe, Ne = 512, 256, 8
    s = {"token_embd.weight": (E, V), "output_norm.weight": (E,), "output.weight": (E, V)}

    def moe(b):
        s.update({b + "ffn_gate_inp.weight": (E, Ne), b + "exp_probs_b.bias": (Ne,),
                  b + "ffn_gate_exps.weight": (E, Fe, Ne), b + "ffn_up_exps.weight": (E, Fe, Ne),
                  b + "ffn_down_exps.weight": (Fe, E, Ne), b + "ffn_gate_shexp.weight": (E, Fe),
                  b + "ffn_up_shexp.weight": (E, Fe), b + "ffn_down_shexp.weight": (Fe, E)})

    def mla(b):
        s.update({b + "attn_q_a.weight": (E, qr), b + "attn_q_a_norm.weight": (qr,),
                  b + "attn_q_b.weight": (qr, H * dn), b + "attn_kv_a_mqa.weight": (E, kr),
                  b + "attn_kv_a_norm.weight": (kr,), b + "attn_k_b.weight": (dn, kr, H),
                  b + "attn_v_b.weight": (kr, dv, H), b + "attn_output.weight": (H * dv, E),
                  b + "indexer.attn_q_b.weight": (qr, Hi * di), b + "indexer.attn_k.weight": (E, di),
                  b + "indexer.k_norm.weight": (di,), b + "indexer.k_norm.bias": (di,),
                  b + "indexer.proj.weight": (E, Hi), b + "indexer_compressor_gate.weight": (E, di),
                  b + "indexer_compressor_ape.weight": (di, p)})

    for n in range(4):
        b = f"blk.{n}."
        s.update({b + "attn_norm.weight": (E,), b + "ffn_norm.weight": (E,)})
        for site in ("attn", "ffn"):
            s.update({b + f"hc_{site}_fn.weight": (hc * E, M), b + f"hc_{site}_base.weight": (M,),
                      b + f"hc_{site}_scale.weight": (3,)})
        if n == 3:
            mla(b)
        else:
            for x in "qkv":
                s[b + f"attn_{x}.weight"] = (E, I)
                s[b + f"ssm_conv1d_{x}.weight"] = (c, 1, I)
            s.update({b + "ssm_f_a.weight": (E, r), b + "ssm_f_b.weight": (r, I), b + "ssm_dt.bias": (I,),
                      b + "ssm_a": (Hk,), b + "ssm_beta.weight": (E, Hk), b + "ssm_g_a.weight": (E, r),
                      b + "ssm_g_b.weight": (r, I), b + "ssm_norm.weight": (dk,), b + "attn_output.weight": (I, E)})
        if n == 0:
            s.update({b + "ffn_gate.weight": (E, F), b + "ffn_up.weight": (E, F), b + "ffn_down.weight": (F, E)})
        else:
            moe(b)
    b = "blk.4."
    s.update({b + "attn_norm.weight": (E,), b + "ffn_norm.weight": (E,)})
    mla(b)
    moe(b)
    s.update({b + "nextn.eh_proj.weight": (2 * E, E), b + "nextn.enorm.weight": (E,),
              b + "nextn.hnorm.weight": (E,), b + "nextn.shared_head_norm.weight": (E,)})
    return s


def test_names_and_shapes(files):
    want = expected_shapes()
    got = {t.name: tuple(int(x) for x in t.shape) for t in files["f32"].tensors}
    assert set(got) == set(want)
    for name, shape in want.items():
        assert got[name] == shape, name


def values(reader):
    out = {}
    for t in reader.tensors:
        a = quants.dequantize(t.data, t.tensor_type) if t.tensor_type != T.F32 else np.asarray(t.data)
        out[t.name] = (t.tensor_type, np.asarray(a, dtype=np.float32).reshape(-1))
    return out


def test_recipes_same_weights(files):
    ref = values(files["f32"])
    bf = values(files["bf16"])
    for name, (typ, a) in bf.items():
        x = ref[name][1]
        if typ == T.F32:
            assert np.array_equal(a, x), name
        else:
            assert typ == T.BF16, name
            assert np.allclose(a, x, rtol=2 ** -8, atol=0), name
    # relative RMS error per stored type (measured: Q8_0 0.005, Q4_K 0.07, Q2_K 0.30, IQ2_XXS 0.34)
    tol = {T.Q8_0: 0.01, T.Q4_K: 0.09, T.Q2_K: 0.35, T.IQ2_XXS: 0.40}
    for recipe in ("q8", "q4", "q2"):
        got = values(files[recipe])
        for name, (typ, a) in got.items():
            x = ref[name][1]
            if typ == T.F32:
                assert np.array_equal(a, x), (recipe, name)
                continue
            err = np.sqrt(np.mean((a - x) ** 2)) / (np.sqrt(np.mean(x ** 2)) + 1e-30)
            assert err < tol[T(typ)], (recipe, name, T(typ).name, err)


def test_types_by_recipe(files):
    types = {t.name: T(t.tensor_type) for t in files["q2"].tensors}
    assert types["blk.1.ffn_gate_exps.weight"] == T.IQ2_XXS
    assert types["blk.1.ffn_down_exps.weight"] == T.Q2_K
    assert types["blk.3.attn_q_b.weight"] == T.Q8_0
    assert types["blk.3.indexer.proj.weight"] == T.F32
    assert types["blk.0.ssm_a"] == T.F32
    types = {t.name: T(t.tensor_type) for t in files["q4"].tensors}
    assert types["blk.2.ffn_up_exps.weight"] == T.Q4_K
    assert types["output.weight"] == T.Q8_0
