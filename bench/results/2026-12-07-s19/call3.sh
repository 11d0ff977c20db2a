# session 19, device call 3 (after call 2; carry .nfcarry-s19.tar.xz): with the switches call 2 found faster (passed
# in WIN, e.g. WIN="NF_CUDA_ROUTER_FUSED=on NF_CUDA_COMBINE_FOLD=on NF_CUDA_IQ2_ROWS=on"): the decode kernel table
# (ncu, as session 18's call 3) and decode at 2048 and 65536 (--fill synthetic), for issue 7's table.
set -x
CAP=${CAP:-400}
W=/tmp/w3; R=$W/r; mkdir -p $R; C=/tmp/c3; mkdir -p $C; tar xJf .nfcarry-s19.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $W r; }
echo "WIN=$WIN" > $R/win.txt
nvidia-smi --query-gpu=name,memory.total --format=csv > $R/smi.txt
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -gt 120000 ]; then M=glm53:q2; else M=glm53@32:q2; fi; echo "model $M" > $R/model.txt
S="--backend cuda --synthetic $M"
env $WIN NF_X=1 timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --page raw --launch-skip 1100 --launch-count 2000 $C/nf-bench $S --frontiers 64 --gen 4 --chunk 64 --warmup 0 2>&1 | xz -9 > $R/ncu-decode.csv.xz
save
env $WIN NF_X=1 timeout 200 $C/nf-bench $S --fill synthetic --frontiers 2048,65536 --gen 16 --warmup 16 > $R/depth.csv 2> $R/depth.err
save
echo "elapsed $SECONDS s"
