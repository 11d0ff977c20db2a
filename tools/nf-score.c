/* nf-score — teacher-forced scoring of a reference set (JSONL) with one model, or two side by side.
 *
 *   nf-score -m MODEL.gguf --set SET.jsonl [--model-b B.gguf] [--every K] [--limit N] [--json OUT.json]
 *            [--check-ref-nll TOL] [--expect-nll X --tol T] [--threads N] [--backend cpu|cuda] [--quiet]
 *
 * Per case and in total: average NLL of the continuations, first-token matches, greedy prefix lengths (see
 * src/score/score.h for the definitions), the reference's NLL when the set has it, and with --model-b the same
 * for B plus the position-by-position argmax agreement of A and B. Checks (exit status 3 when one fails):
 * --check-ref-nll TOL: |average NLL - the set's reference average NLL| <= TOL (A, and B when given);
 * --expect-nll X --tol T: |average NLL of A - X| <= T (a recorded baseline). The logic is in src/score/. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/backend_cpu.h"
#ifdef NF_CUDA
#include "cuda/backend_cuda.h"
#endif
#include "model/backend.h"
#include "model/model.h"
#include "model/state.h"
#include "score/score.h"
#include "text/tokenizer.h"
#include "util/error.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: nf-score -m MODEL.gguf --set SET.jsonl [options]\n"
            "\n"
            "Teacher-forced scoring of a reference set (JSONL: prompt / continuation as token ids or text,\n"
            "optional ref_nll, ref_greedy_prefix, ref_topk): average NLL, first-token matches, greedy prefix\n"
            "length per case and in total.\n"
            "\n"
            "options:\n"
            "  -m, --model PATH       model A (GGUF)\n"
            "  -s, --set PATH         reference set (JSONL, docs/quality.md)\n"
            "  -b, --model-b PATH     also score model B and compare A with B\n"
            "      --every K          score every K-th case only (0, K, 2K, ...)\n"
            "      --limit N          at most N cases (after --every)\n"
            "      --json PATH        write per-case results and the summary as JSON\n"
            "      --check-ref-nll T  fail (exit 3) unless |average NLL - reference NLL| <= T\n"
            "      --expect-nll X     with --tol T: fail (exit 3) unless |average NLL of A - X| <= T\n"
            "      --tol T\n"
            "      --threads N        CPU threads (default: NF_THREADS or all cores)\n"
            "      --backend B        cpu (default) or cuda (GPU builds only: make cuda)\n"
            "  -q, --quiet            summary only (no per-case table)\n"
            "  -h, --help             this help\n");
}

typedef struct {
    const char *path;
    nf_model *m;
    nf_backend *be;
    nf_state *st;
    nf_tokenizer *tok;
    nf_score_result *res;   /* [n cases] */
    double nll_sum, seconds, topk_sum, bpt, nll_sum_ref; /* nll_sum_ref: over the cases with a ref_nll */
    long n_tok_ref;
    long n_tok, n_pos_tok, topk_n, top1, first, prefix_sum, full, ref_prefix_eq;
} side;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int open_side(side *s, const char *backend, int threads) {
    s->m = nf_model_load(s->path);
    if (!s->m) return -1;
#ifdef NF_CUDA
    if (!strcmp(backend, "cuda")) s->be = nf_backend_cuda_create(s->m, 0);
    else
#endif
        s->be = nf_cpu_backend_create(s->m, threads);
    (void)backend;
    if (!s->be) return -1;
    s->st = nf_backend_state_create(s->be, 1024);
    if (!s->st) return -1;
    s->tok = nf_tokenizer_from_gguf(s->m->file);   /* may be NULL: then the set must give token ids */
    s->bpt = nf_score_weight_bytes_per_token(s->m);
    return 0;
}

static void close_side(side *s, int n) {
    if (s->res)
        for (int i = 0; i < n; i++) nf_score_result_free(&s->res[i]);
    free(s->res);
    nf_tokenizer_free(s->tok);
    nf_state_free(s->st);
    nf_backend_free(s->be);
    nf_model_free(s->m);
}

static void fmt_bytes(double b, char *buf, size_t n) {
    if (b >= 1e9) snprintf(buf, n, "%.2f GB", b / 1e9);
    else if (b >= 1e6) snprintf(buf, n, "%.2f MB", b / 1e6);
    else snprintf(buf, n, "%.1f kB", b / 1e3);
}

int main(int argc, char **argv) {
    nf_progname = "nf-score";
    const char *set_path = NULL, *json_path = NULL, *backend = "cpu";
    side A = {0}, B = {0};
    int every = 1, limit = 0, threads = 0, quiet = 0;
    double check_ref = -1, expect = NAN, tol = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VAL() do { if (!val) nf_die("%s needs a value (see --help)", a); i++; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { NEED_VAL(); A.path = val; }
        else if (!strcmp(a, "-b") || !strcmp(a, "--model-b")) { NEED_VAL(); B.path = val; }
        else if (!strcmp(a, "-s") || !strcmp(a, "--set")) { NEED_VAL(); set_path = val; }
        else if (!strcmp(a, "--json")) { NEED_VAL(); json_path = val; }
        else if (!strcmp(a, "--backend")) { NEED_VAL(); backend = val; }
        else if (!strcmp(a, "--every")) { NEED_VAL(); every = atoi(val); }
        else if (!strcmp(a, "--limit")) { NEED_VAL(); limit = atoi(val); }
        else if (!strcmp(a, "--threads")) { NEED_VAL(); threads = atoi(val); }
        else if (!strcmp(a, "--check-ref-nll")) { NEED_VAL(); check_ref = atof(val); }
        else if (!strcmp(a, "--expect-nll")) { NEED_VAL(); expect = atof(val); }
        else if (!strcmp(a, "--tol")) { NEED_VAL(); tol = atof(val); }
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) quiet = 1;
        else nf_die("unknown option '%s' (see --help)", a);
#undef NEED_VAL
    }
    if (!A.path || !set_path) {
        usage(stderr);
        return 2;
    }
    if (every < 1) nf_die("--every must be >= 1");
    if (!isnan(expect) && tol < 0) nf_die("--expect-nll needs --tol");
    if (strcmp(backend, "cpu") && strcmp(backend, "cuda")) nf_die("unknown backend '%s' (cpu or cuda)", backend);
#ifndef NF_CUDA
    if (!strcmp(backend, "cuda")) nf_die("this build has no CUDA backend; build with `make cuda` and use build/cuda/nf-score");
#endif
    if (open_side(&A, backend, threads) < 0) nf_die("%s: %s", A.path, nf_error());
    if (B.path && open_side(&B, backend, threads) < 0) nf_die("%s: %s", B.path, nf_error());
    nf_score_set set;
    if (nf_score_set_load(set_path, A.tok, &set) < 0) nf_die("%s", nf_error());
    int *pick = malloc((size_t)set.n * sizeof *pick), n = 0;
    for (int i = 0; i < set.n; i += every)
        if (!limit || n < limit) pick[n++] = i;
    side *sides[2] = {&A, B.path ? &B : NULL};
    double t0 = now_s();
    for (int s = 0; s < 2; s++) {
        side *S = sides[s];
        if (!S) continue;
        S->res = calloc((size_t)n, sizeof *S->res);
        for (int k = 0; k < n; k++) {
            const nf_score_case *c = &set.cases[pick[k]];
            nf_score_result *r = &S->res[k];
            if (nf_score_case_run(S->be, S->st, S->m, c, r) < 0) nf_die("%s: %s", S->path, nf_error());
            S->nll_sum += r->nll_sum;
            if (!isnan(c->ref_nll)) S->nll_sum_ref += r->nll_sum, S->n_tok_ref += r->n_tok;
            S->n_tok += r->n_tok;
            S->seconds += r->seconds;
            S->n_pos_tok += c->n_prompt + c->n_cont - 1;
            S->first += r->first_match;
            S->prefix_sum += r->greedy_prefix;
            S->full += r->greedy_prefix == c->n_cont;
            S->topk_sum += r->topk_abs_dlp_sum;
            S->topk_n += r->topk_n;
            S->top1 += r->top1_agree;
            S->ref_prefix_eq += c->ref_greedy_prefix >= 0 && r->greedy_prefix == c->ref_greedy_prefix;
        }
    }
    /* reference aggregate over the scored cases */
    double ref_sum = 0;
    long ref_n = 0, ref_cases = 0;
    for (int k = 0; k < n; k++) {
        const nf_score_case *c = &set.cases[pick[k]];
        if (isnan(c->ref_nll)) continue;
        ref_sum += c->ref_nll * c->n_cont;
        ref_n += c->n_cont;
        ref_cases++;
    }
    double ref_avg = ref_n ? ref_sum / (double)ref_n : NAN;

    if (!quiet) {
        printf("%-8s %6s %5s %9s %9s %5s %6s", "case", "prompt", "cont", "ref nll", "nll A", "1st A", "pre A");
        if (B.path) printf(" %9s %5s %6s %7s", "nll B", "1st B", "pre B", "A=B");
        printf("\n");
        for (int k = 0; k < n; k++) {
            const nf_score_case *c = &set.cases[pick[k]];
            const nf_score_result *a = &A.res[k];
            char ref[16] = "-";
            if (!isnan(c->ref_nll)) snprintf(ref, sizeof ref, "%.4f", c->ref_nll);
            printf("%-8.8s %6d %5d %9s %9.4f %5s %3d/%-2d", c->id, c->n_prompt, c->n_cont, ref, a->nll_sum / a->n_tok,
                   a->first_match ? "yes" : "no", a->greedy_prefix, c->n_cont);
            if (B.path) {
                const nf_score_result *b = &B.res[k];
                int same = 0;
                for (int i = 0; i < c->n_cont; i++) same += a->argmax[i] == b->argmax[i];
                printf(" %9.4f %5s %3d/%-2d %3d/%-3d", b->nll_sum / b->n_tok, b->first_match ? "yes" : "no",
                       b->greedy_prefix, c->n_cont, same, c->n_cont);
            }
            printf("\n");
        }
        printf("\n");
    }
    int failed = 0;
    for (int s = 0; s < 2; s++) {
        side *S = sides[s];
        if (!S) continue;
        double avg = S->nll_sum / (double)S->n_tok;
        double avg_ref = S->n_tok_ref ? S->nll_sum_ref / (double)S->n_tok_ref : NAN; /* same cases as ref_avg */
        char bb[32];
        fmt_bytes(S->bpt, bb, sizeof bb);
        printf("%s %s: %d cases, %ld continuation tokens\n", s ? "B" : "A", S->path, n, S->n_tok);
        printf("  average NLL        %.6f", avg);
        if (ref_n && ref_cases == n) printf("   (reference %.6f, difference %+.2e)", ref_avg, avg - ref_avg);
        else if (ref_n) printf("\n  on the %ld cases with a reference: %.6f (reference %.6f, difference %+.2e)", ref_cases, avg_ref, ref_avg, avg_ref - ref_avg);
        printf("\n  first-token match  %ld/%d\n", S->first, n);
        printf("  greedy prefix      mean %.2f tokens, %ld/%d cases reproduce the whole continuation", (double)S->prefix_sum / n,
               S->full, n);
        printf("\n");
        if (S->topk_n)
            printf("  reference top-k    mean |dlogprob| %.5f, argmax = reference top-1 at %ld/%ld positions\n",
                   S->topk_sum / (double)S->topk_n, S->top1, S->n_tok);
        printf("  weight bytes/token %s (%.0f)\n", bb, S->bpt);
        printf("  speed              %.0f tokens/s (%ld teacher-forced positions in %.2f s)\n",
               S->seconds > 0 ? (double)S->n_pos_tok / S->seconds : 0, S->n_pos_tok, S->seconds);
        if (check_ref >= 0) {
            if (!ref_n) {
                printf("  CHECK FAILED: --check-ref-nll: the set has no ref_nll\n");
                failed = 1;
            } else if (!(fabs(avg_ref - ref_avg) <= check_ref)) {
                printf("  CHECK FAILED: |NLL - reference| = %.3g > %.3g\n", fabs(avg_ref - ref_avg), check_ref);
                failed = 1;
            } else printf("  check: |NLL - reference| = %.3g <= %.3g\n", fabs(avg_ref - ref_avg), check_ref);
        }
        if (s == 0 && !isnan(expect)) {
            if (!(fabs(avg - expect) <= tol)) {
                printf("  CHECK FAILED: |NLL - expected %.6f| = %.3g > %.3g\n", expect, fabs(avg - expect), tol);
                failed = 1;
            } else printf("  check: |NLL - expected %.6f| = %.3g <= %.3g\n", expect, fabs(avg - expect), tol);
        }
    }
    long same = 0;
    if (B.path) {
        for (int k = 0; k < n; k++)
            for (int i = 0; i < set.cases[pick[k]].n_cont; i++) same += A.res[k].argmax[i] == B.res[k].argmax[i];
        printf("A vs B: NLL difference %+.6f, argmax agreement %.2f%% (%ld/%ld continuation positions)\n",
               B.nll_sum / (double)B.n_tok - A.nll_sum / (double)A.n_tok, 100.0 * (double)same / (double)A.n_tok, same,
               A.n_tok);
    }
    (void)t0;
    if (json_path) {
        FILE *f = fopen(json_path, "w");
        if (!f) nf_die("cannot create %s", json_path);
        fprintf(f, "{\"set\": \"%s\", \"n_cases\": %d, \"every\": %d", set_path, n, every);
        if (ref_n) fprintf(f, ", \"reference_nll\": %.8f", ref_avg);
        for (int s = 0; s < 2; s++) {
            side *S = sides[s];
            if (!S) continue;
            fprintf(f, ",\n\"%s\": {\"model\": \"%s\", \"nll\": %.8f, \"tokens\": %ld, \"first_match\": %ld, "
                       "\"greedy_prefix_mean\": %.4f, \"full_match\": %ld, \"weight_bytes_per_token\": %.0f",
                    s ? "b" : "a", S->path, S->nll_sum / (double)S->n_tok, S->n_tok, S->first,
                    (double)S->prefix_sum / n, S->full, S->bpt);
            if (S->n_tok_ref) fprintf(f, ", \"nll_on_ref_cases\": %.8f", S->nll_sum_ref / (double)S->n_tok_ref);
            if (S->topk_n)
                fprintf(f, ", \"topk_mean_abs_dlogprob\": %.6f, \"top1_agree\": %ld", S->topk_sum / (double)S->topk_n, S->top1);
            fprintf(f, ", \"cases\": [");
            for (int k = 0; k < n; k++) {
                const nf_score_case *c = &set.cases[pick[k]];
                const nf_score_result *r = &S->res[k];
                fprintf(f, "%s\n  {\"id\": \"%s\", \"n_prompt\": %d, \"n_cont\": %d, \"nll\": %.8f, \"first_match\": %s, "
                           "\"greedy_prefix\": %d",
                        k ? "," : "", c->id, c->n_prompt, c->n_cont, r->nll_sum / r->n_tok,
                        r->first_match ? "true" : "false", r->greedy_prefix);
                if (!isnan(c->ref_nll)) fprintf(f, ", \"ref_nll\": %.8f", c->ref_nll);
                if (c->ref_greedy_prefix >= 0) fprintf(f, ", \"ref_greedy_prefix\": %d", c->ref_greedy_prefix);
                fprintf(f, "}");
            }
            fprintf(f, "]}");
        }
        if (B.path) fprintf(f, ",\n\"argmax_agreement_ab\": %.6f", (double)same / (double)A.n_tok);
        fprintf(f, "}\n");
        if (fclose(f) != 0) nf_die("%s: write failed", json_path);
    }
    free(pick);
    close_side(&A, n);
    if (B.path) close_side(&B, n);
    nf_score_set_free(&set);
    return failed ? 3 : 0;
}
