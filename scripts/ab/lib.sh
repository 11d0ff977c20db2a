# shellcheck shell=bash
# lib.sh — helpers shared by the nf-ab shell subcommands (build-arm, run, exact). Sourced, never run.
#
# Why shell: everything that runs on the GPU host is C or shell (docs/ab.md). These helpers hold the rules that must
# be the same in every subcommand: how an arm directory is validated, how frontiers are enumerated (the bench's
# rule, so the harness can check a CSV has exactly the rows it asked for), how GPU state is read (query only, never
# changed) and how a string becomes JSON.

NF_AB_PROG=${NF_AB_PROG:-nf-ab}

ab_die() { # exit status, message...
  local rc=$1; shift
  printf '%s: %s\n' "$NF_AB_PROG" "$*" >&2
  exit "$rc"
}
ab_refuse() { ab_die 2 "refused: $*"; }
ab_warn() { printf '%s: warning: %s\n' "$NF_AB_PROG" "$*" >&2; }
ab_now() { date -u +%Y-%m-%dT%H:%M:%SZ; }

# A JSON string literal for arbitrary text (control characters other than \n \t \r are dropped).
ab_jstr() {
  local s
  s=$(printf '%s' "$1" | tr -d '\000-\010\013\014\016-\037')
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\t'/\\t}
  s=${s//$'\r'/\\r}
  printf '"%s"' "$s"
}

ab_is_uint() { [[ $1 =~ ^[0-9]+$ ]] && [[ $1 =~ [1-9] ]]; }   # a positive integer ("0"/"00" are not)
ab_is_label() { [[ $1 =~ ^[A-Za-z0-9][A-Za-z0-9._+]*$ ]]; }
ab_sha256() { sha256sum "$1" | cut -d' ' -f1; }
ab_abspath() { # absolute path of a possibly not yet existing path
  case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s/%s\n' "$(pwd -P)" "$1" ;; esac
}

# key=value lookup in an arm.txt
ab_kv() { sed -n "s/^$2=//p" "$1" | head -n 1; }

# Frontiers of a sweep, one per line: ctx_start, then +step_incr (step_mul 1) or ceil(prev*step_mul) (at least +1),
# clamped so the last is exactly ctx_max. The bench uses the same rule (docs/ab.md, "bench contract").
ab_frontiers() { # start max incr mul
  awk -v s="$1" -v m="$2" -v inc="$3" -v mul="$4" 'BEGIN {
    f = s + 0; print f
    while (f < m) {
      if (mul + 0 > 1) { n = f * mul; c = int(n); if (c < n) c++; if (c < f + 1) c = f + 1 }
      else c = f + inc
      if (c > m) c = m
      f = c; print f
    }
  }'
}

# Validate an arm directory made by build-arm; prints nothing, refuses on any defect. Sets AB_BENCH, AB_TREE.
ab_check_arm() { # label dir
  local label=$1 dir=$2 f want got
  [ -d "$dir" ] || ab_refuse "arm $label: $dir is not a directory (build it with: $NF_AB_PROG build-arm REF $label)"
  for f in arm.txt build.json; do
    [ -s "$dir/$f" ] || ab_refuse "arm $label: $dir/$f missing: not a build-arm directory (missing build)"
  done
  AB_BENCH=$(ab_kv "$dir/arm.txt" bench)
  AB_TREE=$(ab_kv "$dir/arm.txt" tree)
  [ -n "$AB_BENCH" ] && [ -n "$AB_TREE" ] || ab_refuse "arm $label: $dir/arm.txt lacks bench= or tree="
  [[ $AB_BENCH == /* && $AB_TREE == /* ]] || ab_refuse "arm $label: $dir/arm.txt paths must be absolute"
  [ -d "$AB_TREE" ] || ab_refuse "arm $label: tree $AB_TREE missing"
  [ -f "$AB_BENCH" ] && [ -x "$AB_BENCH" ] || ab_refuse "arm $label: bench $AB_BENCH missing or not executable (missing build)"
  want=$(ab_kv "$dir/arm.txt" bench_sha256)
  got=$(ab_sha256 "$AB_BENCH")
  [ "$want" = "$got" ] || ab_refuse "arm $label: $AB_BENCH sha256 $got differs from the stamped $want (rebuilt after build-arm?)"
}

# Environment variables that may change the engine's kernels or routes. Refused unless recorded (--record-env).
ab_engine_env() {
  env | LC_ALL=C sort | grep -E '^(NF_|CUDA_LAUNCH_BLOCKING=|CUDA_VISIBLE_DEVICES=|CUBLAS_|NVIDIA_TF32_OVERRIDE=)' \
    | grep -Ev '^NF_(AB_[A-Z_]*|BUILD|FIXTURES)=' || true
}

# GPU state, read-only: nvidia-smi queries if present, else the line "no GPU". Never sets anything.
AB_GPU_FIELDS=index,name,driver_version,pci.bus_id,persistence_mode,ecc.mode.current,mig.mode.current,pstate,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw,power.limit,memory.used,memory.total,utilization.gpu,clocks_throttle_reasons.active
AB_GPU_MIN_FIELDS=index,name,driver_version,temperature.gpu,power.draw,clocks.sm,memory.used
ab_gpu_state() {
  local smi
  smi=$(command -v nvidia-smi 2>/dev/null) || { echo "no GPU"; return 0; }
  "$smi" --query-gpu=$AB_GPU_FIELDS --format=csv 2>/dev/null \
    || "$smi" --query-gpu=$AB_GPU_MIN_FIELDS --format=csv 2>/dev/null \
    || echo "nvidia-smi present but its query failed"
}
ab_gpu_name() {
  local smi
  smi=$(command -v nvidia-smi 2>/dev/null) || { echo "no GPU"; return 0; }
  "$smi" --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 || echo "unknown"
}
# Other compute processes on the GPU (empty when none or no GPU).
ab_gpu_busy() {
  local smi
  smi=$(command -v nvidia-smi 2>/dev/null) || return 0
  "$smi" --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>/dev/null | grep -v '^\s*$' || true
}
