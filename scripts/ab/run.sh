#!/usr/bin/env bash
# run.sh — `nf-ab run`: the paired A/B (or A/A) throughput sweep over two or more arms made by build-arm.
#
# Each repetition runs every arm once; the lead rotates per repetition (2 arms: A,B then B,A = ABBA), so the rep
# count must be a multiple of the arm count. Every trial is a fresh bench process with cwd = its own tree, the same
# prompt bytes (copied once into the run) and the same frontiers. GPU state is read (never changed) before, after
# every trial and at the end. Everything that can be refused is refused before any work: no directory is created
# and no bench started when an input is wrong ("a typo should cost a second, not a model load").
# Output per run: manifest.json, run-order.txt, trials.jsonl, gpu-before.txt, gpu-after.txt,
# <label>-rep<N>.csv and .log. Exit 0 complete, 1 incomplete (a trial failed: not a paired run), 2 refused.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

usage() {
  cat <<EOF
usage: $NF_AB_PROG run --arm LABEL=ARMDIR --arm LABEL=ARMDIR [--arm ...] --prompt FILE --out DIR [options] [-- BENCH ARGS]
       $NF_AB_PROG run --aa LABEL=ARMDIR --prompt FILE --out DIR [options]      (A/A: the noise floor)
options:
  --weights FILE      model file, passed to the bench as --model FILE
  --ctx-start N       first frontier (default 2048)
  --ctx-max N         last frontier (default 16384)
  --step-incr N       linear step (default 2048)
  --step-mul X        geometric step when > 1 (default 1)
  --gen N             greedy decode tokens per frontier (default 128)
  --reps N            repetitions, a multiple of the arm count (default 4)
  --runs K            repeat the whole A/B K times into DIR/run1..K (default 3; 1 writes into DIR itself)
  --time-budget S     start another run only if it is expected to end within S seconds of the start
  --tar FILE          pack DIR into one tarball at the end (one result file)
  --record-env        allow engine env vars (NF_*, CUDA_*...) and record them; refused otherwise
  --allow-busy-gpu    run although nvidia-smi lists other compute processes
  --arm-args L=ARGS   bench options for arm L only, split on blanks (e.g. two arms of one commit that differ in
                      '--draft lookup'; two arms may then name the same arm directory); recorded in the manifest,
                      and runs with other arm args are not pooled
  --arm-env L=ENV     environment assignments for arm L's bench only, VAR=VALUE words split on blanks (e.g. two
                      arms of one build that differ in a kernel switch, 'NF_CUDA_NORM_ROW4=off'); recorded in the
                      manifest like --arm-args and allowed without --record-env (they are the comparison)
A relative --prompt is resolved inside arm A's tree (a branch cannot change the input); it is copied into the run.
EOF
}

arms=() aa="" prompt="" weights="" out="" tarf="" record_env=0 allow_busy=0
ctx_start=2048 ctx_max=16384 step_incr=2048 step_mul=1 gen=128 reps=4 runs=3 budget=""
extra=()
declare -A arm_args=()
declare -A arm_env=()
need() { [ $# -ge 2 ] || ab_refuse "$1 needs a value"; }
while [ $# -gt 0 ]; do
  case $1 in
    --arm) need "$@"; arms+=("$2"); shift 2 ;;
    --arm-args) need "$@"; [[ $2 == *=* ]] || ab_refuse "--arm-args wants LABEL=ARGS, got '$2'"
      arm_args[${2%%=*}]=${2#*=}; shift 2 ;;
    --arm-env) need "$@"; [[ $2 == *=*=* ]] || ab_refuse "--arm-env wants LABEL=VAR=VALUE ..., got '$2'"
      for w in ${2#*=}; do
        [[ $w =~ ^[A-Za-z_][A-Za-z0-9_]*=.*$ ]] || ab_refuse "--arm-env ${2%%=*}: '$w' is not VAR=VALUE"
      done
      arm_env[${2%%=*}]=${2#*=}; shift 2 ;;
    --aa) need "$@"; aa=$2; shift 2 ;;
    --prompt) need "$@"; prompt=$2; shift 2 ;;
    --weights) need "$@"; weights=$2; shift 2 ;;
    --out) need "$@"; out=$2; shift 2 ;;
    --tar) need "$@"; tarf=$2; shift 2 ;;
    --ctx-start) need "$@"; ctx_start=$2; shift 2 ;;
    --ctx-max) need "$@"; ctx_max=$2; shift 2 ;;
    --step-incr) need "$@"; step_incr=$2; shift 2 ;;
    --step-mul) need "$@"; step_mul=$2; shift 2 ;;
    --gen) need "$@"; gen=$2; shift 2 ;;
    --reps) need "$@"; reps=$2; shift 2 ;;
    --runs) need "$@"; runs=$2; shift 2 ;;
    --time-budget) need "$@"; budget=$2; shift 2 ;;
    --record-env) record_env=1; shift ;;
    --allow-busy-gpu) allow_busy=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) usage >&2; ab_refuse "unknown argument: $1" ;;
  esac
done

# ---- refusals, before any work ---------------------------------------------------------------------------------
for v in ctx_start ctx_max step_incr gen reps runs; do
  ab_is_uint "${!v}" || ab_refuse "--${v//_/-} must be a positive integer, got '${!v}'"
done
[ -z "$budget" ] || ab_is_uint "$budget" || ab_refuse "--time-budget must be a positive integer (seconds), got '$budget'"
[[ $step_mul =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v m="$step_mul" 'BEGIN{exit !(m >= 1)}' \
  || ab_refuse "--step-mul must be a number >= 1, got '$step_mul'"
[ "$ctx_start" -le "$ctx_max" ] || ab_refuse "--ctx-start $ctx_start is above --ctx-max $ctx_max"
mode=ab
labels=() dirs=()
if [ -n "$aa" ]; then
  [ ${#arms[@]} -eq 0 ] || ab_refuse "--aa and --arm are exclusive (A/A runs one build under two labels)"
  [[ $aa == *=* ]] || ab_refuse "--aa wants LABEL=ARMDIR, got '$aa'"
  mode=aa
  labels=("${aa%%=*}_1" "${aa%%=*}_2")
  dirs=("${aa#*=}" "${aa#*=}")
else
  [ ${#arms[@]} -ge 2 ] || ab_refuse "need at least two --arm LABEL=ARMDIR (or --aa LABEL=ARMDIR for A/A)"
  for a in "${arms[@]}"; do
    [[ $a == *=* ]] || ab_refuse "--arm wants LABEL=ARMDIR, got '$a'"
    labels+=("${a%%=*}")
    dirs+=("${a#*=}")
  done
fi
n=${#labels[@]}
for ((i = 0; i < n; i++)); do
  ab_is_label "${labels[i]}" || ab_refuse "label '${labels[i]}': use letters, digits, '.', '_', '+'"
  for ((j = 0; j < i; j++)); do
    [ "${labels[i]}" != "${labels[j]}" ] || ab_refuse "label '${labels[i]}' given twice"
    # one build under two labels is an A/B only when the arms differ in their bench options (serial against
    # --draft lookup): the binary, tree and inputs are then identical by construction
    if [ $mode = ab ] && [ "$(cd "${dirs[i]}" 2>/dev/null && pwd -P)" = "$(cd "${dirs[j]}" 2>/dev/null && pwd -P)" ] &&
       [ "${arm_args[${labels[i]}]:-}" = "${arm_args[${labels[j]}]:-}" ] &&
       [ "${arm_env[${labels[i]}]:-}" = "${arm_env[${labels[j]}]:-}" ]; then
      ab_refuse "arms ${labels[j]} and ${labels[i]} are the same directory with the same --arm-args and --arm-env: that is an A/A run (--aa)"
    fi
  done
done
check_per_arm() { # option label...: every label given to a per-arm option names an arm of an A/B run
  local opt=$1 l x found
  shift
  for l in "$@"; do
    found=0
    for x in "${labels[@]}"; do [ "$x" = "$l" ] && found=1; done
    [ $found = 1 ] || ab_refuse "$opt names '$l', which is not an arm label"
    [ $mode = ab ] || ab_refuse "$opt is for A/B runs (an A/A run compares one configuration with itself)"
  done
}
check_per_arm --arm-args "${!arm_args[@]}"
check_per_arm --arm-env "${!arm_env[@]}"
(( reps % n == 0 )) || ab_refuse "--reps $reps is not a multiple of the $n arms: the arm order would not balance"
trees=() benches=()
for ((i = 0; i < n; i++)); do
  dirs[i]=$(cd "${dirs[i]}" 2>/dev/null && pwd -P) || ab_refuse "arm ${labels[i]}: directory missing (missing build)"
  ab_check_arm "${labels[i]}" "${dirs[i]}"
  trees+=("$AB_TREE")
  benches+=("$AB_BENCH")
done
kinds=$(for d in "${dirs[@]}"; do grep -o '"cuda": *[a-z]*' "$d/build.json" || echo '"cuda": unknown'; done | sort -u | wc -l)
[ "$kinds" -le 1 ] || ab_warn "the arms mix CUDA and CPU builds (build.json \"cuda\"): is that the comparison you mean?"
[ -n "$prompt" ] || ab_refuse "--prompt FILE is required (one prompt for all arms)"
case $prompt in /*) ;; *) prompt="${trees[0]}/$prompt" ;; esac
[ -f "$prompt" ] && [ -s "$prompt" ] || ab_refuse "prompt $prompt missing or empty"
if [ -n "$weights" ]; then
  weights=$(ab_abspath "$weights")
  [ -f "$weights" ] && [ -r "$weights" ] || ab_refuse "weights $weights missing or unreadable"
fi
[ -n "$out" ] || ab_refuse "--out DIR is required"
out=$(ab_abspath "$out")
if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
  ab_refuse "$out exists and is not empty: a run is never overwritten"
fi
if [ -n "$tarf" ]; then
  tarf=$(ab_abspath "$tarf")
  [ ! -e "$tarf" ] || ab_refuse "$tarf exists"
fi
envs=$(ab_engine_env)
if [ -n "$envs" ] && [ $record_env -eq 0 ]; then
  ab_refuse "engine environment variables set (they can change kernels per arm): $(echo "$envs" | cut -d= -f1 | tr '\n' ' ')- unset them or pass --record-env"
fi
busy=$(ab_gpu_busy)
if [ -n "$busy" ] && [ $allow_busy -eq 0 ]; then
  ab_refuse "other compute processes on the GPU: $(echo "$busy" | tr '\n' ';') (--allow-busy-gpu to run anyway)"
fi
frontiers=$(ab_frontiers "$ctx_start" "$ctx_max" "$step_incr" "$step_mul" | tr '\n' ' ')

# one machine-scoped lock for the whole sweep, held by this shell (never two A/Bs at once)
lock=${NF_AB_LOCK:-/tmp/nf-ab.lock}
if command -v flock >/dev/null; then
  exec 9>"$lock" || ab_refuse "cannot open lock $lock"
  flock -n 9 || ab_refuse "another nf-ab run holds $lock"
else
  ab_warn "flock absent: no run lock"
fi

# ---- the sweep ---------------------------------------------------------------------------------------------------
mkdir -p "$out" || ab_die 2 "cannot create $out"
inputs="$out/inputs"
mkdir -p "$inputs"
pname=$(basename "$prompt")
cp "$prompt" "$inputs/$pname" || ab_die 2 "cannot copy the prompt"
prompt_copy="$inputs/$pname"
prompt_sha=$(ab_sha256 "$prompt_copy")
prompt_bytes=$(wc -c <"$prompt_copy" | tr -d ' ')

child="" rd="" started=""
on_signal() {
  [ -n "$child" ] && kill "$child" 2>/dev/null
  [ -n "$rd" ] && [ -n "$started" ] && write_manifest "$rd" interrupted "$started" "$(ab_now)"
  echo "$NF_AB_PROG: interrupted: INCOMPLETE, this is not a paired run" >&2
  exit 130
}
trap on_signal INT TERM

# shellcheck disable=SC2086  # a per-arm value is its words, split on blanks (as the bench gets them)
json_arm_map() { # name of an associative array label -> words: {"label": ["w1", ...], ...}
  local -n map=$1
  local first=1 l
  printf '{'
  for l in "${!map[@]}"; do
    [ $first = 1 ] || printf ', '
    first=0
    printf '%s: %s' "$(ab_jstr "$l")" "$(json_list ${map[$l]})"
  done
  printf '}'
}
json_list() { local first=1 x; printf '['; for x in "$@"; do [ $first = 1 ] || printf ','; first=0; ab_jstr "$x"; done; printf ']'; }

write_manifest() { # rundir status started finished
  local rd=$1 i wb=null
  if [ -n "$weights" ]; then
    wb=$(printf '{"path":%s,"name":%s,"bytes":%s}' "$(ab_jstr "$weights")" "$(ab_jstr "$(basename "$weights")")" \
      "$(wc -c <"$weights" | tr -d ' ')")
  fi
  {
    printf '{\n "tool": "nf-ab run", "version": 1, "mode": "%s", "status": "%s",\n' "$mode" "$2"
    printf ' "started": "%s", "finished": %s, "host": %s,\n' "$3" "$( [ -n "$4" ] && ab_jstr "$4" || echo null)" \
      "$(ab_jstr "$(hostname 2>/dev/null || echo unknown)")"
    printf ' "arms": [\n'
    for ((i = 0; i < n; i++)); do
      printf '  {"label": %s, "dir": %s, "tree": %s, "bench": %s, "bench_sha256": "%s", "commit": %s, "dirty": %s,\n   "build": %s}%s\n' \
        "$(ab_jstr "${labels[i]}")" "$(ab_jstr "${dirs[i]}")" "$(ab_jstr "${trees[i]}")" "$(ab_jstr "${benches[i]}")" \
        "$(ab_sha256 "${benches[i]}")" "$(ab_jstr "$(ab_kv "${dirs[i]}/arm.txt" commit)")" \
        "$( [ "$(ab_kv "${dirs[i]}/arm.txt" dirty)" = true ] && echo true || echo false)" \
        "$(cat "${dirs[i]}/build.json")" "$( [ $i -lt $((n - 1)) ] && echo ,)"
    done
    printf ' ],\n'
    printf ' "prompt": {"path": %s, "source": %s, "name": %s, "bytes": %s, "sha256": "%s"},\n' \
      "$(ab_jstr "$prompt_copy")" "$(ab_jstr "$prompt")" "$(ab_jstr "$pname")" "$prompt_bytes" "$prompt_sha"
    printf ' "weights": %s,\n' "$wb"
    printf ' "sweep": {"ctx_start": %s, "ctx_max": %s, "step_incr": %s, "step_mul": %s, "gen": %s, "frontiers": [%s]},\n' \
      "$ctx_start" "$ctx_max" "$step_incr" "$step_mul" "$gen" "$(echo $frontiers | tr ' ' ',')"
    printf ' "reps": %s, "runs": %s, "bench_args": %s,\n' "$reps" "$runs" "$(json_list ${extra[@]+"${extra[@]}"})"
    printf ' "arm_args": %s,\n' "$(json_arm_map arm_args)"
    printf ' "arm_env": %s,\n' "$(json_arm_map arm_env)"
    printf ' "env": %s,\n' "$(ab_jstr "$envs")"
    printf ' "gpu": {"name": %s}\n}\n' "$(ab_jstr "$(ab_gpu_name)")"
  } >"$rd/manifest.json.tmp" && mv "$rd/manifest.json.tmp" "$rd/manifest.json"
}

# A trial is done only when the bench exited 0 AND its CSV has the contract header and exactly the frontiers asked
# for with gen_tokens = --gen. This is the one definition of "done" (counting files is not: a CSV being written
# already has a header).
CONTRACT="ctx,prefill_tokens,prefill_tps,gen_tokens,gen_tps,state_bytes,bytes_per_token,decode_gbps,bw_fraction,gen_ids_hash"
check_csv() { # file -> prints a reason when bad
  local f=$1 head got
  [ -s "$f" ] || { echo "no CSV written"; return 1; }
  head=$(head -n 1 "$f" | tr -d '\r ')
  case "$head," in "$CONTRACT",*) ;; *) echo "CSV header '$head' does not start with the contract columns"; return 1 ;; esac
  got=$(tail -n +2 "$f" | awk -F, 'NF > 0 {printf "%d ", $1}')
  [ "$got" = "$frontiers" ] || { echo "CSV frontiers '$got' differ from the sweep '$frontiers'"; return 1; }
  got=$(tail -n +2 "$f" | awk -F, -v g="$gen" 'NF > 0 && $4 + 0 != g {print $1; exit}')
  [ -z "$got" ] || { echo "gen_tokens at ctx $got is not $gen (a short trial looks fast)"; return 1; }
}

fail_total=0
t_start=$(date +%s)
done_runs=0
for ((run = 1; run <= runs; run++)); do
  if [ -n "$budget" ] && [ $done_runs -gt 0 ]; then
    now=$(date +%s)
    per=$(((now - t_start) / done_runs))
    if [ $((now - t_start + per)) -gt "$budget" ]; then
      ab_warn "stopping after $done_runs of $runs runs: the next (~${per}s) would end past the ${budget}s budget"
      break
    fi
  fi
  rd=$out
  [ "$runs" -gt 1 ] && rd="$out/run$run"
  mkdir -p "$rd"
  started=$(ab_now)
  write_manifest "$rd" running "$started" ""
  ab_gpu_state >"$rd/gpu-before.txt"
  : >"$rd/run-order.txt"
  : >"$rd/trials.jsonl"
  fails=0
  for ((rep = 1; rep <= reps; rep++)); do
    for ((pos = 0; pos < n; pos++)); do
      i=$(((rep - 1 + pos) % n))
      lab=${labels[i]}
      echo "$rep $((pos + 1)) $lab" >>"$rd/run-order.txt"
      csv="$rd/$lab-rep$rep.csv"
      log="$rd/$lab-rep$rep.log"
      args=(--prompt-file "$prompt_copy")
      [ -n "$weights" ] && args+=(--model "$weights")
      args+=(--ctx-start "$ctx_start" --ctx-max "$ctx_max" --step-incr "$step_incr" --step-mul "$step_mul"
        --gen-tokens "$gen" --csv "$csv.part" ${extra[@]+"${extra[@]}"})
      # shellcheck disable=SC2206  # per-arm options are split on blanks, as documented
      if [ -n "${arm_args[$lab]:-}" ]; then args+=(${arm_args[$lab]}); fi
      echo "$NF_AB_PROG: run $run rep $rep position $((pos + 1)): $lab" >&2
      t0=$(date +%s.%N)
      # shellcheck disable=SC2086  # --arm-env assignments are split on blanks, as documented
      ( cd "${trees[i]}" && exec env ${arm_env[$lab]:-} "${benches[i]}" "${args[@]}" ) >"$log" 2>&1 </dev/null &
      child=$!
      wait "$child"
      rc=$?
      child=""
      t1=$(date +%s.%N)
      why=""
      if [ $rc -ne 0 ]; then
        why="bench exited $rc"
      else
        why=$(check_csv "$csv.part") && why=""
      fi
      if [ -z "$why" ]; then
        mv "$csv.part" "$csv"
      else
        [ -e "$csv.part" ] && mv "$csv.part" "$csv.failed"
        fails=$((fails + 1))
        echo "$NF_AB_PROG: trial $lab rep $rep FAILED: $why; log tail:" >&2
        tail -n 5 "$log" >&2
      fi
      printf '{"run": %d, "rep": %d, "position": %d, "label": %s, "rc": %d, "ok": %s, "why": %s, "seconds": %s, "gpu_after": %s}\n' \
        "$run" "$rep" "$((pos + 1))" "$(ab_jstr "$lab")" "$rc" "$( [ -z "$why" ] && echo true || echo false)" \
        "$(ab_jstr "$why")" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b - a}')" \
        "$(ab_jstr "$(ab_gpu_state)")" >>"$rd/trials.jsonl"
    done
  done
  ab_gpu_state >"$rd/gpu-after.txt"
  st=complete
  [ $fails -eq 0 ] || st=incomplete
  write_manifest "$rd" "$st" "$started" "$(ab_now)"
  fail_total=$((fail_total + fails))
  done_runs=$((done_runs + 1))
  echo "$NF_AB_PROG: run $run $st ($rd)" >&2
done

if [ -n "$tarf" ]; then
  tar -czf "$tarf" -C "$(dirname "$out")" "$(basename "$out")" || ab_die 1 "tar failed"
  echo "$NF_AB_PROG: packed $tarf" >&2
fi
if [ $fail_total -ne 0 ]; then
  echo "$NF_AB_PROG: INCOMPLETE: $fail_total trial(s) failed; this is not a paired run" >&2
  exit 1
fi
exit 0
