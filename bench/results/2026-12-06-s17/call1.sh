# session 17, device call 1 (H200 wanted; adapts to an H100), on the session-18 HEAD (PORTABLE build, carried), in order of
# priority with time guards (one call of <= CAP s, default 450: device time is short):
# 1. the backend GPU tests against the CPU with the split hc projection on (NF_CUDA_HC_SPLIT=on: opt-in; its
#    one-round-trip reduction, 0ec53c4, and the hc_post fold, 365a478, have only run in the emulation), the
#    router test (narrowed count, 27a5b7f), the attention test and its quick bench (the MLA core's tensor-core path
#    against the f32 tiled one on a 256-token prefill chunk, interleaved), compute-sanitizer
#    memcheck on the fixtures' backend tests;
# 2. decode alternating four arms: new (split + fold on, narrowed router), late (new with NF_CUDA_GEMV_EARLY=off:
#    the GEMV waits for its predecessor before its first weight copy, as it did by mistake from c909661 to session
#    18), splitoff (NF_CUDA_HC_SPLIT=off, the default), narrowoff (split on, the full router count); one process
#    each; also issue 7's decode at 2048
#    (all four changes are opt-in: NF_CUDA_HC_SPLIT, NF_CUDA_ROUTER_NARROW, NF_CUDA_HC_PROJ_PREFILL, NF_CUDA_MLA_TC=on);
# 3. prefill A/B, three arms alternating (8192 tokens at the backend's chunk): new (the one-pass hc projection of
#    371ee54 and the bf16 tensor-core MLA core of 6ee9389), hcoff (without the projection), tcoff (without the core);
# 4. on an H200 (glm53:q2) issue 8's depth sweep (2048, 65536, 300000) and the 1M point; on an H100 (glm53@32:q2)
#    the hc and router kernels under ncu.
set -x
CAP=${CAP:-450} # seconds the call may take: the guards below are relative to it
W=/tmp/w; R=$W/r; mkdir -p $R; C=/tmp/c; mkdir -p $C; tar xJf .nfcarry-s17.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $W r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version,memory.total,memory.free --format=csv > $R/smi.txt
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -gt 120000 ]; then M=glm53:q2; else M=glm53@32:q2; fi; echo "model $M" > $R/model.txt
NF_CUDA_MOE_PAIR=on NF_CUDA_HC_SPLIT=on NF_CUDA_ROUTER_NARROW=on NF_CUDA_HC_PROJ_PREFILL=on NF_CUDA_MLA_TC=on timeout 100 $C/nf-gpu-tests --quick --only backend > $R/gpu-tests-backend.txt 2>&1; echo "rc=$?" >> $R/gpu-tests-backend.txt
timeout 60 $C/nf-gpu-tests --only gemv > $R/gpu-tests-gemv.txt 2>&1; echo "rc=$?" >> $R/gpu-tests-gemv.txt
NF_GEMV_PLAN=1 NF_GEMV_BENCH_NO_CHECKS=1 NF_GEMV_BENCH_CASES=moe_gate_up,moe_down,gate_up,down,shexp_gu,shexp_down NF_GEMV_BENCH_ONLY=iq2_xxs,q2_K,q8_0 timeout 40 $C/nf-gpu-tests --only gemv --bench > $R/gemv-pair-bench.txt 2>&1; echo "rc=$?" >> $R/gemv-pair-bench.txt
NF_CUDA_MOE_PAIR=on NF_CUDA_ROUTER_NARROW=on timeout 20 $C/nf-gpu-tests --only router > $R/gpu-tests-router.txt 2>&1; echo "rc=$?" >> $R/gpu-tests-router.txt
timeout 60 $C/nf-gpu-tests --quick --bench --only attn > $R/gpu-tests-attn.txt 2>&1; echo "rc=$?" >> $R/gpu-tests-attn.txt
save
NF_CUDA_MOE_PAIR=on NF_CUDA_HC_SPLIT=on NF_CUDA_ROUTER_NARROW=on NF_CUDA_HC_PROJ_PREFILL=on NF_CUDA_MLA_TC=on NF_GPU_TEST_FIXTURES_ONLY=1 timeout 60 compute-sanitizer --tool memcheck $C/nf-gpu-tests --quick --only backend > $R/memcheck.txt 2>&1; echo "rc=$?" >> $R/memcheck.txt
save
S="--backend cuda --synthetic $M"
BB="$S --frontiers 2048 --gen 32 --chunk 2048 --warmup 16"
arm() { case $1 in new) echo "NF_CUDA_HC_SPLIT=on NF_CUDA_ROUTER_NARROW=on";; late) echo "NF_CUDA_HC_SPLIT=on NF_CUDA_ROUTER_NARROW=on NF_CUDA_GEMV_EARLY=off";; pair) echo "NF_CUDA_HC_SPLIT=on NF_CUDA_ROUTER_NARROW=on NF_CUDA_MOE_PAIR=on";; splitoff) echo "NF_CUDA_ROUTER_NARROW=on";; narrowoff) echo "NF_CUDA_HC_SPLIT=on";; esac; }
i=0; for m in new late pair splitoff narrowoff narrowoff splitoff pair late new new late pair; do i=$((i+1)); [ $SECONDS -lt $((CAP - 110)) ] && env $(arm $m) timeout 45 $C/nf-bench $BB > $R/alt-$i-$m.csv 2>$R/alt-$i-$m.err; done
save
parm() { case $1 in new) echo "NF_CUDA_HC_PROJ_PREFILL=on NF_CUDA_MLA_TC=on";; hcoff) echo "NF_CUDA_MLA_TC=on";; tcoff) echo "NF_CUDA_HC_PROJ_PREFILL=on";; esac; }
i=0; for m in new hcoff tcoff tcoff hcoff new new hcoff tcoff; do i=$((i+1)); [ $SECONDS -lt $((CAP - 35)) ] && env $(parm $m) timeout 45 $C/nf-bench $S --frontiers 8192 --gen 1 --warmup 2 > $R/pp-$i-$m.csv 2>$R/pp-$i-$m.err; done
save
if [ "$M" != glm53:q2 ]; then left=$((CAP - 10 - SECONDS)); [ $left -gt 25 ] && NF_CUDA_HC_SPLIT=on NF_CUDA_ROUTER_NARROW=on NF_CUDA_HC_PROJ_PREFILL=on NF_CUDA_MLA_TC=on timeout $left ncu --clock-control none --metrics gpu__time_duration.sum -k regex:'hc_|router' --launch-skip 200 --launch-count 256 --csv --page raw $C/nf-bench $S --frontiers 64 --gen 4 --chunk 64 --warmup 0 2>&1 | xz -9 > $R/ncu-hc.csv.xz; save; echo "elapsed $SECONDS s"; exit 0; fi
left=$((CAP - 5 - SECONDS)); [ $left -gt 40 ] && NF_CUDA_HC_SPLIT=on NF_CUDA_ROUTER_NARROW=on NF_CUDA_HC_PROJ_PREFILL=on NF_CUDA_MLA_TC=on timeout $left $C/nf-bench $S --fill synthetic --frontiers 2048,65536,300000 --gen 16 --warmup 16 > $R/depth.csv 2>$R/depth.err
save
left=$((CAP - SECONDS)); [ $left -gt 30 ] && NF_CUDA_HC_SPLIT=on NF_CUDA_ROUTER_NARROW=on NF_CUDA_HC_PROJ_PREFILL=on NF_CUDA_MLA_TC=on timeout $left $C/nf-bench $S --fill synthetic --frontiers 1048000 --gen 8 --warmup 16 > $R/depth1m.csv 2>$R/depth1m.err
save
echo "elapsed $SECONDS s"
