# session 8, device call (recorded in session 9 from the untracked file it left): see docs/benchmarks.md
set -x
R=$OUT/r; mkdir -p $R; C=/tmp/c; mkdir -p $C; tar xJf .gpucarry-slim.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $OUT r; }
timeout 200 $C/nf-gpu-tests --only gemv > $R/gemv-check.txt 2>&1; echo "rc=$?" >> $R/gemv-check.txt
save
i=0; for m in lanes shared lanes shared; do i=$((i+1)); NF_GEMV_IQ2_GRID=$m NF_GEMV_BENCH_NO_CHECKS=1 NF_GEMV_BENCH_ONLY=iq2_xxs timeout 100 $C/nf-gpu-tests --only gemv --bench > $R/gemv-bench-$i-$m.txt 2>&1; done
save
BA="--backend cuda --synthetic glm53:q2 --frontiers 2048 --gen 32 --chunk 2048 --warmup 16"
NF_GEMV_IQ2_GRID=shared $C/nf-bench $BA --dump-steps $R/dump-shared.jsonl --dump-topk 200 > $R/dump-shared.csv 2>$R/dump-shared.err
NF_GEMV_IQ2_GRID=lanes $C/nf-bench $BA --dump-steps $R/dump-lanes.jsonl --dump-topk 200 > $R/dump-lanes.csv 2>$R/dump-lanes.err
cmp $R/dump-shared.jsonl $R/dump-lanes.jsonl > $R/dump-cmp.txt 2>&1; echo "cmp rc=$?" >> $R/dump-cmp.txt
i=0; for a in shared lanes lanes shared shared lanes lanes shared; do i=$((i+1)); NF_GEMV_IQ2_GRID=$a $C/nf-bench $BA > $R/ab-$i-$a.csv 2>/dev/null; done
save
timeout 150 $C/nf-gpu-tests > $R/gpu-tests.txt 2>&1; echo "rc=$?" >> $R/gpu-tests.txt
save
NF_GEMV_BENCH_NO_CHECKS=1 NF_GEMV_BENCH_ONLY=iq2_xxs NF_GEMV_BENCH_CASES=gate_up timeout 100 ncu --set full -k regex:gemv_stream --launch-skip 5 --launch-count 1 $C/nf-gpu-tests --only gemv --bench > $R/ncu-lanes-details.txt 2>&1
save
