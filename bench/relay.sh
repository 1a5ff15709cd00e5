#!/usr/bin/env bash
# Throughput of the supervisor's relay of the command's standard streams (the command gets
# pipes, never the caller's descriptors): a 1 GiB `cat` through `cofferdam run` against the
# same `cat` run bare, measured in the same run, for
#   stdout to /dev/null      cat F > /dev/null        (splice from the sandbox's pipe)
#   stdout to a pipe         cat F | cat > /dev/null  (splice, pipe to pipe)
#   stdin from the file      cat < F > /dev/null      (splice into the command's stdin too)
# Each cofferdam figure includes its startup (bench/startup.sh: a few ms); the target is a
# ratio within 1.10. The relay's splice copies nothing, but the command's write into the
# sandbox's pipe is a copy that `cat > /dev/null` bare does not make (a pipe sink takes that
# copy either way): the pipe figure is the relay's own cost, the other two also show that
# copy. F is a sparse file in the workdir (page cache, no disk I/O). Needs
# hyperfine and jq (apt-get install hyperfine jq); measures the static release build
# (`cargo build-static`) unless COFFERDAM_BIN names a binary.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib/common.bash
for tool in hyperfine jq bc; do
  command -v "$tool" >/dev/null || { echo "bench/relay.sh needs $tool (apt-get install hyperfine jq bc)"; exit 2; }
done
runs=${RUNS:-10}
size=${RELAY_BYTES:-1073741824}
work=$(mktemp -d)
store=$(mktemp -d)
trap 'rm -rf "$work" "$store"' EXIT
bin=$(release_bin)
echo "binary: $bin ($(linkage "$bin") build)"
export COFFERDAM_HOME=$store
cd "$work"
truncate -s "$size" big
# Every run leaves a job; --stage in a fresh directory each time would time mkdir too, so
# the store simply grows (a few small files a run).
hyperfine --warmup 2 --runs "$runs" --export-json "$store/relay.json" \
  -n bare-null 'cat big > /dev/null' \
  -n cofferdam-null "$bin run -q -- cat big > /dev/null" \
  -n bare-pipe 'cat big | cat > /dev/null' \
  -n cofferdam-pipe "$bin run -q -- cat big | cat > /dev/null" \
  -n bare-stdin 'cat < big > /dev/null' \
  -n cofferdam-stdin "$bin run -q -- cat < big > /dev/null" >/dev/null

# Wall-clock medians, and the mean CPU time (user + system of every process of the
# command line, the sandbox's included): on a busy machine the second is the steadier.
cpu() { jq -r ".results[$1] | (.user + .system) * 1000" "$2"; }
printf '%-40s %10s %10s %10s %10s\n' benchmark "median ms" ratio "cpu ms" ratio
mib=$((size / 1048576))
for i in 0 1 2; do
  name=$(jq -r ".results[$((2 * i))].command" "$store/relay.json")
  b=$(median $((2 * i)) "$store/relay.json")
  c=$(median $((2 * i + 1)) "$store/relay.json")
  bc_=$(cpu $((2 * i)) "$store/relay.json")
  cc=$(cpu $((2 * i + 1)) "$store/relay.json")
  label=${name#bare-}
  printf '%-40s %10.1f %10s %10.1f %10s\n' "bare, $mib MiB, $label" "$b" "-" "$bc_" "-"
  printf '%-40s %10.1f %9.3fx %10.1f %9.3fx %s\n' "cofferdam run, $mib MiB, $label" "$c" \
    "$(echo "$c / $b" | bc -l)" "$cc" "$(echo "$cc / $bc_" | bc -l)" "of bare (target <= 1.10)"
  record relay "cat $mib MiB through the relay ($label)" 0 "$c" "the same cat bare" "$b"
done
