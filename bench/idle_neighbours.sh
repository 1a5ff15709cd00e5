#!/usr/bin/env bash
# Startup beside idle runs: `cofferdam run -q -- /bin/true` and `bwrap --unshare-all
# /bin/true`, alternated in one hyperfine run, while NEIGHBOURS (default "0 5 100") idle
# sealed runs (`cofferdam run -- sleep`) and as many idle bwraps (`bwrap ... sleep`) are
# held, so both are measured against the same background. Prints, per count, the medians,
# cofferdam's ratio to bwrap and to its own start beside none, the mean CPU time of each
# start (user + system over all its processes: wall time that grows while this stays is
# waiting, not work), and, for one start traced
# with `strace -f -c`, its system calls and the files it opened: a start that reads
# anything per live run shows them grow with the count.
# A second pass (STORE_ON_TMPFS=0 skips it) keeps the job store on tmpfs (/dev/shm): on
# ext4 without a journal (these test machines) a store that has had many files created
# and removed makes every later create slow (bench/startup.sh, fresh_store).
# Needs hyperfine, bwrap, jq, bc and strace; measures the static release build
# (`cargo build-static`) unless COFFERDAM_BIN names a binary.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib/common.bash
. bench/lib/hold.bash
need bench/idle_neighbours.sh hyperfine bwrap jq bc strace
counts=${NEIGHBOURS:-0 5 100}
runs=${RUNS:-30}
bin=$(release_bin)
echo "binary: $bin ($(linkage "$bin") build)"
work=$(mktemp -d)
stores=()
leaders=()
trap 'stop_all; rm -rf "$work" "${stores[@]}"' EXIT
cd "$work"
bwrap_true='bwrap --unshare-all --ro-bind / / --dev /dev --proc /proc /bin/true'
bwrap_sleep=(bwrap --unshare-all --die-with-parent --ro-bind / / --dev /dev --proc /proc sleep 600)

# cpu INDEX FILE: the mean CPU time (user + system, every process of the command) of
# hyperfine result INDEX, in ms: wall time that grows while this does not is waiting.
cpu() { jq -r ".results[$1] | (.user + .system) * 1000" "$2"; }

# wakeups SUPERVISOR FILE: trace an idle run's supervisor, init and pid 1 for 5 s and say
# how many system calls they made (the call each is blocked in when the trace starts is
# not counted): an idle run should make none.
wakeups() {
  local sup=$1 init pid1 calls
  init=$(cat /proc/"$sup"/task/*/children | awk '{print $1}')
  pid1=$(cat /proc/"$init"/task/*/children | awk '{print $1}')
  timeout 5 strace -f -p "$sup" -p "$init" -p "$pid1" -o "$2" 2>/dev/null || true
  calls=$(grep -vc -e 'resumed>' -e '<unfinished \.\.\.>' -e '<detached' -e 'restart_syscall' "$2" || true)
  echo "  an idle run's supervisor, init and pid 1 made $calls system calls in 5 s"
}

# pass LABEL STORE_PARENT: every count in a fresh store under STORE_PARENT.
pass() {
  local label=$1 parent=$2 n base=""
  local store
  printf '\n%s\n' "job store: $label"
  printf '%-10s %10s %10s %9s %11s %8s %8s %9s %7s\n' neighbours "cofferdam" bwrap "of bwrap" \
    "of alone" "cpu cd" "cpu bw" syscalls opened
  for n in $counts; do
    store=$(mktemp -d -p "$parent" cofferdam-bench-XXXXXX 2>/dev/null || mktemp -d)
    stores+=("$store")
    export COFFERDAM_HOME=$store/home
    # The host facts cache is written by the first run; not timed.
    "$bin" run -q -- /bin/true
    start_held "$n" "$bin" run -q -- sleep 600
    start_held "$n" "${bwrap_sleep[@]}"
    sleep 0.5
    hyperfine -N --warmup 5 --runs "$runs" --export-json "$store/t.json" \
      -n cofferdam "$bin run -q -- /bin/true" -n bwrap "$bwrap_true" >/dev/null
    strace -f -c -o "$store/strace.txt" "$bin" run -q -- /bin/true
    strace -f -e trace=open,openat,openat2 -o "$store/opens.txt" "$bin" run -q -- /bin/true
    [ "$n" -eq 0 ] || wakeups "${leaders[0]}" "$store/idle.strace"
    stop_all
    local cd_ms bw_ms calls opened cd_cpu bw_cpu
    cd_ms=$(median 0 "$store/t.json")
    bw_ms=$(median 1 "$store/t.json")
    cd_cpu=$(cpu 0 "$store/t.json")
    bw_cpu=$(cpu 1 "$store/t.json")
    [ -n "$base" ] || base=$cd_ms
    calls=$(awk '$NF == "total" {print $(NF-2)}' "$store/strace.txt")
    opened=$(grep -c 'open' "$store/opens.txt" || true)
    printf '%-10s %10.2f %10.2f %8.2fx %10.2fx %8.2f %8.2f %9s %7s\n' "$n" "$cd_ms" "$bw_ms" \
      "$(echo "$cd_ms / $bw_ms" | bc -l)" "$(echo "$cd_ms / $base" | bc -l)" "$cd_cpu" "$bw_cpu" \
      "$calls" "$opened"
    record startup "cofferdam run -- /bin/true beside $n idle runs ($label store)" 0 "$cd_ms" \
      "bwrap beside $n idle bwraps and runs" "$bw_ms"
    rm -rf "$store"
  done
}

pass "ext4 (a new top-level directory)" /
if [ "${STORE_ON_TMPFS:-1}" != 0 ] && [ -d /dev/shm ]; then
  pass tmpfs /dev/shm
fi
