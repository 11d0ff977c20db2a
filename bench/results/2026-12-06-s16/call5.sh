# session 16, device call 5 (H100): call 4's GPU tests again, with the fixture converter carried (call 4's run had
# no nf-convert: every fixture check failed to start): the backend tests against the CPU (split hc projection on, the
# default) and compute-sanitizer memcheck on the quick fixtures. Carry .nfcarry-h100.tar.xz (ac07d76's PORTABLE tools).
set -x
W=/tmp/w; R=$W/r; mkdir -p $R; C=/tmp/c; mkdir -p $C; tar xJf .nfcarry-h100.tar.xz -C $C
export NF_BUILD=$C
save() { tar czf $OUT/res.tgz -C $W r; }
timeout 170 $C/nf-gpu-tests --only backend > $R/gpu-tests-backend.txt 2>&1; echo "rc=$?" >> $R/gpu-tests-backend.txt
save
NF_GPU_TEST_FIXTURES_ONLY=1 timeout 90 compute-sanitizer --tool memcheck $C/nf-gpu-tests --quick --only backend > $R/memcheck.txt 2>&1; echo "rc=$?" >> $R/memcheck.txt
save
echo "elapsed $SECONDS s"
