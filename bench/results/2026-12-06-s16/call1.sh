# session 16, device call 1 (H100 80 GB: no H200 could be started): the current engine (ddeaf23 = 295e789's
# kernels) on glm53@32:q2 (the released dimensions cut to 32 of 45 trunk layers, 68.8 GB: fits the H100).
# Carry .nfcarry-h100.tar.xz = PORTABLE=1 nf-bench + nf-gpu-tests of ddeaf23. Results in $OUT/res.tgz.
# 1. session 9's three launch-chain switches (never measured on a GPU): step dumps with all three off against on
#    (byte-identical expected), then each switch off alternated with on inside one build (one process each);
# 2. the decode kernel table (ncu serialises kernels); 3. decode with depth to 300000; 4. the prefill sweep.
# 0. first, the IQ2_XXS lab kernel (bench/lab/iq2_dp4a.cu of this commit, built here and carried as iq2_dp4a): its
#    occupancy (MINB) and prefetch (PF) variants at the routed gate+up shape (32768 x 4096) and down (32768 x 2048).
set -x
W=/tmp/w; R=$W/r; mkdir -p $R; C=/tmp/c; mkdir -p $C; tar xJf .nfcarry-h100.tar.xz -C $C
save() { tar czf $OUT/res.tgz -C $W r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version,memory.total,memory.free --format=csv > $R/smi.txt
git log -1 --format=%H > $R/commit.txt 2>/dev/null
for sh in "32768 4096" "32768 2048"; do set -- $sh; timeout 40 $C/iq2_dp4a $1 $2 > $R/lab-$1x$2.txt 2>&1; echo "rc=$?" >> $R/lab-$1x$2.txt; done
save
S="--backend cuda --synthetic glm53@32:q2"
BB="$S --frontiers 2048 --gen 32 --chunk 2048 --warmup 16"
var() { case $1 in on) echo "NF_CUDA_ARENA_STATS=1";; alloff) echo "NF_CUDA_FLAT=off NF_CUDA_KDA_CONV_STEP=off NF_CUDA_STEP_ARENA=off";;
        flatoff) echo "NF_CUDA_FLAT=off";; convoff) echo "NF_CUDA_KDA_CONV_STEP=off";; arenaoff) echo "NF_CUDA_STEP_ARENA=off";; esac; }
for m in on alloff; do env $(var $m) timeout 80 $C/nf-bench $BB --dump-steps $R/dump-$m.jsonl --dump-topk 200 > $R/dump-$m.csv 2>$R/dump-$m.err; done
cmp $R/dump-on.jsonl $R/dump-alloff.jsonl > $R/dump-cmp.txt 2>&1; echo "cmp rc=$?" >> $R/dump-cmp.txt
xz -9 $R/dump-*.jsonl
save
i=0; for m in on flatoff convoff arenaoff alloff alloff arenaoff convoff flatoff on; do i=$((i+1)); env $(var $m) timeout 70 $C/nf-bench $BB > $R/alt-$i-$m.csv 2>$R/alt-$i-$m.err; done
save
left=$((400 - SECONDS)); [ $left -gt 60 ] && timeout $left ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --page raw --launch-skip 1100 --launch-count 2000 $C/nf-bench $S --frontiers 64 --gen 4 --chunk 64 --warmup 0 2>&1 | xz -9 > $R/ncu-decode.csv.xz
save
left=$((480 - SECONDS)); [ $left -gt 40 ] && timeout $left $C/nf-bench $S --fill synthetic --frontiers 2048,65536,300000 --gen 16 --warmup 16 > $R/depth.csv 2>$R/depth.err
save
left=$((575 - SECONDS)); [ $left -gt 40 ] && timeout $left $C/nf-bench $S --frontiers 2048,8192,32768,65536 --gen 4 --warmup 16 > $R/prefill.csv 2>$R/prefill.err
save
echo "elapsed $SECONDS s"
