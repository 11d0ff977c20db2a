# session 25, device call 2 (on an H200 for issue 8's figures at the current defaults, glm53:q2; on an H100
# glm53@32:q2), after call 1 made the routed experts' decode-once GEMM the default and removed the IQ2 look-ahead:
#  1. tests: gemm (its decode-once check now against NF_CUDA_GEMM_PREDEQ_EXPERTS=off), gemv (the IQ2_XXS kernel
#     without the look-ahead), backend f32 + q2 quick (NF_CUDA_HC_TAIL's bits against the mixing kernel);
#  2. decode A/B at 2048 (the probe: greedy ids hash) off, tail, tail, off with tail = NF_CUDA_HC_TAIL=on;
#  3. prefill A/B at 65536: new, off, off, new with off = NF_CUDA_GEMM_PREDEQ_EXPERTS=off; the cold 62k prefill;
#  4. decode at depth 2048, 65536, 300000 (and 1048560 on the H200: issue 8's 1M point), filled state.
set -x
CAP=${CAP:-500}
NAME=c2 . scripts/device-call-env.sh
DF=2048,65536,300000; [ "$M" = glm53:q2 ] && DF=2048,65536,300000,1048560
timeout 60 $C/nf-gpu-tests --only gemm > $R/gemm.txt 2>&1; echo "rc=$?" >> $R/gemm.txt
timeout 60 $C/nf-gpu-tests --only gemv > $R/gemv.txt 2>&1; echo "rc=$?" >> $R/gemv.txt
NF_GPU_TEST_RECIPES=f32,q2 timeout 90 $C/nf-gpu-tests --quick --only backend > $R/backend-quick.txt 2>&1; echo "rc=$?" >> $R/backend-quick.txt
save
i=0; for v in off tail tail off; do i=$((i+1)); [ $SECONDS -lt $((CAP - 40)) ] || break
  case $v in off) E="";; tail) E="NF_CUDA_HC_TAIL=on";; esac
  env $E timeout 40 $C/nf-bench $S --frontiers 2048 --gen 32 --chunk 2048 --warmup 16 > $R/dec-$i-$v.csv 2>$R/dec-$i-$v.err; save; done
i=0; for v in new off off new; do i=$((i+1)); [ $SECONDS -lt $((CAP - 60)) ] || break
  case $v in new) E="";; off) E="NF_CUDA_GEMM_PREDEQ_EXPERTS=off";; esac
  env $E timeout 60 $C/nf-bench $S --frontiers 65536 --gen 1 --warmup 2 > $R/pp-$i-$v.csv 2>$R/pp-$i-$v.err; save; done
[ $SECONDS -lt $((CAP - 60)) ] && timeout 60 $C/nf-bench $S --frontiers 62000 --gen 4 --warmup 4 > $R/cold62k.csv 2>$R/cold62k.err
save
[ $SECONDS -lt $((CAP - 60)) ] && timeout $((CAP - SECONDS - 20 > 150 ? 150 : CAP - SECONDS - 20)) $C/nf-bench $S --fill synthetic --frontiers $DF --gen 16 --warmup 16 > $R/depth.csv 2>$R/depth.err
save
echo "elapsed $SECONDS s"
