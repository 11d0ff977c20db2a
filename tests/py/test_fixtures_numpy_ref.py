"""An independent float64 numpy forward pass of the tiny glm5_next fixtures, written from the model spec
(/work/shared/spec/glm5-next.md sections 2.1-2.5), checked against the committed HF reference outputs.

Two purposes: it confirms that the committed fixtures mean what docs/fixtures.md says (checkpoint key names, top-k
layout, logits of every position), and it gives the C forward pass a readable, step-by-step reference whose
intermediates can be compared when a test fails. It only needs numpy; the safetensors file is parsed by hand.
"""

import json
import os
import struct

import numpy as np
import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
FIXDIR = os.environ.get("NF_FIXTURES") or os.path.join(ROOT, "tests", "data", "fixtures")
NAMES = ["base", "shared", "kpool16", "nondefault"]
MLA = ("indexed_attention", "deepseek_sparse_attention", "full_attention")


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    hdr = json.loads(data[8 : 8 + n])
    hdr.pop("__metadata__", None)
    out = {}
    for k, v in hdr.items():
        assert v["dtype"] == "F32"
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(data[8 + n + a : 8 + n + b], dtype="<f4").reshape(v["shape"]).astype(np.float64)
    return out


def rms(x, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def silu(x):
    return x * sigmoid(x)


def softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


class Ref:
    def __init__(self, d):
        with open(os.path.join(d, "config.json")) as f:
            self.c = json.load(f)["text_config"]
        self.w = read_safetensors(os.path.join(d, "model.safetensors"))

    def t(self, name):
        return self.w["model.language_model." + name]

    # 2.1 mHC: weights from the streams entering a site
    def hc(self, X, p):
        c = self.c
        n = c["hc_mult"]
        S = X.shape[0]
        r = rms(X.reshape(S, -1), c["rms_norm_eps"])
        m = r @ self.t(p + "_fn").T
        base, scale = self.t(p + "_base"), self.t(p + "_scale")
        pre = sigmoid(m[:, :n] * scale[0] + base[:n]) + c["hc_eps"]
        post = 2.0 * sigmoid(m[:, n : 2 * n] * scale[1] + base[n : 2 * n])
        L = (m[:, 2 * n :] * scale[2] + base[2 * n :]).reshape(S, n, n)
        C = softmax(L, axis=-1) + c["hc_eps"]  # C[t, src i, dst j], softmax over dst
        C = C / (C.sum(axis=-2, keepdims=True) + c["hc_eps"])
        for _ in range(c["hc_sinkhorn_iters"] - 1):
            C = C / (C.sum(axis=-1, keepdims=True) + c["hc_eps"])
            C = C / (C.sum(axis=-2, keepdims=True) + c["hc_eps"])
        h = np.einsum("ts,tsh->th", pre, X)
        return h, post, C

    @staticmethod
    def hc_post(y, X, post, C):
        return post[:, :, None] * y[:, None, :] + np.einsum("tij,tih->tjh", C, X)

    # 2.3 KDA, token-by-token recurrence
    def kda(self, x, p):
        c = self.c
        nh, hd = c["linear_num_heads"], c["linear_head_dim"]
        S = x.shape[0]

        def conv(u, w):  # w [D, 1, K], causal, taps oldest -> newest
            K = w.shape[-1]
            up = np.concatenate([np.zeros((K - 1, u.shape[1])), u], 0)
            return silu(sum(w[:, 0, j] * up[j : j + S] for j in range(K)))

        q = conv(x @ self.t(p + "q_proj.weight").T, self.t(p + "q_conv1d.weight")).reshape(S, nh, hd)
        k = conv(x @ self.t(p + "k_proj.weight").T, self.t(p + "k_conv1d.weight")).reshape(S, nh, hd)
        v = conv(x @ self.t(p + "v_proj.weight").T, self.t(p + "v_conv1d.weight")).reshape(S, nh, hd)
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6) / np.sqrt(hd)
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
        f = (x @ self.t(p + "f_a_proj.weight").T) @ self.t(p + "f_b_proj.weight").T + self.t(p + "dt_bias")
        g = c["linear_lower_bound"] * sigmoid(np.exp(self.t(p + "A_log"))[None, :, None] * f.reshape(S, nh, hd))
        beta = sigmoid(x @ self.t(p + "b_proj.weight").T)
        st = np.zeros((nh, hd, hd))
        o = np.zeros((S, nh, hd))
        for t in range(S):
            st = st * np.exp(g[t])[:, :, None]
            pred = np.einsum("hkv,hk->hv", st, k[t])
            dlt = beta[t][:, None] * (v[t] - pred)
            st = st + k[t][:, :, None] * dlt[:, None, :]
            o[t] = np.einsum("hkv,hk->hv", st, q[t])
        gate = ((x @ self.t(p + "g_a_proj.weight").T) @ self.t(p + "g_b_proj.weight").T).reshape(S, nh, hd)
        o = rms(o, c["rms_norm_eps"]) * self.t(p + "o_norm.weight") * sigmoid(gate)
        return o.reshape(S, nh * hd) @ self.t(p + "o_proj.weight").T

    # 2.4 lightning indexer with k-pool compression -> per query, the set of attended token positions
    def indexer(self, x, qr, p):
        c = self.c
        kp, K = c["index_kpool"], c["index_topk"] // c["index_kpool"]
        nih, d = c["index_n_heads"], c["index_head_dim"]
        S = x.shape[0]
        ik = x @ self.t(p + "wk.weight").T
        mu = ik.mean(-1, keepdims=True)
        var = ((ik - mu) ** 2).mean(-1, keepdims=True)
        ik = (ik - mu) / np.sqrt(var + 1e-6) * self.t(p + "k_norm.weight") + self.t(p + "k_norm.bias")
        ig = x @ self.t(p + "index_kpool_compress_gate").T
        ape = self.t(p + "index_kpool_compress_ape")
        npool = S // kp
        sm = softmax(ig[: npool * kp].reshape(npool, kp, d) + ape[None], axis=1)
        P = (sm * ik[: npool * kp].reshape(npool, kp, d)).sum(1)  # [npool, d]
        iq = (qr @ self.t(p + "wq_b.weight").T).reshape(S, nih, d)
        w = (x @ self.t(p + "weights_proj.weight").T) / np.sqrt(nih)
        score = np.einsum("th,thp->tp", w, np.maximum(np.einsum("thd,pd->thp", iq, P) / np.sqrt(d), 0.0))
        sel = []
        for t in range(S):
            nc = (t + 1) // kp
            pools = np.argsort(-score[t, :nc], kind="stable")[:K]  # ties: lower index first
            toks = {int(pp) * kp + m for pp in pools for m in range(kp)} | set(range(nc * kp, t + 1))
            sel.append(toks)
        return sel

    def mla(self, x, p, sel):
        c = self.c
        nh, dn, dv = c["num_attention_heads"], c["qk_nope_head_dim"], c["v_head_dim"]
        S = x.shape[0]
        qr = rms(x @ self.t(p + "q_a_proj.weight").T, c["rms_norm_eps"]) * self.t(p + "q_a_layernorm.weight")
        q = (qr @ self.t(p + "q_b_proj.weight").T).reshape(S, nh, dn)
        lat = rms(x @ self.t(p + "kv_a_proj_with_mqa.weight").T, c["rms_norm_eps"]) * self.t(
            p + "kv_a_layernorm.weight"
        )
        kv = (lat @ self.t(p + "kv_b_proj.weight").T).reshape(S, nh, dn + dv)
        k, v = kv[..., :dn], kv[..., dn:]
        if sel is None:
            sel = self.indexer(x, qr, p + "indexer.")
        mask = np.full((S, S), -np.inf)
        for t, toks in enumerate(sel):
            mask[t, sorted(toks)] = 0.0
        s = np.einsum("thd,uhd->htu", q, k) / np.sqrt(dn + c["qk_rope_head_dim"]) + mask[None]
        o = np.einsum("htu,uhd->thd", softmax(s, axis=-1), v)
        return o.reshape(S, nh * dv) @ self.t(p + "o_proj.weight").T, sel

    # 2.5 FFN
    def swiglu(self, x, wg, wu, wd):
        lim = self.c["swiglu_limit"]
        return (silu(np.minimum(x @ wg.T, lim)) * np.clip(x @ wu.T, -lim, lim)) @ wd.T

    def ffn(self, x, p, kind):
        if kind == "dense":
            return self.swiglu(x, self.t(p + "gate_proj.weight"), self.t(p + "up_proj.weight"), self.t(p + "down_proj.weight"))
        c = self.c
        s = sigmoid(x @ self.t(p + "gate.weight").T)
        choice = s + self.t(p + "gate.e_score_correction_bias")
        y = self.swiglu(
            x,
            self.t(p + "shared_experts.gate_proj.weight"),
            self.t(p + "shared_experts.up_proj.weight"),
            self.t(p + "shared_experts.down_proj.weight"),
        )
        for t in range(x.shape[0]):
            top = np.argsort(-choice[t], kind="stable")[: c["num_experts_per_tok"]]
            wts = s[t, top] / (s[t, top].sum() + 1e-20) * c["routed_scaling_factor"]
            for e, we in zip(top, wts):
                ep = p + f"experts.{e}."
                y[t] += we * self.swiglu(
                    x[t : t + 1],
                    self.t(ep + "gate_proj.weight"),
                    self.t(ep + "up_proj.weight"),
                    self.t(ep + "down_proj.weight"),
                )[0]
        return y

    def forward(self, tokens):
        c = self.c
        eps = c["rms_norm_eps"]
        X = np.repeat(self.t("embed_tokens.weight")[tokens][:, None, :], c["hc_mult"], axis=1)
        sels = {}
        prev = None
        for i, lt in enumerate(c["layer_types"]):
            lp = f"layers.{i}."
            h, post, C = self.hc(X, lp + "hc_attn")
            x = rms(h, eps) * self.t(lp + "input_layernorm.weight")
            if lt in MLA:
                shared = c["indexer_types"][i] == "shared"
                y, sel = self.mla(x, lp + "self_attn.", prev if shared else None)
                sels[i] = sel
                prev = sel
            else:
                y = self.kda(x, lp + "self_attn.")
                prev = None  # HF hands a top-k only between adjacent MLA layers
            X = self.hc_post(y, X, post, C)
            h, post, C = self.hc(X, lp + "hc_ffn")
            x = rms(h, eps) * self.t(lp + "post_attention_layernorm.weight")
            X = self.hc_post(self.ffn(x, lp + "mlp.", c["mlp_layer_types"][i]), X, post, C)
        z = rms(X.mean(axis=1), eps) * self.t("norm.weight")
        return z @ self.w["lm_head.weight"].T, sels


@pytest.mark.parametrize("name", NAMES)
def test_numpy_reference_matches_hf(name):
    d = os.path.join(FIXDIR, name)
    ref = Ref(d)
    with open(os.path.join(d, "tokens.txt")) as f:
        tokens = np.array([int(x) for x in f.read().split()])
    with open(os.path.join(d, "topk.json")) as f:
        tk = json.load(f)
    S, V = len(tokens), ref.c["vocab_size"]
    want = np.fromfile(os.path.join(d, "logits.f32"), dtype="<f4").reshape(S, V)
    topk = np.fromfile(os.path.join(d, "topk.i32"), dtype="<i4").reshape(tk["shape"])
    logits, sels = ref.forward(tokens)
    for li, layer in enumerate(tk["layers"]):
        for t in range(S):
            row = topk[li, t]
            assert set(row[row >= 0].tolist()) == sels[layer][t], f"layer {layer} position {t}: selection differs"
    err = float(np.abs(logits - want).max())
    assert err < 1e-3, f"max |logits - HF| = {err}"
