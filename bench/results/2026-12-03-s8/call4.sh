# session 8, device call (recorded in session 9 from the untracked file it left): see docs/benchmarks.md
set -x
R=$OUT/r; mkdir -p $R; C=/tmp/c; mkdir -p $C; tar xJf .gpucarry-slim.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $OUT r; }
BA="--backend cuda --synthetic glm53:q2 --frontiers 2048 --gen 32 --chunk 2048 --warmup 16"
NF_CUDA_IDS_EARLY=off $C/nf-bench $BA --dump-steps $R/dump-off.jsonl --dump-topk 200 > $R/dump-off.csv 2>$R/dump-off.err
NF_CUDA_IDS_EARLY=on $C/nf-bench $BA --dump-steps $R/dump-on.jsonl --dump-topk 200 > $R/dump-on.csv 2>$R/dump-on.err
cmp $R/dump-off.jsonl $R/dump-on.jsonl > $R/dump-cmp.txt 2>&1; echo "cmp rc=$?" >> $R/dump-cmp.txt
i=0; for a in off on on off off on on off; do i=$((i+1)); NF_CUDA_IDS_EARLY=$a $C/nf-bench $BA > $R/ab-$i-$a.csv 2>/dev/null; done
save
timeout 150 $C/nf-gpu-tests > $R/gpu-tests.txt 2>&1; echo "rc=$?" >> $R/gpu-tests.txt
save
timeout 120 $C/nf-bench --backend cuda --synthetic glm53:q2 --fill synthetic --frontiers 2048,65536,300000,1048560 --gen 16 --warmup 16 > $R/depth.csv 2> $R/depth.err
save
for ch in 8192 16384; do timeout 100 $C/nf-bench --backend cuda --synthetic glm53:q2 --frontiers 65536 --gen 8 --chunk $ch --warmup 16 > $R/prefill65k-chunk$ch.csv 2> $R/prefill65k-chunk$ch.err; save; done
timeout 110 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --page raw --launch-skip 1500 --launch-count 2600 $C/nf-bench --backend cuda --synthetic glm53:q2 --frontiers 64 --gen 4 --chunk 64 --warmup 0 2>&1 | xz -9 > $R/ncu-decode.csv.xz
save
