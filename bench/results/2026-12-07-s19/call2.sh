# session 19, device call 2 (H100 or H200; carry .nfcarry-s19.tar.xz at the commit named in commit.txt): call 1 (removed) never
# ran (no machine), so this is call 1 plus the warp-per-row IQ2_XXS kernel (NF_CUDA_IQ2_ROWS=on, cuda_gemv_iq2.cu):
#  1. GPU tests: router (fused cases), gemv (small set; the iq2rows pass: every case the kernel takes, bounded per
#     row); after the A/B: backend --quick with all three switches on;
#  2. the gemv bench of the routed gate+up, IQ2_ROWS off / on (same run), plus the kernel's SASS size;
#  3. decode A/B, four arms in alternating order: off | rf (fused router) | rff (+ combine fold) | rffi (+ iq2rows);
#  4. the 128-vector GEMM tiles (session 18's call7): test, bench, prefill A/B at 8192;
#  5. ncu of decode's small kernels on glm53@4:q2, as time allows.
set -x
CAP=${CAP:-540}
W=/tmp/w2; R=$W/r; mkdir -p $R; C=/tmp/c2; mkdir -p $C; tar xJf .nfcarry-s19.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $W r; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > $R/smi.txt
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -gt 120000 ]; then M=glm53:q2; else M=glm53@32:q2; fi; echo "model $M" > $R/model.txt
timeout 30 $C/nf-gpu-tests --only router > $R/gpu-tests-router.txt 2>&1; echo "rc=$?" >> $R/gpu-tests-router.txt
NF_GEMV_TEST_SMALL=1 timeout 60 $C/nf-gpu-tests --only gemv > $R/gpu-tests-gemv.txt 2>&1; echo "rc=$?" >> $R/gpu-tests-gemv.txt
save
for v in off on; do NF_CUDA_IQ2_ROWS=$v NF_GEMV_PLAN=1 NF_GEMV_BENCH_NO_CHECKS=1 NF_GEMV_BENCH_ONLY=iq2_xxs NF_GEMV_BENCH_CASES=moe_gate_up,gate_up,dense timeout 60 $C/nf-gpu-tests --only gemv --bench > $R/gemv-bench-iq2-$v.txt 2>&1; done
(cuobjdump -sass -fun iq2_rows_kernel $C/nf-gpu-tests 2>&1 | head -3000 > $R/iq2rows-sass.txt) 
save
S="--backend cuda --synthetic $M"
BB="$S --frontiers 2048 --gen 32 --chunk 2048 --warmup 16"
i=0; for v in off rf rff rffi rffi rff rf off off rf rff rffi; do i=$((i+1)); [ $SECONDS -lt $((CAP - 150)) ] || break
  rf=off; fo=off; iq=off; case $v in rf) rf=on;; rff) rf=on; fo=on;; rffi) rf=on; fo=on; iq=on;; esac
  NF_CUDA_ROUTER_FUSED=$rf NF_CUDA_COMBINE_FOLD=$fo NF_CUDA_IQ2_ROWS=$iq timeout 45 $C/nf-bench $BB > $R/alt-$i-$v.csv 2>$R/alt-$i-$v.err; done
save
NF_CUDA_COMBINE_FOLD=on NF_CUDA_ROUTER_FUSED=on NF_CUDA_IQ2_ROWS=on timeout 60 $C/nf-gpu-tests --quick --only backend > $R/gpu-tests-backend-all.txt 2>&1; echo "rc=$?" >> $R/gpu-tests-backend-all.txt
save
NF_CUDA_GEMM_BN128=all timeout 30 $C/nf-gpu-tests --only gemm > $R/gpu-tests-gemm128.txt 2>&1; echo "rc=$?" >> $R/gpu-tests-gemm128.txt
i=0; for v in off ids ids off; do i=$((i+1)); [ $SECONDS -lt $((CAP - 60)) ] && NF_CUDA_GEMM_BN128=$v timeout 30 $C/nf-bench $S --frontiers 8192 --gen 1 --warmup 2 > $R/pp-$i-$v.csv 2>$R/pp-$i-$v.err; done
save
P="$C/nf-bench --backend cuda --synthetic glm53@4:q2 --frontiers 64 --gen 4 --chunk 64 --warmup 0"
for k in iq2_rows_kernel hc_mix_collapse_kernel router_fused_kernel hc_proj_part_kernel; do
  [ $SECONDS -lt $((CAP - 15)) ] || break
  NF_CUDA_ROUTER_FUSED=on NF_CUDA_COMBINE_FOLD=on NF_CUDA_IQ2_ROWS=on timeout 40 ncu --clock-control none --set full --import-source yes -k regex:$k --launch-skip 12 --launch-count 2 -o $R/prof-$k $P > $R/prof-$k.log 2>&1
  ncu -i $R/prof-$k.ncu-rep --page details > $R/prof-$k-details.txt 2>&1
  ncu -i $R/prof-$k.ncu-rep --page source --csv --print-source sass > $R/prof-$k-sass.csv 2>&1
  save
done
echo "elapsed $SECONDS s"
