#!/usr/bin/env python3
"""Reference outputs of the embedded tiny model (models/tiny/hf) on a held-out text, for tests/data/tiny/.

Why: the random-weight fixtures (tests/data/fixtures) have router / indexer margins near 1e-4 and flat logits, so any
weight rounding flips their discrete choices; a trained model is the realistic case for judging the quantized
recipes (issue 3: Q8 argmax agreement >= 99%). This script runs the trained checkpoint through transformers in
float32 (the BF16 weights upcast: exactly what nf-convert's bf16 recipe stores, computed in f32 by our CPU backend)
over ~600 tokens of held-out text, so the DSA indexer prunes (index_topk 128 + kpool 4: queries past position
130 see more tokens than they attend to), and stores what tests/py/test_tiny_reference.py compares with.

Text: the start of the held-out document `py:heapq.py` (CPython 3.11 standard library, PSF License 2.0) from the
tiny model's corpus (.tinydata/docs_heldout.jsonl, made by scripts/tiny_model/make_data.py; held out by document,
never trained on), preceded by <|endoftext|> (training packs documents after that token). When .tinydata is absent
the same text is read from the installed stdlib (sysconfig stdlib/heapq.py, cleaned the same way).

Outputs (tests/data/tiny/):
  tokens.txt      the ids, one line, single spaces
  text.txt        the text (for reading)
  argmax.i32      [P] int32: argmax of the logits at every position
  logprob.f32     [P-1] float32: log p(token[t+1] | tokens[..t]) at every position t < P-1
  lse.f32         [P] float32: logsumexp of each position's logits
  logits_sel.f32  [n_sel][V] float32: full logits at the positions listed in positions.json
  positions.json  {"positions": [...]} (48 evenly spaced + the last)
  topk.i32        [n_mla][P][row_width] int32: indexer selections at every position (docs/fixtures.md layout)
  topk.json       shape, layers, source, row_width, index_topk, index_kpool
  meta.json       versions, sha256 of every file, reference NLL (mean of -logprob), pruned positions per MLA
                  layer, discrete-choice margins (indexer / router) and logit-gap statistics
Usage: python3 scripts/make_tiny_reference.py [--model models/tiny/hf] [--out tests/data/tiny] [--n 600]
"""
import argparse
import hashlib
import json
import os
import platform
import sys
import sysconfig

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402  (Probe: indexer top-k hooks, router margins)

DOC = "py:heapq.py"

# Parameters (HF module names) the q8 recipe stores as Q8_0; everything else (norms, hc, router, indexer
# weights_proj / compressor gate / ape, KDA conv / dt_bias / A_log) stays F32 (docs/gguf.md "Recipes").
Q8_SUFFIXES = ("embed_tokens.weight", "lm_head.weight", "q_proj.weight", "k_proj.weight", "v_proj.weight",
               "o_proj.weight", "f_a_proj.weight", "f_b_proj.weight", "b_proj.weight", "g_a_proj.weight",
               "g_b_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
               "q_a_proj.weight", "q_b_proj.weight", "kv_a_proj_with_mqa.weight", "indexer.wq_b.weight",
               "indexer.wk.weight", "experts.gate_up_proj", "experts.down_proj")


def q8_round(w):
    """Q8_0 round-trip along the last dim (ggml ne0) with the gguf package's reference quantizer."""
    from gguf import quants as gq
    from gguf.constants import GGMLQuantizationType as T
    a = w.detach().numpy().astype(np.float32)
    r = gq.dequantize(gq.quantize(a.reshape(-1, a.shape[-1]), T.Q8_0), T.Q8_0).reshape(a.shape)
    return torch.from_numpy(r.astype(np.float32))


def q8_weights(model):
    """The model with every weight the q8 recipe quantizes replaced by its Q8_0 round trip, blocked as the GGUF
    stores it (kv_b_proj: the K half of each head transposed, as attn_k_b; the V half as attn_v_b)."""
    import copy
    m = copy.deepcopy(model)
    cfg = m.model.language_model.config
    per = cfg.qk_nope_head_dim + cfg.v_head_dim
    n = 0
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "visual" in name:
                continue
            if name.endswith("kv_b_proj.weight"):
                w = p.view(cfg.num_attention_heads, per, -1)
                k = w[:, :cfg.qk_nope_head_dim, :]
                w[:, :cfg.qk_nope_head_dim, :] = q8_round(k.transpose(1, 2)).transpose(1, 2)
                w[:, cfg.qk_nope_head_dim:, :] = q8_round(w[:, cfg.qk_nope_head_dim:, :])
                n += 1
            elif name.endswith(Q8_SUFFIXES):
                p.copy_(q8_round(p))
                n += 1
    return m, n


def load_text(data_dir):
    path = os.path.join(data_dir, "docs_heldout.jsonl")
    if os.path.exists(path):
        for line in open(path):
            d = json.loads(line)
            if d["name"] == DOC:
                return d["text"], path
    # same cleaning as scripts/tiny_model/make_data.py
    import re
    t = open(os.path.join(sysconfig.get_paths()["stdlib"], "heapq.py"), encoding="utf-8").read()
    t = t.replace("\r\n", "\n").replace("\t", "    ")
    t = re.sub(r"\n{4,}", "\n\n\n", t).strip() + "\n"
    return t, "stdlib heapq.py"


def sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/tiny/hf")
    ap.add_argument("--tokenizer", default="models/tiny/tokenizer.json")
    ap.add_argument("--data", default=".tinydata")
    ap.add_argument("--out", default="tests/data/tiny")
    ap.add_argument("--n", type=int, default=600)
    ap.add_argument("--n-sel", type=int, default=48)
    a = ap.parse_args()
    mf.set_determinism()
    from tokenizers import Tokenizer
    from transformers import Glm5NextForConditionalGeneration

    tok = Tokenizer.from_file(a.tokenizer)
    eot = tok.token_to_id("<|endoftext|>")
    text, text_src = load_text(a.data)
    ids = [eot] + tok.encode(text, add_special_tokens=False).ids[: a.n - 1]
    assert len(ids) == a.n, len(ids)
    P = len(ids)

    model = Glm5NextForConditionalGeneration.from_pretrained(a.model, dtype=torch.float32,
                                                             attn_implementation="eager").eval()
    cfg = model.model.language_model.config
    probe = mf.Probe(model, record_stats=True)
    x = torch.tensor([ids])
    with torch.no_grad():
        out = model(input_ids=x, use_cache=False)
    probe.remove()
    layers, source, topk = probe.finish(P)
    logits = out.logits[0].float()
    V = logits.shape[1]
    lse = torch.logsumexp(logits.double(), -1)
    lp = (logits.double().gather(1, x[0, 1:, None]).squeeze(1) - lse[:-1])
    nll = float(-lp.mean())
    # Independent of our engine: the same forward in transformers with the q8 recipe's weight rounding (f32
    # activations), i.e. what an exact Q8_0-weight engine would give.
    mq, n_q8 = q8_weights(model)
    probe_q = mf.Probe(mq, record_stats=False)
    with torch.no_grad():
        lq = mq(input_ids=x, use_cache=False).logits[0].float()
    probe_q.remove()
    _, _, topk_q = probe_q.finish(P)
    lp_q = lq.double().gather(1, x[0, 1:, None]).squeeze(1) - torch.logsumexp(lq.double(), -1)[:-1]
    flips = torch.nonzero(lq.argmax(1) != logits.argmax(1))[:, 0].tolist()
    sel_diff = sum(set(topk[li, t][topk[li, t] >= 0].tolist()) != set(topk_q[li, t][topk_q[li, t] >= 0].tolist())
                   for li in range(topk.shape[0]) for t in range(P))
    q8_check = {"what": "transformers f32 forward with every q8-recipe weight Q8_0-rounded (gguf.quants), f32 "
                        "activations: the discrete-choice sensitivity of this model to Q8_0 weights alone",
                "tensors_rounded": n_q8, "argmax_agreement": 1 - len(flips) / P, "flipped_positions": flips,
                "mean_abs_dlogit": float((lq - logits).abs().mean()),
                "median_per_position_max_abs_dlogit": float((lq - logits).abs().max(1).values.median()),
                "max_abs_dlogit": float((lq - logits).abs().max()), "indexer_rows_changed": int(sel_diff),
                "nll": float(-lp_q.mean())}
    srt = torch.sort(logits, -1, descending=True).values
    gap = (srt[:, 0] - srt[:, 1]).numpy()

    os.makedirs(a.out, exist_ok=True)
    o = lambda n: os.path.join(a.out, n)  # noqa: E731
    with open(o("tokens.txt"), "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")
    with open(o("text.txt"), "w") as f:
        f.write(tok.decode(ids[1:], skip_special_tokens=False))
    logits.argmax(1).numpy().astype("<i4").tofile(o("argmax.i32"))
    lp.numpy().astype("<f4").tofile(o("logprob.f32"))
    lse.numpy().astype("<f4").tofile(o("lse.f32"))
    pos = sorted(set(np.linspace(0, P - 1, a.n_sel, endpoint=False).round().astype(int).tolist() + [P - 1]))
    logits[pos].numpy().astype("<f4").tofile(o("logits_sel.f32"))
    with open(o("positions.json"), "w") as f:
        json.dump({"positions": pos}, f)
    width = cfg.index_topk + cfg.index_kpool - 1
    topk.numpy().astype("<i4").tofile(o("topk.i32"))
    with open(o("topk.json"), "w") as f:
        json.dump({"shape": list(topk.shape), "layers": layers, "source": source, "row_width": width,
                   "index_topk": cfg.index_topk, "index_kpool": cfg.index_kpool}, f, indent=1)
    files = ["tokens.txt", "text.txt", "argmax.i32", "logprob.f32", "lse.f32", "logits_sel.f32", "positions.json",
             "topk.i32", "topk.json"]
    import tokenizers
    import transformers
    meta = {
        "what": "transformers float32 reference of models/tiny/hf (BF16 weights upcast) on held-out text",
        "model": a.model,
        "model_sha256": {fn: sha(os.path.join(a.model, fn)) for fn in sorted(os.listdir(a.model))
                         if fn.endswith((".safetensors", ".json"))},
        "text": {"document": DOC, "source": text_src, "license": "PSF License 2.0 (CPython standard library)",
                 "held_out": "yes: split by document in scripts/tiny_model/make_data.py, not in the training stream",
                 "prefix": "<|endoftext|> (id %d)" % eot},
        "shapes": {"tokens": P, "vocab": V, "logits_sel": [len(pos), V], "topk": list(topk.shape)},
        "reference_nll": nll,
        "reference_nll_note": "mean over t in [0, P-1) of -log softmax(logits[t])[token[t+1]], float64 from f32 logits",
        "checks": {
            "dense_sparse_boundary": "a query at position t attends to all t+1 tokens while t+1 <= index_topk + "
                                     "index_kpool - 1 = %d; beyond, it attends to %d pool tokens + the tail"
                                     % (width, cfg.index_topk),
            "pruned_query_positions": mf.count_pruned(topk, layers),
            "indexer_min_relative_margin": {str(k): v for k, v in probe.index_margin.items()},
            "indexer_exact_ties": {str(k): v for k, v in probe.index_ties.items()},
            "indexer_recompute_mismatched_rows": {str(k): v for k, v in probe.index_selfcheck.items()},
            "router_min_topk_margin": min(probe.router_margin) if probe.router_margin else None,
            "logits_std": float(logits.std()),
            "logits_max_abs": float(logits.abs().max()),
            "top1_top2_gap": {"min": float(gap.min()), "p01": float(np.quantile(gap, 0.01)),
                              "p05": float(np.quantile(gap, 0.05)), "median": float(np.median(gap)),
                              "below_0.05": int((gap < 0.05).sum()), "below_0.2": int((gap < 0.2).sum())},
            "distinct_argmax": int(len(set(logits.argmax(1).tolist()))),
            "argmax_equals_next_token": float((logits[:-1].argmax(1) == x[0, 1:]).float().mean()),
            "q8_weights_in_transformers": q8_check,
        },
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                     "tokenizers": tokenizers.__version__, "numpy": np.__version__,
                     "python": platform.python_version()},
    }
    meta["sha256"] = {fn: sha(o(fn)) for fn in files}
    with open(o("meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps({k: meta[k] for k in ("reference_nll", "checks", "shapes")}, indent=1))
    print("flipped positions, reference top1-top2 gap:", [(t, round(float(gap[t]), 4)) for t in flips])


if __name__ == "__main__":
    main()
