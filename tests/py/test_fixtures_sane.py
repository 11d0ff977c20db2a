"""Consistency of the committed reference fixtures (tests/data/fixtures/*, made by scripts/make_fixtures.py).

No torch here: these checks only read the committed files, so a broken or partial regeneration (a file from another
run, a wrong shape, a truncated write) fails `make test` instead of silently weakening the forward-pass tests.
"""

import hashlib
import json
import os
import struct

import numpy as np
import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
FIXDIR = os.environ.get("NF_FIXTURES") or os.path.join(ROOT, "tests", "data", "fixtures")
EXPECTED = ["base", "shared", "kpool16", "nondefault"]
FILES = ["config.json", "model.safetensors", "tokens.txt", "logits.f32", "topk.i32", "topk.json", "meta.json"]
MLA = ("indexed_attention", "deepseek_sparse_attention", "full_attention")


def load(name):
    d = os.path.join(FIXDIR, name)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(d, "meta.json")) as f:
        meta = json.load(f)
    with open(os.path.join(d, "topk.json")) as f:
        tk = json.load(f)
    with open(os.path.join(d, "tokens.txt")) as f:
        tokens = [int(x) for x in f.read().split()]
    return d, cfg, meta, tk, tokens


def safetensors_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        hdr = json.loads(f.read(n))
    return n, hdr


@pytest.fixture(params=EXPECTED)
def fx(request):
    return (request.param,) + load(request.param)


def test_all_fixtures_present():
    for name in EXPECTED:
        for fn in FILES:
            assert os.path.isfile(os.path.join(FIXDIR, name, fn)), f"{name}/{fn} missing"


def test_hashes_match_meta(fx):
    name, d, cfg, meta, tk, tokens = fx
    for fn, want in meta["sha256"].items():
        with open(os.path.join(d, fn), "rb") as f:
            got = hashlib.sha256(f.read()).hexdigest()
        assert got == want, f"{name}/{fn} is not the file meta.json describes (partial regeneration?)"


def test_tokens(fx):
    name, d, cfg, meta, tk, tokens = fx
    tc = cfg["text_config"]
    assert len(tokens) == meta["positions"]
    assert all(0 <= t < tc["vocab_size"] for t in tokens)
    assert len(set(tokens)) > len(tokens) // 4


def test_logits_shape_and_health(fx):
    name, d, cfg, meta, tk, tokens = fx
    V = cfg["text_config"]["vocab_size"]
    S = len(tokens)
    path = os.path.join(d, "logits.f32")
    assert os.path.getsize(path) == S * V * 4
    assert meta["shapes"]["logits"] == [S, V]
    lg = np.fromfile(path, dtype="<f4").reshape(S, V)
    assert np.isfinite(lg).all()
    assert 0.1 < float(lg.std()) < 10.0
    assert float(np.abs(lg).max()) < 100.0
    assert len(np.unique(lg.argmax(-1))) >= 20, "argmax barely varies over positions"


def test_config_layout(fx):
    name, d, cfg, meta, tk, tokens = fx
    tc = cfg["text_config"]
    L = tc["num_hidden_layers"]
    assert len(tc["layer_types"]) == L and len(tc["indexer_types"]) == L and len(tc["mlp_layer_types"]) == L
    assert set(tc["layer_types"]) <= {"linear_attention"} | set(MLA)
    assert "linear_attention" in tc["layer_types"] and any(t in MLA for t in tc["layer_types"])
    assert {"dense", "sparse"} <= set(tc["mlp_layer_types"])
    assert tc["qk_rope_head_dim"] == 0
    assert tc["index_topk"] % tc["index_kpool"] == 0
    assert tc["num_attention_heads"] == tc["num_key_value_heads"]
    for i, t in enumerate(tc["layer_types"]):
        if t in MLA and tc["indexer_types"][i] == "shared":
            # HF hands a top-k only from the immediately preceding full DSA layer.
            assert i > 0 and tc["layer_types"][i - 1] in MLA and tc["indexer_types"][i - 1] == "full"


def test_safetensors(fx):
    name, d, cfg, meta, tk, tokens = fx
    tc = cfg["text_config"]
    path = os.path.join(d, "model.safetensors")
    n, hdr = safetensors_header(path)
    hdr.pop("__metadata__", None)
    end = 0
    for k, v in hdr.items():
        assert v["dtype"] == "F32", k
        a, b = v["data_offsets"]
        assert b - a == 4 * int(np.prod(v["shape"], dtype=np.int64)), k
        end = max(end, b)
    assert 8 + n + end == os.path.getsize(path)
    H, V = tc["hidden_size"], tc["vocab_size"]
    p = "model.language_model."
    assert hdr["lm_head.weight"]["shape"] == [V, H]
    assert hdr[p + "embed_tokens.weight"]["shape"] == [V, H]
    assert hdr[p + "norm.weight"]["shape"] == [H]
    assert any(k.startswith("model.visual.") for k in hdr), "the tiny vision tower should be present"
    vis = sum(4 * int(np.prod(v["shape"])) for k, v in hdr.items() if k.startswith("model.visual."))
    assert vis < 50_000
    hc = tc["hc_mult"]
    for i, t in enumerate(tc["layer_types"]):
        lp = f"{p}layers.{i}."
        assert hdr[lp + "hc_attn_fn"]["shape"] == [(2 + hc) * hc, hc * H]
        assert hdr[lp + "hc_ffn_scale"]["shape"] == [3]
        has_idx = any(k.startswith(lp + "self_attn.indexer.") for k in hdr)
        if t in MLA:
            assert (lp + "self_attn.kv_b_proj.weight") in hdr
            assert has_idx == (tc["indexer_types"][i] == "full"), f"layer {i} indexer tensors"
            if has_idx:
                assert hdr[lp + "self_attn.indexer.index_kpool_compress_ape"]["shape"] == [
                    tc["index_kpool"],
                    tc["index_head_dim"],
                ]
        else:
            assert (lp + "self_attn.q_conv1d.weight") in hdr and not has_idx
        if tc["mlp_layer_types"][i] == "sparse":
            E = tc["n_routed_experts"]
            for e in range(E):
                assert (lp + f"mlp.experts.{e}.gate_proj.weight") in hdr
            assert hdr[lp + "mlp.gate.e_score_correction_bias"]["shape"] == [E]
        else:
            assert (lp + "mlp.gate_proj.weight") in hdr


def test_topk_layout_and_content(fx):
    name, d, cfg, meta, tk, tokens = fx
    tc = cfg["text_config"]
    S = len(tokens)
    kp, topk = tc["index_kpool"], tc["index_topk"]
    layers = [i for i, t in enumerate(tc["layer_types"]) if t in MLA]
    W = topk + kp - 1
    assert tk["layers"] == layers
    assert tk["row_width"] == W
    assert tk["shape"] == [len(layers), S, W] == meta["shapes"]["topk"]
    path = os.path.join(d, tk["file"])
    assert os.path.getsize(path) == len(layers) * S * W * 4
    a = np.fromfile(path, dtype="<i4").reshape(len(layers), S, W)
    kpools = topk // kp
    for li, layer in enumerate(layers):
        if tc["indexer_types"][layer] == "shared":
            assert np.array_equal(a[li], a[layers.index(layer - 1)])
        for t in range(S):
            row = a[li, t]
            assert row.min() >= -1 and row.max() <= t, f"layer {layer} pos {t}: index outside [-1, t]"
            valid = row[row >= 0]
            assert len(set(valid.tolist())) == len(valid), f"layer {layer} pos {t}: duplicate index"
            complete = (t + 1) // kp
            tail = list(range(complete * kp, t + 1))
            # the tail slots hold exactly the visible tokens after the last complete pool
            tail_slots = row[topk:]
            assert tail_slots[: len(tail)].tolist() == tail and (tail_slots[len(tail):] == -1).all()
            pools = row[:topk].reshape(kpools, kp)
            n = 0
            for pool in pools:
                if pool[0] < 0:
                    assert (pool == -1).all()
                    continue
                assert pool[0] % kp == 0 and pool.tolist() == list(range(pool[0], pool[0] + kp))
                n += 1
            assert n == min(kpools, complete)


def test_meta_checks(fx):
    name, d, cfg, meta, tk, tokens = fx
    c = meta["checks"]
    assert all(v > 0 for v in c["pruned_query_positions"].values()), "the selection must really prune"
    assert c["chunked"]["max_abs_diff_logits"] < 1e-3
    assert c["chunked"]["topk_rows_with_different_sets"] == 0
    assert c["decode_tail"]["max_abs_diff_logits"] < 1e-3
    assert all(v == 0 for v in c["indexer_exact_ties"].values())
    assert all(v >= 1e-5 for v in c["indexer_min_relative_margin"].values())
    assert c["router_min_topk_margin"] >= 1e-5
