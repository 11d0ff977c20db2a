#!/usr/bin/env bash
# cuemu/build.sh — the CUDA backend's kernels on the CPU, for checking logic without a GPU (docs/cuda.md).
#
# A tiny emulation of the CUDA runtime subset src/cuda uses: kernels run on the host, one fiber (ucontext) per
# CUDA thread, blocks one after another; __syncthreads and warp shuffles are barriers between the fibers;
# memory calls are malloc/memcpy (cudaMalloc poisons with 0xFF so unwritten reads show up as NaN); cp.async copies
# land as late as the hardware may land them (at the thread's __pipeline_wait_prior, or its end), so a missing
# wait reads stale shared memory (inc/cuda_pipeline.h). The .cu files
# are copied with `kernel<<<g, b, smem, s>>>(args)` rewritten to `cuemu_cfg(g, b, smem, s).run(kernel, args)`
# and compiled by g++, then linked with tests/gpu/{main,test_backend,test_gemm,test_gemv,test_synth,test_attn,test_pipeline,test_router,test_kda}.c and
# the CPU library. Warp-wide tensor-core instructions (ldmatrix, mma.sync bf16) are emulated with their PTX fragment layouts
# (cuemu_dev.h). CUEMU_DEVICES=N emulates N devices: streams, events and allocations remember their device, and
# a kernel launched on a stream of another device than the current one, a kernel pointer argument in another
# device's memory, or a device-to-device copy between devices that is not a peer copy aborts with a message (the
# pipeline test runs stage k on device k % N). It checks index math, orders and synchronisation logic; it cannot reproduce code generation
# problems or timing. Slow: use the fixtures (NF_GPU_TEST_FIXTURES_ONLY=1) and --quick; `--only gemm` runs the
# GEMM test (~2 min), NF_GEMV_TEST_SMALL=1 `--only gemv` the GEMV test (~1 min).
#
#   make build/libnf.a build/nf-convert && scripts/cuemu/build.sh
#   (CUEMU_CFLAGS=-fsanitize=address BUILD=build/asan scripts/cuemu/build.sh: the kernels' host copies under
#   AddressSanitizer, which reports a device buffer read past its end, as compute-sanitizer would)
#   NF_GPU_TEST_FIXTURES_ONLY=1 NF_BUILD=build build/cuemu/nf-gpu-tests-emu --only backend --quick
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${BUILD:-$root/build}/cuemu
mkdir -p "$out/gen"
rm -f "$out"/gen/*.cpp # a source deleted since the last build must not be compiled from its stale copy
python3 - "$root" "$out" <<'PY'
import glob, os, re, sys
root, out = sys.argv[1], sys.argv[2]
for f in glob.glob(root + '/src/cuda/*.cu'):
    if f.endswith('cuda_bench.cu'):  # timing code: nothing to emulate
        continue
    s = open(f).read()
    s = re.sub(r'extern __shared__ (?:__align__\(\d+\) )?float sh\[\];', 'float *sh = (float *)cuemu_B->smem.data();', s)
    s = re.sub(r'(\w+(?:<[^;()<>]*>)?)<<<(.*?)>>>\(', r'cuemu_cfg(\2).run(\1, ', s)
    open(out + '/gen/' + os.path.basename(f)[:-3] + '.cpp', 'w').write(s)
PY
inc="-I$here/inc -I$root/src"
for f in "$out"/gen/*.cpp "$here/cuemu.cpp"; do
    g++ -O1 -g -std=c++17 -ffp-contract=off ${CUEMU_CFLAGS:-} $inc -c "$f" -o "$out/$(basename "${f%.cpp}").o"
done
# the bench's read launch (cuda_bench.cu is not emulated; test_gemv.c only calls it with --bench)
echo 'int nf_cuda_read_launch(const void *p, unsigned long n, unsigned *s, void *st) { (void)p; (void)n; (void)s; (void)st; return -1; }' > "$out/stub.c"
for f in "$root/tests/gpu/main.c" "$root/tests/gpu/test_backend.c" "$root/tests/gpu/test_gemm.c" "$root/tests/gpu/test_gemv.c" "$root/tests/gpu/test_synth.c" "$root/tests/gpu/test_attn.c" "$root/tests/gpu/test_pipeline.c" "$root/tests/gpu/test_router.c" "$root/tests/gpu/test_kda.c" "$out/stub.c"; do
    gcc -O1 -g -std=c11 -D_GNU_SOURCE $inc -c "$f" -o "$out/$(basename "${f%.c}").o"
done
g++ -g ${CUEMU_CFLAGS:-} "$out"/*.o "$root/build/libnf.a" -lm -lpthread -lpcre2-8 -ljansson -o "$out/nf-gpu-tests-emu"
echo "$out/nf-gpu-tests-emu"
