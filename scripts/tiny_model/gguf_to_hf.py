#!/usr/bin/env python3
"""Rebuild the tiny model's Hugging Face checkpoint (models/tiny/hf) from the shipped BF16 GGUF.

Why: the HF checkpoint is git-ignored (30 MB) and can be lost, while models/tiny/nf-tiny-bf16.gguf is committed. The
bf16 recipe stores every tensor in the dtype the checkpoint held or wider (matrices BF16, small tensors F32), so the
checkpoint can be recovered exactly: continued training (train.py --init / --init-gguf) and the transformers
references (eval_q8.py, make_tiny_reference.py) start from it.

This is the inverse of nf-convert's HF -> GGUF mapping (src/convert/convert.c). A ggml shape {c, b, a} is the
PyTorch shape [a, b, c], so plain tensors are renamed; the transforms undone are:
  ssm_conv1d_{q,k,v} {K, 1, inner}          -> self_attn.conv1d [3*inner, 1, K] (q, k, v rows concatenated)
  ssm_a = -exp(A_log)                        -> forget_gate.A_log: the float32 x with libm expf(x) == -ssm_a exactly
  attn_k_b {nope, kv, H}, attn_v_b {kv, v, H} -> kv_b_proj [H*(nope+v), kv]: per head the k rows (k_b transposed),
                                               then the v rows
  ffn_{gate,up}_exps {H, I, E}               -> mlp.experts.gate_up_proj [E, 2I, H] (gate rows, then up rows)
  ffn_down_exps {I, H, E}                    -> mlp.experts.down_proj [E, H, I]
The vision stub (0.2M parameters, dropped by the converter) is never trained (train.py freezes it), so it is the
initialisation of Glm5NextForConditionalGeneration under train.py's seed; the model is built that way and the text
tensors are loaded into it.

--save writes the checkpoint as train.py saves it (BF16, the KEEP_FP32 tensors in float32, 15 MB shards) plus the
tokenizer files; a value that the target dtype cannot hold exactly is an error (it would mean the GGUF is not a
bf16-recipe file of such a checkpoint). --check-sha compares every file's sha256 with tests/data/tiny/meta.json (the
shipped model's checkpoint; all eight files are byte-identical when run with transformers 5.24).

Usage: python3 scripts/tiny_model/gguf_to_hf.py [--gguf models/tiny/nf-tiny-bf16.gguf] --save models/tiny/hf
       [--config models/tiny] [--check-sha]
"""
import argparse
import ctypes
import ctypes.util
import hashlib
import json
import os
import shutil
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
GGML_F32, GGML_F16, GGML_BF16 = 0, 1, 30


def read_gguf(path):
    """Returns ({key: value}, {name: float32 numpy array in PyTorch order}) for F32/F16/BF16 tensors."""
    with open(path, "rb") as f:
        buf = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def string():
        nonlocal pos
        n = take("Q")
        s = buf[pos:pos + n].decode("utf-8")
        pos += n
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        if t not in scalar:
            raise ValueError("%s: unknown GGUF value type %d" % (path, t))
        return take(scalar[t])

    if buf[:4] != b"GGUF":
        raise ValueError("%s: not a GGUF file" % path)
    pos = 4
    version, n_tensors, n_kv = take("I"), take("Q"), take("Q")
    if version != 3:
        raise ValueError("%s: GGUF version %d (expected 3)" % (path, version))
    kv = {}
    for _ in range(n_kv):
        k = string()
        kv[k] = value(take("I"))
    infos = []
    for _ in range(n_tensors):
        name = string()
        nd = take("I")
        ne = [take("Q") for _ in range(nd)]
        infos.append((name, ne, take("I"), take("Q")))
    align = kv.get("general.alignment", 32)
    data0 = (pos + align - 1) // align * align
    tensors = {}
    for name, ne, ty, off in infos:
        n = int(np.prod(ne))
        shape = tuple(reversed(ne))
        start = data0 + off
        if ty == GGML_F32:
            a = np.frombuffer(buf, np.float32, n, start)
        elif ty == GGML_F16:
            a = np.frombuffer(buf, np.float16, n, start).astype(np.float32)
        elif ty == GGML_BF16:
            a = (np.frombuffer(buf, np.uint16, n, start).astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError("%s: tensor %s has type %d; only F32/F16/BF16 files (the bf16 recipe) can be turned back "
                             "into a checkpoint" % (path, name, ty))
        tensors[name] = a.reshape(shape).copy()
    return kv, tensors


def inverse_neg_exp(a):
    """A_log from ssm_a = -expf(A_log) (float32, glibc expf as nf-convert computes it). Returns (A_log, n_ambiguous):
    the float32 values x with expf(x) == -ssm_a exactly, and of those the one nearest to log(-ssm_a) in float64.
    Where A_log < 0, expf maps several neighbouring floats to one (up to ~1/|ssm_a| of them), so the original is one
    of them and the choice moves exp(A_log) by less than half an ulp of ssm_a: nothing a forward pass can see, but
    the saved bytes may differ from the original checkpoint's. If no float32 maps exactly (a libm whose expf rounds
    differently), the float32 nearest to log(-ssm_a) is taken, with a note: numerically the same model."""
    try:
        libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        libm.expf.restype, libm.expf.argtypes = ctypes.c_float, [ctypes.c_float]
        expf = libm.expf
    except (OSError, AttributeError):   # no loadable libm: exp in float64 rounded once (expf's result almost always)
        def expf(x):
            return np.float32(np.exp(np.float64(x)))
    out = np.empty_like(a)
    ambiguous = inexact = 0
    for i, v in enumerate(a.reshape(-1)):
        target = np.float32(-v)
        if not target > 0:
            raise ValueError("ssm_a value %r is not negative" % float(v))
        exact = np.log(np.float64(target))
        x0 = np.float32(exact)
        cands = []
        for direction in (-np.inf, np.inf):   # walk out from x0 both ways while expf still hits the target
            x = x0 if direction < 0 else np.nextafter(x0, np.float32(direction))
            for _ in range(1 << 12):
                hit = np.float32(expf(float(x))) == target
                if hit:
                    cands.append(x)
                elif cands or abs(float(x) - float(x0)) > 1e-3 * max(1.0, abs(float(x0))):
                    break
                x = np.nextafter(x, np.float32(direction))
        if not cands:
            inexact += 1
            cands = [x0]
        ambiguous += len(cands) > 1
        out.reshape(-1)[i] = min(cands, key=lambda c: abs(np.float64(c) - exact))
    if inexact:
        print("gguf_to_hf: note: %d ssm_a values are no expf of a float32 here; A_log = log(-ssm_a) rounded" % inexact,
              file=sys.stderr)
    return out, ambiguous


# GGUF suffix after "blk.N." -> HF name after "model.language_model.layers.N." (one-to-one copies)
COPY = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "hc_attn_fn.weight": "attn_hc.fn", "hc_attn_base.weight": "attn_hc.base", "hc_attn_scale.weight": "attn_hc.scale",
    "hc_ffn_fn.weight": "ffn_hc.fn", "hc_ffn_base.weight": "ffn_hc.base", "hc_ffn_scale.weight": "ffn_hc.scale",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "ssm_f_a.weight": "self_attn.forget_gate.f_a_proj.weight", "ssm_f_b.weight": "self_attn.forget_gate.f_b_proj.weight",
    "ssm_dt.bias": "self_attn.forget_gate.dt_bias", "ssm_beta.weight": "self_attn.b_proj.weight",
    "ssm_g_a.weight": "self_attn.g_a_proj.weight", "ssm_g_b.weight": "self_attn.g_b_proj.weight",
    "ssm_norm.weight": "self_attn.o_norm.weight", "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q_a.weight": "self_attn.q_a_proj.weight", "attn_q_a_norm.weight": "self_attn.q_a_layernorm.weight",
    "attn_q_b.weight": "self_attn.q_b_proj.weight", "attn_kv_a_mqa.weight": "self_attn.kv_a_proj_with_mqa.weight",
    "attn_kv_a_norm.weight": "self_attn.kv_a_layernorm.weight",
    "indexer.attn_q_b.weight": "self_attn.indexer.wq_b.weight", "indexer.attn_k.weight": "self_attn.indexer.wk.weight",
    "indexer.k_norm.weight": "self_attn.indexer.k_norm.weight", "indexer.k_norm.bias": "self_attn.indexer.k_norm.bias",
    "indexer.proj.weight": "self_attn.indexer.weights_proj.weight",
    "indexer_compressor_gate.weight": "self_attn.indexer.index_kpool_compress_gate",
    "indexer_compressor_ape.weight": "self_attn.indexer.index_kpool_compress_ape",
    "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "ffn_gate_inp.weight": "mlp.gate.weight", "exp_probs_b.bias": "mlp.gate.e_score_correction_bias",
    "ffn_gate_shexp.weight": "mlp.shared_experts.gate_proj.weight",
    "ffn_up_shexp.weight": "mlp.shared_experts.up_proj.weight",
    "ffn_down_shexp.weight": "mlp.shared_experts.down_proj.weight",
}
TOP = {"token_embd.weight": "model.language_model.embed_tokens.weight",
       "output_norm.weight": "model.language_model.norm.weight", "output.weight": "lm_head.weight"}


def text_state_dict(tensors, kv):
    """HF text-model tensors (float32 numpy, PyTorch shapes) from the GGUF tensors."""
    arch = kv.get("general.architecture")
    if arch != "glm5-next":
        raise ValueError("general.architecture is %r, expected glm5-next" % arch)
    nope = kv["glm5-next.attention.key_length_mla"]
    out, used, ambiguous = {}, set(), 0
    for g, h in TOP.items():
        out[h] = tensors[g]
        used.add(g)
    layers = sorted({int(n.split(".")[1]) for n in tensors if n.startswith("blk.")})
    for L in layers:
        pre, hp = "blk.%d." % L, "model.language_model.layers.%d." % L
        mine = {n[len(pre):]: a for n, a in tensors.items() if n.startswith(pre)}
        for sfx, a in mine.items():
            if sfx in COPY:
                out[hp + COPY[sfx]] = a
                used.add(pre + sfx)
        if "ssm_conv1d_q.weight" in mine:
            out[hp + "self_attn.conv1d.weight"] = np.concatenate(
                [mine["ssm_conv1d_%s.weight" % p] for p in "qkv"], axis=0)
            out[hp + "self_attn.forget_gate.A_log"], amb = inverse_neg_exp(mine["ssm_a"])
            ambiguous += amb
            used.update(pre + s for s in ("ssm_conv1d_q.weight", "ssm_conv1d_k.weight", "ssm_conv1d_v.weight", "ssm_a"))
        if "attn_k_b.weight" in mine:
            kb, vb = mine["attn_k_b.weight"], mine["attn_v_b.weight"]   # [H, kv, nope], [H, v, kv]
            H, kvr, dn = kb.shape
            if dn != nope:
                raise ValueError("%sattn_k_b: head dim %d != key_length_mla %d" % (pre, dn, nope))
            out[hp + "self_attn.kv_b_proj.weight"] = np.concatenate(
                [kb.transpose(0, 2, 1), vb], axis=1).reshape(-1, kvr)
            used.update((pre + "attn_k_b.weight", pre + "attn_v_b.weight"))
        if "ffn_gate_exps.weight" in mine:
            out[hp + "mlp.experts.gate_up_proj"] = np.concatenate(
                [mine["ffn_gate_exps.weight"], mine["ffn_up_exps.weight"]], axis=1)
            out[hp + "mlp.experts.down_proj"] = mine["ffn_down_exps.weight"]
            used.update(pre + s for s in ("ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"))
    left = sorted(set(tensors) - used)
    if left:
        raise ValueError("GGUF tensors with no HF counterpart known here: %s" % ", ".join(left[:8]))
    if ambiguous:
        print("gguf_to_hf: note: %d A_log values are one of several float32 values with the same expf (nearest to "
              "log(-ssm_a) taken)" % ambiguous, file=sys.stderr)
    return out


def build_model_from_gguf(gguf_path, config_dir, seed=1234):
    """(config, Glm5NextForConditionalGeneration in float32) with the GGUF's weights; the vision stub is the seeded
    initialisation train.py starts from."""
    import torch
    sys.path.insert(0, HERE)
    import train  # noqa: E402  (the same model construction as training)
    kv, tensors = read_gguf(gguf_path)
    sd = text_state_dict(tensors, kv)
    cfg, model = train.build_model(config_dir, False, seed)
    own = model.state_dict()
    missing = [k for k in own if k not in sd and ".visual." not in k]
    extra = [k for k in sd if k not in own]
    if missing or extra:
        raise ValueError("checkpoint/model mismatch: missing %s, unknown %s" % (missing[:8], extra[:8]))
    with torch.no_grad():
        for k, a in sd.items():
            if tuple(own[k].shape) != a.shape:
                raise ValueError("%s: GGUF gives shape %s, the model has %s" % (k, a.shape, tuple(own[k].shape)))
            own[k].copy_(torch.from_numpy(a))
    return cfg, model


def check_exact_dtypes(model, keep_fp32):
    """Every tensor that the checkpoint stores in BF16 must be BF16-exact (else the GGUF is no bf16-recipe copy)."""
    import torch
    bad = []
    for n, p in list(model.named_parameters()) + list(model.named_buffers()):
        if ".visual." in n or any(k in n for k in keep_fp32):
            continue
        if not torch.equal(p.data.to(torch.bfloat16).float(), p.data.float()):
            bad.append(n)
    if bad:
        raise ValueError("not representable in BF16 (the checkpoint's dtype): %s" % ", ".join(bad[:8]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", default="models/tiny/nf-tiny-bf16.gguf")
    ap.add_argument("--config", default="models/tiny", help="folder with config.json (and the tokenizer files)")
    ap.add_argument("--save", required=True, help="output folder of the HF checkpoint")
    ap.add_argument("--seed", type=int, default=1234, help="train.py's seed (the vision stub's initialisation)")
    ap.add_argument("--check-sha", action="store_true", help="compare every file's sha256 with tests/data/tiny/meta.json")
    a = ap.parse_args()
    sys.path.insert(0, HERE)
    import train
    _, model = build_model_from_gguf(a.gguf, a.config, a.seed)
    check_exact_dtypes(model, train.KEEP_FP32)
    train.save(model, a.save, None)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if os.path.exists(os.path.join(a.config, f)):
            shutil.copy(os.path.join(a.config, f), os.path.join(a.save, f))
    rc = 0
    if a.check_sha:
        meta = json.load(open(os.path.join(HERE, "..", "..", "tests", "data", "tiny", "meta.json")))
        for f, want in sorted(meta["model_sha256"].items()):
            p = os.path.join(a.save, f)
            got = hashlib.sha256(open(p, "rb").read()).hexdigest() if os.path.exists(p) else "(missing)"
            ok = got == want
            rc |= not ok
            print("%s %s %s" % ("same" if ok else "DIFFERENT", f, got))
    return rc


if __name__ == "__main__":
    sys.exit(main())
