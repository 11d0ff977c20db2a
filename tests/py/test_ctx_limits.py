"""The context size (`--ctx`) at every entry point: `nf run`, `nf chat`, `nf logits`, `nf-server` and `nf-bench`.

Each one refuses cleanly (exit 2 for a bad value, a clear message naming the numbers, nothing computed): a value that
is not a positive integer, a context beyond the model's context length, and input longer than the context. The
model here is the converted fixture (context length 4096, as tests/py/test_cli.py), and the embedded tiny model
(context length 1048576) shows that a 1M context is accepted where memory allows (the state grows on demand, so
accepting it costs nothing until tokens arrive). The server's refusal of a request longer than --ctx (400,
context_length_exceeded, n_prompt_tokens and n_ctx) is in tests/py/test_server_bad.py; the state's own refusal of a
reserve past its limit in tests/c/test_state_limit.c."""
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("NF_BUILD", ROOT / "build"))
NF = BUILD / "nf"
FIXTURE = ROOT / "tests" / "data" / "convert" / "bf16"
TINY = ROOT / "models" / "tiny" / "nf-tiny-bf16.gguf"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    out = tmp_path_factory.mktemp("ctx") / "model.gguf"
    subprocess.run([str(BUILD / "nf-convert"), str(FIXTURE), "-o", str(out), "-r", "f32", "-t", "1"], check=True,
                   capture_output=True)
    return str(out)


def run(*args, input=None, timeout=120):
    return subprocess.run([str(a) for a in args], input=input, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("cmd", ["run", "chat"])
@pytest.mark.parametrize("bad", ["abc", "0", "-5", "12x", ""])
def test_run_and_chat_refuse_a_ctx_that_is_not_a_count(model, cmd, bad):
    p = run(NF, cmd, "-m", model, "--ctx", bad, "-p", "hi") if cmd == "run" else \
        run(NF, cmd, "-m", model, "--ctx", bad, input="")
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "--ctx: expected a positive number of tokens" in p.stderr and repr(bad) in p.stderr.replace('"', "'")


@pytest.mark.parametrize("cmd", ["run", "chat"])
def test_run_and_chat_refuse_a_ctx_beyond_the_model(model, cmd):
    args = (["-p", "hi"] if cmd == "run" else [])
    p = run(NF, cmd, "-m", model, "--ctx", 4097, *args, input="")
    assert p.returncode != 0
    assert "context size 4097 exceeds the model's context length 4096" in p.stderr, p.stderr
    p = run(NF, cmd, "-m", model, "--ctx", 4096, "-n", 2, "--raw" if cmd == "run" else "--no-think",
            *args, input="hello\n/quit\n")
    assert p.returncode == 0, p.stderr


def test_run_refuses_a_prompt_longer_than_ctx(model):
    p = run(NF, "run", "-m", model, "--ctx", 8, "--raw", "-p", "word " * 40, "-n", 2)
    assert p.returncode == 1
    assert "exceed the context size 8" in p.stderr, p.stderr
    assert "decode:" not in p.stderr          # nothing was generated


def test_a_1m_context_is_accepted(tmp_path):
    """The embedded model's context length is 1048576: --ctx 1048576 runs, one more is refused."""
    p = run(NF, "run", "-m", TINY, "--ctx", 1048576, "--raw", "-p", "hello", "-n", 2)
    assert p.returncode == 0, p.stderr
    p = run(NF, "run", "-m", TINY, "--ctx", 1048577, "--raw", "-p", "hello", "-n", 2)
    assert p.returncode != 0 and "exceeds the model's context length 1048576" in p.stderr


def test_logits_ctx(model, tmp_path):
    ids = tmp_path / "ids.txt"
    ids.write_text(" ".join(str(5 + i) for i in range(12)) + "\n")
    out = tmp_path / "l.f32"
    p = run(NF, "logits", "-m", model, "--tokens", ids, "--out", out, "--ctx", 11)
    assert p.returncode == 2 and "holds 12 positions; the context size is 11 (--ctx)" in p.stderr, p.stderr
    assert not out.exists()
    p = run(NF, "logits", "-m", model, "--tokens", ids, "--out", out, "--ctx", 5000)
    assert p.returncode == 2 and "--ctx 5000 exceeds the model's context length 4096" in p.stderr, p.stderr
    p = run(NF, "logits", "-m", model, "--tokens", ids, "--out", out, "--ctx", "1e3")
    assert p.returncode == 2 and "expected a positive number" in p.stderr
    p = run(NF, "logits", "-m", model, "--tokens", ids, "--out", out, "--ctx", 12)
    assert p.returncode == 0, p.stderr
    assert out.stat().st_size > 0
    # without --ctx the limit is the model's context length
    many = tmp_path / "many.txt"
    many.write_text(" ".join("5" for _ in range(4097)) + "\n")
    p = run(NF, "logits", "-m", model, "--tokens", many, "--out", out)
    assert p.returncode == 2 and "holds 4097 positions; the context size is 4096 (the model's context length)" \
        in p.stderr, p.stderr


@pytest.mark.parametrize("ctx,code,needle", [("abc", 2, "--ctx: expected a positive number of tokens"),
                                             ("0", 2, "--ctx: expected a positive number of tokens"),
                                             ("4097", 1, "context size 4097 exceeds the model's context length 4096")])
def test_server_refuses_a_bad_ctx_at_startup(model, ctx, code, needle):
    p = run(BUILD / "nf-server", "-m", model, "--port", "0", "--ctx", ctx, timeout=60)
    assert p.returncode == code, (p.returncode, p.stderr)
    assert needle in p.stderr and "http://" not in p.stdout


def test_bench_refuses_capacity_and_memory_with_numbers(tmp_path):
    bench = BUILD / "nf-bench"
    quick = ["--synthetic", "tiny:f32", "-t", "2", "--probe-mib", "8", "--warmup", "4"]
    p = run(bench, *quick, "--frontiers", "64", "--gen", 8, "--ctx", 70)
    assert p.returncode == 2 and "frontier 64 plus 8 probe tokens needs 72 positions; --ctx is 70" in p.stderr
    p = run(bench, *quick, "--frontiers", "4096", "--gen", 8)
    assert p.returncode == 2 and "exceed the model's context length 4096" in p.stderr
    # glm53 at 1M: the weights and the state are counted before anything is made (host memory on the CPU backend)
    avail = 0
    for ln in open("/proc/meminfo"):
        if ln.startswith("MemAvailable:"):
            avail = int(ln.split()[1]) * 1024
    if avail > 125e9:
        pytest.skip("this host could hold glm53:q2 and a 1M-token state in memory")
    p = run(bench, "--synthetic", "glm53:q2", "--frontiers", "1048000", "--gen", 8, "--fill", "synthetic")
    assert p.returncode == 2, p.stderr
    assert "GB" in p.stderr and "state" in p.stderr and "1048008" in p.stderr, p.stderr
    assert "nf-bench: build" not in p.stderr
