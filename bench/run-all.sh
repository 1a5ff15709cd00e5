#!/usr/bin/env bash
# Runs every benchmark script in bench/ and collects their output in bench/results.txt.
set -euo pipefail
cd "$(dirname "$0")"
out=results.txt
: >"$out"
for script in ./*.sh; do
  [ "$script" = ./run-all.sh ] && continue
  echo "== $script" | tee -a "$out"
  bash "$script" 2>&1 | tee -a "$out"
done
