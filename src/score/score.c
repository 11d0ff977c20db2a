/* score.c — reference-set loading and teacher-forced scoring (see score.h). */
#include "score/score.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats/formats.h"
#include "model/forward.h"
#include "model/layout.h"
#include "util/error.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void case_free(nf_score_case *c) {
    free(c->id);
    free(c->prompt);
    free(c->cont);
    free(c->ref_ids);
    free(c->ref_lp);
}

void nf_score_set_free(nf_score_set *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) case_free(&s->cases[i]);
    free(s->cases);
    s->cases = NULL;
    s->n = 0;
}

/* ids from "<name>_tokens" (array of integers) or "<name>" (text). *n may be 0. */
static int get_ids(json_t *o, const char *name, const nf_tokenizer *tok, int32_t **ids, int *n, const char *where) {
    char key[64];
    snprintf(key, sizeof key, "%s_tokens", name);
    json_t *a = json_object_get(o, key);
    if (a) {
        if (!json_is_array(a)) return nf_fail("%s: \"%s\" is not an array", where, key);
        size_t k = json_array_size(a);
        *ids = malloc((k ? k : 1) * sizeof **ids);
        if (!*ids) return nf_fail("out of memory");
        for (size_t i = 0; i < k; i++) {
            json_t *v = json_array_get(a, i);
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
                return nf_fail("%s: \"%s\"[%zu] is not a token id", where, key, i);
            (*ids)[i] = (int32_t)json_integer_value(v);
        }
        *n = (int)k;
        return 0;
    }
    json_t *t = json_object_get(o, name);
    if (!t) return nf_fail("%s: neither \"%s\" nor \"%s\"", where, key, name);
    if (!json_is_string(t)) return nf_fail("%s: \"%s\" is not a string", where, name);
    if (!tok) return nf_fail("%s: \"%s\" is text but no tokenizer is available (give \"%s\")", where, name, key);
    nf_tokens out = {0};
    if (nf_tokenize_text(tok, json_string_value(t), json_string_length(t), &out) < 0) return -1;
    *ids = out.ids ? out.ids : malloc(sizeof **ids);
    *n = (int)out.n;
    return 0;
}

static int parse_case(json_t *o, const nf_tokenizer *tok, nf_score_case *c, const char *where, int index) {
    memset(c, 0, sizeof *c);
    c->ref_nll = NAN;
    c->ref_greedy_prefix = -1;
    if (!json_is_object(o)) return nf_fail("%s: not a JSON object", where);
    json_t *id = json_object_get(o, "id");
    char buf[32];
    snprintf(buf, sizeof buf, "case%d", index);
    c->id = strdup(json_is_string(id) ? json_string_value(id) : buf);
    if (get_ids(o, "prompt", tok, &c->prompt, &c->n_prompt, where) < 0) return -1;
    if (get_ids(o, "continuation", tok, &c->cont, &c->n_cont, where) < 0) return -1;
    if (c->n_prompt < 1) return nf_fail("%s: empty prompt", where);
    if (c->n_cont < 1) return nf_fail("%s: empty continuation", where);
    json_t *v = json_object_get(o, "ref_nll");
    if (v) {
        if (!json_is_number(v)) return nf_fail("%s: \"ref_nll\" is not a number", where);
        c->ref_nll = json_number_value(v);
    }
    v = json_object_get(o, "ref_greedy_prefix");
    if (v) {
        if (!json_is_integer(v)) return nf_fail("%s: \"ref_greedy_prefix\" is not an integer", where);
        c->ref_greedy_prefix = (int)json_integer_value(v);
    }
    json_t *tk = json_object_get(o, "ref_topk");
    if (tk) {
        if (!json_is_array(tk) || (int)json_array_size(tk) != c->n_cont)
            return nf_fail("%s: \"ref_topk\" must hold one list per continuation token (%d)", where, c->n_cont);
        json_t *row0 = json_array_get(tk, 0);
        int k = json_is_array(row0) ? (int)json_array_size(row0) : 0;
        if (k < 1) return nf_fail("%s: \"ref_topk\"[0] is not a non-empty list", where);
        c->ref_k = k;
        c->ref_ids = malloc((size_t)c->n_cont * k * sizeof *c->ref_ids);
        c->ref_lp = malloc((size_t)c->n_cont * k * sizeof *c->ref_lp);
        if (!c->ref_ids || !c->ref_lp) return nf_fail("out of memory");
        for (int i = 0; i < c->n_cont; i++) {
            json_t *row = json_array_get(tk, i);
            if (!json_is_array(row) || (int)json_array_size(row) != k)
                return nf_fail("%s: \"ref_topk\"[%d] must hold %d [id, logprob] pairs", where, i, k);
            for (int j = 0; j < k; j++) {
                json_t *p = json_array_get(row, j);
                json_t *a = json_array_get(p, 0), *b = json_array_get(p, 1);
                if (!json_is_array(p) || json_array_size(p) != 2 || !json_is_integer(a) || !json_is_number(b) ||
                    json_integer_value(a) < 0 || json_integer_value(a) > INT32_MAX)
                    return nf_fail("%s: \"ref_topk\"[%d][%d] is not [id, logprob]", where, i, j);
                c->ref_ids[i * k + j] = (int32_t)json_integer_value(a);
                c->ref_lp[i * k + j] = (float)json_number_value(b);
            }
        }
    }
    return 0;
}

int nf_score_set_load(const char *path, const nf_tokenizer *tok, nf_score_set *out) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "r");
    if (!f) return nf_fail("cannot open %s", path);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, alloc = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        char *p = line;
        while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') p++;
        if (!*p) continue;
        char where[600];
        snprintf(where, sizeof where, "%.500s:%d", path, lineno);
        json_error_t je;
        json_t *o = json_loads(p, 0, &je);
        if (!o) {
            nf_fail("%s: invalid JSON: %s", where, je.text);
            goto fail;
        }
        if (out->n == alloc) {
            alloc = alloc ? 2 * alloc : 64;
            nf_score_case *nc = realloc(out->cases, (size_t)alloc * sizeof *nc);
            if (!nc) {
                json_decref(o);
                nf_fail("out of memory");
                goto fail;
            }
            out->cases = nc;
        }
        int rc = parse_case(o, tok, &out->cases[out->n], where, out->n);
        out->n++;
        json_decref(o);
        if (rc < 0) goto fail;
    }
    free(line);
    fclose(f);
    if (out->n == 0) return nf_fail("%s: no cases", path);
    return 0;
fail:
    free(line);
    fclose(f);
    nf_score_set_free(out);
    return -1;
}

void nf_score_result_free(nf_score_result *r) {
    if (!r) return;
    free(r->argmax);
    r->argmax = NULL;
}

int nf_score_case_run(nf_backend *be, nf_state *st, const nf_model *m, const nf_score_case *c, nf_score_result *r) {
    memset(r, 0, sizeof *r);
    const int64_t V = m->hp.n_vocab;
    int64_t n = (int64_t)c->n_prompt + c->n_cont - 1;  /* the last continuation token is only a target */
    int32_t *ids = malloc((size_t)(n + 1) * sizeof *ids);
    /* logits of the positions that predict continuation tokens: the last prompt position onwards */
    float *logits = malloc((size_t)n * V * sizeof(float));
    r->argmax = malloc((size_t)c->n_cont * sizeof *r->argmax);
    if (!ids || !logits || !r->argmax) {
        free(ids);
        free(logits);
        return nf_fail("%s: out of memory for %lld positions", c->id, (long long)n);
    }
    memcpy(ids, c->prompt, (size_t)c->n_prompt * sizeof *ids);
    memcpy(ids + c->n_prompt, c->cont, (size_t)(c->n_cont - 1) * sizeof *ids);
    ids[n] = c->cont[c->n_cont - 1];
    for (int64_t i = 0; i <= n; i++)
        if (ids[i] < 0 || ids[i] >= V) {
            free(ids);
            free(logits);
            return nf_fail("%s: token id %d >= vocabulary size %lld", c->id, ids[i], (long long)V);
        }
    double t0 = now_s();
    nf_state_reset(st);
    if (nf_state_reserve(st, n) < 0 || nf_prefill(be, st, ids, n, 0, logits, 1, NULL) < 0) {
        free(ids);
        free(logits);
        return nf_fail_prefix("%s", c->id);
    }
    r->seconds = now_s() - t0;
    bool prefix_open = true;
    for (int i = 0; i < c->n_cont; i++) {
        const float *L = logits + (size_t)(c->n_prompt - 1 + i) * V;
        float mx = L[0];
        int32_t am = 0;
        for (int64_t v = 1; v < V; v++)
            if (L[v] > mx) mx = L[v], am = (int32_t)v;
        double s = 0;
        for (int64_t v = 0; v < V; v++) s += exp((double)L[v] - mx);
        double lse = mx + log(s);
        r->nll_sum -= (double)L[c->cont[i]] - lse;
        r->argmax[i] = am;
        if (i == 0) r->first_match = am == c->cont[0];
        if (prefix_open && am == c->cont[i]) r->greedy_prefix++;
        else prefix_open = false;
        if (c->ref_k) {
            const int32_t *ri = c->ref_ids + (size_t)i * c->ref_k;
            const float *rl = c->ref_lp + (size_t)i * c->ref_k;
            for (int j = 0; j < c->ref_k; j++) {
                if (ri[j] >= V) continue;
                r->topk_abs_dlp_sum += fabs((double)L[ri[j]] - lse - rl[j]);
                r->topk_n++;
            }
            r->top1_agree += am == ri[0];
        }
    }
    r->n_tok = c->n_cont;
    free(ids);
    free(logits);
    return 0;
}

double nf_score_weight_bytes_per_token(const nf_model *m) {
    int n = 0;
    nf_layout_tensor *lts = nf_layout_tensors_alloc(&m->hp, &n);
    if (!lts) return 0;
    double b = 0;
    for (int i = 0; i < n; i++) {
        if (lts[i].mtp) continue;
        const nf_tensor *t = nf_layout_bound(m, &lts[i]);   /* bound tensors: files and synthetic models */
        if (!t || !t->data) continue;
        double sz = (double)nf_tensor_bytes(t);
        if (lts[i].role == NF_ROLE_EMBD) sz = (double)nf_row_bytes(t->type, t->ne[0]);
        else if (lts[i].role == NF_ROLE_EXP_GATE || lts[i].role == NF_ROLE_EXP_UP || lts[i].role == NF_ROLE_EXP_DOWN)
            sz *= (double)m->hp.n_expert_used / (double)m->hp.n_expert;
        b += sz;
    }
    free(lts);
    return b;
}
