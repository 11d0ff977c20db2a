"""`nf run` and `nf chat` end to end (src/app/cmd_chat.c over src/engine/session.c).

The model is tests/data/convert/bf16 converted with nf-convert (F32): a 2-layer glm5_next with random weights
and a small GLM tokenizer (the real special tokens), so the text is noise but every path is real: chat
template, prefill, sampling, output parser, stop tokens, speed lines. Chat is driven through a pipe (commands,
two turns: the second prefills only the new turn) and through a pseudo-terminal (libedit line editing; Ctrl-C
during a generation keeps the process and the conversation; Ctrl-C at the prompt exits).
"""
import os
import pty
import re
import select
import signal
import subprocess
import time

import pytest

BUILD = os.environ.get("NF_BUILD", "build")
NF = os.path.join(BUILD, "nf")
HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "data", "convert", "bf16")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "model.gguf"
    subprocess.run([os.path.join(BUILD, "nf-convert"), FIXTURE, "-o", str(out), "-r", "f32", "-t", "1"],
                   check=True, capture_output=True)
    return str(out)


def nf(*args, input=None, env=None, timeout=60):
    return subprocess.run([NF, *args], input=input, capture_output=True, timeout=timeout, env=env)


def n_text_tokens(model, text):
    r = nf("tokenize", "-m", model, "--text", text, "--ids-only")
    assert r.returncode == 0, r.stderr
    return len(r.stdout.split())


def test_run_generates_text_and_speed(model, tmp_path):
    prompt = "Write a short Python function that reverses a string."
    r = nf("run", "-m", model, "-p", prompt, "-n", "24", "--seed", "1", "-t", "1")
    assert r.returncode == 0, r.stderr
    err = r.stderr.decode()
    m = re.search(r"prefill: (\d+) tokens in [\d.]+ s \(([\d.]+) tokens/s\)", err)
    assert m, err
    d = re.search(r"decode: (\d+) tokens in [\d.]+ s \(([\d.]+) tokens/s\), "
                  r"time to first token [\d.]+ s, stop: (.+)", err)
    assert d, err
    assert int(d.group(1)) >= 1
    # the prompt is the chat template's rendering: the same ids as `nf render --ids`
    msgs = tmp_path / "m.json"
    msgs.write_text('[{"role": "user", "content": "%s"}]' % prompt)
    ids = nf("render", "--messages", str(msgs), "-m", model, "--ids")
    assert ids.returncode == 0, ids.stderr
    assert int(m.group(1)) == len(ids.stdout.split())
    # some text came out (answer on stdout and/or reasoning on stderr) and it is valid UTF-8
    r.stdout.decode("utf-8")
    assert len(r.stdout.strip()) + len(err.split("prefill:")[0].strip()) > 0


def test_run_raw_greedy_is_deterministic(model):
    args = ["run", "-m", model, "-p", "hello world", "--raw", "--temp", "0", "-n", "40", "--ignore-stop", "-t", "1"]
    a, b = nf(*args), nf(*args)
    assert a.returncode == 0 and b.returncode == 0, a.stderr
    assert a.stdout == b.stdout and len(a.stdout) > 0
    a.stdout.decode("utf-8")  # pieces are complete UTF-8 (invalid bytes became U+FFFD)
    assert re.search(r"decode: 40 tokens", a.stderr.decode()), a.stderr
    assert re.search(r"prefill: %d tokens" % n_text_tokens(model, "hello world"), a.stderr.decode())
    # a different seed with sampling gives (almost surely) another text; same seed the same text
    s1 = nf("run", "-m", model, "-p", "hi", "--raw", "--seed", "7", "-n", "40", "--ignore-stop", "-t", "1")
    s2 = nf("run", "-m", model, "-p", "hi", "--raw", "--seed", "7", "-n", "40", "--ignore-stop", "-t", "1")
    assert s1.stdout == s2.stdout


def test_run_usage_and_default_model(model):
    r = nf("run", "-m", model)
    assert r.returncode == 2 and b"prompt is required" in r.stderr
    r = nf("run", "--bogus")
    assert r.returncode == 2
    assert nf("run", "--help").returncode == 0
    # no -m: $NF_MODEL
    env = dict(os.environ, NF_MODEL=model)
    r = nf("run", "-p", "hi", "-n", "4", "-t", "1", env=env)
    assert r.returncode == 0, r.stderr
    assert b"decode:" in r.stderr
    # a missing model is a clean error
    r = nf("run", "-m", "/nonexistent.gguf", "-p", "hi")
    assert r.returncode == 1 and b"error" in r.stderr


STATS = re.compile(r"\[prefill (\d+) tokens \((\d+) reused\) [\d.]+ tokens/s \| decode (\d+) tokens [\d.]+ tokens/s"
                   r" \| ttft [\d.]+ s \| ctx (\d+)/(\d+) \| ([a-z ]+)\]")
CTX = re.compile(r"ctx: (\d+) / (\d+) tokens, (\d+) messages")


def test_chat_pipe_two_turns_prefill_only_the_new_turn(model):
    script = "hello there\n/ctx\nsecond turn\n/ctx\n/nothink\nthird\n/reset\n/ctx\n/help\n/bogus\n/quit\n"
    r = nf("chat", "-m", model, "-n", "20", "--seed", "3", "-t", "1", input=script.encode())
    assert r.returncode == 0, r.stderr
    out, err = r.stdout.decode("utf-8"), r.stderr.decode("utf-8")
    stats = STATS.findall(err)
    ctx = CTX.findall(out)
    assert len(stats) == 3, err
    assert len(ctx) == 3, out
    (p1, r1, d1, c1, _, _), (p2, r2, d2, c2, _, _), (p3, r3, _, c3, _, _) = [tuple(s) for s in stats]
    assert int(r1) == 0 and int(c1) == int(p1) + int(d1) - (0 if stats[0][5] != "stop token" else 1)
    assert int(ctx[0][0]) == int(c1) and ctx[0][2] == "2"
    # turn 2: everything before is reused; only <|user|> + text + <|assistant|> + <think> is prefilled
    assert int(r2) == int(c1)
    assert int(p2) == n_text_tokens(model, "second turn") + 3
    assert int(ctx[1][0]) == int(c2) and ctx[1][2] == "4"
    # turn 3 without thinking: <|user|> third <|assistant|> <think> </think>
    assert int(r3) == int(c2)
    assert int(p3) == n_text_tokens(model, "third") + 4
    assert "thinking off" in out
    # /reset empties the state
    assert ctx[2][0] == "0" and ctx[2][2] == "0"
    assert "/think" in out and "unknown command /bogus" in out


class Pty:
    def __init__(self, argv):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execv(argv[0], argv)
        self.buf = b""

    def read_until(self, pat, timeout=20.0, start=0):
        end = time.time() + timeout
        while pat not in self.buf[start:]:
            left = end - time.time()
            if left <= 0:
                return False
            r, _, _ = select.select([self.fd], [], [], min(left, 0.2))
            if r:
                try:
                    d = os.read(self.fd, 65536)
                except OSError:
                    return pat in self.buf[start:]
                if not d:
                    return pat in self.buf[start:]
                self.buf += d
        return True

    def write(self, b):
        os.write(self.fd, b)

    def wait(self, timeout=10.0):
        end = time.time() + timeout
        while time.time() < end:
            self.read_until(b"\x00never", timeout=0.1)
            pid, st = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return st
        return None

    def kill(self):
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def test_chat_ctrl_c_stops_generation_and_keeps_the_conversation(model):
    # --ignore-stop -n 0: the answer runs until interrupted. The embedded model (context length 1048576): the
    # fixture's 4096 tokens can fill before the Ctrl-C arrives, and a --ctx beyond the model is refused
    tiny = os.path.join(HERE, "..", "..", "models", "tiny", "nf-tiny-bf16.gguf")
    p = Pty([NF, "chat", "-m", tiny, "-n", "0", "--ignore-stop", "-c", "1048576", "-t", "1", "--seed", "1"])
    try:
        assert p.read_until(b"> "), p.buf
        mark = len(p.buf)
        p.write(b"hello\r")
        assert p.read_until(b"\x1b[2m", start=mark), p.buf[-500:]  # reasoning (dimmed on a terminal) started
        time.sleep(0.4)
        p.write(b"\x03")
        assert p.read_until(b"(interrupted", start=mark), p.buf[-500:]
        assert p.read_until(b"cancelled]", start=mark)
        s1 = [m for m in STATS.finditer(p.buf[mark:].decode("utf-8", "replace"))]
        assert len(s1) == 1
        c1 = int(s1[0].group(4))
        assert int(s1[0].group(3)) > 0
        mark = p.buf.index(b"cancelled]", mark)
        assert p.read_until(b"> ", start=mark)
        mark = len(p.buf)
        p.write(b"/ctx\r")
        assert p.read_until(b"messages", start=mark)
        m = CTX.search(p.buf[mark:].decode("utf-8", "replace"))
        assert m and int(m.group(1)) == c1 and m.group(3) == "2"  # the partial answer is in the conversation
        # the conversation goes on: the next turn reuses everything and prefills only itself
        mark = len(p.buf)
        p.write(b"again\r")
        assert p.read_until(b"\x1b[2m", start=mark)
        time.sleep(0.2)
        p.write(b"\x03")
        assert p.read_until(b"cancelled]", start=mark), p.buf[-500:]
        s2 = STATS.search(p.buf[mark:].decode("utf-8", "replace"))
        assert int(s2.group(2)) == c1
        assert int(s2.group(1)) == n_text_tokens(tiny, "again") + 3
        # Ctrl-D at the prompt exits normally
        mark = p.buf.index(b"cancelled]", mark)
        assert p.read_until(b"> ", start=mark)
        p.write(b"\x04")
        st = p.wait()
        assert st is not None and os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0, st
    finally:
        p.kill()


def test_chat_ctrl_c_at_the_prompt_exits(model):
    p = Pty([NF, "chat", "-m", model, "-t", "1"])
    try:
        assert p.read_until(b"> ")
        p.write(b"\x03")
        st = p.wait()
        assert st is not None and os.WIFEXITED(st) and os.WEXITSTATUS(st) == 130, (st, p.buf)
    finally:
        p.kill()


def test_invalid_utf8_input_is_accepted(model, tmp_path):
    # a prompt with invalid UTF-8 (Latin-1 bytes) is made valid (U+FFFD), not dropped
    f = tmp_path / "p.txt"
    f.write_bytes(b"caf\xe9 \xff")
    r = nf("run", "-m", model, "-f", str(f), "-n", "3", "--temp", "0", "-t", "1")
    assert r.returncode == 0, r.stderr
    m = re.search(r"prefill: (\d+) tokens", r.stderr.decode())
    assert int(m.group(1)) > 10
    r = nf("chat", "-m", model, "-n", "3", "-t", "1", input=b"caf\xe9\n/ctx\n")
    assert r.returncode == 0, r.stderr
    assert "2 messages" in r.stdout.decode()


def test_prefill_chunk_sets_the_forward_calls(model):
    """--prefill-chunk N: the prefill runs in calls of N tokens (the per-chunk progress lines say where each ends),
    and the greedy text is the same as with the default chunk"""
    prompt = "the quick brown fox jumps over the lazy dog " * 3
    base = nf("run", "-m", model, "-p", prompt, "-n", "8", "--temp", "0", "--progress", "0")
    assert base.returncode == 0, base.stderr
    r = nf("run", "-m", model, "-p", prompt, "-n", "8", "--temp", "0", "--progress", "0", "--prefill-chunk", "7")
    assert r.returncode == 0, r.stderr
    done = [int(m) for m in re.findall(rb"prefill (\d+)/\d+ tokens", r.stderr)]
    total = int(re.search(rb"prefill \d+/(\d+) tokens", r.stderr).group(1))
    assert total > 14 and done == list(range(7, total, 7)) + [total], r.stderr
    assert re.findall(rb"prefill (\d+)/\d+ tokens", base.stderr) == [str(total).encode()], base.stderr
    assert r.stdout == base.stdout


@pytest.mark.parametrize("args,needle", [
    (["--prefill-chunk", "0"], b"--prefill-chunk: expected 1..65536 tokens, got '0'"),
    (["--prefill-chunk", "12x"], b"--prefill-chunk: expected 1..65536 tokens, got '12x'"),
    (["--backend", "gpu"], b"--backend: expected cpu or cuda, got 'gpu'"),
])
def test_bad_session_options_refused(model, args, needle):
    r = nf("run", "-m", model, "-p", "hi", "-n", "1", *args)
    assert r.returncode == 2 and needle in r.stderr, r.stderr
