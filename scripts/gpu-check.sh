#!/usr/bin/env bash
# gpu-check.sh — one GPU-machine pass over the CUDA backend, in one command (the device machine keeps nothing):
#   build (make cuda; when the machine's image lacks a build dependency, prebuilt binaries from .gpucarry/ are
#   used instead), `make gpu-test` (tests/gpu: GEMV + the CUDA backend vs the CPU backend), compute-sanitizer
#   memcheck on the quick subset, then the GEMV bandwidth table (CSV). Everything is logged under OUT_DIR.
#
#   scripts/gpu-check.sh [OUT_DIR]        (default: $OUT, else /tmp/gpu-check)
#   env: PREBUILT=1     use the carried .gpucarry binaries without building (saves the build minute)
#        T_BUILD T_TEST T_SAN T_BENCH     per-phase time limits in seconds (defaults 150 120 90; the bench gets
#        what is left of TOTAL, default 340)
#
# Prints a short summary last: build result, every FAIL line, the per-model summary lines, sanitizer verdict,
# the GEMV table.
set -u
out=${1:-${OUT:-/tmp/gpu-check}}
mkdir -p "$out"
{
    date -u +%FT%TZ
    git rev-parse HEAD 2>/dev/null
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1
    nvcc --version 2>&1 | tail -1
} > "$out/info.txt"

bin=build/cuda
full=1
if [ -f .gpucarry.tar.xz ] && [ ! -x .gpucarry/nf-gpu-tests ]; then
    mkdir -p .gpucarry && tar xJf .gpucarry.tar.xz -C .gpucarry
fi
if [ "${PREBUILT:-0}" = 1 ] && [ -x .gpucarry/nf-gpu-tests ]; then
    echo "build: skipped (PREBUILT=1: the .gpucarry binaries built on the workstation)"
    bin=.gpucarry
elif timeout -k 5 "${T_BUILD:-150}" make -j16 cuda > "$out/build.log" 2>&1; then
    echo "build: ok"
elif full=0; timeout -k 5 "${T_BUILD:-150}" make -j16 build/cuda/nf-gpu-tests build/cuda/nf-convert build/cuda/nf-synth \
        >> "$out/build.log" 2>&1; then
    echo "build: make cuda failed (another program?); the test binary and the tools it runs built"
    grep -m3 -E "error" "$out/build.log"
else
    echo "build: FAILED on this machine (log tail below); using the prebuilt .gpucarry binaries"
    tail -8 "$out/build.log"
    bin=.gpucarry
fi
export NF_BUILD=$bin

if [ "$bin" = build/cuda ] && [ "$full" = 1 ]; then
    timeout -k 5 "${T_TEST:-120}" make gpu-test > "$out/gpu-test.log" 2>&1
else
    timeout -k 5 "${T_TEST:-120}" "$bin/nf-gpu-tests" > "$out/gpu-test.log" 2>&1
fi
rc_test=$?

timeout -k 5 "${T_SAN:-90}" compute-sanitizer --tool memcheck --error-exitcode 3 "$bin/nf-gpu-tests" --quick --only backend \
    > "$out/sanitizer.log" 2>&1
rc_san=$?

# the bench gets what is left of TOTAL seconds (default 340), if at least 30
left=$(( ${TOTAL:-340} - SECONDS ))
[ -n "${T_BENCH:-}" ] && left=$T_BENCH
rc_bench=skipped
if [ "$left" -ge 30 ]; then
    NF_GEMV_CSV="$out/gemv.csv" timeout -k 5 "$left" "$bin/nf-gpu-tests" --only gemv --bench > "$out/gemv.log" 2>&1
    rc_bench=$?
fi

echo "---- gpu-test (rc $rc_test): failures and summaries"
grep -E "FAIL |CUDA error|command failed" "$out/gpu-test.log" | cut -c1-200 | head -30
grep -E "^SUMMARY|^gemv|^gemm|^backend|nf-gpu-tests:" "$out/gpu-test.log" | cut -c1-320
echo "---- compute-sanitizer memcheck --quick (rc $rc_san)"
grep -E "ERROR SUMMARY|nf-gpu-tests:|Invalid|Program hit" "$out/sanitizer.log" | head -8
echo "---- gemv bench (rc $rc_bench)"
grep -E "^gemv|^bench" "$out/gemv.log" 2>/dev/null
echo "---- elapsed ${SECONDS}s"
