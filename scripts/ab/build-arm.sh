#!/usr/bin/env bash
# build-arm.sh — `nf-ab build-arm REF LABEL`: a clean build of one git ref in its own worktree, stamped.
#
# Why: two builds in one tree share run-time-loaded files and objects, and an incremental build after a checkout can
# link objects compiled against an old header (ab-protocol.md §5.1-5.2). So every arm is a fresh `git worktree` at
# the ref, built from nothing, with cwd = that tree at run time. The stamp (build.json, arm.txt) records commit,
# dirty flag, compiler versions, the flags the Makefile actually used and sha256 of every binary, so a CSV can be
# traced to the exact binary that wrote it; `nf-ab run` refuses an arm whose bench no longer matches its stamp.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

usage() {
  cat <<EOF
usage: $NF_AB_PROG build-arm REF LABEL [options]
  --root DIR     where arms live (default \$NF_AB_ROOT or /tmp/nf-ab-arms); the arm is DIR/LABEL
  --repo DIR     the git repository (default: the one holding the current directory)
  --cuda         build the CUDA bench (make build/cuda/nf-bench) instead of the CPU one
  --bench NAME   bench program name (default nf-bench)
  --target T     make target that produces the bench (default build[/cuda]/NAME)
  -j N           make jobs (default: number of CPUs)
  --force        replace an existing arm directory of that label
Uncommitted changes in the repository are NOT in the arm: it is the commit REF names.
EOF
}

ref="" label="" root=${NF_AB_ROOT:-/tmp/nf-ab-arms} repo="" cuda=0 bench_name=nf-bench target="" force=0
jobs=$(nproc 2>/dev/null || echo 2)
pos=()
while [ $# -gt 0 ]; do
  case $1 in
    --root) [ $# -ge 2 ] || ab_refuse "--root needs a value"; root=$2; shift 2 ;;
    --repo) [ $# -ge 2 ] || ab_refuse "--repo needs a value"; repo=$2; shift 2 ;;
    --cuda) cuda=1; shift ;;
    --bench) [ $# -ge 2 ] || ab_refuse "--bench needs a value"; bench_name=$2; shift 2 ;;
    --target) [ $# -ge 2 ] || ab_refuse "--target needs a value"; target=$2; shift 2 ;;
    -j) [ $# -ge 2 ] || ab_refuse "-j needs a value"; jobs=$2; shift 2 ;;
    --force) force=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) usage >&2; ab_refuse "unknown option $1" ;;
    *) pos+=("$1"); shift ;;
  esac
done
[ ${#pos[@]} -eq 2 ] || { usage >&2; ab_refuse "need REF and LABEL"; }
ref=${pos[0]} label=${pos[1]}
ab_is_label "$label" || ab_refuse "label '$label': use letters, digits, '.', '_', '+'"
ab_is_uint "$jobs" || ab_refuse "-j wants a positive integer"
repo=$(git -C "${repo:-.}" rev-parse --show-toplevel 2>/dev/null) || ab_refuse "${repo:-.} is not inside a git repository"
commit=$(git -C "$repo" rev-parse --verify --quiet "$ref^{commit}") || ab_refuse "'$ref' does not name a commit in $repo"
root=$(ab_abspath "$root")
arm="$root/$label"
if [ -e "$arm" ]; then
  [ $force -eq 1 ] || ab_refuse "$arm exists (use --force to rebuild it from nothing)"
  git -C "$repo" worktree remove --force "$arm/tree" 2>/dev/null
  rm -rf "$arm"
  git -C "$repo" worktree prune
fi
if [ $cuda -eq 1 ]; then bench_rel="build/cuda/$bench_name"; else bench_rel="build/$bench_name"; fi
[ -n "$target" ] || target=$bench_rel

mkdir -p "$arm" || ab_die 2 "cannot create $arm"
tree="$arm/tree"
echo "$NF_AB_PROG: worktree $tree at $commit ($ref)" >&2
git -C "$repo" worktree add --detach "$tree" "$commit" >"$arm/worktree.log" 2>&1 \
  || { cat "$arm/worktree.log" >&2; ab_die 1 "git worktree add failed"; }

# Always a clean build: a fresh worktree has no build/, and `make clean` makes sure of it.
echo "$NF_AB_PROG: make -j$jobs $target (log: $arm/build.log)" >&2
if ! (cd "$tree" && make clean >/dev/null 2>&1; make -j"$jobs" "$target") >"$arm/build.log" 2>&1; then
  tail -n 30 "$arm/build.log" >&2
  ab_die 1 "build of $label at $commit failed; see $arm/build.log"
fi
bench="$tree/$bench_rel"
[ -f "$bench" ] && [ -x "$bench" ] || ab_die 1 "the build did not produce $bench_rel (does this commit have the bench?)"

# What the Makefile actually used: ask make itself for the expanded variables (no edit to the Makefile needed).
mkvar() {
  (cd "$tree" && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s --no-print-directory --eval 'nfab-print-%: ; @echo $($*)' "nfab-print-$1" 2>/dev/null) | grep -v '^make\[' | tail -n 1
}
cc=$(mkvar CC); cc=${cc:-cc}
nvcc=$(mkvar NVCC); nvcc=${nvcc:-nvcc}
cflags=$(mkvar CFLAGS)
nvflags=$(mkvar NVFLAGS)
ldlibs=$(mkvar LDLIBS)
cc_version=$("$cc" --version 2>/dev/null | head -n 1)
if command -v "$nvcc" >/dev/null 2>&1; then nvcc_version=$("$nvcc" --version 2>/dev/null | tail -n 1); else nvcc_version="absent"; fi
dirty=false
[ -z "$(git -C "$tree" status --porcelain 2>/dev/null)" ] || dirty=true
src_dirty=false
[ -z "$(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null)" ] || src_dirty=true
if [ "$src_dirty" = true ]; then
  ab_warn "$repo has uncommitted changes; they are NOT in this arm (it is commit $commit)"
fi

# sha256 of the bench, every program and library under build/, and any run-time-loaded kernel files.
hashes=""
while IFS= read -r f; do
  rel=${f#"$tree"/}
  hashes+="${hashes:+, }$(ab_jstr "$rel"): \"$(ab_sha256 "$f")\""
done < <(cd "$tree" && find build -type f \( -perm -u+x -o -name '*.so' -o -name '*.a' -o -name '*.ptx' \
  -o -name '*.cubin' -o -name '*.fatbin' \) 2>/dev/null | LC_ALL=C sort | sed "s|^|$tree/|")
bench_sha=$(ab_sha256 "$bench")
kernels=$(cd "$tree" && find . -path ./build -prune -o \( -name '*.ptx' -o -name '*.cubin' -o -name '*.fatbin' \) -print \
  2>/dev/null | LC_ALL=C sort | tr '\n' ' ')

{
  printf '{\n "label": %s, "ref": %s, "commit": "%s", "dirty": %s, "source_repo": %s, "source_dirty": %s,\n' \
    "$(ab_jstr "$label")" "$(ab_jstr "$ref")" "$commit" "$dirty" "$(ab_jstr "$repo")" "$src_dirty"
  printf ' "built": "%s", "host": %s, "tree": %s, "target": %s, "cuda": %s,\n' "$(ab_now)" \
    "$(ab_jstr "$(hostname 2>/dev/null || echo unknown)")" "$(ab_jstr "$tree")" "$(ab_jstr "$target")" \
    "$( [ $cuda -eq 1 ] && echo true || echo false)"
  printf ' "cc": %s, "cc_version": %s, "nvcc": %s, "nvcc_version": %s,\n' "$(ab_jstr "$cc")" \
    "$(ab_jstr "$cc_version")" "$(ab_jstr "$nvcc")" "$(ab_jstr "$nvcc_version")"
  printf ' "cflags": %s, "nvflags": %s, "ldlibs": %s,\n' "$(ab_jstr "$cflags")" "$(ab_jstr "$nvflags")" \
    "$(ab_jstr "$ldlibs")"
  printf ' "bench": %s, "bench_sha256": "%s",\n' "$(ab_jstr "$bench_rel")" "$bench_sha"
  printf ' "runtime_kernel_files": %s,\n' "$(ab_jstr "${kernels:-none}")"
  printf ' "sha256": {%s}\n}\n' "$hashes"
} >"$arm/build.json"
{
  echo "label=$label"
  echo "commit=$commit"
  echo "dirty=$dirty"
  echo "tree=$tree"
  echo "bench=$bench"
  echo "bench_sha256=$bench_sha"
} >"$arm/arm.txt"
echo "$NF_AB_PROG: arm $label ready: $arm (commit ${commit:0:12}, dirty=$dirty, bench sha256 ${bench_sha:0:12})" >&2
echo "$arm"
