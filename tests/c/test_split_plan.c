/* test_split_plan.c — the layer-split planner (model/split_plan.h) and its options (app/split_args.h), on the
 * CPU: the plan accounts for every weight byte once and for the state bytes a stage's state really allocates;
 * `auto` finds the split whose largest stage is smallest (checked against every split of the fixture); a plan
 * that does not fit a device is refused naming the stage; bad --gpus / --split values are refused. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/split_args.h"
#include "convert/convert.h"
#include "model/model.h"
#include "model/split_plan.h"
#include "model/state.h"
#include "util/error.h"

static char path[128];
static nf_model *model;

static void setup(void) {
    snprintf(path, sizeof path, "/tmp/nf-test-split-%d.gguf", (int)getpid());
    nf_convert_opts o = {.hf_dir = "tests/data/fixtures/shared", .out_path = path, .recipe = "f32", .n_threads = 2,
                         .quiet = true, .no_tokenizer = true};
    cr_assert_eq(nf_convert(&o, NULL), 0, "convert: %s", nf_error());
    model = nf_model_load(path);
    cr_assert_not_null(model, "%s", nf_error());
}

static void teardown(void) {
    nf_model_free(model);
    unlink(path);
}

TestSuite(split_plan, .init = setup, .fini = teardown);

static double stage_cost(const nf_stage_plan *s) { return s->weight_bytes + s->state_bytes; }
static double largest(const nf_split_plan *p) {
    double w = 0;
    for (int k = 0; k < p->n_stages; k++)
        if (stage_cost(&p->stage[k]) > w) w = stage_cost(&p->stage[k]);
    return w;
}

Test(split_plan, plan_counts_every_weight_and_the_real_state) {
    const nf_hparams *hp = &model->hp;
    const int64_t ctx = 300;
    int starts[] = {3, 5};
    nf_split_plan p;
    cr_assert_eq(nf_split_plan_list(model, 2, starts, ctx, &p), 0, "%s", nf_error());
    cr_assert_eq(p.n_stages, 3);
    double w = 0, s = 0;
    for (int k = 0; k < 3; k++) {
        w += p.stage[k].weight_bytes;
        s += p.stage[k].state_bytes;
        nf_state *st = nf_state_create_layers(hp, ctx, p.stage[k].layer_begin, p.stage[k].layer_end);
        cr_assert_not_null(st);
        cr_assert_float_eq(p.stage[k].state_bytes, (double)nf_state_bytes(st), 0.5, "stage %d", k);
        nf_state_free(st);
    }
    cr_assert_float_eq(w, (double)nf_model_tensor_bytes(model, false), 0.5);
    nf_state *full = nf_state_create(hp, ctx);
    cr_assert_float_eq(s, (double)nf_state_bytes(full), 0.5);
    nf_state_free(full);
    cr_assert(p.stage[0].layer_begin == 0 && p.stage[0].layer_end == 3 && p.stage[2].layer_end == hp->n_layer);
    /* the embedding is on stage 0, the head on the last */
    cr_assert_gt(p.stage[0].weight_bytes, nf_layer_weight_bytes(model, 0) + nf_layer_weight_bytes(model, 1) +
                                              nf_layer_weight_bytes(model, 2));
    cr_assert_eq(nf_split_plan_list(model, 2, (int[]){5, 3}, ctx, &p), -1);
    cr_assert_eq(nf_split_plan_list(model, 1, (int[]){hp->n_layer}, ctx, &p), -1);
}

Test(split_plan, auto_minimises_the_largest_stage) {
    const int L = model->hp.n_layer;
    const int64_t ctxs[] = {16, 4096, 1 << 20}; /* from weight-dominated to state-dominated */
    for (int ci = 0; ci < 3; ci++)
        for (int n = 2; n <= 3; n++) {
            nf_split_plan a;
            cr_assert_eq(nf_split_plan_auto(model, n, ctxs[ci], &a), 0, "%s", nf_error());
            cr_assert_eq(a.n_stages, n);
            double best = -1;
            for (int s1 = 1; s1 < L; s1++)
                for (int s2 = n == 3 ? s1 + 1 : L; s2 <= L; s2++) {
                    if (n == 3 && s2 == L) continue;
                    nf_split_plan p;
                    int starts[2] = {s1, s2};
                    cr_assert_eq(nf_split_plan_list(model, n - 1, starts, ctxs[ci], &p), 0, "%s", nf_error());
                    if (best < 0 || largest(&p) < best) best = largest(&p);
                }
            cr_assert_float_eq(largest(&a), best, best * 1e-12, "ctx %lld, %d stages: auto %.0f, best %.0f",
                               (long long)ctxs[ci], n, largest(&a), best);
        }
    nf_split_plan p;
    cr_assert_eq(nf_split_plan_auto(model, L + 1, 16, &p), -1);
    cr_assert(strstr(nf_error(), "stages for a model of"), "%s", nf_error());
    cr_assert_eq(nf_split_plan_auto(model, 1, 16, &p), 0);
    cr_assert(p.n_stages == 1 && p.stage[0].layer_end == L);
}

Test(split_plan, a_stage_that_does_not_fit_is_refused) {
    nf_split_plan p;
    cr_assert_eq(nf_split_plan_auto(model, 2, 1024, &p), 0);
    const double need1 = stage_cost(&p.stage[1]);
    double free_b[2] = {1e12, need1 + 10};
    int dev[2] = {0, 3};
    cr_assert_eq(nf_split_plan_check(&p, free_b, dev, 0), 0, "%s", nf_error());
    cr_assert_eq(nf_split_plan_check(&p, free_b, dev, 100), -1);
    cr_assert(strstr(nf_error(), "stage 1 (layers") && strstr(nf_error(), "device 3"), "%s", nf_error());
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    nf_split_plan_print(f, &p, free_b, dev);
    fclose(f);
    cr_assert(strstr(buf, "memory plan: 2 stages, state at 1024 tokens") && strstr(buf, "stage 1: layers"), "%s", buf);
    free(buf);
}

static int take_all(nf_split_args *a, int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (nf_split_args_take(a, argc, argv, &i) < 0) return -1;
    return nf_split_args_check(a);
}

static void refused(const char *opt, const char *val, const char *needle) {
    nf_split_args a;
    nf_split_args_init(&a);
    char *argv[] = {"x", (char *)opt, (char *)val};
    cr_assert_eq(take_all(&a, 3, argv), -1, "%s %s accepted", opt, val);
    cr_assert(strstr(nf_error(), needle), "'%s' lacks '%s'", nf_error(), needle);
}

Test(split_plan, options) {
    nf_split_args a;
    nf_split_args_init(&a);
    cr_assert_eq(nf_split_args_stages(&a), 1);
    char *argv1[] = {"x", "--gpus", "3", "--other", "--split", "2,5"};
    int i = 3;
    cr_assert_eq(nf_split_args_take(&a, 6, argv1, &i), 0); /* not ours */
    cr_assert_eq(take_all(&a, 3, argv1), 0, "%s", nf_error());
    i = 4;
    cr_assert_eq(nf_split_args_take(&a, 6, argv1, &i), 1);
    cr_assert_eq(i, 5);
    cr_assert_eq(nf_split_args_check(&a), 0, "%s", nf_error());
    cr_assert_eq(nf_split_args_stages(&a), 3);
    nf_split_plan p;
    cr_assert_eq(nf_split_args_plan(&a, model, 64, &p), 0, "%s", nf_error());
    cr_assert(p.stage[1].layer_begin == 2 && p.stage[2].layer_begin == 5);

    nf_split_args_init(&a);
    char *argv2[] = {"x", "--gpus", "2", "--split", "auto"};
    cr_assert_eq(take_all(&a, 5, argv2), 0, "%s", nf_error());
    cr_assert_eq(nf_split_args_stages(&a), 2);
    cr_assert_eq(nf_split_args_plan(&a, model, 64, &p), 0, "%s", nf_error());
    cr_assert_eq(p.n_stages, 2);

    nf_split_args_init(&a);
    char *argv3[] = {"x", "--gpus", "2", "--split", "2,5"};
    cr_assert_eq(take_all(&a, 5, argv3), -1);
    cr_assert(strstr(nf_error(), "make 3 stages, but --gpus asks for 2"), "%s", nf_error());

    nf_split_args_init(&a);
    char *argv4[] = {"x", "--split", "7"};
    cr_assert_eq(take_all(&a, 3, argv4), 0);
    cr_assert_eq(nf_split_args_stages(&a), 2);
    char *argv5[] = {"x", "--split", "9"}; /* past the fixture's 8 layers: refused at planning */
    nf_split_args_init(&a);
    cr_assert_eq(take_all(&a, 3, argv5), 0);
    cr_assert_eq(nf_split_args_plan(&a, model, 64, &p), -1);
    cr_assert(strstr(nf_error(), "--split") && strstr(nf_error(), "outside"), "%s", nf_error());

    refused("--gpus", "0", "--gpus: expected 1..16");
    refused("--gpus", "17", "--gpus: expected 1..16");
    refused("--gpus", "two", "--gpus: expected 1..16");
    refused("--split", "", "--split: expected auto");
    refused("--split", "3,3", "ascending");
    refused("--split", "5,2", "ascending");
    refused("--split", "0", "--split: expected auto");
    refused("--split", "2,", "--split: expected auto");
    refused("--split", "a,b", "--split: expected auto");
    nf_split_args_init(&a);
    char *argv6[] = {"x", "--split"};
    cr_assert_eq(take_all(&a, 2, argv6), -1);
    cr_assert(strstr(nf_error(), "missing value"), "%s", nf_error());
}
