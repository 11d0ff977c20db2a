# session 16, device call 5 (H100): call 4's GPU tests again, with the fixture converter carried (call 4's run had
# no nf-convert: every fixture check failed to start), on the commit that loads the split projection's slices in
# one round trip (call 4's ncu: the first version's reduction added ~6 us per site to hc_mix_collapse): the backend
# tests against the CPU (split on: NF_CUDA_HC_SPLIT=on, opt-in until measured), compute-sanitizer memcheck on the quick fixtures, decode
# alternating NF_CUDA_HC_SPLIT on/off, the hc kernels under ncu. Carry .nfcarry-h100.tar.xz (PORTABLE tools).
set -x
W=/tmp/w; R=$W/r; mkdir -p $R; C=/tmp/c; mkdir -p $C; tar xJf .nfcarry-h100.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $W r; }
NF_CUDA_HC_SPLIT=on timeout 120 $C/nf-gpu-tests --quick --only backend > $R/gpu-tests-backend.txt 2>&1; echo "rc=$?" >> $R/gpu-tests-backend.txt
save
NF_CUDA_HC_SPLIT=on NF_GPU_TEST_FIXTURES_ONLY=1 timeout 80 compute-sanitizer --tool memcheck $C/nf-gpu-tests --quick --only backend > $R/memcheck.txt 2>&1; echo "rc=$?" >> $R/memcheck.txt
save
S="--backend cuda --synthetic glm53@32:q2"
BB="$S --frontiers 2048 --gen 32 --chunk 2048 --warmup 16"
i=0; for m in on off off on on off; do i=$((i+1)); [ $SECONDS -lt 250 ] && NF_CUDA_HC_SPLIT=$m timeout 40 $C/nf-bench $BB > $R/alt-$i-$m.csv 2>$R/alt-$i-$m.err; done
save
left=$((290 - SECONDS)); [ $left -gt 25 ] && timeout $left ncu --clock-control none --metrics gpu__time_duration.sum -k regex:hc_ --launch-skip 200 --launch-count 256 --csv --page raw $C/nf-bench $S --frontiers 64 --gen 4 --chunk 64 --warmup 0 2>&1 | xz -9 > $R/ncu-hc.csv.xz
save
echo "elapsed $SECONDS s"
