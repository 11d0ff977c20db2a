# session 22, device call 1 (replaces session 21's call4.sh/call5.sh; every arm in one carried build):
#  1. tests: kda (+ bench; with the new switches), backend quick on q2 with every new switch, gemm (+ bench: the
#     16384-token shapes, the dense Q8_0 decoded once or per tile);
#  2. prefill A/B at 65536, alternating def, new3, all, all, new3, def: new3 = session 21's opt-ins
#     (NF_CUDA_KDA_FUSED_PREP=on NF_CUDA_KDA_CONV_ROWS=on NF_CUDA_KDA_SCAN_DB=on), all = new3 +
#     NF_CUDA_KDA_PREP_V2=on (the second KDA prep kernel) + NF_CUDA_GEMM_PREDEQ=on (dense matrices decoded once) +
#     NF_CUDA_HC_PREFILL_FOLD=on (hc_post folded into the prefill projection);
#  3. the KDA kernels' durations under ncu with all.
set -x
CAP=${CAP:-560}
NAME=s22c1 . scripts/device-call-env.sh
NEW3="NF_CUDA_KDA_FUSED_PREP=on NF_CUDA_KDA_CONV_ROWS=on NF_CUDA_KDA_SCAN_DB=on"
ALL="$NEW3 NF_CUDA_KDA_PREP_V2=on NF_CUDA_GEMM_PREDEQ=on NF_CUDA_HC_PREFILL_FOLD=on"
timeout 40 $C/nf-gpu-tests --only kda --bench > $R/kda.txt 2>&1; echo "rc=$?" >> $R/kda.txt
env $ALL NF_KDA_TEST_SMALL=1 timeout 40 $C/nf-gpu-tests --only kda --bench > $R/kda-all.txt 2>&1; echo "rc=$?" >> $R/kda-all.txt
env $ALL NF_GPU_TEST_RECIPES=q2 timeout 40 $C/nf-gpu-tests --quick --only backend > $R/backend-quick-all.txt 2>&1; echo "rc=$?" >> $R/backend-quick-all.txt
timeout 90 $C/nf-gpu-tests --only gemm --bench > $R/gemm.txt 2>&1; echo "rc=$?" >> $R/gemm.txt
save
i=0; for v in def new3 all all new3 def; do i=$((i+1)); [ $SECONDS -lt $((CAP - 48)) ] || break
  case $v in def) E="";; new3) E="$NEW3";; all) E="$ALL";; esac
  env $E timeout 52 $C/nf-bench $S --frontiers 65536 --gen 1 --warmup 2 > $R/pp-$i-$v.csv 2>$R/pp-$i-$v.err; save; done
[ $SECONDS -lt $((CAP - 60)) ] && env $ALL timeout 58 \
  ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw -k regex:"kda_|dequant|hc_p" --launch-count 60 \
  $C/nf-bench $S --frontiers 16384 --gen 1 --warmup 0 2>&1 | xz -9 > $R/ncu-kda-all.csv.xz
save
echo "elapsed $SECONDS s"
