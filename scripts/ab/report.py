#!/usr/bin/env python3
"""report.py — the paired A/B statistic of `nf-ab report` (Python standard library only, runs in CI).

Reads one or more run directories written by `nf-ab run` (<label>-rep<N>.csv per arm and repetition, plus
manifest.json) and answers "is B faster than A, and by how much" for the decode rate and the prefill rate.

Why this shape (docs/ab.md, shared spec ab-protocol.md §3 and §6.4): the repetition number is the pairing key and is
never discarded. Per frontier the ratio b/a is taken WITHIN each repetition both arms ran, then the median over
repetitions; the headline is the median of those per-frontier medians. Dividing two independent medians (each arm's
median over reps) lets numerator and denominator come from different repetitions, so rep-to-rep drift re-enters the
headline: on the published ctx-2048 figures that reads 1.2258 where the paired answer is 1.2045. That statistic is
only printed under --legacy, labelled wrong.

Across runs: per-run headlines, between-run spread against the within-run repeat spread, a per-frontier table, what
k runs would have bought (every k-subset), a quotable line with the run count, and a decision line that says
"no difference measured" unless the rule of §6.4 holds (>= 3 runs, all headlines on one side of 1, the winning side
at >= 7/8 of the frontiers, |headline - 1| above both the between-run spread and the A/A noise floor).

Outputs: the table on stdout (also report.txt), summary.json and plot.svg (hand-written SVG, both arms per frontier
with the per-repetition points) in --out.
"""

import argparse
import csv
import itertools
import json
import math
import os
import re
import statistics
import sys

CSV_NAME = re.compile(r"^(?P<label>[A-Za-z0-9._+-]+)-rep(?P<rep>[0-9]+)\.csv$")
CTX_COLUMNS = ("ctx", "ctx_tokens")
DEFAULT_DECODE = "gen_tps"
PREFILL = "prefill_tps"
MAX_K_RUNS = 16  # the k-subset table is exhaustive; 2^16 subsets is still instant


class ABError(Exception):
    """A refusal: the input cannot give a paired answer. The message names why."""


class NoSharedRep(ABError):
    pass


class VoidRun(ABError):
    pass


# ---------------------------------------------------------------------------------------------------------------
# loading


def _num(text):
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    if math.isnan(v) or math.isinf(v):
        return None
    return v


def load_rows(run_dir):
    """{label: {rep: [row dict, ...]}} from <label>-rep<N>.csv; the rep number comes from the file name."""
    out = {}
    for name in sorted(os.listdir(run_dir)):
        m = CSV_NAME.match(name)
        if not m:
            continue
        label, rep = m.group("label"), int(m.group("rep"))
        with open(os.path.join(run_dir, name), newline="") as f:
            rows = [r for r in csv.DictReader(f)]
        out.setdefault(label, {})[rep] = rows
    return out


def column(rows_by_label, col, warnings=None):
    """{label: {frontier: {rep: value}}} for one CSV column. Rows with a missing/non-positive value are dropped
    (a failed trial must not look fast); a missing column is an error, not zeros."""
    out = {}
    for label, reps in rows_by_label.items():
        per = out.setdefault(label, {})
        for rep, rows in reps.items():
            for row in rows:
                ctxcol = next((c for c in CTX_COLUMNS if c in row), None)
                if ctxcol is None:
                    raise ABError("%s-rep%d.csv has no ctx column (expected one of %s)" % (label, rep, CTX_COLUMNS))
                if col not in row:
                    raise ABError("%s-rep%d.csv has no column %r" % (label, rep, col))
                ctx = _num(row[ctxcol])
                v = _num(row[col])
                if ctx is None:
                    continue
                if v is None or v <= 0:
                    if warnings is not None:
                        warnings.append("%s rep %d ctx %d: %s=%r is not a positive number; dropped"
                                        % (label, rep, int(ctx), col, row[col]))
                    continue
                per.setdefault(int(ctx), {})[rep] = v
    return out


def void_reason(run_dir):
    """The VOID marker's reason (VOID.md inside the run, or <dir>-VOID.md beside it), or None."""
    d = os.path.abspath(run_dir)
    for p in (os.path.join(d, "VOID.md"), d.rstrip(os.sep) + "-VOID.md"):
        if os.path.isfile(p):
            with open(p, errors="replace") as f:
                lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
            return lines[0] if lines else "(VOID marker with no reason)"
    return None


def load_manifest(run_dir):
    p = os.path.join(run_dir, "manifest.json")
    if not os.path.isfile(p):
        return None
    with open(p) as f:
        try:
            return json.load(f)
        except ValueError as e:
            raise ABError("%s: manifest.json is not JSON (%s)" % (run_dir, e))


def expand_dirs(dirs):
    """A directory with no CSVs of its own but run* subdirectories (the layout of `nf-ab run --runs k`) stands for
    those runs, in numeric order."""
    out = []
    for d in dirs:
        if not os.path.isdir(d):
            raise ABError("%s: not a directory" % d)
        has_csv = any(CSV_NAME.match(n) for n in os.listdir(d))
        subs = [n for n in os.listdir(d) if re.match(r"^run[0-9]+$", n) and os.path.isdir(os.path.join(d, n))]
        if not has_csv and subs:
            out.extend(os.path.join(d, n) for n in sorted(subs, key=lambda n: int(n[3:])))
        else:
            out.append(d)
    return out


# ---------------------------------------------------------------------------------------------------------------
# the single-run statistic


def median(xs):
    return statistics.median(xs)


def paired(a, b):
    """Paired statistic for one run and one metric. a, b: {frontier: {rep: value}}.

    Returns a dict; raises NoSharedRep when no frontier has a repetition both arms ran."""
    frontiers = sorted(set(a) | set(b))
    per = {}
    skipped = []
    for f in frontiers:
        ra, rb = a.get(f, {}), b.get(f, {})
        shared = sorted(set(ra) & set(rb))
        if not shared:
            skipped.append(f)
            continue
        ratios = {r: rb[r] / ra[r] for r in shared}
        per[f] = {
            "reps": ratios,
            "median": median(list(ratios.values())),
            "median_inv": median([1.0 / x for x in ratios.values()]),
            "a_median": median([ra[r] for r in shared]),
            "b_median": median([rb[r] for r in shared]),
            # ratio of medians over ALL reps each arm has: the defect, kept for --legacy only
            "legacy": median(list(rb.values())) / median(list(ra.values())),
            "spread": max(ratios.values()) - min(ratios.values()),
            "saving_ms": median([1000.0 / ra[r] - 1000.0 / rb[r] for r in shared]),
        }
    if not per:
        raise NoSharedRep("no repetition is shared by both arms at any frontier: this is not a paired run")
    fs = sorted(per)
    meds = [per[f]["median"] for f in fs]
    pooled = [x for f in fs for x in per[f]["reps"].values()]
    reps = sorted({r for f in fs for r in per[f]["reps"]})
    per_rep = {r: median([per[f]["reps"][r] for f in fs if r in per[f]["reps"]]) for r in reps}
    multi = [per[f]["spread"] for f in fs if len(per[f]["reps"]) >= 2]
    savings = [per[f]["saving_ms"] for f in fs]
    return {
        "frontiers": fs,
        "skipped": skipped,
        "per_frontier": per,
        "headline": median(meds),
        "headline_inv": median([per[f]["median_inv"] for f in fs]),
        "range": (min(meds), max(meds)),
        "wins": sum(1 for m in meds if m > 1.0),
        "losses": sum(1 for m in meds if m < 1.0),
        "n_frontiers": len(fs),
        "pooled_median": median(pooled),
        "pooled_mean": sum(pooled) / len(pooled),
        "n_pairs": len(pooled),
        "per_rep": per_rep,
        "repeat_spread": median(multi) if multi else None,
        "saving_resolvable": all(s > 0 for s in savings) or all(s < 0 for s in savings),
        "legacy_headline": median([per[f]["legacy"] for f in fs]),
        "drift": {"a": drift(a), "b": drift(b)},
    }


def drift(arm):
    """Per-arm drift first rep -> last rep: last/first at each frontier (the arm's own first and last rep there),
    then the median over frontiers. Not a ratio of two rep medians."""
    vals = []
    for f, reps in arm.items():
        if len(reps) < 2:
            continue
        rs = sorted(reps)
        vals.append(reps[rs[-1]] / reps[rs[0]])
    return median(vals) if vals else None


def worst_drift(drifts):
    """The label whose drift is farthest from 1 (in log terms), or None."""
    best, far = None, -1.0
    for label, d in drifts.items():
        if d is None:
            continue
        x = abs(math.log(d))
        if x > far:
            best, far = label, x
    return best


def rep_mismatch(a, b):
    """Frontiers at which the two arms hold different rep sets (a directory read mid-write drops a rep silently)."""
    out = []
    for f in sorted(set(a) | set(b)):
        sa, sb = set(a.get(f, {})), set(b.get(f, {}))
        if sa != sb:
            out.append((f, sorted(sa - sb), sorted(sb - sa)))
    return out


# ---------------------------------------------------------------------------------------------------------------
# across runs


def k_subsets(headlines):
    """What k runs would have bought: for every k, the median of every k-subset of run headlines -> lowest, highest,
    spread. Empty below 3 runs (two runs cannot say what a third would change)."""
    n = len(headlines)
    if n < 3:
        return []
    if n > MAX_K_RUNS:
        return []  # exhaustive only; beyond MAX_K_RUNS runs the table is left out (the report says so)
    out = []
    for k in range(1, n + 1):
        meds = [median(list(c)) for c in itertools.combinations(headlines, k)]
        out.append({"k": k, "subsets": len(meds), "lowest": min(meds), "highest": max(meds),
                    "spread": max(meds) - min(meds)})
    return out


def across_runs(stats):
    """stats: list of paired() results, one per run."""
    hs = [s["headline"] for s in stats]
    table = {}
    for s in stats:
        for f in s["frontiers"]:
            table.setdefault(f, []).append(s["per_frontier"][f]["median"])
    per_frontier = {f: {"median": median(v), "runs": len(v), "range": (min(v), max(v))} for f, v in table.items()}
    rs = [s["repeat_spread"] for s in stats if s["repeat_spread"] is not None]
    meds = [per_frontier[f]["median"] for f in sorted(per_frontier)]
    return {
        "runs": len(stats),
        "headlines": hs,
        "headline": median(hs),
        "headline_inv": median([s["headline_inv"] for s in stats]),
        "between_spread": max(hs) - min(hs),
        "repeat_spread": median(rs) if rs else None,
        "per_frontier": per_frontier,
        "wins": sum(1 for m in meds if m > 1.0),
        "losses": sum(1 for m in meds if m < 1.0),
        "n_frontiers": len(meds),
        "k_table": k_subsets(hs),
    }


def decide(agg, floor):
    """The decision rule of ab-protocol §6.4. Returns (verdict, reason). verdict is one of 'B faster than A',
    'B slower than A', 'no difference measured'."""
    h, n = agg["headline"], agg["runs"]
    no = "no difference measured"
    if n < 3:
        return no, "%d run%s; the rule needs at least 3" % (n, "" if n == 1 else "s")
    if all(x > 1.0 for x in agg["headlines"]):
        side, wins, verdict = "faster", agg["wins"], "B faster than A"
    elif all(x < 1.0 for x in agg["headlines"]):
        side, wins, verdict = "slower", agg["losses"], "B slower than A"
    else:
        return no, "run headlines fall on both sides of 1 (%s)" % ", ".join("%.4f" % x for x in agg["headlines"])
    nf = agg["n_frontiers"]
    if wins * 8 < 7 * nf:
        return no, "B %s at only %d of %d frontiers; the rule needs >= 7/8" % (side, wins, nf)
    eff = abs(h - 1.0)
    if eff <= agg["between_spread"]:
        return no, "|headline-1| = %.2f pp is not above the between-run spread %.2f pp" % (
            100 * eff, 100 * agg["between_spread"])
    if floor is None:
        return no, "no A/A noise floor given (--aa DIR); the effect cannot be compared with it"
    if eff <= floor:
        return no, "|headline-1| = %.2f pp is not above the A/A noise floor %.2f pp" % (100 * eff, 100 * floor)
    return verdict, "%d runs, all on one side, %d of %d frontiers, %.2f pp > spread %.2f pp and A/A floor %.2f pp" % (
        n, wins, nf, 100 * eff, 100 * agg["between_spread"], 100 * floor)


def pct(r):
    return "%+.1f%%" % (100.0 * (r - 1.0))


def quotable(agg, metric, a, b, prompt):
    n = agg["runs"]
    h = agg["headline"]
    if n == 1:
        return "%s %s/%s %.4f (%s) from ONE run: one run is not a measurement; prompt %s" % (
            metric, b, a, h, pct(h), prompt)
    return "%s %s/%s %.4f (%s; %s/%s %.4f) over %d runs (%s), between-run spread %.1f pp; prompt %s" % (
        metric, b, a, h, pct(h), a, b, agg["headline_inv"], n, ", ".join("%.4f" % x for x in agg["headlines"]),
        100 * agg["between_spread"], prompt)


# ---------------------------------------------------------------------------------------------------------------
# the whole report


class Run:
    def __init__(self, path):
        self.path = path
        self.manifest = load_manifest(path)
        self.rows = load_rows(path)
        self.mode = (self.manifest or {}).get("mode", "ab")

    def labels(self, a=None, b=None):
        have = sorted(self.rows)
        if a and b:
            order = [a, b]
        elif self.manifest and self.manifest.get("arms"):
            order = [arm["label"] for arm in self.manifest["arms"]][:2]
        else:
            order = have[:2]  # no manifest: alphabetical, as the published harness did
        if len(order) < 2:
            raise ABError("%s: need two arms, found %s" % (self.path, have or "no <label>-rep<N>.csv files"))
        for lab in order:
            if lab not in self.rows:
                raise ABError("%s: no CSVs for arm %r (have %s)" % (self.path, lab, have))
        return order[0], order[1]


POOL_KEYS = (("prompt", "sha256"), ("weights", "name"), ("weights", "bytes"), ("sweep", None), ("gpu", "name"),
             ("bench_args", None), ("arm_args", None), ("arm_env", None))


def _pool_key(man, key, sub):
    v = man.get(key)
    if sub is not None:
        v = v.get(sub) if isinstance(v, dict) else None
    return json.dumps(v, sort_keys=True)


def check_poolable(runs, warnings):
    mans = [(r.path, r.manifest) for r in runs]
    with_m = [(p, m) for p, m in mans if m is not None]
    if len(with_m) < len(mans):
        warnings.append("%d run(s) have no manifest.json: their prompt/sweep/weights/GPU cannot be checked"
                        % (len(mans) - len(with_m)))
    if len(with_m) < 2:
        return
    p0, m0 = with_m[0]
    for p, m in with_m[1:]:
        for key, sub in POOL_KEYS:
            if _pool_key(m, key, sub) != _pool_key(m0, key, sub):
                raise ABError("refusing to pool %s with %s: manifests differ in %s%s (%s vs %s)" % (
                    p, p0, key, "." + sub if sub else "", _pool_key(m0, key, sub), _pool_key(m, key, sub)))


def run_order(run_dir):
    """{rep: label that ran first} from run-order.txt ("rep position label" per line), or {}."""
    p = os.path.join(run_dir, "run-order.txt")
    lead = {}
    if os.path.isfile(p):
        for ln in open(p).read().splitlines():
            f = ln.split()
            if len(f) == 3 and f[1] == "1" and f[0].isdigit():
                lead[int(f[0])] = f[2]
    return lead


def position_effect(per_rep, lead, a, b):
    """Separate the position effect from the arm effect (two arms, alternating lead). With q = per-rep B/A ratio,
    reps led by A give r/p and reps led by B give r*p, where r is the arm effect and p the factor by which running
    first speeds a trial up; so r = sqrt(GM_A * GM_B) and p = sqrt(GM_B / GM_A) (GM: geometric mean over reps)."""
    qa = [math.log(v) for r, v in per_rep.items() if lead.get(r) == a]
    qb = [math.log(v) for r, v in per_rep.items() if lead.get(r) == b]
    if not qa or not qb:
        return None
    ga, gb = sum(qa) / len(qa), sum(qb) / len(qb)
    return {"arm_effect": math.exp((ga + gb) / 2), "leader_factor": math.exp((gb - ga) / 2),
            "reps_a_first": len(qa), "reps_b_first": len(qb)}


def hash_agreement(run, a, b):
    """gen_ids_hash (or gen_ids_fnv64) across arms per (frontier, rep): a cheap exactness witness in every row."""
    col = None
    for rows in (run.rows[a].values()):
        for row in rows:
            col = next((c for c in ("gen_ids_hash", "gen_ids_fnv64") if c in row), None)
            break
        break
    if col is None:
        return None

    def keyed(label):
        out = {}
        for rep, rows in run.rows[label].items():
            for r in rows:
                ctx = _num(r.get("ctx", r.get("ctx_tokens")))
                if ctx is not None:
                    out[(int(ctx), rep)] = r.get(col)
        return out
    ha, hb = keyed(a), keyed(b)
    shared = sorted(set(ha) & set(hb))
    diff = [k for k in shared if ha[k] != hb[k]]
    return {"column": col, "compared": len(shared), "differ": [list(k) for k in diff]}


SPEC_SUMS = ("spec_cycles", "draft_tokens", "accepted_tokens", "spec_serial_tokens", "spec_parks", "gen_tokens")


def speculative_pool(runs, labels):
    """The speculative probe's counters (nf-bench --draft) summed per arm over every run, frontier and rep, and the
    rates derived from the sums: {label: {...}}, or None when no arm's CSV has a drafter (serial benches, older
    benches without the columns). Sums, not means of per-row rates, so a frontier with more cycles weighs more."""
    out, any_draft = {}, False
    for lab in labels:
        tot = dict.fromkeys(SPEC_SUMS, 0)
        drafts, rows_n = set(), 0
        for r in runs:
            for rows in r.rows.get(lab, {}).values():
                for row in rows:
                    if "draft" not in row:
                        continue
                    rows_n += 1
                    drafts.add(row["draft"])
                    for k in SPEC_SUMS:
                        v = _num(row.get(k))
                        tot[k] += int(v) if v is not None else 0
        drafts.discard("none")
        any_draft = any_draft or bool(drafts)
        cyc = tot["spec_cycles"]
        out[lab] = dict(tot, rows=rows_n, draft="+".join(sorted(drafts)) or "none",
                        accept_len=tot["accepted_tokens"] / cyc if cyc else None,
                        commits_per_cycle=(tot["accepted_tokens"] + cyc) / cyc if cyc else None,
                        accept_rate=tot["accepted_tokens"] / tot["draft_tokens"] if tot["draft_tokens"] else None)
    return out if any_draft else None


def analyse(run_dirs, aa_dirs=(), a=None, b=None, decode_col=DEFAULT_DECODE, allow_incomplete=False):
    """Everything the report prints, as a JSON-able dict. Raises ABError on a refusal."""
    warnings, refused = [], []
    runs = []
    for d in expand_dirs(run_dirs):
        why = void_reason(d)
        if why is not None:
            refused.append({"run": d, "reason": "VOID: " + why})
            continue
        r = Run(d)
        st = (r.manifest or {}).get("status", "complete")
        if st != "complete" and not allow_incomplete:
            refused.append({"run": d, "reason": "status %s in manifest.json: not a paired run "
                            "(--allow-incomplete to read it anyway)" % st})
            continue
        runs.append(r)
    if not runs:
        raise VoidRun("every run was refused: " + "; ".join("%s (%s)" % (x["run"], x["reason"]) for x in refused))
    check_poolable(runs, warnings)
    a_lab, b_lab = runs[0].labels(a, b)
    metrics = [("decode", decode_col, False), ("prefill", PREFILL, True)]
    out = {"a": a_lab, "b": b_lab, "runs": [r.path for r in runs], "refused": refused, "warnings": warnings,
           "metrics": {}, "aa_floor": {}, "exact_witness": []}
    if any(r.mode == "aa" for r in runs):
        warnings.append("A/A run(s) among the inputs: the headline measures the noise floor, not a change")
    prompt = "?"
    m0 = runs[0].manifest
    if m0 and isinstance(m0.get("prompt"), dict):
        pr = m0["prompt"]
        prompt = "%s (%s bytes, sha256 %s)" % (pr.get("name"), pr.get("bytes"), str(pr.get("sha256", ""))[:12])
    out["prompt"] = prompt
    for r in runs:
        ra, rb = r.labels(a, b)
        if (ra, rb) != (a_lab, b_lab):
            raise ABError("refusing to pool %s: its arms are %s/%s, the first run's are %s/%s"
                          % (r.path, ra, rb, a_lab, b_lab))
        w = hash_agreement(r, a_lab, b_lab)
        if w is not None:
            out["exact_witness"].append(dict(w, run=r.path))
    out["speculative"] = speculative_pool(runs, (a_lab, b_lab))
    aa_runs = []
    for d in expand_dirs(list(aa_dirs)):
        why = void_reason(d)
        if why is not None:
            refused.append({"run": d, "reason": "VOID (A/A): " + why})
            continue
        aa_runs.append(Run(d))
    m_main = next((r.manifest for r in runs if r.manifest), None)
    for r in aa_runs:
        if r.mode != "aa" and r.manifest is not None:
            warnings.append("%s was given as A/A but its manifest says mode %r" % (r.path, r.mode))
        if m_main is not None and r.manifest is not None:
            for key, sub in POOL_KEYS:
                if key not in ("bench_args", "arm_args", "arm_env") and _pool_key(r.manifest, key, sub) != _pool_key(m_main, key, sub):
                    warnings.append("A/A run %s differs from the A/B runs in %s%s: its floor may not apply"
                                    % (r.path, key, "." + sub if sub else ""))
    for name, col, cold_apart in metrics:
        per_run = []
        for r in runs:
            wl = []
            cols = column(r.rows, col, wl)
            warnings.extend("%s: %s" % (r.path, x) for x in wl)
            A, B = cols.get(a_lab, {}), cols.get(b_lab, {})
            for f, only_a, only_b in rep_mismatch(A, B):
                warnings.append("%s: %s ctx %d: reps only in %s %s, only in %s %s (they do not enter)"
                                % (r.path, name, f, a_lab, only_a, b_lab, only_b))
            cold = None
            if cold_apart and len(set(A) | set(B)) > 1:
                f0 = min(set(A) | set(B))
                try:
                    cold = paired({f0: A.get(f0, {})}, {f0: B.get(f0, {})})
                except NoSharedRep:
                    cold = None
                A = {f: v for f, v in A.items() if f != f0}
                B = {f: v for f, v in B.items() if f != f0}
            try:
                s = paired(A, B)
            except NoSharedRep as e:
                raise NoSharedRep("%s (%s): %s" % (r.path, name, e))
            s["cold"] = cold
            s["run"] = r.path
            s["position"] = position_effect(s["per_rep"], run_order(r.path), a_lab, b_lab)
            for f in s["skipped"]:
                warnings.append("%s: %s ctx %d: no repetition shared by both arms; frontier skipped" % (r.path, name, f))
            per_run.append(s)
        agg = across_runs(per_run)
        floor = None
        aa_heads = []
        for r in aa_runs:
            la, lb = r.labels()
            cols = column(r.rows, col)
            A, B = cols.get(la, {}), cols.get(lb, {})
            if cold_apart and len(set(A) | set(B)) > 1:
                f0 = min(set(A) | set(B))
                A = {f: v for f, v in A.items() if f != f0}
                B = {f: v for f, v in B.items() if f != f0}
            aa_heads.append(paired(A, B)["headline"])
        if aa_heads:
            floor = max(abs(h - 1.0) for h in aa_heads)
        if all(r.mode == "aa" for r in runs):
            verdict = "A/A run: no decision"
            reason = "one build under two labels; its largest |headline-1| over runs, %.2f pp, is the noise floor" % (
                100 * max(abs(h - 1.0) for h in agg["headlines"]))
        else:
            verdict, reason = decide(agg, floor)
        out["aa_floor"][name] = {"runs": len(aa_heads), "headlines": aa_heads, "floor": floor}
        out["metrics"][name] = {"column": col, "runs": per_run, "across": agg, "decision": verdict,
                                "reason": reason, "quote": quotable(agg, name, a_lab, b_lab, prompt)}
    return out


# ---------------------------------------------------------------------------------------------------------------
# text


def render(rep, legacy=False):
    a, b = rep["a"], rep["b"]
    L = []
    L.append("nf-ab report: A = %s (baseline), B = %s; ratios are B/A unless marked A/B" % (a, b))
    L.append("prompt: %s" % rep["prompt"])
    for x in rep["refused"]:
        L.append("REFUSED %s: %s" % (x["run"], x["reason"]))
    for name, m in rep["metrics"].items():
        L.append("")
        L.append("== %s (%s) ==" % (name, m["column"]))
        for s in m["runs"]:
            L.append("run %s" % s["run"])
            L.append("  %8s %11s %11s %9s %9s %5s  %s" % ("ctx", a, b, "B/A", "A/B", "reps", "per-rep B/A"))
            for f in s["frontiers"]:
                p = s["per_frontier"][f]
                L.append("  %8d %11.3f %11.3f %9.4f %9.4f %5d  %s" % (
                    f, p["a_median"], p["b_median"], p["median"], p["median_inv"], len(p["reps"]),
                    " ".join("r%d=%.4f" % (r, v) for r, v in sorted(p["reps"].items()))))
            L.append("  (arm columns are each arm's median, for context only; B/A is paired within repetitions, "
                     "not their quotient)")
            L.append("  headline B/A %.4f (%s)   A/B %.4f   frontiers %.4f..%.4f   B faster at %d of %d" % (
                s["headline"], pct(s["headline"]), s["headline_inv"], s["range"][0], s["range"][1], s["wins"],
                s["n_frontiers"]))
            L.append("  pooled over %d (frontier, rep) pairs: median %.4f, mean %.4f" % (
                s["n_pairs"], s["pooled_median"], s["pooled_mean"]))
            L.append("  per-rep B/A: %s" % ", ".join("rep%d %.4f" % (r, v) for r, v in sorted(s["per_rep"].items())))
            da, db = s["drift"]["a"], s["drift"]["b"]
            worst = worst_drift({a: da, b: db})
            L.append("  drift first->last rep: %s %s, %s %s; drifts most: %s" % (
                a, "%.4f" % da if da is not None else "n/a", b, "%.4f" % db if db is not None else "n/a",
                worst or "n/a"))
            pe = s.get("position")
            if pe:
                L.append("  position effect (from run-order.txt, %d reps %s first, %d %s first): running first "
                         "changes a trial by %s; arm effect B/A %.4f" % (
                             pe["reps_a_first"], a, pe["reps_b_first"], b, pct(pe["leader_factor"]), pe["arm_effect"]))
            if s["repeat_spread"] is not None:
                L.append("  within-run repeat spread (median over frontiers of max-min per-rep ratio): %.2f pp"
                         % (100 * s["repeat_spread"]))
            L.append("  saving ms/token (1000/A - 1000/B, paired): %s%s" % (
                ", ".join("%d:%+.3f" % (f, s["per_frontier"][f]["saving_ms"]) for f in s["frontiers"]),
                "" if s["saving_resolvable"] else "  (signs differ: not resolvable)"))
            if s.get("cold"):
                c = s["cold"]
                L.append("  cold first frontier %d (reported apart, not in the headline): B/A %.4f, A/B %.4f"
                         % (c["frontiers"][0], c["headline"], c["headline_inv"]))
            if legacy:
                L.append("  LEGACY (WRONG, diagnosis only) ratio of independent medians: %.4f"
                         % s["legacy_headline"])
        g = m["across"]
        L.append("between runs (%d run%s)" % (g["runs"], "" if g["runs"] == 1 else "s"))
        L.append("  run headlines B/A: %s" % ", ".join("%.4f" % h for h in g["headlines"]))
        L.append("  headline B/A %.4f (%s), A/B %.4f; between-run spread %.2f pp; within-run repeat spread %s" % (
            g["headline"], pct(g["headline"]), g["headline_inv"], 100 * g["between_spread"],
            "%.2f pp" % (100 * g["repeat_spread"]) if g["repeat_spread"] is not None else "n/a"))
        if g["runs"] > 1:
            L.append("  %8s %9s %9s %5s %17s" % ("ctx", "B/A", "A/B", "runs", "range"))
            for f in sorted(g["per_frontier"]):
                p = g["per_frontier"][f]
                L.append("  %8d %9.4f %9.4f %5d %8.4f..%.4f" % (f, p["median"], 1.0 / p["median"], p["runs"],
                                                              p["range"][0], p["range"][1]))
        if g["runs"] > MAX_K_RUNS:
            L.append("  (k-subset table left out: it is exhaustive and %d runs is more than %d)" % (g["runs"], MAX_K_RUNS))
        if g["k_table"]:
            L.append("  what k runs would have bought (median of every k-subset of run headlines):")
            for k in g["k_table"]:
                L.append("    k=%d: %d subsets, %.4f..%.4f, spread %.2f pp" % (
                    k["k"], k["subsets"], k["lowest"], k["highest"], 100 * k["spread"]))
        fl = rep["aa_floor"][name]
        if fl["floor"] is not None:
            L.append("  A/A noise floor: %.2f pp (max |h-1| over %d A/A run(s): %s)" % (
                100 * fl["floor"], fl["runs"], ", ".join("%.4f" % h for h in fl["headlines"])))
        L.append("quote: " + m["quote"])
        L.append("DECISION %s: %s (%s)" % (name, m["decision"], m["reason"]))
    sp = rep.get("speculative")
    if sp:
        L.append("")
        L.append("== speculative probe (nf-bench --draft), pooled per arm over runs, frontiers and reps ==")
        for lab in (a, b):
            x = sp[lab]
            if x["draft"] == "none":
                L.append("  %s: serial probe (no drafter), %d rows" % (lab, x["rows"]))
                continue
            L.append("  %s: drafter %s, %d rows: %d cycles, acceptance length %s, %s commits/cycle, %d of %d drafts "
                     "accepted (%s), %d of %d tokens serial, %d parks" % (
                         lab, x["draft"], x["rows"], x["spec_cycles"],
                         "%.3f" % x["accept_len"] if x["accept_len"] is not None else "n/a",
                         "%.3f" % x["commits_per_cycle"] if x["commits_per_cycle"] is not None else "n/a",
                         x["accepted_tokens"], x["draft_tokens"],
                         "%.1f%%" % (100 * x["accept_rate"]) if x["accept_rate"] is not None else "n/a",
                         x["spec_serial_tokens"], x["gen_tokens"], x["spec_parks"]))
        dec = rep["metrics"].get("decode")
        if dec:
            L.append("  speedup %s over %s = decode headline B/A %.4f (%s), paired within reps (decision above)" % (
                b, a, dec["across"]["headline"], pct(dec["across"]["headline"])))
    for w in rep["exact_witness"]:
        if w["differ"]:
            L.append("EXACTNESS WITNESS: %s differs between arms at %d of %d (ctx, rep) in %s: outputs are not the "
                     "same tokens; run nf-ab exact" % (w["column"], len(w["differ"]), w["compared"], w["run"]))
        else:
            L.append("exactness witness: %s equal at %d of %d (ctx, rep) in %s" % (
                w["column"], w["compared"], w["compared"], w["run"]))
    for w in rep["warnings"]:
        L.append("WARNING " + w)
    return "\n".join(L) + "\n"


# ---------------------------------------------------------------------------------------------------------------
# plot: a hand-written SVG, one panel per metric, both arms per frontier with every repetition as a point


def _esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def svg_plot(rep, per_metric_points):
    """per_metric_points: {metric: {label: [(ctx, value), ...]}}."""
    W, H, PW, PH, M = 1000, 480, 440, 330, 60
    colors = {rep["a"]: "#1f77b4", rep["b"]: "#d62728"}
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
           'font-family="sans-serif" font-size="12">' % (W, H, W, H),
           '<rect width="100%" height="100%" fill="white"/>']
    for i, (metric, pts) in enumerate(per_metric_points.items()):
        x0 = M + i * (PW + M + 20)
        y0 = 40
        allp = [p for v in pts.values() for p in v]
        if not allp:
            continue
        xs = sorted({p[0] for p in allp})
        vmin = min(p[1] for p in allp)
        vmax = max(p[1] for p in allp)
        pad = (vmax - vmin) * 0.08 or (abs(vmax) * 0.05 or 1.0)
        vmin, vmax = vmin - pad, vmax + pad

        def X(ctx):
            if len(xs) == 1:
                return x0 + PW / 2
            return x0 + 20 + (PW - 40) * xs.index(ctx) / (len(xs) - 1)

        def Y(v):
            return y0 + PH - PH * (v - vmin) / (vmax - vmin)

        m = rep["metrics"][metric]
        out.append('<text x="%d" y="%d" font-size="14">%s (%s): B/A %.4f (%s)</text>' % (
            x0, y0 - 15, _esc(metric), _esc(m["column"]), m["across"]["headline"], _esc(pct(m["across"]["headline"]))))
        out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#444"/>' % (x0, y0, PW, PH))
        for t in range(5):
            v = vmin + (vmax - vmin) * t / 4
            out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (x0, x0 + PW, Y(v), Y(v)))
            out.append('<text x="%d" y="%.1f" text-anchor="end">%.4g</text>' % (x0 - 4, Y(v) + 4, v))
        for c in xs:
            out.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (X(c), y0 + PH + 16, c))
        out.append('<text x="%d" y="%d" text-anchor="middle">context (tokens)</text>' % (x0 + PW / 2, y0 + PH + 34))
        for j, (label, p) in enumerate(pts.items()):
            col = colors.get(label, "#2ca02c")
            dx = -4 if j == 0 else 4
            bym = {}
            for c, v in p:
                bym.setdefault(c, []).append(v)
                out.append('<circle cx="%.1f" cy="%.1f" r="3" fill="%s" fill-opacity="0.55"/>' % (X(c) + dx, Y(v), col))
            line = " ".join("%.1f,%.1f" % (X(c) + dx, Y(median(bym[c]))) for c in sorted(bym))
            out.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>' % (line, col))
            out.append('<text x="%d" y="%d" fill="%s">%s %s: line = median, points = repetitions</text>' % (
                x0, y0 + PH + 56 + 16 * j, col, "A" if j == 0 else "B", _esc(label)))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def plot_points(rep, decode_col):
    pts = {}
    for name, col in (("decode", decode_col), ("prefill", PREFILL)):
        pts[name] = {rep["a"]: [], rep["b"]: []}
        for path in rep["runs"]:
            cols = column(load_rows(path), col)
            for label in (rep["a"], rep["b"]):
                for f, reps in sorted(cols.get(label, {}).items()):
                    pts[name][label].extend((f, v) for v in reps.values())
    return pts


# ---------------------------------------------------------------------------------------------------------------


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def main(argv=None):
    ap = argparse.ArgumentParser(prog="nf-ab report", description="Paired A/B report over run directories.")
    ap.add_argument("dirs", nargs="+", help="run directories (or a directory holding run1..runk)")
    ap.add_argument("--aa", nargs="*", default=[], metavar="DIR", help="A/A run directories: the noise floor")
    ap.add_argument("--a", help="label of arm A (baseline); default: the manifest's first arm")
    ap.add_argument("--b", help="label of arm B")
    ap.add_argument("--decode-col", default=DEFAULT_DECODE, help="decode-rate column (default %(default)s)")
    ap.add_argument("--out", help="where report.txt, summary.json, plot.svg go (default: the run dir, or the "
                    "parent of several)")
    ap.add_argument("--legacy", action="store_true", help="also print the ratio of medians (WRONG, diagnosis only)")
    ap.add_argument("--allow-incomplete", action="store_true", help="read runs whose manifest is not complete")
    args = ap.parse_args(argv)
    if (args.a is None) != (args.b is None):
        ap.error("--a and --b go together")
    try:
        rep = analyse(args.dirs, args.aa, args.a, args.b, args.decode_col, args.allow_incomplete)
    except ABError as e:
        print("nf-ab report: refused: %s" % e, file=sys.stderr)
        return 2
    text = render(rep, args.legacy)
    sys.stdout.write(text)
    out = args.out
    if out is None:
        ds = [os.path.abspath(d) for d in args.dirs]
        out = ds[0] if len(ds) == 1 else os.path.commonpath(ds)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "report.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(_jsonable(rep), f, indent=1, sort_keys=True)
        f.write("\n")
    with open(os.path.join(out, "plot.svg"), "w") as f:
        f.write(svg_plot(rep, plot_points(rep, args.decode_col)))
    print("wrote %s/{report.txt,summary.json,plot.svg}" % out, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
