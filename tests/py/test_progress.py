"""Prefill progress at the entry points: `nf run` prints it on stderr (`--progress S`, default 2 s, so a short
prompt prints nothing), `nf-server` logs it on stderr (`--progress-log S`, default 5 s). The server spec gives
clients keepalives during a prefill, not progress events, so progress goes to the log there. The session-level
contract (counts, totals, the last report) is tests/c/test_prefill_progress.c."""
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nfserver import Server  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("NF_BUILD", ROOT / "build"))
NF = BUILD / "nf"
TINY = ROOT / "models" / "tiny" / "nf-tiny-bf16.gguf"
LINE = re.compile(r"prefill (\d+)/(\d+) tokens \(([\d.]+)%\), ([\d.]+) t/s")


def run(*args, timeout=300):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout)


def test_run_prints_progress_of_a_long_prefill(tmp_path):
    prompt = tmp_path / "p.txt"
    prompt.write_text("word " * 700)
    p = run(NF, "run", "-m", TINY, "--raw", "-f", prompt, "-n", 1, "-t", 2, "--progress", 0)
    assert p.returncode == 0, p.stderr
    rows = [tuple(int(x) for x in m.group(1, 2)) for m in LINE.finditer(p.stderr)]
    assert len(rows) >= 3, p.stderr
    total = rows[0][1]
    assert all(t == total for _, t in rows) and rows[-1][0] == total > 600
    assert [d for d, _ in rows] == sorted(d for d, _ in rows)
    assert "left" in p.stderr                       # an estimate while it runs
    # the default (every 2 s) says nothing about a prefill this short; off says nothing at all
    for extra in ([], ["--progress", "off"]):
        p = run(NF, "run", "-m", TINY, "--raw", "-p", "hello there", "-n", 1, "-t", 2, *extra)
        assert p.returncode == 0 and not LINE.search(p.stderr), p.stderr
    p = run(NF, "run", "-m", TINY, "--raw", "-p", "hi", "--progress", "soon")
    assert p.returncode == 2 and "--progress: expected seconds" in p.stderr


def test_server_logs_progress_of_a_prefill():
    s = Server("--progress-log", "0")
    try:
        st, body = s.json("POST", "/v1/chat/completions",
                          {"model": s.model_id, "max_tokens": 1,
                           "messages": [{"role": "user", "content": "word " * 600}]})
        assert st == 200, body
    finally:
        s.stop()
    log = s.proc.stderr.read()
    rows = [tuple(int(x) for x in m.group(1, 2)) for m in LINE.finditer(log)]
    assert rows and all(line.startswith("nf-server: prefill") for line in log.splitlines() if LINE.search(line)), log
    assert rows[-1][0] == rows[-1][1] > 500, rows
    p = run(BUILD / "nf-server", "-m", TINY, "--port", "0", "--progress-log", "-1")
    assert p.returncode == 2 and "--progress-log: expected seconds" in p.stderr
