#!/usr/bin/env bash
# Rewrites crates/cofferdam/symbol-order.txt: the functions of the static release build that
# a sealed `run -q -- /bin/true` executes (the supervisor, the init and pid 1), hottest
# first, from `perf record` samples of RUNS runs. The release build links them first (see
# crates/cofferdam/build.rs). Rerun after large changes to the run path; a stale list only
# costs layout. Needs perf (apt-get install linux-perf) and user namespaces; run it as the
# user the startup is measured as. Prints how many names it found and how many of the old
# list the binary still has.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib/common.bash
command -v perf >/dev/null || { echo "bench/symbol-order.sh needs perf (apt-get install linux-perf)"; exit 2; }
runs=${RUNS:-300}
out=crates/cofferdam/symbol-order.txt
bin=$(release_bin)
work=$(mktemp -d)
trap 'chmod -R u+rwX "$work" 2>/dev/null; rm -rf "$work"' EXIT
mkdir "$work/tree" "$work/home"
export COFFERDAM_HOME="$work/home"
have=$(nm --defined-only "$bin" | awk '{print $3}' | sort -u)
if [ -s "$out" ]; then
  kept=$(sort -u "$out" | comm -12 - <(echo "$have") | wc -l)
  echo "old list: $kept of $(wc -l <"$out") names still in $bin"
fi
cd "$work/tree"
for _ in 1 2 3; do "$bin" run -q -- /bin/true; done
perf record -q -F 40000 -o "$work/perf.data" -- \
  sh -c "for i in \$(seq $runs); do '$bin' run -q -- /bin/true; done" >/dev/null 2>&1
cd - >/dev/null
perf script -f -i "$work/perf.data" -F ip,sym,dso --no-demangle 2>/dev/null \
  | awk -v dso="($bin)" '$NF == dso && $2 != "[unknown]" {print $2}' \
  | sort | uniq -c | sort -k1,1nr -k2 | awk '{print $2}' >"$work/order.txt"
[ -s "$work/order.txt" ] || { echo "no samples in $bin: is perf allowed here (perf_event_paranoid)?"; exit 1; }
mv "$work/order.txt" "$out"
echo "wrote $out: $(wc -l <"$out") functions, sampled over $runs runs"
