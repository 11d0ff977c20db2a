# session 18, device call 2 (warm H100 after call 1; same carry .nfcarry-s17.tar.xz at 6fb1852):
# 1. the pair bench with the shared expert's CTA share forced (NF_GEMV_PAIR_BSHARE 6/10/17/25 %) and the default;
# 2. decode alternating: split (NF_CUDA_HC_SPLIT=on, full router count: call 1's best), pair (+ NF_CUDA_MOE_PAIR=on),
#    pair10 (pair with BSHARE 10);
# 3. issue 8 with everything that call 1 found faster on: depth sweep (--fill synthetic 2048, 65536, 300000),
#    prefill at 65536 and the cold 62k prefill.
set -x
CAP=${CAP:-400}
W=/tmp/w; R=$W/r; mkdir -p $R; C=/tmp/c; mkdir -p $C; tar xJf .nfcarry-s17.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $W r; }
for b in 0 6 10 17 25; do
  if [ $b = 0 ]; then e=""; else e="NF_GEMV_PAIR_BSHARE=$b"; fi
  env $e NF_GEMV_BENCH_NO_CHECKS=1 NF_GEMV_BENCH_CASES=moe_gate_up,moe_down NF_GEMV_BENCH_ONLY=none timeout 30 $C/nf-gpu-tests --only gemv --bench > $R/pairbench-$b.txt 2>&1
done
save
M=glm53@32:q2; S="--backend cuda --synthetic $M"
BB="$S --frontiers 2048 --gen 32 --chunk 2048 --warmup 16"
arm() { case $1 in split) echo "NF_CUDA_HC_SPLIT=on";; pair) echo "NF_CUDA_HC_SPLIT=on NF_CUDA_MOE_PAIR=on";; pair10) echo "NF_CUDA_HC_SPLIT=on NF_CUDA_MOE_PAIR=on NF_GEMV_PAIR_BSHARE=10";; esac; }
i=0; for m in split pair pair10 pair10 pair split split pair pair10; do i=$((i+1)); [ $SECONDS -lt $((CAP - 200)) ] && env $(arm $m) timeout 45 $C/nf-bench $BB > $R/alt-$i-$m.csv 2>$R/alt-$i-$m.err; done
save
ALL="NF_CUDA_HC_SPLIT=on NF_CUDA_HC_PROJ_PREFILL=on NF_CUDA_MLA_TC=on"
left=$((CAP - 90 - SECONDS)); [ $left -gt 40 ] && env $ALL timeout $left $C/nf-bench $S --fill synthetic --frontiers 2048,65536,300000 --gen 16 --warmup 16 > $R/depth.csv 2>$R/depth.err
save
left=$((CAP - 5 - SECONDS)); [ $left -gt 40 ] && env $ALL timeout $left $C/nf-bench $S --frontiers 62000,65536 --gen 4 --warmup 4 > $R/prefill.csv 2>$R/prefill.err
save
echo "elapsed $SECONDS s"
