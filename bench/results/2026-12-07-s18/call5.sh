# session 18, device call 5 (warm H100 after call 4; carry .nfcarry-s18.tar.xz at 6ac0bdf): def vs down
# (NF_CUDA_MOE_PAIR=down) four more times each, alternating, then the depth sweep with down.
set -x
W=/tmp/w5; R=$W/r; mkdir -p $R; C=/tmp/c5; mkdir -p $C; tar xJf .nfcarry-s18.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $W r; }
S="--backend cuda --synthetic glm53@32:q2"
BB="$S --frontiers 2048 --gen 32 --chunk 2048 --warmup 16"
arm() { case $1 in def) echo "NF_X=1";; down) echo "NF_CUDA_MOE_PAIR=down";; esac; }
i=0; for m in down def def down down def def down; do i=$((i+1)); env $(arm $m) timeout 45 $C/nf-bench $BB > $R/alt-$i-$m.csv 2>$R/alt-$i-$m.err; done
save
NF_CUDA_MOE_PAIR=down timeout 120 $C/nf-bench $S --fill synthetic --frontiers 2048,65536,300000 --gen 16 --warmup 16 > $R/depth.csv 2>$R/depth.err
save
echo "elapsed $SECONDS s"
