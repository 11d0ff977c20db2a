"""Indexer selection at long context, CPU forward vs transformers (tests/data/longctx, scripts/make_long_fixture.py).

4096 tokens through the `base` fixture shape (index_kpool 4, index_topk 32: up to 1024 pools compete for 8 places per
query on both MLA layers). Checked with the f32 recipe:

- every selection row whose reference margin (gap between the last chosen and the first rejected pool score, relative
  to the row's largest |score|) is >= 1e-5 equals the reference's set exactly, up to the first position where a
  legitimately different choice (a row closer to a tie than float32 summation noise) was made on an MLA layer that
  is not the last: from there that token's attention output differs, and the KDA layers after it carry the
  difference to every later token, so later rows and logits are no longer computed from the same inputs. That cut
  must lie beyond 1024 tokens (~250 pools competing for 8), so the check covers long context (measured: 1490);
- logits at every 16th position before the cut within 1e-4 of the row's largest |logit|, identical argmax;
- prefill in one call and chunked prefill (chunks of 1000, so chunk edges fall inside open pools) give identical
  selections and logits within 1e-5 relative.
"""

import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_forward as tf  # noqa: E402  (tools, conversion and `nf logits` runner)

LONG = os.path.join(tf.ROOT, "tests", "data", "longctx")
MIN_MARGIN = 1e-5


def load():
    with open(os.path.join(LONG, "meta.json")) as f:
        meta = json.load(f)
    S, L, W = meta["seq_len"], len(meta["mla_layers"]), meta["topk_width"]
    topk = np.fromfile(os.path.join(LONG, "topk.i32"), dtype="<i4").reshape(L, S, W)
    margin = np.fromfile(os.path.join(LONG, "margin.f32"), dtype="<f4").reshape(L, S)
    logits = np.fromfile(os.path.join(LONG, "logits.f32"), dtype="<f4").reshape(S // meta["logits_stride"], -1)
    return meta, topk, margin, logits


@pytest.fixture(scope="module")
def runs():
    meta, topk, margin, ref = load()
    model = os.path.join(tf.WORK, "longctx-f32.gguf")
    os.makedirs(tf.WORK, exist_ok=True)
    r = tf.subprocess.run([tf.tool("nf-convert"), LONG, "-o", model, "-r", "f32", "-q"], capture_output=True,
                          text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    tokens = os.path.join(LONG, "tokens.txt")
    full = tf.nf_logits(model, tokens, "longctx-full", topk=True)
    chunked = tf.nf_logits(model, tokens, "longctx-chunk", chunk=1000, topk=True)
    return meta, topk, margin, ref, full, chunked


def rows_differing(want, got):
    return {(li, t) for li, t in tf.selection_mismatches(want, got)}


def cut_of(topk, sel, margin):
    """First position whose selection legitimately differs on a non-last MLA layer (len if none)."""
    bad = rows_differing(topk, sel)
    fragile = {(li, t) for li, t in zip(*np.nonzero(margin < MIN_MARGIN))}
    flips = [t for li, t in bad & fragile if li < topk.shape[0] - 1]
    return (min(flips) if flips else topk.shape[1]), bad, fragile


def test_selection_exact_where_robust(runs):
    meta, topk, margin, _, (logits, sel), _ = runs
    sel = sel.reshape(topk.shape)
    cut, bad, fragile = cut_of(topk, sel, margin)
    robust_bad = sorted((li, t) for li, t in bad - fragile if t < cut)
    pruned = int(np.isfinite(margin).sum())
    print(f"\nlongctx: {pruned} pruned rows, {len(fragile)} within {MIN_MARGIN} of a tie, "
          f"{len(bad & fragile)} of those differ; first legitimate divergence at {cut}; "
          f"{len(robust_bad)} robust rows before it differ")
    assert cut >= 1024, f"a near-tie flip at position {cut} leaves too little long context checked"
    assert pruned > 0.9 * margin.size, "the fixture should prune almost every row"
    assert len(fragile) <= 0.01 * pruned, f"{len(fragile)} fragile rows: fixture is ill-conditioned"
    assert not robust_bad, f"{len(robust_bad)} robust selection rows differ, first (mla layer, position): " \
                           f"{robust_bad[:5]} (margins {[float(margin[b]) for b in robust_bad[:5]]})"


def test_logits_match_at_long_context(runs):
    meta, topk, margin, ref, (logits, sel), _ = runs
    S, stride = meta["seq_len"], meta["logits_stride"]
    cut, bad, fragile = cut_of(topk, sel.reshape(topk.shape), margin)
    # positions whose last-layer selection legitimately differs are that token's own business: leave them out
    skip = {t for li, t in bad & fragile}
    rows = [i for i in range(S // stride) if (i + 1) * stride - 1 < cut and (i + 1) * stride - 1 not in skip]
    logits = logits.reshape(S, -1)[stride - 1::stride][rows]
    ref = ref[rows]
    rel = np.abs(logits - ref).max(axis=1) / np.abs(ref).max(axis=1)
    print(f"\nlongctx logits: max relative {rel.max():.3g} at sampled row {rel.argmax()}")
    assert len(rows) >= 64, f"only {len(rows)} sampled positions before the cut at {cut}"
    assert (rel <= 1e-4).all(), f"sampled row {rows[rel.argmax()]} differs by {rel.max():.3g} relative"
    assert (logits.argmax(1) == ref.argmax(1)).all()


def test_chunked_prefill_same_at_long_context(runs):
    meta, topk, _, _, (full, sel_full), (chunked, sel_chunk) = runs
    S = meta["seq_len"]
    a, b = full.reshape(S, -1), chunked.reshape(S, -1)
    rel = (np.abs(a - b).max(axis=1) / np.abs(a).max(axis=1)).max()
    assert rel <= 1e-5, f"chunked prefill differs by {rel:.3g} relative"
    bad = tf.selection_mismatches(sel_full.reshape(topk.shape), sel_chunk.reshape(topk.shape))
    assert not bad, f"chunked selections differ at {bad[:5]}"
