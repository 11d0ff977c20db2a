/* test_output_parser.c — the streaming output parser: every tool call, reasoning and answer of the fixture
 * conversations (tests/data/chat/cases.json, rendered by transformers) is recovered from the rendered
 * assistant turns, whether the text arrives whole, byte by byte or in random chunks; plus the robustness
 * rules (tags split across chunks, partial UTF-8, tool call inside unclosed reasoning, twice-closed
 * </think>, end tokens, truncated or malformed calls, value typing with and without a schema). */
#include <criterion/criterion.h>

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampler.h"
#include "text/output_parser.h"
#include "util/error.h"

typedef struct {
    char reasoning[1 << 16], text[1 << 16];
    size_t rn, tn;
    json_t *calls;   /* array of {name, arguments} */
    char end[32];
    int n_events;
    bool bad_utf8;
} collect;

static bool valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t l = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (!l || i + l > n) return false;
        for (size_t k = 1; k < l; k++)
            if (((unsigned char)s[i + k] & 0xC0) != 0x80) return false;
        i += l;
    }
    return true;
}

static void on_event(void *u, const nf_out_event *ev) {
    collect *c = u;
    c->n_events++;
    switch (ev->kind) {
    case NF_OUT_REASONING:
        cr_assert_lt(c->rn + ev->len, sizeof c->reasoning);
        memcpy(c->reasoning + c->rn, ev->text, ev->len);
        c->rn += ev->len;
        if (!valid_utf8(ev->text, ev->len)) c->bad_utf8 = true;
        break;
    case NF_OUT_TEXT:
        cr_assert_lt(c->tn + ev->len, sizeof c->text);
        memcpy(c->text + c->tn, ev->text, ev->len);
        c->tn += ev->len;
        if (!valid_utf8(ev->text, ev->len)) c->bad_utf8 = true;
        break;
    case NF_OUT_TOOL_CALL:
        json_array_append_new(c->calls, json_pack("{s:s, s:O}", "name", ev->name, "arguments", ev->arguments));
        break;
    case NF_OUT_END:
        snprintf(c->end, sizeof c->end, "%.*s", (int)ev->len, ev->text);
        break;
    }
}

/* chunking: 0 = whole, 1 = byte by byte, else random chunks from that seed */
static void run(collect *c, const char *s, size_t n, bool in_reasoning, const json_t *tools, uint64_t chunking) {
    memset(c, 0, sizeof *c);
    c->calls = json_array();
    nf_output_parser_opts o = {.in_reasoning = in_reasoning, .tools = tools};
    nf_output_parser *p = nf_output_parser_new(&o, on_event, c);
    nf_rng rng;
    nf_rng_seed(&rng, chunking);
    for (size_t i = 0; i < n;) {
        size_t k = chunking == 0 ? n : chunking == 1 ? 1 : 1 + nf_rng_next(&rng) % 9;
        if (k > n - i) k = n - i;
        nf_output_parser_feed(p, s + i, k);
        i += k;
    }
    nf_output_parser_finish(p);
    nf_output_parser_free(p);
    c->reasoning[c->rn] = 0;
    c->text[c->tn] = 0;
}

static void done(collect *c) { json_decref(c->calls); }

static const char *find_any_role(const char *s) {
    static const char *const roles[] = {"<|user|>", "<|observation|>", "<|system|>", "<|assistant|>"};
    const char *best = NULL;
    for (int i = 0; i < 4; i++) {
        const char *f = strstr(s, roles[i]);
        if (f && (!best || f < best)) best = f;
    }
    return best;
}

Test(output_parser, recovers_fixture_turns_in_any_chunking) {
    json_error_t e;
    json_t *root = json_load_file("tests/data/chat/cases.json", 0, &e);
    cr_assert_not_null(root, "%s", e.text);
    size_t ci, n_calls = 0, n_turns = 0;
    json_t *cs;
    json_array_foreach(json_object_get(root, "cases"), ci, cs) {
        const char *name = json_string_value(json_object_get(cs, "name"));
        const char *exp = json_string_value(json_object_get(cs, "expected"));
        const json_t *tools = json_object_get(cs, "tools");
        const char *pos = exp;
        size_t mi;
        json_t *m;
        json_array_foreach(json_object_get(cs, "messages"), mi, m) {
            if (strcmp(json_string_value(json_object_get(m, "role")), "assistant") != 0) continue;
            const char *turn = strstr(pos, "<|assistant|><think>");
            cr_assert_not_null(turn, "%s: assistant turn %zu not found", name, mi);
            turn += strlen("<|assistant|><think>");
            const char *end = find_any_role(turn);
            size_t len = end ? (size_t)(end - turn) : strlen(turn);
            pos = turn + len;
            n_turns++;
            /* what the turn says, read directly from the rendering */
            const char *close = strstr(turn, "</think>");
            cr_assert(close && close < turn + len);
            size_t want_rn = (size_t)(close - turn);
            const char *ans = close + strlen("</think>");
            const char *tc = strstr(ans, "<tool_call>");
            size_t want_tn = (tc && tc < turn + len ? (size_t)(tc - ans) : (size_t)(turn + len - ans));
            json_t *want_calls = json_array();
            size_t k;
            json_t *call;
            json_array_foreach(json_object_get(m, "tool_calls"), k, call) {
                json_t *f = json_object_get(call, "function");
                if (!f) f = call;
                json_array_append_new(want_calls, json_pack("{s:O, s:O}", "name", json_object_get(f, "name"),
                                                            "arguments", json_object_get(f, "arguments")));
            }
            for (uint64_t chunking = 0; chunking < 6; chunking++) {
                collect c;
                run(&c, turn, len, true, tools, chunking == 5 ? 1234567 : chunking);
                cr_assert_eq(c.rn, want_rn, "%s turn %zu chunking %d: reasoning '%s'", name, mi, (int)chunking, c.reasoning);
                cr_assert(memcmp(c.reasoning, turn, want_rn) == 0, "%s: reasoning differs", name);
                cr_assert_eq(c.tn, want_tn, "%s turn %zu chunking %d: text '%s'", name, mi, (int)chunking, c.text);
                cr_assert(memcmp(c.text, ans, want_tn) == 0, "%s: text differs", name);
                char *got = json_dumps(c.calls, JSON_COMPACT), *want = json_dumps(want_calls, JSON_COMPACT);
                cr_assert(json_equal(c.calls, want_calls), "%s turn %zu chunking %d:\n got %s\nwant %s", name, mi,
                          (int)chunking, got, want);
                free(got);
                free(want);
                cr_assert(!c.bad_utf8);
                done(&c);
            }
            n_calls += json_array_size(want_calls);
            json_decref(want_calls);
        }
    }
    cr_assert(n_calls >= 20, "fixtures should hold many tool calls (%zu)", n_calls);
    cr_log_info("recovered %zu tool calls from %zu assistant turns", n_calls, n_turns);
    json_decref(root);
}

#define RUN(c, s, reasoning, tools, ch) run(c, s, strlen(s), reasoning, tools, ch)

Test(output_parser, split_tags_and_utf8) {
    const char *s = "Let me think \xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80 about it</think>Answer: \xe4\xb8\xad<|user|>junk";
    for (uint64_t ch = 0; ch < 40; ch++) {
        collect c;
        RUN(&c, s, true, NULL, ch);
        cr_assert_str_eq(c.reasoning, "Let me think \xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80 about it");
        cr_assert_str_eq(c.text, "Answer: \xe4\xb8\xad");
        cr_assert_str_eq(c.end, "<|user|>");
        cr_assert(!c.bad_utf8, "chunking %d split a character", (int)ch);
        done(&c);
    }
}

Test(output_parser, holds_back_only_possible_tags) {
    collect c;
    memset(&c, 0, sizeof c);
    c.calls = json_array();
    nf_output_parser_opts o = {0};
    nf_output_parser *p = nf_output_parser_new(&o, on_event, &c);
    nf_output_parser_feed(p, "a < b and <", strlen("a < b and <"));
    cr_assert_eq(c.tn, strlen("a < b and "));
    nf_output_parser_feed(p, "b>x", 3);
    cr_assert_eq(c.tn, strlen("a < b and <b>x"));
    nf_output_parser_feed(p, "</thi", 5);
    cr_assert_eq(c.tn, strlen("a < b and <b>x"));
    nf_output_parser_finish(p);
    c.text[c.tn] = 0;
    cr_assert_str_eq(c.text, "a < b and <b>x</thi");
    nf_output_parser_free(p);
    done(&c);
}

Test(output_parser, tool_call_inside_unclosed_reasoning) {
    collect c;
    RUN(&c, "I need the weather<tool_call>get<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call><|observation|>",
        true, NULL, 1);
    cr_assert_str_eq(c.reasoning, "I need the weather");
    cr_assert_eq(json_array_size(c.calls), 1);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(c.calls, 0), "name")), "get");
    cr_assert_str_eq(c.end, "<|observation|>");
    done(&c);
}

Test(output_parser, twice_closed_think_and_interleaved) {
    collect c;
    RUN(&c, "r1</think>a</think>b<think>r2</think>c", true, NULL, 0);
    cr_assert_str_eq(c.reasoning, "r1r2");
    cr_assert_str_eq(c.text, "abc");
    done(&c);
    RUN(&c, "plain answer", false, NULL, 1);
    cr_assert_str_eq(c.text, "plain answer");
    cr_assert_eq(c.rn, 0);
    done(&c);
}

Test(output_parser, truncated_and_malformed_calls) {
    collect c;
    /* complete arguments, then the turn ends without </tool_call>: recovered */
    RUN(&c, "</think><tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value><|observation|>", true, NULL, 3);
    cr_assert_eq(json_array_size(c.calls), 1);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(json_array_get(c.calls, 0), "arguments"), "a")), 1);
    cr_assert_str_eq(c.end, "<|observation|>");
    done(&c);
    /* cut in the middle of a value at the end of generation: raw text, not a call */
    RUN(&c, "</think>ok<tool_call>f<arg_key>a</arg_key><arg_va", true, NULL, 1);
    cr_assert_eq(json_array_size(c.calls), 0);
    cr_assert_str_eq(c.text, "ok<tool_call>f<arg_key>a</arg_key><arg_va");
    done(&c);
    /* no name */
    RUN(&c, "<tool_call><arg_key>a</arg_key><arg_value>1</arg_value></tool_call>", false, NULL, 0);
    cr_assert_eq(json_array_size(c.calls), 0);
    cr_assert(strstr(c.text, "<tool_call>") != NULL);
    done(&c);
}

Test(output_parser, value_typing) {
    char *name;
    json_t *args;
    const char *body = "calc\n<arg_key> n </arg_key>\n<arg_value>123</arg_value><arg_key>s</arg_key><arg_value> abc </arg_value>"
                       "<arg_key>b</arg_key><arg_value>True</arg_value><arg_key>l</arg_key><arg_value> [1, {\"x\": null}] </arg_value>"
                       "<arg_key>q</arg_key><arg_value>\"quoted\"</arg_value><arg_key>id</arg_key><arg_value>007</arg_value>";
    cr_assert_eq(nf_parse_tool_call(body, strlen(body), NULL, &name, &args), 0, "%s", nf_error());
    cr_assert_str_eq(name, "calc");
    cr_assert_eq(json_integer_value(json_object_get(args, "n")), 123);
    cr_assert_str_eq(json_string_value(json_object_get(args, "s")), " abc ");
    cr_assert(json_is_true(json_object_get(args, "b")));
    cr_assert_eq(json_array_size(json_object_get(args, "l")), 2);
    cr_assert_str_eq(json_string_value(json_object_get(args, "q")), "quoted");
    cr_assert_str_eq(json_string_value(json_object_get(args, "id")), "007"); /* not valid JSON: kept */
    free(name);
    json_decref(args);
    /* with a schema, string parameters stay strings even when they look like JSON */
    json_error_t e;
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"calc\",\"parameters\":{\"properties\":"
                               "{\"n\":{\"type\":\"string\"},\"l\":{\"type\":[\"string\",\"null\"]}}}}}]", 0, &e);
    cr_assert_eq(nf_parse_tool_call(body, strlen(body), tools, &name, &args), 0);
    cr_assert_str_eq(json_string_value(json_object_get(args, "n")), "123");
    cr_assert_str_eq(json_string_value(json_object_get(args, "l")), " [1, {\"x\": null}] ");
    free(name);
    json_decref(args);
    json_decref(tools);
    /* JSON body form */
    const char *jb = " {\"name\": \"f\", \"arguments\": {\"a\": [1]}} ";
    cr_assert_eq(nf_parse_tool_call(jb, strlen(jb), NULL, &name, &args), 0);
    cr_assert_str_eq(name, "f");
    cr_assert_eq(json_array_size(json_object_get(args, "a")), 1);
    free(name);
    json_decref(args);
    /* no arguments at all */
    cr_assert_eq(nf_parse_tool_call("list_files", 10, NULL, &name, &args), 0);
    cr_assert_str_eq(name, "list_files");
    cr_assert_eq(json_object_size(args), 0);
    free(name);
    json_decref(args);
    const char *bad = "f<arg_key>a</arg_key>junk<arg_value>1</arg_value>";
    cr_assert_eq(nf_parse_tool_call(bad, strlen(bad), NULL, &name, &args), -1);
}

Test(output_parser, input_after_end_is_ignored) {
    collect c;
    RUN(&c, "</think>done<|endoftext|><tool_call>x</tool_call>more", true, NULL, 2);
    cr_assert_str_eq(c.text, "done");
    cr_assert_str_eq(c.end, "<|endoftext|>");
    cr_assert_eq(json_array_size(c.calls), 0);
    done(&c);
}
