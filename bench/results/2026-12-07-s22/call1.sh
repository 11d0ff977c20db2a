# session 22, device call 1 (session 21's call4.sh and call5.sh in one call, with the second KDA prep kernel):
#  1. KDA test + bench (default, then with the four opt-ins), quick backend tests on q2 with the four opt-ins;
#  2. prefill A/B at 65536, alternating def, new3, new4, new4, new3, def: new3 = NF_CUDA_KDA_FUSED_PREP=on
#     NF_CUDA_KDA_CONV_ROWS=on NF_CUDA_KDA_SCAN_DB=on (session 21's opt-ins), new4 = new3 + NF_CUDA_KDA_PREP_V2=on;
#  3. the KDA kernels' durations under ncu with new4; ncu --set full of one launch of kda_chunk_prep_kernel (new4)
#     and of mla_flash_kernel in a 16384-token prefill.
set -x
CAP=${CAP:-570}
NAME=s22c1 . scripts/device-call-env.sh
NEW3="NF_CUDA_KDA_FUSED_PREP=on NF_CUDA_KDA_CONV_ROWS=on NF_CUDA_KDA_SCAN_DB=on"
NEW4="$NEW3 NF_CUDA_KDA_PREP_V2=on"
timeout 40 $C/nf-gpu-tests --only kda --bench > $R/kda.txt 2>&1; echo "rc=$?" >> $R/kda.txt
env $NEW4 NF_KDA_TEST_SMALL=1 timeout 40 $C/nf-gpu-tests --only kda --bench > $R/kda-new4.txt 2>&1; echo "rc=$?" >> $R/kda-new4.txt
env $NEW4 NF_GPU_TEST_RECIPES=q2 timeout 40 $C/nf-gpu-tests --quick --only backend > $R/backend-quick-new4.txt 2>&1; echo "rc=$?" >> $R/backend-quick-new4.txt
save
i=0; for v in def new3 new4 new4 new3 def; do i=$((i+1)); [ $SECONDS -lt $((CAP - 48)) ] || break
  case $v in def) E="";; new3) E="$NEW3";; new4) E="$NEW4";; esac
  env $E timeout 52 $C/nf-bench $S --frontiers 65536 --gen 1 --warmup 2 > $R/pp-$i-$v.csv 2>$R/pp-$i-$v.err; save; done
[ $SECONDS -lt $((CAP - 60)) ] && env $NEW4 timeout 58 \
  ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw -k regex:"kda_" --launch-count 30 \
  $C/nf-bench $S --frontiers 16384 --gen 1 --warmup 0 2>&1 | xz -9 > $R/ncu-kda-new4.csv.xz
save
for k in kda_chunk_prep_kernel mla_flash_kernel; do
  [ $SECONDS -lt $((CAP - 85)) ] || break
  env $NEW4 timeout 85 ncu --set full --import-source yes -k regex:$k --launch-skip 2 --launch-count 1 -o $W/$k \
      $C/nf-bench $S --frontiers 16384 --gen 1 --warmup 0 > $R/ncu-$k.log 2>&1
  ncu --import $W/$k.ncu-rep --page details --csv 2>/dev/null | xz -9 > $R/ncu-$k-details.csv.xz
  ncu --import $W/$k.ncu-rep --page source --csv --print-source sass 2>/dev/null | xz -9 > $R/ncu-$k-sass.csv.xz
  save
done
echo "elapsed $SECONDS s"
