#!/usr/bin/env bash
# gpu_continue.sh — on the GPU machine: continue training the shipped tiny model (train.py --init-gguf) and write the
# new checkpoint to $OUT/hf and the log to $OUT/train_log.jsonl.
#
# Why a script: the device tool's command is limited to 2,000 characters and the steps must run in one call (a warm
# machine is given back 30 s after a call). It unpacks what pack_gpu_carry.sh made (transformers 5.24 trimmed to the
# model folders used, the xz-compressed training tokens), checks the token streams are the shipped model's corpus,
# then trains from models/tiny/nf-tiny-bf16.gguf (tracked: no checkpoint travels). TIME_LIMIT (default 560 s, from
# train.py's start; it stops 25 s early for the final evaluation and the save) keeps the whole command under ~575 s:
# unpacking and imports take ~15 s before it. Extra arguments go to train.py (e.g. --lr 8e-4).
# Usage (device tool, carry [".tinydata/train.npy.xz", ".tinydata/heldout.npy", ".tinydata/transformers-5.24.0-trim.tar.xz"]):
#   bash scripts/tiny_model/gpu_continue.sh
set -euo pipefail
: "${OUT:?OUT must name the output folder}"
D=.tinydata
PY=${PYTHON:-python3}
SITE=${SITE:-/tmp/site}
mkdir -p "$SITE" "$OUT"
$PY - "$D" "$SITE" <<'EOF'
import hashlib, lzma, shutil, sys, tarfile
d, site = sys.argv[1], sys.argv[2]
with tarfile.open(d + "/transformers-5.24.0-trim.tar.xz") as t:
    t.extractall(site, filter="data")
with lzma.open(d + "/train.npy.xz") as src, open(d + "/train.npy", "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 22)
want = {"train.npy": "8357a84593ba4c03401c5269c89d4237a7c4289cba94a096311f9cc02b69d26f",
        "heldout.npy": "36daacc031c63832a2e034967183c6221325201e44ac566d1d435a592e110901"}
for f, h in want.items():
    got = hashlib.sha256(open(d + "/" + f, "rb").read()).hexdigest()
    if got != h:
        sys.exit("gpu_continue: %s/%s has sha256 %s, not the shipped model's corpus" % (d, f, got))
print("gpu_continue: transformers unpacked to %s, token streams checked" % site, flush=True)
EOF
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec $PY scripts/tiny_model/train.py --init-gguf models/tiny/nf-tiny-bf16.gguf --config models/tiny --data "$D" \
    --batch "${BATCH:-128}" --time-limit "${TIME_LIMIT:-560}" --save "$OUT/hf" --log "$OUT/train_log.jsonl" "$@"
