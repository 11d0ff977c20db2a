#!/usr/bin/env bash
# run-default.sh — what `make run` runs.
#
# For now (before the embedded trained model and generation exist): synthesize the tiny preset into
# $NF_BUILD (default build/) if it is absent, and print what the loader sees in it with `nf info` (hyper-
# parameters, layer pattern, every tensor bound and checked, bytes by type). A later step replaces this with a
# chat generation on the embedded trained model.
set -euo pipefail
BUILD=${NF_BUILD:-build}
RECIPE=${NF_RECIPE:-q4}
MODEL="$BUILD/synth-tiny-$RECIPE.gguf"
if [ ! -s "$MODEL" ]; then
  echo "run-default: synthesizing the tiny preset ($RECIPE) -> $MODEL"
  "$BUILD/nf-synth" --preset tiny --recipe "$RECIPE" --seed 1 --out "$MODEL"
fi
echo "run-default: nf info $MODEL"
"$BUILD/nf" info "$MODEL"
