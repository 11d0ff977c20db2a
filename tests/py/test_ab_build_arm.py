"""nf-ab build-arm on a throw-away git repository whose Makefile "builds" the fake bench: a worktree per arm at the
ref, a clean build, and the stamp (commit, dirty flag, compiler, the flags make actually used, sha256 of binaries);
then two built arms go through run and report."""

import json
import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab_support as S  # noqa: E402

MAKEFILE = """CC ?= cc
CFLAGS ?= -O2
CFLAGS += -DFAKE_ARM=1
build/nf-bench: bench.sh
\tmkdir -p build && cp bench.sh build/nf-bench && chmod +x build/nf-bench
clean:
\trm -rf build
"""

pytestmark = pytest.mark.skipif(shutil.which("git") is None or shutil.which("make") is None, reason="git/make")


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo)] + list(args), capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "repo"
    os.makedirs(r)
    git(r, "init", "-q")
    git(r, "config", "user.email", "t@example.com")
    git(r, "config", "user.name", "t")
    (r / "Makefile").write_text(MAKEFILE)
    (r / ".gitignore").write_text("/build/\n")
    shutil.copy(S.FAKE, r / "bench.sh")
    (r / "fake.env").write_text("BASE_DECODE=30\n")
    (r / "prompt.txt").write_text("the prompt\n")
    git(r, "add", ".")
    git(r, "commit", "-q", "-m", "base")
    return r


def build(tmp_path, repo, ref, label, *more):
    return S.nfab(tmp_path, "build-arm", ref, label, "--repo", repo, "--root", tmp_path / "arms", "-j", 1, *more)


def test_build_arm_stamps(tmp_path, repo):
    p = build(tmp_path, repo, "HEAD", "main")
    assert p.returncode == 0, p.stderr
    arm = tmp_path / "arms" / "main"
    assert p.stdout.strip() == str(arm)
    b = json.load(open(arm / "build.json"))
    assert b["commit"] == git(repo, "rev-parse", "HEAD")
    assert b["dirty"] is False and b["source_dirty"] is False
    assert "-DFAKE_ARM=1" in b["cflags"]
    assert b["cc_version"]
    assert b["nvcc_version"]          # a version line or "absent", never empty
    bench = arm / "tree" / "build" / "nf-bench"
    assert b["bench_sha256"] == S.sha256(bench)
    assert b["sha256"]["build/nf-bench"] == S.sha256(bench)
    kv = dict(ln.split("=", 1) for ln in open(arm / "arm.txt").read().splitlines())
    assert kv["bench"] == str(bench) and kv["tree"] == str(arm / "tree") and kv["commit"] == b["commit"]
    assert git(arm / "tree", "rev-parse", "HEAD") == b["commit"]
    assert (arm / "build.log").exists()


def test_build_arm_refusals(tmp_path, repo):
    p = build(tmp_path, repo, "no-such-ref", "x")
    assert p.returncode == 2 and "does not name a commit" in p.stderr
    assert not (tmp_path / "arms" / "x").exists()
    p = build(tmp_path, repo, "HEAD", "bad/label")
    assert p.returncode == 2
    assert build(tmp_path, repo, "HEAD", "main").returncode == 0
    p = build(tmp_path, repo, "HEAD", "main")
    assert p.returncode == 2 and "exists" in p.stderr
    p = build(tmp_path, repo, "HEAD", "main", "--force")
    assert p.returncode == 0, p.stderr


def test_build_arm_without_bench_fails(tmp_path, repo):
    (repo / "Makefile").write_text("build/nf-bench:\n\t@echo no bench here\nclean:\n\t@true\n")
    git(repo, "commit", "-q", "-am", "no bench")
    p = build(tmp_path, repo, "HEAD", "nob")
    assert p.returncode == 1 and "did not produce" in p.stderr


def test_uncommitted_changes_are_not_in_the_arm(tmp_path, repo):
    (repo / "fake.env").write_text("BASE_DECODE=99\n")
    p = build(tmp_path, repo, "HEAD", "main")
    assert p.returncode == 0, p.stderr
    assert "uncommitted changes" in p.stderr
    b = json.load(open(tmp_path / "arms" / "main" / "build.json"))
    assert b["source_dirty"] is True and b["dirty"] is False
    assert (tmp_path / "arms" / "main" / "tree" / "fake.env").read_text() == "BASE_DECODE=30\n"


def test_two_refs_through_run_and_report(tmp_path, repo):
    base = git(repo, "rev-parse", "HEAD")
    (repo / "fake.env").write_text("BASE_DECODE=33\n")
    git(repo, "commit", "-q", "-am", "faster")
    assert build(tmp_path, repo, base, "main").returncode == 0
    assert build(tmp_path, repo, "HEAD", "pr").returncode == 0
    a, b = tmp_path / "arms" / "main", tmp_path / "arms" / "pr"
    assert json.load(open(a / "build.json"))["commit"] != json.load(open(b / "build.json"))["commit"]
    out = tmp_path / "out"
    p = S.nfab(tmp_path, "run", "--arm", "main=%s" % a, "--arm", "pr=%s" % b, "--prompt", "prompt.txt",
               "--reps", 2, "--ctx-start", 2048, "--ctx-max", 4096, "--step-incr", 2048, "--gen", 8, "--runs", 1, "--out", out)
    assert p.returncode == 0, p.stderr
    m = json.load(open(out / "manifest.json"))
    assert m["arms"][0]["commit"] == base and m["arms"][0]["build"]["commit"] == base
    p = S.nfab(tmp_path, "report", out)
    assert p.returncode == 0, p.stderr
    assert "headline B/A 1.1000 (+10.0%)" in p.stdout
