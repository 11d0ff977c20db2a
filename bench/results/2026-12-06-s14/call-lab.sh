# session 14, device call: the IQ2_XXS dp4a lab kernel (bench/lab/iq2_dp4a.cu) against the engine's GEMV bench, one
# machine: build the lab there, its checks and timings at the routed gate+up (32768 x 4096 = 8 experts x 2 x 2048
# rows), dense (14336 x 4096) and routed down (32768 x 2048) shapes, compute-sanitizer memcheck on a small case,
# the engine's `nf-gpu-tests --only gemv --bench` (its IQ2_XXS rows are the baseline), and an ncu summary of
# the lab kernels. Carry .nfcarry.tar.xz (scripts/gpu-carry-ab.sh). Results in $OUT/res.tgz. Run from the repository root.
set -x
W=/tmp/w; R=$W/r; mkdir -p $R; C=/tmp/c; mkdir -p $C; tar xJf .nfcarry.tar.xz -C $C
save() { tar czf $OUT/res.tgz -C $W r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,clocks.max.sm,driver_version --format=csv > $R/smi.txt
git log -1 --format=%H > $R/commit.txt 2>/dev/null || true
mkdir -p /tmp/lab
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -lineinfo -Isrc bench/lab/iq2_dp4a.cu src/formats/iq2_tables.c -o /tmp/lab/iq2_dp4a > $R/lab-build.txt 2>&1; echo "rc=$?" >> $R/lab-build.txt
for s in "32768 4096" "14336 4096" "32768 2048"; do
  set -- $s; timeout 60 /tmp/lab/iq2_dp4a $1 $2 > $R/lab-$1x$2.txt 2>&1; echo "rc=$?" >> $R/lab-$1x$2.txt
done
save
timeout 60 /tmp/lab/iq2_dp4a 32768 4096 > $R/lab-32768x4096-rep2.txt 2>&1; echo "rc=$?" >> $R/lab-32768x4096-rep2.txt
NF_GEMV_CSV=$R/engine-gemv.csv timeout 150 $C/nf-gpu-tests --only gemv --bench > $R/engine-gemv.txt 2>&1; echo "rc=$?" >> $R/engine-gemv.txt
save
timeout 60 /tmp/lab/iq2_dp4a 32768 4096 > $R/lab-32768x4096-rep3.txt 2>&1; echo "rc=$?" >> $R/lab-32768x4096-rep3.txt
timeout 90 compute-sanitizer --tool memcheck /tmp/lab/iq2_dp4a 512 4096 > $R/lab-memcheck.txt 2>&1; echo "rc=$?" >> $R/lab-memcheck.txt
save
left=$((560 - SECONDS)); [ $left -gt 40 ] && IQ2_LAB_CHECK_ONLY=1 timeout $left ncu --clock-control none --kernel-name regex:"gemv_dp4a|gemv_sx|read_only" \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,smsp__inst_executed.sum,sm__inst_executed.avg.per_cycle_active,smsp__issue_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,launch__registers_per_thread,launch__occupancy_limit_registers \
  --csv --page raw /tmp/lab/iq2_dp4a 14336 4096 > $R/lab-ncu.csv 2>&1
save
echo "elapsed $SECONDS s"
