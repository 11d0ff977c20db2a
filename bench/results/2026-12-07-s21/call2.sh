# session 21, device call 2 (carry .gpucarry-s21.tar.xz at the commit in the log):
#  1. the KDA test and bench with the reworked chunked prep kernel; ncu durations of the KDA kernels in the bench
#     (T = 16384: kda_prep, kda_chunk_prep, kda_chunk_scan against kda_scan), and of the first 40 KDA kernels of a
#     16384-token prefill of the model;
#  2. prefill A/B at frontier 65536: def | kdaoff (NF_CUDA_KDA_CHUNK=off) alternating def, kdaoff, kdaoff, def;
#  3. the backend tests (f32 and q2 recipes, 128-token fixtures and the synthetic tiny model, long 1024);
#  4. compute-sanitizer memcheck of the kda and attn tests (quick).
set -x
CAP=${CAP:-570}
W=/tmp/w2; R=$W/r; mkdir -p $R; C=/tmp/c2; mkdir -p $C; tar xJf .gpucarry-s21.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $W r; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > $R/smi.txt
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -gt 120000 ]; then M=glm53:q2; else M=glm53@32:q2; fi; echo "model $M" > $R/model.txt
S="--backend cuda --synthetic $M"
timeout 80 $C/nf-gpu-tests --only kda --bench > $R/kda.txt 2>&1; echo "rc=$?" >> $R/kda.txt
save
timeout 70 ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw -k regex:"kda_" $C/nf-gpu-tests --quick --only kda --bench 2>&1 | xz -9 > $R/ncu-kda.csv.xz
save
timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw -k regex:"kda_" --launch-count 40 $C/nf-bench $S --frontiers 16384 --gen 1 --warmup 0 2>&1 | xz -9 > $R/ncu-kda-pipeline.csv.xz
save
i=0; for v in def kdaoff kdaoff def; do i=$((i+1)); [ $SECONDS -lt $((CAP - 60)) ] || break
  case $v in def) E="";; kdaoff) E="NF_CUDA_KDA_CHUNK=off";; esac
  env $E timeout 55 $C/nf-bench $S --frontiers 65536 --gen 1 --warmup 2 > $R/pp-$i-$v.csv 2>$R/pp-$i-$v.err; save; done
[ $SECONDS -lt $((CAP - 100)) ] && { NF_GPU_TEST_RECIPES=f32,q2 NF_GPU_TEST_LONG=1024 timeout 95 $C/nf-gpu-tests --only backend > $R/backend.txt 2>&1; echo "rc=$?" >> $R/backend.txt; }
save
[ $SECONDS -lt $((CAP - 40)) ] && { timeout 38 compute-sanitizer --tool memcheck $C/nf-gpu-tests --quick --only kda > $R/memcheck-kda.txt 2>&1; echo "rc=$?" >> $R/memcheck-kda.txt; }
[ $SECONDS -lt $((CAP - 40)) ] && { timeout 38 compute-sanitizer --tool memcheck $C/nf-gpu-tests --quick --only attn > $R/memcheck-attn.txt 2>&1; echo "rc=$?" >> $R/memcheck-attn.txt; }
save
echo "elapsed $SECONDS s"
