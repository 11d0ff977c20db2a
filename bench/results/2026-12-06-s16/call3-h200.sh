# session 16, device call 3 (H200, if one can be started): issue 7 and 8's figures for the full glm53:q2 (97.6 GB)
# with the engine of 9bd072a (kernels of 295e789; session 9's flat jobs, conv step and arena on by default):
# decode at 2048 (three processes), depth to 300000 plus a 1M point, the prefill sweep at the backend's chunk
# (4096), the cold 62k prefill, the decode kernel table. Carry .nfcarry-h100.tar.xz (the same PORTABLE binaries).
set -x
W=/tmp/w; R=$W/r; mkdir -p $R; C=/tmp/c; mkdir -p $C; tar xJf .nfcarry-h100.tar.xz -C $C
save() { tar czf $OUT/res.tgz -C $W r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version,memory.total,memory.free --format=csv > $R/smi.txt
S="--backend cuda --synthetic glm53:q2"
for i in 1 2 3; do timeout 70 $C/nf-bench $S --frontiers 2048 --gen 32 --chunk 2048 --warmup 16 > $R/decode2k-$i.csv 2>$R/decode2k-$i.err; done
save
timeout 100 $C/nf-bench $S --fill synthetic --frontiers 2048,65536,300000 --gen 16 --warmup 16 > $R/depth.csv 2>$R/depth.err
timeout 70 $C/nf-bench $S --fill synthetic --frontiers 1048000 --gen 8 --warmup 16 > $R/depth1m.csv 2>$R/depth1m.err
save
timeout 100 $C/nf-bench $S --frontiers 2048,8192,32768,65536 --gen 4 --warmup 16 > $R/prefill.csv 2>$R/prefill.err
save
timeout 80 $C/nf-bench $S --frontiers 62000 --gen 8 --warmup 16 > $R/prefill62k.csv 2>$R/prefill62k.err
save
left=$((570 - SECONDS)); [ $left -gt 60 ] && timeout $left ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --page raw --launch-skip 1500 --launch-count 2000 $C/nf-bench $S --frontiers 64 --gen 4 --chunk 64 --warmup 0 2>&1 | xz -9 > $R/ncu-decode.csv.xz
save
echo "elapsed $SECONDS s"
