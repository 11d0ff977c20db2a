# session 23, device call 2: call1.sh cut to what fits the session's last ~250 s of device time (six requests for
# call 1 found no machine): the kda test at the defaults, the decode A/B of NF_CUDA_IQ2_L2AHEAD (0, 2, 2, 0; the
# probe's greedy hash), the prefill A/B of NF_CUDA_GEMM_PREDEQ_EXPERTS at 65536, the cold 62k prefill, depth.
set -x
CAP=${CAP:-250}
NAME=c2 . scripts/device-call-env.sh
DF=2048,65536,300000; [ "$M" = glm53:q2 ] && DF=2048,300000,1048560
timeout 30 $C/nf-gpu-tests --only kda > $R/kda.txt 2>&1; echo "rc=$?" >> $R/kda.txt
save
i=0; for a in 0 2 2 0; do i=$((i+1)); [ $SECONDS -lt $((CAP - 25)) ] || break
  NF_CUDA_IQ2_L2AHEAD=$a timeout 25 $C/nf-bench $S --frontiers 2048 --gen 32 --chunk 2048 --warmup 16 > $R/dec-$i-a$a.csv 2>$R/dec-$i-a$a.err; save; done
i=0; for v in def pdx pdx def; do i=$((i+1)); [ $SECONDS -lt $((CAP - 40)) ] || break
  case $v in def) E="";; pdx) E="NF_CUDA_GEMM_PREDEQ_EXPERTS=on";; esac
  env $E timeout 40 $C/nf-bench $S --frontiers 65536 --gen 1 --warmup 2 > $R/pp-$i-$v.csv 2>$R/pp-$i-$v.err; save; done
[ $SECONDS -lt $((CAP - 40)) ] && timeout 40 $C/nf-bench $S --frontiers 62000 --gen 4 --warmup 4 > $R/cold62k.csv 2>$R/cold62k.err
save
[ $SECONDS -lt $((CAP - 40)) ] && timeout $((CAP - SECONDS)) $C/nf-bench $S --fill synthetic --frontiers $DF --gen 16 --warmup 16 > $R/depth.csv 2>$R/depth.err
save
echo "elapsed $SECONDS s"
