"""test_server.py — nf-server driven by the official `anthropic` and `openai` Python SDKs, against the embedded model
on the CPU: non-streaming and streaming, reasoning on/off, stop sequences, max_tokens, count_tokens, multi-turn
tool-use loops (prefix reuse measured through the reported cached tokens), the Responses API with function calls.

Generated text from a 15M-parameter model is arbitrary, so where a test needs a known output (tool calls, stop
sequences) it passes `nf_force_output` (honoured only with --allow-forced-output): the server then teacher-forces
that text through the model instead of sampling it. Everything else — prefill, state, parsing, formatting, usage —
runs exactly as for sampled output."""
import json
import time

import anthropic
import openai
import pytest

from nfserver import Server, sse_events

TOOLS_A = [{"name": "get_weather", "description": "Weather for a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                                               "metric": {"type": "boolean"}},
                             "required": ["city"]}}]
TOOLS_O = [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                              "parameters": t["input_schema"]}} for t in TOOLS_A]
TOOL_CALL = ("<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key>"
             "<arg_value>3</arg_value><arg_key>metric</arg_key><arg_value>true</arg_value></tool_call><|observation|>")
FORCE_TOOL = "The user wants the weather; call the tool.</think>Let me check." + TOOL_CALL


@pytest.fixture(scope="module")
def srv():
    s = Server()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def ac(srv):
    return anthropic.Anthropic(base_url=srv.url, api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def oc(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=120)


# ---- plain endpoints -----------------------------------------------------------------------------------------

def test_health_and_models(srv, oc):
    assert srv.json("GET", "/health") == (200, {"status": "ok"})
    ids = [m.id for m in oc.models.list()]
    assert ids == [srv.model_id]
    st, m = srv.json("GET", f"/v1/models/{srv.model_id}")
    assert st == 200 and m["context_length"] == srv.n_ctx and m["id"] == srv.model_id
    st, e = srv.json("GET", "/v1/models/no-such-model")
    assert st == 404 and e["error"]["type"] == "not_found_error"


def test_tokenize_roundtrip(srv):
    st, t = srv.json("POST", "/tokenize", {"content": "Hello, world! ünïcode"})
    assert st == 200 and len(t["tokens"]) > 2 and all(isinstance(i, int) for i in t["tokens"])
    st, d = srv.json("POST", "/detokenize", {"tokens": t["tokens"]})
    assert st == 200 and d["content"] == "Hello, world! ünïcode"
    st, t2 = srv.json("POST", "/tokenize", {"content": "ab", "with_pieces": True})
    assert st == 200 and "".join(p["piece"] for p in t2["tokens"]) == "ab"


# ---- OpenAI chat completions -----------------------------------------------------------------------------------

def test_chat_nonstream(srv, oc):
    r = oc.chat.completions.create(model=srv.model_id, messages=[{"role": "user", "content": "Say hi."}], max_tokens=8)
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason in ("stop", "length")
    assert 1 <= r.usage.completion_tokens <= 8 and r.usage.prompt_tokens > 5
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_max_tokens_length(srv, oc):
    r = oc.chat.completions.create(model="anything", messages=[{"role": "user", "content": "Count to 100."}],
                                   max_tokens=3, extra_body={"nf_force_output": "one two three four five six seven"})
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 3
    assert r.model == "anything"


def test_chat_stream_usage_and_order(srv, oc):
    chunks = list(oc.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hello"}], max_tokens=6,
                                             stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({c.id for c in chunks}) == 1 and len({c.created for c in chunks}) == 1
    fins = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert fins == ["length"] or fins == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens <= 6


def test_chat_reasoning_on_off(srv, oc):
    force = "thinking about it</think>The answer."
    r = oc.chat.completions.create(model="m", messages=[{"role": "user", "content": "Q"}], max_tokens=50,
                                   extra_body={"nf_force_output": force + "<|user|>"})
    m = r.choices[0].message
    assert m.reasoning_content == "thinking about it" and m.content == "The answer." and r.choices[0].finish_reason == "stop"
    r = oc.chat.completions.create(model="m", messages=[{"role": "user", "content": "Q"}], max_tokens=50,
                                   reasoning_effort="none", extra_body={"nf_force_output": "Plain answer.<|user|>"})
    m = r.choices[0].message
    assert getattr(m, "reasoning_content", None) is None and m.content == "Plain answer."
    # streamed reasoning arrives as reasoning_content deltas, never as content
    parts = {"r": "", "c": ""}
    for ch in oc.chat.completions.create(model="m", messages=[{"role": "user", "content": "Q"}], max_tokens=50, stream=True,
                                         extra_body={"nf_force_output": force + "<|user|>"}):
        if ch.choices:
            d = ch.choices[0].delta
            parts["r"] += getattr(d, "reasoning_content", None) or ""
            parts["c"] += d.content or ""
    assert parts == {"r": "thinking about it", "c": "The answer."}


def test_chat_stop_sequence(srv, oc):
    r = oc.chat.completions.create(model="m", messages=[{"role": "user", "content": "Q"}], max_tokens=60, stop=["STOP"],
                                   reasoning_effort="none",
                                   extra_body={"nf_force_output": "Hello world STOP and more text"})
    assert r.choices[0].message.content == "Hello world " and r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens < 10


def test_chat_tool_calls_typed_and_streamed(srv, oc):
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    r = oc.chat.completions.create(model="m", messages=msgs, tools=TOOLS_O, max_tokens=100,
                                   extra_body={"nf_force_output": FORCE_TOOL})
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and ch.message.content == "Let me check."
    tc = ch.message.tool_calls[0]
    assert tc.id.startswith("call_") and tc.function.name == "get_weather"
    assert json.loads(tc.function.arguments) == {"city": "Paris", "days": 3, "metric": True}
    # streamed: header delta (id, name) then the arguments; concatenation parses
    calls = {}
    fin = None
    for c in oc.chat.completions.create(model="m", messages=msgs, tools=TOOLS_O, max_tokens=100, stream=True,
                                        extra_body={"nf_force_output": FORCE_TOOL}):
        if not c.choices:
            continue
        for d in c.choices[0].delta.tool_calls or []:
            e = calls.setdefault(d.index, {"id": None, "name": None, "args": ""})
            e["id"] = d.id or e["id"]
            if d.function:
                e["name"] = d.function.name or e["name"]
                e["args"] += d.function.arguments or ""
        fin = c.choices[0].finish_reason or fin
    assert fin == "tool_calls" and len(calls) == 1
    assert calls[0]["name"] == "get_weather" and json.loads(calls[0]["args"])["days"] == 3


# ---- Anthropic Messages ---------------------------------------------------------------------------------------

def test_messages_nonstream_and_count(srv, ac):
    msgs = [{"role": "user", "content": "Hi there"}]
    r = ac.messages.create(model="claude-sonnet-4-5", max_tokens=10, messages=msgs)
    assert r.type == "message" and r.role == "assistant" and r.stop_reason in ("end_turn", "max_tokens")
    assert r.usage.output_tokens <= 10 and r.content
    n = ac.messages.count_tokens(model="claude-sonnet-4-5", messages=msgs)
    assert n.input_tokens == r.usage.input_tokens + r.usage.cache_read_input_tokens
    # the same conversation through the chat API renders to the same prompt
    st, o = srv.json("POST", "/v1/chat/completions", {"model": "m", "messages": msgs, "max_tokens": 1})
    assert st == 200 and o["usage"]["prompt_tokens"] == n.input_tokens


def test_messages_stream_events(srv, ac):
    force = "pondering</think>Result text.<|user|>"
    with ac.messages.stream(model="m", max_tokens=50, messages=[{"role": "user", "content": "x"}],
                            extra_body={"nf_force_output": force}) as st:
        types = [e.type for e in st]
        final = st.get_final_message()
    assert types[0] == "message_start" and types[-1] == "message_stop"
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].thinking == "pondering" and final.content[1].text == "Result text."
    assert final.stop_reason == "end_turn" and final.usage.output_tokens > 3


def test_messages_thinking_disabled(srv, ac):
    r = ac.messages.create(model="m", max_tokens=30, messages=[{"role": "user", "content": "x"}],
                           thinking={"type": "disabled"}, extra_body={"nf_force_output": "Just text.<|user|>"})
    assert [b.type for b in r.content] == ["text"] and r.content[0].text == "Just text."


def test_messages_stop_sequence_and_max_tokens(srv, ac):
    r = ac.messages.create(model="m", max_tokens=60, messages=[{"role": "user", "content": "x"}],
                           stop_sequences=["END", "###"], thinking={"type": "disabled"},
                           extra_body={"nf_force_output": "alpha beta ### gamma END"})
    assert r.stop_reason == "stop_sequence" and r.stop_sequence == "###" and r.content[0].text == "alpha beta "
    r = ac.messages.create(model="m", max_tokens=2, messages=[{"role": "user", "content": "x"}])
    assert r.stop_reason == "max_tokens" and r.usage.output_tokens == 2


def test_messages_stream_tool_use(srv, ac):
    with ac.messages.stream(model="m", max_tokens=100, messages=[{"role": "user", "content": "Weather?"}], tools=TOOLS_A,
                            extra_body={"nf_force_output": FORCE_TOOL}) as st:
        final = st.get_final_message()
    assert final.stop_reason == "tool_use"
    tu = final.content[-1]
    assert tu.type == "tool_use" and tu.id.startswith("toolu_") and tu.input == {"city": "Paris", "days": 3, "metric": True}


def test_anthropic_tool_loop_prefix_reuse(srv, ac):
    """10-turn tool loop: every turn after the first prefills only its new suffix (tool result + next prompt)."""
    msgs = [{"role": "user", "content": "Check the weather ten times."}]
    prev_total = None
    for turn in range(10):
        r = ac.messages.create(model="m", max_tokens=100, messages=msgs, tools=TOOLS_A,
                               extra_body={"nf_force_output": FORCE_TOOL})
        assert r.stop_reason == "tool_use"
        u = r.usage
        total = u.input_tokens + u.cache_read_input_tokens
        if prev_total is not None:
            # everything up to the end of the previous answer was reused
            assert u.cache_read_input_tokens >= prev_total + prev_out - 1, (turn, u)
            assert u.input_tokens <= 20, (turn, u)
        prev_total, prev_out = total, u.output_tokens
        tu = [b for b in r.content if b.type == "tool_use"][0]
        msgs.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r.content]})
        msgs.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": tu.id, "content": f"sunny {turn}"}]})
    m = srv.metrics()
    assert m["nf_cache_hits_total"] >= 9


def test_openai_tool_loop_prefix_reuse(srv, oc):
    msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Weather in Paris?"}]
    prev = None
    for turn in range(4):
        r = oc.chat.completions.create(model="m", messages=msgs, tools=TOOLS_O, max_tokens=100,
                                       extra_body={"nf_force_output": FORCE_TOOL})
        m = r.choices[0].message
        assert r.choices[0].finish_reason == "tool_calls"
        if prev is not None:
            assert r.usage.prompt_tokens_details.cached_tokens >= prev.prompt_tokens + prev.completion_tokens - 1
        prev = r.usage
        msgs.append({"role": "assistant", "content": m.content, "reasoning_content": m.reasoning_content,
                     "tool_calls": [t.model_dump() for t in m.tool_calls]})
        msgs.append({"role": "tool", "tool_call_id": m.tool_calls[0].id, "content": "rain"})


# ---- OpenAI Responses ------------------------------------------------------------------------------------------

def test_responses_text(srv, oc):
    r = oc.responses.create(model="m", input="Say something", max_output_tokens=40,
                            extra_body={"nf_force_output": "hmm</think>Something.<|user|>"})
    assert r.status == "completed" and r.output_text == "Something."
    assert [o.type for o in r.output] == ["reasoning", "message"]
    assert r.usage.input_tokens > 0 and r.usage.output_tokens > 0
    r = oc.responses.create(model="m", input="Say something", max_output_tokens=2)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"


def test_responses_function_call_loop_stream(srv, oc):
    tools = [{"type": "function", "name": "get_weather", "description": "Weather",
              "parameters": TOOLS_A[0]["input_schema"]}]
    inp = [{"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]}]
    seqs, types = [], []
    final = None
    for ev in oc.responses.create(model="m", input=inp, tools=tools, max_output_tokens=100, stream=True,
                                  extra_body={"nf_force_output": FORCE_TOOL}):
        seqs.append(ev.sequence_number)
        types.append(ev.type)
        if ev.type == "response.completed":
            final = ev.response
    assert seqs == list(range(len(seqs)))
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert "response.function_call_arguments.done" in types and "response.output_item.done" in types
    fc = [o for o in final.output if o.type == "function_call"][0]
    assert fc.name == "get_weather" and json.loads(fc.arguments) == {"city": "Paris", "days": 3, "metric": True}
    # send the call and its output back: the next turn reuses the cached prefix
    inp += [o.model_dump(exclude_none=True) for o in final.output if o.type in ("function_call",)]
    inp.append({"type": "function_call_output", "call_id": fc.call_id, "output": "sunny"})
    r = oc.responses.create(model="m", input=inp, tools=tools, max_output_tokens=30,
                            extra_body={"nf_force_output": "done</think>It is sunny.<|user|>"})
    assert r.output_text == "It is sunny." and r.usage.input_tokens_details.cached_tokens > 0


def test_anthropic_billing_header_stripped(srv, ac):
    def sysblocks(h):
        return [{"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1; cch={h};"},
                {"type": "text", "text": "You are Claude Code."}]
    n1 = ac.messages.count_tokens(model="m", system=sysblocks("aaaa"), messages=[{"role": "user", "content": "hi"}])
    n2 = ac.messages.count_tokens(model="m", system=sysblocks("bbbbbbbbbbbbbbbbbbbbbbbb"),
                                  messages=[{"role": "user", "content": "hi"}])
    n3 = ac.messages.count_tokens(model="m", system="You are Claude Code.", messages=[{"role": "user", "content": "hi"}])
    assert n1.input_tokens == n2.input_tokens == n3.input_tokens


def test_keepalive_and_opening_event(srv):
    """The opening event is sent at once; pings follow on a wall-clock timer while a long job runs."""
    s2 = Server("--keepalive", "0.3")
    try:
        sock = s2.raw_socket()
        body = json.dumps({"model": "m", "max_tokens": 150, "stream": True,
                           "messages": [{"role": "user", "content": "tell a long story"}]})
        # occupy the worker with another request so this one waits in the queue
        blocker = s2.raw_socket()
        # long enough to outlast the 0.3 s keepalive on a fast CPU (150 tokens took < 0.3 s once decode got faster):
        # a prompt the embedded model answers up to max_tokens (1500 tokens, ~1.8 s here; the retrained model ends
        # its answer to "blocker" by itself after 253 tokens, 0.33 s, and the queued request then never saw a ping)
        bb = json.dumps({"model": "m", "max_tokens": 1500, "messages": [{"role": "user", "content": "tell a long story"}]})
        blocker.sendall(f"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(bb)}\r\n\r\n{bb}".encode())
        time.sleep(0.2)
        t0 = time.time()
        sock.sendall(f"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
        data = b""
        first = None
        while b"message_stop" not in data and time.time() - t0 < 120:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
            if first is None and b"message_start" in data:
                first = time.time() - t0
        text = data.decode(errors="replace")
        assert first is not None and first < 1.0
        assert "event: ping" in text and text.index("event: ping") < text.index("content_block_start")
        sock.close()
        blocker.close()
    finally:
        s2.stop()


def test_tool_replay_exact_bytes(srv, ac):
    """The model's own formatting of a tool-call turn (newlines, padded values) differs from the template's
    rendering of the client's echo; the exact sampled tokens are replayed by tool id, so the next turn still
    reuses everything. An edited echo falls back to the template's rendering (and the turn-start checkpoint)."""
    force = ("ok</think>\nLet me check.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
             "<arg_key>days</arg_key>\n<arg_value> 3 </arg_value>\n</tool_call><|observation|>")
    msgs = [{"role": "user", "content": "Weather in Paris, please (replay test)?"}]
    r1 = ac.messages.create(model="m", max_tokens=100, messages=msgs, tools=TOOLS_A, extra_body={"nf_force_output": force})
    tu = r1.content[-1]
    assert tu.input == {"city": "Paris", "days": 3}
    p1 = r1.usage.input_tokens + r1.usage.cache_read_input_tokens
    msgs.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r1.content]})
    msgs.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": tu.id, "content": "sunny"}]})
    r2 = ac.messages.create(model="m", max_tokens=100, messages=msgs, tools=TOOLS_A, extra_body={"nf_force_output": force})
    assert r2.usage.cache_read_input_tokens == p1 + r1.usage.output_tokens - 1  # all but the unfed stop token
    # edit the echoed text: no replay, the prompt diverges inside the old turn
    edited = [dict(m) for m in msgs]
    edited[1] = {"role": "assistant", "content": [dict(b) for b in edited[1]["content"]]}
    edited[1]["content"][1]["text"] = "Let me look."
    r3 = ac.messages.create(model="m", max_tokens=5, messages=edited, tools=TOOLS_A)
    assert p1 <= r3.usage.cache_read_input_tokens < p1 + r1.usage.output_tokens - 1


def test_interleaved_conversations_ram_cache(srv, ac):
    """A second conversation replaces the live state; the first one resumes from its copy in RAM — all of it
    after a tool turn (exact replay), and from its prompt end after a text turn the template re-renders."""
    sys_a = "You are agent A. " * 40
    sys_b = "You are agent B, a different one. " * 20
    m0 = srv.metrics()
    a = [{"role": "user", "content": "Weather in Paris (conversation A)?"}]
    r1 = ac.messages.create(model="m", max_tokens=100, system=sys_a, messages=a, tools=TOOLS_A,
                            extra_body={"nf_force_output": FORCE_TOOL})
    p1 = r1.usage.input_tokens + r1.usage.cache_read_input_tokens
    ac.messages.create(model="m", max_tokens=3, system=sys_b, messages=[{"role": "user", "content": "B here"}])
    a.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r1.content]})
    a.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": r1.content[-1].id, "content": "sunny"}]})
    r2 = ac.messages.create(model="m", max_tokens=60, system=sys_a, messages=a, tools=TOOLS_A,
                            extra_body={"nf_force_output": "done</think>\n\nIt is sunny.  <|user|>"})
    assert r2.usage.cache_read_input_tokens == p1 + r1.usage.output_tokens - 1
    p2 = r2.usage.input_tokens + r2.usage.cache_read_input_tokens
    # B again, then A with the text turn echoed (the template strips its whitespace: resumes at A's prompt end)
    ac.messages.create(model="m", max_tokens=3, system=sys_b, messages=[{"role": "user", "content": "B again"}])
    a.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r2.content]})
    a.append({"role": "user", "content": "thanks"})
    r3 = ac.messages.create(model="m", max_tokens=3, system=sys_a, messages=a, tools=TOOLS_A)
    assert r3.usage.cache_read_input_tokens >= p2
    assert srv.metrics()["nf_ram_cache_hits_total"] - m0["nf_ram_cache_hits_total"] == 2
