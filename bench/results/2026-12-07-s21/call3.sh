# session 21, device call 3 (carry .gpucarry-s21.tar.xz at the commit in the log):
#  1. the KDA test and bench with the prep kernel's blocked triangular loops; ncu durations of the first 40 KDA
#     kernels of a 16384-token prefill;
#  2. prefill A/B at frontier 65536: def | kdaoff (NF_CUDA_KDA_CHUNK=off) alternating def, kdaoff, kdaoff, def;
#  3. cold 62k-token prefill; decode at depth (--fill synthetic --frontiers 2048,65536,300000 --gen 16 --warmup 16).
set -x
CAP=${CAP:-520}
W=/tmp/w3; R=$W/r; mkdir -p $R; C=/tmp/c3; mkdir -p $C; tar xJf .gpucarry-s21.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $W r; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > $R/smi.txt
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -gt 120000 ]; then M=glm53:q2; else M=glm53@32:q2; fi; echo "model $M" > $R/model.txt
S="--backend cuda --synthetic $M"
timeout 60 $C/nf-gpu-tests --only kda --bench > $R/kda.txt 2>&1; echo "rc=$?" >> $R/kda.txt
save
timeout 70 ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw -k regex:"kda_" --launch-count 40 $C/nf-bench $S --frontiers 16384 --gen 1 --warmup 0 2>&1 | xz -9 > $R/ncu-kda-pipeline.csv.xz
save
i=0; for v in def kdaoff kdaoff def; do i=$((i+1)); [ $SECONDS -lt $((CAP - 60)) ] || break
  case $v in def) E="";; kdaoff) E="NF_CUDA_KDA_CHUNK=off";; esac
  env $E timeout 55 $C/nf-bench $S --frontiers 65536 --gen 1 --warmup 2 > $R/pp-$i-$v.csv 2>$R/pp-$i-$v.err; save; done
[ $SECONDS -lt $((CAP - 45)) ] && timeout 45 $C/nf-bench $S --frontiers 62000 --gen 4 --warmup 4 > $R/cold62k.csv 2>$R/cold62k.err
save
[ $SECONDS -lt $((CAP - 40)) ] && timeout $((CAP - SECONDS - 5)) $C/nf-bench $S --fill synthetic --frontiers 2048,65536,300000 --gen 16 --warmup 16 > $R/depth.csv 2>$R/depth.err
save
echo "elapsed $SECONDS s"
