"""nf-ab run (and build-arm) against fake arms: rotation (ab-protocol.md §6.6 item 16), refusals before any work, one
fresh process per trial from its own tree, the same prompt for all arms, GPU state read and never changed, failed
trials make an incomplete run, and run -> report end to end (A/B and A/A)."""

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab_support as S  # noqa: E402

SWEEP = ["--ctx-start", 2048, "--ctx-max", 8192, "--step-incr", 2048, "--gen", 16, "--runs", 1]


def calls(arm):
    p = os.path.join(arm, "tree", "calls.log")
    if not os.path.exists(p):
        return []
    return [dict(kv.split("=", 1) for kv in ln.split()) for ln in open(p).read().splitlines()]


def order(d):
    return [ln.split() for ln in open(os.path.join(d, "run-order.txt")).read().splitlines()]


@pytest.fixture
def arms(tmp_path):
    a = S.make_arm(tmp_path / "arms", "main", BASE_DECODE=30, NOISE=0.01, DRIFT=0.97)
    b = S.make_arm(tmp_path / "arms", "pr", BASE_DECODE=36, NOISE=0.01, DRIFT=0.97, SEED=2)
    return a, b


# ---- (16) rotation ---------------------------------------------------------------------------------------------
def test_rotation_abba_and_fresh_process_per_trial(tmp_path, arms):
    a, b = arms
    out = tmp_path / "out"
    p = S.nfab(tmp_path, "run", "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", "prompt.txt",
               "--reps", 4, "--out", out, *SWEEP)
    assert p.returncode == 0, p.stderr
    assert order(out) == [["1", "1", "main"], ["1", "2", "pr"], ["2", "1", "pr"], ["2", "2", "main"],
                          ["3", "1", "main"], ["3", "2", "pr"], ["4", "1", "pr"], ["4", "2", "main"]]
    # one process per (arm, rep), each with cwd = its own tree
    for arm in (a, b):
        c = calls(arm)
        assert [x["call"] for x in c] == ["1", "2", "3", "4"]
        assert all(x["cwd"] == os.path.join(arm, "tree") for x in c)
    for lab in ("main", "pr"):
        for rep in (1, 2, 3, 4):
            rows = open(os.path.join(out, "%s-rep%d.csv" % (lab, rep))).read().splitlines()
            assert rows[0].startswith(",".join(S.CONTRACT))
            assert [int(r.split(",")[0]) for r in rows[1:]] == [2048, 4096, 6144, 8192]
    tr = [json.loads(ln) for ln in open(os.path.join(out, "trials.jsonl"))]
    assert len(tr) == 8 and all(t["ok"] for t in tr)
    m = json.load(open(os.path.join(out, "manifest.json")))
    assert m["status"] == "complete" and m["mode"] == "ab"
    assert [x["label"] for x in m["arms"]] == ["main", "pr"]
    assert m["sweep"]["frontiers"] == [2048, 4096, 6144, 8192]
    assert m["arms"][0]["build"]["bench_sha256"] == S.sha256(os.path.join(a, "tree", "build", "nf-bench"))


def test_rotation_three_arms_each_leads_equally(tmp_path, arms):
    a, b = arms
    c = S.make_arm(tmp_path / "arms", "other", BASE_DECODE=33)
    out = tmp_path / "out"
    p = S.nfab(tmp_path, "run", "--arm", "main=" + a, "--arm", "pr=" + b, "--arm", "other=" + c,
               "--prompt", "prompt.txt", "--reps", 6, "--out", out, *SWEEP)
    assert p.returncode == 0, p.stderr
    o = order(out)
    leads = [x[2] for x in o if x[1] == "1"]
    assert sorted(leads) == ["main", "main", "other", "other", "pr", "pr"]
    for rep in range(1, 7):   # every rep runs every arm once
        assert sorted(x[2] for x in o if x[0] == str(rep)) == ["main", "other", "pr"]
    for pos in ("1", "2", "3"):
        assert sorted(x[2] for x in o if x[1] == pos) == ["main", "main", "other", "other", "pr", "pr"]


def _refused(tmp_path, arms_, *args, needle):
    out = tmp_path / "out"
    p = S.nfab(tmp_path, "run", *SWEEP, *args, "--out", out)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "refused" in p.stderr and needle in p.stderr, p.stderr
    assert not out.exists(), "a refusal must not create the output directory"
    for arm in arms_:
        assert calls(arm) == [], "a refusal must not start any bench"


def test_odd_reps_refused_before_any_work(tmp_path, arms):
    a, b = arms
    _refused(tmp_path, arms, "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", "prompt.txt", "--reps", 3,
             needle="not a multiple of the 2 arms")


def test_missing_build_refused(tmp_path, arms):
    a, b = arms
    _refused(tmp_path, arms, "--arm", "main=" + a, "--arm", "pr=" + str(tmp_path / "nope"), "--prompt", "prompt.txt",
             needle="missing build")
    os.remove(os.path.join(b, "build.json"))
    _refused(tmp_path, arms, "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", "prompt.txt",
             needle="build.json missing")


def test_non_executable_or_rebuilt_bench_refused(tmp_path, arms):
    a, b = arms
    bench = os.path.join(b, "tree", "build", "nf-bench")
    os.chmod(bench, 0o644)
    _refused(tmp_path, arms, "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", "prompt.txt",
             needle="missing or not executable")
    os.chmod(bench, 0o755)
    with open(bench, "a") as f:
        f.write("# rebuilt\n")
    _refused(tmp_path, arms, "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", "prompt.txt",
             needle="differs from the stamped")


def test_mismatched_inputs_refused(tmp_path, arms):
    a, b = arms
    base = ["--arm", "main=" + a, "--arm", "pr=" + b]
    _refused(tmp_path, arms, *base, "--prompt", "no-such-prompt.txt", needle="missing or empty")
    _refused(tmp_path, arms, *base, "--prompt", "prompt.txt", "--weights", tmp_path / "w.gguf",
             needle="weights")
    _refused(tmp_path, arms, "--arm", "main=" + a, "--arm", "pr=" + a, "--prompt", "prompt.txt",
             needle="same directory")
    _refused(tmp_path, arms, "--arm", "main=" + a, "--arm", "main=" + b, "--prompt", "prompt.txt",
             needle="given twice")
    _refused(tmp_path, arms, *base, "--prompt", "prompt.txt", "--ctx-start", 9000, needle="above --ctx-max")
    _refused(tmp_path, arms, *base, "--prompt", "prompt.txt", "--gen", "00", needle="positive integer")
    _refused(tmp_path, arms, "--arm", "main=" + a, "--prompt", "prompt.txt", needle="at least two")


def test_existing_run_never_overwritten(tmp_path, arms):
    a, b = arms
    out = tmp_path / "out"
    os.makedirs(out)
    (out / "main-rep1.csv").write_text("x\n")
    p = S.nfab(tmp_path, "run", "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", "prompt.txt", "--out", out,
               *SWEEP)
    assert p.returncode == 2 and "never overwritten" in p.stderr
    assert (out / "main-rep1.csv").read_text() == "x\n"


def test_engine_env_refused_unless_recorded(tmp_path, arms):
    a, b = arms
    args = ["run", "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", "prompt.txt", "--reps", 2, *SWEEP]
    p = S.nfab(tmp_path, *args, "--out", tmp_path / "o1", extra_env={"NF_KERNEL_ROUTE": "slow"})
    assert p.returncode == 2 and "NF_KERNEL_ROUTE" in p.stderr
    assert not (tmp_path / "o1").exists()
    p = S.nfab(tmp_path, *args, "--record-env", "--out", tmp_path / "o2", extra_env={"NF_KERNEL_ROUTE": "slow"})
    assert p.returncode == 0, p.stderr
    m = json.load(open(tmp_path / "o2" / "manifest.json"))
    assert "NF_KERNEL_ROUTE=slow" in m["env"]


def test_prompt_comes_from_arm_a_and_is_the_same_for_all(tmp_path, arms):
    a, b = arms
    out = tmp_path / "out"
    p = S.nfab(tmp_path, "run", "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", "prompt.txt", "--reps", 2,
               "--out", out, *SWEEP)
    assert p.returncode == 0, p.stderr
    m = json.load(open(out / "manifest.json"))
    assert m["prompt"]["sha256"] == S.sha256(os.path.join(a, "tree", "prompt.txt"))
    assert m["prompt"]["sha256"] != S.sha256(os.path.join(b, "tree", "prompt.txt"))
    assert os.path.isfile(m["prompt"]["path"]) and m["prompt"]["path"].startswith(str(out))


def test_no_gpu_recorded(tmp_path, arms):
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi")
    a, b = arms
    out = tmp_path / "out"
    p = S.nfab(tmp_path, "run", "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", "prompt.txt", "--reps", 2,
               "--out", out, *SWEEP)
    assert p.returncode == 0, p.stderr
    assert (out / "gpu-before.txt").read_text() == "no GPU\n"
    assert (out / "gpu-after.txt").read_text() == "no GPU\n"
    assert all(json.loads(ln)["gpu_after"] == "no GPU" for ln in open(out / "trials.jsonl"))
    assert json.load(open(out / "manifest.json"))["gpu"]["name"] == "no GPU"


def _fake_smi(tmp_path, busy=""):
    d = tmp_path / "smi"
    os.makedirs(d, exist_ok=True)
    log = d / "args.log"
    script = d / "nvidia-smi"
    script.write_text("""#!/bin/sh
echo "$*" >> %s
case "$*" in
  *query-compute-apps*) printf '%s' ;;
  *query-gpu=name\\ *|*query-gpu=name) echo "NVIDIA H200" ;;
  *) echo "index, name, temperature.gpu"; echo "0, NVIDIA H200, 41" ;;
esac
""" % (log, busy))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(d), log


def test_gpu_state_is_queried_never_changed(tmp_path, arms):
    a, b = arms
    smi, log = _fake_smi(tmp_path)
    out = tmp_path / "out"
    p = S.nfab(tmp_path, "run", "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", "prompt.txt", "--reps", 2,
               "--out", out, *SWEEP, extra_env={"PATH": smi + os.pathsep + os.environ["PATH"]})
    assert p.returncode == 0, p.stderr
    assert "NVIDIA H200, 41" in (out / "gpu-before.txt").read_text()
    assert "NVIDIA H200, 41" in (out / "gpu-after.txt").read_text()
    tr = [json.loads(ln) for ln in open(out / "trials.jsonl")]
    assert len(tr) == 4 and all("NVIDIA H200" in t["gpu_after"] for t in tr)
    assert json.load(open(out / "manifest.json"))["gpu"]["name"] == "NVIDIA H200"
    used = log.read_text().splitlines()
    assert used
    for line in used:   # only queries: no -pm, -lgc, -pl, -r, --lock-*, -mig ...
        assert all(w.startswith("--query-") or w.startswith("--format=") for w in line.split()), line


def test_busy_gpu_refused(tmp_path, arms):
    a, b = arms
    smi, _ = _fake_smi(tmp_path, busy="4242, python, 80000 MiB\\n")
    out = tmp_path / "out"
    p = S.nfab(tmp_path, "run", "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", "prompt.txt", "--reps", 2,
               "--out", out, *SWEEP, extra_env={"PATH": smi + os.pathsep + os.environ["PATH"]})
    assert p.returncode == 2 and "other compute processes" in p.stderr
    assert not out.exists()


def test_failed_trial_makes_an_incomplete_run(tmp_path):
    a = S.make_arm(tmp_path / "arms", "main")
    b = S.make_arm(tmp_path / "arms", "pr", FAIL_CALL=2)
    out = tmp_path / "out"
    p = S.nfab(tmp_path, "run", "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", "prompt.txt", "--reps", 4,
               "--out", out, *SWEEP)
    assert p.returncode == 1
    assert "INCOMPLETE" in p.stderr and "not a paired run" in p.stderr
    assert json.load(open(out / "manifest.json"))["status"] == "incomplete"
    assert len(calls(b)) == 4   # the sweep continued after the failure
    assert not (out / "pr-rep2.csv").exists()
    r = subprocess.run([sys.executable, os.path.join(S.AB, "report.py"), str(out)], capture_output=True, text=True)
    assert r.returncode == 2 and "status incomplete" in r.stderr


def test_short_trial_is_a_failure(tmp_path):
    a = S.make_arm(tmp_path / "arms", "main")
    b = S.make_arm(tmp_path / "arms", "pr", SHORT=1)
    out = tmp_path / "out"
    p = S.nfab(tmp_path, "run", "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", "prompt.txt", "--reps", 2,
               "--out", out, *SWEEP)
    assert p.returncode == 1
    assert "gen_tokens at ctx 2048 is not 16" in p.stderr
    assert (out / "pr-rep1.csv.failed").exists() and not (out / "pr-rep1.csv").exists()


def test_run_then_report_end_to_end(tmp_path, arms):
    a, b = arms
    aa_arm = S.make_arm(tmp_path / "arms", "base", BASE_DECODE=30, NOISE=0.01, DRIFT=0.97)
    out = tmp_path / "ab"
    p = S.nfab(tmp_path, "run", "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", "prompt.txt", "--reps", 4,
               *SWEEP, "--runs", 3, "--out", out, "--tar", tmp_path / "ab.tgz")
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(out)) == ["inputs", "run1", "run2", "run3"]
    assert (tmp_path / "ab.tgz").stat().st_size > 0
    aa = tmp_path / "aa"
    p = S.nfab(tmp_path, "run", "--aa", "base=" + aa_arm, "--prompt", "prompt.txt", "--reps", 4, "--out", aa, *SWEEP)
    assert p.returncode == 0, p.stderr
    m = json.load(open(aa / "manifest.json"))
    assert m["mode"] == "aa" and [x["label"] for x in m["arms"]] == ["base_1", "base_2"]
    assert m["arms"][0]["tree"] == m["arms"][1]["tree"]
    p = S.nfab(tmp_path, "report", out, "--aa", aa)
    assert p.returncode == 0, p.stderr
    assert "between runs (3 runs)" in p.stdout
    assert "DECISION decode: B faster than A" in p.stdout
    assert "DECISION prefill: no difference measured" in p.stdout
    js = json.load(open(out / "summary.json"))
    h = js["metrics"]["decode"]["across"]["headline"]
    assert 1.15 < h < 1.25          # 36/30 with 1% noise
    assert abs(js["aa_floor"]["decode"]["floor"]) < 0.03
    assert (out / "plot.svg").exists()
    # the same data read unpaired would carry the drift; paired it does not: every per-rep ratio is near 1.2
    s = js["metrics"]["decode"]["runs"][0]
    assert all(abs(v - 1.2) < 0.03 for v in s["per_rep"].values())
    assert s["drift"]["a"] < 0.95   # DRIFT 0.97 per call: the arms drifted, the ratio did not


@pytest.mark.skipif(shutil.which("flock") is None, reason="flock absent (run.sh then warns and runs unlocked)")
def test_lock_refuses_a_second_run(tmp_path, arms):
    a, b = arms
    lock = tmp_path / "nf-ab.lock"
    holder = subprocess.Popen(["flock", str(lock), "sleep", "30"])
    try:
        import time
        for _ in range(50):
            if lock.exists():
                break
            time.sleep(0.05)
        time.sleep(0.2)
        p = S.nfab(tmp_path, "run", "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", "prompt.txt",
                   "--reps", 2, "--out", tmp_path / "out", *SWEEP)
        assert p.returncode == 2 and "holds" in p.stderr
        assert calls(a) == []
    finally:
        holder.kill()
        holder.wait()


def test_build_nf_ab_link_dispatches(tmp_path):
    p = subprocess.run([S.NFAB, "--help"], capture_output=True, text=True)
    assert p.returncode == 0 and "build-arm" in p.stdout
    p = subprocess.run([S.NFAB, "bogus"], capture_output=True, text=True)
    assert p.returncode == 2
    link = tmp_path / "nf-ab"
    os.symlink(S.NFAB, link)
    p = subprocess.run([str(link), "report", "--help"], capture_output=True, text=True)
    assert p.returncode == 0 and "--aa" in p.stdout


def test_bench_invocation_and_extra_args(tmp_path, arms):
    a, b = arms
    out = tmp_path / "out"
    w = tmp_path / "w.gguf"
    w.write_bytes(b"GGUF" + b"\0" * 60)
    p = S.nfab(tmp_path, "run", "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", "prompt.txt", "--reps", 2,
               "--weights", w, "--out", out, *SWEEP, "--", "--warmup-tokens", "4")
    assert p.returncode == 0, p.stderr
    m = json.load(open(out / "manifest.json"))
    assert m["bench_args"] == ["--warmup-tokens", "4"]
    assert m["weights"] == {"path": str(w), "name": "w.gguf", "bytes": 64}
    for arm in (a, b):
        lines = open(os.path.join(arm, "tree", "args.log")).read().splitlines()
        assert len(lines) == 2
        for ln in lines:
            assert ln.startswith("--prompt-file %s --model %s --ctx-start 2048 --ctx-max 8192 --step-incr 2048 "
                                 "--step-mul 1 --gen-tokens 16 --csv " % (m["prompt"]["path"], w))
            assert ln.endswith(".csv.part --warmup-tokens 4")


def test_arm_args_go_to_one_arm_and_into_the_manifest(tmp_path, arms):
    a, b = arms
    out = tmp_path / "out"
    p = S.nfab(tmp_path, "run", "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", "prompt.txt", "--reps", 2,
               "--out", out, "--arm-args", "pr=--draft lookup", *SWEEP, "--", "--warmup-tokens", "4")
    assert p.returncode == 0, p.stderr
    m = json.load(open(out / "manifest.json"))
    assert m["arm_args"] == {"pr": ["--draft", "lookup"]}
    main_lines = open(os.path.join(a, "tree", "args.log")).read().splitlines()
    pr_lines = open(os.path.join(b, "tree", "args.log")).read().splitlines()
    assert all(ln.endswith("--warmup-tokens 4") for ln in main_lines)
    assert all(ln.endswith("--warmup-tokens 4 --draft lookup") for ln in pr_lines)
    # one arm directory under two labels is an A/B when their bench options differ (serial against --draft)
    p = S.nfab(tmp_path, "run", "--arm", "serial=" + a, "--arm", "lookup=" + a, "--prompt", "prompt.txt", "--reps", 2,
               "--out", tmp_path / "same", "--arm-args", "lookup=--draft lookup", *SWEEP)
    assert p.returncode == 0, p.stderr
    assert json.load(open(tmp_path / "same" / "manifest.json"))["arm_args"] == {"lookup": ["--draft", "lookup"]}
    p = S.nfab(tmp_path, "run", "--arm", "serial=" + a, "--arm", "lookup=" + a, "--prompt", "prompt.txt", "--reps", 2,
               "--out", tmp_path / "same2", "--arm-args", "lookup=--draft lookup", "--arm-args",
               "serial=--draft lookup", *SWEEP)
    assert p.returncode == 2 and "same directory with the same --arm-args" in p.stderr
    # refused before any work: an unknown label, and per-arm args in an A/A run
    p = S.nfab(tmp_path, "run", "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", "prompt.txt", "--reps", 2,
               "--out", tmp_path / "o2", "--arm-args", "nope=--x", *SWEEP)
    assert p.returncode == 2 and "not an arm label" in p.stderr
    p = S.nfab(tmp_path, "run", "--aa", "main=" + a, "--prompt", "prompt.txt", "--reps", 2,
               "--out", tmp_path / "o3", "--arm-args", "main_1=--x", *SWEEP)
    assert p.returncode == 2


def test_arm_env_goes_to_one_arm_and_into_the_manifest(tmp_path, arms):
    """--arm-env: one build under two labels that differ in an engine switch (the environment of that arm's bench
    only), recorded in the manifest; the same refusals as --arm-args"""
    a, b = arms
    out = tmp_path / "out"
    p = S.nfab(tmp_path, "run", "--arm", "off=" + a, "--arm", "on=" + a, "--prompt", "prompt.txt", "--reps", 2,
               "--out", out, "--arm-env", "on=NF_AB_TEST_SWITCH=1", *SWEEP)
    assert p.returncode == 0, p.stderr
    m = json.load(open(out / "manifest.json"))
    assert m["arm_env"] == {"on": ["NF_AB_TEST_SWITCH=1"]} and m["arm_args"] == {}
    envs = open(os.path.join(a, "tree", "env.log")).read().splitlines()
    order = [ln.split()[2] for ln in open(out / "run-order.txt").read().splitlines()]
    assert envs == ["NF_AB_TEST_SWITCH=1" if lab == "on" else "NF_AB_TEST_SWITCH=unset" for lab in order]
    p = S.nfab(tmp_path, "run", "--arm", "off=" + a, "--arm", "on=" + a, "--prompt", "prompt.txt", "--reps", 2,
               "--out", tmp_path / "o1", "--arm-env", "on=NF_AB_TEST_SWITCH=1", "--arm-env", "off=NF_AB_TEST_SWITCH=1",
               *SWEEP)
    assert p.returncode == 2 and "same --arm-args and --arm-env" in p.stderr
    p = S.nfab(tmp_path, "run", "--arm", "off=" + a, "--arm", "on=" + a, "--prompt", "prompt.txt", "--reps", 2,
               "--out", tmp_path / "o2", "--arm-env", "on=NF_AB_TEST_SWITCH=1 notanassignment", *SWEEP)
    assert p.returncode == 2 and "'notanassignment' is not VAR=VALUE" in p.stderr
    p = S.nfab(tmp_path, "run", "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", "prompt.txt", "--reps", 2,
               "--out", tmp_path / "o3", "--arm-env", "nope=X=1", *SWEEP)
    assert p.returncode == 2 and "--arm-env names 'nope'" in p.stderr


def test_default_is_three_runs_and_time_budget_stops_early(tmp_path):
    a = S.make_arm(tmp_path / "arms", "main")
    b = S.make_arm(tmp_path / "arms", "pr", SLEEP=0.4)
    sweep = [x for x in SWEEP if x not in ("--runs", 1)]
    p = S.nfab(tmp_path, "run", "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", "prompt.txt", "--reps", 2,
               "--out", tmp_path / "d3", *sweep)
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(tmp_path / "d3")) == ["inputs", "run1", "run2", "run3"]
    # each run takes ~0.8 s (two slow trials): with a 2 s budget, run 3 would end past it
    p = S.nfab(tmp_path, "run", "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", "prompt.txt", "--reps", 2,
               "--out", tmp_path / "d", "--time-budget", 2, *sweep, "--runs", 5)
    assert p.returncode == 0, p.stderr
    assert "stopping after" in p.stderr
    done = [n for n in os.listdir(tmp_path / "d") if n.startswith("run")]
    assert 1 <= len(done) < 5
    for n in done:
        assert json.load(open(tmp_path / "d" / n / "manifest.json"))["status"] == "complete"


def test_stopping_the_driver_kills_the_bench(tmp_path):
    import signal
    import time
    a = S.make_arm(tmp_path / "arms", "main", SLEEP=3)
    b = S.make_arm(tmp_path / "arms", "pr")
    out = tmp_path / "out"
    proc = subprocess.Popen([S.NFAB, "run", "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", "prompt.txt",
                             "--reps", "2", "--out", str(out)] + [str(x) for x in SWEEP],
                            env=S.env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pidfile = os.path.join(a, "tree", "bench.pid")
    for _ in range(100):
        if os.path.exists(pidfile) and open(pidfile).read().strip():
            break
        time.sleep(0.05)
    bench_pid = int(open(pidfile).read())
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=10)
    assert proc.returncode != 0 and "interrupted" in err
    for _ in range(40):
        try:
            os.kill(bench_pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the bench survived its driver")
    assert json.load(open(out / "manifest.json"))["status"] == "interrupted"
