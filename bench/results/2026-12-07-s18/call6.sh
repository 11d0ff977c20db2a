# session 18, device call 6 (H200 wanted: glm53:q2, 97.6 GB, does not fit an H100; carry .nfcarry-s18.tar.xz at
# the session's last commit): issue 7 and 8's figures on the H200 with the session's defaults (split hc projection
# + fold, early GEMV copies, the MoE downs paired, one-pass prefill projection, tensor-core MLA core), none since
# session 11: the backend tests, then decode at depth (--fill synthetic 2048, 65536, 300000, 1048000), the prefill
# sweep (2048, 8192, 32768, 65536) and the cold 62k prefill; before them the 128-vector GEMM tiles (opt-in
# NF_CUDA_GEMM_BN128=ids|all): its GEMM test, the GEMM bench and a prefill A/B. On an H100 it runs glm53@32:q2.
set -x
CAP=${CAP:-330}
W=/tmp/w6; R=$W/r; mkdir -p $R; C=/tmp/c6; mkdir -p $C; tar xJf .nfcarry-s18.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $W r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version,memory.total,memory.free --format=csv > $R/smi.txt
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -gt 120000 ]; then M=glm53:q2; else M=glm53@32:q2; fi; echo "model $M" > $R/model.txt
timeout 80 $C/nf-gpu-tests --quick --only backend > $R/gpu-tests.txt 2>&1; echo "rc=$?" >> $R/gpu-tests.txt
NF_CUDA_GEMM_BN128=all timeout 40 $C/nf-gpu-tests --only gemm > $R/gpu-tests-gemm128.txt 2>&1; echo "rc=$?" >> $R/gpu-tests-gemm128.txt
save
# the 128-vector GEMM tiles (NF_CUDA_GEMM_BN128, opt-in): the GEMM bench both ways, then prefill A/B (8192 tokens)
for v in off ids; do NF_CUDA_GEMM_BN128=$v timeout 40 $C/nf-gpu-tests --only gemm --bench > $R/gemm-bench-$v-$SECONDS.txt 2>&1; done
S="--backend cuda --synthetic $M"
i=0; for v in off ids all all ids off; do i=$((i+1)); [ $SECONDS -lt $((CAP - 30)) ] && NF_CUDA_GEMM_BN128=$v timeout 60 $C/nf-bench $S --frontiers 8192 --gen 1 --warmup 2 > $R/pp-$i-$v.csv 2>$R/pp-$i-$v.err; done
save
left=$((CAP - 150 - SECONDS)); [ $left -gt 30 ] && timeout $left $C/nf-bench $S --fill synthetic --frontiers 2048,65536,300000,1048000 --gen 16 --warmup 16 > $R/depth.csv 2>$R/depth.err
save
left=$((CAP - 60 - SECONDS)); [ $left -gt 30 ] && timeout $left $C/nf-bench $S --frontiers 2048,8192,32768,65536 --gen 4 --warmup 4 > $R/prefill.csv 2>$R/prefill.err
save
left=$((CAP - 3 - SECONDS)); [ $left -gt 30 ] && timeout $left $C/nf-bench $S --frontiers 62000 --gen 4 --warmup 4 > $R/prefill62k.csv 2>$R/prefill62k.err
save
echo "elapsed $SECONDS s"
