#!/usr/bin/env python3
"""ncu_table.py — the per-kernel table of one decode step from an Nsight Compute CSV.

Input: `ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --page raw
nf-bench ... --gen N` (N >= 3; the file may be .xz). The kernels of one decode step are those between two
consecutive launches of the embedding kernel (each forward starts with it); by default the step between the last two
embeddings (a steady decode step: the first decode step after prefill can differ). Prints kernels per token, the sum
of kernel times (ncu serialises kernels, so this is GPU busy time without launch gaps) and, per kernel name, calls,
time, share, DRAM bytes read and GB/s, sorted by time. --markdown prints the same as a Markdown table.
--by-shape keeps the template arguments and splits each kernel by the MB it reads per call (one GEMV kernel
serves every matrix of a format: this separates the routed experts from the attention projections). --step 0 on
a profile of `--gen 1 --warmup 0` is the prefill chunk (the first forward).
"""
import argparse, csv, lzma, re, sys


def load(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        lines = f.read().splitlines()
    start = next((k for k, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"{path}: no ncu CSV header (\"ID\",...) found")
    rows = list(csv.reader(lines[start:]))
    return rows[0], rows[2:]  # rows[1] holds the units


def kernel_name(full, templates):
    """ncu's demangled name without return type, namespace and parameter list; the template arguments kept or not"""
    s = full.replace("<unnamed>::", "")
    s = s[5:] if s.startswith("void ") else s
    depth = 0
    for i, ch in enumerate(s):
        depth += (ch == "<") - (ch == ">")
        if ch == "(" and depth == 0:
            s = s[:i]
            break
    return s if templates else re.sub(r"<.*", "", s)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--step", type=int, default=-1, help="which decode step (python index over embed-delimited steps; default -1 = last complete)")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--by-shape", action="store_true", help="split kernels by template arguments and MB read per call")
    a = ap.parse_args()
    head, data = load(a.csv)
    num = lambda s: float(s.replace(",", ""))
    ki, ti, bi = head.index("Kernel Name"), head.index("gpu__time_duration.sum"), head.index("dram__bytes_read.sum")
    marks = [k for k, r in enumerate(data) if "embed" in r[ki].lower()]
    if len(marks) < 2:
        sys.exit("fewer than two forward passes (embedding kernels) in the profile")
    steps = list(zip(marks[:-1], marks[1:]))
    lo, hi = steps[a.step]
    step = data[lo:hi]
    tot = sum(num(r[ti]) for r in step)
    byt = sum(num(r[bi]) for r in step)
    agg = {}
    for r in step:
        name = kernel_name(r[ki], a.by_shape)
        if a.by_shape:
            name = f"{name} @ {num(r[bi]) / 1e6:.1f} MB"
        e = agg.setdefault(name, [0, 0.0, 0.0])
        e[0] += 1
        e[1] += num(r[ti])
        e[2] += num(r[bi])
    # step 0 is the first forward: the prefill chunk in nf-bench's profiles, not one token
    what = "kernels in the first forward (prefill)" if a.step in (0, -len(steps)) else "kernels per token"
    print(f"{what} {len(step)}; kernel time {tot / 1e6:.3f} ms; DRAM read {byt / 1e9:.3f} GB ({byt / tot:.0f} GB/s)")
    order = sorted(agg.items(), key=lambda kv: -kv[1][1])
    if a.markdown:
        print("| kernel | calls | time (us) | share | read (MB) | GB/s |\n|---|---:|---:|---:|---:|---:|")
        for n, (c, t, b) in order:
            print(f"| {n} | {c} | {t / 1e3:.1f} | {100 * t / tot:.1f}% | {b / 1e6:.1f} | {b / t:.0f} |")
    else:
        for n, (c, t, b) in order:
            print(f"{n[:40]:40s} {c:5d} {t / 1e3:9.1f} us {100 * t / tot:6.1f}% {b / 1e6:8.1f} MB {b / t:7.0f} GB/s")


if __name__ == "__main__":
    main()
