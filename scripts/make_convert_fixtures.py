#!/usr/bin/env python3
"""Make the tiny Hugging Face glm5_next checkpoints that test nf-convert (tests/data/convert/).

Needs torch + transformers (run here, once); the outputs are committed so `make test` needs neither.

  bf16/   save_pretrained of a random-weight Glm5NextForConditionalGeneration in BF16 (fp32 kept for the modules
          HF keeps in fp32), sharded by save_pretrained into 2 files + model.safetensors.index.json, with a tiny
          GLM-style byte-level BPE tokenizer (tokenizer.json + tokenizer_config.json with a chat template).
          hidden 256 so routed gate/up rows take the K-quant/IQ types of the q4/q2 recipes. KDA 4 heads x 8
          (kda head count != MLA head count). On-disk (checkpoint) tensor names: per-expert experts, separate
          q/k/v_conv1d, f_a_proj/dt_bias/A_log directly under self_attn, hc_attn_fn ...
  fp8/    hand-made FP8 checkpoint like the official release: the MLA q_a/q_b/kv_a/o, dense, shared and routed
          (per-expert) weights stored F8_E4M3 with 128x128 block weight_scale_inv (F32) and the release's
          quantization_config; other matrices BF16, fp32-kept params F32. Dims make partial blocks on both axes
          (hidden 160, q_lora 144, intermediate 136, moe 72). Plus a few MTP-layer tensors (layer 3 =
          num_hidden_layers; must be skipped) and a vision tensor (ignored). No tokenizer.
  fused/  flat text-only config (model_type glm5_next_text) with transformers' *module* names: fused
          experts.gate_up_proj / down_proj, fused conv1d, forget_gate.*, attn_hc.* (what state_dict() gives),
          plus a complete MTP block as layer 2 (MLA + MoE + eh_proj/enorm/hnorm/shared_head.norm) for --mtp.
  semantic.json  values computed with the HF modules of bf16/ (MLA k/v expansion, experts, KDA gate) for a
          random input, so the tests can check that the GGUF tensors mean what HF's weights mean.

Usage: python3 scripts/make_convert_fixtures.py [--out tests/data/convert]
"""
import argparse
import json
import os
import shutil
import tempfile

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from transformers import Glm5NextConfig, Glm5NextForConditionalGeneration

KEEP_FP32 = ["e_score_correction_bias", "gate.weight", "conv1d", "dt_bias", "A_log",
             "attn_hc.base", "attn_hc.scale", "ffn_hc.base", "ffn_hc.scale",
             "hc_attn_base", "hc_attn_scale", "hc_ffn_base", "hc_ffn_scale"]
VISION = dict(depth=1, hidden_size=32, num_heads=2, intermediate_size=32, projection_intermediate_size=32, out_hidden_size=32,
              patch_size=2, temporal_patch_size=2, spatial_merge_size=2)


def keep_fp32(name):
    if ".visual." in name or name.startswith("visual."):
        return False
    if name.endswith("mlp.gate.weight"):
        return True
    return any(k in name for k in KEEP_FP32 if k != "gate.weight")


def randomize(model, seed):
    """Replace every parameter/buffer with random values so each transform is visible (HF init leaves A_log,
    hc base, ape, router bias at zero and norms at one)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in list(model.named_parameters()) + list(model.named_buffers()):
            if not p.is_floating_point():
                continue
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                r = 1.0 + 0.1 * r
            elif "A_log" in name:
                r = 0.5 * r
            else:
                r = 0.05 * r
            p.copy_(r.to(p.dtype))


def text_config(**kw):
    base = dict(qk_rope_head_dim=0, n_shared_experts=1, index_kpool=4, index_topk=8, max_position_embeddings=4096,
                rms_norm_eps=1e-5, routed_scaling_factor=2.5, swiglu_limit=10.0)
    base.update(kw)
    return base


def make_tokenizer(out_dir):
    """A tiny byte-level BPE with the GLM split regex and some GLM special tokens after the learned vocabulary."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    split = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    bpe = 300
    trainer = trainers.BpeTrainer(vocab_size=bpe, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    text = ["The quick brown fox jumps over the lazy dog. " * 3,
            "def convert(x):\n    return x + 1  # the the the\n",
            "Hello world, hello tensors, hello GGUF files and safetensors shards."] * 4
    tok.train_from_iterator(text, trainer=trainer)
    assert tok.get_vocab_size() == bpe, tok.get_vocab_size()
    specials = ["<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
                "<|assistant|>", "<|observation|>"]
    for t in specials:
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False)])
    tok.add_tokens([AddedToken("<think>", normalized=False), AddedToken("</think>", normalized=False)])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                 clean_up_tokenization_spaces=False)
    hf.chat_template = ("[gMASK]<sop>{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
                        "{% if add_generation_prompt %}<|assistant|><think>{% endif %}")
    hf.save_pretrained(out_dir)
    for extra in ("special_tokens_map.json",):
        p = os.path.join(out_dir, extra)
        if os.path.exists(p):
            os.remove(p)
    ids = {t: tok.token_to_id(t) for t in specials + ["<think>", "</think>"]}
    return tok.get_vocab_size(), ids


def cast_state(sd):
    return {k: (v.float() if keep_fp32(k) else v.to(torch.bfloat16)).contiguous() for k, v in sd.items()}


def load_dir(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(d, f), "pt") as s:
                for k in s.keys():
                    out[k] = s.get_tensor(k)
    return out


def fp8_quant(w, block=128):
    """128x128 block FP8 E4M3: scale = amax/448 per block; returns (fp8 tensor, f32 scale_inv)."""
    w = w.float()
    r, c = w.shape
    br, bc = (r + block - 1) // block, (c + block - 1) // block
    scale = torch.empty(br, bc, dtype=torch.float32)
    q = torch.empty(r, c, dtype=torch.float8_e4m3fn)
    for i in range(br):
        for j in range(bc):
            blk = w[i * block:(i + 1) * block, j * block:(j + 1) * block]
            s = blk.abs().max().clamp(min=1e-12) / 448.0
            scale[i, j] = s
            q[i * block:(i + 1) * block, j * block:(j + 1) * block] = (blk / s).to(torch.float8_e4m3fn)
    return q, scale


FP8_PARTS = ["self_attn.q_a_proj.weight", "self_attn.q_b_proj.weight", "self_attn.kv_a_proj_with_mqa.weight",
             "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
             "mlp.shared_experts.gate_proj.weight", "mlp.shared_experts.up_proj.weight",
             "mlp.shared_experts.down_proj.weight"]


def is_fp8_target(name, mla_layers):
    if not name.startswith("model.language_model.layers."):
        return False
    layer = int(name.split(".")[3])
    rest = name.split(".", 4)[4]
    if rest in FP8_PARTS:
        return True
    if ".mlp.experts." in name and name.endswith("_proj.weight"):
        return True
    return rest == "self_attn.o_proj.weight" and layer in mla_layers


def build_bf16(out, seed):
    d = os.path.join(out, "bf16")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    n_tok, ids = make_tokenizer(d)
    vocab = (n_tok + 15) // 16 * 16
    tc = text_config(vocab_size=vocab, hidden_size=256, intermediate_size=64, moe_intermediate_size=32,
                     num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, n_routed_experts=4,
                     num_experts_per_tok=2, kv_lora_rank=32, q_lora_rank=32, v_head_dim=16, qk_nope_head_dim=16,
                     index_head_dim=16, index_n_heads=2,
                     layer_types=["linear_attention", "indexed_attention"], mlp_layer_types=["dense", "sparse"],
                     linear_attn_config=dict(head_dim=8, num_heads=4, short_conv_kernel_size=4,
                                             gate_lower_bound=-5.0),
                     pad_token_id=ids["<|endoftext|>"],
                     eos_token_id=[ids["<|endoftext|>"], ids["<|user|>"], ids["<|observation|>"]])
    cfg = Glm5NextConfig(text_config=tc, vision_config=VISION)
    torch.manual_seed(seed)
    m = Glm5NextForConditionalGeneration(cfg).eval()
    randomize(m, seed)
    # BF16 storage, fp32 for the modules HF keeps in fp32.
    with torch.no_grad():
        for name, p in m.named_parameters():
            if not keep_fp32(name):
                p.data = p.data.to(torch.bfloat16)
    total = sum(p.numel() * p.element_size() for p in m.parameters())
    m.save_pretrained(d, max_shard_size=int(total * 0.6))
    idx = os.path.join(d, "model.safetensors.index.json")
    assert os.path.exists(idx), "expected a sharded save"
    shards = set(json.load(open(idx))["weight_map"].values())
    assert len(shards) == 2, shards
    return m, cfg


def semantic(m, out, seed):
    """HF-computed values the tests compare against the converted tensors (float32 math on the stored weights)."""
    g = torch.Generator().manual_seed(seed + 7)
    tcfg = m.config.text_config
    lm = m.model.language_model
    res = {}
    with torch.no_grad():
        mla = lm.layers[1].self_attn
        c = torch.randn(1, 1, 1, tcfg.kv_lora_rank, generator=g)
        q = torch.randn(tcfg.num_attention_heads, tcfg.qk_nope_head_dim, generator=g)
        saved = mla.kv_b_proj.weight.data
        mla.kv_b_proj.weight.data = saved.float()
        k_nope, v = mla.expand_kv(c, torch.zeros(1, 1, 1, 0))
        mla.kv_b_proj.weight.data = saved
        k_nope, v = k_nope[0, :, 0, :], v[0, :, 0, :]                 # [heads, nope], [heads, v]
        res["mla"] = dict(layer=1, latent=c.flatten().tolist(), q=q.tolist(),
                          scores=(q * k_nope).sum(-1).tolist(), values=v.tolist())
        moe = lm.layers[1].mlp
        x = torch.randn(tcfg.hidden_size, generator=g)
        ex = moe.experts
        outs = []
        for e in range(tcfg.n_routed_experts):
            gu = ex.gate_up_proj[e].float() @ x
            gate, up = gu.chunk(2)
            outs.append((ex.down_proj[e].float() @ (torch.nn.functional.silu(gate) * up)).tolist())
        res["experts"] = dict(layer=1, x=x.tolist(), y=outs)
        kda = lm.layers[0].self_attn
        fg = kda.forget_gate
        xk = torch.randn(1, 1, tcfg.hidden_size, generator=g)
        fa, fb = fg.f_a_proj.weight.data, fg.f_b_proj.weight.data
        fg.f_a_proj.weight.data, fg.f_b_proj.weight.data = fa.float(), fb.float()
        gate = fg(xk)                                                 # [1,1,heads,head_dim]
        fg.f_a_proj.weight.data, fg.f_b_proj.weight.data = fa, fb
        res["kda_gate"] = dict(layer=0, x=xk.flatten().tolist(), g=gate.flatten().tolist(),
                               lower_bound=tcfg.linear_lower_bound)
        conv = kda.conv1d.weight.float()                              # [3*inner, 1, K]
        res["kda_conv"] = dict(layer=0, weight=conv[:, 0, :].tolist())
    with open(os.path.join(out, "semantic.json"), "w") as f:
        json.dump(res, f)


def build_fp8(out, seed):
    d = os.path.join(out, "fp8")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    tc = text_config(vocab_size=96, hidden_size=160, intermediate_size=136, moe_intermediate_size=72,
                     num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=2, n_routed_experts=4,
                     num_experts_per_tok=2, kv_lora_rank=64, q_lora_rank=144, v_head_dim=32, qk_nope_head_dim=32,
                     index_head_dim=16, index_n_heads=2,
                     layer_types=["linear_attention", "indexed_attention", "linear_attention"],
                     mlp_layer_types=["dense", "sparse", "sparse"],
                     linear_attn_config=dict(head_dim=16, num_heads=2, short_conv_kernel_size=4,
                                             gate_lower_bound=-5.0),
                     pad_token_id=0, eos_token_id=1, bos_token_id=2)
    cfg = Glm5NextConfig(text_config=tc, vision_config=VISION)
    torch.manual_seed(seed)
    m = Glm5NextForConditionalGeneration(cfg).eval()
    randomize(m, seed)
    with tempfile.TemporaryDirectory() as tmp:
        m.save_pretrained(tmp)          # on-disk checkpoint names (per-expert, q/k/v_conv1d, ...)
        sd = load_dir(tmp)
        conf = json.load(open(os.path.join(tmp, "config.json")))
    mla_layers = {i for i, t in enumerate(tc["layer_types"]) if t != "linear_attention"}
    tensors = {}
    for k, v in sd.items():
        if k.startswith("model.visual.") and k != "model.visual.patch_embed.proj.weight":
            continue                    # keep one vision tensor only (size)
        if is_fp8_target(k, mla_layers):
            q, s = fp8_quant(v)
            tensors[k] = q
            tensors[k + "_scale_inv"] = s
        else:
            tensors[k] = v.float() if keep_fp32(k) else v.to(torch.bfloat16)
    # MTP layer (index num_hidden_layers): a few tensors in the release's style; the converter must skip them.
    g = torch.Generator().manual_seed(seed + 1)
    L = tc["num_hidden_layers"]
    for nm in ("enorm.weight", "hnorm.weight", "shared_head.norm.weight", "input_layernorm.weight"):
        tensors[f"model.language_model.layers.{L}.{nm}"] = torch.ones(160, dtype=torch.bfloat16)
    q, s = fp8_quant(0.05 * torch.randn(72, 160, generator=g))
    tensors[f"model.language_model.layers.{L}.mlp.experts.0.gate_proj.weight"] = q
    tensors[f"model.language_model.layers.{L}.mlp.experts.0.gate_proj.weight_scale_inv"] = s
    tensors = {k: v.contiguous() for k, v in tensors.items()}
    save_file(tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    conf["text_config"]["num_nextn_predict_layers"] = 1
    conf["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                   "weight_block_size": [128, 128],
                                   "modules_to_not_convert": ["lm_head", "model.visual"]}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(conf, f, indent=2)


def build_fused(out, seed):
    d = os.path.join(out, "fused")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    tc = text_config(vocab_size=64, hidden_size=64, intermediate_size=48, moe_intermediate_size=16,
                     num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, n_routed_experts=4,
                     num_experts_per_tok=2, kv_lora_rank=32, q_lora_rank=32, v_head_dim=16, qk_nope_head_dim=16,
                     index_head_dim=16, index_n_heads=2,
                     layer_types=["linear_attention", "indexed_attention"], mlp_layer_types=["sparse", "sparse"],
                     linear_attn_config=dict(head_dim=16, num_heads=2, short_conv_kernel_size=4,
                                             gate_lower_bound=-5.0),
                     pad_token_id=0, eos_token_id=1)
    cfg = Glm5NextConfig(text_config=tc, vision_config=VISION)
    torch.manual_seed(seed)
    m = Glm5NextForConditionalGeneration(cfg).eval()
    randomize(m, seed)
    sd = {k: v for k, v in m.state_dict().items() if not k.startswith("model.visual.")}
    # A complete MTP block as layer 2 (= num_hidden_layers): layer 1's MLA + MoE tensors (no hc) + the nextn ones.
    g = torch.Generator().manual_seed(seed + 1)
    for k, v in list(sd.items()):
        if k.startswith("model.language_model.layers.1.") and "_hc." not in k:
            sd[k.replace("layers.1.", "layers.2.", 1)] = v + 0.01 * torch.randn(v.shape, generator=g)
    E = tc["hidden_size"]
    sd["model.language_model.layers.2.eh_proj.weight"] = 0.05 * torch.randn(E, 2 * E, generator=g)
    for nm in ("enorm.weight", "hnorm.weight", "shared_head.norm.weight"):
        sd[f"model.language_model.layers.2.{nm}"] = 1.0 + 0.1 * torch.randn(E, generator=g)
    sd = cast_state(sd)
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    flat = dict(cfg.text_config.to_dict())
    flat.pop("linear_attn_config", None)
    flat["model_type"] = "glm5_next_text"
    flat["num_nextn_predict_layers"] = 1
    flat["architectures"] = ["Glm5NextForConditionalGeneration"]
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(flat, f, indent=2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/convert")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    m, _ = build_bf16(a.out, 11)
    semantic(m, a.out, 11)
    build_fp8(a.out, 12)
    build_fused(a.out, 13)
    total = 0
    for root, _, files in os.walk(a.out):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    print(f"wrote {a.out}: {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
