#!/usr/bin/env bash
# Apply speed, against `cp -a` of the same files followed by `sync`, measured in the same run
# on the same filesystem (DESIGN.md §5, issue 4).
#
# A repository of N files (default 10,000) is staged whole by one sealed run that rewrites
# every file; `cofferdam apply` (conflict check, ledger, temp files, one syncfs, renames,
# one syncfs) is timed against `cp -a` of the same staged files over a copy of the
# repository followed by `sync`. Each timing run starts from a fresh copy of the repository
# and a fresh job (hyperfine --prepare). Also `status --review` and `diff --stat` on the N
# changes. Prints medians and the ratio (target: apply <= 2.0x cp -a + sync).
#
#   bench/apply.sh                 # 10,000 files, 5 runs
#   N=100000 RUNS=3 bench/apply.sh
#   BENCH_SIZES="1000 10000 100000" bench/apply.sh   # each size in turn (bench/run-all.sh)
#
# Needs hyperfine and jq (apt-get install hyperfine jq); measures the static release build
# (`cargo build-static`; COFFERDAM_BIN overrides the binary). Runs as root or as a user with user
# namespaces.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib/common.bash
bin=$(release_bin)
for tool in hyperfine jq; do
  command -v "$tool" >/dev/null || { echo "bench/apply.sh needs $tool (apt-get install hyperfine jq)"; exit 2; }
done
# One size: the benchmark of the header, for n files.
one_size() {
  local n=$1
  base=$(mktemp -d)
  trap '[ -n "${KEEP:-}" ] || [ ! -d "$base" ] || { chmod -R u+rwX "$base" 2>/dev/null || true; rm -rf "$base"; }' EXIT
  pristine=$base/pristine work=$base/work copy=$base/copy store=$base/store src=$base/srcstore
  mkdir -p "$pristine" "$work" "$copy" "$store" "$src"

  # A repository: N files of 200-1200 bytes in directories of 100.
  make_tree "$pristine" "$n"
  # The agent, kept in the repository (it reads it, never changes it): rewrite every file.
  cat >"$pristine/.agent.py" <<'AGENT'
import os
for top, _, names in os.walk("."):
    for name in names:
        if name.endswith(".txt"):
            path = os.path.join(top, name)
            with open(path) as f:
                text = f.read()
            with open(path, "w") as f:
                f.write("new " + text.replace("o", "n"))
AGENT

  # A job whose stage is the source of the cp -a baseline (never applied).
  cp -a "$pristine/." "$work/"
  (cd "$work" && COFFERDAM_HOME="$src" "$bin" run -q -- python3 .agent.py)
  upper=$(echo "$src"/jobs/run-*/upper)
  changed=$(jq '.changed_files' "$src"/jobs/run-*/job.json)
  [ "$changed" = "$n" ] || { echo "expected $n staged changes, the run staged $changed"; exit 1; }

  # Before each apply: the pristine repository and a fresh job that rewrote every file.
  cat >"$base/prep-apply.sh" <<EOF
set -e
chmod -R u+rwX "$store" 2>/dev/null || true
rm -rf "$store"/jobs
find "$work" -mindepth 1 -delete
cp -a "$pristine/." "$work/"
sync
sleep 0.05
cd "$work" && COFFERDAM_HOME="$store" "$bin" run -q -- python3 .agent.py
sync
EOF
  # Before each cp: the pristine repository.
  cat >"$base/prep-cp.sh" <<EOF
set -e
find "$copy" -mindepth 1 -delete
cp -a "$pristine/." "$copy/"
sync
EOF

  cd "$work"
  export COFFERDAM_HOME="$store"
  # Fewer repetitions for the largest trees: each one re-creates and re-stages the tree.
  runs=${RUNS:-$((n >= 100000 ? 3 : 5))}
  hyperfine -N --runs "$runs" --export-json "$base/apply.json" \
    --prepare "bash $base/prep-apply.sh" \
    --prepare "bash $base/prep-cp.sh" \
    -n "cofferdam apply ($n files)" "$bin apply last --color never" \
    -n "cp -a + sync ($n files)" "sh -c 'cp -a $upper/. $copy/ && sync'" >/dev/null

  # Review of the same N changes (the job is staged again).
  bash "$base/prep-apply.sh"
  hyperfine -N --warmup 1 --runs "$((runs * 2))" --export-json "$base/review.json" \
    -n "status --review ($n changes)" "$bin status --review last --color never" \
    -n "diff --stat ($n changes)" "$bin diff last --stat --color never" >/dev/null

  apply_ms=$(median 0 "$base/apply.json")
  cp_ms=$(median 1 "$base/apply.json")
  review_ms=$(median 0 "$base/review.json")
  stat_ms=$(median 1 "$base/review.json")
  ratio=$(echo "$apply_ms / $cp_ms" | bc -l)

  printf '%-36s %10s %10s\n' benchmark "median ms" ratio
  printf '%-36s %10.1f %10s\n' "cp -a + sync, $n files" "$cp_ms" "-"
  printf '%-36s %10.1f %9.2fx %s\n' "cofferdam apply, $n files" "$apply_ms" "$ratio" "of cp -a + sync (target <= 2.0)"
  printf '%-36s %10.1f %10s %s\n' "status --review, $n changes" "$review_ms" "-" "(target <= 200)"
  printf '%-36s %10.1f %10s\n' "diff --stat, $n changes" "$stat_ms" "-"
  record apply "cofferdam apply" "$n" "$apply_ms" "cp -a + sync" "$cp_ms"
  record review "status --review" "$n" "$review_ms" - -
  record review "diff --stat" "$n" "$stat_ms" - -
  cd - >/dev/null
  [ -n "${KEEP:-}" ] || { chmod -R u+rwX "$base" 2>/dev/null || true; rm -rf "$base"; }
}

for size in ${BENCH_SIZES:-${N:-10000}}; do
  one_size "$size"
done
