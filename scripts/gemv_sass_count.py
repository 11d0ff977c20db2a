#!/usr/bin/env python3
"""SASS instructions per weight of the streaming GEMV's decode (src/cuda/cuda_gemv.cu, gemv_stream<TY, R>).

usage: cuobjdump -sass build/cuda/src/cuda/cuda_gemv.o > gemv.sass
       scripts/gemv_sass_count.py gemv.sass              # table: every format, R = 1, 2, 4, 8
       scripts/gemv_sass_count.py gemv.sass --hist TY R  # opcode histogram of one kernel (TY: nf type id)

Why: the low-bit decode paths are issue-bound (docs/cuda.md), so the instruction count of the inner work is the
number to drive down, and it can be read without a GPU. The decode region is what a thread executes per batch
between the __syncthreads after the pipeline wait (the BAR.SYNC before the first SHFL.BFLY) and the row
reduction (the first SHFL.BFLY): R rows of its unit, R * COLS weights. BSSY/BSYNC/NOP are not counted. The
batch loop's copy issue and reduction (~15-30 instructions per batch) are outside it. cuobjdump ships with the
CUDA toolkit (or the nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels)."""
import collections
import re
import sys

COLS = {0: 32, 1: 64, 30: 64, 8: 64, 12: 64, 14: 64, 10: 64, 16: 32}  # weights per unit (unit<TY>::COLS)
NAME = {0: 'f32', 1: 'f16', 30: 'bf16', 8: 'q8_0', 12: 'q4_K', 14: 'q6_K', 10: 'q2_K', 16: 'iq2_xxs'}


def regions(text):
    out = {}
    for f in text.split('Function : ')[1:]:
        m = re.match(r'_Z11gemv_streamILi(\d+)ELi(\d+)EEv11gemv_params', f)
        if not m:
            continue
        ins = [re.sub(r'\s*;.*', '', line.split('*/', 1)[1]).strip()
               for line in f.split('\n') if re.match(r'\s*/\*[0-9a-f]{4,}\*/', line)]
        end = min(k for k, s in enumerate(ins) if 'SHFL.BFLY' in s)
        start = end
        while 'BAR.SYNC' not in ins[start]:
            start -= 1
        out[(int(m.group(1)), int(m.group(2)))] = [s for s in ins[start + 1:end] if not re.match(r'(BSSY|BSYNC|NOP)', s)]
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    reg = regions(open(sys.argv[1]).read())
    if not reg:
        sys.exit('no gemv_stream kernels in ' + sys.argv[1])
    if len(sys.argv) == 5 and sys.argv[2] == '--hist':
        ty, r = int(sys.argv[3]), int(sys.argv[4])
        ops = collections.Counter(re.sub(r'^@!?U?P\w+\s+', '', s).split()[0].split('.')[0] for s in reg[(ty, r)])
        for op, n in ops.most_common():
            print(f'{op:10s} {n:5d}  {n / (r * COLS[ty]):.3f}/weight')
        return
    for ty in sorted({t for t, _ in reg}, key=lambda t: NAME.get(t, str(t))):
        cells = [f'R{r}: {len(reg[(ty, r)]):5d} ins {len(reg[(ty, r)]) / (r * COLS[ty]):.3f}/w' for r in (1, 2, 4, 8) if (ty, r) in reg]
        print(f'{NAME.get(ty, ty):8s}', '  '.join(cells))


if __name__ == '__main__':
    main()
