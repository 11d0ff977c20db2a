"""test_server_spec.py — nf-server with speculative decoding (--draft, docs/speculative.md) on the embedded model,
CPU: temperature-0 chat completions through the lookup drafter are byte-identical to the serial server's (with the
default admission controller and with speculation forced on, reasoning included), the decoder's per-request stats
reach /metrics and the log, and bad speculative options are refused at startup with exit 2."""
import subprocess

import pytest

from nfserver import BUILD, Server, model_path

# structured prompts (repeated keys and rows) give the lookup drafter matches; prose gives it few
PROMPTS = [
    'Continue this JSON list with five more rows: [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 3, "name": "c"},',
    "SELECT id, name FROM users WHERE id = 1; SELECT id, name FROM users WHERE id = 2; SELECT id, name FROM users",
    "Tell me a short story about a lighthouse keeper.",
]


def complete(srv, prompt, think):
    body = {"model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": 160, "temperature": 0}
    if not think:
        body["reasoning_effort"] = "none"
    st, o = srv.json("POST", "/v1/chat/completions", body, timeout=300)
    assert st == 200, o
    msg = o["choices"][0]["message"]
    return msg.get("reasoning_content"), msg.get("content"), o["usage"]["completion_tokens"]


def run_all(*extra):
    s = Server(*extra)
    try:
        outs = [complete(s, p, think) for p in PROMPTS for think in (True, False)]
        metrics = s.metrics()
    finally:
        s.stop()
    return outs, metrics, s.proc.stderr.read()


@pytest.fixture(scope="module")
def serial():
    return run_all()


@pytest.mark.parametrize("extra", [("--draft", "lookup"),
                                   ("--draft", "lookup", "--spec-mode", "speculative", "--spec-set", "reasoning=1",
                                    "--draft-max", "4")],
                         ids=["conservative", "always"])
def test_lookup_identical_to_serial(serial, extra):
    outs, metrics, log = run_all(*extra)
    assert outs == serial[0]
    assert sum(n for _, _, n in outs) > 100  # the comparison covered real output
    assert serial[1]["nf_spec_cycles_total"] == 0 and serial[1]["nf_spec_draft_tokens_total"] == 0
    if "speculative" in extra:  # forced on: drafts were verified (and some accepted on the structured prompts)
        assert metrics["nf_spec_cycles_total"] > 0
        assert 0 < metrics["nf_spec_accepted_tokens_total"] <= metrics["nf_spec_draft_tokens_total"]
    assert log.count("nf-server: spec[") == len(PROMPTS) * 2, log  # one stats line per request


@pytest.mark.parametrize("args,needle", [
    (["--draft", "bogus"], "--draft: expected lookup, mtp or model:FILE, got 'bogus'"),
    (["--draft", "model:/nonexistent/draft.gguf"], "--draft model:/nonexistent/draft.gguf:"),
    (["--draft", "lookup", "--draft-max", "0"], "--draft-max: expected 1..32, got '0'"),
    (["--draft", "lookup", "--spec-mode", "sometimes"], "--spec-mode"),
    (["--draft", "lookup", "--spec-set", "window"], "--spec-set: spec option 'window': expected key=value"),
    (["--spec-mode", "speculative"], "need --draft D"),
    (["--draft"], "--draft: missing value"),
])
def test_bad_spec_options_refused(args, needle):
    p = subprocess.run([f"{BUILD}/nf-server", "-m", model_path(), "--port", "0", *args], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert needle in p.stderr and "listening" not in p.stdout, p.stderr


@pytest.mark.parametrize("args,needle", [
    (["--prefill-chunk", "0"], "--prefill-chunk: expected 1..65536 tokens, got '0'"),
    (["--prefill-chunk", "70000"], "--prefill-chunk: expected 1..65536 tokens, got '70000'"),
    (["--backend", "gpu"], "--backend: expected cpu or cuda, got 'gpu'"),
] + ([] if "cuda" in BUILD else [(["--backend", "cuda"], "no CUDA backend; build with `make cuda` and use "
                                                         "build/cuda/nf-server")]))
def test_bad_session_options_refused(args, needle):
    """nf-server's --backend and --prefill-chunk (app/session_args.c) refuse bad values before loading"""
    p = subprocess.run([f"{BUILD}/nf-server", "-m", model_path(), "--port", "0", *args], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert needle in p.stderr and "listening" not in p.stdout, p.stderr
