#!/usr/bin/env python3
"""Differential test of `nf render` against transformers on random conversations.

Why: the 34 committed fixtures cover the template's branches by hand; this generates thousands of random
conversations (random role sequences, content strings/parts, reasoning fields, tool calls with every JSON
value type, tool results with and without matching ids, list-of-outputs and tool_reference contents,
efforts, clear_thinking, unicode and whitespace edge cases) and compares bytes. Needs transformers and the
template file (see tests/data/chat/README.md). Not part of `make test`.

usage: scripts/diff_chat_template.py --template PATH [-n 2000] [--seed 1]
"""
import argparse, json, os, random, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_chat_fixtures import FINAL_TURN_TOKEN, render  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
NF = os.path.join(os.environ.get("NF_BUILD", os.path.join(ROOT, "build")), "nf")

TEXTS = ["hi", "", " ", "  padded  ", "\n\nlines\n\n", "你好 🌍", "a\u3000", "\u00a0x\u00a0", "tab\there",
         "quote \" and \\ backslash", "<b>html</b> & stuff", "</think> inside", "<think>a</think>b", "x</think>",
         "{\"json\": 1}", "123", "ünïcödé", "\u200b", "\u2028", "e\u0301"]


def rtext(rng):
    return "".join(rng.choice(TEXTS) for _ in range(rng.randint(1, 3)))


def rvalue(rng, depth=0):
    k = rng.randrange(9 if depth < 2 else 6)
    if k == 0: return rtext(rng)
    if k == 1: return rng.randint(-10**6, 10**6)
    if k == 2: return rng.choice([0.5, 1.0, -2.25, 1e-7, 1e20, 3.14159, 0.1, 1e16, 123456.789])
    if k == 3: return rng.choice([True, False])
    if k == 4: return None
    if k == 5: return rng.choice(["", "  s  ", "123", "true", "null"])
    if k == 6: return [rvalue(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["a", "b", "ключ", "k k"]): rvalue(rng, depth + 1) for _ in range(rng.randint(0, 3))}


TOOLS = [
    {"type": "function", "function": {"name": "f", "description": "F <x>", "parameters": {"type": "object",
     "properties": {"s": {"type": "string"}, "n": {"type": "number"}}}}},
    {"type": "function", "function": {"name": "g", "parameters": {}, "strict": True}},
    {"name": "plain", "description": "no wrapper"},
    {"type": "function", "function": {"name": "d", "defer_loading": True}},
]


def rcontent(rng):
    k = rng.randrange(6)
    if k < 3: return rtext(rng)
    if k == 3: return None
    parts = []
    for _ in range(rng.randint(0, 3)):
        parts.append(rng.choice([{"type": "text", "text": rtext(rng)}, rtext(rng), {"type": "image_url"},
                                 {"type": "video"}, {"type": "input_audio"}, {"type": "other"}]))
    return parts


def rconv(rng):
    msgs, ids = [], []
    for _ in range(rng.randint(1, 8)):
        role = rng.choice(["user", "user", "assistant", "assistant", "tool", "system"])
        m = {"role": role, "content": rcontent(rng)}
        if role == "assistant":
            r = rng.randrange(5)
            if r == 0: m["reasoning_content"] = rtext(rng)
            elif r == 1: m["thinking"] = rtext(rng)
            elif r == 2: m["reasoning"] = rtext(rng)
            if rng.random() < 0.5:
                calls = []
                ids = []
                for _ in range(rng.randint(1, 3)):
                    cid = rng.choice(["c1", "c2", "c3", "", None])
                    ids.append(cid)
                    args = {rng.choice(["s", "n", "x", "кл"]): rvalue(rng) for _ in range(rng.randint(0, 3))}
                    c = {"type": "function", "function": {"name": rng.choice(["f", "g", "plain"]), "arguments": args}}
                    if cid is not None: c["id"] = cid
                    if rng.random() < 0.2: c = {"name": c["function"]["name"], "arguments": args, **({"id": cid} if cid else {})}
                    calls.append(c)
                m["tool_calls"] = calls
        if role == "tool":
            k = rng.randrange(5)
            tid = rng.choice(ids + ["zz", None]) if ids else rng.choice(["zz", None])
            if tid is not None: m["tool_call_id"] = tid
            if k == 0:
                m["content"] = [{"tool_call_id": rng.choice(ids + ["q"]) if ids else "q", "output": rcontent(rng)}
                                for _ in range(rng.randint(1, 2))]
            elif k == 1:
                m["content"] = [{"type": "tool_reference", "name": rng.choice(["f", "g", "plain", "zz"])}]
        msgs.append(m)
    case = {"messages": msgs, "tools": rng.choice([None, [], TOOLS, TOOLS[:2]]),
            "add_generation_prompt": rng.random() < 0.7}
    if rng.random() < 0.3: case["reasoning_effort"] = rng.choice(["low", "high", "max", "medium"])
    if rng.random() < 0.3: case["clear_thinking"] = True
    return case


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--template", required=True)
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    tmpl = open(a.template, encoding="utf-8").read().replace(FINAL_TURN_TOKEN, "")
    rng = random.Random(a.seed)
    bad = skipped = 0
    with tempfile.TemporaryDirectory() as d:
        for i in range(a.n):
            c = rconv(rng)
            try:
                want = render(tmpl, c)
            except Exception:  # the template itself raises (e.g. tool_reference without tools)
                skipped += 1
                continue
            p = os.path.join(d, "c.json")
            with open(p, "w", encoding="utf-8") as f:
                json.dump({"messages": c["messages"], "tools": c["tools"]}, f, ensure_ascii=False)
            args = [NF, "render", "--messages", p]
            if c.get("reasoning_effort"): args += ["--effort", c["reasoning_effort"]]
            if c.get("clear_thinking"): args.append("--clear-thinking")
            if not c["add_generation_prompt"]: args.append("--no-generation-prompt")
            r = subprocess.run(args, capture_output=True)
            got = r.stdout.decode("utf-8", "replace")
            if r.returncode != 0 or got != want:
                bad += 1
                if bad <= 5:
                    k = next((j for j in range(min(len(got), len(want))) if got[j] != want[j]), min(len(got), len(want)))
                    print(f"case {i}: rc {r.returncode} {r.stderr.decode()[:200]}\n  at {k}: ours {got[k-40:k+60]!r}\n"
                          f"  want {want[k-40:k+60]!r}\n  {json.dumps(c, ensure_ascii=False)[:1500]}")
    print(f"{a.n} conversations: {bad} differ, {skipped} rejected by the template itself")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
