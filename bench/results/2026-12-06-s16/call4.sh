# session 16, device call 4 (H100): the split hc projection (NF_CUDA_HC_SPLIT, default on) against the GEMV's
# (=off) inside one build: the backend tests against the CPU (full) and compute-sanitizer memcheck on the fixtures,
# step dumps both ways (not byte-identical by design: r * (W x) instead of W (r x)), decode alternating
# on/off (one process each), the decode kernel table. Carry .nfcarry-h100.tar.xz (PORTABLE binaries of this commit).
set -x
W=/tmp/w; R=$W/r; mkdir -p $R; C=/tmp/c; mkdir -p $C; tar xJf .nfcarry-h100.tar.xz -C $C
save() { tar czf $OUT/res.tgz -C $W r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version,memory.total,memory.free --format=csv > $R/smi.txt
timeout 150 $C/nf-gpu-tests --only backend > $R/gpu-tests-backend.txt 2>&1; echo "rc=$?" >> $R/gpu-tests-backend.txt
save
NF_GPU_TEST_FIXTURES_ONLY=1 timeout 90 compute-sanitizer --tool memcheck $C/nf-gpu-tests --quick --only backend > $R/memcheck.txt 2>&1; echo "rc=$?" >> $R/memcheck.txt
save
S="--backend cuda --synthetic glm53@32:q2"
BB="$S --frontiers 2048 --gen 32 --chunk 2048 --warmup 16"
for m in on off; do NF_CUDA_HC_SPLIT=$m timeout 80 $C/nf-bench $BB --dump-steps $R/dump-$m.jsonl --dump-topk 200 > $R/dump-$m.csv 2>$R/dump-$m.err; done
xz -9 $R/dump-*.jsonl
save
i=0; for m in on off off on on off; do i=$((i+1)); NF_CUDA_HC_SPLIT=$m timeout 70 $C/nf-bench $BB > $R/alt-$i-$m.csv 2>$R/alt-$i-$m.err; done
save
left=$((380 - SECONDS)); [ $left -gt 60 ] && timeout $left ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --page raw --launch-skip 1100 --launch-count 2000 $C/nf-bench $S --frontiers 64 --gen 4 --chunk 64 --warmup 0 2>&1 | xz -9 > $R/ncu-decode.csv.xz
save
echo "elapsed $SECONDS s"
