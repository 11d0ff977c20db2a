#!/usr/bin/env python3
"""Reference greedy continuations of the tiny model with transformers -> tests/data/tiny/greedy.json.

Why: a C test can check the engine's whole forward pass (KDA, MLA + DSA indexer in its sparse regime, MoE,
mHC) on the shipped model (models/tiny/nf-tiny-bf16.gguf) without torch: it feeds each prompt's ids and
compares its greedy continuation with the one transformers 5.24 produced here from the same weights (the
BF16 checkpoint, computed in float32 on the CPU, SDPA attention, KV/recurrent cache as in generate()).
Prompts: short text/code/chat-format prompts and four held-out windows of 150-480 tokens, so queries see
more than index_topk + 3 = 131 tokens and attend sparsely. Per step the file also records the top-5 ids and
logits and the top-1/top-2 margin, so a test can tell a real mismatch from a near-tie flipped by rounding,
and a teacher-forced full forward (no cache) is checked to give the same argmax at every step.

Usage: python3 scripts/tiny_model/make_greedy_ref.py [--model models/tiny/hf] [--data .tinydata]
           [--gguf models/tiny/nf-tiny-bf16.gguf] [--out tests/data/tiny/greedy.json] [--new 48]
"""
import argparse, hashlib, json, os
import numpy as np
import torch

TEXT_PROMPTS = [
    "def main():\n",
    "The GNU General Public License",
    "import os\nimport sys\n\n",
    "This manual documents",
    "[gMASK]<sop><|user|>What does the sed command do?<|assistant|><think>",
    "1, 2, 3, 4, 5,",
]
HELDOUT_WINDOWS = [(1000, 150), (20000, 260), (60000, 380), (120000, 480)]  # (offset, length) in heldout.npy


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/tiny/hf")
    ap.add_argument("--tokenizer", default="models/tiny")
    ap.add_argument("--data", default=".tinydata")
    ap.add_argument("--gguf", default="models/tiny/nf-tiny-bf16.gguf")
    ap.add_argument("--out", default="tests/data/tiny/greedy.json")
    ap.add_argument("--new", type=int, default=48)
    a = ap.parse_args()
    import transformers
    from transformers import Glm5NextForConditionalGeneration, AutoTokenizer
    torch.manual_seed(0)
    m = Glm5NextForConditionalGeneration.from_pretrained(a.model, dtype=torch.float32,
                                                         attn_implementation="sdpa").eval()
    tk = AutoTokenizer.from_pretrained(a.tokenizer)
    held = np.load(os.path.join(a.data, "heldout.npy")).astype(np.int64)
    prompts = [("text", p, tk(p, add_special_tokens=False).input_ids) for p in TEXT_PROMPTS]
    for off, n in HELDOUT_WINDOWS:
        ids = held[off:off + n].tolist()
        prompts.append(("heldout@%d" % off, tk.decode(ids), ids))
    cases = []
    for kind, text, ids in prompts:
        inp = torch.tensor([ids])
        with torch.no_grad():
            g = m.generate(inp, max_new_tokens=a.new, do_sample=False, min_new_tokens=a.new,
                           return_dict_in_generate=True, output_logits=True, eos_token_id=None, pad_token_id=None)
            cont = g.sequences[0, len(ids):].tolist()
            steps = []
            for t, lg in enumerate(g.logits):
                lg = lg[0].float()
                top = lg.topk(5)
                steps.append({"id": cont[t], "top_ids": top.indices.tolist(),
                              "top_logits": [round(v, 4) for v in top.values.tolist()],
                              "margin": round((top.values[0] - top.values[1]).item(), 4)})
            # teacher-forced check without cache: argmax at every step equals the cached greedy token
            full = m(input_ids=g.sequences).logits[0, len(ids) - 1:-1].float()
            tf_argmax = full.argmax(-1).tolist()
            cached = torch.stack([l[0].float() for l in g.logits])
            max_diff = (full - cached).abs().max().item()
        assert len(cont) == a.new
        case = {"kind": kind, "prompt_text": text, "prompt_ids": ids,
                "prompt_ids_reencode_equal": tk(text, add_special_tokens=False).input_ids == ids,
                "continuation_ids": cont, "continuation_text": tk.decode(cont),
                "teacher_forced_argmax_equal": tf_argmax == cont,
                "cached_vs_full_max_abs_logit_diff": round(max_diff, 6),
                "min_margin": min(s["margin"] for s in steps), "steps": steps}
        cases.append(case)
        print(kind, len(ids), "->", repr(case["continuation_text"][:80]), "tf_equal", case["teacher_forced_argmax_equal"],
              "min_margin", case["min_margin"], "diff", case["cached_vs_full_max_abs_logit_diff"], flush=True)
    out = {
        "model": {"hf_dir": a.model, "gguf": os.path.basename(a.gguf),
                  "gguf_sha256": sha256(a.gguf) if os.path.exists(a.gguf) else None,
                  "weights": "BF16 checkpoint (F32 for the modules transformers keeps in float32); "
                             "the bf16 GGUF holds the same values"},
        "reference": {"transformers": transformers.__version__, "torch": torch.__version__,
                      "compute": "float32 on CPU, sdpa attention, generate() with cache, greedy",
                      "index_topk": m.config.text_config.index_topk, "index_kpool": m.config.text_config.index_kpool},
        "max_new_tokens": a.new,
        "cases": cases,
    }
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("wrote", a.out, os.path.getsize(a.out), "bytes")


if __name__ == "__main__":
    main()
