# session 21, device call 4 — prepared, NOT RUN (the session's device time ran out). Carry .gpucarry.tar.xz from
# scripts/gpu-carry.sh (nf-gpu-tests, nf-bench, nf-convert, nf-synth) built at the commit that adds this file or later:
#  1. the KDA test and bench (the chunked path with NF_CUDA_KDA_FUSED_PREP=on: its own input preparation, and
#     NF_CUDA_KDA_SCAN_DB=on: the serial pass double-buffered, bit-identical to the default);
#  2. the quick backend tests on the q2 recipe (the KDA conv row kernel, NF_CUDA_KDA_CONV_ROWS=on, must give the
#     grid-stride kernel's bits; test_backend checks it);
#  3. prefill A/B at frontier 65536: def vs new (NF_CUDA_KDA_FUSED_PREP=on NF_CUDA_KDA_CONV_ROWS=on
#     NF_CUDA_KDA_SCAN_DB=on), alternating def, new, new, def; then the KDA kernels of a 16384-token prefill under
#     ncu with new (per-kernel durations). If new is faster, make the three the defaults (each separately if the
#     ncu durations show one of them slower).
set -x
CAP=${CAP:-330}
NAME=call4 . scripts/device-call-env.sh
timeout 40 $C/nf-gpu-tests --only kda --bench > $R/kda.txt 2>&1; echo "rc=$?" >> $R/kda.txt
NF_GPU_TEST_RECIPES=q2 timeout 40 $C/nf-gpu-tests --quick --only backend > $R/backend-quick.txt 2>&1; echo "rc=$?" >> $R/backend-quick.txt
save
i=0; for v in def new new def; do i=$((i+1)); [ $SECONDS -lt $((CAP - 48)) ] || break
  case $v in def) E="";; new) E="NF_CUDA_KDA_FUSED_PREP=on NF_CUDA_KDA_CONV_ROWS=on NF_CUDA_KDA_SCAN_DB=on";; esac
  env $E timeout 52 $C/nf-bench $S --frontiers 65536 --gen 1 --warmup 2 > $R/pp-$i-$v.csv 2>$R/pp-$i-$v.err; save; done
[ $SECONDS -lt $((CAP - 60)) ] && NF_CUDA_KDA_FUSED_PREP=on NF_CUDA_KDA_CONV_ROWS=on NF_CUDA_KDA_SCAN_DB=on timeout 58 \
  ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw -k regex:"kda_" --launch-count 30 \
  $C/nf-bench $S --frontiers 16384 --gen 1 --warmup 0 2>&1 | xz -9 > $R/ncu-kda-new.csv.xz
save
echo "elapsed $SECONDS s"
