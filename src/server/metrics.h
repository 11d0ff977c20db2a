/* metrics.h — server counters for GET /metrics (Prometheus text exposition format, version 0.0.4).
 *
 * Process-wide counters updated with atomics from the connection threads and the worker: requests by endpoint
 * and status class, prompt / cached / prefilled / generated tokens, prefill and decode seconds, prefix-cache
 * hits, cancellations, speculative cycles / drafted / accepted tokens; plus gauges read at scrape time (queue length, worker busy). */
#ifndef NF_SERVER_METRICS_H
#define NF_SERVER_METRICS_H

#include <stdint.h>

typedef enum {
    NF_M_REQUESTS = 0,      /* every HTTP request */
    NF_M_REQ_2XX,
    NF_M_REQ_4XX,
    NF_M_REQ_5XX,
    NF_M_GENERATIONS,       /* jobs finished by the worker */
    NF_M_CANCELLED,         /* jobs cancelled (client gone) */
    NF_M_PROMPT_TOKENS,
    NF_M_CACHED_TOKENS,     /* prompt tokens reused from the live state */
    NF_M_PREFILL_TOKENS,    /* tokens actually prefilled */
    NF_M_GEN_TOKENS,
    NF_M_CACHE_HITS,        /* jobs that reused > 0 tokens */
    NF_M_PREFILL_US,        /* microseconds */
    NF_M_DECODE_US,
    NF_M_DISK_HITS,         /* jobs that loaded a saved state from disk */
    NF_M_DISK_SAVES,
    NF_M_RAM_HITS,          /* jobs that resumed a given-up conversation from RAM */
    NF_M_SPEC_CYCLES,       /* speculative decoding (--draft): verified cycles */
    NF_M_SPEC_DRAFTED,      /* draft tokens verified */
    NF_M_SPEC_ACCEPTED,     /* of which accepted */
    NF_M_COUNT
} nf_metric;

void nf_metric_add(nf_metric m, int64_t v);
int64_t nf_metric_get(nf_metric m);
/* The exposition text (malloc'ed). queue and busy are the current gauges. */
char *nf_metrics_render(int queue, int busy, int64_t n_ctx);

#endif
