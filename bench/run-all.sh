#!/usr/bin/env bash
# Runs every benchmark script in bench/ once and writes, in bench/results/:
#   latest.md    one table (each figure, its baseline measured in the same run, the ratio),
#                with the date and a summary of the machine; also copied to <date>.md
#   latest.png   startup and apply against the workdir's size (BENCH_SIZES, default
#                1k, 10k and 100k files), each with its baselines (bare, bwrap, cp -a)
#   latest.log   the scripts' own output
# Needs hyperfine, bubblewrap, jq, bc and gnuplot (README, "Benchmarks"). Takes about
# 15 minutes on 2 cores; it loads every CPU, so run it on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in hyperfine bwrap jq bc gnuplot python3; do
  command -v "$tool" >/dev/null || {
    echo "bench/run-all.sh needs $tool: apt-get install hyperfine bubblewrap jq bc gnuplot-nox python3"
    exit 2
  }
done
. bench/lib/common.bash
COFFERDAM_BIN=$(release_bin)
export COFFERDAM_BIN
export BENCH_SIZES=${BENCH_SIZES:-1000 10000 100000}
out=bench/results
mkdir -p "$out"
rows=$(mktemp)
trap 'rm -f "$rows" "$rows".*' EXIT
export BENCH_RESULTS=$rows

started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
: >"$out/latest.log"
# startup.sh first: the others create and delete trees of up to 100k files, and on ext4
# without a journal (these test machines) every create near freshly freed inodes scans
# past them for minutes, which a run's few job files would then measure.
for script in bench/startup.sh $(ls bench/*.sh | grep -v -e '^bench/run-all.sh$' -e '^bench/startup.sh$'); do
  echo "== $script" | tee -a "$out/latest.log"
  bash "$script" 2>&1 | tee -a "$out/latest.log"
done

# The table.
{
  echo "# Benchmarks, $started"
  echo
  echo "Machine: $(uname -srm); $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1));"
  echo "$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo) memory;" \
    "temp dirs on $(df -T "${TMPDIR:-/tmp}" | awk 'NR == 2 {print $2}');" \
    "load average at the start $load_start, at the end $(cut -d' ' -f1-3 /proc/loadavg)."
  echo "cofferdam $(git describe --always --dirty 2>/dev/null || echo unknown)" \
    "($(linkage "$COFFERDAM_BIN") build: $COFFERDAM_BIN)," \
    "$(hyperfine --version), $(bwrap --version)."
  echo
  echo "Medians of hyperfine runs; each baseline is measured in the same run as its figure."
  echo "Files: the workdir's size (0: an empty workdir)."
  echo
  echo "| figure | files | ms | baseline | baseline ms | ratio |"
  echo "|---|---:|---:|---|---:|---:|"
  awk -F'\t' '{
    ratio = ($6 == "-" || $6 == 0) ? "-" : sprintf("%.2fx", $4 / $6)
    base = ($6 == "-") ? "-" : sprintf("%.1f", $6)
    printf "| %s | %s | %.1f | %s | %s | %s |\n", $2, $3, $4, $5, base, ratio
  }' "$rows"
  echo
  echo "![startup and apply against the workdir size](latest.png)"
} >"$out/latest.md"
cp "$out/latest.md" "$out/${started%%T*}.md"

# The plot: one panel for startup, one for apply, log-log against the workdir's size.
awk -F'\t' '$1 == "startup" && $3 > 0 && $5 ~ /^bwrap/ {print $3, $4, $6}' "$rows" >"$rows.bwrap"
awk -F'\t' '$1 == "startup" && $3 > 0 && $5 ~ /^bare/ {print $3, $6}' "$rows" >"$rows.bare"
awk -F'\t' '$1 == "apply" {print $3, $4, $6}' "$rows" >"$rows.apply"
gnuplot <<GP
set terminal pngcairo size 1100,450 font ",10"
set output "$out/latest.png"
set multiplot layout 1,2 title "cofferdam, $started"
set logscale xy
set grid
set key outside bottom center horizontal
set xlabel "files in the workdir"
set ylabel "median ms"
set title "startup: run -- /bin/true"
plot "$rows.bwrap" using 1:2 with linespoints lw 2 title "cofferdam run", \
     "$rows.bwrap" using 1:3 with linespoints title "bwrap --unshare-all", \
     "$rows.bare" using 1:2 with linespoints title "bare /bin/true"
set title "apply: every file rewritten"
plot "$rows.apply" using 1:2 with linespoints lw 2 title "cofferdam apply", \
     "$rows.apply" using 1:3 with linespoints title "cp -a + sync"
unset multiplot
GP
echo "wrote $out/latest.md, $out/${started%%T*}.md and $out/latest.png"
