"""nf-ab report: the fixture tests that pin the paired statistic (ab-protocol.md §6.6 items 1-15) and the decision
rule of §6.4. Fixtures only, no engine: CSVs are written in the nf-bench column contract by ab_support.write_run."""

import itertools
import json
import os
import random
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab_support as S  # noqa: E402

R = S.report

MAIN = [30.22, 27.42, 27.50]      # published ctx-2048 decode t/s, reps 1-3 (local-llm #118, main)
BRANCH = [36.40, 33.71, 32.17]    # same, PR branch


def reps(values):
    return {i + 1: v for i, v in enumerate(values)}


def one_frontier(a, b, ctx=2048):
    return {ctx: reps(a)}, {ctx: reps(b)}


def report_cli(*args):
    return subprocess.run([sys.executable, os.path.join(S.AB, "report.py")] + [str(a) for a in args],
                          capture_output=True, text=True)


def run_dir(tmp_path, name, a_by_rep, b_by_rep, manifest=None, la="main", lb="pr"):
    """a_by_rep / b_by_rep: {rep: {ctx: decode}}."""
    return S.write_run(tmp_path / name, {la: a_by_rep, lb: b_by_rep}, manifest)


def flat_run(tmp_path, name, ratio, frontiers=(2048, 4096, 6144, 8192), nreps=2, base=30.0, man=None):
    a = {r: {f: base for f in frontiers} for r in range(1, nreps + 1)}
    b = {r: {f: base * ratio for f in frontiers} for r in range(1, nreps + 1)}
    return run_dir(tmp_path, name, a, b, man)


# ---- (1) loading keeps the rep index ----------------------------------------------------------------------------
def test_loading_keeps_rep_index(tmp_path):
    d = run_dir(tmp_path, "r", {1: {2048: 10.0}, 3: {2048: 30.0}}, {3: {2048: 33.0}, 7: {2048: 70.0}})
    rows = R.load_rows(d)
    assert sorted(rows["main"]) == [1, 3]
    assert sorted(rows["pr"]) == [3, 7]
    col = R.column(rows, "gen_tps")
    assert col["main"][2048] == {1: 10.0, 3: 30.0}
    s = R.paired(col["main"], col["pr"])
    assert s["per_frontier"][2048]["reps"] == {3: pytest.approx(1.1)}   # paired on rep 3, the only shared rep


# ---- (2) the published ctx-2048 figures: paired 1.2045, not the ratio of medians 1.2258 -------------------------
def test_published_ctx2048_paired_not_ratio_of_medians():
    a, b = one_frontier(MAIN, BRANCH)
    s = R.paired(a, b)
    assert round(s["headline"], 4) == 1.2045
    assert round(s["legacy_headline"], 4) == 1.2258
    assert s["per_frontier"][2048]["reps"][2] == pytest.approx(33.71 / 27.42)
    # the A/B direction is its own median of the reciprocal ratios
    assert s["headline_inv"] == pytest.approx(30.22 / 36.40)   # median of 0.8302, 0.8134, 0.8548


def test_published_ctx2048_through_the_cli(tmp_path):
    d = run_dir(tmp_path, "r", {r: {2048: v} for r, v in reps(MAIN).items()},
                {r: {2048: v} for r, v in reps(BRANCH).items()})
    p = report_cli(d)
    assert p.returncode == 0, p.stderr
    assert "headline B/A 1.2045 (+20.5%)" in p.stdout
    assert "1.2258" not in p.stdout
    p = report_cli(d, "--legacy")
    assert "LEGACY (WRONG, diagnosis only) ratio of independent medians: 1.2258" in p.stdout
    js = json.load(open(os.path.join(d, "summary.json")))
    assert round(js["metrics"]["decode"]["across"]["headline"], 4) == 1.2045


# ---- (3) a rep in one arm only does not enter -------------------------------------------------------------------
def test_rep_in_one_arm_only_does_not_enter():
    a = {2048: {1: 10.0, 2: 10.0}}
    b = {2048: {1: 12.0, 2: 12.0, 3: 1000.0}}
    s = R.paired(a, b)
    assert s["headline"] == pytest.approx(1.2)
    assert sorted(s["per_frontier"][2048]["reps"]) == [1, 2]
    assert s["n_pairs"] == 2


# ---- (4) frontier with no shared rep skipped; none at all is a named error ---------------------------------------
def test_frontier_without_shared_rep_is_skipped():
    a = {2048: {1: 10.0}, 4096: {1: 10.0}}
    b = {2048: {1: 11.0}, 4096: {2: 50.0}}
    s = R.paired(a, b)
    assert s["skipped"] == [4096]
    assert s["frontiers"] == [2048]
    assert s["headline"] == pytest.approx(1.1)


def test_no_shared_rep_anywhere_is_a_named_error(tmp_path):
    with pytest.raises(R.NoSharedRep, match="not a paired run"):
        R.paired({2048: {1: 10.0}}, {2048: {2: 11.0}})
    d = run_dir(tmp_path, "r", {1: {2048: 10.0}}, {2: {2048: 11.0}})
    p = report_cli(d)
    assert p.returncode == 2
    assert "no repetition is shared by both arms" in p.stderr


# ---- (5) the column switch reads distinct values ----------------------------------------------------------------
def test_column_switch_reads_distinct_columns(tmp_path):
    fr = (2048, 4096, 6144)
    d = S.write_run(tmp_path / "r", {"main": {1: {f: 20.0 for f in fr}, 2: {f: 22.0 for f in fr}},
                                     "pr": {1: {f: 24.0 for f in fr}, 2: {f: 22.0 for f in fr}}})
    rows = R.load_rows(d)
    dec = R.column(rows, "gen_tps")
    pre = R.column(rows, "prefill_tps")
    assert pre["main"][2048][1] == 10 * dec["main"][2048][1] == 200.0
    # now make prefill differ in shape from decode: B slower at prefill, faster at decode
    for rep, v in ((1, 150.0), (2, 160.0)):
        S.write_csv(os.path.join(d, "pr-rep%d.csv" % rep),
                    [{"ctx": f, "gen_tps": {1: 24.0, 2: 22.0}[rep], "prefill_tps": v} for f in fr])
    rep = R.analyse([d])
    assert rep["metrics"]["decode"]["across"]["headline"] > 1.0
    assert rep["metrics"]["prefill"]["across"]["headline"] < 1.0
    assert rep["metrics"]["prefill"]["column"] == "prefill_tps"
    # the first frontier's prefill is cold: reported apart, not in the prefill headline
    assert rep["metrics"]["prefill"]["runs"][0]["frontiers"] == [4096, 6144]
    assert rep["metrics"]["prefill"]["runs"][0]["cold"]["frontiers"] == [2048]
    rep2 = R.analyse([d], decode_col="prefill_tps")
    assert rep2["metrics"]["decode"]["column"] == "prefill_tps"


def test_missing_column_is_an_error_not_zeros(tmp_path):
    d = tmp_path / "r"
    os.makedirs(d)
    for lab in ("main", "pr"):
        S.write_csv(os.path.join(d, "%s-rep1.csv" % lab), [{"ctx": 2048, "gen_tps": 1.0}], cols=["ctx", "gen_tps"])
    with pytest.raises(R.ABError, match="no column 'prefill_tps'"):
        R.analyse([str(d)])


# ---- (6) pooled stats and wins ----------------------------------------------------------------------------------
def test_pooled_stats_and_wins():
    a = {1: {1: 10.0, 2: 10.0}, 2: {1: 10.0, 2: 10.0}, 3: {1: 10.0, 2: 10.0}}
    b = {1: {1: 11.0, 2: 13.0}, 2: {1: 9.0, 2: 9.5}, 3: {1: 10.5, 2: 15.0}}
    s = R.paired(a, b)
    pooled = [1.1, 1.3, 0.9, 0.95, 1.05, 1.5]
    assert s["pooled_mean"] == pytest.approx(sum(pooled) / 6)
    assert s["pooled_median"] == pytest.approx((1.05 + 1.1) / 2)
    assert s["wins"] == 2 and s["losses"] == 1 and s["n_frontiers"] == 3
    assert s["headline"] == pytest.approx(1.2)          # per-frontier medians 1.2, 0.925, 1.275
    assert s["range"] == (pytest.approx(0.925), pytest.approx(1.275))


# ---- (7) repeat spread measures reps, not frontiers ------------------------------------------------------------
def test_repeat_spread_measures_reps_not_frontiers():
    # frontiers differ wildly (1.0 .. 2.0) but every rep agrees: the repeat spread is zero
    a = {f: {1: 10.0, 2: 20.0} for f in (1, 2, 3)}
    b = {1: {1: 10.0, 2: 20.0}, 2: {1: 15.0, 2: 30.0}, 3: {1: 20.0, 2: 40.0}}
    s = R.paired(a, b)
    assert s["repeat_spread"] == pytest.approx(0.0)
    assert s["range"] == (pytest.approx(1.0), pytest.approx(2.0))
    # reps disagree by 0.1 at every frontier: the spread is 0.1 whatever the frontiers do
    b2 = {f: {1: v[1], 2: a[f][2] * (v[2] / a[f][2] + 0.1)} for f, v in b.items()}
    assert R.paired(a, b2)["repeat_spread"] == pytest.approx(0.1)


# ---- (8) between-run block and both directions printed ---------------------------------------------------------
def test_between_run_block_and_both_directions(tmp_path):
    ds = [flat_run(tmp_path, "run%d" % i, 1.25) for i in (1, 2, 3)]
    p = report_cli(*ds, "--out", tmp_path / "o")
    assert p.returncode == 0, p.stderr
    assert "between runs (3 runs)" in p.stdout
    assert "headline B/A 1.2500 (+25.0%), A/B 0.8000" in p.stdout
    assert "pr/main 1.2500" in p.stdout and "main/pr 0.8000" in p.stdout


# ---- (9) a=10,10,40 / b=10,40,40: paired 1.0, ratio of medians 4.0 ---------------------------------------------
def test_paired_one_where_ratio_of_medians_says_four():
    a, b = one_frontier([10, 10, 40], [10, 40, 40])
    s = R.paired(a, b)
    assert s["headline"] == 1.0
    assert s["legacy_headline"] == 4.0


# ---- (10) per-arm drift ----------------------------------------------------------------------------------------
def test_per_arm_drift_and_worst_arm(tmp_path):
    a = {f: reps([10, 8, 5]) for f in (2048, 4096)}
    b = {f: reps([12, 12, 12]) for f in (2048, 4096)}
    s = R.paired(a, b)
    assert s["drift"]["a"] == pytest.approx(0.5)
    assert s["drift"]["b"] == pytest.approx(1.0)
    assert R.worst_drift({"main": s["drift"]["a"], "pr": s["drift"]["b"]}) == "main"
    d = run_dir(tmp_path, "r", {r: {f: a[f][r] for f in a} for r in (1, 2, 3)},
                {r: {f: b[f][r] for f in b} for r in (1, 2, 3)})
    p = report_cli(d)
    assert "drift first->last rep: main 0.5000, pr 1.0000; drifts most: main" in p.stdout


def test_drift_is_per_frontier_not_ratio_of_rep_medians():
    # frontier 1 drifts 10->5, frontier 2 drifts 100->100: per-frontier drifts 0.5 and 1.0 -> median 0.75
    s = R.drift({1: {1: 10.0, 2: 5.0}, 2: {1: 100.0, 2: 100.0}})
    assert s == pytest.approx(0.75)


# ---- (11) k-subset spreads never grow with k; k=n has zero spread ------------------------------------------------
def test_k_subsets_monotone_and_published_cluster():
    rnd = random.Random(5)
    for _ in range(50):
        hs = [1 + rnd.uniform(-0.3, 0.3) for _ in range(rnd.randint(3, 8))]
        t = R.k_subsets(hs)
        spreads = [k["spread"] for k in t]
        assert all(x >= y - 1e-12 for x, y in zip(spreads, spreads[1:])), spreads
        assert t[-1]["spread"] == 0.0 and t[-1]["subsets"] == 1
        assert t[0]["spread"] == pytest.approx(max(hs) - min(hs))
        assert t[1]["subsets"] == len(list(itertools.combinations(hs, 2)))
    t = R.k_subsets([1.16, 1.21, 1.17, 1.17])
    assert t[2]["k"] == 3 and t[2]["spread"] < 0.01
    assert t[0]["spread"] == pytest.approx(0.05)


# ---- (12) k-table silent below 3 runs --------------------------------------------------------------------------
def test_k_table_silent_below_three_runs(tmp_path):
    assert R.k_subsets([1.1, 1.2]) == []
    assert R.k_subsets([1.1]) == []
    ds = [flat_run(tmp_path, "run%d" % i, 1.1 + 0.01 * i) for i in (1, 2)]
    p = report_cli(*ds, "--out", tmp_path / "o")
    assert "what k runs would have bought" not in p.stdout
    ds.append(flat_run(tmp_path, "run3", 1.2))
    p = report_cli(*ds, "--out", tmp_path / "o2")
    assert "what k runs would have bought" in p.stdout


# ---- (13) quotable line --------------------------------------------------------------------------------------
def test_quotable_line_carries_run_count(tmp_path):
    ds = [flat_run(tmp_path, "run%d" % i, 1.1) for i in (1, 2, 3, 4)]
    rep = R.analyse(ds)
    assert "over 4 runs" in rep["metrics"]["decode"]["quote"]
    rep1 = R.analyse(ds[:1])
    q = rep1["metrics"]["decode"]["quote"]
    assert "one run is not a measurement" in q and "over" not in q


# ---- (14) VOID runs ---------------------------------------------------------------------------------------------
def test_void_refused_with_reason_and_cannot_move_quote(tmp_path):
    ds = [flat_run(tmp_path, "run%d" % i, 1.1) for i in (1, 2, 3)]
    wild = flat_run(tmp_path, "run4", 3.0)
    with open(os.path.join(wild, "VOID.md"), "w") as f:
        f.write("\n another user's test suite landed on arm B\nmore text\n")
    sib = flat_run(tmp_path, "run5", 0.2)
    with open(sib + "-VOID.md", "w") as f:
        f.write("thermal alarm during rep 2\n")
    rep = R.analyse(ds + [wild, sib])
    assert rep["metrics"]["decode"]["across"]["runs"] == 3
    assert rep["metrics"]["decode"]["across"]["headline"] == pytest.approx(1.1)
    reasons = {os.path.basename(x["run"]): x["reason"] for x in rep["refused"]}
    assert reasons["run4"] == "VOID: another user's test suite landed on arm B"
    assert reasons["run5"] == "VOID: thermal alarm during rep 2"
    assert rep["metrics"]["decode"]["quote"] == R.analyse(ds)["metrics"]["decode"]["quote"]
    p = report_cli(*(ds + [wild]), "--out", tmp_path / "o")
    assert "REFUSED" in p.stdout and "another user's test suite" in p.stdout


def test_all_void_exits_nonzero(tmp_path):
    d = flat_run(tmp_path, "run1", 1.1)
    open(os.path.join(d, "VOID.md"), "w").write("bad run\n")
    p = report_cli(d)
    assert p.returncode != 0
    assert "bad run" in p.stderr
    with pytest.raises(R.VoidRun):
        R.analyse([d])


# ---- (15) rep-mismatch warning ---------------------------------------------------------------------------------
def test_rep_mismatch_warning(tmp_path):
    d = run_dir(tmp_path, "r", {1: {2048: 10.0}, 2: {2048: 10.0}}, {1: {2048: 11.0}})
    rep = R.analyse([d])
    assert any("reps only in main [2]" in w for w in rep["warnings"])
    p = report_cli(d)
    assert "WARNING" in p.stdout and "reps only in main [2]" in p.stdout


# ---- the decision rule (§6.4) --------------------------------------------------------------------------------
def _agg(headlines, wins=8, n=8, spread=None):
    return {"headline": sorted(headlines)[len(headlines) // 2], "runs": len(headlines), "headlines": headlines,
            "wins": wins, "losses": n - wins, "n_frontiers": n,
            "between_spread": max(headlines) - min(headlines) if spread is None else spread}


def test_decision_rule():
    no = "no difference measured"
    assert R.decide(_agg([1.2, 1.2]), 0.01)[0] == no                       # < 3 runs
    assert R.decide(_agg([1.2, 0.99, 1.2]), 0.01)[0] == no                 # both sides of 1
    assert R.decide(_agg([1.2, 1.21, 1.2], wins=6), 0.01)[0] == no         # 6/8 frontiers
    assert R.decide(_agg([1.2, 1.21, 1.2], wins=7), 0.01)[0] == "B faster than A"
    assert R.decide(_agg([1.2, 1.21, 1.2]), None)[0] == no                 # no A/A floor
    assert R.decide(_agg([1.2, 1.21, 1.2]), 0.25)[0] == no                 # floor above the effect
    assert R.decide(_agg([1.02, 1.3, 1.03]), 0.001)[0] == no               # effect inside the between-run spread
    assert R.decide(_agg([0.8, 0.81, 0.8], wins=0), 0.01)[0] == "B slower than A"
    assert R.decide(_agg([1.05, 1.06, 1.05], wins=3, n=3), 0.01)[0] == "B faster than A"
    assert R.decide(_agg([1.05, 1.06, 1.05], wins=2, n=3), 0.01)[0] == no  # 2/3 < 7/8


def test_decision_end_to_end_needs_aa_floor(tmp_path):
    ds = [flat_run(tmp_path, "run%d" % i, r) for i, r in ((1, 1.10), (2, 1.12), (3, 1.11))]
    aa = flat_run(tmp_path, "aa", 1.004)
    p = report_cli(*ds, "--out", tmp_path / "o")
    assert "DECISION decode: no difference measured (no A/A noise floor" in p.stdout
    p = report_cli(*ds, "--aa", aa, "--out", tmp_path / "o2")
    assert "DECISION decode: B faster than A" in p.stdout
    assert "A/A noise floor: 0.40 pp" in p.stdout
    big = flat_run(tmp_path, "aa2", 1.2)
    p = report_cli(*ds, "--aa", aa, big, "--out", tmp_path / "o3")
    assert "DECISION decode: no difference measured (|headline-1| = 11.00 pp is not above the A/A noise floor" in p.stdout


def test_refuses_pooling_runs_with_different_inputs(tmp_path):
    m1 = {"status": "complete", "prompt": {"sha256": "aa", "name": "p"}, "sweep": {"ctx_start": 2048},
          "arms": [{"label": "main"}, {"label": "pr"}], "gpu": {"name": "H200"}}
    m2 = dict(m1, prompt={"sha256": "bb", "name": "p"})
    d1 = flat_run(tmp_path, "run1", 1.1, man=m1)
    d2 = flat_run(tmp_path, "run2", 1.1, man=m2)
    with pytest.raises(R.ABError, match="differ in prompt.sha256"):
        R.analyse([d1, d2])
    d3 = flat_run(tmp_path, "run3", 1.1, man=dict(m1, gpu={"name": "H100"}))
    p = report_cli(d1, d3)
    assert p.returncode == 2 and "gpu.name" in p.stderr


def test_incomplete_run_refused_unless_asked(tmp_path):
    m = {"status": "incomplete", "arms": [{"label": "main"}, {"label": "pr"}]}
    d = flat_run(tmp_path, "run1", 1.1, man=m)
    p = report_cli(d)
    assert p.returncode == 2 and "status incomplete" in p.stderr
    p = report_cli(d, "--allow-incomplete")
    assert p.returncode == 0


def test_manifest_arm_order_sets_baseline(tmp_path):
    # without a manifest the labels sort alphabetically (main = A); the manifest can say pr is the baseline
    m = {"status": "complete", "arms": [{"label": "pr"}, {"label": "main"}]}
    d = flat_run(tmp_path, "run1", 1.25, man=m)
    rep = R.analyse([d])
    assert rep["a"] == "pr" and rep["metrics"]["decode"]["across"]["headline"] == pytest.approx(0.8)


def test_failed_rows_dropped_not_fast(tmp_path):
    d = run_dir(tmp_path, "r", {1: {2048: 10.0, 4096: 10.0, 6144: 10.0}}, {1: {2048: 11.0, 4096: 0.0, 6144: 11.0}})
    rep = R.analyse([d])
    assert rep["metrics"]["decode"]["runs"][0]["frontiers"] == [2048, 6144]
    assert any("not a positive number" in w for w in rep["warnings"])


def test_exactness_witness_from_gen_ids_hash(tmp_path):
    d = flat_run(tmp_path, "run1", 1.1)
    S.write_csv(os.path.join(d, "pr-rep1.csv"), [{"ctx": f, "gen_tps": 33.0, "prefill_tps": 330.0,
                                                  "gen_ids_hash": "x" if f == 4096 else "h"}
                                                 for f in (2048, 4096, 6144, 8192)])
    p = report_cli(d)
    assert "EXACTNESS WITNESS: gen_ids_hash differs between arms at 1 of 8" in p.stdout


def test_outputs_json_and_svg(tmp_path):
    a = {r: {2048: 30.0 + r, 4096: 25.0 + r} for r in (1, 2, 3, 4)}
    b = {r: {2048: 36.0 + r, 4096: 30.0 + r} for r in (1, 2, 3, 4)}
    d = run_dir(tmp_path, "r", a, b)
    p = report_cli(d)
    assert p.returncode == 0, p.stderr
    js = json.load(open(os.path.join(d, "summary.json")))
    assert js["a"] == "main" and js["b"] == "pr"
    assert set(js["metrics"]) == {"decode", "prefill"}
    assert js["metrics"]["decode"]["decision"] == "no difference measured"
    assert open(os.path.join(d, "report.txt")).read() == p.stdout
    root = ET.parse(os.path.join(d, "plot.svg")).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    circles = root.iter(ns + "circle")
    # every repetition of both arms at both frontiers, for both metrics: 4 reps x 2 arms x 2 frontiers x 2
    assert len(list(circles)) == 32
    assert len(list(root.iter(ns + "polyline"))) == 4


def test_position_effect_separated_from_arm_effect(tmp_path):
    # arm effect 1.2, and whoever runs first is 5% faster: A-first reps read 1.2/1.05, B-first reps 1.2*1.05
    a, b = {}, {}
    for rep in (1, 2, 3, 4):
        a_first = rep % 2 == 1
        a[rep] = {f: 30.0 * (1.05 if a_first else 1.0) for f in (2048, 4096)}
        b[rep] = {f: 36.0 * (1.0 if a_first else 1.05) for f in (2048, 4096)}
    d = run_dir(tmp_path, "r", a, b)
    with open(os.path.join(d, "run-order.txt"), "w") as f:
        for rep in (1, 2, 3, 4):
            first, second = ("main", "pr") if rep % 2 == 1 else ("pr", "main")
            f.write("%d 1 %s\n%d 2 %s\n" % (rep, first, rep, second))
    rep = R.analyse([d])
    pe = rep["metrics"]["decode"]["runs"][0]["position"]
    assert pe["arm_effect"] == pytest.approx(1.2)
    assert pe["leader_factor"] == pytest.approx(1.05)
    assert pe["reps_a_first"] == 2 and pe["reps_b_first"] == 2
    p = report_cli(d)
    assert "running first changes a trial by +5.0%; arm effect B/A 1.2000" in p.stdout


def test_aa_run_as_input_makes_no_decision(tmp_path):
    m = {"status": "complete", "mode": "aa", "arms": [{"label": "main"}, {"label": "pr"}]}
    ds = [flat_run(tmp_path, "run%d" % i, 1.3, man=m) for i in (1, 2, 3)]
    aa = flat_run(tmp_path, "aa", 1.001)
    rep = R.analyse(ds, [aa])
    assert rep["metrics"]["decode"]["decision"] == "A/A run: no decision"
    assert "noise floor" in rep["metrics"]["decode"]["reason"]
    assert any("A/A run(s) among the inputs" in w for w in rep["warnings"])
