# session 20, device call C (carry .nfcarry-s20.tar.xz at the commit in the log):
#  1. gemv test (small set): the forced passes of both warp-per-row kernels on the GPU;
#  2. gemv bench of the routed down (Q2_K 4096 x 2048, 8 experts): NF_CUDA_Q2K_ROWS off | on (R 4) | on with R 2;
#  3. decode A/B: def | q2k (NF_CUDA_Q2K_ROWS=on) | q2k2 (+ NF_CUDA_Q2K_R=2), alternating;
#  4. backend test (--quick) with the Q2_K kernel on; 5. the memory pool's peak of a 16384-token prefill chunk.
set -x
CAP=${CAP:-300}
W=/tmp/wC; R=$W/r; mkdir -p $R; C=/tmp/cC; mkdir -p $C; tar xJf .nfcarry-s20.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $W r; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > $R/smi.txt
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -gt 120000 ]; then M=glm53:q2; else M=glm53@32:q2; fi; echo "model $M" > $R/model.txt
S="--backend cuda --synthetic $M"
NF_GEMV_TEST_SMALL=1 timeout 60 $C/nf-gpu-tests --only gemv > $R/gpu-tests-gemv.txt 2>&1; echo "rc=$?" >> $R/gpu-tests-gemv.txt
save
for v in off on r2; do q=on; r=4; [ $v = off ] && q=off; [ $v = r2 ] && r=2
  NF_CUDA_Q2K_ROWS=$q NF_CUDA_Q2K_R=$r NF_GEMV_PLAN=1 NF_GEMV_BENCH_NO_CHECKS=1 NF_GEMV_BENCH_ONLY=q2_K NF_GEMV_BENCH_CASES=moe_down,down,dense timeout 60 $C/nf-gpu-tests --only gemv --bench > $R/gemv-bench-q2k-$v.txt 2>&1; done
save
BB="$S --frontiers 2048 --gen 32 --chunk 2048 --warmup 16"
i=0; for v in def q2k q2k2 q2k2 q2k def def q2k q2k2 q2k2 q2k def; do i=$((i+1)); [ $SECONDS -lt $((CAP - 90)) ] || break
  q=off; r=4; case $v in q2k) q=on;; q2k2) q=on; r=2;; esac
  NF_CUDA_Q2K_ROWS=$q NF_CUDA_Q2K_R=$r timeout 45 $C/nf-bench $BB > $R/alt-$i-$v.csv 2>$R/alt-$i-$v.err; done
save
NF_CUDA_Q2K_ROWS=on timeout 60 $C/nf-gpu-tests --quick --only backend > $R/gpu-tests-backend-q2k.txt 2>&1; echo "rc=$?" >> $R/gpu-tests-backend-q2k.txt
save
[ $SECONDS -lt $((CAP - 25)) ] && timeout 30 $C/nf-bench $S --frontiers 16384 --gen 1 --warmup 0 --chunk 16384 > $R/pp16k-c16384.csv 2>$R/pp16k-c16384.err
save
echo "elapsed $SECONDS s"
