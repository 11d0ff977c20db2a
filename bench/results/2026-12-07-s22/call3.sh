# session 22, device call 3 (the last ~340 s of device time): at the new defaults (fc718d5), the cold 62k prefill,
# the KDA test (the defaults against each =off), and the decode probe's greedy hash at 2048.
set -x
CAP=${CAP:-130}
NAME=s22c3 . scripts/device-call-env.sh
timeout 50 $C/nf-bench $S --frontiers 62000 --gen 4 --warmup 4 > $R/cold62k.csv 2>$R/cold62k.err
save
timeout 40 $C/nf-gpu-tests --only kda > $R/kda.txt 2>&1; echo "rc=$?" >> $R/kda.txt
save
[ $SECONDS -lt $((CAP - 22)) ] && timeout 22 $C/nf-bench $S --frontiers 2048 --gen 32 --chunk 2048 --warmup 16 > $R/probe2048.csv 2>$R/probe2048.err
save
echo "elapsed $SECONDS s"
