"""test_score.py — nf-score (tools/nf-score.c, src/score/) on the embedded model and its reference set.

tests/data/score/tiny.jsonl (scripts/make_score_set.py: 100 prompts of the tiny model, continuations from
transformers float32 greedy decoding, reference NLL per case from one full float32 pass) is scored on every 10th
case (a mix of short, medium and long prompts; the long ones reach past the DSA boundary of 131 tokens); the
whole set runs in `make qa` (scripts/qa_score.py).

- The bf16 GGUF (f32 compute) and the f32 recipe (nf-quantize): average NLL equal to the transformers NLL within
  1e-4 (issue 10's acceptance), every case's NLL within 1e-4, and every case's greedy prefix equal to the
  reference's full-pass greedy prefix.
- --model-b: bf16 against q8 prints the A/B agreement; the JSON output carries the same numbers.
- Bad sets fail with a message naming the file and line.
"""
import json
import os
import subprocess

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BUILD = os.path.abspath(os.environ.get("NF_BUILD", os.path.join(ROOT, "build")))
SET = os.path.join(ROOT, "tests", "data", "score", "tiny.jsonl")
MODEL = os.path.join(ROOT, "models", "tiny", "nf-tiny-bf16.gguf")
WORK = os.path.join(BUILD, "test-score")
EVERY = "10"


def tool(name):
    p = os.path.join(BUILD, name)
    assert os.path.exists(p), f"{p} not built"
    return p


def need_data():
    if not os.path.exists(MODEL) or not os.path.exists(SET):
        pytest.skip("embedded model or score set not present")


def quantized(recipe):
    os.makedirs(WORK, exist_ok=True)
    out = os.path.join(WORK, f"tiny-{recipe}.gguf")
    r = subprocess.run([tool("nf-quantize"), MODEL, out, "-r", recipe, "-q"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return out


def score(*args, ok=True):
    os.makedirs(WORK, exist_ok=True)
    js = os.path.join(WORK, "score.json")
    if os.path.exists(js):
        os.remove(js)
    r = subprocess.run([tool("nf-score"), "--json", js] + list(args), capture_output=True, text=True, timeout=600)
    print(r.stdout)
    if ok:
        assert r.returncode == 0, r.stdout + r.stderr
        return json.load(open(js)), r
    return None, r


@pytest.mark.parametrize("recipe", ["bf16", "f32"])
def test_exact_recipes_match_transformers(recipe):
    need_data()
    model = MODEL if recipe == "bf16" else quantized(recipe)
    js, r = score("-m", model, "--set", SET, "--every", EVERY, "--check-ref-nll", "1e-4")
    a = js["a"]
    assert abs(a["nll"] - js["reference_nll"]) <= 1e-4, r.stdout
    cases = a["cases"]
    assert len(cases) == 10 and any(c["n_prompt"] > 131 for c in cases) and any(c["n_prompt"] < 50 for c in cases)
    for c in cases:
        assert abs(c["nll"] - c["ref_nll"]) <= 1e-4, c
        assert c["greedy_prefix"] == c["ref_greedy_prefix"], c


def test_model_b_and_check_failure():
    need_data()
    js, r = score("-m", MODEL, "-b", quantized("q8"), "--set", SET, "--every", "25")
    assert "a" in js and "b" in js and 0.8 <= js["argmax_agreement_ab"] <= 1.0, r.stdout
    assert "A vs B" in r.stdout
    # an impossible expectation fails with exit status 3
    _, r = score("-m", MODEL, "--set", SET, "--every", "50", "--expect-nll", "0.5", "--tol", "0.01", ok=False)
    assert r.returncode == 3 and "CHECK FAILED" in r.stdout, r.stdout


def test_text_cases_and_errors(tmp_path):
    need_data()
    good = tmp_path / "text.jsonl"
    good.write_text(json.dumps({"id": "t", "prompt": "def main():\n", "continuation": "    return 0\n"}) + "\n")
    js, r = score("-m", MODEL, "--set", str(good))
    assert js["a"]["tokens"] >= 3 and js["a"]["cases"][0]["n_prompt"] >= 3
    bad = {
        "json.jsonl": ("{\"id\": 1,\n", ":1: invalid JSON"),
        "field.jsonl": (json.dumps({"prompt_tokens": [1, 2]}) + "\n", "neither \"continuation_tokens\""),
        "range.jsonl": (json.dumps({"prompt_tokens": [1], "continuation_tokens": [99999]}) + "\n", "vocabulary size"),
        "empty.jsonl": ("\n", "no cases"),
        "topk.jsonl": (json.dumps({"prompt_tokens": [1], "continuation_tokens": [2, 3], "ref_topk": [[[1, 0.0]]]}) + "\n",
                       "one list per continuation token"),
    }
    for name, (text, msg) in bad.items():
        p = tmp_path / name
        p.write_text(text)
        _, r = score("-m", MODEL, "--set", str(p), ok=False)
        assert r.returncode == 1 and msg in r.stderr, f"{name}: {r.stderr}"
