# session 13, device call 1: session 9's prepared call2 (bench/results/2026-12-04-s9/call2.sh) unchanged: nf-ab 2771b2a
# (session 9 start) vs ecd5898 (flat GEMV jobs, in-place KDA conv step, step arena, pipeline device hand-over), A/A,
# nf-ab exact, step dumps + alternation of NF_CUDA_FLAT / NF_CUDA_KDA_CONV_STEP / NF_CUDA_STEP_ARENA, full GPU tests, ncu decode table
set -x
W=/tmp/w; R=$W/r; mkdir -p $R; C=/tmp/c; mkdir -p $C; tar xJf .nfcarry.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $W r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv > $R/smi.txt
# the arms: the stamped benches built by `PORTABLE=1 nf-ab build-arm REF L --cuda` on the workstation, their paths
# rewritten to this machine (tree = this checkout: only models/tiny's tokenizer is read from it)
for a in base new; do
  mkdir -p /tmp/arms/$a; cp $C/arms/$a/build.json $C/arms/$a/nf-bench /tmp/arms/$a/
  sed -e "s|^tree=.*|tree=$PWD|" -e "s|^bench=.*|bench=/tmp/arms/$a/nf-bench|" $C/arms/$a/arm.txt > /tmp/arms/$a/arm.txt
  cp /tmp/arms/$a/arm.txt $R/arm-$a.txt; cp /tmp/arms/$a/build.json $R/build-$a.json
done
cat docs/*.md README.md > /tmp/ab-prompt.txt
BA="--backend cuda --synthetic glm53:q2 --tokenizer models/tiny/nf-tiny-bf16.gguf --chunk 2048 --warmup 16"
timeout 240 scripts/nf-ab run --arm base=/tmp/arms/base --arm new=/tmp/arms/new --prompt /tmp/ab-prompt.txt --out $R/ab --ctx-start 2048 --ctx-max 2048 --gen 16 --reps 2 --runs 3 -- $BA > $R/ab-run.log 2>&1
timeout 150 scripts/nf-ab run --aa new=/tmp/arms/new --prompt /tmp/ab-prompt.txt --out $R/aa --ctx-start 2048 --ctx-max 2048 --gen 16 --reps 2 --runs 2 -- $BA > $R/aa-run.log 2>&1
scripts/nf-ab report $R/ab --aa $R/aa > $R/report.txt 2>&1
save
timeout 120 scripts/nf-ab exact --arm base=/tmp/arms/base --arm new=/tmp/arms/new --prompt /tmp/ab-prompt.txt --out $R/exact -- $BA > $R/exact.log 2>&1; echo "rc=$?" >> $R/exact.log
save
BB="--backend cuda --synthetic glm53:q2 --frontiers 2048 --gen 32 --chunk 2048 --warmup 16"
# variants inside main's build: all on, flat off, conv step off (the same bits expected: cmp rc 0)
var() { case $1 in on) echo "NF_CUDA_ARENA_STATS=1";; flatoff) echo "NF_CUDA_FLAT=off";; convoff) echo "NF_CUDA_KDA_CONV_STEP=off";; arenaoff) echo "NF_CUDA_STEP_ARENA=off";; esac; }
for m in on flatoff convoff arenaoff; do env $(var $m) timeout 60 $C/nf-bench $BB --dump-steps $R/dump-$m.jsonl --dump-topk 200 > $R/dump-$m.csv 2>$R/dump-$m.err; done
for m in flatoff convoff arenaoff; do cmp $R/dump-on.jsonl $R/dump-$m.jsonl > $R/dump-cmp-$m.txt 2>&1; echo "cmp rc=$?" >> $R/dump-cmp-$m.txt; done
xz -9 $R/dump-*.jsonl
i=0; for m in on flatoff convoff arenaoff arenaoff convoff flatoff on on flatoff convoff arenaoff; do i=$((i+1)); env $(var $m) timeout 60 $C/nf-bench $BB > $R/alt-$i-$m.csv 2>/dev/null; done
save
timeout 170 $C/nf-gpu-tests > $R/gpu-tests.txt 2>&1; echo "rc=$?" >> $R/gpu-tests.txt
save
left=$((560 - SECONDS)); [ $left -gt 40 ] && timeout $left ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --page raw --launch-skip 1500 --launch-count 2600 $C/nf-bench --backend cuda --synthetic glm53:q2 --frontiers 64 --gen 4 --chunk 64 --warmup 0 2>&1 | xz -9 > $R/ncu-decode.csv.xz
save
echo "elapsed $SECONDS s"
