#!/usr/bin/env bash
# Checkpoint speed (issue 21): `cofferdam checkpoint create` of a stage of N changes
# (default 10,000) against `cp -a` of the same staged tree, measured in the same run on the
# same filesystem. A checkpoint walks only the stage (never the workdir), copies or
# reflinks each staged file, copies the fingerprints and digests the result, so it should
# stay within a small factor of `cp -a` and well under a second at 10,000 changes.
#
#   bench/checkpoint.sh                  # 10,000 changes, 10 runs
#   N=100000 RUNS=3 bench/checkpoint.sh
#   BENCH_SIZES="1000 10000" bench/checkpoint.sh
#
# Needs hyperfine and jq (apt-get install hyperfine jq); measures the static release build
# (`cargo build-static`; COFFERDAM_BIN overrides the binary). No sync is timed on either
# side: a checkpoint's stage is not flushed (see `cofferdam_stage::job`, "Durability").
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib/common.bash
bin=$(release_bin)
for tool in hyperfine jq; do
  command -v "$tool" >/dev/null || { echo "bench/checkpoint.sh needs $tool (apt-get install hyperfine jq)"; exit 2; }
done
one_size() {
  local n=$1
  base=$(mktemp -d)
  trap '[ -n "${KEEP:-}" ] || [ ! -d "$base" ] || { chmod -R u+rwX "$base" 2>/dev/null || true; rm -rf "$base"; }' EXIT
  work=$base/work copy=$base/copy store=$base/store
  mkdir -p "$work" "$copy" "$store"
  make_tree "$work" "$n"
  # One run rewrites every file: N staged changes.
  (cd "$work" && COFFERDAM_HOME="$store" "$bin" run -q -- sh -c \
    'for f in d*/f*.txt; do echo new >> "$f"; done')
  job=$(echo "$store"/jobs/run-*)
  changed=$(jq '.changed_files' "$job/job.json")
  [ "$changed" = "$n" ] || { echo "expected $n staged changes, the run staged $changed"; exit 1; }

  cd "$work"
  export COFFERDAM_HOME="$store"
  runs=${RUNS:-10}
  hyperfine -N --warmup 1 --runs "$runs" --export-json "$base/checkpoint.json" \
    --prepare "sh -c 'chmod -R u+rwX $job/checkpoints 2>/dev/null; rm -rf $job/checkpoints'" \
    --prepare "sh -c 'rm -rf $copy && mkdir $copy'" \
    -n "checkpoint create ($n changes)" "$bin checkpoint create last" \
    -n "cp -a ($n changes)" "cp -a $job/upper/. $copy/" >/dev/null

  ck_ms=$(median 0 "$base/checkpoint.json")
  cp_ms=$(median 1 "$base/checkpoint.json")
  ratio=$(echo "$ck_ms / $cp_ms" | bc -l)
  printf '%-36s %10s %10s\n' benchmark "median ms" ratio
  printf '%-36s %10.1f %10s\n' "cp -a, $n staged files" "$cp_ms" "-"
  printf '%-36s %10.1f %9.2fx %s\n' "checkpoint create, $n changes" "$ck_ms" "$ratio" "of cp -a (target: well under 1000 ms)"
  record checkpoint "checkpoint create" "$n" "$ck_ms" "cp -a" "$cp_ms"
  cd - >/dev/null
  [ -n "${KEEP:-}" ] || { chmod -R u+rwX "$base" 2>/dev/null || true; rm -rf "$base"; }
}

for size in ${BENCH_SIZES:-${N:-10000}}; do
  one_size "$size"
done
