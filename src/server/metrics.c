/* metrics.c — the counters behind GET /metrics (see metrics.h). */
#include "server/metrics.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/error.h"

static _Atomic int64_t counters[NF_M_COUNT];

void nf_metric_add(nf_metric m, int64_t v) {
    if ((unsigned)m < NF_M_COUNT) atomic_fetch_add(&counters[m], v);
}

int64_t nf_metric_get(nf_metric m) { return (unsigned)m < NF_M_COUNT ? atomic_load(&counters[m]) : 0; }

char *nf_metrics_render(int queue, int busy, int64_t n_ctx) {
    size_t cap = 8192;
    char *s = nf_xmalloc(cap);
    double pre_s = nf_metric_get(NF_M_PREFILL_US) / 1e6, dec_s = nf_metric_get(NF_M_DECODE_US) / 1e6;
    int64_t pre_t = nf_metric_get(NF_M_PREFILL_TOKENS), gen_t = nf_metric_get(NF_M_GEN_TOKENS);
    snprintf(s, cap,
             "# HELP nf_requests_total HTTP requests received.\n# TYPE nf_requests_total counter\n"
             "nf_requests_total %lld\n"
             "# HELP nf_responses_total HTTP responses by status class.\n# TYPE nf_responses_total counter\n"
             "nf_responses_total{class=\"2xx\"} %lld\nnf_responses_total{class=\"4xx\"} %lld\n"
             "nf_responses_total{class=\"5xx\"} %lld\n"
             "# HELP nf_generations_total Inference jobs finished.\n# TYPE nf_generations_total counter\n"
             "nf_generations_total %lld\n"
             "# HELP nf_cancelled_total Inference jobs cancelled by a client disconnect.\n# TYPE nf_cancelled_total counter\n"
             "nf_cancelled_total %lld\n"
             "# HELP nf_prompt_tokens_total Prompt tokens of inference jobs.\n# TYPE nf_prompt_tokens_total counter\n"
             "nf_prompt_tokens_total %lld\n"
             "# HELP nf_cached_tokens_total Prompt tokens reused from the live state.\n# TYPE nf_cached_tokens_total counter\n"
             "nf_cached_tokens_total %lld\n"
             "# HELP nf_prefill_tokens_total Tokens run through prefill.\n# TYPE nf_prefill_tokens_total counter\n"
             "nf_prefill_tokens_total %lld\n"
             "# HELP nf_generated_tokens_total Tokens generated.\n# TYPE nf_generated_tokens_total counter\n"
             "nf_generated_tokens_total %lld\n"
             "# HELP nf_cache_hits_total Jobs that reused part of the live state.\n# TYPE nf_cache_hits_total counter\n"
             "nf_cache_hits_total %lld\n"
             "# HELP nf_prefill_seconds_total Time spent in prefill.\n# TYPE nf_prefill_seconds_total counter\n"
             "nf_prefill_seconds_total %.6f\n"
             "# HELP nf_decode_seconds_total Time spent generating.\n# TYPE nf_decode_seconds_total counter\n"
             "nf_decode_seconds_total %.6f\n"
             "# HELP nf_prefill_tokens_per_second Prefill rate over the process lifetime.\n# TYPE nf_prefill_tokens_per_second gauge\n"
             "nf_prefill_tokens_per_second %.3f\n"
             "# HELP nf_decode_tokens_per_second Decode rate over the process lifetime.\n# TYPE nf_decode_tokens_per_second gauge\n"
             "nf_decode_tokens_per_second %.3f\n"
             "# HELP nf_disk_cache_hits_total Jobs that resumed from a state saved on disk.\n# TYPE nf_disk_cache_hits_total counter\n"
             "nf_disk_cache_hits_total %lld\n"
             "# HELP nf_disk_cache_saves_total States saved to disk.\n# TYPE nf_disk_cache_saves_total counter\n"
             "nf_disk_cache_saves_total %lld\n"
             "# HELP nf_ram_cache_hits_total Jobs that resumed a given-up conversation kept in RAM.\n# TYPE nf_ram_cache_hits_total counter\n"
             "nf_ram_cache_hits_total %lld\n"
             "# HELP nf_spec_cycles_total Speculative verification cycles (--draft).\n# TYPE nf_spec_cycles_total counter\n"
             "nf_spec_cycles_total %lld\n"
             "# HELP nf_spec_draft_tokens_total Draft tokens verified.\n# TYPE nf_spec_draft_tokens_total counter\n"
             "nf_spec_draft_tokens_total %lld\n"
             "# HELP nf_spec_accepted_tokens_total Draft tokens accepted.\n# TYPE nf_spec_accepted_tokens_total counter\n"
             "nf_spec_accepted_tokens_total %lld\n"
             "# HELP nf_queue_length Jobs waiting for the worker.\n# TYPE nf_queue_length gauge\n"
             "nf_queue_length %d\n"
             "# HELP nf_worker_busy 1 while the worker runs a job.\n# TYPE nf_worker_busy gauge\n"
             "nf_worker_busy %d\n"
             "# HELP nf_context_length Token context of the live state.\n# TYPE nf_context_length gauge\n"
             "nf_context_length %lld\n",
             (long long)nf_metric_get(NF_M_REQUESTS), (long long)nf_metric_get(NF_M_REQ_2XX),
             (long long)nf_metric_get(NF_M_REQ_4XX), (long long)nf_metric_get(NF_M_REQ_5XX),
             (long long)nf_metric_get(NF_M_GENERATIONS), (long long)nf_metric_get(NF_M_CANCELLED),
             (long long)nf_metric_get(NF_M_PROMPT_TOKENS), (long long)nf_metric_get(NF_M_CACHED_TOKENS),
             (long long)pre_t, (long long)gen_t, (long long)nf_metric_get(NF_M_CACHE_HITS), pre_s, dec_s,
             pre_s > 0 ? pre_t / pre_s : 0.0, dec_s > 0 ? gen_t / dec_s : 0.0,
             (long long)nf_metric_get(NF_M_DISK_HITS), (long long)nf_metric_get(NF_M_DISK_SAVES),
             (long long)nf_metric_get(NF_M_RAM_HITS), (long long)nf_metric_get(NF_M_SPEC_CYCLES),
             (long long)nf_metric_get(NF_M_SPEC_DRAFTED), (long long)nf_metric_get(NF_M_SPEC_ACCEPTED), queue, busy, (long long)n_ctx);
    return s;
}
