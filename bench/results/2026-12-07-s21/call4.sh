# session 21, device call 4 — prepared, NOT RUN (the session's device time ran out). Carry .gpucarry.tar.xz from
# scripts/gpu-carry.sh (nf-gpu-tests, nf-bench, nf-convert, nf-synth) built at the commit that adds this file or later:
#  1. the KDA test and bench (the chunked path with NF_CUDA_KDA_FUSED_PREP=on: its own input preparation);
#  2. the quick backend tests on the q2 recipe (the KDA conv row kernel, NF_CUDA_KDA_CONV_ROWS=on, must give the
#     grid-stride kernel's bits; test_backend checks it);
#  3. prefill A/B at frontier 65536: def vs new (NF_CUDA_KDA_FUSED_PREP=on NF_CUDA_KDA_CONV_ROWS=on), alternating
#     def, new, new, def. If new is faster, make both the defaults.
set -x
CAP=${CAP:-300}
NAME=call4 . scripts/device-call-env.sh
timeout 40 $C/nf-gpu-tests --only kda --bench > $R/kda.txt 2>&1; echo "rc=$?" >> $R/kda.txt
NF_GPU_TEST_RECIPES=q2 timeout 40 $C/nf-gpu-tests --quick --only backend > $R/backend-quick.txt 2>&1; echo "rc=$?" >> $R/backend-quick.txt
save
i=0; for v in def new new def; do i=$((i+1)); [ $SECONDS -lt $((CAP - 48)) ] || break
  case $v in def) E="";; new) E="NF_CUDA_KDA_FUSED_PREP=on NF_CUDA_KDA_CONV_ROWS=on";; esac
  env $E timeout 52 $C/nf-bench $S --frontiers 65536 --gen 1 --warmup 2 > $R/pp-$i-$v.csv 2>$R/pp-$i-$v.err; save; done
echo "elapsed $SECONDS s"
