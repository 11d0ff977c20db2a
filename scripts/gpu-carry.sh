#!/usr/bin/env bash
# gpu-carry.sh — prebuilt fallback binaries for the GPU machine in .gpucarry/ (git-ignored through
# .git/info/exclude): nf-gpu-tests and the pcre2/jansson-only CLI tools (nf-convert, nf-synth,
# nf-score, nf-quantize, nf-bench) built for x86-64-v3 (not -march=native: the GPU host's CPU
# may differ) with the third-party libraries (pcre2, jansson) and the CUDA runtime linked statically, so they run
# where the image lacks a build dependency. scripts/gpu-check.sh uses them only when `make cuda` fails there.
# Pass them with the device tool's `carry: [".gpucarry"]`.
set -eu
b=${CARRY_BUILD:-/tmp/nf-carrybuild}
# the CLI tools that need only pcre2/jansson (nf and nf-server also need libedit/libmicrohttpd: not carried)
tools=""
for t in nf-convert nf-synth nf-score nf-quantize nf-bench; do
    [ -f "tools/$t.c" ] && tools="$tools $t"
done
objs=""
for t in $tools; do objs="$objs $b/cuda/tools/$t.o"; done
make BUILD="$b" CFLAGS="-O2 -std=c11 -D_GNU_SOURCE -pthread -fPIC -Isrc -MMD -MP -march=x86-64-v3 -fno-math-errno" \
    -j"${JOBS:-2}" "$b/cuda/libnf.a" $(ls tests/gpu/*.c | sed "s|^|$b/cuda/|; s|\.c$|.o|") $objs >/dev/null
cuda=$(dirname "$(dirname "$(command -v nvcc)")")
libs="-lm -lpthread -Wl,-Bstatic -lpcre2-8 -ljansson -Wl,-Bdynamic $cuda/lib64/libcudart_static.a -ldl -lrt -lstdc++"
mkdir -p .gpucarry
cc -O2 $(ls tests/gpu/*.c | sed "s|^|$b/cuda/|; s|\.c$|.o|") "$b/cuda/libnf.a" -o .gpucarry/nf-gpu-tests $libs
for t in $tools; do
    cc -O2 "$b/cuda/tools/$t.o" "$b/cuda/libnf.a" -o ".gpucarry/$t" $libs
done
strip --strip-debug .gpucarry/*
ls -la .gpucarry
