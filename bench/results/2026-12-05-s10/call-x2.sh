# session 10, prepared for a machine with two H200s (kind nvidia-h200-x2; none was lent in session 10, so this has
# not run): issue 11's measurements. Carry .nfcarry.tar.xz from scripts/gpu-carry-ab.sh (any BASE_REF; only the
# tools are used). What it does:
#  1. the pipeline tests on two real GPUs (stage k on device k % 2): device-to-device hand-over (NCCL), then
#     through the host, the synthetic fill through the pipeline; the same with NF_CUDA_PEER=copy;
#     compute-sanitizer memcheck over the quick pipeline test;
#  2. nf-bench --synthetic glm53:q4 --gpus 2 (~175 GB: does not fit one H200): decode at 2048 and 65536 (real
#     prefill, so prefill_tps and prefill_ceiling_fraction at those depths) and at 300k (--fill synthetic);
#  3. the hand-over A/B at 2048 decode and a 16384-token prefill, order alternating: NCCL, peer copy, host;
#  4. q2 (fits one GPU) on 1 and on 2 GPUs in the same run, for the cost of the split itself.
set -x
W=/tmp/w; R=$W/r; mkdir -p $R; C=/tmp/c; mkdir -p $C; tar xJf .nfcarry.tar.xz -C $C
export NF_BUILD=$C NCCL_NVLS_ENABLE=0
save() { tar czf $OUT/res.tgz -C $W r; }
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.mem,driver_version,memory.free --format=csv > $R/smi.txt
nvidia-smi topo -m >> $R/smi.txt 2>&1
NCCL=$(find / -name 'libnccl.so.2*' -not -path '/proc/*' 2>/dev/null | head -1); echo "NF_NCCL_LIB=$NCCL" >> $R/smi.txt
export NF_NCCL_LIB=$NCCL
timeout 200 $C/nf-gpu-tests --only pipeline > $R/pipeline-nccl.txt 2>&1; echo "rc=$?" >> $R/pipeline-nccl.txt
NF_CUDA_PEER=copy timeout 120 $C/nf-gpu-tests --only pipeline --quick > $R/pipeline-copy.txt 2>&1; echo "rc=$?" >> $R/pipeline-copy.txt
save
timeout 150 compute-sanitizer --tool memcheck $C/nf-gpu-tests --only pipeline --quick > $R/pipeline-memcheck.txt 2>&1; echo "rc=$?" >> $R/pipeline-memcheck.txt
save
Q4="--backend cuda --synthetic glm53:q4 --gpus 2 --gen 32 --chunk 4096 --warmup 16"
timeout 240 $C/nf-bench $Q4 --frontiers 2048,65536 --csv $R/q4-sweep.csv > $R/q4-sweep.log 2>&1; echo "rc=$?" >> $R/q4-sweep.log
timeout 150 $C/nf-bench $Q4 --frontiers 2048,300000 --fill synthetic --ctx 300100 --csv $R/q4-fill.csv > $R/q4-fill.log 2>&1; echo "rc=$?" >> $R/q4-fill.log
save
hand() { case $1 in nccl) echo "NF_CUDA_PEER=nccl";; copy) echo "NF_CUDA_PEER=copy";; host) echo "NF_PIPELINE_HANDOVER=host";; esac; }
i=0; for h in nccl copy host host copy nccl nccl copy host; do i=$((i+1)); env $(hand $h) timeout 90 $C/nf-bench $Q4 --frontiers 2048,16384 --csv $R/hand-$i-$h.csv > $R/hand-$i-$h.log 2>&1; done
save
Q2="--backend cuda --synthetic glm53:q2 --frontiers 2048,16384 --gen 32 --chunk 4096 --warmup 16"
for g in 1 2 2 1; do timeout 90 $C/nf-bench $Q2 --gpus $g --csv $R/q2-gpus$g-$SECONDS.csv > $R/q2-gpus$g-$SECONDS.log 2>&1; done
save
echo "elapsed $SECONDS s"
