"""test_server_disk.py — the on-disk state cache (--kv-disk-dir): a prompt's state saved by one server process is
served by the next one after a restart (the prefix is reported as cached and not prefilled again); another
conversation interleaved in between is resumed from disk too; a corrupt file is detected, skipped and removed;
the directory stays within its budget."""
import glob
import os

import anthropic
import pytest

from nfserver import Server

SYSTEM = ("You are a careful coding assistant. " * 30).strip()


def ask(srv, text, max_tokens=3):
    c = anthropic.Anthropic(base_url=srv.url, api_key="x", max_retries=0, timeout=120)
    r = c.messages.create(model="m", max_tokens=max_tokens, system=SYSTEM, messages=[{"role": "user", "content": text}])
    return r.usage.input_tokens + r.usage.cache_read_input_tokens, r.usage.cache_read_input_tokens


def test_survives_restart(tmp_path):
    d = str(tmp_path / "kv")
    s = Server("--kv-disk-dir", d, "--kv-disk-min-tokens", "64")
    try:
        prompt, cached = ask(s, "first question")
        assert cached == 0 and prompt > 200
        files = glob.glob(os.path.join(d, "*.nfkv"))
        assert len(files) == 1 and files[0].endswith(f"-{prompt}.nfkv")
    finally:
        s.stop()
    s = Server("--kv-disk-dir", d, "--kv-disk-min-tokens", "64", "--ram-cache-mb", "0")
    try:
        prompt2, cached2 = ask(s, "first question")
        assert prompt2 == prompt and cached2 == prompt  # nothing prefilled again
        m = s.metrics()
        assert m["nf_disk_cache_hits_total"] == 1 and m["nf_prefill_tokens_total"] == 0
        # an unrelated conversation replaces the live state; the first one comes back from disk
        ask(s, "x " * 80, max_tokens=1)
        _, cached3 = ask(s, "first question")
        assert cached3 == prompt
        assert s.metrics()["nf_disk_cache_hits_total"] == 2
    finally:
        s.stop()


def test_corrupt_file_skipped(tmp_path):
    d = str(tmp_path / "kv")
    s = Server("--kv-disk-dir", d, "--kv-disk-min-tokens", "64")
    try:
        prompt, _ = ask(s, "corrupt me")
    finally:
        s.stop()
    (f,) = glob.glob(os.path.join(d, "*.nfkv"))
    data = bytearray(open(f, "rb").read())
    data[len(data) // 2] ^= 0x55
    open(f, "wb").write(bytes(data))
    s = Server("--kv-disk-dir", d, "--kv-disk-min-tokens", "64")
    try:
        prompt2, cached = ask(s, "corrupt me")
        assert prompt2 == prompt and cached == 0
        assert s.healthy() and s.metrics()["nf_disk_cache_hits_total"] == 0
        # the bad file was removed and a good one written in its place
        (f2,) = glob.glob(os.path.join(d, "*.nfkv"))
        assert open(f2, "rb").read() != bytes(data)
    finally:
        s.stop()
    # a truncated file is skipped as well
    data = open(f2, "rb").read()
    open(f2, "wb").write(data[: len(data) // 3])
    s = Server("--kv-disk-dir", d, "--kv-disk-min-tokens", "64")
    try:
        _, cached = ask(s, "corrupt me")
        assert cached == 0 and s.healthy()
    finally:
        s.stop()


def test_budget(tmp_path):
    d = str(tmp_path / "kv")
    s = Server("--kv-disk-dir", d, "--kv-disk-min-tokens", "64", "--kv-disk-space-mb", "1")
    try:
        sizes = []
        for i in range(5):
            ask(s, f"question number {i} " * (i + 1), max_tokens=1)
            files = glob.glob(os.path.join(d, "*.nfkv"))
            sizes.append(max(os.path.getsize(f) for f in files))
            total = sum(os.path.getsize(f) for f in files)
            assert total <= (1 << 20) + max(sizes), (i, total)
        assert s.metrics()["nf_disk_cache_saves_total"] == 5
        assert len(glob.glob(os.path.join(d, "*.nfkv"))) < 5  # older states were evicted
        assert not glob.glob(os.path.join(d, "*.tmp.*"))
    finally:
        s.stop()
