#!/usr/bin/env python3
"""Train the embedded tiny glm5_next model (models/tiny) with transformers' pure-PyTorch implementation.

Why this script exists: transformers runs the DSA lightning indexer under no_grad, so the language-model loss
never trains it. Here each MLA layer's indexer gets an auxiliary loss as in DeepSeek-V3.2's indexer training:
KL(target || softmax(indexer pool scores)), where the target is the main attention's probability mass (dense,
causal, summed over heads, L1-normalised) summed per k-pool over the candidate pools. The indexer scores are
recomputed with gradients from the module's own weights (wq_b, wk, k_norm, weights_proj, the k-pool
compression gate and ape) on detached inputs captured by a forward pre-hook. The first --dense-frac of the
run is a dense warm-up (every pool selected, i.e. the indexer's top-k temporarily equals the context length);
after that the model trains with the sparse selection it will use at inference (index_topk 128 of 512).
MoE routing uses noaux_tc, so expert balance comes from the selection bias e_score_correction_bias, updated
after every step by bias += u * sign(mean_load - load) (DeepSeek-V3's auxiliary-loss-free balancing).

Continued training: --init DIR (an HF checkpoint, e.g. a previous run's $OUT/hf) or --init-gguf FILE (a bf16-recipe
GGUF such as models/tiny/nf-tiny-bf16.gguf, turned back into the same model by gguf_to_hf.py, so no checkpoint has to
travel to the GPU machine) starts from trained weights, e_score_correction_bias included. The optimizer state is not
saved, so AdamW starts afresh. The defaults then change: no dense indexer warm-up (--dense-frac 0: the indexer is
trained and the model already runs sparse), a short warm-up (20 steps, letting AdamW's moment estimates settle
before large steps; beta2 0.95 averages over ~20 steps) to a peak of 1e-3, then cosine to 1e-4. Why that schedule:
the first run ended at 2e-4 with the held-out loss still falling fast (3.44 -> 3.35 over its last 4.3M tokens), so
the model needs a learning rate well above where it stopped to keep improving, but re-warming to the full 2e-3 of a
from-scratch run would first undo part of what was learnt (the loss spike of re-warmed continual pre-training);
half the original peak, annealed to below where the first run ended, is the usual compromise. The data order uses
seed 1235 by default (1234 would replay the first run's batches); the total then reaches ~4 epochs of the 12.8M-token
corpus, which data-constrained scaling results find about as useful as fresh data (watch the held-out loss).

Logs (one JSON object per line) go to --log; the checkpoint is written with save_pretrained to --save
(BF16, with the modules transformers keeps in float32 left in float32, shards of at most 15 MB).

Usage (GPU):   python3 scripts/tiny_model/train.py --config models/tiny --data .tinydata --save $OUT/hf \
                   --log $OUT/train_log.jsonl --time-limit 520
Usage (GPU, continuing the shipped model): ... train.py --init-gguf models/tiny/nf-tiny-bf16.gguf --batch 128 ...
Usage (CPU smoke test, seconds): python3 scripts/tiny_model/train.py --smoke
"""
import argparse, json, math, os, sys, time
import numpy as np
import torch
import torch.nn.functional as F

T0 = time.time()
KEEP_FP32 = ("e_score_correction_bias", "gate.weight", "conv1d", "dt_bias", "A_log",
             "attn_hc.base", "attn_hc.scale", "ffn_hc.base", "ffn_hc.scale")


def log(fh, **kw):
    kw["t"] = round(time.time() - T0, 2)
    line = json.dumps(kw)
    print(line, flush=True)
    if fh:
        fh.write(line + "\n")
        fh.flush()


def file_sha256(path):
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def init_source(a):
    """What the weights start from, for the "start" log event."""
    if a.init_gguf:
        return {"kind": "gguf", "path": a.init_gguf, "sha256": file_sha256(a.init_gguf)}
    if a.init:
        shards = sorted(f for f in os.listdir(a.init) if f.endswith(".safetensors"))
        return {"kind": "hf", "path": a.init, "sha256": {f: file_sha256(os.path.join(a.init, f)) for f in shards}}
    return {"kind": "scratch", "seed": a.seed}


def load_model(a):
    """(config, model) from --init / --init-gguf, or freshly initialised."""
    if a.init_gguf:
        sys.modules.setdefault("train", sys.modules[__name__])   # gguf_to_hf builds the model with this module
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import gguf_to_hf
        cfg, model = gguf_to_hf.build_model_from_gguf(a.init_gguf, a.config)
    elif a.init:
        from transformers import Glm5NextForConditionalGeneration
        model = Glm5NextForConditionalGeneration.from_pretrained(a.init, dtype=torch.float32,
                                                                 attn_implementation="sdpa")
        cfg = model.config
        for n, b in model.named_buffers():   # from_pretrained must not have left the selection bias at its init
            if n.endswith("e_score_correction_bias") and not b.abs().sum() > 0:
                raise SystemExit("train: --init %s: %s is all zero (not in the checkpoint?)" % (a.init, n))
    else:
        return build_model(a.config, a.smoke, a.seed)
    if a.smoke:
        raise SystemExit("train: --smoke builds its own small model; use --max-steps/--batch with --init instead")
    cfg._attn_implementation = "sdpa"
    cfg.text_config._attn_implementation = "sdpa"
    return cfg, model


def build_model(config_dir, smoke, seed):
    from transformers import AutoConfig, Glm5NextForConditionalGeneration
    cfg = AutoConfig.from_pretrained(config_dir)
    if smoke:  # very small variant of the same architecture, for a CPU check of the whole script
        t = cfg.text_config
        t.hidden_size, t.intermediate_size, t.moe_intermediate_size = 64, 128, 32
        t.q_lora_rank, t.kv_lora_rank, t.qk_nope_head_dim, t.v_head_dim = 32, 16, 16, 16
        t.linear_head_dim, t.linear_num_heads, t.index_head_dim, t.index_n_heads = 16, 2, 8, 2
        t.n_routed_experts, t.index_topk = 4, 16
        if isinstance(getattr(t, "linear_attn_config", None), dict):  # keep the release-style copy consistent
            t.linear_attn_config = dict(t.linear_attn_config, head_dim=16, num_heads=2)
        cfg.vision_config.out_hidden_size = 64
    cfg._attn_implementation = "sdpa"
    cfg.text_config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = Glm5NextForConditionalGeneration(cfg)
    return cfg, model


class Hooks:
    """Captures indexer inputs (for the aux loss) and routed-expert loads (for the bias update)."""

    def __init__(self, model):
        self.lm = model.model.language_model
        self.mla, self.moe = [], []
        self.captured = {}
        self.loads = {}
        for i, layer in enumerate(self.lm.layers):
            att = layer.self_attn
            if getattr(att, "indexer", None) is not None:
                self.mla.append(i)
                att.indexer.register_forward_pre_hook(self._cap(i), with_kwargs=True)
            if hasattr(layer.mlp, "gate") and hasattr(layer.mlp.gate, "e_score_correction_bias"):
                self.moe.append(i)
                layer.mlp.gate.register_forward_hook(self._load(i))

    def _cap(self, i):
        def hook(mod, args, kwargs):
            self.captured[i] = (kwargs["hidden_states"].detach(), kwargs["q_resid"].detach())
        return hook

    def _load(self, i):
        def hook(mod, args, out):
            idx = out[2].reshape(-1)
            self.loads[i] = torch.bincount(idx, minlength=mod.num_experts).float()
        return hook

    def set_topk(self, k):
        for i in self.mla:
            self.lm.layers[i].self_attn.indexer.index_topk = k

    @torch.no_grad()
    def update_bias(self, u):
        out = []
        for i in self.moe:
            c = self.loads.get(i)
            if c is None:
                continue
            gate = self.lm.layers[i].mlp.gate
            gate.e_score_correction_bias += u * torch.sign(c.mean() - c)
            out.append((c.max() / c.mean().clamp_min(1e-9)).item())
        return out  # max/mean load per MoE layer

    def aux_loss(self, topk):
        """Returns (sum of per-layer KL, per-layer KL list, per-layer coverage of dense attention mass)."""
        total, kls, covs = 0.0, [], []
        for i in self.mla:
            att = self.lm.layers[i].self_attn
            ix = att.indexer
            x, qr = self.captured[i]
            B, S, _ = x.shape
            kp, nh, hd = ix.index_kpool, ix.n_heads, ix.head_dim
            P = S // kp
            dev = x.device
            tpos = torch.arange(S, device=dev)
            pend = torch.arange(P, device=dev) * kp + kp - 1
            cand = pend[None, :] <= tpos[:, None]                      # [S, P] pool complete and visible
            # target: dense causal attention mass of the main MLA attention per pool (no grad)
            with torch.no_grad():
                qm = att.q_b_proj(qr).view(B, S, -1, att.qk_head_dim).transpose(1, 2)
                ckv = att.kv_a_proj_with_mqa(x)[..., : att.kv_lora_rank]
                kvb = att.kv_b_proj(att.kv_a_layernorm(ckv)).view(B, S, -1, att.qk_nope_head_dim + att.v_head_dim)
                km = kvb[..., : att.qk_nope_head_dim].transpose(1, 2)
                s = torch.matmul(qm.float(), km.float().transpose(-1, -2)) * att.scaling
                s = s.masked_fill(~(tpos[None, :] <= tpos[:, None]), float("-inf"))
                p = s.softmax(-1).sum(1)                               # [B, S, S] summed over heads
                pm = p[..., : P * kp].reshape(B, S, P, kp).sum(-1)      # [B, S, P]
                pm = pm.masked_fill(~cand, 0.0)
                tgt = pm / pm.sum(-1, keepdim=True).clamp_min(1e-12)
            # indexer scores with gradients, exactly as Glm5NextTextIndexer (unpadded, no cache)
            q = ix.wq_b(qr).view(B, S, nh, hd).float()
            k = ix.k_norm(ix.wk(x))[:, : P * kp].reshape(B, P, kp, hd).float()
            g = F.linear(x, ix.index_kpool_compress_gate)[:, : P * kp].reshape(B, P, kp, hd).float()
            w = (g + ix.index_kpool_compress_ape.float()[None, None]).softmax(dim=2)
            pool = (w * k).sum(2)                                       # [B, P, hd]
            sc = F.relu(torch.einsum("bshd,bpd->bshp", q, pool) * ix.softmax_scale)
            hw = ix.weights_proj(x).float() * nh ** -0.5                # [B, S, nh]
            iscore = torch.einsum("bsh,bshp->bsp", hw, sc)              # [B, S, P]
            logq = iscore.masked_fill(~cand, float("-inf")).log_softmax(-1)
            logq = logq.masked_fill(~cand, 0.0)
            rows = cand.any(-1)                                          # queries with >= 1 candidate pool
            kl = (torch.xlogy(tgt, tgt) - tgt * logq).sum(-1)            # [B, S]
            kl = kl[:, rows].mean()
            total = total + kl
            kls.append(kl.item())
            with torch.no_grad():  # recall: dense attention mass inside the pools the indexer selects
                sel = topk // kp
                far = tpos >= (sel + 1) * kp                             # queries in the sparse regime
                if far.any():
                    top = iscore.detach().masked_fill(~cand, float("-inf")).topk(sel, dim=-1).indices
                    cov = tgt.gather(-1, top).sum(-1)[:, far].mean().item()
                else:
                    cov = float("nan")
                covs.append(cov)
        return total, kls, covs


def get_batch(stream, B, S, gen, device):
    n = stream.numel() - S - 1
    off = torch.randint(0, n, (B,), generator=gen)
    idx = off[:, None] + torch.arange(S + 1)[None, :]
    w = stream[idx].to(device, non_blocking=True).long()
    return w[:, :-1], w[:, 1:]


def lm_loss(model, x, y, amp):
    lm = model.model.language_model
    with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16, enabled=amp):
        h = lm(input_ids=x).last_hidden_state
        logits = model.lm_head(h)
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))


@torch.no_grad()
def evaluate(model, stream, S, B, max_windows, device, amp):
    model.eval()
    nwin = min((stream.numel() - 1) // S, max_windows)
    tot, cnt = 0.0, 0
    for i in range(0, nwin, B):
        j = min(nwin, i + B)
        idx = torch.arange(i, j)[:, None] * S + torch.arange(S + 1)[None, :]
        w = stream[idx].to(device).long()
        loss = lm_loss(model, w[:, :-1], w[:, 1:], amp)
        tot += loss.item() * (j - i)
        cnt += j - i
    model.train()
    return tot / max(cnt, 1)


def save(model, path, fh):
    import copy
    m = copy.deepcopy(model).to("cpu")
    m = m.to(torch.bfloat16)
    for n, p in list(m.named_parameters()) + list(m.named_buffers()):
        if any(k in n for k in KEEP_FP32):
            p.data = p.data.float()
    m.save_pretrained(path, max_shard_size="15MB")
    log(fh, event="saved", path=path, files=sorted(os.listdir(path)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="models/tiny")
    ap.add_argument("--data", default=".tinydata")
    ap.add_argument("--save", default=None)
    ap.add_argument("--log", default=None)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=str, default="auto", help="batch size, or 'auto' (throughput probe)")
    ap.add_argument("--probe", type=str, default="32,64,128")
    ap.add_argument("--init", default=None, help="start from this HF checkpoint folder")
    ap.add_argument("--init-gguf", default=None, help="start from this bf16-recipe GGUF (gguf_to_hf.py)")
    ap.add_argument("--lr", type=float, default=None, help="peak lr (default 2e-3; 1e-3 with --init/--init-gguf)")
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=None, help="warm-up steps (default 100; 20 with --init*)")
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--time-limit", type=float, default=520.0, help="seconds from start, then save and stop")
    ap.add_argument("--max-steps", type=int, default=10 ** 9)
    ap.add_argument("--dense-frac", type=float, default=None,
                    help="dense indexer warm-up share of the run (default 0.15; 0 with --init*)")
    ap.add_argument("--bias-u", type=float, default=1e-3)
    ap.add_argument("--eval-every", type=float, default=75.0, help="seconds")
    ap.add_argument("--amp", action="store_true", help="bf16 autocast (default: fp32 with TF32 matmuls)")
    ap.add_argument("--seed", type=int, default=None, help="default 1234; 1235 with --init*")
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    if a.init and a.init_gguf:
        ap.error("--init and --init-gguf exclude each other")
    resume = bool(a.init or a.init_gguf)
    for k, fresh, cont in (("lr", 2e-3, 1e-3), ("warmup", 100, 20), ("dense_frac", 0.15, 0.0), ("seed", 1234, 1235)):
        if getattr(a, k) is None:
            setattr(a, k, cont if resume else fresh)
    if a.smoke:
        a.seq, a.batch, a.max_steps, a.warmup, a.eval_every = 64, "2", 6, 2, 1e9
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    if a.log and os.path.dirname(a.log):
        os.makedirs(os.path.dirname(a.log), exist_ok=True)
    fh = open(a.log, "w") if a.log else None
    import transformers
    log(fh, event="start", torch=torch.__version__, transformers=transformers.__version__, device=device,
        gpu=torch.cuda.get_device_name(0) if device == "cuda" else None, init=init_source(a), args=vars(a))

    cfg, model = load_model(a)
    model.to(device).train()
    tc = cfg.text_config
    nparams = sum(p.numel() for p in model.parameters())
    ntext = sum(p.numel() for n, p in model.named_parameters() if ".visual." not in n)
    hooks = Hooks(model)
    train = torch.from_numpy(np.load(os.path.join(a.data, "train.npy")).astype(np.int32))
    held = torch.from_numpy(np.load(os.path.join(a.data, "heldout.npy")).astype(np.int32))
    if a.smoke:
        train, held = train[:200000], held[:5000]
    log(fh, event="model", params=nparams, text_params=ntext, mla_layers=hooks.mla, moe_layers=hooks.moe,
        train_tokens=train.numel(), heldout_tokens=held.numel())

    decay, no_decay = [], []
    for n, p in model.named_parameters():
        if ".visual." in n:
            p.requires_grad_(False)
            continue
        (decay if p.ndim >= 2 and "hc." not in n.split(".")[-2] + "." else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=(device == "cuda"))
    gen = torch.Generator().manual_seed(a.seed)
    S = a.seq
    topk_sparse = tc.index_topk

    def step_fn(B, lr, dense):
        hooks.set_topk(S if dense else topk_sparse)
        for gparam in opt.param_groups:
            gparam["lr"] = lr
        x, y = get_batch(train, B, S, gen, device)
        loss = lm_loss(model, x, y, a.amp)
        aux, kls, covs = hooks.aux_loss(topk_sparse)
        opt.zero_grad(set_to_none=True)
        (loss + aux).backward()
        gn = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        opt.step()
        loads = hooks.update_bias(a.bias_u)
        return loss.item(), kls, covs, gn.item(), loads

    # batch-size probe (dense mode, tiny lr): pick the best tokens/s
    if a.batch == "auto" and device == "cuda":
        best = None
        for B in [int(v) for v in a.probe.split(",")]:
            try:
                step_fn(B, 1e-6, True)
                torch.cuda.synchronize()
                t1 = time.time()
                for _ in range(2):
                    step_fn(B, 1e-6, True)
                torch.cuda.synchronize()
                tps = 2 * B * S / (time.time() - t1)
                log(fh, event="probe", batch=B, tok_per_s=round(tps), mem_gb=round(torch.cuda.max_memory_allocated() / 2**30, 1))
                steps_proj = (a.time_limit - 80.0) / (B * S / tps)  # keep >= ~300 optimizer steps
                if best is None or (tps > best[1] * 1.05 and steps_proj >= 300):
                    best = (B, tps)
            except torch.OutOfMemoryError:
                log(fh, event="probe_oom", batch=B)
                break
        B = best[0]
        # restart from a fresh model so the probe's steps do not count
        cfg, model = load_model(a)
        model.to(device).train()
        hooks = Hooks(model)
        decay, no_decay = [], []
        for n, p in model.named_parameters():
            if ".visual." in n:
                p.requires_grad_(False)
                continue
            (decay if p.ndim >= 2 and "hc." not in n.split(".")[-2] + "." else no_decay).append(p)
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd}, {"params": no_decay, "weight_decay": 0.0}],
                                lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    else:
        B = int(a.batch) if a.batch != "auto" else 4
    log(fh, event="batch", batch=B, seq=S, tokens_per_step=B * S)

    t_start = time.time()
    budget = a.time_limit - (t_start - T0) - 25.0  # leave time for the final eval and the save
    step, tokens, last_eval = 0, 0, t_start
    if resume:  # the starting point's held-out loss: shows the weights were loaded (and the baseline)
        hooks.set_topk(topk_sparse)
        log(fh, event="eval", step=0, heldout_loss=round(evaluate(model, held, S, B, 64, device, a.amp), 4), tokens=0)
    ema_tps = None
    try:
        while step < a.max_steps:
            frac = (time.time() - t_start) / budget
            if frac >= 1.0:
                break
            dense = frac < a.dense_frac
            if step < a.warmup:
                lr = a.lr * (step + 1) / a.warmup
            else:
                lr = a.lr * (a.min_lr_frac + (1 - a.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))
            ts = time.time()
            loss, kls, covs, gn, loads = step_fn(B, lr, dense)
            dt = time.time() - ts
            step += 1
            tokens += B * S
            tps = B * S / dt
            ema_tps = tps if ema_tps is None else 0.9 * ema_tps + 0.1 * tps
            if step % 10 == 0 or step <= 3 or a.smoke:
                log(fh, event="train", step=step, loss=round(loss, 4), aux_kl=[round(v, 4) for v in kls],
                    idx_cov=[round(v, 3) for v in covs], gnorm=round(gn, 3), lr=round(lr, 6), dense=dense,
                    tok_per_s=round(ema_tps), tokens=tokens, moe_maxload=[round(v, 2) for v in loads])
            if time.time() - last_eval > a.eval_every:
                hooks.set_topk(topk_sparse)
                hl = evaluate(model, held, S, B, 64, device, a.amp)
                log(fh, event="eval", step=step, heldout_loss=round(hl, 4), tokens=tokens)
                last_eval = time.time()
    except Exception as e:  # keep what was trained so far
        import traceback; traceback.print_exc()
        log(fh, event="error", error=repr(e), step=step)
    train_time = time.time() - t_start
    hooks.set_topk(topk_sparse)
    hl = evaluate(model, held, S, B, 10 ** 9, device, a.amp)
    x, y = get_batch(train, min(B, 64), S, gen, device)
    with torch.no_grad():
        tl = lm_loss(model, x, y, a.amp).item()
    log(fh, event="final", steps=step, tokens=tokens, train_time_s=round(train_time, 1),
        avg_tok_per_s=round(tokens / max(train_time, 1e-9)), heldout_loss=round(hl, 4), train_loss=round(tl, 4),
        params=nparams, text_params=ntext, batch=B, seq=S)
    if a.save:
        save(model, a.save, fh)
    if fh:
        fh.close()


if __name__ == "__main__":
    main()
