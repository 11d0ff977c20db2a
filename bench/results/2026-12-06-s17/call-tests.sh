# session 17, the lean fallback of call1.sh when little device time is left: on 464aa9a (PORTABLE build, carried)
# only the GPU tests of the four opt-in changes (backend fixtures + tiny synth with all four on, the router with the
# narrowing, the attention core's tensor-core path), within CAP seconds.
set -x
CAP=${CAP:-140}
W=/tmp/w; R=$W/r; mkdir -p $R; C=/tmp/c; mkdir -p $C; tar xJf .nfcarry-s17.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $W r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version,memory.total,memory.free --format=csv > $R/smi.txt
NF_CUDA_ROUTER_NARROW=on timeout 15 $C/nf-gpu-tests --only router > $R/gpu-tests-router.txt 2>&1; echo "rc=$?" >> $R/gpu-tests-router.txt
timeout 25 $C/nf-gpu-tests --quick --only attn > $R/gpu-tests-attn.txt 2>&1; echo "rc=$?" >> $R/gpu-tests-attn.txt
save
left=$((CAP - 5 - SECONDS)); NF_CUDA_HC_SPLIT=on NF_CUDA_ROUTER_NARROW=on NF_CUDA_HC_PROJ_PREFILL=on NF_CUDA_MLA_TC=on timeout $left $C/nf-gpu-tests --quick --only backend > $R/gpu-tests-backend.txt 2>&1; echo "rc=$?" >> $R/gpu-tests-backend.txt
save
echo "elapsed $SECONDS s"
