/* fuzz_server_request.c — libFuzzer target for nf-server request parsing.
 *
 * The input's first byte picks the API (Anthropic Messages, Chat Completions, Responses; count_tokens mode on
 * bit 2); the rest is the HTTP body. Properties: parsing never crashes or leaks; a rejected request always has
 * a 4xx status, a type and a non-empty message, and its error body is valid JSON in the API's shape; an
 * accepted request renders through the chat template (or fails cleanly), and formatting a finished response
 * for it yields valid JSON. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/api.h"
#include "server/request.h"
#include "text/chat_template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    nf_api api = (nf_api)(data[0] % 3);
    bool count_only = (data[0] >> 2) & 1;
    nf_srv_request r;
    nf_srv_error e;
    if (nf_req_parse(api, (const char *)data + 1, size - 1, count_only, &r, &e) < 0) {
        if (e.status < 400 || e.status >= 500 || !e.type[0] || !e.message[0]) abort();
        char *body = nf_error_json(api, &e);
        json_t *v = json_loads(body, 0, NULL);
        if (!v) abort();
        json_decref(v);
        free(body);
        return 0;
    }
    nf_chat_opts o = nf_chat_opts_default();
    o.enable_thinking = r.thinking;
    nf_prompt p;
    if (nf_chat_render(r.messages, r.tools_off ? NULL : r.tools, &o, &p) == 0) nf_prompt_free(&p);
    /* format a small finished response for it */
    r.stream = false;
    nf_resp resp;
    nf_resp_init(&resp, &r, 10);
    nf_ev ev = {.kind = NF_EV_TEXT, .text = (char *)"ok", .len = 2};
    nf_resp_event(&resp, &ev, NULL);
    nf_job_result res = {.finish = NF_FIN_STOP, .prompt_tokens = 10, .completion_tokens = 1};
    nf_buf out = {0};
    nf_resp_end(&resp, &res, &out);
    json_t *v = json_loadb(out.s, out.n, 0, NULL);
    if (!v) abort();
    json_decref(v);
    nf_buf_free(&out);
    nf_resp_free(&resp);
    nf_req_free(&r);
    return 0;
}
