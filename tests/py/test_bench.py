"""nf-bench on the embedded model (CPU): the CSV contract (columns, order, rows), the byte columns against an
independent count from the GGUF (gguf package), the probe's tokens against teacher-forced `nf logits` argmax (and
gen_ids_hash = FNV-1a of them), incremental prefill with snapshot/restore (a frontier list split over runs gives the
same hashes), the text prompt tokenized as `nf tokenize` does, refusals before any work, and nf-ab's real path
(`run`, `report`, `exact`) driving the real binary.

Frontiers 64 and 160 sit on both sides of the embedded model's dense/sparse attention boundary at 131 tokens
(index_topk 128 + kpool 4 - 1)."""

import json
import os
import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab_support as S  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("NF_BUILD", ROOT / "build"))
BENCH = BUILD / "nf-bench"
MODEL = ROOT / "models" / "tiny" / "nf-tiny-bf16.gguf"
TEXT = ROOT / "tests" / "data" / "tiny" / "text.txt"
EXTRA = ["gen_first_ms", "gen_all_tps", "probe_gbps", "weight_bytes", "state_read_bytes", "prefill_s", "draft",
         "spec_cycles", "accept_len", "commits_per_cycle", "draft_tokens", "accepted_tokens", "spec_serial_tokens",
         "spec_parks", "fill", "prefill_tflops", "tc_ceiling_tflops", "prefill_ceiling_fraction"]
QUICK = ["-t", "2", "--probe-mib", "8", "--warmup", "4", "--chunk", "32"]
EOS = 8128


def bench(*args, model=True, check=True, env=None):
    cmd = [str(BENCH)] + (["-m", str(MODEL)] if model else []) + QUICK + [str(a) for a in args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})})
    if check:
        assert p.returncode == 0, p.stderr
    return p


def read_csv(path):
    lines = Path(path).read_text().splitlines()
    head = lines[0].split(",")
    return head, [dict(zip(head, ln.split(","))) for ln in lines[1:]]


def fnv64(ids):
    h = 0xCBF29CE484222325
    for b in b"".join(struct.pack("<I", i & 0xFFFFFFFF) for i in ids):
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def read_dump(path):
    blocks = {}
    for ln in Path(path).read_text().splitlines():
        r = json.loads(ln)
        b = blocks.setdefault(r["ctx"], {"steps": []})
        if r["type"] == "step":
            b["steps"].append(r)
        else:
            b[r["type"]] = r
    return blocks


def ids_file(tmp_path, n, seed=3, name="ids.txt"):
    rng = random.Random(seed)
    ids = [rng.randrange(8192) for _ in range(n)]
    ids = [i if i != EOS else 0 for i in ids]
    p = tmp_path / name
    p.write_text(" ".join(map(str, ids)) + "\n")
    return p, ids


def test_csv_contract_columns_rows_and_log(tmp_path):
    csv = tmp_path / "b.csv"
    p = bench("--frontiers", "64,160", "--gen", 8, "--csv", csv)
    head, rows = read_csv(csv)
    assert head == S.CONTRACT + EXTRA
    assert [int(r["ctx"]) for r in rows] == [64, 160]
    assert [int(r["prefill_tokens"]) for r in rows] == [64, 96]
    for r in rows:
        assert int(r["gen_tokens"]) == 8
        for k in ("prefill_tps", "gen_tps", "gen_all_tps", "state_bytes", "bytes_per_token", "decode_gbps",
                  "bw_fraction", "probe_gbps", "gen_first_ms"):
            assert float(r[k]) > 0, k
        assert len(r["gen_ids_hash"]) == 16 and int(r["gen_ids_hash"], 16) >= 0
        bpt, tps = float(r["bytes_per_token"]), float(r["gen_tps"])
        assert float(r["decode_gbps"]) == pytest.approx(bpt * tps / 1e9, abs=1.5e-3)
        assert float(r["bw_fraction"]) == pytest.approx(float(r["decode_gbps"]) / float(r["probe_gbps"]), rel=5e-3)
        assert float(r["weight_bytes"]) + float(r["state_read_bytes"]) == pytest.approx(bpt, abs=1)
        # the tensor-core ceiling is a GPU measurement: empty on the CPU backend
        assert r["prefill_tflops"] == r["tc_ceiling_tflops"] == r["prefill_ceiling_fraction"] == ""
    for what in ("nf-bench: build commit=", "cflags=", "nf-bench: device cpu", "nf-bench: nvidia driver",
                 "CPU read probe"):
        assert what in p.stderr, what
    # without --csv the CSV goes to stdout, the log stays on stderr
    p = bench("--frontiers", "64", "--gen", 2)
    assert p.stdout.splitlines()[0] == ",".join(S.CONTRACT + EXTRA) and len(p.stdout.splitlines()) == 2


def test_byte_columns_match_an_independent_count_from_the_gguf(tmp_path):
    import gguf
    r = gguf.GGUFReader(str(MODEL))

    def kv(key):
        f = r.fields["glm5-next." + key]
        return int(f.parts[f.data[0]][0])

    n_layer = kv("block_count") - (kv("nextn_predict_layers") if "glm5-next.nextn_predict_layers" in r.fields else 0)
    used, n_exp = kv("expert_used_count"), kv("expert_count")
    weights = 0.0
    for t in r.tensors:
        if t.name.startswith("blk.") and int(t.name.split(".")[1]) >= n_layer:
            continue
        if t.name == "token_embd.weight":
            weights += t.n_bytes / int(t.shape[1])
        elif "_exps." in t.name:
            weights += t.n_bytes * used / n_exp
        else:
            weights += t.n_bytes
    f = r.fields["glm5-next.attention.head_count_kv"]
    kinds = [int(f.parts[i][0]) for i in f.data]
    assert len(kinds) >= n_layer
    n_mla = sum(1 for k in kinds[:n_layer] if k != 0)   # head_count_kv 0 marks a KDA layer
    n_kda = n_layer - n_mla
    assert 0 < n_mla < n_layer
    kv_lora, idx_hd, kpool, topk = 64, 32, 4, 128
    kda = n_kda * 4 * (4 * 64 * 64 + 3 * 3 * 4 * 64)       # S + conv window, f32

    def state_read(pos):
        n_vis = (pos + 1) // kpool
        dense = n_vis <= topk // kpool
        rows = pos + 1 if dense else topk + (pos + 1) % kpool
        return kda + n_mla * rows * kv_lora * 4 + (0 if dense else n_mla * n_vis * idx_hd * 4)

    csv = tmp_path / "b.csv"
    G = 8
    bench("--frontiers", "64,127,160", "--gen", G, "--csv", csv)
    _, rows = read_csv(csv)
    for row in rows:
        ctx = int(row["ctx"])
        assert float(row["weight_bytes"]) == pytest.approx(weights, abs=1)
        want = sum(state_read(ctx + s) for s in range(1, G)) / (G - 1)
        assert float(row["state_read_bytes"]) == pytest.approx(want, abs=1), ctx
        state = n_kda * 4 * (4 * 64 * 64 + 3 * 3 * 4 * 64) + n_mla * 4 * (ctx * kv_lora + ctx // kpool * idx_hd + 2 * kpool * idx_hd)
        assert float(row["state_bytes"]) == state
    # frontier 127 straddles the boundary: its probe reads dense rows for positions <= 130, sparse beyond
    assert rows[0]["state_read_bytes"] < rows[1]["state_read_bytes"] < rows[2]["state_read_bytes"]


def test_probe_tokens_are_the_teacher_forced_argmax_and_hash(tmp_path):
    ids_path, ids = ids_file(tmp_path, 160)
    csv, dump, G = tmp_path / "b.csv", tmp_path / "d.jsonl", 8
    bench("--frontiers", "64,160", "--gen", G, "--prompt-ids", ids_path, "--csv", csv, "--dump-steps", dump,
          "--dump-topk", 5)
    _, rows = read_csv(csv)
    blocks = read_dump(dump)
    assert sorted(blocks) == [64, 160]
    for row in rows:
        F = int(row["ctx"])
        b = blocks[F]
        fr, end, steps = b["frontier"], b["end"], b["steps"]
        assert fr["prompt_ids"] == ids[:F] and fr["prompt_tokens"] == F and fr["gen_tokens"] == G
        assert fr["prompt_fnv64"] == fnv64(ids[:F])
        toks = [s["token"] for s in steps]
        assert [s["step"] for s in steps] == list(range(G)) and end["steps"] == G
        assert row["gen_ids_hash"] == end["gen_ids_fnv64"] == fnv64(toks)
        assert EOS not in toks
        # teacher forcing: the logits after prompt + the first s generated tokens, in one prefill
        seq = ids[:F] + toks[:-1]
        tf, out = tmp_path / ("tf%d.txt" % F), tmp_path / ("tf%d.f32" % F)
        tf.write_text(" ".join(map(str, seq)))
        p = subprocess.run([str(BUILD / "nf"), "logits", "-m", str(MODEL), "--tokens", str(tf), "--out", str(out),
                            "--threads", "2"], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        lg = np.fromfile(out, dtype=np.float32).reshape(len(seq), -1)
        for s in range(G):
            row_l = lg[F - 1 + s].copy()
            row_l[EOS] = -np.inf
            assert int(np.argmax(row_l)) == toks[s], (F, s)
            for tid, val in steps[s]["topk"]:
                assert float(val) == pytest.approx(float(lg[F - 1 + s][tid]), abs=1e-3 * max(1.0, abs(float(val))))
            vals = [float(v) for _, v in steps[s]["topk"]]
            assert vals == sorted(vals, reverse=True) and len(vals) == 5


def test_incremental_prefill_split_runs_give_the_same_hashes(tmp_path):
    def hashes(*args):
        csv = tmp_path / "h.csv"
        bench("--gen", 8, "--csv", csv, *args)
        return {int(r["ctx"]): r["gen_ids_hash"] for r in read_csv(csv)[1]}

    both = hashes("--frontiers", "64,160")
    assert hashes("--frontiers", "64") == {64: both[64]}
    assert hashes("--frontiers", "160") == {160: both[160]}       # cold 160 = 64, probe, restore, +96
    assert hashes("--ctx-start", 64, "--ctx-max", 160, "--step-incr", 96, "--step-mul", 1) == both
    assert both[64] != both[160]
    other_seed = hashes("--frontiers", "64,160", "--seed", 2)
    assert other_seed[64] != both[64]


def test_prefill_chunk_defaults_to_the_backends_preference_else_512(tmp_path):
    """Without --chunk the bench prefills as nf and nf-server do on that backend (the CUDA backend asks for 4096;
    the CPU backend names none, so 512): the log says which, and an explicit --chunk wins."""
    base = [str(BENCH), "-m", str(MODEL), "-t", "2", "--probe-mib", "8", "--warmup", "4", "--gen", "4",
            "--frontiers", "64"]
    p = subprocess.run(base + ["--csv", str(tmp_path / "d.csv")], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "nf-bench: prefill chunk 512 (default)" in p.stderr
    q = subprocess.run(base + ["--chunk", "16", "--csv", str(tmp_path / "c.csv")], capture_output=True, text=True,
                       timeout=300)
    assert q.returncode == 0, q.stderr
    assert "nf-bench: prefill chunk 16\n" in q.stderr
    assert read_csv(tmp_path / "d.csv")[1][0]["gen_ids_hash"] == read_csv(tmp_path / "c.csv")[1][0]["gen_ids_hash"]


def test_text_prompt_is_tokenized_like_nf_tokenize(tmp_path):
    dump = tmp_path / "d.jsonl"
    bench("--frontiers", "160", "--gen", 2, "--prompt", TEXT, "--dump-steps", dump)
    p = subprocess.run([str(BUILD / "nf"), "tokenize", "-m", str(MODEL), "--file", str(TEXT), "--ids-only"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    want = [int(x) for x in p.stdout.split()]
    assert len(want) >= 160
    assert read_dump(dump)[160]["frontier"]["prompt_ids"] == want[:160]
    # the same text through the tokenizer.json of the model directory
    dump2 = tmp_path / "d2.jsonl"
    bench("--frontiers", "160", "--gen", 2, "--prompt-file", TEXT, "--tokenizer", ROOT / "models" / "tiny" /
          "tokenizer.json", "--dump-steps", dump2)
    assert read_dump(dump2)[160]["frontier"]["prompt_ids"] == want[:160]


# ---- the speculative probe (--draft) ------------------------------------------------------------------------------
def spec_rows(tmp_path, *args, name="s.csv"):
    csv = tmp_path / name
    bench("--frontiers", "64,160", "--gen", 32, "--prompt", TEXT, "--csv", csv, *args)
    return {int(r["ctx"]): r for r in read_csv(csv)[1]}


def test_speculative_probe_keeps_the_serial_hash_and_reports_its_cycles(tmp_path):
    """The exactness witness nf-ab checks: at temperature 0 the probe through the speculative decoder (any drafter,
    any admission mode) commits exactly the serial probe's tokens, so gen_ids_hash is equal at every frontier."""
    serial = spec_rows(tmp_path, name="serial.csv")
    for r in serial.values():
        assert r["draft"] == "none" and int(r["spec_cycles"]) == 0 and int(r["draft_tokens"]) == 0
    runs = {
        "lookup-always": spec_rows(tmp_path, "--draft", "lookup", "--spec-mode", "speculative", "--draft-max", 4),
        "lookup-conservative": spec_rows(tmp_path, "--draft", "lookup"),
        "lookup-no-defer": spec_rows(tmp_path, "--draft", "lookup", "--spec-set", "mode=speculative",
                                     "--spec-set", "no_defer=1"),
        # the target as its own draft model: every draft the verification sees is the target's greedy choice
        "self-model": spec_rows(tmp_path, "--draft", "model:%s" % MODEL, "--spec-mode", "speculative"),
    }
    for what, rows in runs.items():
        assert sorted(rows) == [64, 160], what
        for F, r in rows.items():
            assert r["gen_ids_hash"] == serial[F]["gen_ids_hash"], (what, F)
            assert int(r["gen_tokens"]) == 32 and float(r["gen_tps"]) > 0, what
            cyc, dr, acc = int(r["spec_cycles"]), int(r["draft_tokens"]), int(r["accepted_tokens"])
            assert 0 <= acc <= dr, what
            assert acc + cyc + int(r["spec_serial_tokens"]) == 32, (what, F, r)   # every token committed once
            if cyc:
                assert float(r["accept_len"]) == pytest.approx(acc / cyc, abs=1e-4), what
                assert float(r["commits_per_cycle"]) == pytest.approx(1 + acc / cyc, abs=1e-4), what
    assert all(r["draft"] == "lookup" for r in runs["lookup-always"].values())
    always = runs["lookup-always"]
    assert sum(int(r["spec_cycles"]) for r in always.values()) > 0
    assert sum(int(r["accepted_tokens"]) for r in always.values()) > 0     # multi-token commits did happen
    assert max(int(r["draft_tokens"]) / max(1, int(r["spec_cycles"])) for r in always.values()) <= 4
    for r in runs["self-model"].values():      # drafts of the same model are accepted up to the draft max
        assert r["draft"] == "model" and float(r["accept_len"]) > 4


def test_speculative_probe_refusals(tmp_path):
    csv = tmp_path / "r.csv"
    dump = str(tmp_path / "d.jsonl")
    for args, msg in [
        (["--draft", "bogus"], "expected lookup, mtp or model:FILE"),
        (["--draft", "mtp"], "no MTP block"),
        (["--draft", "model:%s" % (tmp_path / "absent.gguf")], "absent.gguf"),
        (["--spec-mode", "speculative"], "need --draft"),
        (["--draft", "lookup", "--spec-mode", "fast"], "--spec-mode"),
        (["--draft", "lookup", "--spec-set", "bogus=1"], "unknown key"),
        (["--draft", "lookup", "--draft-max", "0"], "out of range"),
        (["--draft", "lookup", "--dump-steps", dump], "not taken with --draft"),
    ]:
        p = bench("--frontiers", "64", "--gen", 4, "--csv", csv, *args, check=False)
        assert p.returncode == 2, (args, p.returncode, p.stderr)
        assert msg in p.stderr, (args, p.stderr)
        assert "nf-bench: build" not in p.stderr and not csv.exists(), args


def refusal_cases(tmp_path):
    short, _ = ids_file(tmp_path, 10, name="short.txt")
    big = tmp_path / "big.txt"
    big.write_text("1 2 99999 " * 30)
    return [
        (["--bogus"], "unknown option"),
        (["--frontiers", "64,32"], "ascend"),
        (["--frontiers", "64,x"], "not a positive integer"),
        (["--frontiers", "160", "--ctx", "100"], "--ctx is 100"),
        (["--frontiers", "1048570", "--gen", "8"], "context length 1048576"),
        (["--frontiers", "64", "--ctx-start", "64"], "exclusive"),
        (["--gen", "0"], "out of range"),
        (["--step-mul", "0.5"], "--step-mul"),
        (["--ctx-start", "100", "--ctx-max", "50"], "below"),
        (["--frontiers", "64", "--prompt-ids", str(short)], "holds 10 tokens"),
        (["--frontiers", "64", "--prompt-ids", str(big)], "outside the model's vocabulary"),
        (["--frontiers", "64", "--prompt-ids", str(tmp_path / "absent.txt")], "absent.txt"),
        (["--frontiers", "64", "--prompt", str(TEXT), "--prompt-ids", str(short)], "exclusive"),
        (["--backend", "cuda"], "no CUDA backend"),
        (["--backend", "tpu"], "unknown backend"),
        (["--dump-topk", "5"], "needs --dump-steps"),
        (["--synthetic", "tiny:f32"], "exclusive"),
        (["--frontiers", "64", "--csv", str(tmp_path / "no" / "dir.csv")], "--csv"),
    ]


def test_refusals_exit_2_before_any_work(tmp_path):
    csv = tmp_path / "r.csv"
    for args, msg in refusal_cases(tmp_path):
        more = [] if "--csv" in args else ["--csv", csv]
        p = bench(*args, *more, check=False)
        assert p.returncode == 2, (args, p.returncode, p.stderr)
        assert msg in p.stderr, (args, p.stderr)
        assert "read probe" not in p.stderr and "nf-bench: build" not in p.stderr, args   # no measurement started
        assert not csv.exists(), args
    p = subprocess.run([str(BENCH), "--frontiers", "64"], capture_output=True, text=True)
    assert p.returncode == 2 and "give a model" in p.stderr
    p = subprocess.run([str(BENCH), "-m", str(tmp_path / "none.gguf"), "--frontiers", "64"], capture_output=True, text=True)
    assert p.returncode == 2 and "none.gguf" in p.stderr
    p = subprocess.run([str(BENCH), "--help"], capture_output=True, text=True)
    assert p.returncode == 0 and "--dump-steps" in p.stdout and "--frontiers" in p.stdout


# ---- nf-ab's real path -------------------------------------------------------------------------------------------
def real_arm(base, label):
    """An arm as build-arm leaves it (tree/, arm.txt, build.json), holding a copy of the real nf-bench."""
    arm = os.path.abspath(os.path.join(str(base), label))
    tree = os.path.join(arm, "tree")
    os.makedirs(os.path.join(tree, "build"))
    b = os.path.join(tree, "build", "nf-bench")
    shutil.copy(str(BENCH), b)
    h = S.sha256(b)
    with open(os.path.join(arm, "arm.txt"), "w") as f:
        f.write("label=%s\ncommit=%s\ndirty=false\ntree=%s\nbench=%s\nbench_sha256=%s\n" % (label, "0" * 40, tree, b, h))
    with open(os.path.join(arm, "build.json"), "w") as f:
        json.dump({"label": label, "commit": "0" * 40, "dirty": False, "bench_sha256": h}, f)
    return arm


def test_nf_ab_run_report_and_exact_drive_the_real_bench(tmp_path):
    a, b = real_arm(tmp_path / "arms", "main"), real_arm(tmp_path / "arms", "pr")
    extra = ["--", "-t", "2", "--probe-mib", "8", "--warmup", "4", "--chunk", "32"]
    out = tmp_path / "ab"
    p = S.nfab(tmp_path, "run", "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", str(TEXT), "--weights", str(MODEL),
               "--ctx-start", 64, "--ctx-max", 160, "--step-incr", 96, "--step-mul", 1, "--gen", 8, "--reps", 2,
               "--runs", 1, "--out", out, *extra, timeout=600)
    assert p.returncode == 0, p.stderr
    m = json.load(open(out / "manifest.json"))
    assert m["status"] == "complete"
    hashes = {}
    for lab in ("main", "pr"):
        for rep in (1, 2):
            head, rows = read_csv(out / ("%s-rep%d.csv" % (lab, rep)))
            assert head[:10] == S.CONTRACT and [int(r["ctx"]) for r in rows] == [64, 160]
            hashes[(lab, rep)] = [r["gen_ids_hash"] for r in rows]
            assert "nf-bench: build commit=" in (out / ("%s-rep%d.log" % (lab, rep))).read_text()
    assert len(set(map(tuple, hashes.values()))) == 1       # one build, one answer
    p = S.nfab(tmp_path, "report", out)
    assert p.returncode == 0, p.stderr
    assert "EXACTNESS WITNESS" not in p.stdout + p.stderr
    assert (out / "summary.json").exists()

    ex = tmp_path / "ex"
    p = S.nfab(tmp_path, "exact", "--arm", "main=" + a, "--arm", "pr=" + b, "--prompt", str(TEXT), "--weights",
               str(MODEL), "--frontiers", "96,160", "--dense-limit", 131, "--gen", 8, "--topk", 5, "--out", ex, *extra,
               timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (ex / "verdict.txt").read_text().startswith("IDENTICAL")


def test_prompt_sets_are_reproducible_and_hold_their_documented_sweeps(tmp_path):
    """bench/prompts: structured.txt is what its generator writes, and each set holds the last frontier of its sweep
    in docs/ab.md (2560 prose, 4608 structured) with the embedded model's tokenizer."""
    out = tmp_path / "structured.txt"
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_structured_prompt.py"), str(out)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert out.read_bytes() == (ROOT / "bench" / "prompts" / "structured.txt").read_bytes()
    for name, last in (("prose.txt", 2560), ("structured.txt", 4608)):
        p = subprocess.run([str(BUILD / "nf"), "tokenize", "-m", str(MODEL), "--file",
                            str(ROOT / "bench" / "prompts" / name), "--ids-only"], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, p.stderr
        assert len(p.stdout.split()) > last + 128, name


def test_nf_ab_serial_against_draft_lookup_on_one_build(tmp_path):
    """The speculative A/B of docs/ab.md: one build under two labels that differ only in --arm-args (serial against
    --draft lookup) on the structured prompt set; the report pools the draft columns per arm (sums over every
    frontier and rep, checked here against the CSVs), prints the speedup and finds the hashes equal."""
    arm = real_arm(tmp_path / "arms", "head")
    out = tmp_path / "ab"
    prompt = ROOT / "bench" / "prompts" / "structured.txt"
    p = S.nfab(tmp_path, "run", "--arm", "serial=" + arm, "--arm", "lookup=" + arm, "--arm-args",
               "lookup=--draft lookup --spec-mode speculative", "--prompt", str(prompt), "--weights", str(MODEL),
               "--ctx-start", 256, "--ctx-max", 512, "--step-incr", 256, "--step-mul", 1, "--gen", 24, "--reps", 2,
               "--runs", 1, "--out", out, "--", "-t", "2", "--probe-mib", "8", "--warmup", "4", timeout=600)
    assert p.returncode == 0, p.stderr
    m = json.load(open(out / "manifest.json"))
    assert m["status"] == "complete" and m["arm_args"] == {"lookup": ["--draft", "lookup", "--spec-mode", "speculative"]}
    want = {"spec_cycles": 0, "draft_tokens": 0, "accepted_tokens": 0}
    for lab in ("serial", "lookup"):
        for rep in (1, 2):
            _, rows = read_csv(out / ("%s-rep%d.csv" % (lab, rep)))
            assert {r["draft"] for r in rows} == {"none" if lab == "serial" else "lookup"}
            if lab == "lookup":
                for k in want:
                    want[k] += sum(int(r[k]) for r in rows)
    assert want["spec_cycles"] > 0 and want["accepted_tokens"] > 0
    p = S.nfab(tmp_path, "report", out)
    assert p.returncode == 0, p.stderr
    assert "EXACTNESS WITNESS" not in p.stdout and "exactness witness: gen_ids_hash equal at 4 of 4" in p.stdout
    assert "== speculative probe" in p.stdout and "serial: serial probe (no drafter), 4 rows" in p.stdout
    assert "lookup: drafter lookup, 4 rows: %d cycles" % want["spec_cycles"] in p.stdout
    assert "speedup lookup over serial = decode headline B/A" in p.stdout
    sp = json.load(open(out / "summary.json"))["speculative"]["lookup"]
    assert sp["spec_cycles"] == want["spec_cycles"] and sp["accepted_tokens"] == want["accepted_tokens"]
    assert sp["accept_len"] == pytest.approx(want["accepted_tokens"] / want["spec_cycles"])
    assert sp["commits_per_cycle"] == pytest.approx(1 + want["accepted_tokens"] / want["spec_cycles"])
    assert sp["accept_rate"] == pytest.approx(want["accepted_tokens"] / want["draft_tokens"])


def test_nf_ab_build_arm_then_run_with_a_clean_build_of_head(tmp_path):
    """build-arm's clean build of this repository's HEAD (through a throw-away clone, so no worktree is left in the
    project's .git) produces an nf-bench that `nf-ab run` accepts and completes an A/A sweep with."""
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "fetch", "-q", str(ROOT), "HEAD"], check=True)
    sha = head.stdout.strip()
    p = S.nfab(tmp_path, "build-arm", sha, "head", "--root", tmp_path / "arms", "--repo", repo, "-j", 2, timeout=900)
    assert p.returncode == 0, p.stderr
    arm = tmp_path / "arms" / "head"
    assert "commit=" + sha in (arm / "arm.txt").read_text()
    out = tmp_path / "aa"
    p = S.nfab(tmp_path, "run", "--aa", "main=%s" % arm, "--prompt", str(TEXT), "--weights", str(MODEL),
               "--ctx-start", 64, "--ctx-max", 160, "--step-incr", 96, "--step-mul", 1, "--gen", 4, "--reps", 2,
               "--runs", 1, "--out", out, "--", "-t", "2", "--probe-mib", "8", "--warmup", "4", timeout=600)
    assert p.returncode == 0, p.stderr
    assert json.load(open(out / "manifest.json"))["status"] == "complete"
    log = (out / "main_1-rep1.log").read_text()
    assert "commit=%s dirty=no" % sha in log          # the bench's own build stamp names the arm's commit


# ---- synthetic models (model/synth.h, in memory) ---------------------------------------------------------------
def test_synthetic_host_model_measures_the_same_as_the_nf_synth_file(tmp_path):
    """--synthetic tiny:bf16 (NF_SYNTH_HOST: the bytes nf-synth would write) and the file nf-synth writes with the
    same seed give the same probe tokens at every frontier (tiny preset: index_topk 16, so 40 is sparse)."""
    f = tmp_path / "tiny.gguf"
    p = subprocess.run([str(BUILD / "nf-synth"), "--preset", "tiny", "--recipe", "bf16", "--seed", "5", "--out", str(f),
                        "--quiet"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr

    def hashes(*src):
        csv = tmp_path / "s.csv"
        bench("--frontiers", "12,40", "--gen", 6, "--seed", 5, "--csv", csv, *src, model=False)
        return [r["gen_ids_hash"] for r in read_csv(csv)[1]]

    from_file = hashes("-m", f)
    assert hashes("--synthetic", "tiny:bf16") == from_file
    assert hashes("--synthetic", "tiny:bf16", "--seed", 6) != from_file


def test_synthetic_refusals(tmp_path):
    p = bench("--synthetic", "nope:q2", "--frontiers", 16, model=False, check=False)
    assert p.returncode == 2 and "nope" in p.stderr
    p = bench("--synthetic", "tiny:q3", "--frontiers", 16, model=False, check=False)
    assert p.returncode == 2 and "q3" in p.stderr
    avail = 0
    for ln in open("/proc/meminfo"):
        if ln.startswith("MemAvailable:"):
            avail = int(ln.split()[1]) * 1024
    if avail > 90e9:
        pytest.skip("this host could hold glm53:q2 in memory")
    p = bench("--synthetic", "glm53:q2", "--frontiers", 2048, "--gen", 2, model=False, check=False)
    assert p.returncode == 2 and "host memory" in p.stderr and "--backend cuda" in p.stderr


# ---- --fill synthetic (model/state_fill.h) ------------------------------------------------------------------------
def test_fill_synthetic_decodes_at_depth_with_empty_prefill_columns(tmp_path):
    """--fill synthetic reaches depth 4000 of the tiny preset (context 4096) without prefilling it: same columns in
    the same order plus fill=synthetic, prefill columns empty (nothing was prefilled), state_bytes as for a prefilled
    state at that depth, finite top-K logits at every probe step, and the same ids in a second run (the fill is a
    function of the seed). A prefill run of the same frontiers says fill=prefill and fills its prefill columns."""
    csv, dump = tmp_path / "f.csv", tmp_path / "f.jsonl"
    p = bench("--synthetic", "tiny:f32", "--frontiers", "64,1000,4000", "--gen", 4, "--fill", "synthetic",
              "--csv", csv, "--dump-steps", dump, "--dump-topk", 5, model=False)
    head, rows = read_csv(csv)
    assert head == S.CONTRACT + EXTRA
    assert [int(r["ctx"]) for r in rows] == [64, 1000, 4000]
    assert "fill synthetic" in p.stderr and "real 63-token prefill" in p.stderr
    for r in rows:
        assert r["fill"] == "synthetic"
        assert r["prefill_tokens"] == r["prefill_tps"] == r["prefill_s"] == ""
        assert int(r["gen_tokens"]) == 4 and float(r["gen_tps"]) > 0
    blocks = read_dump(dump)
    for ctx in (64, 1000, 4000):
        steps = blocks[ctx]["steps"]
        assert len(steps) == 4
        for st in steps:
            assert all(np.isfinite(v) for _, v in st["topk"]), (ctx, st)
    again = tmp_path / "g.csv"
    bench("--synthetic", "tiny:f32", "--frontiers", "64,1000,4000", "--gen", 4, "--fill", "synthetic", "--csv", again,
          model=False)
    assert [r["gen_ids_hash"] for r in read_csv(again)[1]] == [r["gen_ids_hash"] for r in rows]
    pre = tmp_path / "p.csv"
    bench("--synthetic", "tiny:f32", "--frontiers", "64,1000", "--gen", 2, "--csv", pre, model=False)
    prow = read_csv(pre)[1]
    assert [r["fill"] for r in prow] == ["prefill", "prefill"]
    assert [int(r["prefill_tokens"]) for r in prow] == [64, 936] and float(prow[1]["prefill_tps"]) > 0
    assert [r["state_bytes"] for r in prow] == [r["state_bytes"] for r in rows[:2]]


def test_fill_refusals(tmp_path):
    p = bench("--synthetic", "tiny:f32", "--frontiers", "4,64", "--fill", "synthetic", model=False, check=False)
    assert p.returncode == 2 and "indexer pool" in p.stderr and "give at least 5" in p.stderr
    p = bench("--synthetic", "tiny:f32", "--frontiers", "64", "--fill", "fast", model=False, check=False)
    assert p.returncode == 2 and "--fill" in p.stderr
    p = bench("--synthetic", "tiny:f32", "--frontiers", "64", "--fill", "synthetic", "--draft", "lookup", model=False,
              check=False)
    assert p.returncode == 2 and "--draft" in p.stderr


def test_pipeline_stages_give_the_serial_hashes_and_print_the_plan(tmp_path):
    """--gpus N / --split (CPU stages): the same probe tokens (gen_ids_hash) as one backend on both sides of the
    dense/sparse boundary, the memory plan in the log; bad splits refused before any work (exit 2)."""
    one = tmp_path / "one.csv"
    bench("--frontiers", "64,160", "--gen", "8", "--csv", one)
    _, ref = read_csv(one)
    for args in (["--gpus", "2"], ["--gpus", "3", "--split", "3,5"], ["--split", "1"]):
        out = tmp_path / "p.csv"
        p = bench("--frontiers", "64,160", "--gen", "8", "--csv", out, *args)
        _, rows = read_csv(out)
        assert [r["gen_ids_hash"] for r in rows] == [r["gen_ids_hash"] for r in ref], args
        n = 3 if "3" in args else 2
        assert f"memory plan: {n} stages" in p.stderr and "stage 1: layers" in p.stderr, p.stderr
        assert "backend pipeline" in p.stderr
    for args, msg in ((["--gpus", "2", "--split", "2,5"], "make 3 stages, but --gpus asks for 2"),
                      (["--split", "0"], "--split: expected auto"),
                      (["--split", "9"], "outside the model's layers"),
                      (["--gpus", "0"], "--gpus: expected 1..16"),
                      (["--gpus", "2", "--draft", "lookup"], "not supported yet")):
        p = bench("--frontiers", "64", "--gen", "4", *args, check=False)
        assert p.returncode == 2 and msg in p.stderr, (args, p.stderr)


def test_pipeline_with_synthetic_fill_gives_the_serial_hashes(tmp_path):
    """--gpus N --fill synthetic: each stage fills its layers as one state would (the scales measured through the
    pipeline's state), so the probe tokens after the fill are one backend's; both hand-overs agree."""
    args = ("--synthetic", "tiny:f32", "--frontiers", "64,1000", "--gen", 4, "--fill", "synthetic")
    one = tmp_path / "one.csv"
    bench(*args, "--csv", one, model=False)
    _, ref = read_csv(one)
    for env in ({}, {"NF_PIPELINE_HANDOVER": "host"}):
        out = tmp_path / "p.csv"
        p = bench(*args, "--gpus", "2", "--csv", out, model=False, env=env)
        _, rows = read_csv(out)
        assert [r["gen_ids_hash"] for r in rows] == [r["gen_ids_hash"] for r in ref], env
        assert [r["fill"] for r in rows] == ["synthetic", "synthetic"]
        want = "through the host" if env else "backend to backend"
        assert f"stages hand over {want}" in p.stderr, p.stderr
    p = bench(*args, "--gpus", "2", model=False, env={"NF_PIPELINE_HANDOVER": "sideways"}, check=False)
    assert p.returncode != 0 and "NF_PIPELINE_HANDOVER=sideways" in p.stderr, p.stderr
