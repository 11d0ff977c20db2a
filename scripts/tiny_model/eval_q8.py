#!/usr/bin/env python3
"""Q8 argmax agreement of a tiny-model checkpoint: our engine's q8 file against transformers in float32.

Why: issue 3 asks that the Q8 recipe's argmax agree with the transformers reference at >= 99% of positions. On the
first tiny model it was 98.33% (the flips are near-ties of an undertrained model); on the continued-training model
now shipped it is 99.33% on the 600 tokens and 98.90% on the 5 further windows (docs/quality.md, "Q8 on the tiny
model"). This script measures the same thing for any checkpoint of that model (e.g. one trained further with
train.py --init), so a candidate replacement can be judged before it is shipped.

For an HF checkpoint folder it (a) converts it with build/nf-convert to a bf16 and a q8 GGUF, (b) computes, on the 600
held-out tokens of tests/data/tiny/tokens.txt and on 5 further held-out windows of 600 tokens (.tinydata/heldout.npy
offsets 1000 + 40000*k, k = 0..4, as docs/quality.md item 6), the logits of every position with transformers (float32,
eager attention) and with `nf logits` on both GGUFs, and prints per window: q8 argmax agreement with transformers,
the flipped positions, mean / max |dlogit| over all positions and the vocabulary, the held-out NLL of transformers and
of q8, and the bf16 file's max |dlogit| (the engine's exactness, ~1e-5) and agreement. --out writes it all as JSON.

Usage: python3 scripts/tiny_model/eval_q8.py --model models/tiny/hf [--data .tinydata] [--work /tmp/nf-eval-q8]
       [--out FILE.json] [--skip-windows]
Needs torch + transformers (>= 5.24 for glm5_next as trained) and a built build/nf, build/nf-convert.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
WINDOW, OFFSETS = 600, [1000 + 40000 * k for k in range(5)]


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("eval_q8: %s failed (%d):\n%s" % (" ".join(cmd), r.returncode, r.stderr[-2000:]))
    return r


def convert(model_dir, work, recipe, nf_convert):
    """GGUF of the checkpoint; the tokenizer files are added from models/tiny when the folder lacks them (a link
    folder, so the checkpoint folder itself is not written to)."""
    link = os.path.join(work, "nf-tiny")   # the folder name becomes general.name, as for the shipped file
    os.makedirs(link, exist_ok=True)
    for src_dir in (os.path.join(ROOT, "models", "tiny"), model_dir):   # the checkpoint's own files win
        for f in os.listdir(src_dir):
            if f.endswith((".json", ".safetensors")) and os.path.isfile(os.path.join(src_dir, f)):
                if src_dir != model_dir and f not in ("tokenizer.json", "tokenizer_config.json"):
                    continue
                dst = os.path.join(link, f)
                if os.path.lexists(dst):
                    os.remove(dst)
                os.symlink(os.path.abspath(os.path.join(src_dir, f)), dst)
    out = os.path.join(work, "model-%s.gguf" % recipe)
    run([nf_convert, link, "-o", out, "--recipe", recipe, "-q"])
    return out


def nf_logits(nf, gguf, ids, work, tag, V):
    tf = os.path.join(work, "%s.ids" % tag)
    with open(tf, "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")
    out = os.path.join(work, "%s.f32" % tag)
    run([nf, "logits", "-m", gguf, "--tokens", tf, "--out", out])
    L = np.fromfile(out, dtype="<f4")
    if L.size != len(ids) * V:
        sys.exit("eval_q8: %s: %d logits, expected %d x %d" % (out, L.size, len(ids), V))
    return L.reshape(len(ids), V)


def nll(L, ids):
    L = L.astype(np.float64)
    m = L.max(1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(L - m).sum(1))
    return float(-(L[np.arange(len(ids) - 1), ids[1:]] - lse[:-1]).mean())


def compare(ref, L):
    agree = L.argmax(1) == ref.argmax(1)
    d = np.abs(L - ref)
    return {"agreement": float(agree.mean()), "flips": np.nonzero(~agree)[0].tolist(),
            "mean_abs_dlogit": float(d.mean()), "max_abs_dlogit": float(d.max())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="HF checkpoint folder (config.json + safetensors)")
    ap.add_argument("--data", default=os.path.join(ROOT, ".tinydata"), help="folder with heldout.npy")
    ap.add_argument("--work", default="/tmp/nf-eval-q8")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=None, help="write the results as JSON")
    ap.add_argument("--skip-windows", action="store_true", help="only the 600 tokens of tests/data/tiny")
    a = ap.parse_args()
    import torch
    from transformers import Glm5NextForConditionalGeneration
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    os.makedirs(a.work, exist_ok=True)
    nf, nf_convert = os.path.join(a.build, "nf"), os.path.join(a.build, "nf-convert")
    for t in (nf, nf_convert):
        if not os.access(t, os.X_OK):
            sys.exit("eval_q8: %s not found: build it first (make CI=1 -j2 build/nf build/nf-convert)" % t)

    t0 = time.time()
    ggufs = {r: convert(a.model, a.work, r, nf_convert) for r in ("bf16", "q8")}
    model = Glm5NextForConditionalGeneration.from_pretrained(a.model, dtype=torch.float32,
                                                             attn_implementation="eager").eval()
    V = model.lm_head.weight.shape[0]

    windows = [("tests/data/tiny", [int(v) for v in open(os.path.join(ROOT, "tests/data/tiny/tokens.txt")).read().split()])]
    if not a.skip_windows:
        held = np.load(os.path.join(a.data, "heldout.npy"))
        windows += [("heldout@%d" % o, held[o:o + WINDOW].astype(np.int64).tolist()) for o in OFFSETS]

    results = []
    for name, ids in windows:
        with torch.no_grad():
            ref = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float().numpy()
        tag = name.replace("/", "_").replace("@", "_")
        q8 = nf_logits(nf, ggufs["q8"], ids, a.work, tag + "-q8", V)
        bf = nf_logits(nf, ggufs["bf16"], ids, a.work, tag + "-bf16", V)
        r = {"window": name, "positions": len(ids), "q8": compare(ref, q8), "bf16": compare(ref, bf),
             "nll_transformers": nll(ref, ids), "nll_q8": nll(q8, ids)}
        results.append(r)
        q = r["q8"]
        print("%-16s q8 argmax %6.2f%% (%d of %d differ%s) |dlogit| mean %.4f max %.3f  NLL tf %.5f q8 %.5f  "
              "bf16: max |dlogit| %.1e, argmax %.2f%%"
              % (name, 100 * q["agreement"], len(q["flips"]), len(ids),
                 ": " + " ".join(map(str, q["flips"][:12])) + (" ..." if len(q["flips"]) > 12 else "") if q["flips"] else "",
                 q["mean_abs_dlogit"], q["max_abs_dlogit"], r["nll_transformers"], r["nll_q8"],
                 r["bf16"]["max_abs_dlogit"], 100 * r["bf16"]["agreement"]), flush=True)
    extra = results[1:]
    summary = {}
    if extra:
        n = sum(r["positions"] for r in extra)
        flips = sum(len(r["q8"]["flips"]) for r in extra)
        summary = {"windows": len(extra), "positions": n, "q8_agreement": 1 - flips / n, "q8_flips": flips,
                   "nll_transformers": float(np.mean([r["nll_transformers"] for r in extra])),
                   "nll_q8": float(np.mean([r["nll_q8"] for r in extra]))}
        print("%d held-out windows: q8 argmax %.2f%% (%d of %d differ, per window %s), NLL tf %.5f q8 %.5f"
              % (len(extra), 100 * summary["q8_agreement"], flips, n,
                 " ".join("%.2f" % (100 * r["q8"]["agreement"]) for r in extra), summary["nll_transformers"],
                 summary["nll_q8"]))
    print("(%.0f s)" % (time.time() - t0))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"model": a.model, "windows": results, "heldout_windows": summary}, f, indent=1)


if __name__ == "__main__":
    main()
