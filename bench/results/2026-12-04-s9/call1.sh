# session 9, device call 1: the integer-dot GEMV decode (NF_GEMV_I8 off | lowbit (default) | all) on the H200
set -x
R=$OUT/r; mkdir -p $R; C=/tmp/c; mkdir -p $C; tar xJf .nfcarry.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $OUT r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv > $R/smi.txt
# kernels against the double reference, every format, all three decode levels (test_gemv.c)
timeout 150 $C/nf-gpu-tests --only gemv > $R/gemv-check.txt 2>&1; echo "rc=$?" >> $R/gemv-check.txt
save
# kernel times, levels alternating
i=0; for m in off lowbit all all lowbit off; do i=$((i+1)); NF_GEMV_I8=$m NF_GEMV_BENCH_NO_CHECKS=1 NF_GEMV_BENCH_ONLY=q8_0,q2_K,iq2_xxs timeout 60 $C/nf-gpu-tests --only gemv --bench > $R/gemv-bench-$i-$m.txt 2>&1; done
save
BA="--backend cuda --synthetic glm53:q2 --frontiers 2048 --gen 32 --chunk 2048 --warmup 16"
for m in off lowbit all; do NF_GEMV_I8=$m timeout 60 $C/nf-bench $BA --dump-steps $R/dump-$m.jsonl --dump-topk 200 > $R/dump-$m.csv 2>$R/dump-$m.err; done
xz -9 $R/dump-*.jsonl
save
i=0; for a in off lowbit all all lowbit off off lowbit all; do i=$((i+1)); NF_GEMV_I8=$a timeout 60 $C/nf-bench $BA > $R/ab-$i-$a.csv 2>/dev/null; done
save
# the fixtures against the CPU with Q8_0 on the integer path too (the default level runs in the full test, call 2)
NF_GEMV_I8=all timeout 100 $C/nf-gpu-tests --quick --only backend > $R/backend-quick-all.txt 2>&1; echo "rc=$?" >> $R/backend-quick-all.txt
save
ls -la $R
