"""nfserver.py — start and talk to a real nf-server for the server tests (not a test module itself).

The model is the embedded trained model (models/tiny/nf-tiny-bf16.gguf) when present; otherwise the bf16 test
fixture is converted with nf-convert (it carries a tokenizer). The server listens on a free loopback port
(--port 0; the port is read from its first stdout line)."""
import http.client
import json
import os
import re
import socket
import subprocess
import tempfile
import time

BUILD = os.environ.get("NF_BUILD", "build")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EMBEDDED = os.path.join(ROOT, "models", "tiny", "nf-tiny-bf16.gguf")
FIXTURE = os.path.join(ROOT, "tests", "data", "convert", "bf16")

_model_cache = {}


def model_path():
    if os.path.exists(EMBEDDED):
        return EMBEDDED
    if "conv" not in _model_cache:
        d = tempfile.mkdtemp(prefix="nf-server-model-")
        out = os.path.join(d, "fixture-bf16.gguf")
        subprocess.run([os.path.join(BUILD, "nf-convert"), FIXTURE, "-o", out, "--recipe", "f32", "-t", "1"],
                       check=True, capture_output=True, timeout=120)
        _model_cache["conv"] = out
    return _model_cache["conv"]


class Server:
    def __init__(self, *extra, threads=2, env=None):
        self.args = [os.path.join(BUILD, "nf-server"), "-m", model_path(), "--port", "0", "--threads", str(threads),
                     "--allow-forced-output", *map(str, extra)]
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})})
        line = self.proc.stdout.readline()
        m = re.search(r"http://([\d.]+):(\d+) \(model (\S+), context (\d+)\)", line)
        if not m:
            err = self.proc.stderr.read() if self.proc.poll() is not None else ""
            self.proc.kill()
            raise RuntimeError(f"nf-server did not start: {line!r} {err}")
        self.host, self.port, self.model_id, self.n_ctx = m.group(1), int(m.group(2)), m.group(3), int(m.group(4))
        self.url = f"http://{self.host}:{self.port}"

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def rss_kb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    # -- raw HTTP -------------------------------------------------------------------------------------------
    def request(self, method, path, body=None, headers=None, timeout=60):
        c = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, dict(r.getheaders()), data

    def json(self, method, path, body=None, headers=None, timeout=60):
        st, h, data = self.request(method, path, body, headers, timeout)
        try:
            return st, json.loads(data) if data else None
        except ValueError:
            return st, data.decode(errors="replace")

    def metrics(self):
        st, _, data = self.request("GET", "/metrics")
        assert st == 200
        out = {}
        for line in data.decode().splitlines():
            if line.startswith("#") or not line.strip():
                continue
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
        return out

    def healthy(self):
        try:
            st, body = self.json("GET", "/health", timeout=10)
            return st == 200 and body == {"status": "ok"}
        except OSError:
            return False

    def raw_socket(self, timeout=30):
        s = socket.create_connection((self.host, self.port), timeout=timeout)
        return s


def sse_events(raw):
    """Parse SSE text into a list of (event, data-string)."""
    out = []
    for block in raw.split("\n\n"):
        ev, data = None, []
        for line in block.split("\n"):
            if line.startswith("event: "):
                ev = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
        if data:
            out.append((ev, "\n".join(data)))
    return out
