#!/usr/bin/env bash
# make-carry.sh — builds the carry the session-19 device calls unpack (.nfcarry-s20.tar.xz at the repository root,
# git-excluded): the PORTABLE CUDA tools nf-bench, nf-gpu-tests, nf-convert (the GPU tests convert their fixtures)
# and nf-synth, debug info stripped (~3.5 MB). Run from the repository root on this machine (nvcc, 2 cores: a few
# minutes from clean), then: run(command="CAP=300 bash bench/results/2026-12-07-s20/call2.sh > $OUT/log.txt 2>&1",
# carry=[".nfcarry-s20.tar.xz"]).
set -eu
B=${BUILD_CARRY:-/tmp/nf-cb}
make PORTABLE=1 BUILD="$B" -j2 "$B"/cuda/nf-bench "$B"/cuda/nf-gpu-tests "$B"/cuda/nf-convert "$B"/cuda/nf-synth
pk=$(mktemp -d)
cp "$B"/cuda/nf-bench "$B"/cuda/nf-gpu-tests "$B"/cuda/nf-convert "$B"/cuda/nf-synth "$pk"/
strip --strip-debug "$pk"/*
tar cJf .nfcarry-s20.tar.xz -C "$pk" .
rm -rf "$pk"
echo "carry: .nfcarry-s20.tar.xz ($(du -h .nfcarry-s20.tar.xz | cut -f1)), commit $(git rev-parse --short HEAD)"
