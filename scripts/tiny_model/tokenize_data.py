#!/usr/bin/env python3
"""Tokenize the tiny-model corpus into flat uint16 token streams (.tinydata/{train,heldout}.npy).

Why: training reads random fixed-length windows from one packed stream; every document is followed by
<|endoftext|> (id 8128) so the model learns document boundaries. uint16 keeps the streams small enough to
travel to the GPU machine with the working tree.
Usage: python3 scripts/tiny_model/tokenize_data.py [--data .tinydata] [--tokenizer models/tiny/tokenizer.json]
"""
import argparse, json, os
import numpy as np
from tokenizers import Tokenizer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=".tinydata")
    ap.add_argument("--tokenizer", default="models/tiny/tokenizer.json")
    a = ap.parse_args()
    tok = Tokenizer.from_file(a.tokenizer)
    eos = tok.token_to_id("<|endoftext|>")
    stats = {}
    for split in ("train", "heldout"):
        texts = [json.loads(l)["text"] for l in open(os.path.join(a.data, "docs_%s.jsonl" % split))]
        out = []
        for i in range(0, len(texts), 256):
            for enc in tok.encode_batch(texts[i:i + 256], add_special_tokens=False):
                out.extend(enc.ids)
                out.append(eos)
        arr = np.asarray(out, dtype=np.uint16)
        assert arr.max() < 8192
        np.save(os.path.join(a.data, "%s.npy" % split), arr)
        nbytes = sum(len(t.encode()) for t in texts)
        stats[split] = {"docs": len(texts), "tokens": int(arr.size), "bytes": nbytes,
                        "bytes_per_token": round(nbytes / arr.size, 3)}
    with open(os.path.join(a.data, "tokens.json"), "w") as f:
        json.dump(stats, f, indent=1)
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
