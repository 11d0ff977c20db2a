/* tool_replay.c — exact replay of sampled tool-call turns (see tool_replay.h). */
#include "server/tool_replay.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

#define REPLAY_MAX 4096

typedef struct {
    char **ids;
    int n_ids;
    int32_t *toks;
    size_t n;
    char *canon;
} entry;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static entry ring[REPLAY_MAX];
static int head, count; /* ring[(head + i) % MAX], i < count, oldest first */

char *nf_replay_canon(const char *reasoning, const char *text, const json_t *calls) {
    json_t *t = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        const json_t *f = json_object_get(c, "function");
        if (!f) f = c;
        json_t *name = json_object_get(f, "name"), *args = json_object_get(f, "arguments"), *parsed = NULL;
        if (json_is_string(args)) {
            parsed = json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, NULL);
            args = parsed;
        }
        json_array_append_new(t, json_pack("[O,O]", name ? name : json_null(), args ? args : json_null()));
        json_decref(parsed);
    }
    /* text as the template sees it: surrounding whitespace does not matter */
    const char *a = text ? text : "";
    size_t n = strlen(a);
    while (n && strchr(" \t\r\n", a[n - 1])) n--;
    while (n && strchr(" \t\r\n", *a)) a++, n--;
    json_t *o = json_pack("{s:s,s:s%,s:o}", "r", reasoning ? reasoning : "", "c", a, n, "t", t);
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(o);
    return s ? s : nf_xstrdup("");
}

static void entry_free(entry *e) {
    for (int i = 0; i < e->n_ids; i++) free(e->ids[i]);
    free(e->ids);
    free(e->toks);
    free(e->canon);
    memset(e, 0, sizeof *e);
}

void nf_replay_store(const char *const *ids, int n_ids, const int32_t *toks, size_t n, const char *canon) {
    if (n_ids <= 0 || !n) return;
    pthread_mutex_lock(&mu);
    if (count == REPLAY_MAX) {
        entry_free(&ring[head]);
        head = (head + 1) % REPLAY_MAX;
        count--;
    }
    entry *e = &ring[(head + count) % REPLAY_MAX];
    count++;
    e->ids = nf_xmalloc((size_t)n_ids * sizeof *e->ids);
    for (int i = 0; i < n_ids; i++) e->ids[i] = nf_xstrdup(ids[i]);
    e->n_ids = n_ids;
    e->toks = nf_xmalloc(n * sizeof *e->toks);
    memcpy(e->toks, toks, n * sizeof *toks);
    e->n = n;
    e->canon = nf_xstrdup(canon);
    pthread_mutex_unlock(&mu);
}

int nf_replay_lookup(const char *id, const char *canon, int32_t **toks, size_t *n) {
    int found = 0;
    pthread_mutex_lock(&mu);
    for (int i = count - 1; i >= 0 && !found; i--) { /* newest first */
        entry *e = &ring[(head + i) % REPLAY_MAX];
        for (int k = 0; k < e->n_ids; k++)
            if (!strcmp(e->ids[k], id)) {
                if (!strcmp(e->canon, canon)) {
                    *toks = nf_xmalloc(e->n * sizeof **toks);
                    memcpy(*toks, e->toks, e->n * sizeof **toks);
                    *n = e->n;
                    found = 1;
                } else {
                    found = -1; /* the id is ours but the client changed the turn */
                }
                break;
            }
    }
    pthread_mutex_unlock(&mu);
    return found > 0;
}

int nf_replay_count(void) {
    pthread_mutex_lock(&mu);
    int c = count;
    pthread_mutex_unlock(&mu);
    return c;
}
