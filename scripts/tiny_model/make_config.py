#!/usr/bin/env python3
"""Write models/tiny/config.json: the architecture of the embedded tiny glm5_next model.

Why: a ~15M-parameter model with every feature of GLM-5.3-Flash (spec section 1) so the engine's whole forward
pass can be tested and demonstrated end to end: 8 trunk layers with mHC (hc_mult 4, 20 Sinkhorn iterations),
KDA on layers 0-2 and 4-6, MLA + DSA lightning indexer (index_kpool 4, index_topk 128, forced tail) on layers
3 and 7, dense SwiGLU FFN on layers 0-2 and MoE (8 routed experts top-2 + 1 shared, sigmoid/noaux_tc routing,
scaling 2.5) on layers 3-7, NoPE, untied embedding/head. index_topk 128 means any query that sees more than
128 + 3 tokens attends sparsely. The top level is Glm5NextForConditionalGeneration like the release; its
vision tower is a minimal stub (the engine ignores model.visual.*).
Vocabulary: 8128 BPE + 36 GLM special tokens (ids 8128..8163) padded to 8192 rows; pad = <|endoftext|> 8128;
eos list [<|endoftext|>, <|user|>, <|observation|>] = [8128, 8135, 8137], mirroring the release's
[154820, 154827, 154829].

Usage: python3 scripts/tiny_model/make_config.py [--out models/tiny] [--print-params]
"""
import argparse, json, os

BPE = 8128
SPECIAL = {"<|endoftext|>": 0, "<|user|>": 7, "<|observation|>": 9,
           "<|begin_of_image|>": 10, "<|end_of_image|>": 11, "<|begin_of_video|>": 12, "<|end_of_video|>": 13,
           "<|image|>": 34, "<|video|>": 35}
ID = {k: BPE + v for k, v in SPECIAL.items()}

TEXT = dict(
    model_type="glm5_next_text",
    vocab_size=8192,
    hidden_size=256,
    intermediate_size=768,
    moe_intermediate_size=192,
    num_hidden_layers=8,
    num_attention_heads=4,
    num_key_value_heads=4,
    n_shared_experts=1,
    n_routed_experts=8,
    num_experts_per_tok=2,
    routed_scaling_factor=2.5,
    n_group=1,
    topk_group=1,
    norm_topk_prob=True,
    kv_lora_rank=64,
    q_lora_rank=128,
    qk_rope_head_dim=0,
    qk_nope_head_dim=64,
    v_head_dim=64,
    hidden_act="silu",
    max_position_embeddings=1048576,
    initializer_range=0.02,
    rms_norm_eps=1e-5,
    pad_token_id=ID["<|endoftext|>"],
    eos_token_id=[ID["<|endoftext|>"], ID["<|user|>"], ID["<|observation|>"]],
    tie_word_embeddings=False,
    attention_bias=False,
    index_topk=128,
    index_head_dim=32,
    index_n_heads=4,
    index_kpool=4,
    index_kpool_always_select_tail=True,
    swiglu_limit=10.0,
    linear_head_dim=64,
    linear_num_heads=4,
    linear_conv_kernel_dim=4,
    linear_lower_bound=-5.0,
    hc_mult=4,
    hc_eps=1e-6,
    hc_sinkhorn_iters=20,
    mlp_layer_types=["dense"] * 3 + ["sparse"] * 5,
    indexer_types=["full"] * 8,
)

RELEASE_EXTRAS = dict(
    first_k_dense_replace=3, num_nextn_predict_layers=0, index_kpool_compress=True,
    index_share_for_mtp_iteration=True, mla_use_nope=True, scoring_func="sigmoid", topk_method="noaux_tc",
    moe_router_dtype="float32", mhc=True,
    linear_attn_config=dict(head_dim=TEXT["linear_head_dim"], num_heads=TEXT["linear_num_heads"],
                            short_conv_kernel_size=TEXT["linear_conv_kernel_dim"],
                            gate_lower_bound=TEXT["linear_lower_bound"], safe_gate=True),
)

VISION = dict(model_type="glm5_next_vision", depth=1, hidden_size=32, num_heads=2, intermediate_size=64,
              out_hidden_size=256, projection_intermediate_size=64, patch_size=14, spatial_merge_size=2,
              temporal_patch_size=2, image_size=336, in_channels=3)


def make_config():
    from transformers import Glm5NextConfig
    return Glm5NextConfig(
        text_config=dict(TEXT), vision_config=dict(VISION), tie_word_embeddings=False,
        image_token_id=ID["<|image|>"], video_token_id=ID["<|video|>"],
        image_start_token_id=ID["<|begin_of_image|>"], image_end_token_id=ID["<|end_of_image|>"],
        video_start_token_id=ID["<|begin_of_video|>"], video_end_token_id=ID["<|end_of_video|>"],
        pad_token_id=ID["<|endoftext|>"], eos_token_id=TEXT["eos_token_id"],
        architectures=["Glm5NextForConditionalGeneration"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="models/tiny")
    ap.add_argument("--print-params", action="store_true")
    a = ap.parse_args()
    cfg = make_config()
    os.makedirs(a.out, exist_ok=True)
    cfg.save_pretrained(a.out)
    # Release-style keys that HF does not model but converters/engines read (spec 1.1 "flags not present in
    # HF-C"); this model has no MTP block, hence num_nextn_predict_layers 0.
    path = os.path.join(a.out, "config.json")
    with open(path) as f:
        j = json.load(f)
    j["text_config"].update(RELEASE_EXTRAS)
    with open(path, "w") as f:
        json.dump(j, f, indent=2, sort_keys=True)
        f.write("\n")
    print("wrote", path)
    if a.print_params:
        import torch
        from transformers import Glm5NextForConditionalGeneration
        torch.manual_seed(0)
        m = Glm5NextForConditionalGeneration(cfg)
        tot = sum(p.numel() for p in m.parameters())
        vis = sum(p.numel() for n, p in m.named_parameters() if ".visual." in n)
        exp = sum(p.numel() for n, p in m.named_parameters() if ".experts." in n and "shared" not in n)
        act = tot - vis - exp + exp * TEXT["num_experts_per_tok"] // TEXT["n_routed_experts"]
        print(f"params total {tot:,}  text {tot - vis:,}  vision stub {vis:,}  routed experts {exp:,}  "
              f"active/token ~{act:,}")


if __name__ == "__main__":
    main()
