# session 19, device call 2b: call 2 cut to what a short device budget allows (carry .nfcarry-s19.tar.xz at b310a11):
# the routed gate+up bench with NF_CUDA_IQ2_ROWS off / on, the four-arm alternating decode A/B
# (off | rf fused router | rff + combine fold | rffi + iq2rows), then the small gemv test set as time allows.
set -x
CAP=${CAP:-200}
W=/tmp/w2; R=$W/r; mkdir -p $R; C=/tmp/c2; mkdir -p $C; tar xJf .nfcarry-s19.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $W r; }
nvidia-smi --query-gpu=name,memory.total --format=csv > $R/smi.txt
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -gt 120000 ]; then M=glm53:q2; else M=glm53@32:q2; fi; echo "model $M" > $R/model.txt
for v in off on; do NF_CUDA_IQ2_ROWS=$v NF_GEMV_BENCH_NO_CHECKS=1 NF_GEMV_BENCH_ONLY=iq2_xxs NF_GEMV_BENCH_CASES=gate_up timeout 30 $C/nf-gpu-tests --only gemv --bench > $R/gemv-bench-iq2-$v.txt 2>&1; done
save
BB="--backend cuda --synthetic $M --frontiers 2048 --gen 32 --chunk 2048 --warmup 16"
i=0; for v in off rffi rf rff rff rf rffi off; do i=$((i+1)); [ $SECONDS -lt $((CAP - 25)) ] || break
  rf=off; fo=off; iq=off; case $v in rf) rf=on;; rff) rf=on; fo=on;; rffi) rf=on; fo=on; iq=on;; esac
  NF_CUDA_ROUTER_FUSED=$rf NF_CUDA_COMBINE_FOLD=$fo NF_CUDA_IQ2_ROWS=$iq timeout 40 $C/nf-bench $BB > $R/alt-$i-$v.csv 2>$R/alt-$i-$v.err; save; done
[ $SECONDS -lt $((CAP - 15)) ] && NF_GEMV_TEST_SMALL=1 timeout 15 $C/nf-gpu-tests --only gemv > $R/gpu-tests-gemv.txt 2>&1; echo "rc=$?" >> $R/gpu-tests-gemv.txt
save
echo "elapsed $SECONDS s"
