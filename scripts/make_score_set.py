#!/usr/bin/env python3
"""The nf-score reference set of the embedded tiny model: 100 prompts with transformers' greedy continuations.

Why: nf-score (tools/nf-score.c, docs/quality.md) measures how close a model file (a recipe of the embedded
model, or a changed engine) stays to the reference implementation: average NLL of the continuations under
teacher forcing, first-token matches and greedy prefix lengths. The continuations are what transformers'
greedy decoding of models/tiny/hf produces in float32 (the BF16 weights upcast: what the bf16 / f32 GGUF
recipes hold), so an exact engine reproduces them, and a quantized one shows how far it drifts.

Prompts (token ids; the text is kept for reading): 10 hand-written code / documentation openings and 90
windows of the tiny model's held-out documents (.tinydata/docs_heldout.jsonl, scripts/tiny_model/make_data.py:
held out by document, never trained on; CPython stdlib under the PSF license, GNU manuals under the GFDL,
Debian package documentation under each package's DFSG-free license), a document start (preceded by
<|endoftext|>, as in training) or a mid-document window. Prompt lengths: 40 short (4-48 tokens), 30 medium
(49-131) and 30 long (132-400). The DSA indexer attends to at most index_topk + index_kpool - 1 = 131 tokens
(128 pooled + a tail of up to 3), so a query at position t is pruned when t + 1 > 131: every long prompt's
last position (and every continuation position after it) is sparse; the lengths 130-133 straddle the
boundary exactly. Cases are interleaved long / medium / short so that every 10th case is a mixed subset
(what `make test` scores).

Continuations: transformers' greedy decoding without a cache (each token the argmax of a float32 full pass over
everything before it), up to 20 tokens, ending early at a stop token (<|endoftext|>, <|user|>, <|observation|>),
which is then the last continuation token. transformers' CPU fallback kernels make token-by-token decoding slow
(~1 s per token on the shared machine), so it is computed as propose-and-verify: our engine (build/libnf.so, the
bf16 GGUF) proposes a greedy continuation, ONE transformers full pass over prompt + proposal gives the argmax at
every position, the proposal is kept up to the first position where transformers' argmax differs, that token is
replaced by transformers' argmax, and the rest is proposed again from there. Every continuation token is therefore
transformers' own full-pass argmax (the proposer only saves passes; meta.json counts the rejected proposals). The
reference numbers (per-case NLL = mean of -log p over the continuation, ref_greedy_prefix = the continuation's
length by construction, the top-5 log-probabilities at every continuation position) come from the float32 full
pass over prompt + continuation, the computation nf-score does.

Output: tests/data/score/tiny.jsonl (one case per line: id, source, prompt, continuation, prompt_tokens,
continuation_tokens, ref_nll, ref_greedy_prefix, ref_topk [[[id, logprob] x5] per continuation token]) and
tests/data/score/tiny.meta.json (versions, sha256, the aggregate reference NLL = total NLL / total tokens, the
boundary, counts).
Usage: python3 scripts/make_score_set.py [--model models/tiny/hf] [--out tests/data/score] [--new 20]
       [--proposer models/tiny/nf-tiny-bf16.gguf] [--lib build/libnf.so]
       (can be split: --shard K --shards N for K in 0..N-1, one process each, then --merge)
"""
import argparse
import hashlib
import json
import os
import platform
import random

import numpy as np
import torch

HAND = ["def main():\n", "The GNU General Public License", "import os\nimport sys\n\n", "This manual documents",
        "    for i in range(", "class Parser:\n    \"\"\"", "#!/bin/sh\n# Copyright", "Usage: grep [OPTION]...",
        "static int\nmain (int argc, char **argv)\n{\n", "  * New upstream release.\n"]


class Proposer:
    """Greedy decoding with our engine through build/libnf.so (only proposes; transformers decides)."""

    def __init__(self, lib, model, n_vocab):
        import ctypes as C
        self.C = C
        L = self.lib = C.CDLL(lib)
        L.nf_model_load.restype = C.c_void_p
        L.nf_model_load.argtypes = [C.c_char_p]
        L.nf_cpu_backend_create.restype = C.c_void_p
        L.nf_cpu_backend_create.argtypes = [C.c_void_p, C.c_int]
        L.nf_backend_state_create.restype = C.c_void_p
        L.nf_backend_state_create.argtypes = [C.c_void_p, C.c_int64]
        L.nf_state_reset.argtypes = [C.c_void_p]
        L.nf_forward.argtypes = [C.c_void_p, C.c_void_p, C.POINTER(C.c_int32), C.c_int, C.POINTER(C.c_float),
                                 C.c_int, C.c_void_p]
        self.m = L.nf_model_load(model.encode())
        assert self.m, f"cannot load {model}"
        self.be = L.nf_cpu_backend_create(self.m, 1)
        self.st = L.nf_backend_state_create(self.be, 1024)
        self.V = n_vocab

    def greedy(self, ids, n, stops):
        C, L = self.C, self.lib
        L.nf_state_reset(self.st)
        out = np.zeros(self.V, np.float32)
        ptr = out.ctypes.data_as(C.POINTER(C.c_float))
        res, feed = [], list(ids)
        while len(res) < n:
            a = (C.c_int32 * len(feed))(*feed)
            assert L.nf_forward(self.be, self.st, a, len(feed), ptr, 0, None) == 0
            t = int(out.argmax())
            res.append(t)
            if t in stops:
                break
            feed = [t]
        return res


def sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/tiny/hf")
    ap.add_argument("--tokenizer", default="models/tiny/tokenizer.json")
    ap.add_argument("--data", default=".tinydata")
    ap.add_argument("--out", default="tests/data/score")
    ap.add_argument("--new", type=int, default=20)
    ap.add_argument("--proposer", default="models/tiny/nf-tiny-bf16.gguf")
    ap.add_argument("--lib", default=os.path.join(os.environ.get("NF_BUILD", "build"), "libnf.so"))
    ap.add_argument("--shard", type=int, default=0)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--merge", action="store_true", help="combine the shards' parts into tiny.jsonl + meta")
    ap.add_argument("--seed", type=int, default=20261202)
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    from tokenizers import Tokenizer
    from transformers import Glm5NextForConditionalGeneration

    tok = Tokenizer.from_file(a.tokenizer)
    eot = tok.token_to_id("<|endoftext|>")
    stops = [eot, tok.token_to_id("<|user|>"), tok.token_to_id("<|observation|>")]
    docs = [json.loads(l) for l in open(os.path.join(a.data, "docs_heldout.jsonl"))]
    enc = {d["name"]: tok.encode(d["text"], add_special_tokens=False).ids for d in docs}
    rng = random.Random(a.seed)

    # prompt lengths: 30 short / 30 medium / 30 long held-out windows (+ the 10 hand-written short ones)
    lens = {"short": [rng.randint(4, 48) for _ in range(30)],
            "medium": [rng.randint(49, 129) for _ in range(28)] + [130, 131],
            "long": [132, 133] + [rng.randint(134, 400) for _ in range(28)]}
    pools = {k: [] for k in lens}
    for kind, ls in lens.items():
        for i, n in enumerate(ls):
            cands = [d for d in docs if len(enc[d["name"]]) >= n + 8]
            d = cands[rng.randrange(len(cands))]
            ids = enc[d["name"]]
            if i % 2 == 0:          # document start, after <|endoftext|>
                p, src = [eot] + ids[: n - 1], f"{d['name']}@start"
            else:                   # mid-document window
                off = rng.randrange(0, len(ids) - n)
                p, src = ids[off: off + n], f"{d['name']}@{off}"
            pools[kind].append((src, p))
    pools["short"] = [("hand", tok.encode(h, add_special_tokens=False).ids) for h in HAND] + pools["short"]
    order = []
    for i in range(40):
        for kind in ("long", "medium", "short"):
            if i < len(pools[kind]):
                order.append(pools[kind][i])
    assert len(order) == 100

    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "tiny.jsonl")
    if not a.merge:
        model = Glm5NextForConditionalGeneration.from_pretrained(a.model, dtype=torch.float32,
                                                                 attn_implementation="eager").eval()
        prop_engine = Proposer(a.lib, a.proposer, model.config.get_text_config().vocab_size)
        passes, rejected = [0], [0]
        part = os.path.join(a.out, f"tiny.part{a.shard}.jsonl")
        with open(part, "w") as f, torch.no_grad():
            for ci, (src, p) in enumerate(order):
                if ci % a.shards != a.shard:
                    continue
                cont, n_pass = [], 0
                while True:   # propose-and-verify: every kept token is transformers' full-pass argmax
                    prop = cont + prop_engine.greedy(p + cont, a.new - len(cont), stops)
                    logits = model(input_ids=torch.tensor([p + prop]), use_cache=False).logits[0].double()
                    n_pass += 1
                    am = logits[len(p) - 1: len(p) - 1 + len(prop)].argmax(1).tolist()
                    j = len(cont)
                    while j < len(prop) and am[j] == prop[j]:
                        j += 1
                    if j == len(prop):
                        cont = prop
                        break
                    rejected[0] += 1
                    cont = prop[:j] + [am[j]]
                    if len(cont) >= a.new or cont[-1] in stops:
                        break
                # logits[t] for t < len(p) - 1 + len(cont) depend only on p + cont[:-1]: all verified tokens
                lp = torch.log_softmax(logits, -1)[len(p) - 1: len(p) - 1 + len(cont)]
                passes[0] += n_pass
                tgt = torch.tensor(cont)
                tok_lp = lp.gather(1, tgt[:, None])[:, 0]
                nll = float(-tok_lp.mean())
                am = lp.argmax(1)
                prefix = 0
                while prefix < len(cont) and int(am[prefix]) == cont[prefix]:
                    prefix += 1
                top = torch.topk(lp, 5, dim=-1)
                ref_topk = [[[int(i), round(float(v), 6)] for i, v in zip(ti, tv)]
                            for ti, tv in zip(top.indices, top.values)]
                case = {"id": f"c{ci:03d}", "source": src, "prompt": tok.decode(p, skip_special_tokens=False),
                        "continuation": tok.decode(cont, skip_special_tokens=False), "prompt_tokens": p,
                        "continuation_tokens": cont, "ref_nll": round(nll, 8), "ref_greedy_prefix": prefix,
                        "ref_topk": ref_topk}
                case["_passes"] = n_pass
                f.write(json.dumps(case) + "\n")
                f.flush()
                print(f"{ci:3d} {src:40s} prompt {len(p):3d} cont {len(cont):2d} nll {nll:.4f} prefix {prefix}",
                      flush=True)
        if a.shards > 1:
            return
    cases = []
    for k in range(a.shards):
        cases += [json.loads(l) for l in open(os.path.join(a.out, f"tiny.part{k}.jsonl"))]
    cases.sort(key=lambda c: c["id"])
    assert [c["id"] for c in cases] == [f"c{i:03d}" for i in range(len(order))], "missing cases"
    n_passes = sum(c.pop("_passes") for c in cases)
    with open(path, "w") as f:
        for c in cases:
            f.write(json.dumps(c) + "\n")
    for k in range(a.shards):
        os.remove(os.path.join(a.out, f"tiny.part{k}.jsonl"))
    cfg = json.load(open(os.path.join(a.model, "config.json")))["text_config"]
    topk_cfg = (cfg["index_topk"], cfg["index_kpool"])
    tot_nll = sum(c["ref_nll"] * len(c["continuation_tokens"]) for c in cases)
    tot_n = sum(len(c["continuation_tokens"]) for c in cases)
    n_long = sum(len(c["prompt_tokens"]) > topk_cfg[0] + topk_cfg[1] - 1 for c in cases)
    mism = sum(c["ref_greedy_prefix"] < len(c["continuation_tokens"]) for c in cases)
    import tokenizers
    import transformers
    meta = {
        "what": "nf-score reference set of models/tiny/hf (transformers float32 greedy continuations)",
        "cases": 100, "continuation_tokens": tot_n, "max_new_tokens": a.new, "stop_tokens": stops,
        "reference_nll": tot_nll / tot_n,
        "reference_nll_note": "total NLL / total continuation tokens over all 100 cases (float64 from f32 logits)",
        "dense_sparse_boundary": {"index_topk": topk_cfg[0], "index_kpool": topk_cfg[1],
                                  "max_attended": topk_cfg[0] + topk_cfg[1] - 1,
                                  "rule": "query position t is pruned when t + 1 > index_topk + index_kpool - 1",
                                  "cases_with_prompt_beyond": n_long},
        "cases_where_full_pass_argmax_leaves_the_continuation": mism,
        "transformers_full_passes": n_passes,
        "proposals_rejected": n_passes - len(cases),
        "proposals_note": "propose-and-verify passes; a rejected proposal is a position where the engine's greedy "
                          "token (bf16 GGUF) differed from transformers' argmax, replaced by transformers' token",
        "seed": a.seed,
        "model_sha256": {fn: sha(os.path.join(a.model, fn)) for fn in sorted(os.listdir(a.model))
                         if fn.endswith(".safetensors")},
        "sha256": {"tiny.jsonl": sha(path)},
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                     "tokenizers": tokenizers.__version__, "numpy": np.__version__,
                     "python": platform.python_version()},
    }
    with open(os.path.join(a.out, "tiny.meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps({k: meta[k] for k in ("reference_nll", "continuation_tokens", "dense_sparse_boundary",
                                           "cases_where_full_pass_argmax_leaves_the_continuation", "proposals_rejected")}))


if __name__ == "__main__":
    main()
