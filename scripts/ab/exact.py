#!/usr/bin/env python3
"""exact.py — the comparison half of `nf-ab exact` (Python standard library only).

Reads the per-step dumps written by `nf-bench --dump-steps FILE --dump-topk K` (JSON lines, contract in docs/ab.md)
for two trials and says IDENTICAL, DIVERGED (with the first divergence and its kind) or NO ANSWER (a trial failed:
non-zero exit, missing/truncated/inconsistent dump). A failed arm is never reported as "equal" nor as "not exact".

Kinds of divergence, checked in this order per frontier: prompt_tokens (the cut has a different length),
prompt_ids (same length, different ids: the tokenizer or the prompt changed), length (a different number of decode
steps), token (the selected token at a step), topk_ids (same token, different top-K ids or order), logits (same
tokens, different logit values at print resolution).

Limit, stated in every verdict: logits are compared as printed (%.9g); this can refute exactness at print
resolution, it cannot prove ulp-level identity.
"""

import argparse
import json
import math
import os
import struct
import sys

RESOLUTION = "logits compared as printed (%.9g): refutes at print resolution, cannot prove ulp-level identity"


class NoAnswer(Exception):
    pass


class NotPrefixStable(Exception):
    pass


def fnv64(ids):
    """FNV-1a 64 over the ids as 4-byte little-endian unsigned integers (the hash of gen_ids_hash/prompt_fnv64)."""
    h = 0xCBF29CE484222325
    for b in b"".join(struct.pack("<I", i & 0xFFFFFFFF) for i in ids):
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def _logit(v):
    """Logits are JSON numbers; non-finite values are the strings "nan", "inf", "-inf"."""
    if isinstance(v, str):
        v = float(v)
    v = float(v)
    return "nan" if math.isnan(v) else v


def load_dump(path, ctx, gen, topk, rc_path=None):
    """One frontier's dump, validated. Raises NoAnswer with the reason when the trial gave no usable answer."""
    if rc_path and os.path.exists(rc_path):
        with open(rc_path) as f:
            rc = f.read().strip()
        if rc != "0":
            raise NoAnswer("%s: the bench exited %s" % (os.path.basename(path), rc))
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        raise NoAnswer("%s: no dump written" % os.path.basename(path))
    head, steps, end = None, [], None
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                raise NoAnswer("%s:%d: not a JSON line (truncated write?)" % (os.path.basename(path), n))
            t = rec.get("type")
            if rec.get("ctx") != ctx:
                raise NoAnswer("%s:%d: record for ctx %r, expected %d" % (os.path.basename(path), n, rec.get("ctx"), ctx))
            if t == "frontier":
                head = rec
            elif t == "step":
                if head is None or end is not None:
                    raise NoAnswer("%s:%d: step outside a frontier block" % (os.path.basename(path), n))
                if rec.get("step") != len(steps):
                    raise NoAnswer("%s:%d: step %r, expected %d" % (os.path.basename(path), n, rec.get("step"), len(steps)))
                steps.append(rec)
            elif t == "end":
                end = rec
            else:
                raise NoAnswer("%s:%d: unknown record type %r" % (os.path.basename(path), n, t))
    name = os.path.basename(path)
    if head is None:
        raise NoAnswer("%s: no frontier record" % name)
    if end is None:
        raise NoAnswer("%s: no end record after %d steps (truncated)" % (name, len(steps)))
    if end.get("steps") != len(steps):
        raise NoAnswer("%s: end record says %r steps, the dump holds %d" % (name, end.get("steps"), len(steps)))
    if len(steps) != gen:
        raise NoAnswer("%s: %d steps, %d asked for (short run)" % (name, len(steps), gen))
    ids = head.get("prompt_ids")
    if not isinstance(ids, list) or len(ids) != head.get("prompt_tokens"):
        raise NoAnswer("%s: prompt_ids missing or not prompt_tokens long" % name)
    if head.get("prompt_fnv64") is not None and head["prompt_fnv64"] != fnv64(ids):
        raise NoAnswer("%s: prompt_fnv64 %s does not hash prompt_ids (%s)" % (name, head["prompt_fnv64"], fnv64(ids)))
    toks = []
    for s in steps:
        tk = s.get("topk")
        if not isinstance(tk, list) or len(tk) != topk or not all(isinstance(p, list) and len(p) == 2 for p in tk):
            raise NoAnswer("%s: step %d: topk is not %d [id, logit] pairs" % (name, s["step"], topk))
        toks.append(s.get("token"))
    if end.get("gen_ids_fnv64") is not None and end["gen_ids_fnv64"] != fnv64(toks):
        raise NoAnswer("%s: gen_ids_fnv64 %s does not hash the step tokens (%s)" % (name, end["gen_ids_fnv64"], fnv64(toks)))
    return {"head": head, "steps": steps, "end": end}


def first_divergence(a, b):
    """None when identical, else {kind, step, detail}."""
    ha, hb = a["head"], b["head"]
    if ha["prompt_tokens"] != hb["prompt_tokens"]:
        return {"kind": "prompt_tokens", "step": None,
                "detail": "prompt cut is %d tokens in A, %d in B" % (ha["prompt_tokens"], hb["prompt_tokens"])}
    if ha["prompt_ids"] != hb["prompt_ids"]:
        i = next(i for i, (x, y) in enumerate(zip(ha["prompt_ids"], hb["prompt_ids"])) if x != y)
        return {"kind": "prompt_ids", "step": None,
                "detail": "prompt token %d is %d in A, %d in B" % (i, ha["prompt_ids"][i], hb["prompt_ids"][i])}
    if len(a["steps"]) != len(b["steps"]):
        return {"kind": "length", "step": min(len(a["steps"]), len(b["steps"])),
                "detail": "%d steps in A, %d in B" % (len(a["steps"]), len(b["steps"]))}
    for sa, sb in zip(a["steps"], b["steps"]):
        s = sa["step"]
        if sa["token"] != sb["token"]:
            return {"kind": "token", "step": s, "detail": "token %d in A, %d in B" % (sa["token"], sb["token"])}
        ia = [p[0] for p in sa["topk"]]
        ib = [p[0] for p in sb["topk"]]
        if ia != ib:
            j = next((j for j, (x, y) in enumerate(zip(ia, ib)) if x != y), min(len(ia), len(ib)))
            return {"kind": "topk_ids", "step": s,
                    "detail": "same token %d; top-K rank %d is id %s in A, %s in B" % (
                        sa["token"], j, ia[j] if j < len(ia) else None, ib[j] if j < len(ib) else None)}
        la = [_logit(p[1]) for p in sa["topk"]]
        lb = [_logit(p[1]) for p in sb["topk"]]
        if la != lb:
            j = next(j for j, (x, y) in enumerate(zip(la, lb)) if x != y)
            return {"kind": "logits", "step": s,
                    "detail": "same tokens; logit of id %d (rank %d) is %r in A, %r in B" % (
                        ia[j], j, sa["topk"][j][1], sb["topk"][j][1])}
    return None


def prefix_stable(dumps):
    """Each frontier's prompt ids must be a prefix of every larger frontier's (the cut re-tokenizes to the same ids);
    raises NotPrefixStable otherwise."""
    fs = sorted(dumps)
    for lo, hi in zip(fs, fs[1:]):
        a, b = dumps[lo]["head"]["prompt_ids"], dumps[hi]["head"]["prompt_ids"]
        if b[:len(a)] != a:
            raise NotPrefixStable("prompt ids at ctx %d are not a prefix of those at ctx %d: the corpus is not "
                                  "prefix-stable, the frontiers do not see one token sequence" % (lo, hi))


def compare(prefix_a, prefix_b, frontiers, gen, topk):
    """Compare the trials <prefix>-ctx<F>.jsonl of two arms. Returns the verdict dict."""
    res = {"frontiers": [], "resolution": RESOLUTION}
    loaded = {prefix_a: {}, prefix_b: {}}
    for f in frontiers:
        row = {"ctx": f}
        got = {}
        for p in (prefix_a, prefix_b):
            try:
                got[p] = load_dump("%s-ctx%d.jsonl" % (p, f), f, gen, topk, "%s-ctx%d.rc" % (p, f))
                loaded[p][f] = got[p]
            except NoAnswer as e:
                row.setdefault("no_answer", []).append(str(e))
        if "no_answer" in row:
            row["verdict"] = "NO ANSWER"
        else:
            d = first_divergence(got[prefix_a], got[prefix_b])
            row["verdict"] = "IDENTICAL" if d is None else "DIVERGED"
            if d is not None:
                row["divergence"] = d
        res["frontiers"].append(row)
    for p, dumps in loaded.items():
        try:
            prefix_stable(dumps)
        except NotPrefixStable as e:
            res["verdict"] = "REFUSED"
            res["reason"] = "%s: %s" % (os.path.basename(p), e)
            return res
    vs = [r["verdict"] for r in res["frontiers"]]
    if "NO ANSWER" in vs:
        res["verdict"] = "NO ANSWER"
    elif "DIVERGED" in vs:
        res["verdict"] = "DIVERGED"
    else:
        res["verdict"] = "IDENTICAL"
    return res


EXIT = {"IDENTICAL": 0, "DIVERGED": 1, "NO ANSWER": 3, "REFUSED": 4}


def describe(res, name):
    lines = []
    for r in res["frontiers"]:
        if r["verdict"] == "DIVERGED":
            d = r["divergence"]
            lines.append("%s ctx %d: DIVERGED, kind %s%s: %s" % (
                name, r["ctx"], d["kind"], "" if d["step"] is None else " at step %d" % d["step"], d["detail"]))
        elif r["verdict"] == "NO ANSWER":
            lines.append("%s ctx %d: NO ANSWER: %s" % (name, r["ctx"], "; ".join(r["no_answer"])))
        else:
            lines.append("%s ctx %d: IDENTICAL" % (name, r["ctx"]))
    if res.get("reason"):
        lines.append("%s: REFUSED: %s" % (name, res["reason"]))
    lines.append("%s: %s (%s)" % (name, res["verdict"], res["resolution"]))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="nf-ab exact compare")
    ap.add_argument("--name", default="A/B")
    ap.add_argument("--frontiers", required=True, help="comma-separated frontiers")
    ap.add_argument("--gen", type=int, required=True)
    ap.add_argument("--topk", type=int, required=True)
    ap.add_argument("--json", help="write the verdict here")
    ap.add_argument("prefix_a")
    ap.add_argument("prefix_b")
    args = ap.parse_args(argv)
    fr = [int(x) for x in args.frontiers.split(",") if x]
    res = compare(args.prefix_a, args.prefix_b, fr, args.gen, args.topk)
    res["name"] = args.name
    print(describe(res, args.name))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
    return EXIT[res["verdict"]]


if __name__ == "__main__":
    sys.exit(main())
