# session 25, device call 2 (for an H200: issue 8's figures at the current defaults, glm53:q2), after call 1 (H100)
# made the routed experts' decode-once GEMM the default:
#  1. the gemm test (its decode-once check now against NF_CUDA_GEMM_PREDEQ_EXPERTS=off, the per-tile decode) and the
#     gemv test (the IQ2_XXS kernel without the removed look-ahead);
#  2. prefill A/B at 65536: new, off, off, new with off = NF_CUDA_GEMM_PREDEQ_EXPERTS=off; the cold 62k prefill;
#  3. decode at depth 2048, 65536, 300000 and 1048560 (filled state, issue 8's 1M point);
#  4. the decode probe at 2048 (a prefilled 2048, 32 greedy tokens).
set -x
CAP=${CAP:-420}
NAME=c2 . scripts/device-call-env.sh
DF=2048,65536,300000; [ "$M" = glm53:q2 ] && DF=2048,65536,300000,1048560
timeout 60 $C/nf-gpu-tests --only gemm > $R/gemm.txt 2>&1; echo "rc=$?" >> $R/gemm.txt
timeout 60 $C/nf-gpu-tests --only gemv > $R/gemv.txt 2>&1; echo "rc=$?" >> $R/gemv.txt
save
i=0; for v in new off off new; do i=$((i+1)); [ $SECONDS -lt $((CAP - 60)) ] || break
  case $v in new) E="";; off) E="NF_CUDA_GEMM_PREDEQ_EXPERTS=off";; esac
  env $E timeout 60 $C/nf-bench $S --frontiers 65536 --gen 1 --warmup 2 > $R/pp-$i-$v.csv 2>$R/pp-$i-$v.err; save; done
[ $SECONDS -lt $((CAP - 60)) ] && timeout 60 $C/nf-bench $S --frontiers 62000 --gen 4 --warmup 4 > $R/cold62k.csv 2>$R/cold62k.err
save
[ $SECONDS -lt $((CAP - 70)) ] && timeout $((CAP - SECONDS - 30 > 150 ? 150 : CAP - SECONDS - 30)) $C/nf-bench $S --fill synthetic --frontiers $DF --gen 16 --warmup 16 > $R/depth.csv 2>$R/depth.err
save
[ $SECONDS -lt $((CAP - 30)) ] && timeout 30 $C/nf-bench $S --frontiers 2048 --gen 32 --chunk 2048 --warmup 16 > $R/dec.csv 2>$R/dec.err
save
echo "elapsed $SECONDS s"
