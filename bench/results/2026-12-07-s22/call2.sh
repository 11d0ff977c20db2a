# session 22, device call 2: the seven prefill switches as defaults (=off each for the old path): the GPU tests at
# the defaults (kda: the second prep kernel, the fused preparation and the double-buffered pass against their off
# settings; backend f32 + q2 quick: conv rows vs grid-stride bit-identical, fused hc calls vs unfused; gemm: the
# decoded-once copy bit-identical and taken), a prefill pair def / off at 65536, the cold 62k prefill, decode at
# depth with a filled state, and the decode probe's greedy hash.
set -x
CAP=${CAP:-330}
NAME=s22c2 . scripts/device-call-env.sh
OFF="NF_CUDA_KDA_FUSED_PREP=off NF_CUDA_KDA_CONV_ROWS=off NF_CUDA_KDA_SCAN_DB=off NF_CUDA_KDA_PREP_V2=off NF_CUDA_GEMM_PREDEQ=off NF_CUDA_HC_PREFILL_FOLD=off NF_CUDA_MLA_FLASH16=off"
timeout 45 $C/nf-gpu-tests --only kda > $R/kda.txt 2>&1; echo "rc=$?" >> $R/kda.txt
NF_GPU_TEST_RECIPES=f32,q2 timeout 60 $C/nf-gpu-tests --quick --only backend > $R/backend-quick.txt 2>&1; echo "rc=$?" >> $R/backend-quick.txt
timeout 40 $C/nf-gpu-tests --only gemm > $R/gemm.txt 2>&1; echo "rc=$?" >> $R/gemm.txt
save
i=0; for v in def off; do i=$((i+1)); [ $SECONDS -lt $((CAP - 40)) ] || break
  case $v in def) E="";; off) E="$OFF";; esac
  env $E timeout 40 $C/nf-bench $S --frontiers 65536 --gen 1 --warmup 2 > $R/pp-$i-$v.csv 2>$R/pp-$i-$v.err; save; done
[ $SECONDS -lt $((CAP - 35)) ] && timeout 35 $C/nf-bench $S --frontiers 62000 --gen 4 --warmup 4 > $R/cold62k.csv 2>$R/cold62k.err
save
[ $SECONDS -lt $((CAP - 25)) ] && timeout 25 $C/nf-bench $S --frontiers 2048 --gen 32 --chunk 2048 --warmup 16 > $R/probe2048.csv 2>$R/probe2048.err
save
[ $SECONDS -lt $((CAP - 60)) ] && timeout $((CAP - SECONDS)) $C/nf-bench $S --fill synthetic --frontiers 2048,65536,300000 --gen 16 --warmup 16 > $R/depth.csv 2>$R/depth.err
save
echo "elapsed $SECONDS s"
