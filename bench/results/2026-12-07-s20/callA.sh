# session 20, device call A (carry .nfcarry-s19.tar.xz built at 10be60c, bench/results/2026-12-07-s19/make-carry.sh):
#  1. decode A/B of the warp-per-row IQ2_XXS kernel alone: off | iq (NF_CUDA_IQ2_ROWS=on), alternating, 4 pairs;
#  2. prefill chunk A/B: --frontiers 8192 --gen 1 with --chunk 4096 | 8192 | 16384, alternating;
#  3. 65536 prefill with chunk 4096 vs the best larger chunk (one each, as time allows).
set -x
CAP=${CAP:-300}
W=/tmp/wA; R=$W/r; mkdir -p $R; C=/tmp/cA; mkdir -p $C; tar xJf .nfcarry-s19.tar.xz -C $C
save() { tar czf $OUT/res.tgz -C $W r; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > $R/smi.txt
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -gt 120000 ]; then M=glm53:q2; else M=glm53@32:q2; fi; echo "model $M" > $R/model.txt
S="--backend cuda --synthetic $M"
BB="$S --frontiers 2048 --gen 32 --chunk 2048 --warmup 16"
i=0; for v in off iq iq off off iq iq off; do i=$((i+1)); [ $SECONDS -lt $((CAP - 200)) ] || break
  iq=off; [ $v = iq ] && iq=on
  NF_CUDA_IQ2_ROWS=$iq timeout 45 $C/nf-bench $BB > $R/alt-$i-$v.csv 2>$R/alt-$i-$v.err; done
save
i=0; for v in 4096 8192 16384 16384 8192 4096; do i=$((i+1)); [ $SECONDS -lt $((CAP - 110)) ] || break
  timeout 40 $C/nf-bench $S --frontiers 8192 --gen 1 --warmup 2 --chunk $v > $R/pp-$i-c$v.csv 2>$R/pp-$i-c$v.err; done
save
i=0; for v in 4096 16384; do i=$((i+1)); [ $SECONDS -lt $((CAP - 45)) ] || break
  timeout 45 $C/nf-bench $S --frontiers 65536 --gen 1 --warmup 2 --chunk $v > $R/pp65-$i-c$v.csv 2>$R/pp65-$i-c$v.err; done
save
echo "elapsed $SECONDS s"
