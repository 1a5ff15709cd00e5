#!/usr/bin/env bash
# Memory of idle sealed runs, against bubblewrap holding the same command in the same run:
#   one run: `cofferdam run -- sleep` (sealed, staged, network none, default limits), the
#     PSS of every cofferdam process of it (the supervisor with its threads, the init,
#     pid 1), read from /proc/PID/smaps_rollup once `sleep` runs; baseline: the PSS of
#     bwrap's processes for `bwrap --unshare-all ... sleep` (goal <= 3 MiB);
#   IDLE_MANY (default 100) such runs at once: their total PSS against as many bwraps,
#     and, while they idle, the startup of one more `run -- /bin/true` against bwrap's.
# PSS splits a page shared by N processes in N parts, so the sum over a run's processes is
# what that run costs the machine with the others running; the sleep itself is not counted
# on either side. Needs hyperfine and jq; measures the static release build
# (`cargo build-static`) unless COFFERDAM_BIN names a binary.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib/common.bash
need bench/idle.sh hyperfine bwrap jq bc
many=${IDLE_MANY:-100}
bin=$(release_bin)
echo "binary: $bin ($(linkage "$bin") build)"
work=$(mktemp -d)
store=$(mktemp -d -p / cofferdam-bench-XXXXXX 2>/dev/null || mktemp -d)
export COFFERDAM_HOME=$store/home
bwrap_sleep=(bwrap --unshare-all --die-with-parent --ro-bind / / --dev /dev --proc /proc sleep)
leaders=()
stop_all() {
  for p in "${leaders[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${leaders[@]}"; do wait "$p" 2>/dev/null || true; done
  leaders=()
}
trap 'stop_all; rm -rf "$work" "$store"' EXIT
cd "$work"

# descendants PID: PID and every process below it.
descendants() {
  local p=$1 c
  echo "$p"
  for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do descendants "$c"; done
}
# pss_kib NAME PID...: the summed PSS (KiB) of those of PIDs whose executable is NAME.
pss_kib() {
  local name=$1 total=0 p kib
  shift
  for p in "$@"; do
    [ "$(basename "$(readlink /proc/"$p"/exe 2>/dev/null)")" = "$name" ] || continue
    kib=$(awk '/^Pss:/ {print $2}' /proc/"$p"/smaps_rollup 2>/dev/null || echo 0)
    total=$((total + ${kib:-0}))
  done
  echo "$total"
}
# wait_sleeping N PID...: until N `sleep` processes run below PIDs (at most 60 s).
wait_sleeping() {
  local want=$1 i n
  shift
  for i in $(seq 600); do
    n=0
    for p in "$@"; do
      for d in $(descendants "$p"); do
        [ "$(cat /proc/"$d"/comm 2>/dev/null)" = sleep ] && n=$((n + 1))
      done
    done
    [ "$n" -ge "$want" ] && return 0
    sleep 0.1
  done
  echo "bench/idle.sh: only $n of $want sleeps started in 60 s" >&2
  return 1
}
# hold COUNT NAME CMD...: start COUNT copies of CMD in the background, wait until each
# sleeps, print the summed PSS (KiB) of their NAME processes, leave them running.
hold() {
  local count=$1 name=$2 i all=()
  shift 2
  for i in $(seq "$count"); do
    "$@" </dev/null >/dev/null 2>&1 &
    leaders+=($!)
  done
  wait_sleeping "$count" "${leaders[@]}"
  # The supervisor's last allocations (the relay's, the status reader's) are made by now.
  sleep 0.5
  for p in "${leaders[@]}"; do all+=($(descendants "$p")); done
  pss_kib "$name" "${all[@]}"
}

name=$(basename "$bin")
one_cd=$(hold 1 "$name" "$bin" run -q -- sleep 600)
stop_all
one_bw=$(hold 1 bwrap "${bwrap_sleep[@]}" 600)
stop_all

many_bw=$(hold "$many" bwrap "${bwrap_sleep[@]}" 600)
hyperfine -N --warmup 3 --runs 20 --export-json "$store/bwrap-last.json" \
  -n bwrap 'bwrap --unshare-all --ro-bind / / --dev /dev --proc /proc /bin/true' >/dev/null
stop_all
many_cd=$(hold "$many" "$name" "$bin" run -q -- sleep 600)
hyperfine -N --warmup 3 --runs 20 --export-json "$store/cd-last.json" \
  -n cofferdam "$bin run -q -- /bin/true" >/dev/null
stop_all
last_bw=$(median 0 "$store/bwrap-last.json")
last_cd=$(median 0 "$store/cd-last.json")

mib() { echo "scale=2; $1 / 1024" | bc -l; }
printf '%-44s %10s %10s\n' benchmark "MiB / ms" ratio
printf '%-44s %10.2f %10s\n' "bwrap, one idle sleep, PSS" "$(mib "$one_bw")" "-"
printf '%-44s %10.2f %9.2fx %s\n' "cofferdam run, one idle sleep, PSS" "$(mib "$one_cd")" \
  "$(echo "$one_cd / $one_bw" | bc -l)" "of bwrap (goal <= 3 MiB)"
printf '%-44s %10.2f %10s\n' "bwrap, $many idle sleeps, PSS" "$(mib "$many_bw")" "-"
printf '%-44s %10.2f %9.2fx %s\n' "cofferdam run, $many idle sleeps, PSS" "$(mib "$many_cd")" \
  "$(echo "$many_cd / $many_bw" | bc -l)" "of bwrap"
printf '%-44s %10.2f %10s\n' "bwrap /bin/true beside $many idle" "$last_bw" "-"
printf '%-44s %10.2f %9.2fx %s\n' "cofferdam run beside $many idle" "$last_cd" \
  "$(echo "$last_cd / $last_bw" | bc -l)" "of bwrap beside as many"
# The table's unit is ms; memory rows carry MiB in that column and say so in their name.
record memory "PSS of one idle sealed run (MiB)" 0 "$(mib "$one_cd")" "bwrap's PSS, same sleep (MiB)" "$(mib "$one_bw")"
record memory "PSS of $many idle sealed runs (MiB)" 0 "$(mib "$many_cd")" "$many bwraps (MiB)" "$(mib "$many_bw")"
record startup "cofferdam run -- /bin/true beside $many idle runs" 0 "$last_cd" "bwrap beside $many idle bwraps" "$last_bw"
