#!/usr/bin/env bash
# pack_gpu_carry.sh — make the git-ignored files that continued training of the tiny model needs on the GPU machine
# (scripts/tiny_model/gpu_continue.sh), small enough to travel.
#
# Why: the device tool sends the whole working tree, at most 64 MiB, and the tracked tree alone is ~52 MiB since the
# 32 MB GGUF is committed; the raw token stream (25.6 MB) and the transformers 5.24 wheel (13.5 MB; the GPU machine
# has 5.17) no longer fit. So: the training tokens xz-compressed (7.6 MB; the stream has many repeats), the held-out
# tokens as they are, and transformers 5.24 without the ~550 model folders it does not need here (models/auto and
# models/glm5_next kept: 1.5 MB). The checkpoint does not travel: train.py --init-gguf rebuilds it from the tracked GGUF.
# Run from the repository root after make_data.py (with the --exclude-packages that README.md gives) and
# tokenize_data.py; the token streams are checked against the shipped model's corpus (sha256 below) first.
# Output: .tinydata/train.npy.xz, .tinydata/transformers-5.24.0-trim.tar.xz (+ the existing .tinydata/heldout.npy).
set -euo pipefail
TRAIN_SHA=8357a84593ba4c03401c5269c89d4237a7c4289cba94a096311f9cc02b69d26f     # 12,799,424 tokens
HELDOUT_SHA=36daacc031c63832a2e034967183c6221325201e44ac566d1d435a592e110901   # 172,381 tokens
PY=${PYTHON:-python3}
D=.tinydata
for f in train heldout; do
    [ -f $D/$f.npy ] || { echo "pack_gpu_carry: $D/$f.npy missing (make_data.py + tokenize_data.py first)" >&2; exit 1; }
done
echo "$TRAIN_SHA  $D/train.npy
$HELDOUT_SHA  $D/heldout.npy" | sha256sum -c --quiet - || {
    echo "pack_gpu_carry: the token streams are not the shipped model's corpus (see make_data.py --exclude-packages)" >&2
    exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
$PY -m pip download -q --no-deps --only-binary=:all: -d "$tmp" transformers==5.24.0
mkdir "$tmp/site"
(cd "$tmp/site" && $PY -m zipfile -e "$tmp"/transformers-5.24.0-py3-none-any.whl .)
for m in "$tmp"/site/transformers/models/*/; do
    case $(basename "$m") in auto|glm5_next) ;; *) rm -rf "$m" ;; esac
done
tar cf - -C "$tmp/site" transformers transformers-5.24.0.dist-info | xz -9e -T2 > $D/transformers-5.24.0-trim.tar.xz
xz -9e -T2 -c $D/train.npy > $D/train.npy.xz.tmp && mv $D/train.npy.xz.tmp $D/train.npy.xz

carry=("$D/train.npy.xz" "$D/heldout.npy" "$D/transformers-5.24.0-trim.tar.xz")
ls -l "${carry[@]}"
tracked=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
untracked=$(git ls-files -z --others --exclude-standard | xargs -0 -r du -cb | tail -1 | cut -f1)
extra=$(du -cb "${carry[@]}" | tail -1 | cut -f1)
awk -v t="$tracked" -v u="${untracked:-0}" -v c="$extra" 'BEGIN {
    printf "travels: tracked %.1f MiB + untracked %.1f MiB + carried %.1f MiB = %.1f MiB (limit 64)\n",
           t/1048576, u/1048576, c/1048576, (t+u+c)/1048576; exit (t+u+c > 62*1048576) }'
echo "carry: [\".tinydata/train.npy.xz\", \".tinydata/heldout.npy\", \".tinydata/transformers-5.24.0-trim.tar.xz\"]"
