"""`nf render` against transformers' renderings (tests/data/chat/cases.json): the command-line path
(request-body JSON in, exact prompt bytes out; --ids gives the `tokenizers` library's ids of that prompt
for the embedded tokenizer), and its argument errors."""

import json
import os
import subprocess

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BUILD = os.environ.get("NF_BUILD", "build")
if not os.path.isabs(BUILD):
    BUILD = os.path.join(ROOT, BUILD)
NF = os.path.join(BUILD, "nf")
CASES = json.load(open(os.path.join(ROOT, "tests", "data", "chat", "cases.json"), encoding="utf-8"))["cases"]


def args_for(case, path):
    a = [NF, "render", "--messages", path]
    if case.get("reasoning_effort"):
        a += ["--effort", case["reasoning_effort"]]
    if case.get("clear_thinking"):
        a.append("--clear-thinking")
    if not case["add_generation_prompt"]:
        a.append("--no-generation-prompt")
    return a


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_render_matches_transformers(case, tmp_path):
    p = tmp_path / "req.json"
    p.write_text(json.dumps({"messages": case["messages"], "tools": case["tools"]}, ensure_ascii=False), encoding="utf-8")
    out = subprocess.run(args_for(case, str(p)), capture_output=True, check=True).stdout
    assert out.decode("utf-8") == case["expected"]
    ids = subprocess.run(args_for(case, str(p)) + ["--ids", "-m", os.path.join(ROOT, "models", "tiny", "tokenizer.json")],
                         capture_output=True, check=True).stdout.split()
    assert [int(x) for x in ids] == case["expected_ids"]


def test_render_separate_tools_file_and_no_think(tmp_path):
    m = tmp_path / "m.json"
    t = tmp_path / "t.json"
    m.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    t.write_text(json.dumps([{"name": "f", "parameters": {}}]))
    out = subprocess.run([NF, "render", "--messages", str(m), "--tools", str(t), "--no-think"], capture_output=True,
                         check=True).stdout.decode()
    assert '{"name": "f", "parameters": {}}\n</tools>' in out
    assert out.endswith("<|user|>hi<|assistant|><think></think>")


def test_render_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = subprocess.run([NF, "render", "--messages", str(bad)], capture_output=True)
    assert r.returncode != 0 and b"bad.json" in r.stderr
    r = subprocess.run([NF, "render", "--bogus"], capture_output=True)
    assert r.returncode == 2 and b"usage" in r.stderr
    msg = tmp_path / "m.json"
    msg.write_text(json.dumps([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}]))
    r = subprocess.run([NF, "render", "--messages", str(msg)], capture_output=True)
    assert r.returncode != 0 and b"arguments" in r.stderr
