# session 19, device call 1 (H100 or H200; carry .nfcarry-s19.tar.xz): 1. the fused router (NF_CUDA_ROUTER_FUSED=on,
# opt-in: decode's router product + routing in one launch) and the combine fold (NF_CUDA_COMBINE_FOLD=on: the MoE
# combine computed inside the next hc projection): GPU tests, the backend test with each on, decode A/B of three
# arms in alternating order; 2. the 128-vector GEMM tiles' test, bench and prefill A/B (session 18's call7); 3. ncu's
# full sections for decode's small kernels (hc_mix_collapse 10 us x 64 per token, hc_proj_part, router, moe_combine),
# on glm53@4:q2 (the same per-layer kernels, 4 trunk layers: starts in seconds): what they wait on.
set -x
CAP=${CAP:-300}
W=/tmp/w1; R=$W/r; mkdir -p $R; C=/tmp/c1; mkdir -p $C; tar xJf .nfcarry-s19.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $W r; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > $R/smi.txt
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -gt 120000 ]; then M=glm53:q2; else M=glm53@32:q2; fi; echo "model $M" > $R/model.txt
timeout 30 $C/nf-gpu-tests --only router > $R/gpu-tests-router.txt 2>&1; echo "rc=$?" >> $R/gpu-tests-router.txt
NF_CUDA_ROUTER_FUSED=on timeout 60 $C/nf-gpu-tests --quick --only backend > $R/gpu-tests-backend-fused.txt 2>&1; echo "rc=$?" >> $R/gpu-tests-backend-fused.txt
NF_CUDA_COMBINE_FOLD=on NF_CUDA_ROUTER_FUSED=on timeout 60 $C/nf-gpu-tests --quick --only backend > $R/gpu-tests-backend-fold.txt 2>&1; echo "rc=$?" >> $R/gpu-tests-backend-fold.txt
save
S="--backend cuda --synthetic $M"
BB="$S --frontiers 2048 --gen 32 --chunk 2048 --warmup 16"
# arms: off (both off), rf (fused router), rff (fused router + combine fold), alternating order
i=0; for v in off rf rff rff rf off off rf rff; do i=$((i+1)); [ $SECONDS -lt $((CAP - 150)) ] || break
  rf=off; fo=off; case $v in rf) rf=on;; rff) rf=on; fo=on;; esac
  NF_CUDA_ROUTER_FUSED=$rf NF_CUDA_COMBINE_FOLD=$fo timeout 45 $C/nf-bench $BB > $R/alt-$i-$v.csv 2>$R/alt-$i-$v.err; done
save
NF_CUDA_GEMM_BN128=all timeout 30 $C/nf-gpu-tests --only gemm > $R/gpu-tests-gemm128.txt 2>&1; echo "rc=$?" >> $R/gpu-tests-gemm128.txt
i=0; for v in off ids; do i=$((i+1)); NF_CUDA_GEMM_BN128=$v timeout 30 $C/nf-gpu-tests --only gemm --bench > $R/gemm-bench-$i-$v.txt 2>&1; done
save
i=0; for v in off ids ids off; do i=$((i+1)); [ $SECONDS -lt $((CAP - 60)) ] && NF_CUDA_GEMM_BN128=$v timeout 30 $C/nf-bench $S --frontiers 8192 --gen 1 --warmup 2 > $R/pp-$i-$v.csv 2>$R/pp-$i-$v.err; done
save
P="$C/nf-bench --backend cuda --synthetic glm53@4:q2 --frontiers 64 --gen 4 --chunk 64 --warmup 0"
for k in hc_mix_collapse_kernel hc_proj_part_kernel router_kernel moe_combine_kernel; do
  [ $SECONDS -lt $((CAP - 15)) ] || break
  timeout 40 ncu --clock-control none --set full --import-source yes -k regex:$k --launch-skip 12 --launch-count 2 -o $R/prof-$k $P > $R/prof-$k.log 2>&1
  ncu -i $R/prof-$k.ncu-rep --page details > $R/prof-$k-details.txt 2>&1
  ncu -i $R/prof-$k.ncu-rep --page source --csv --print-source sass > $R/prof-$k-sass.csv 2>&1
  save
done
echo "elapsed $SECONDS s"
