# session 23, device call 1: session 22's next-call1.sh (the GPU tests at the defaults, the expert decode-once A/B,
# cold 62k, the probe, depth) plus this session's opt-in NF_CUDA_IQ2_L2AHEAD (the IQ2_XXS kernel's L2 look-ahead):
#  1. tests at the defaults: kda, backend f32 + q2 quick, gemv (checks the look-ahead's bits);
#  2. prefill A/B at 65536: def, pdx, pdx, def with pdx = NF_CUDA_GEMM_PREDEQ_EXPERTS=on; the cold 62k prefill;
#  3. decode A/B at 2048 (the probe: greedy ids hash) for L2AHEAD 0, 2, 4, 4, 2, 0;
#  4. decode at depth (filled state; on the H200 glm53:q2 with issue 8's 1M point); the gemv bench of the IQ2_XXS
#     shapes for 0, 1, 2, 4, 4, 2, 1, 0; the gemm test + bench; the ncu decode kernel table at the defaults.
set -x
CAP=${CAP:-570}
NAME=c1 . scripts/device-call-env.sh
DF=2048,65536,300000; [ "$M" = glm53:q2 ] && DF=2048,65536,300000,1048560
timeout 45 $C/nf-gpu-tests --only kda > $R/kda.txt 2>&1; echo "rc=$?" >> $R/kda.txt
NF_GPU_TEST_RECIPES=f32,q2 timeout 60 $C/nf-gpu-tests --quick --only backend > $R/backend-quick.txt 2>&1; echo "rc=$?" >> $R/backend-quick.txt
timeout 60 $C/nf-gpu-tests --only gemv > $R/gemv.txt 2>&1; echo "rc=$?" >> $R/gemv.txt
save
i=0; for v in def pdx pdx def; do i=$((i+1)); [ $SECONDS -lt $((CAP - 50)) ] || break
  case $v in def) E="";; pdx) E="NF_CUDA_GEMM_PREDEQ_EXPERTS=on";; esac
  env $E timeout 50 $C/nf-bench $S --frontiers 65536 --gen 1 --warmup 2 > $R/pp-$i-$v.csv 2>$R/pp-$i-$v.err; save; done
[ $SECONDS -lt $((CAP - 50)) ] && timeout 50 $C/nf-bench $S --frontiers 62000 --gen 4 --warmup 4 > $R/cold62k.csv 2>$R/cold62k.err
save
i=0; for a in 0 2 4 4 2 0; do i=$((i+1)); [ $SECONDS -lt $((CAP - 30)) ] || break
  NF_CUDA_IQ2_L2AHEAD=$a timeout 30 $C/nf-bench $S --frontiers 2048 --gen 32 --chunk 2048 --warmup 16 > $R/dec-$i-a$a.csv 2>$R/dec-$i-a$a.err; save; done
[ $SECONDS -lt $((CAP - 70)) ] && timeout $((CAP - SECONDS - 50 > 150 ? 150 : CAP - SECONDS - 50)) $C/nf-bench $S --fill synthetic --frontiers $DF --gen 16 --warmup 16 > $R/depth.csv 2>$R/depth.err
save
i=0; for a in 0 1 2 4 4 2 1 0; do i=$((i+1)); [ $SECONDS -lt $((CAP - 20)) ] || break
  NF_CUDA_IQ2_L2AHEAD=$a NF_GEMV_BENCH_ONLY=iq2_xxs NF_GEMV_BENCH_CASES=gate_up,dense,kda_proj NF_GEMV_BENCH_NO_CHECKS=1 \
    timeout 20 $C/nf-gpu-tests --only gemv --bench > $R/gemvb-$i-a$a.txt 2>&1; done
save
[ $SECONDS -lt $((CAP - 30)) ] && timeout $((CAP - SECONDS < 120 ? CAP - SECONDS : 120)) $C/nf-gpu-tests --only gemm --bench > $R/gemm.txt 2>&1; echo "rc=$?" >> $R/gemm.txt
save
# the decode step's kernel table at the defaults (the last one is session 18's, 6fb1852): glm53@32 on the H100 as
# then, the 45-layer glm53 on the H200 (its skip and count as in session 7's H200 tables)
SK=1100; LC=2000; [ "$M" = glm53:q2 ] && SK=1500 LC=2600
[ $SECONDS -lt $((CAP - 60)) ] && timeout $((CAP - SECONDS)) ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
  --csv --page raw --launch-skip $SK --launch-count $LC $C/nf-bench $S --frontiers 64 --gen 4 --chunk 64 --warmup 0 2>&1 | xz -9 > $R/ncu-decode.csv.xz
save
echo "elapsed $SECONDS s"
