#!/usr/bin/env python3
"""Check the trained tiny model on the CPU: held-out loss with transformers and a few greedy samples.

Why: the checkpoint comes back from the GPU machine as BF16 shards; this measures what was actually saved
(BF16 weights, float32 compute, sparse DSA selection as at inference) on the held-out documents
(.tinydata/heldout.npy, split by document in make_data.py), and shows that greedy continuations are
recognisably language/code.
Usage: python3 scripts/tiny_model/eval_cpu.py [--model models/tiny/hf] [--windows 32] [--out FILE.json]
"""
import argparse, json, os, time
import numpy as np
import torch
import torch.nn.functional as F

PROMPTS = ["def main():\n", "The GNU General Public License", "import os\nimport sys\n\n",
           "This manual documents", "    for i in range(", "class Parser:\n    \"\"\""]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/tiny/hf")
    ap.add_argument("--tokenizer", default="models/tiny")
    ap.add_argument("--data", default=".tinydata")
    ap.add_argument("--windows", type=int, default=32)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--new", type=int, default=48)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    from transformers import Glm5NextForConditionalGeneration, AutoTokenizer
    m = Glm5NextForConditionalGeneration.from_pretrained(a.model, dtype=torch.float32).eval()
    tk = AutoTokenizer.from_pretrained(a.tokenizer)
    held = np.load(os.path.join(a.data, "heldout.npy")).astype(np.int64)
    res = {"params": sum(p.numel() for p in m.parameters())}
    tot, n, t0 = 0.0, 0, time.time()
    with torch.no_grad():
        for i in range(a.windows):
            w = torch.from_numpy(held[i * a.seq: i * a.seq + a.seq + 1])[None]
            logits = m(input_ids=w[:, :-1]).logits
            tot += F.cross_entropy(logits[0].float(), w[0, 1:], reduction="sum").item()
            n += a.seq
    res.update(heldout_windows=a.windows, heldout_tokens=n, heldout_loss=round(tot / n, 4),
               eval_s=round(time.time() - t0, 1))
    print(json.dumps(res), flush=True)
    samples = []
    for p in PROMPTS:
        ids = tk(p, return_tensors="pt").input_ids
        out = m.generate(ids, max_new_tokens=a.new, do_sample=False)
        text = tk.decode(out[0, ids.shape[1]:])
        samples.append({"prompt": p, "continuation": text})
        print(repr(p), "->", repr(text), flush=True)
    res["samples"] = samples
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
