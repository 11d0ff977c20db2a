#!/usr/bin/env bash
# gpu-carry.sh — prebuilt fallback binaries for the GPU machine in .gpucarry/ (git-ignored through
# .git/info/exclude): nf-gpu-tests, nf-convert, nf-synth built for x86-64-v3 (not -march=native: the GPU host's CPU
# may differ) with the third-party libraries (pcre2, jansson) and the CUDA runtime linked statically, so they run
# where the image lacks a build dependency. scripts/gpu-check.sh uses them only when `make cuda` fails there.
# Pass them with the device tool's `carry: [".gpucarry"]`.
set -eu
b=${CARRY_BUILD:-/tmp/nf-carrybuild}
make BUILD="$b" CFLAGS="-O2 -std=c11 -D_GNU_SOURCE -pthread -fPIC -Isrc -MMD -MP -march=x86-64-v3 -fno-math-errno" \
    -j"${JOBS:-2}" "$b/cuda/libnf.a" "$b/cuda/tests/gpu/main.o" "$b/cuda/tests/gpu/test_backend.o" \
    "$b/cuda/tests/gpu/test_gemv.o" "$b/cuda/tools/nf-convert.o" "$b/cuda/tools/nf-synth.o" >/dev/null
cuda=$(dirname "$(dirname "$(command -v nvcc)")")
libs="-lm -lpthread -Wl,-Bstatic -lpcre2-8 -ljansson -Wl,-Bdynamic $cuda/lib64/libcudart_static.a -ldl -lrt -lstdc++"
mkdir -p .gpucarry
cc -O2 "$b"/cuda/tests/gpu/{main,test_backend,test_gemv}.o "$b/cuda/libnf.a" -o .gpucarry/nf-gpu-tests $libs
cc -O2 "$b/cuda/tools/nf-convert.o" "$b/cuda/libnf.a" -o .gpucarry/nf-convert $libs
cc -O2 "$b/cuda/tools/nf-synth.o" "$b/cuda/libnf.a" -o .gpucarry/nf-synth $libs
strip --strip-debug .gpucarry/*
ls -la .gpucarry
