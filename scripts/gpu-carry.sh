#!/usr/bin/env bash
# gpu-carry.sh — prebuilt fallback binaries for the GPU machine in .gpucarry/ (git-ignored through
# .git/info/exclude): nf-gpu-tests and the pcre2/jansson-only CLI tools (nf-convert, nf-synth,
# nf-score, nf-quantize, nf-bench) built for x86-64-v3 (not -march=native: the GPU host's CPU
# may differ) with the third-party libraries (pcre2, jansson) and the CUDA runtime linked statically (make PORTABLE=1), so they run
# where the image lacks a build dependency. scripts/gpu-check.sh uses them only when `make cuda` fails there.
# Pass them with the device tool's `carry: [".gpucarry.tar.xz"]` (the archive made last).
set -eu
b=${CARRY_BUILD:-/tmp/nf-carrybuild}
# the CLI tools (nf-server needs libmicrohttpd + gnutls: not carried)
targets="$b/cuda/nf-gpu-tests"
for t in nf nf-convert nf-synth nf-score nf-quantize nf-bench; do
    [ -f "tools/$t.c" ] && targets="$targets $b/cuda/$t"
done
make PORTABLE=1 BUILD="$b" -j"${JOBS:-2}" $targets >/dev/null
mkdir -p .gpucarry
for t in $targets; do cp "$t" .gpucarry/; done
strip --strip-debug .gpucarry/*
ls -la .gpucarry
# The binaries compress ~10x; the device tool's carry limit (64 MiB with the tracked tree, which is ~58 MB) is
# tight, so carry the archive (`carry: [".gpucarry.tar.xz"]`; scripts/gpu-check.sh unpacks it). By default it holds
# what the GPU tests and the benches run (nf-gpu-tests, nf-bench and the nf-convert / nf-synth that the tests call:
# ~3.6 MB); CARRY_ALL=1 packs every tool (~13 MB, too much beside the tree since session 21).
if [ "${CARRY_ALL:-0}" = 1 ]; then
    tar cf - -C .gpucarry . | xz -9e -T"${JOBS:-2}" > .gpucarry.tar.xz
else
    tar cf - -C .gpucarry nf-gpu-tests nf-bench nf-convert nf-synth | xz -9e -T"${JOBS:-2}" > .gpucarry.tar.xz
fi
ls -la .gpucarry.tar.xz
