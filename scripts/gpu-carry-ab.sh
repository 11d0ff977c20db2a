#!/usr/bin/env bash
# gpu-carry-ab.sh — the carry of one device call that A/Bs two commits and tests the newer: .nfcarry.tar.xz
# (git-ignored through .git/info/exclude) with the PORTABLE=1 CUDA tools of the checkout (nf-bench, nf-gpu-tests,
# nf-convert, nf-synth, nf-quantize, built in $CARRY_BUILD) and two nf-ab arms (arms/LABEL/{arm.txt,build.json,
# nf-bench}, from `PORTABLE=1 nf-ab build-arm REF LABEL --cuda`). On the GPU machine the arms' paths are rewritten
# to that machine (bench/results/2026-12-04-s9/call2.sh shows how). Why: the GPU image may lack the build
# dependencies, and a device call should spend its minutes measuring, not building.
#
#   scripts/gpu-carry-ab.sh BASE_REF [NEW_REF]      (NEW_REF defaults to HEAD; both must be commits)
set -eu
base=${1:?usage: scripts/gpu-carry-ab.sh BASE_REF [NEW_REF]}
new=${2:-HEAD}
b=${CARRY_BUILD:-/tmp/nf-carrybuild}
root=${NF_AB_ROOT:-/tmp/nf-ab-arms}
for pair in "base:$base" "new:$new"; do
    label=${pair%%:*} ref=${pair#*:}
    PORTABLE=1 scripts/nf-ab build-arm "$ref" "$label" --cuda --force -j "${JOBS:-2}" >/dev/null
done
make PORTABLE=1 BUILD="$b" -j"${JOBS:-2}" "$b/cuda/nf-gpu-tests" "$b/cuda/nf-bench" "$b/cuda/nf-convert" \
    "$b/cuda/nf-synth" "$b/cuda/nf-quantize" >/dev/null
rm -rf .nfcarry
mkdir -p .nfcarry/arms/base .nfcarry/arms/new
for t in nf-bench nf-gpu-tests nf-convert nf-synth nf-quantize; do cp "$b/cuda/$t" .nfcarry/; done
strip --strip-debug .nfcarry/nf-*
for a in base new; do
    cp "$root/$a/arm.txt" "$root/$a/build.json" .nfcarry/arms/$a/
    cp "$(sed -n 's/^bench=//p' "$root/$a/arm.txt")" .nfcarry/arms/$a/nf-bench # stamped: not stripped
done
grep -qx '/.nfcarry/' .git/info/exclude 2>/dev/null || printf '/.nfcarry/\n/.nfcarry.tar.xz\n' >> .git/info/exclude
tar cJf .nfcarry.tar.xz -C .nfcarry .
ls -la .nfcarry.tar.xz
