# prepared in session 22 for the next session's first device call (not run: session 22's device time ran out):
#  1. the GPU tests at session 22's defaults (fc718d5 and later): kda (the second prep kernel, the fused preparation,
#     the double-buffered pass against each =off), backend f32 + q2 quick, gemm (+ bench: the routed experts at
#     T 16384 decoded per tile and once per batch);
#  2. prefill A/B at 65536: def, pdx, pdx, def with pdx = NF_CUDA_GEMM_PREDEQ_EXPERTS=on (opt-in, unmeasured);
#  3. at the defaults: the cold 62k prefill, the decode probe's greedy hash at 2048, decode at depth (filled state).
# On an H200 device-call-env.sh takes glm53:q2 (the model): then these are the issue's own figures.
set -x
CAP=${CAP:-560}
NAME=n1 . scripts/device-call-env.sh
timeout 45 $C/nf-gpu-tests --only kda > $R/kda.txt 2>&1; echo "rc=$?" >> $R/kda.txt
NF_GPU_TEST_RECIPES=f32,q2 timeout 60 $C/nf-gpu-tests --quick --only backend > $R/backend-quick.txt 2>&1; echo "rc=$?" >> $R/backend-quick.txt
timeout 110 $C/nf-gpu-tests --only gemm --bench > $R/gemm.txt 2>&1; echo "rc=$?" >> $R/gemm.txt
save
i=0; for v in def pdx pdx def; do i=$((i+1)); [ $SECONDS -lt $((CAP - 50)) ] || break
  case $v in def) E="";; pdx) E="NF_CUDA_GEMM_PREDEQ_EXPERTS=on";; esac
  env $E timeout 50 $C/nf-bench $S --frontiers 65536 --gen 1 --warmup 2 > $R/pp-$i-$v.csv 2>$R/pp-$i-$v.err; save; done
[ $SECONDS -lt $((CAP - 50)) ] && timeout 50 $C/nf-bench $S --frontiers 62000 --gen 4 --warmup 4 > $R/cold62k.csv 2>$R/cold62k.err
save
[ $SECONDS -lt $((CAP - 25)) ] && timeout 25 $C/nf-bench $S --frontiers 2048 --gen 32 --chunk 2048 --warmup 16 > $R/probe2048.csv 2>$R/probe2048.err
save
[ $SECONDS -lt $((CAP - 60)) ] && timeout $((CAP - SECONDS)) $C/nf-bench $S --fill synthetic --frontiers 2048,65536,300000 --gen 16 --warmup 16 > $R/depth.csv 2>$R/depth.err
save
echo "elapsed $SECONDS s"
