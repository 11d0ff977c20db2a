# session 18, device call 4 (H200 or H100; carry .nfcarry-s18.tar.xz of this session's last commit, PORTABLE):
# 1. the GPU tests with the new defaults (split hc projection + fold, one-pass prefill projection, tensor-core MLA
#    core, early GEMV copies): `nf-gpu-tests --quick --only backend`, memcheck of the fixtures' backend tests, and the
#    backend tests with NF_CUDA_MOE_PAIR=down;
# 2. decode alternating def (defaults), down (NF_CUDA_MOE_PAIR=down: only the downs paired), warp
#    (NF_CUDA_HC_SINKHORN=warp: if hc_pre's time moves with the Sinkhorn variant, the Sinkhorn block is its critical
#    path), splitoff (NF_CUDA_HC_SPLIT=off: the A/B of the new default again), rmax4 (NF_GEMV_RMAX=4: the routed
#    IQ2_XXS gate+up plans R = 8, whose kernel spills 16 bytes since stream_job's refactor);
# 3. ncu of the hc kernels with the register and the warp Sinkhorn;
# 4. H200 (glm53:q2): issue 8's depth sweep to 300k + 1M and the cold 62k prefill, issue 7's 2048/65536 decode;
#    H100 (glm53@32:q2): prefill sweep 2048..65536.
set -x
CAP=${CAP:-420}
W=/tmp/w4; R=$W/r; mkdir -p $R; C=/tmp/c4; mkdir -p $C; tar xJf .nfcarry-s18.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $W r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version,memory.total,memory.free --format=csv > $R/smi.txt
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -gt 120000 ]; then M=glm53:q2; else M=glm53@32:q2; fi; echo "model $M" > $R/model.txt
timeout 100 $C/nf-gpu-tests --quick --only backend > $R/gpu-tests.txt 2>&1; echo "rc=$?" >> $R/gpu-tests.txt
save
NF_GPU_TEST_FIXTURES_ONLY=1 timeout 50 compute-sanitizer --tool memcheck $C/nf-gpu-tests --quick --only backend > $R/memcheck.txt 2>&1; echo "rc=$?" >> $R/memcheck.txt
NF_CUDA_MOE_PAIR=down NF_GPU_TEST_RECIPES=q8,q4 timeout 40 $C/nf-gpu-tests --quick --only backend > $R/gpu-tests-down.txt 2>&1; echo "rc=$?" >> $R/gpu-tests-down.txt
save
S="--backend cuda --synthetic $M"
BB="$S --frontiers 2048 --gen 32 --chunk 2048 --warmup 16"
arm() { case $1 in def) echo "NF_X=1";; down) echo "NF_CUDA_MOE_PAIR=down";; warp) echo "NF_CUDA_HC_SINKHORN=warp";; splitoff) echo "NF_CUDA_HC_SPLIT=off";; rmax4) echo "NF_GEMV_RMAX=4";; esac; }
i=0; for m in def down warp splitoff rmax4 rmax4 splitoff warp down def def down warp splitoff rmax4; do i=$((i+1)); [ $SECONDS -lt $((CAP - 170)) ] && env $(arm $m) timeout 45 $C/nf-bench $BB > $R/alt-$i-$m.csv 2>$R/alt-$i-$m.err; done
save
for v in regs warp; do [ $SECONDS -lt $((CAP - 140)) ] && NF_CUDA_HC_SINKHORN=$v timeout 40 ncu --clock-control none --metrics gpu__time_duration.sum -k regex:'hc_' --launch-skip 200 --launch-count 128 --csv --page raw $C/nf-bench $S --frontiers 64 --gen 4 --chunk 64 --warmup 0 2>&1 | xz -9 > $R/ncu-hc-$v.csv.xz; done
save
if [ "$M" = glm53:q2 ]; then
  left=$((CAP - 75 - SECONDS)); [ $left -gt 40 ] && timeout $left $C/nf-bench $S --fill synthetic --frontiers 2048,65536,300000,1048000 --gen 8 --warmup 16 > $R/depth.csv 2>$R/depth.err
  save
  left=$((CAP - 5 - SECONDS)); [ $left -gt 40 ] && timeout $left $C/nf-bench $S --frontiers 62000,65536 --gen 4 --warmup 4 > $R/prefill.csv 2>$R/prefill.err
else
  left=$((CAP - 5 - SECONDS)); [ $left -gt 40 ] && timeout $left $C/nf-bench $S --frontiers 2048,8192,32768,65536 --gen 4 --warmup 4 > $R/prefill.csv 2>$R/prefill.err
fi
save
echo "elapsed $SECONDS s"
