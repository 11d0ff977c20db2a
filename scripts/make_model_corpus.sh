#!/usr/bin/env bash
# make_model_corpus.sh — seed corpus for fuzz/fuzz_model.c: a few minute synthetic glm5-next models written by
# nf-synth (every feature, all recipes that fit such small rows), each a few tens of KB.
set -euo pipefail
BUILD=${NF_BUILD:-build}
OUT=fuzz/corpus/model
mkdir -p "$OUT"
common=(--preset tiny --layers 2 --layer-types KM --dense-lead 1 --vocab 16 --heads 2 --kda-heads 2 --idx-heads 2
        --topk 8 --kpool 4 --experts 2 --experts-used 1 --hc 2 --ctx 64 --quiet)
d16=(--hidden 16 --q-lora 16 --kv-lora 16 --qk-nope 16 --v-head 16 --kda-head-dim 8 --idx-dim 8 --ff 16 --ff-exp 16)
d32=(--hidden 32 --q-lora 32 --kv-lora 32 --qk-nope 32 --v-head 32 --kda-head-dim 32 --idx-dim 32 --ff 32 --ff-exp 32)
"$BUILD/nf-synth" "${common[@]}" "${d16[@]}" --recipe f32 --nextn 0 --out "$OUT/tiny-f32.gguf" >/dev/null
"$BUILD/nf-synth" "${common[@]}" "${d32[@]}" --recipe q8 --out "$OUT/tiny-q8-mtp.gguf" >/dev/null
"$BUILD/nf-synth" "${common[@]}" "${d16[@]}" --recipe bf16 --nextn 0 --layers 3 --layer-types KMM --indexer-types FFS \
  --out "$OUT/shared-idx-bf16.gguf" >/dev/null
ls -la "$OUT"
