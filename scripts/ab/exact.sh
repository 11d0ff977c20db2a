#!/usr/bin/env bash
# exact.sh — `nf-ab exact`: do two builds compute the same tokens? Token ids and top-K logits per decode step.
#
# Sequence: arm A twice at every frontier first (the self-check). If A disagrees with itself, temperature-0 decode is
# not deterministic here and no A/B answer is possible: REFUSED, and B is never run. Then B once per frontier,
# compared with A's first trial. The frontiers must include both attention regimes of GLM-5.3 (every token attended
# while ctx + gen <= 2051, sparse DSA selection beyond), since a change can be exact in one and not the other.
# A failed or truncated trial is NO ANSWER, never "equal" and never "not exact".
# Files: <label>-<trial>-ctx<F>.jsonl/.csv/.log/.rc, selfcheck.json, ab.json, verdict.txt.
# Exit: 0 IDENTICAL, 1 DIVERGED, 2 usage refusal, 3 NO ANSWER, 4 REFUSED (self-check or prefix stability).
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=lib.sh
. "$HERE/lib.sh"
PY=${PYTHON:-python3}

usage() {
  cat <<EOF
usage: $NF_AB_PROG exact --arm LABEL=ARMDIR --arm LABEL=ARMDIR --prompt FILE --out DIR [options] [-- BENCH ARGS]
  --weights FILE     model file (--model for the bench)
  --frontiers LIST   comma-separated prompt lengths (default 2016,4096)
  --gen N            decode steps per frontier (default 32)
  --topk K           top-K logits per step (default 20)
  --dense-limit N    attended-token limit of the dense regime (default 2051 = index_topk + index_kpool - 1)
  --one-regime       allow frontiers that do not span both regimes
  --record-env       allow engine env vars (NF_*, CUDA_*...) and record them
EOF
}

arms=() prompt="" weights="" out="" frontiers=2016,4096 gen=32 topk=20 dense=2051 one_regime=0 record_env=0 extra=()
need() { [ $# -ge 2 ] || ab_refuse "$1 needs a value"; }
while [ $# -gt 0 ]; do
  case $1 in
    --arm) need "$@"; arms+=("$2"); shift 2 ;;
    --prompt) need "$@"; prompt=$2; shift 2 ;;
    --weights) need "$@"; weights=$2; shift 2 ;;
    --out) need "$@"; out=$2; shift 2 ;;
    --frontiers) need "$@"; frontiers=$2; shift 2 ;;
    --gen) need "$@"; gen=$2; shift 2 ;;
    --topk) need "$@"; topk=$2; shift 2 ;;
    --dense-limit) need "$@"; dense=$2; shift 2 ;;
    --one-regime) one_regime=1; shift ;;
    --record-env) record_env=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) usage >&2; ab_refuse "unknown argument: $1" ;;
  esac
done

# ---- refusals, before any work ---------------------------------------------------------------------------------
for v in gen topk dense; do ab_is_uint "${!v}" || ab_refuse "--${v} must be a positive integer, got '${!v}'"; done
[ ${#arms[@]} -eq 2 ] || ab_refuse "exact compares exactly two arms (--arm A=DIR --arm B=DIR)"
labels=("${arms[0]%%=*}" "${arms[1]%%=*}")
dirs=("${arms[0]#*=}" "${arms[1]#*=}")
[ "${labels[0]}" != "${labels[1]}" ] || ab_refuse "the two labels are the same"
trees=() benches=()
for i in 0 1; do
  ab_is_label "${labels[i]}" || ab_refuse "label '${labels[i]}': use letters, digits, '.', '_', '+'"
  dirs[i]=$(cd "${dirs[i]}" 2>/dev/null && pwd -P) || ab_refuse "arm ${labels[i]}: directory missing (missing build)"
  ab_check_arm "${labels[i]}" "${dirs[i]}"
  trees+=("$AB_TREE")
  benches+=("$AB_BENCH")
done
IFS=, read -r -a fl <<<"$frontiers"
[ ${#fl[@]} -ge 1 ] || ab_refuse "--frontiers is empty"
dense_side=0 sparse_side=0
for f in "${fl[@]}"; do
  ab_is_uint "$f" || ab_refuse "frontier '$f' is not a positive integer"
  [ $((f + gen)) -le "$dense" ] && dense_side=1
  [ "$f" -gt "$dense" ] && sparse_side=1
done
if [ $one_regime -eq 0 ] && { [ $dense_side -eq 0 ] || [ $sparse_side -eq 0 ]; }; then
  ab_refuse "frontiers $frontiers do not span both attention regimes: need one with ctx + gen <= $dense (dense) and one with ctx > $dense (sparse); --one-regime to override"
fi
[ -n "$prompt" ] || ab_refuse "--prompt FILE is required"
case $prompt in /*) ;; *) prompt="${trees[0]}/$prompt" ;; esac
[ -f "$prompt" ] && [ -s "$prompt" ] || ab_refuse "prompt $prompt missing or empty"
if [ -n "$weights" ]; then
  weights=$(ab_abspath "$weights")
  [ -f "$weights" ] && [ -r "$weights" ] || ab_refuse "weights $weights missing or unreadable"
fi
[ -n "$out" ] || ab_refuse "--out DIR is required"
out=$(ab_abspath "$out")
[ ! -e "$out" ] || [ -z "$(ls -A "$out" 2>/dev/null)" ] || ab_refuse "$out exists and is not empty"
envs=$(ab_engine_env)
[ -z "$envs" ] || [ $record_env -eq 1 ] || ab_refuse "engine environment variables set: $(echo "$envs" | cut -d= -f1 | tr '\n' ' ')- unset them or pass --record-env"

busy=$(ab_gpu_busy)
[ -z "$busy" ] || ab_refuse "other compute processes on the GPU: $(echo "$busy" | tr '\n' ';')"
lock=${NF_AB_LOCK:-/tmp/nf-ab.lock}
if command -v flock >/dev/null; then
  exec 9>"$lock" || ab_refuse "cannot open lock $lock"
  flock -n 9 || ab_refuse "another nf-ab run holds $lock"
fi

mkdir -p "$out" || ab_die 2 "cannot create $out"
cp "$prompt" "$out/prompt" || ab_die 2 "cannot copy the prompt"
{
  echo "started=$(ab_now)"
  for i in 0 1; do echo "arm=${labels[i]} dir=${dirs[i]} commit=$(ab_kv "${dirs[i]}/arm.txt" commit) bench_sha256=$(ab_sha256 "${benches[i]}")"; done
  echo "prompt=$prompt sha256=$(ab_sha256 "$out/prompt")"
  echo "frontiers=$frontiers gen=$gen topk=$topk dense_limit=$dense"
  echo "bench_args=${extra[*]-}"
  echo "env=$(echo "$envs" | tr '\n' ' ')"
} >"$out/exact-manifest.txt"
ab_gpu_state >"$out/gpu-before.txt"

trial() { # arm-index trial-number
  local i=$1 t=$2 f p rc args
  for f in "${fl[@]}"; do
    p="$out/${labels[i]}-$t-ctx$f"
    args=(--prompt-file "$out/prompt")
    [ -n "$weights" ] && args+=(--model "$weights")
    args+=(--ctx-start "$f" --ctx-max "$f" --step-incr 1 --step-mul 1 --gen-tokens "$gen" --csv "$p.csv"
      --dump-steps "$p.jsonl" --dump-topk "$topk" ${extra[@]+"${extra[@]}"})
    echo "$NF_AB_PROG: exact ${labels[i]} trial $t ctx $f" >&2
    (cd "${trees[i]}" && exec "${benches[i]}" "${args[@]}") >"$p.log" 2>&1 </dev/null
    rc=$?
    echo "$rc" >"$p.rc"
  done
}
cmp_py() { # name prefixA prefixB json
  "$PY" "$HERE/exact.py" --name "$1" --frontiers "$frontiers" --gen "$gen" --topk "$topk" --json "$4" "$2" "$3"
}
finish() { # verdict exit-code
  ab_gpu_state >"$out/gpu-after.txt"
  echo "$1" >"$out/verdict.txt"
  echo "$NF_AB_PROG: exact: $1" >&2
  exit "$2"
}

A=${labels[0]} B=${labels[1]}
trial 0 1
trial 0 2
cmp_py "self-check $A/$A" "$out/$A-1" "$out/$A-2" "$out/selfcheck.json" | tee "$out/selfcheck.txt"
rc=${PIPESTATUS[0]}
case $rc in
  0) ;;
  1) finish "REFUSED: $A disagrees with itself (temperature-0 decode is not deterministic here); B was not run" 4 ;;
  3) finish "NO ANSWER: arm $A failed during the self-check; B was not run" 3 ;;
  4) finish "REFUSED: $(sed -n 's/.*REFUSED: //p' "$out/selfcheck.txt" | head -n 1)" 4 ;;
  *) finish "NO ANSWER: the self-check comparison failed (exit $rc)" 3 ;;
esac
trial 1 1
cmp_py "$B vs $A" "$out/$A-1" "$out/$B-1" "$out/ab.json" | tee "$out/ab.txt"
rc=${PIPESTATUS[0]}
case $rc in
  0) finish "IDENTICAL: $B equals $A at ctx $frontiers ($gen steps, top-$topk logits at print resolution)" 0 ;;
  1) finish "DIVERGED: $(grep -m1 'DIVERGED, kind' "$out/ab.txt")" 1 ;;
  3) finish "NO ANSWER: an arm failed; this says nothing about exactness" 3 ;;
  4) finish "REFUSED: $(sed -n 's/.*REFUSED: //p' "$out/ab.txt" | head -n 1)" 4 ;;
  *) finish "NO ANSWER: the comparison failed (exit $rc)" 3 ;;
esac
