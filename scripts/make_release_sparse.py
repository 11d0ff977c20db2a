#!/usr/bin/env python3
"""Write a header-only, release-shaped glm5_next FP8 checkpoint for `nf-convert --dry-run` (no torch needed).

The folder gets the released config.json (nested text_config, quantization_config fp8 128x128, the fields the
release carries, spec section 1) and 62 safetensors shards whose headers list every tensor of GLM-5.3-Flash under
its on-disk name (per-expert FP8 experts with weight_scale_inv, separate q/k/v_conv1d, hc_attn_fn ..., the MTP
layer 45 with eh_proj/enorm/hnorm/shared_head.norm) with the released shapes and dtypes. The data sections are
sparse holes (the files are ~19 MB on disk for 327 GB of declared data), so only planning commands can use it:
  python3 scripts/make_release_sparse.py /tmp/glm53 && build/nf-convert /tmp/glm53 --dry-run -r q4 [--mtp]
tests/py/test_convert.py uses it to check the release census (1383 trunk tensors + 29 NextN) and sizes.
Shapes are facts of the released architecture; names follow transformers' glm5_next checkpoint conversion.
"""
import json
import math
import os
import struct
import sys


def make(out, n_shards=62):
    os.makedirs(out, exist_ok=True)
    H=4096; V=154880; L=45; NH=64; QL=1536; KVL=512; NOPE=256; VD=256; E=288; I=2048; DI=12288
    KH=64; KD=128; INNER=KH*KD; IH=32; ID=128; KP=4
    tc = dict(model_type="glm5_next_text", vocab_size=V, hidden_size=H, intermediate_size=DI, moe_intermediate_size=I,
      num_hidden_layers=L, num_attention_heads=NH, num_key_value_heads=NH, n_shared_experts=1, n_routed_experts=E,
      num_experts_per_tok=8, routed_scaling_factor=2.5, kv_lora_rank=KVL, q_lora_rank=QL, qk_rope_head_dim=0,
      v_head_dim=VD, qk_nope_head_dim=NOPE, n_group=1, topk_group=1, norm_topk_prob=True, hidden_act="silu",
      max_position_embeddings=1048576, rms_norm_eps=1e-5, pad_token_id=154820, eos_token_id=[154820,154827,154829],
      first_k_dense_replace=3, num_nextn_predict_layers=1, index_topk=2048, index_head_dim=ID, index_n_heads=IH,
      index_kpool=KP, index_kpool_compress=True, index_kpool_always_select_tail=True, index_share_for_mtp_iteration=True,
      mla_use_nope=True, scoring_func="sigmoid", topk_method="noaux_tc", moe_router_dtype="float32",
      indexer_rope_interleave=True, swiglu_limit=10.0, hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, mhc=True,
      linear_attn_config=dict(head_dim=KD, num_heads=KH, short_conv_kernel_size=4, gate_lower_bound=-5.0),
      tie_word_embeddings=False, rope_theta=1000000)
    cfg = dict(architectures=["Glm5NextForConditionalGeneration"], model_type="glm5_next", text_config=tc,
      quantization_config=dict(activation_scheme="dynamic", fmt="e4m3", quant_method="fp8", weight_block_size=[128,128]),
      tie_word_embeddings=False)
    T = []  # (name, dtype, shape)
    def add(n, dt, shape): T.append((n, dt, shape))
    def fp8(n, shape):
        add(n, "F8_E4M3", shape); add(n + "_scale_inv", "F32", [math.ceil(shape[0]/128), math.ceil(shape[1]/128)])
    p = "model.language_model."
    add("lm_head.weight", "BF16", [V, H]); add(p+"embed_tokens.weight", "BF16", [V, H]); add(p+"norm.weight", "BF16", [H])
    def mla(l, s):
        fp8(s+"self_attn.q_a_proj.weight", [QL, H]); add(s+"self_attn.q_a_layernorm.weight", "BF16", [QL])
        fp8(s+"self_attn.q_b_proj.weight", [NH*NOPE, QL]); fp8(s+"self_attn.kv_a_proj_with_mqa.weight", [KVL, H])
        add(s+"self_attn.kv_a_layernorm.weight", "BF16", [KVL]); add(s+"self_attn.kv_b_proj.weight", "BF16", [NH*(NOPE+VD), KVL])
        fp8(s+"self_attn.o_proj.weight", [H, NH*VD])
        x = s+"self_attn.indexer."
        add(x+"wq_b.weight", "BF16", [IH*ID, QL]); add(x+"wk.weight", "BF16", [ID, H]); add(x+"k_norm.weight", "BF16", [ID])
        add(x+"k_norm.bias", "BF16", [ID]); add(x+"weights_proj.weight", "BF16", [IH, H])
        add(x+"index_kpool_compress_gate", "BF16", [ID, H]); add(x+"index_kpool_compress_ape", "BF16", [KP, ID])
    def moe(s):
        add(s+"mlp.gate.weight", "BF16", [E, H]); add(s+"mlp.gate.e_score_correction_bias", "F32", [E])
        for e in range(E):
            fp8(f"{s}mlp.experts.{e}.gate_proj.weight", [I, H]); fp8(f"{s}mlp.experts.{e}.up_proj.weight", [I, H])
            fp8(f"{s}mlp.experts.{e}.down_proj.weight", [H, I])
        for g in ("gate", "up"): fp8(f"{s}mlp.shared_experts.{g}_proj.weight", [I, H])
        fp8(s+"mlp.shared_experts.down_proj.weight", [H, I])
    for l in range(L+1):
        s = f"{p}layers.{l}."
        add(s+"input_layernorm.weight", "BF16", [H]); add(s+"post_attention_layernorm.weight", "BF16", [H])
        if l == L:
            mla(l, s); moe(s)
            add(s+"eh_proj.weight", "BF16", [H, 2*H]); add(s+"enorm.weight", "BF16", [H]); add(s+"hnorm.weight", "BF16", [H])
            add(s+"shared_head.norm.weight", "BF16", [H])
            continue
        for site in ("attn", "ffn"):
            add(f"{s}hc_{site}_fn", "BF16", [24, 4*H]); add(f"{s}hc_{site}_base", "F32", [24]); add(f"{s}hc_{site}_scale", "F32", [3])
        if l % 4 == 3: mla(l, s)
        else:
            a = s+"self_attn."
            for n in ("q", "k", "v"): add(f"{a}{n}_proj.weight", "BF16", [INNER, H]); add(f"{a}{n}_conv1d.weight", "F32", [INNER, 1, 4])
            add(a+"f_a_proj.weight", "BF16", [KD, H]); add(a+"f_b_proj.weight", "BF16", [INNER, KD])
            add(a+"dt_bias", "F32", [INNER]); add(a+"A_log", "F32", [KH]); add(a+"b_proj.weight", "BF16", [KH, H])
            add(a+"g_a_proj.weight", "BF16", [KD, H]); add(a+"g_b_proj.weight", "BF16", [INNER, KD])
            add(a+"o_norm.weight", "BF16", [KD]); add(a+"o_proj.weight", "BF16", [H, INNER])
        if l < 3:
            for g in ("gate", "up"): fp8(f"{s}mlp.{g}_proj.weight", [DI, H])
            fp8(s+"mlp.down_proj.weight", [H, DI])
        else: moe(s)
    SZ = {"BF16": 2, "F32": 4, "F8_E4M3": 1}
    NS = n_shards
    per = math.ceil(len(T) / NS)
    wm = {}; total = 0
    for k in range(NS):
        part = T[k*per:(k+1)*per]
        fn = f"model-{k+1:05d}-of-{NS:05d}.safetensors"
        hdr, off = {}, 0
        for n, dt, sh in part:
            b = math.prod(sh) * SZ[dt]; hdr[n] = dict(dtype=dt, shape=sh, data_offsets=[off, off+b]); off += b; wm[n] = fn
        h = json.dumps(hdr).encode()
        with open(os.path.join(out, fn), "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h); f.truncate(8 + len(h) + off)
        total += off
    json.dump(dict(metadata=dict(total_size=total), weight_map=wm), open(os.path.join(out, "model.safetensors.index.json"), "w"))
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)
    return len(T), total


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_release_sparse.py OUT_DIR")
    n, total = make(sys.argv[1])
    print(f"{n} tensors, {total / 1e9:.1f} GB declared (sparse)")
