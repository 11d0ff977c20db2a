# session 24, device call 3: what fits the session's last ~300 s of device time after the requests for
# bench/results/2026-12-07-s23/call1.sh found no machine: the decode A/B of NF_CUDA_IQ2_L2AHEAD (0, 2, 2, 0; the
# probe's greedy ids hash is the check that the look-ahead changes nothing), then the gemv test if time is left
# (on a GPU it compares the IQ2_XXS outputs with look-ahead 0 and 2 byte for byte, with the real prefetch).
set -x
CAP=${CAP:-130}
NAME=c3 . scripts/device-call-env.sh
i=0; for a in 0 2 2 0; do i=$((i+1)); [ $SECONDS -lt $((CAP - 25)) ] || break
  NF_CUDA_IQ2_L2AHEAD=$a timeout 25 $C/nf-bench $S --frontiers 2048 --gen 32 --chunk 2048 --warmup 16 > $R/dec-$i-a$a.csv 2>$R/dec-$i-a$a.err; save; done
[ $SECONDS -lt $((CAP - 20)) ] && timeout $((CAP - SECONDS)) $C/nf-gpu-tests --only gemv > $R/gemv.txt 2>&1; echo "rc=$?" >> $R/gemv.txt
save
echo "elapsed $SECONDS s"
