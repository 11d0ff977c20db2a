# session 18, device call 3 (warm H100; carry .nfcarry-s17.tar.xz at 6fb1852): the decode and prefill kernel tables
# with the settings calls 1 and 2 found faster (split hc projection on, prefill one-pass projection and tensor-core
# MLA core on; router narrowing and the MoE pair off; the early GEMV copies are the build's default).
set -x
W=/tmp/w3; R=$W/r; mkdir -p $R; C=/tmp/c; mkdir -p $C; tar xJf .nfcarry-s17.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $W r; }
ALL="NF_CUDA_HC_SPLIT=on NF_CUDA_HC_PROJ_PREFILL=on NF_CUDA_MLA_TC=on"
S="--backend cuda --synthetic glm53@32:q2"
env $ALL timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --page raw --launch-skip 1100 --launch-count 2000 $C/nf-bench $S --frontiers 64 --gen 4 --chunk 64 --warmup 0 2>&1 | xz -9 > $R/ncu-decode.csv.xz
save
env $ALL timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --page raw $C/nf-bench $S --frontiers 4096 --gen 1 --warmup 0 2>&1 | xz -9 > $R/ncu-prefill.csv.xz
save
echo "elapsed $SECONDS s"
