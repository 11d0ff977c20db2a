# session 21, device call 5 — prepared, NOT RUN: why the chunked KDA's prep kernel takes 8.7-9.0 ms of a
# 16384-token layer call (~140 us per block, two blocks per SM; docs/cuda.md session 21) and how the one-kernel
# MLA core spends its time. ncu --set full of one launch of each (the third layer's, past the warm-up), inside the
# model's 16384-token prefill: the details page (stall reasons, issue slots, pipe utilisation, shared-memory
# wavefronts) and the source page (SASS with per-instruction samples) as CSV. Carry .gpucarry.tar.xz.
set -x
CAP=${CAP:-300}
NAME=call5 . scripts/device-call-env.sh
for k in kda_chunk_prep_kernel kda_chunk_scan_kernel mla_flash_kernel; do
  [ $SECONDS -lt $((CAP - 80)) ] || break
  timeout 90 ncu --set full --import-source yes -k regex:$k --launch-skip 2 --launch-count 1 -o $W/$k \
      $C/nf-bench $S --frontiers 16384 --gen 1 --warmup 0 > $R/ncu-$k.log 2>&1
  ncu --import $W/$k.ncu-rep --page details --csv 2>/dev/null | xz -9 > $R/ncu-$k-details.csv.xz
  ncu --import $W/$k.ncu-rep --page source --csv --print-source sass 2>/dev/null | xz -9 > $R/ncu-$k-sass.csv.xz
  save
done
echo "elapsed $SECONDS s"
