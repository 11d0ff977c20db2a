# session 20, device call D (carry .nfcarry-s20.tar.xz at the commit in the log): the defaults of that commit
# (IQ2_XXS warp-per-row kernel on, prefill chunk 16384): decode A/B off | iq (NF_CUDA_IQ2_ROWS), decode at depth and
# the cold 62k prefill (on an H200: glm53:q2, the model).
set -x
W=/tmp/wD; R=$W/r; mkdir -p $R; C=/tmp/cD; mkdir -p $C; tar xJf .nfcarry-s20.tar.xz -C $C
save() { tar czf $OUT/res.tgz -C $W r; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > $R/smi.txt
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -gt 120000 ]; then M=glm53:q2; else M=glm53@32:q2; fi; echo "model $M" > $R/model.txt
S="--backend cuda --synthetic $M"
BB="$S --frontiers 2048 --gen 32 --chunk 2048 --warmup 16"
i=0; for v in off iq iq off; do i=$((i+1)); iq=off; [ $v = iq ] && iq=on
  NF_CUDA_IQ2_ROWS=$iq timeout 60 $C/nf-bench $BB > $R/alt-$i-$v.csv 2>$R/alt-$i-$v.err; done; save
timeout 100 $C/nf-bench $S --fill synthetic --frontiers 2048,65536,300000 --gen 16 --warmup 16 > $R/depth.csv 2>$R/depth.err; save
timeout 60 $C/nf-bench $S --frontiers 62000 --gen 4 --warmup 4 > $R/cold62k.csv 2>$R/cold62k.err; save
echo "elapsed $SECONDS s"
