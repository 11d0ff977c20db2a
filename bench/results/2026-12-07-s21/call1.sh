# session 21, device call 1 (carry .gpucarry-s21.tar.xz: nf-gpu-tests, nf-bench, nf-convert, nf-synth of
# scripts/gpu-carry.sh, at the commit in the log):
#  1. the KDA kernel test (the chunked path against the CPU and the fused path, glm53's full shape) and its bench
#     (fused / prepared / chunked per call, T up to 16384); the attention test (the one-kernel MLA core against
#     the double reference) and its quick bench (the prefill core by path);
#  2. prefill A/B at frontier 65536 (default chunk 16384): def (both new paths), kdaoff (NF_CUDA_KDA_CHUNK=off),
#     flashoff (NF_CUDA_MLA_FLASH=off), alternating def, kdaoff, flashoff, flashoff, kdaoff, def;
#  3. the gemv test (small set: the NaN cases of the warp-per-row kernels).
set -x
CAP=${CAP:-570}
W=/tmp/w1; R=$W/r; mkdir -p $R; C=/tmp/c1; mkdir -p $C; tar xJf .gpucarry-s21.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $W r; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > $R/smi.txt
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -gt 120000 ]; then M=glm53:q2; else M=glm53@32:q2; fi; echo "model $M" > $R/model.txt
S="--backend cuda --synthetic $M"
timeout 80 $C/nf-gpu-tests --only kda --bench > $R/kda.txt 2>&1; echo "rc=$?" >> $R/kda.txt
timeout 60 $C/nf-gpu-tests --quick --bench --only attn > $R/attn.txt 2>&1; echo "rc=$?" >> $R/attn.txt
save
i=0; for v in def kdaoff flashoff flashoff kdaoff def; do i=$((i+1)); [ $SECONDS -lt $((CAP - 60)) ] || break
  case $v in def) E="";; kdaoff) E="NF_CUDA_KDA_CHUNK=off";; flashoff) E="NF_CUDA_MLA_FLASH=off";; esac
  env $E timeout 55 $C/nf-bench $S --frontiers 65536 --gen 1 --warmup 2 > $R/pp-$i-$v.csv 2>$R/pp-$i-$v.err; save; done
[ $SECONDS -lt $((CAP - 35)) ] && { NF_GEMV_TEST_SMALL=1 timeout 30 $C/nf-gpu-tests --only gemv > $R/gemv.txt 2>&1; echo "rc=$?" >> $R/gemv.txt; }
save
echo "elapsed $SECONDS s"
