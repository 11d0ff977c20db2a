"""test_server_load.py — 8 concurrent clients × 20 requests each on loopback, mixing the three APIs, streaming and
not: every request is answered within a time bound, the server's RSS stays stable, and /metrics agrees with the
usage the clients were told (jobs, prompt tokens, generated tokens)."""
import concurrent.futures as cf
import time

import anthropic
import openai
import pytest

from nfserver import Server

CLIENTS, PER_CLIENT = 8, 20


@pytest.fixture(scope="module")
def srv():
    s = Server()
    yield s
    s.stop()


def one(srv, ac, oc, k, i):
    kind = (k + i) % 5
    text = f"client {k} request {i}: say something short"
    msgs = [{"role": "user", "content": text}]
    if kind == 0:
        r = oc.chat.completions.create(model="m", messages=msgs, max_tokens=4)
        return r.usage.prompt_tokens, r.usage.completion_tokens
    if kind == 1:
        u = None
        for c in oc.chat.completions.create(model="m", messages=msgs, max_tokens=4, stream=True,
                                            stream_options={"include_usage": True}):
            u = c.usage or u
        return u.prompt_tokens, u.completion_tokens
    if kind == 2:
        r = ac.messages.create(model="m", max_tokens=4, messages=msgs)
        return r.usage.input_tokens + r.usage.cache_read_input_tokens, r.usage.output_tokens
    if kind == 3:
        with ac.messages.stream(model="m", max_tokens=4, messages=msgs) as st:
            f = st.get_final_message()
        return f.usage.input_tokens + f.usage.cache_read_input_tokens, f.usage.output_tokens
    r = oc.responses.create(model="m", input=text, max_output_tokens=4)
    return r.usage.input_tokens, r.usage.output_tokens


def run_round(srv, n_per_client):
    ac = anthropic.Anthropic(base_url=srv.url, api_key="x", max_retries=0, timeout=120)
    oc = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=120)

    def client(k):
        return [one(srv, ac, oc, k, i) for i in range(n_per_client)]

    with cf.ThreadPoolExecutor(CLIENTS) as ex:
        return [u for f in [ex.submit(client, k) for k in range(CLIENTS)] for u in f.result()]


def test_load(srv):
    run_round(srv, 2)  # warm up (allocations, page cache)
    rss0 = srv.rss_kb()
    m0 = srv.metrics()
    t0 = time.time()
    usages = run_round(srv, PER_CLIENT)
    dt = time.time() - t0
    m1 = srv.metrics()
    rss1 = srv.rss_kb()
    assert len(usages) == CLIENTS * PER_CLIENT
    assert dt < 240, f"{len(usages)} requests took {dt:.1f}s"
    assert m1["nf_generations_total"] - m0["nf_generations_total"] == CLIENTS * PER_CLIENT
    assert m1["nf_prompt_tokens_total"] - m0["nf_prompt_tokens_total"] == sum(p for p, _ in usages)
    assert m1["nf_generated_tokens_total"] - m0["nf_generated_tokens_total"] == sum(c for _, c in usages)
    assert m1["nf_responses_total{class=\"5xx\"}"] == m0["nf_responses_total{class=\"5xx\"}"]
    assert m1["nf_queue_length"] == 0
    assert rss1 - rss0 < 32 * 1024, f"RSS grew from {rss0} kB to {rss1} kB"
    print(f"load: {len(usages)} requests in {dt:.1f}s, RSS {rss0} -> {rss1} kB")
