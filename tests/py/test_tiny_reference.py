"""test_tiny_reference.py — the embedded trained model (models/tiny/nf-tiny-bf16.gguf) against transformers.

tests/data/tiny/ (made by scripts/make_tiny_reference.py: transformers float32 on the BF16 checkpoint
models/tiny/hf, 600 tokens of held-out text, so 469 query positions per MLA layer are pruned by the DSA indexer)
holds the argmax of every position, full logits at 49 positions, log p(next token) of every position and the
indexer selections of every position.

- bf16 GGUF (f32 compute, the exact reference arithmetic): max |Δlogit| <= 1e-4 × max |logit| at the stored
  positions, identical argmax at every position, identical indexer selections (as sets) on every MLA layer and
  position, and the text's NLL equal to the reference's within 1e-4.
- q8 (made with nf-quantize): issue 3's acceptance, argmax agreement >= 99%, with mean / max |Δlogit| printed.
  Met since the continued-training model (99.33%, 4 of 600 differ; the first model gave 98.33%). The margin is
  small: the flips are near-ties (28 of 600 positions have a top-1/top-2 logit gap < 0.05) that Q8_0 weight
  rounding alone moves (transformers with the Q8_0-rounded weights agrees at 99.17%: meta.json,
  checks.q8_weights_in_transformers); on 5 further held-out windows the engine's q8 agrees at 98.90%
  (docs/quality.md "Q8 on the tiny model").
- q4, q2: agreement and |Δlogit| printed; only loose sanity bounds asserted.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BUILD = os.path.abspath(os.environ.get("NF_BUILD", os.path.join(ROOT, "build")))
REF = os.path.join(ROOT, "tests", "data", "tiny")
MODEL = os.path.join(ROOT, "models", "tiny", "nf-tiny-bf16.gguf")
WORK = os.path.join(BUILD, "test-tiny-reference")


def tool(name):
    p = os.path.join(BUILD, name)
    assert os.path.exists(p), f"{p} not built"
    return p


@pytest.fixture(scope="module")
def ref():
    if not os.path.exists(MODEL):
        pytest.skip("models/tiny/nf-tiny-bf16.gguf not present")
    meta = json.load(open(os.path.join(REF, "meta.json")))
    P, V = meta["shapes"]["tokens"], meta["shapes"]["vocab"]
    pos = json.load(open(os.path.join(REF, "positions.json")))["positions"]
    return {
        "meta": meta, "P": P, "V": V, "pos": pos,
        "tokens": np.array(open(os.path.join(REF, "tokens.txt")).read().split(), dtype=np.int64),
        "argmax": np.fromfile(os.path.join(REF, "argmax.i32"), dtype="<i4"),
        "logits": np.fromfile(os.path.join(REF, "logits_sel.f32"), dtype="<f4").reshape(len(pos), V),
        "logprob": np.fromfile(os.path.join(REF, "logprob.f32"), dtype="<f4").astype(np.float64),
        "topk": np.fromfile(os.path.join(REF, "topk.i32"), dtype="<i4").reshape(meta["shapes"]["topk"]),
    }


def model_for(recipe):
    if recipe == "bf16":
        return MODEL
    os.makedirs(WORK, exist_ok=True)
    out = os.path.join(WORK, f"tiny-{recipe}.gguf")
    r = subprocess.run([tool("nf-quantize"), MODEL, out, "-r", recipe, "-q"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return out


def run_logits(model, tag, P, V, n_mla, width):
    os.makedirs(WORK, exist_ok=True)
    out, sel = os.path.join(WORK, f"{tag}.f32"), os.path.join(WORK, f"{tag}.i32")
    args = ["logits", "-m", model, "--tokens", os.path.join(REF, "tokens.txt"), "--out", out, "--topk-indices", sel]
    nf = os.path.join(BUILD, "nf")
    if os.path.exists(nf):
        cmd = [nf] + args
    else:
        code = ("import ctypes,sys;l=ctypes.CDLL(sys.argv[1]);a=[s.encode() for s in sys.argv[2:]];"
                "v=(ctypes.c_char_p*len(a))(*a);sys.exit(l.nf_cmd_logits(len(a),v))")
        cmd = [sys.executable, "-c", code, os.path.join(BUILD, "libnf.so")] + args
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    L = np.fromfile(out, dtype="<f4")
    assert L.size == P * V, f"{L.size} logits, expected {P}x{V}"
    return L.reshape(P, V), np.fromfile(sel, dtype="<i4").reshape(n_mla, P, width)


def logprobs(L, tokens):
    L = L.astype(np.float64)
    m = L.max(1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(L - m).sum(1))
    return L[np.arange(len(tokens) - 1), tokens[1:]] - lse[:-1]


_RUNS = {}


def compare(ref, recipe):
    P, V, tk = ref["P"], ref["V"], ref["topk"]
    if recipe not in _RUNS:   # each recipe runs once per session (q8 serves two tests)
        _RUNS[recipe] = run_logits(model_for(recipe), recipe, P, V, tk.shape[0], tk.shape[2])
    L, sel = _RUNS[recipe]
    d = np.abs(L[ref["pos"]] - ref["logits"])
    agree = L.argmax(1) == ref["argmax"]
    nll = float(-logprobs(L, ref["tokens"]).mean())
    line = (f"tiny {recipe}: argmax agreement {agree.mean() * 100:.2f}% ({int((~agree).sum())} of {P} differ), "
            f"|dlogit| at {len(ref['pos'])} positions mean {d.mean():.4f} max {d.max():.4f}, "
            f"NLL {nll:.5f} (reference {ref['meta']['reference_nll']:.5f})")
    print("\n" + line)
    return L, sel, d, agree, line


def test_bf16_matches_transformers(ref):
    L, sel, d, agree, line = compare(ref, "bf16")
    scale = np.abs(ref["logits"]).max(1)
    rel_ok = d.max(1) <= 1e-4 * scale          # position 0 (after <|endoftext|>, a zero embedding) has all-zero logits
    bad = [ref["pos"][i] for i in np.nonzero(~rel_ok)[0]]
    assert not bad, f"{line}: logits differ beyond 1e-4 relative at positions {bad[:10]}"
    assert agree.all(), f"{line}: argmax differs at {np.nonzero(~agree)[0][:10].tolist()}"
    tk = ref["topk"]
    mism = [(li, t) for li in range(tk.shape[0]) for t in range(tk.shape[1])
            if set(tk[li, t][tk[li, t] >= 0].tolist()) != set(sel[li, t][sel[li, t] >= 0].tolist())]
    assert not mism, f"{len(mism)} indexer rows differ, first (mla layer, position): {mism[:5]}"
    lp = logprobs(L, ref["tokens"])
    assert np.abs(lp - ref["logprob"]).max() < 1e-3, "per-position log p differs"
    assert abs(float(-lp.mean()) - ref["meta"]["reference_nll"]) < 1e-4, line


def test_reference_prunes(ref):
    pr = ref["meta"]["checks"]["pruned_query_positions"]
    width = ref["topk"].shape[2]
    assert ref["P"] > width and all(v == ref["P"] - width for v in pr.values()), pr


def test_q8_argmax_agreement(ref):
    L, sel, d, agree, line = compare(ref, "q8")
    assert np.isfinite(L).all(), line
    assert agree.mean() >= 0.99, line


@pytest.mark.parametrize("recipe,floor", [("q8", 0.90), ("q4", 0.85), ("q2", 0.70)])
def test_quantized_sanity(ref, recipe, floor):
    L, sel, d, agree, line = compare(ref, recipe)
    assert np.isfinite(L).all(), line
    assert agree.mean() >= floor, line
    assert d.mean() <= 0.25 * ref["meta"]["checks"]["logits_std"], line
    nll = float(-logprobs(L, ref["tokens"]).mean())
    assert abs(nll - ref["meta"]["reference_nll"]) < 0.1, line
