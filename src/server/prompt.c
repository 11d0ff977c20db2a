/* prompt.c — a validated request → prompt token ids (chat template + tokenizer), plus the positions where
 * messages start, which the worker passes to the session as checkpoint marks: a later request that shares the
 * conversation up to one of those boundaries resumes from there (KDA state cannot be rewound, so a checkpoint
 * is the only way back to an earlier position). */
#include <stdlib.h>
#include <string.h>

#include "server/request.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "util/error.h"

#define NF_PROMPT_MARKS 4

static bool is_role_marker(const char *s, size_t n) {
    static const char *m[] = {"<|user|>", "<|assistant|>", "<|observation|>", "<|system|>", NULL};
    for (int i = 0; m[i]; i++)
        if (strlen(m[i]) == n && !memcmp(m[i], s, n)) return true;
    return false;
}

int nf_req_prompt(const nf_srv_request *r, const nf_tokenizer *tok, nf_srv_prompt *out, nf_srv_error *e) {
    memset(out, 0, sizeof *out);
    nf_chat_opts o = nf_chat_opts_default();
    o.enable_thinking = r->thinking;
    o.reasoning_effort = r->effort[0] ? r->effort : NULL;
    nf_prompt p;
    if (nf_chat_render(r->messages, r->tools_off ? NULL : r->tools, &o, &p) < 0)
        return nf_srv_err(e, 400, "invalid_request_error", "messages", "messages: %s", nf_error());
    nf_tokens t = {0};
    int64_t marks[64];
    int nm = 0;
    for (size_t i = 0; i < p.n_pieces; i++) {
        const nf_prompt_piece *pc = &p.pieces[i];
        const char *s = p.text + pc->off;
        bool sp = pc->special;
        if (sp && is_role_marker(s, pc->len) && t.n > 0) {
            if (nm == 64) {
                memmove(marks, marks + 1, 63 * sizeof *marks);
                nm--;
            }
            marks[nm++] = (int64_t)t.n;
        }
        if (nf_tokenize_pieces(tok, 1, &s, &pc->len, &sp, &t) < 0) {
            nf_prompt_free(&p);
            nf_tokens_free(&t);
            return nf_srv_err(e, 500, "api_error", NULL, "tokenizer: %s", nf_error());
        }
    }
    nf_prompt_free(&p);
    /* the last few boundaries before the end (the end itself is checkpointed by the session) */
    int first = nm > NF_PROMPT_MARKS ? nm - NF_PROMPT_MARKS : 0;
    out->n_marks = 0;
    out->marks = nf_xmalloc(NF_PROMPT_MARKS * sizeof *out->marks);
    for (int i = first; i < nm; i++)
        if (marks[i] < (int64_t)t.n && (!out->n_marks || marks[i] > out->marks[out->n_marks - 1]))
            out->marks[out->n_marks++] = marks[i];
    out->ids = t.ids;
    out->n = t.n;
    return 0;
}

void nf_srv_prompt_free(nf_srv_prompt *p) {
    free(p->ids);
    free(p->marks);
    memset(p, 0, sizeof *p);
}
