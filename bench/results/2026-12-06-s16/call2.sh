# session 16, device call 2 (H100 80 GB): prefill of glm53@32:q2 at the CUDA backend's chunk (9bd072a: nf-bench
# now takes the backend's preferred chunk, 4096, when --chunk is not given; call 1's sweep ran at the old 512),
# the cold 62k prefill at 4096 and 8192, and the prefill kernel table of one 4096-token chunk (ncu).
# Carry .nfcarry-h100.tar.xz (PORTABLE=1 nf-bench of 9bd072a). Results in $OUT/res.tgz.
set -x
W=/tmp/w; R=$W/r; mkdir -p $R; C=/tmp/c; mkdir -p $C; tar xJf .nfcarry-h100.tar.xz -C $C
save() { tar czf $OUT/res.tgz -C $W r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version,memory.total,memory.free --format=csv > $R/smi.txt
S="--backend cuda --synthetic glm53@32:q2"
timeout 150 $C/nf-bench $S --frontiers 2048,8192,32768,65536 --gen 4 --warmup 16 > $R/prefill.csv 2>$R/prefill.err
save
timeout 100 $C/nf-bench $S --frontiers 62000 --gen 8 --warmup 16 > $R/prefill62k-4096.csv 2>$R/prefill62k-4096.err
timeout 100 $C/nf-bench $S --frontiers 62000 --gen 8 --warmup 16 --chunk 8192 > $R/prefill62k-8192.csv 2>$R/prefill62k-8192.err
save
left=$((560 - SECONDS)); [ $left -gt 60 ] && timeout $left ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --page raw $C/nf-bench $S --frontiers 4096 --gen 1 --warmup 0 2>&1 | xz -9 > $R/ncu-prefill.csv.xz
save
echo "elapsed $SECONDS s"
