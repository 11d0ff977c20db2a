# session 8, device call (recorded in session 9 from the untracked file it left): see docs/benchmarks.md
set -x
R=$OUT/r; mkdir -p $R; C=/tmp/c; mkdir -p $C; tar xJf .gpucarry-slim.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $OUT r; }
cd $C
timeout 200 ./nf-gpu-tests --only gemv > $R/gemv-check.txt 2>&1; echo "rc=$?" >> $R/gemv-check.txt
save
i=0; for m in on off on off; do i=$((i+1)); NF_GEMV_MMA=$m NF_GEMV_BENCH_NO_CHECKS=1 NF_GEMV_BENCH_ONLY=iq2_xxs timeout 100 ./nf-gpu-tests --only gemv --bench > $R/gemv-bench-$i-$m.txt 2>&1; done
NF_GEMV_MMA_TILES=2 NF_GEMV_BENCH_NO_CHECKS=1 NF_GEMV_BENCH_ONLY=iq2_xxs timeout 100 ./nf-gpu-tests --only gemv --bench > $R/gemv-bench-t2.txt 2>&1
save
BA="--backend cuda --synthetic glm53:q2 --frontiers 2048 --gen 32 --chunk 2048 --warmup 16"
NF_GEMV_MMA=off ./nf-bench $BA --dump-steps $R/dump-off.jsonl --dump-topk 200 > $R/dump-off.csv 2>$R/dump-off.err
NF_GEMV_MMA=on ./nf-bench $BA --dump-steps $R/dump-on.jsonl --dump-topk 200 > $R/dump-on.csv 2>$R/dump-on.err
i=0; for a in off on t2 t2 on off off on; do i=$((i+1)); case $a in off) e="NF_GEMV_MMA=off";; on) e="NF_GEMV_MMA=on";; t2) e="NF_GEMV_MMA_TILES=2";; esac; env $e ./nf-bench $BA > $R/ab-$i-$a.csv 2>/dev/null; done
save
timeout 150 ./nf-gpu-tests > $R/gpu-tests.txt 2>&1; echo "rc=$?" >> $R/gpu-tests.txt
save
NF_GEMV_TEST_SMALL=1 timeout 120 compute-sanitizer --tool memcheck ./nf-gpu-tests --only gemv > $R/sanitizer-gemv.txt 2>&1; echo "rc=$?" >> $R/sanitizer-gemv.txt
save
NF_GEMV_BENCH_NO_CHECKS=1 NF_GEMV_BENCH_ONLY=iq2_xxs NF_GEMV_BENCH_CASES=gate_up timeout 120 ncu --set full --import-source yes -k regex:gemv_mma --launch-skip 5 --launch-count 1 -o $R/ncu-mma ./nf-gpu-tests --only gemv --bench > $R/ncu-mma.log 2>&1
ncu -i $R/ncu-mma.ncu-rep --page details > $R/ncu-mma-details.txt 2>&1
ncu -i $R/ncu-mma.ncu-rep --page source --csv --print-source sass 2>&1 | xz -9 > $R/ncu-mma-sass.csv.xz
save
ls -la $R
