# session 20, device call B (carry .nfcarry-s20.tar.xz at the commit in the log; bench/results/2026-12-07-s20/make-carry.sh):
#  1. gemv test (small set) with the warp-per-row IQ2_XXS kernel as the default;
#  2. decode at 2048 with the new default (the hash must stay 00d7a5d42eea0551);
#  3. prefill chunk A/B at frontier 65536: --chunk 4096 | 8192 | 16384 alternating, with the memory pool's peak;
#  4. cold 62k prefill with the best chunk.
set -x
CAP=${CAP:-300}
W=/tmp/wB; R=$W/r; mkdir -p $R; C=/tmp/cB; mkdir -p $C; tar xJf .nfcarry-s20.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $W r; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > $R/smi.txt
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -gt 120000 ]; then M=glm53:q2; else M=glm53@32:q2; fi; echo "model $M" > $R/model.txt
S="--backend cuda --synthetic $M"
NF_GEMV_TEST_SMALL=1 timeout 60 $C/nf-gpu-tests --only gemv > $R/gpu-tests-gemv.txt 2>&1; echo "rc=$?" >> $R/gpu-tests-gemv.txt
timeout 45 $C/nf-bench $S --frontiers 2048 --gen 32 --chunk 2048 --warmup 16 > $R/dec.csv 2>$R/dec.err
save
i=0; for v in 4096 16384 8192 8192 16384 4096; do i=$((i+1)); [ $SECONDS -lt $((CAP - 70)) ] || break
  timeout 50 $C/nf-bench $S --frontiers 65536 --gen 1 --warmup 2 --chunk $v > $R/pp65-$i-c$v.csv 2>$R/pp65-$i-c$v.err; save; done
[ $SECONDS -lt $((CAP - 40)) ] && timeout 40 $C/nf-bench $S --frontiers 62000 --gen 4 --warmup 4 --chunk ${BEST:-16384} > $R/cold62k.csv 2>$R/cold62k.err
save
echo "elapsed $SECONDS s"
