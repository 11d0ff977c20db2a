# session 21, device call 3 (carry .gpucarry-s21.tar.xz at the commit in the log): the new defaults' figures
#  1. cold 62k-token prefill (default chunk 16384);
#  2. decode at depth: --fill synthetic --frontiers 2048,65536,300000 --gen 16 --warmup 16;
#  3. the prefill kernel table of a 65536-token prefill (ncu durations of every kernel; scripts/ncu_table.py
#     --step 3 is the last 16384-token chunk).
set -x
CAP=${CAP:-570}
W=/tmp/w3; R=$W/r; mkdir -p $R; C=/tmp/c3; mkdir -p $C; tar xJf .gpucarry-s21.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $W r; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > $R/smi.txt
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -gt 120000 ]; then M=glm53:q2; else M=glm53@32:q2; fi; echo "model $M" > $R/model.txt
S="--backend cuda --synthetic $M"
timeout 50 $C/nf-bench $S --frontiers 62000 --gen 4 --warmup 4 > $R/cold62k.csv 2>$R/cold62k.err
save
timeout 90 $C/nf-bench $S --fill synthetic --frontiers 2048,65536,300000 --gen 16 --warmup 16 > $R/depth.csv 2>$R/depth.err
save
timeout $((CAP - SECONDS - 10)) ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw $C/nf-bench $S --frontiers 65536 --gen 1 --warmup 0 2>&1 | xz -9 > $R/ncu-prefill65k.csv.xz
save
echo "elapsed $SECONDS s"
