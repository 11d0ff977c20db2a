#!/usr/bin/env python3
"""summarize.py — the arms of a session-17 device call: per arm the runs in order (decode t/s, bw_fraction,
gen_ids_hash; prefill t/s and ceiling fraction), the median, and each arm's median against the first arm's.
Usage: summarize.py DIR (the call's r/ folder with alt-*.csv and pp-*.csv)."""
import csv, glob, os, re, statistics, sys

d = sys.argv[1]
for kind, col in (("alt", "gen_tps"), ("pp", "prefill_tps")):
    runs = []
    for f in glob.glob(os.path.join(d, kind + "-*.csv")):
        m = re.match(kind + r"-(\d+)-(\w+)\.csv", os.path.basename(f))
        rows = list(csv.DictReader(open(f)))
        if m and rows:
            runs.append((int(m.group(1)), m.group(2), rows[-1]))
    if not runs:
        continue
    runs.sort()
    arms = {}
    for i, arm, r in runs:
        arms.setdefault(arm, []).append(r)
    print(f"== {kind} ({col})")
    first = None
    for arm, rs in arms.items():
        v = [float(r[col]) for r in rs]
        med = statistics.median(v)
        first = first or med
        extra = ""
        if kind == "alt":
            extra = " bw " + "/".join(r["bw_fraction"] for r in rs) + " hash " + ",".join(sorted({r["gen_ids_hash"] for r in rs}))
        else:
            extra = " frac " + "/".join(r["prefill_ceiling_fraction"] for r in rs) + " ceiling " + "/".join(r["tc_ceiling_tflops"] for r in rs)
        print(f"  {arm:10s} runs {' / '.join(f'{x:.2f}' for x in v)} median {med:.2f} ({(med / first - 1) * 100:+.1f}% vs {list(arms)[0]}){extra}")
