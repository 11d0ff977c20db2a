# session 18, device call 7 (little device time left; carry .nfcarry-s18.tar.xz at ef336c6): the 128-vector GEMM
# tiles only: the GEMM test with NF_CUDA_GEMM_BN128=all, the GEMM bench off / ids alternating, then prefill A/B.
set -x
CAP=${CAP:-100}
W=/tmp/w7; R=$W/r; mkdir -p $R; C=/tmp/c7; mkdir -p $C; tar xJf .nfcarry-s18.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $W r; }
nvidia-smi --query-gpu=name,memory.total --format=csv > $R/smi.txt
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -gt 120000 ]; then M=glm53:q2; else M=glm53@32:q2; fi; echo "model $M" > $R/model.txt
NF_CUDA_GEMM_BN128=all timeout 30 $C/nf-gpu-tests --only gemm > $R/gpu-tests-gemm128.txt 2>&1; echo "rc=$?" >> $R/gpu-tests-gemm128.txt
save
i=0; for v in off ids ids off; do i=$((i+1)); [ $SECONDS -lt $((CAP - 40)) ] && NF_CUDA_GEMM_BN128=$v timeout 30 $C/nf-gpu-tests --only gemm --bench > $R/gemm-bench-$i-$v.txt 2>&1; done
save
S="--backend cuda --synthetic $M"
i=0; for v in off ids ids off off ids; do i=$((i+1)); [ $SECONDS -lt $((CAP - 12)) ] && NF_CUDA_GEMM_BN128=$v timeout 30 $C/nf-bench $S --frontiers 8192 --gen 1 --warmup 2 > $R/pp-$i-$v.csv 2>$R/pp-$i-$v.err; done
save
echo "elapsed $SECONDS s"
