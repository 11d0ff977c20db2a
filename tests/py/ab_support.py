"""ab_support.py — helpers for the nf-ab tests: paths, fake arms, CSV fixtures. Not a test module.

A fake arm is what `nf-ab build-arm` leaves behind (tree/, arm.txt, build.json) with tests/py/ab_fake/fake-bench as
its bench; ./fake.env in the tree sets its level, noise, drift and divergences.
"""

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
AB = os.path.join(ROOT, "scripts", "ab")
NFAB = os.path.join(ROOT, "scripts", "nf-ab")
FAKE = os.path.join(ROOT, "tests", "py", "ab_fake", "fake-bench")
CONTRACT = ["ctx", "prefill_tokens", "prefill_tps", "gen_tokens", "gen_tps", "state_bytes", "bytes_per_token",
            "decode_gbps", "bw_fraction", "gen_ids_hash"]



def _load(name, filename):
    """Import scripts/ab/<filename> under a unique module name (no sys.path games, no clash with other tests)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, os.path.join(AB, filename))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


report = _load("nfab_report", "report.py")
exact = _load("nfab_exact", "exact.py")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def make_arm(base, label, **env):
    """A fake built arm at base/label; keyword arguments become fake.env lines."""
    arm = os.path.abspath(os.path.join(str(base), label))
    tree = os.path.join(arm, "tree")
    os.makedirs(os.path.join(tree, "build"))
    bench = os.path.join(tree, "build", "nf-bench")
    shutil.copy(FAKE, bench)
    os.chmod(bench, 0o755)
    with open(os.path.join(tree, "fake.env"), "w") as f:
        for k, v in env.items():
            f.write("%s=%s\n" % (k, v))
    with open(os.path.join(tree, "prompt.txt"), "w") as f:
        f.write("a prompt from arm %s\n" % label)
    h = sha256(bench)
    with open(os.path.join(arm, "arm.txt"), "w") as f:
        f.write("label=%s\ncommit=%s\ndirty=false\ntree=%s\nbench=%s\nbench_sha256=%s\n" % (label, "0" * 40, tree, bench, h))
    with open(os.path.join(arm, "build.json"), "w") as f:
        json.dump({"label": label, "commit": "0" * 40, "dirty": False, "bench_sha256": h}, f)
    return arm


def env(tmp, **extra):
    e = dict(os.environ)
    for k in list(e):
        if k.startswith("NF_") and k not in ("NF_BUILD",):
            del e[k]
    e["NF_AB_LOCK"] = os.path.join(str(tmp), "nf-ab.lock")
    e.update(extra)
    return e


def nfab(tmp, *args, **kw):
    e = env(tmp, **kw.pop("extra_env", {}))
    return subprocess.run([NFAB] + [str(a) for a in args], capture_output=True, text=True, env=e, **kw)


def write_csv(path, rows, cols=None):
    """rows: list of dicts; missing contract columns get plausible values."""
    cols = cols or CONTRACT
    with open(path, "w") as f:
        f.write(",".join(cols) + "\n")
        for r in rows:
            d = {"prefill_tokens": r.get("ctx", 0), "gen_tokens": 128, "state_bytes": 0, "bytes_per_token": 0,
                 "decode_gbps": 0, "bw_fraction": 0, "gen_ids_hash": "h"}
            d.update(r)
            f.write(",".join(str(d.get(c, "")) for c in cols) + "\n")


def write_run(d, arms, manifest=None):
    """arms: {label: {rep: {ctx: decode_value}}}; prefill is written as 10x decode (the column-switch fixture)."""
    os.makedirs(str(d), exist_ok=True)
    for label, reps in arms.items():
        for rep, fr in reps.items():
            write_csv(os.path.join(str(d), "%s-rep%d.csv" % (label, rep)),
                      [{"ctx": c, "gen_tps": v, "prefill_tps": 10 * v} for c, v in sorted(fr.items())])
    if manifest is not None:
        with open(os.path.join(str(d), "manifest.json"), "w") as f:
            json.dump(manifest, f)
    return str(d)
