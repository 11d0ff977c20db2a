# session 21, device call 1 (carry .gpucarry.tar.xz from scripts/gpu-carry.sh at the commit in the log):
#  1. the KDA kernel test on the GPU (chunked path against the CPU and the fused path, glm53's full shape) and its
#     bench (fused / prepared / chunked per call, T up to 16384);
#  2. prefill A/B at frontier 65536: NF_CUDA_KDA_CHUNK=off | on alternating (off, on, on, off), default chunk;
#  3. memcheck of the kda test (quick); the gemv test (small set: the NaN cases of the warp-per-row kernels);
#  4. the backend tests with 128-token fixtures (f32 and q2 recipes: the chunked KDA in the bf16-mode checks);
#  5. decode at 2048 (the greedy hash changes: the 2048-token prefill now runs the chunked KDA).
set -x
CAP=${CAP:-570}
W=/tmp/w1; R=$W/r; mkdir -p $R; C=/tmp/c1; mkdir -p $C; tar xJf .gpucarry.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $W r; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > $R/smi.txt
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -gt 120000 ]; then M=glm53:q2; else M=glm53@32:q2; fi; echo "model $M" > $R/model.txt
S="--backend cuda --synthetic $M"
timeout 90 $C/nf-gpu-tests --only kda --bench > $R/kda.txt 2>&1; echo "rc=$?" >> $R/kda.txt
save
i=0; for v in off on on off; do i=$((i+1)); [ $SECONDS -lt $((CAP - 60)) ] || break
  NF_CUDA_KDA_CHUNK=$v timeout 55 $C/nf-bench $S --frontiers 65536 --gen 1 --warmup 2 > $R/pp-$i-$v.csv 2>$R/pp-$i-$v.err; save; done
[ $SECONDS -lt $((CAP - 50)) ] && { timeout 45 compute-sanitizer --tool memcheck $C/nf-gpu-tests --quick --only kda > $R/memcheck-kda.txt 2>&1; echo "rc=$?" >> $R/memcheck-kda.txt; }
[ $SECONDS -lt $((CAP - 40)) ] && { NF_GEMV_TEST_SMALL=1 timeout 35 $C/nf-gpu-tests --only gemv > $R/gemv.txt 2>&1; echo "rc=$?" >> $R/gemv.txt; }
save
[ $SECONDS -lt $((CAP - 100)) ] && { NF_GPU_TEST_RECIPES=f32,q2 NF_GPU_TEST_LONG=1024 timeout 95 $C/nf-gpu-tests --only backend > $R/backend.txt 2>&1; echo "rc=$?" >> $R/backend.txt; }
save
[ $SECONDS -lt $((CAP - 45)) ] && timeout 42 $C/nf-bench $S --frontiers 2048 --gen 32 --chunk 2048 --warmup 16 > $R/dec.csv 2>$R/dec.err
save
echo "elapsed $SECONDS s"
