# session 22, device call 2: where a 16384-token prefill chunk's time goes now (the one-kernel MLA core and the
# chunked KDA by default; the last full table was session 18's at chunk 4096): the GEMM bench (the 16384-token
# expert shapes, a dense 4096x4096 in bf16 and Q8_0: the per-tile dequantization's cost, and the ceiling's own
# shape), then ncu durations and DRAM reads of every kernel of the first forward and scripts/ncu_table.py --step 0.
# E (env) selects the opt-ins measured in call 1.
set -x
NAME=s22c2 . scripts/device-call-env.sh
env $E timeout 120 $C/nf-gpu-tests --only gemm --bench > $R/gemm.txt 2>&1; echo "rc=$?" >> $R/gemm.txt
save
env $E timeout 300 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --page raw \
  $C/nf-bench $S --frontiers 16384 --gen 1 --warmup 0 2>&1 | xz -9 > $R/ncu-prefill16k.csv.xz
python3 scripts/ncu_table.py --step 0 --markdown $R/ncu-prefill16k.csv.xz > $R/ncu-prefill16k-table.md 2>&1
save
echo "elapsed $SECONDS s"
