/* csv.c — nf-bench's CSV: the contract columns nf-ab checks and parses, in their order (docs/ab.md "The bench
 * contract"), then extra columns tools may use by name (the speculative probe's last). One place, so the header
 * and the rows cannot disagree. A row whose state was filled, not prefilled (--fill synthetic), leaves the prefill
 * columns empty: nothing was prefilled, and an empty field is one nf-ab's report drops as missing rather than reads
 * as a speed. */
#include "bench/bench.h"

#include <math.h>

void nf_bench_csv_header(FILE *f) {
    fputs("ctx,prefill_tokens,prefill_tps,gen_tokens,gen_tps,state_bytes,bytes_per_token,decode_gbps,bw_fraction,"
          "gen_ids_hash,gen_first_ms,gen_all_tps,probe_gbps,weight_bytes,state_read_bytes,prefill_s,"
          "draft,spec_cycles,accept_len,commits_per_cycle,draft_tokens,accepted_tokens,spec_serial_tokens,spec_parks,fill,"
          "prefill_tflops,tc_ceiling_tflops,prefill_ceiling_fraction\n",
          f);
    fflush(f);
}

void nf_bench_csv_row(FILE *f, const nf_bench_row *r) {
    const int filled = r->fill == NF_BENCH_FILL_SYNTHETIC;
    fprintf(f, "%lld,", (long long)r->ctx);
    if (filled) fputs(",,", f);
    else fprintf(f, "%lld,%.3f,", (long long)r->prefill_tokens, r->prefill_tps);
    fprintf(f, "%d,%.4f,%.0f,%.0f,%.3f,%.5f,%016llx,%.4f,%.4f,%.3f,%.0f,%.0f,", r->gen_tokens, r->gen_tps,
            r->state_bytes, r->bytes_per_token, r->decode_gbps, r->bw_fraction, (unsigned long long)r->gen_ids_hash,
            r->gen_first_ms, r->gen_all_tps, r->probe_gbps, r->weight_bytes, r->state_read_bytes);
    if (!filled) fprintf(f, "%.6f", r->prefill_s);
    fprintf(f, ",%s,%lld,%.4f,%.4f,%lld,%lld,%lld,%lld,%s", r->draft ? r->draft : "none", (long long)r->spec_cycles,
            r->accept_len, r->commits_per_cycle, (long long)r->draft_tokens, (long long)r->accepted_tokens,
            (long long)r->spec_serial_tokens, (long long)r->spec_parks, filled ? "synthetic" : "prefill");
    const double ceiling[3] = {r->prefill_tflops, r->tc_ceiling_tflops, r->prefill_ceiling_fraction};
    for (int i = 0; i < 3; i++) {
        if (isfinite(ceiling[i])) fprintf(f, i == 2 ? ",%.4f" : ",%.2f", ceiling[i]);
        else fputs(",", f);
    }
    fputs("\n", f);
    fflush(f);
}
