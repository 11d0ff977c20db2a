#!/usr/bin/env bash
# run-default.sh — what `make run` runs: a one-shot chat generation with `nf run` on the embedded model.
#
# The embedded model is models/tiny/nf-tiny-bf16.gguf (a small glm5_next trained for this repo, with its
# tokenizer in the GGUF). When it is not there yet, the tiny synthetic preset is used instead (random weights:
# the text is noise, but every step runs: chat template, prefill, sampling, output parser, speed), with the
# embedded model's tokenizer (models/tiny/tokenizer.json). nf run prints the answer on stdout, the reasoning on
# stderr, then prefill and decode speed.
#
# Environment: NF_BUILD (default build), NF_PROMPT, NF_MAX_TOKENS (default 200), NF_SEED (default 1),
# NF_RECIPE (synthetic fallback recipe, default q4).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${NF_BUILD:-build}
PROMPT=${NF_PROMPT:-"Write a short Python function that reverses a string."}
MAX=${NF_MAX_TOKENS:-200}
SEED=${NF_SEED:-1}
EMBEDDED="$ROOT/models/tiny/nf-tiny-bf16.gguf"

if [ -s "$EMBEDDED" ]; then
  echo "run-default: embedded model $EMBEDDED" >&2
  ARGS=(-m "$EMBEDDED")
else
  RECIPE=${NF_RECIPE:-q4}
  MODEL="$BUILD/synth-tiny-v8192-$RECIPE.gguf"
  TOK="$ROOT/models/tiny/tokenizer.json"
  echo "run-default: NOTE: the embedded model $EMBEDDED is not there yet;" >&2
  echo "run-default:       using the SYNTHETIC tiny preset (random weights: the text is noise) with $TOK" >&2
  if [ ! -s "$MODEL" ]; then
    echo "run-default: synthesizing the tiny preset ($RECIPE, vocab 8192) -> $MODEL" >&2
    "$BUILD/nf-synth" --preset tiny --recipe "$RECIPE" --vocab 8192 --seed 1 --quiet --out "$MODEL" >&2
  fi
  ARGS=(-m "$MODEL" --tokenizer "$TOK")
fi
echo "run-default: nf run -p \"$PROMPT\" -n $MAX --seed $SEED" >&2
exec "$BUILD/nf" run "${ARGS[@]}" -p "$PROMPT" -n "$MAX" --seed "$SEED"
