# session 22, device call 1 (replaces session 21's call4.sh/call5.sh; every arm in one carried build):
#  1. GPU tests with every new switch on (ALL): kda (+ bench), backend quick on q2, attn quick (+ bench: the
#     one-kernel core over f32 and over bf16 rows); the gemm test + bench (the 16384-token shapes, the dense Q8_0
#     decoded once or per tile) if time allows;
#  2. prefill A/B at 65536, alternating def, all, all, def, where all = session 21's opt-ins
#     (NF_CUDA_KDA_FUSED_PREP=on NF_CUDA_KDA_CONV_ROWS=on NF_CUDA_KDA_SCAN_DB=on) + NF_CUDA_KDA_PREP_V2=on (the second
#     KDA prep kernel) + NF_CUDA_GEMM_PREDEQ=on (dense matrices decoded once) + NF_CUDA_HC_PREFILL_FOLD=on (hc_post
#     folded into the prefill projection) + NF_CUDA_MLA_FLASH16=on (the MLA core over a bf16 latent copy);
#  3. the KDA / hc / dequant kernels' durations under ncu with all.
set -x
CAP=${CAP:-500}
NAME=s22c1 . scripts/device-call-env.sh
ALL="NF_CUDA_KDA_FUSED_PREP=on NF_CUDA_KDA_CONV_ROWS=on NF_CUDA_KDA_SCAN_DB=on NF_CUDA_KDA_PREP_V2=on NF_CUDA_GEMM_PREDEQ=on NF_CUDA_HC_PREFILL_FOLD=on NF_CUDA_MLA_FLASH16=on"
env $ALL timeout 45 $C/nf-gpu-tests --only kda --bench > $R/kda-all.txt 2>&1; echo "rc=$?" >> $R/kda-all.txt
env $ALL NF_GPU_TEST_RECIPES=q2 timeout 45 $C/nf-gpu-tests --quick --only backend > $R/backend-quick-all.txt 2>&1; echo "rc=$?" >> $R/backend-quick-all.txt
timeout 60 $C/nf-gpu-tests --quick --bench --only attn > $R/attn.txt 2>&1; echo "rc=$?" >> $R/attn.txt
save
i=0; for v in def all all def; do i=$((i+1)); [ $SECONDS -lt $((CAP - 48)) ] || break
  case $v in def) E="";; all) E="$ALL";; esac
  env $E timeout 52 $C/nf-bench $S --frontiers 65536 --gen 1 --warmup 2 > $R/pp-$i-$v.csv 2>$R/pp-$i-$v.err; save; done
[ $SECONDS -lt $((CAP - 60)) ] && env $ALL timeout 58 \
  ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw -k regex:"kda_|dequant|hc_p|mla_" --launch-count 80 \
  $C/nf-bench $S --frontiers 16384 --gen 1 --warmup 0 2>&1 | xz -9 > $R/ncu-all.csv.xz
save
[ $SECONDS -lt $((CAP - 70)) ] && timeout 70 $C/nf-gpu-tests --only gemm --bench > $R/gemm.txt 2>&1; echo "rc=$?" >> $R/gemm.txt
save
echo "elapsed $SECONDS s"
