#!/usr/bin/env bash
# Memory of idle sealed runs, against bubblewrap holding the same command in the same run:
#   one run: `cofferdam run -- sleep` (sealed, staged, network none, default limits), the
#     PSS of every cofferdam process of it (the supervisor with its threads, the init,
#     pid 1), read from /proc/PID/smaps_rollup once `sleep` runs; baseline: the PSS of
#     bwrap's processes for `bwrap --unshare-all ... sleep` (goal <= 3 MiB);
#   IDLE_MANY (default 100) such runs at once: their total PSS against as many bwraps, and
#     the PSS and private memory (USS: pages no other process maps) of each kind of process
#     (supervisor, init, pid 1), summed over the runs;
#   and, while they idle, the startup of one more `run -- /bin/true` against bwrap's
#     (bench/idle_neighbours.sh measures that against the number of idle runs).
# PSS splits a page shared by N processes in N parts, so the sum over a run's processes is
# what that run costs the machine with the others running; the sleep itself is not counted
# on either side. Needs hyperfine and jq; measures the static release build
# (`cargo build-static`) unless COFFERDAM_BIN names a binary.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib/common.bash
. bench/lib/hold.bash
need bench/idle.sh hyperfine bwrap jq bc
many=${IDLE_MANY:-100}
bin=$(release_bin)
echo "binary: $bin ($(linkage "$bin") build)"
work=$(mktemp -d)
store=$(mktemp -d -p / cofferdam-bench-XXXXXX 2>/dev/null || mktemp -d)
export COFFERDAM_HOME=$store/home
bwrap_sleep=(bwrap --unshare-all --die-with-parent --ro-bind / / --dev /dev --proc /proc sleep)
leaders=()
trap 'stop_all; rm -rf "$work" "$store"' EXIT
cd "$work"

# kib FIELD PID: a smaps_rollup field of PID, in KiB (0 when gone).
kib() { awk -v f="$1:" '$1 == f {print $2}' /proc/"$2"/smaps_rollup 2>/dev/null || echo 0; }
# pss_kib NAME PID...: the summed PSS (KiB) of those of PIDs whose executable is NAME.
pss_kib() {
  local name=$1 total=0 p k
  shift
  for p in "$@"; do
    [ "$(basename "$(readlink /proc/"$p"/exe 2>/dev/null)")" = "$name" ] || continue
    k=$(kib Pss "$p")
    total=$((total + ${k:-0}))
  done
  echo "$total"
}
# hold COUNT NAME CMD...: start COUNT copies of CMD in the background, wait until each
# sleeps, set `held` to the summed PSS (KiB) of their NAME processes, leave them running.
# Not called in a command substitution: its subshell would keep `leaders` to itself (so
# `stop_all` would stop nothing) and its exit would end the bwraps (--die-with-parent).
hold() {
  local count=$1 name=$2 all=() p
  shift 2
  start_held "$count" "$@"
  # The supervisor's last allocations (the relay's, the status reader's) are made by now.
  sleep 0.5
  for p in "${leaders[@]}"; do all+=($(descendants "$p")); done
  held=$(pss_kib "$name" "${all[@]}")
}
# kinds: for the held cofferdam runs, "kind pss_kib uss_kib" per process kind (summed): the
# supervisor (the held pid), its child the init, the init's child pid 1.
kinds() {
  local p init pid1 kind q
  declare -A pss=() uss=()
  for p in "${leaders[@]}"; do
    init=$(cat /proc/"$p"/task/*/children 2>/dev/null | awk '{print $1}')
    pid1=$(cat /proc/"$init"/task/*/children 2>/dev/null | awk '{print $1}')
    for kind in supervisor:$p init:$init pid1:$pid1; do
      q=${kind#*:}
      kind=${kind%%:*}
      [ -n "$q" ] || continue
      pss[$kind]=$((${pss[$kind]:-0} + $(kib Pss "$q")))
      uss[$kind]=$((${uss[$kind]:-0} + $(kib Private_Clean "$q") + $(kib Private_Dirty "$q")))
    done
  done
  for kind in supervisor init pid1; do echo "$kind ${pss[$kind]:-0} ${uss[$kind]:-0}"; done
}

name=$(basename "$bin")
hold 1 "$name" "$bin" run -q -- sleep 600
one_cd=$held
stop_all
hold 1 bwrap "${bwrap_sleep[@]}" 600
one_bw=$held
stop_all

hold "$many" bwrap "${bwrap_sleep[@]}" 600
many_bw=$held
hyperfine -N --warmup 3 --runs 20 --export-json "$store/bwrap-last.json" \
  -n bwrap 'bwrap --unshare-all --ro-bind / / --dev /dev --proc /proc /bin/true' >/dev/null
stop_all
hold "$many" "$name" "$bin" run -q -- sleep 600
many_cd=$held
by_kind=$(kinds)
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
while read -r kind pss uss; do
  printf '%-44s %10.2f %10s %s\n' "  of which $kind PSS ($many)" "$(mib "$pss")" "-" \
    "USS $(mib "$uss") MiB"
done <<<"$by_kind"
printf '%-44s %10.2f %10s\n' "bwrap /bin/true beside $many idle" "$last_bw" "-"
printf '%-44s %10.2f %9.2fx %s\n' "cofferdam run beside $many idle" "$last_cd" \
  "$(echo "$last_cd / $last_bw" | bc -l)" "of bwrap beside as many"
# The table's unit is ms; memory rows carry MiB in that column and say so in their name.
record memory "PSS of one idle sealed run (MiB)" 0 "$(mib "$one_cd")" "bwrap's PSS, same sleep (MiB)" "$(mib "$one_bw")"
record memory "PSS of $many idle sealed runs (MiB)" 0 "$(mib "$many_cd")" "$many bwraps (MiB)" "$(mib "$many_bw")"
while read -r kind pss uss; do
  record memory "PSS of $many idle runs' ${kind}s (MiB)" 0 "$(mib "$pss")" - -
done <<<"$by_kind"
record startup "cofferdam run -- /bin/true beside $many idle runs" 0 "$last_cd" "bwrap beside $many idle bwraps" "$last_bw"
