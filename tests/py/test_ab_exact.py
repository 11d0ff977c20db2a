"""nf-ab exact against fake arms (ab-protocol.md §6.6 item 17): a self-check divergence refuses and never runs B; a
failed or truncated arm is NO ANSWER; equal tokens with different logits is DIVERGED (kind logits); the first
divergence is reported with its kind; the prompt cut re-tokenizes to the same ids (prefix stability, A vs B ids);
frontiers must span both attention regimes. Plus the dump-format checks of exact.py on hand-written dumps."""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab_support as S  # noqa: E402

X = S.exact

SMALL = ["--frontiers", "2016,4096", "--gen", 8, "--topk", 5]


def calls(arm):
    p = os.path.join(arm, "tree", "calls.log")
    return open(p).read().splitlines() if os.path.exists(p) else []


def exact(tmp_path, a, b, *more):
    out = tmp_path / "ex"
    p = S.nfab(tmp_path, "exact", "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", "prompt.txt",
               "--out", out, *SMALL, *more)
    verdict = (out / "verdict.txt").read_text().strip() if (out / "verdict.txt").exists() else None
    return p, out, verdict


def test_identical_arms(tmp_path):
    a = S.make_arm(tmp_path, "main")
    b = S.make_arm(tmp_path, "pr")
    p, out, v = exact(tmp_path, a, b)
    assert p.returncode == 0, p.stderr
    assert v.startswith("IDENTICAL")
    assert len(calls(a)) == 4 and len(calls(b)) == 2       # A twice per frontier, B once
    ab = json.load(open(out / "ab.json"))
    assert [f["verdict"] for f in ab["frontiers"]] == ["IDENTICAL", "IDENTICAL"]
    assert "print resolution" in ab["resolution"]


def test_self_check_divergence_refuses_and_never_runs_b(tmp_path):
    a = S.make_arm(tmp_path, "main", NONDET=1)
    b = S.make_arm(tmp_path, "pr")
    p, out, v = exact(tmp_path, a, b)
    assert p.returncode == 4
    assert v.startswith("REFUSED") and "not deterministic" in v and "B was not run" in v
    assert calls(b) == []
    sc = json.load(open(out / "selfcheck.json"))
    assert sc["frontiers"][0]["divergence"]["kind"] == "logits"
    assert not (out / "ab.json").exists()


def test_failed_arm_is_no_answer_never_equal(tmp_path):
    a = S.make_arm(tmp_path, "main")
    b = S.make_arm(tmp_path, "pr", FAIL_CALL="all")
    p, out, v = exact(tmp_path, a, b)
    assert p.returncode == 3
    assert v.startswith("NO ANSWER") and "IDENTICAL" not in v and "DIVERGED" not in v
    ab = json.load(open(out / "ab.json"))
    assert ab["verdict"] == "NO ANSWER"
    assert "exited 3" in ab["frontiers"][0]["no_answer"][0]


def test_truncated_dump_with_exit_zero_is_no_answer(tmp_path):
    a = S.make_arm(tmp_path, "main")
    b = S.make_arm(tmp_path, "pr", TRUNCATE=1)
    p, out, v = exact(tmp_path, a, b)
    assert p.returncode == 3 and v.startswith("NO ANSWER")
    assert "truncated" in json.load(open(out / "ab.json"))["frontiers"][0]["no_answer"][0]


def test_failed_a_is_no_answer_and_b_not_run(tmp_path):
    a = S.make_arm(tmp_path, "main", FAIL_CALL=2)
    b = S.make_arm(tmp_path, "pr")
    p, out, v = exact(tmp_path, a, b)
    assert p.returncode == 3 and v.startswith("NO ANSWER")
    assert calls(b) == []


def test_logit_divergence_with_equal_tokens_is_diverged(tmp_path):
    a = S.make_arm(tmp_path, "main")
    b = S.make_arm(tmp_path, "pr", LOGIT_SHIFT_AT=2)
    p, out, v = exact(tmp_path, a, b)
    assert p.returncode == 1
    assert v.startswith("DIVERGED") and "kind logits at step 2" in v
    d = json.load(open(out / "ab.json"))["frontiers"][0]["divergence"]
    assert d["kind"] == "logits" and d["step"] == 2


def test_token_divergence_kind_and_first_step(tmp_path):
    a = S.make_arm(tmp_path, "main")
    b = S.make_arm(tmp_path, "pr", TOKEN_SHIFT_AT=5, LOGIT_SHIFT_AT=6)
    p, out, v = exact(tmp_path, a, b)
    assert p.returncode == 1 and "kind token at step 5" in v


def test_topk_order_divergence_kind(tmp_path):
    a = S.make_arm(tmp_path, "main")
    b = S.make_arm(tmp_path, "pr", TOPK_SWAP_AT=3)
    p, out, v = exact(tmp_path, a, b)
    assert p.returncode == 1 and "kind topk_ids at step 3" in v


def test_prompt_ids_divergence(tmp_path):
    a = S.make_arm(tmp_path, "main")
    b = S.make_arm(tmp_path, "pr", PROMPT_SHIFT=1)
    p, out, v = exact(tmp_path, a, b)
    assert p.returncode == 1 and "kind prompt_ids" in v and "prompt token 5" in v


def test_prompt_cut_not_prefix_stable_is_refused(tmp_path):
    a = S.make_arm(tmp_path, "main", NOT_PREFIX=1)
    b = S.make_arm(tmp_path, "pr")
    p, out, v = exact(tmp_path, a, b)
    assert p.returncode == 4 and v.startswith("REFUSED") and "prefix-stable" in v
    assert calls(b) == []


def test_frontiers_must_span_both_regimes(tmp_path):
    a = S.make_arm(tmp_path, "main")
    b = S.make_arm(tmp_path, "pr")
    out = tmp_path / "ex"
    for fr in ("2016,2040", "4096,8192", "2048,4096"):   # 2048 + 8 > 2051: not wholly dense
        p = S.nfab(tmp_path, "exact", "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", "prompt.txt",
                   "--out", out, "--frontiers", fr, "--gen", 8, "--topk", 5)
        assert p.returncode == 2 and "both attention regimes" in p.stderr, fr
        assert not out.exists() and calls(a) == []
    p = S.nfab(tmp_path, "exact", "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", "prompt.txt",
               "--out", out, "--frontiers", "4096", "--gen", 8, "--topk", 5, "--one-regime")
    assert p.returncode == 0, p.stderr


def test_exact_refuses_missing_build(tmp_path):
    a = S.make_arm(tmp_path, "main")
    p = S.nfab(tmp_path, "exact", "--arm", "main=" + a, "--arm", "pr=" + str(tmp_path / "nope"),
               "--prompt", "prompt.txt", "--out", tmp_path / "ex", *SMALL)
    assert p.returncode == 2 and "missing build" in p.stderr
    assert calls(a) == []


# ---- exact.py on hand-written dumps ----------------------------------------------------------------------------
def fnv_ref(ids):
    h = 0xCBF29CE484222325
    for i in ids:
        for byte in int(i).to_bytes(4, "little"):
            h = ((h ^ byte) * 0x100000001B3) % (1 << 64)
    return "%016x" % h


def write_dump(path, ctx, tokens, topk=2, prompt=None, end=True, hashes=True, nan_at=None):
    prompt = prompt if prompt is not None else list(range(ctx))
    with open(path, "w") as f:
        head = {"type": "frontier", "ctx": ctx, "prompt_tokens": len(prompt), "gen_tokens": len(tokens),
                "topk": topk, "prompt_ids": prompt}
        if hashes:
            head["prompt_fnv64"] = X.fnv64(prompt)
        f.write(json.dumps(head) + "\n")
        for s, t in enumerate(tokens):
            tk = [[t, 1.5]] + [[t + 1 + j, 1.0 - j] for j in range(topk - 1)]
            if nan_at == s:
                tk[1][1] = "nan"
            f.write(json.dumps({"type": "step", "ctx": ctx, "step": s, "token": t, "topk": tk}) + "\n")
        if end:
            e = {"type": "end", "ctx": ctx, "steps": len(tokens)}
            if hashes:
                e["gen_ids_fnv64"] = X.fnv64(tokens)
            f.write(json.dumps(e) + "\n")


def test_fnv64_definition():
    assert X.fnv64([]) == "cbf29ce484222325"
    for ids in ([0], [1, 2, 3], [151329, 7, 2 ** 32 - 1]):
        assert X.fnv64(ids) == fnv_ref(ids)


def test_hashes_checked_and_nan_logits_compare(tmp_path):
    p = str(tmp_path / "a-ctx4.jsonl")
    write_dump(p, 4, [5, 6, 7], nan_at=1)
    d = X.load_dump(p, 4, 3, 2)
    assert d["end"]["gen_ids_fnv64"] == fnv_ref([5, 6, 7])
    q = str(tmp_path / "b-ctx4.jsonl")
    write_dump(q, 4, [5, 6, 7], nan_at=1)
    assert X.first_divergence(d, X.load_dump(q, 4, 3, 2)) is None
    # a dump whose recorded hash does not hash its own tokens is not an answer
    lines = open(p).read().splitlines()
    e = json.loads(lines[-1])
    e["gen_ids_fnv64"] = "0" * 16
    open(p, "w").write("\n".join(lines[:-1] + [json.dumps(e)]) + "\n")
    with pytest.raises(X.NoAnswer, match="does not hash"):
        X.load_dump(p, 4, 3, 2)


def test_length_and_malformed_dumps_are_no_answer(tmp_path):
    p = str(tmp_path / "a-ctx4.jsonl")
    write_dump(p, 4, [5, 6])
    with pytest.raises(X.NoAnswer, match="short run"):
        X.load_dump(p, 4, 3, 2)
    with open(p, "a") as f:
        f.write('{"type": "step", "ctx": 4, "st')
    with pytest.raises(X.NoAnswer, match="not a JSON line"):
        X.load_dump(p, 4, 2, 2)
    write_dump(p, 4, [5, 6], end=False)
    with pytest.raises(X.NoAnswer, match="truncated"):
        X.load_dump(p, 4, 2, 2)
    with pytest.raises(X.NoAnswer, match="no dump"):
        X.load_dump(str(tmp_path / "missing.jsonl"), 4, 2, 2)


def test_prompt_token_count_divergence_and_prefix_check(tmp_path):
    write_dump(str(tmp_path / "a-ctx4.jsonl"), 4, [5, 6], prompt=[1, 2, 3, 4])
    write_dump(str(tmp_path / "b-ctx4.jsonl"), 4, [5, 6], prompt=[1, 2, 3])
    res = X.compare(str(tmp_path / "a"), str(tmp_path / "b"), [4], 2, 2)
    assert res["verdict"] == "DIVERGED"
    assert res["frontiers"][0]["divergence"]["kind"] == "prompt_tokens"
    good = {4: {"head": {"prompt_ids": [1, 2, 3, 4]}}, 8: {"head": {"prompt_ids": [1, 2, 3, 4, 9, 9, 9, 9]}}}
    X.prefix_stable(good)
    bad = {4: {"head": {"prompt_ids": [1, 2, 3, 4]}}, 8: {"head": {"prompt_ids": [1, 2, 3, 5, 9, 9, 9, 9]}}}
    with pytest.raises(X.NotPrefixStable):
        X.prefix_stable(bad)
