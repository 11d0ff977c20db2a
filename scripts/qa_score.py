#!/usr/bin/env python3
"""The quantization ladder of the embedded model scored with nf-score, checked against the recorded baseline.

Why: `make qa` must catch an engine or quantizer change that moves the model's quality. Each recipe (f32, bf16,
q8, q4, q2) of the embedded model is made from models/tiny/nf-tiny-bf16.gguf with nf-quantize (the checkpoint
is BF16, so this equals nf-convert -r R from the HF folder byte for byte: tests/py/test_quantize.py) and scored on
the whole reference set tests/data/score/tiny.jsonl (100 cases, transformers float32 greedy continuations).

Checks (exit status 1 when one fails):
  f32, bf16   average NLL within 1e-4 of the transformers NLL, and every case's greedy prefix equal to the
              reference's full-pass greedy prefix (exact arithmetic: nothing may move);
  q8, q4, q2  average NLL within NLL_TOL (0.002 nats/token) of the baseline, first-token matches and cases with the
              whole continuation reproduced within COUNT_TOL (2) of the baseline, mean greedy prefix within 0.3.
              The quantized results are deterministic for a given build (no dependence on the thread count);
              the tolerances absorb a different CPU path (AVX2 vs scalar kernels), not real regressions.
The baseline is tests/data/score/baseline.json (`--write-baseline` records the current numbers; do that only for an
intended change, and say why in the commit). `--markdown` prints the docs/quality.md table.
Usage: python3 scripts/qa_score.py [--build build] [--write-baseline] [--markdown] [--every K]
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
MODEL = os.path.join(ROOT, "models", "tiny", "nf-tiny-bf16.gguf")
SET = os.path.join(ROOT, "tests", "data", "score", "tiny.jsonl")
BASELINE = os.path.join(ROOT, "tests", "data", "score", "baseline.json")
RECIPES = ["f32", "bf16", "q8", "q4", "q2"]
NLL_TOL, COUNT_TOL, PREFIX_TOL, EXACT_TOL = 0.002, 2, 0.3, 1e-4


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("NF_BUILD", os.path.join(ROOT, "build")))
    ap.add_argument("--write-baseline", action="store_true")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--every", type=int, default=1)
    ap.add_argument("--backend", default="cpu", choices=["cpu", "cuda"],
                    help="nf-score backend (cuda: a CUDA build, e.g. --build build/cuda); the baseline is the CPU's")
    ap.add_argument("--results", help="also write this run's per-recipe results as JSON here")
    a = ap.parse_args()
    work = os.path.join(a.build, "qa")
    os.makedirs(work, exist_ok=True)
    res = {}
    for r in RECIPES:
        path = MODEL
        if r != "bf16":
            path = os.path.join(work, f"tiny-{r}.gguf")
            subprocess.run([os.path.join(a.build, "nf-quantize"), MODEL, path, "-r", r, "-q"], check=True)
        js = os.path.join(work, f"score-{r}.json")
        p = subprocess.run([os.path.join(a.build, "nf-score"), "-m", path, "--set", SET, "--every", str(a.every),
                            "--backend", a.backend, "--json", js, "-q"], capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"nf-score {r} failed: {p.stderr}{p.stdout}")
        d = json.load(open(js))
        s = d["a"]
        res[r] = {"nll": s["nll"], "first_match": s["first_match"], "greedy_prefix_mean": s["greedy_prefix_mean"],
                  "full_match": s["full_match"], "cases": d["n_cases"], "tokens": s["tokens"],
                  "weight_bytes_per_token": s["weight_bytes_per_token"], "file_bytes": os.path.getsize(path),
                  "topk_mean_abs_dlogprob": s.get("topk_mean_abs_dlogprob"), "top1_agree": s.get("top1_agree"),
                  "reference_nll": d["reference_nll"],
                  "prefix_equal_ref": sum(c["greedy_prefix"] == c["ref_greedy_prefix"] for c in s["cases"]),
                  "ref_first_match": sum(c["ref_greedy_prefix"] > 0 for c in s["cases"]),
                  "ref_greedy_prefix_mean": sum(c["ref_greedy_prefix"] for c in s["cases"]) / d["n_cases"]}
        x = res[r]
        print(f"{r:5s} NLL {x['nll']:.6f} (ref {x['reference_nll']:.6f}, {x['nll'] - x['reference_nll']:+.2e})  "
              f"first {x['first_match']}/{x['cases']}  prefix {x['greedy_prefix_mean']:.2f}  full {x['full_match']}  "
              f"top-k |dlp| {x['topk_mean_abs_dlogprob']:.4f}  bytes/token {x['weight_bytes_per_token'] / 1e6:.2f} MB",
              flush=True)
    if a.results:
        with open(a.results, "w") as f:
            json.dump({"backend": a.backend, "every": a.every, "recipes": res}, f, indent=1)
    if a.markdown:
        print("\n| recipe | file | weight bytes / token | avg NLL (Δ vs transformers) | first-token matches | "
              "mean greedy prefix | whole continuation | mean abs Δ logprob (ref top-5) |")
        print("|---|---|---|---|---|---|---|---|")
        for r in RECIPES:
            x = res[r]
            print(f"| {r} | {x['file_bytes'] / 1e6:.1f} MB | {x['weight_bytes_per_token'] / 1e6:.2f} MB | "
                  f"{x['nll']:.5f} ({x['nll'] - x['reference_nll']:+.1e}) | {x['first_match']}/{x['cases']} | "
                  f"{x['greedy_prefix_mean']:.2f} / {x['tokens'] / x['cases']:.1f} | {x['full_match']}/{x['cases']} | "
                  f"{x['topk_mean_abs_dlogprob']:.4f} |")
    if a.write_baseline:
        if a.backend != "cpu":
            sys.exit("--write-baseline records the CPU reference (--backend cpu)")
        if a.every != 1:
            sys.exit("--write-baseline needs the whole set (--every 1)")
        with open(BASELINE, "w") as f:
            json.dump({"what": "scripts/qa_score.py results on tests/data/score/tiny.jsonl", "recipes": res}, f,
                      indent=1)
        print(f"baseline written to {BASELINE}")
        return
    bad = []
    for r in ("f32", "bf16"):
        x = res[r]
        if abs(x["nll"] - x["reference_nll"]) > EXACT_TOL:
            bad.append(f"{r}: NLL {x['nll']:.6f} vs transformers {x['reference_nll']:.6f} (> {EXACT_TOL})")
        if x["prefix_equal_ref"] != x["cases"]:
            bad.append(f"{r}: greedy prefix differs from the reference's in {x['cases'] - x['prefix_equal_ref']} cases")
    if a.every == 1:
        base = json.load(open(BASELINE))["recipes"]
        for r in ("q8", "q4", "q2"):
            x, b = res[r], base[r]
            if abs(x["nll"] - b["nll"]) > NLL_TOL:
                bad.append(f"{r}: NLL {x['nll']:.6f} vs baseline {b['nll']:.6f} (> {NLL_TOL})")
            for k in ("first_match", "full_match"):
                if abs(x[k] - b[k]) > COUNT_TOL:
                    bad.append(f"{r}: {k} {x[k]} vs baseline {b[k]} (> {COUNT_TOL})")
            if abs(x["greedy_prefix_mean"] - b["greedy_prefix_mean"]) > PREFIX_TOL:
                bad.append(f"{r}: greedy prefix {x['greedy_prefix_mean']:.2f} vs baseline {b['greedy_prefix_mean']:.2f}")
    if bad:
        print("QA FAILED:\n  " + "\n  ".join(bad))
        sys.exit(1)
    print("qa: all recipes within tolerance" + ("" if a.every == 1 else " (exact recipes only: subset)"))


if __name__ == "__main__":
    main()
