#!/usr/bin/env python3
"""Render the chat-template fixtures of src/text/chat_template.c with transformers' own Jinja rendering.

Why: the C renderer must produce exactly the bytes transformers' apply_chat_template produces with the
GLM-5.3-Flash chat template. This script renders >= 20 conversations (tools, multi-turn tool loops, reasoning
on/off/cleared, effort levels, system prompts, content parts, unicode) with
transformers.utils.chat_template_utils.render_jinja_template -- the function apply_chat_template calls --
and writes them, with their inputs, to tests/data/chat/cases.json. The C test (tests/c/test_chat_template.c)
renders every case and compares bytes.

The template: the released GLM-5.3-Flash chat_template.jinja is not on this machine. NVIDIA-NeMo/Automodel's
examples/llm_finetune/glm5_next/glm5_3_flash_training_chat_template.jinja states it renders byte-identically
to the released template (HF revision eb9eb208...) with two documented differences: (1) generation blocks,
which transformers renders as their plain content, and (2) a final assistant turn is followed by
<|observation|>/<|user|>. This script undoes (2) by removing that one expression, giving the released
rendering. Pass the training template's path with --template (see tests/data/chat/README.md for where it
comes from and its sha256); it is not committed.

usage: scripts/make_chat_fixtures.py --template PATH [--out tests/data/chat/cases.json]
                                    [--tokenizer models/tiny/tokenizer.json]
"""
import argparse, hashlib, json, os, sys

from transformers.utils.chat_template_utils import render_jinja_template

FINAL_TURN_TOKEN = "{{- '<|observation|>' if m.tool_calls else '<|user|>' -}}"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer"}}, "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web. Returns <results> as text & links.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "limit": {"type": "integer"}, "filters": {"type": "object"},
        "exact": {"type": "boolean"}, "threshold": {"type": "number"}, "tags": {"type": "array"},
        "note": {"type": "string"}}}}}
RUN = {"type": "function", "function": {
    "name": "run_shell", "description": "Run a shell command; output is returned verbatim.",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"},
                                                     "timeout_s": {"type": "number"}}},
    "strict": True}}
DEFERRED = {"type": "function", "function": {"name": "rare_tool", "description": "loaded on demand",
                                             "parameters": {"type": "object", "properties": {}},
                                             "defer_loading": True}}
PLAIN = {"name": "calc", "description": "Evaluate an arithmetic expression (plain schema, no wrapper).",
         "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}}}
UNICODE_TOOL = {"type": "function", "function": {
    "name": "翻译", "description": "把文本翻译成目标语言 — traduire 🌍",
    "parameters": {"type": "object", "properties": {"文本": {"type": "string"}, "目标": {"type": "string"}}}}}


def tc(id_, name, args):
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": args}}


def cases():
    C = []

    def add(name, messages, tools=None, gen=True, **kw):
        C.append({"name": name, "messages": messages, "tools": tools, "add_generation_prompt": gen, **kw})

    u = lambda t: {"role": "user", "content": t}
    a = lambda t, **k: {"role": "assistant", "content": t, **k}
    s = lambda t: {"role": "system", "content": t}
    tool = lambda t, id_=None: {"role": "tool", "content": t, **({"tool_call_id": id_} if id_ else {})}

    add("single_user", [u("Hello!")])
    add("system_user", [s("You are a terse assistant."), u("What is 2+2?")])
    add("no_generation_prompt", [u("hi"), a("hello")], gen=False)
    add("multi_turn_reasoning", [u("Name a prime."), a("7", reasoning_content="Small primes: 2,3,5,7."),
                                 u("Another?"), a("11", reasoning_content="Next after 7 is 11."), u("And?")])
    add("multi_turn_clear_thinking", [u("Name a prime."), a("7", reasoning_content="Small primes."),
                                      u("Another?"), a("11", reasoning_content="after 7"), u("And?")],
        clear_thinking=True)
    add("effort_low", [u("quick question")], reasoning_effort="low")
    add("effort_high", [s("sys"), u("hard question")], reasoning_effort="high")
    add("effort_medium_is_max", [u("q")], reasoning_effort="medium")
    add("tools_first_turn", [s("Use tools when helpful."), u("Weather in Paris?")], tools=[WEATHER, SEARCH])
    add("tool_loop_single", [
        u("Weather in Paris in celsius for 3 days?"),
        a("", reasoning_content="I should call get_weather.",
          tool_calls=[tc("call_1", "get_weather", {"city": "Paris", "unit": "celsius", "days": 3})]),
        tool('{"temp": 21, "sky": "clear"}', "call_1"),
        a("It is 21 °C and clear in Paris.", reasoning_content="Report it.")], tools=[WEATHER], gen=False)
    add("tool_loop_then_prompt", [
        u("Search for llama facts"),
        a("Let me search.", reasoning_content="Use search.",
          tool_calls=[tc("c1", "search", {"query": "llama facts", "limit": 5, "exact": False,
                                          "threshold": 0.25, "filters": {"lang": ["en", "fr"], "safe": True},
                                          "tags": ["a", 1, None, 2.5], "note": "123"})]),
        tool("1. Llamas hum.\n2. They spit.", "c1")], tools=[SEARCH])
    add("parallel_calls_sorted", [
        u("Weather in Oslo and Rome?"),
        a("", reasoning_content="Two calls.",
          tool_calls=[tc("a", "get_weather", {"city": "Oslo"}), tc("b", "get_weather", {"city": "Rome"})]),
        tool("Rome: 25", "b"), tool("Oslo: 3", "a")], tools=[WEATHER])
    add("parallel_calls_no_ids", [
        u("Weather in Oslo and Rome?"),
        a("", tool_calls=[{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}},
                          {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]),
        tool("Oslo: 3"), tool("Rome: 25")], tools=[WEATHER])
    add("parallel_calls_unknown_id", [
        u("two"),
        a("", tool_calls=[tc("x1", "get_weather", {"city": "A"}), tc("x2", "get_weather", {"city": "B"})]),
        tool("second", "x2"), tool("other", "zz")], tools=[WEATHER])
    add("multi_round_tool_loop", [
        s("You are a coding agent."), u("List files then count lines of main.c"),
        a("", reasoning_content="ls first", tool_calls=[tc("t1", "run_shell", {"cmd": "ls", "timeout_s": 10})]),
        tool("main.c\nMakefile\n", "t1"),
        a("", reasoning_content="now wc", tool_calls=[tc("t2", "run_shell", {"cmd": "wc -l main.c", "timeout_s": 2.5})]),
        tool("42 main.c", "t2"),
        a("main.c has 42 lines.", reasoning_content="done"), u("thanks, now delete it")], tools=[RUN])
    add("multi_round_tool_loop_cleared", [
        u("List files"),
        a("", reasoning_content="ls first", tool_calls=[tc("t1", "run_shell", {"cmd": "ls"})]),
        tool("a b", "t1"), a("Files: a b", reasoning_content="done"), u("and hidden ones?"),
        a("", reasoning_content="ls -a", tool_calls=[tc("t2", "run_shell", {"cmd": "ls -a"})]),
        tool(". .. a b .x", "t2")], tools=[RUN], clear_thinking=True)
    add("inline_think_in_content", [u("hi"), a("<think>greet back</think>\n\nHello there!"), u("bye")])
    add("reasoning_alias_thinking", [u("hi"), {"role": "assistant", "content": "yo", "thinking": "casual"}, u("?")])
    add("reasoning_alias_reasoning", [u("hi"), {"role": "assistant", "content": "yo", "reasoning": "r-field"}, u("?")])
    add("unicode_everywhere", [
        s("Tu es un assistant. 你是助手。 Ты помощник. أنت مساعد"),
        u("Translate 'κόσμος' 🌍👩‍👩‍👧 ｆｕｌｌｗｉｄｔｈ, नमस्ते, 안녕하세요\u200b, e\u0301"),
        a("世界 — monde 🌎", reasoning_content="κόσμος = world (ελληνικά) 🤔"),
        u("Now via the tool"),
        a("", tool_calls=[tc("u1", "翻译", {"文本": "κόσμος 🌍", "目标": "日本語"})]),
        tool("世界 (せかい)", "u1")], tools=[UNICODE_TOOL])
    add("content_parts", [
        {"role": "user", "content": [{"type": "text", "text": "What is in this image? "},
                                     {"type": "image_url", "image_url": {"url": "data:x"}},
                                     {"type": "text", "text": " And this video:"}, {"type": "video"},
                                     "plain string part"]},
        a([{"type": "text", "text": "A cat."}])])
    add("assistant_whitespace_strip", [u("x"), a("  \n\n  padded answer \t\n\u3000"), u("y"),
                                       a("\n", reasoning_content="  keep reasoning spaces  ")], gen=False)
    add("tools_defer_strict_plain", [u("compute 6*7")], tools=[RUN, DEFERRED, PLAIN])
    add("plain_tool_call_no_wrapper", [
        u("6*7?"), a("", tool_calls=[{"name": "calc", "arguments": {"expr": "6*7"}}]), tool("42")], tools=[PLAIN])
    add("system_after_assistant", [u("hi"), a("hello"), s("New instruction: be formal."), u("hey")])
    add("assistant_then_assistant", [u("a"), a("first"), a("second", reasoning_content="r")])
    add("tool_list_of_outputs", [
        u("two tools"),
        a("", tool_calls=[tc("o1", "get_weather", {"city": "Lima"}), tc("o2", "search", {"query": "Lima"})]),
        {"role": "tool", "content": [{"tool_call_id": "o2", "output": "search results"},
                                     {"tool_call_id": "o1", "output": [{"type": "text", "text": "Lima: 19"}]}]}],
        tools=[WEATHER, SEARCH])
    add("tool_reference_response", [
        u("load tools"), a("", tool_calls=[tc("r1", "search", {"query": "tools"})]),
        {"role": "tool", "tool_call_id": "r1",
         "content": [{"type": "tool_reference", "name": "get_weather"}, {"type": "tool_reference", "name": "calc"}]}],
        tools=[WEATHER, SEARCH, PLAIN])
    add("tool_message_content_parts", [
        u("w"), a("", tool_calls=[tc("p1", "get_weather", {"city": "Nice"})]),
        {"role": "tool", "tool_call_id": "p1", "content": [{"type": "text", "text": "Nice: "}, {"type": "text", "text": "22"}]}],
        tools=[WEATHER])
    add("arg_value_types", [
        u("types"),
        a("", tool_calls=[tc("v1", "search", {"query": "  spaced  ", "limit": -3, "threshold": 1.0,
                                              "filters": {}, "tags": [], "exact": True, "note": "{\"json\": \"in a string\"}"}),
                          tc("v2", "search", {"threshold": 1e-07, "limit": 12345678901234, "note": "line1\nline2\t\"q\"",
                                              "filters": {"nested": {"deep": [1, {"x": None}]}, "ü": "ÿ"}}),
                          tc("v3", "search", {"threshold": 1e+20, "note": "", "tags": ["<tag>", "&amp;"]})]),
        tool("ok", "v1"), tool("ok", "v2"), tool("ok", "v3")], tools=[SEARCH])
    add("long_whitespace_and_code", [
        s("```python\ndef f(x):\n\treturn x  \n```\n\n\n"), u("    indented\n\n\n\n   \t  trailing   "),
        a("```c\nint main(void) {\n    return 0;\n}\n```", reasoning_content="\n\ncode\n\n")], reasoning_effort="high")
    add("empty_tools_list", [u("no tools")], tools=[])
    add("ends_with_assistant_tool_call", [
        u("go"), a("calling", tool_calls=[tc("e1", "run_shell", {"cmd": "true"})])], tools=[RUN], gen=False)
    add("reasoning_empty_string", [u("q"), a("answer", reasoning_content=""), u("q2")])
    return C


def render(template, case):
    kw = {}
    for k in ("reasoning_effort", "clear_thinking"):
        if k in case:
            kw[k] = case[k]
    out, _ = render_jinja_template([case["messages"]], tools=case["tools"], chat_template=template,
                                   add_generation_prompt=case["add_generation_prompt"], **kw)
    return out[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--template", required=True, help="NeMo glm5_3_flash_training_chat_template.jinja")
    ap.add_argument("--out", default="tests/data/chat/cases.json")
    ap.add_argument("--tokenizer", default="models/tiny/tokenizer.json",
                    help="also store each prompt's ids from this tokenizer (the `tokenizers` library)")
    a = ap.parse_args()
    raw = open(a.template, encoding="utf-8").read()
    if raw.count(FINAL_TURN_TOKEN) != 1:
        sys.exit("template does not contain the final-turn expression exactly once: not the expected file")
    released = raw.replace(FINAL_TURN_TOKEN, "")
    out = {"source": {"template": "NVIDIA-NeMo/Automodel examples/llm_finetune/glm5_next/"
                                  "glm5_3_flash_training_chat_template.jinja (blob in commit 3559b41)",
                      "template_sha256": hashlib.sha256(raw.encode()).hexdigest(),
                      "edit": "removed " + FINAL_TURN_TOKEN,
                      "renderer": "transformers.utils.chat_template_utils.render_jinja_template"},
           "cases": []}
    tok = None
    if a.tokenizer and os.path.exists(a.tokenizer):
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(a.tokenizer)
        out["source"]["ids_tokenizer"] = a.tokenizer
    for c in cases():
        c = dict(c)
        c["expected"] = render(released, c)
        if tok is not None:
            # The library matches added tokens anywhere in the text; no case puts special-token text in
            # request content, so this equals our template-only special tokens.
            c["expected_ids"] = tok.encode(c["expected"], add_special_tokens=False).ids
        out["cases"].append(c)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{a.out}: {len(out['cases'])} cases")


if __name__ == "__main__":
    main()
