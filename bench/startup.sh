#!/usr/bin/env bash
# Startup cost of a sealed run, against baselines measured in the same run:
#   bare /bin/true, and Debian's bubblewrap with every namespace unshared.
# Also a 200-file write loop inside the stage against the same loop run bare on the same
# filesystem, and, for each size in BENCH_SIZES (e.g. "1000 10000 100000"; bench/run-all.sh
# sets it), the three startups again in a workdir of that many files: the overlay makes a
# sealed run's startup independent of the workdir's size. Prints medians and ratios. Needs
# hyperfine, bwrap and jq (apt-get install hyperfine bubblewrap jq); measures the static
# release build (`cargo build-static`) unless COFFERDAM_BIN names a binary.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib/common.bash
repo=$(pwd)
for tool in hyperfine bwrap jq; do
  command -v "$tool" >/dev/null || { echo "bench/startup.sh needs $tool (apt-get install hyperfine bubblewrap jq)"; exit 2; }
done
runs=${RUNS:-50}
work=$(mktemp -d)
# The job stores go in a new top-level directory where that is allowed (ext4 places those
# in little-used block groups), else in $TMPDIR: see fresh_store.
store=$(mktemp -d -p / cofferdam-bench-XXXXXX 2>/dev/null || mktemp -d)
trap 'rm -rf "$work" "$store"' EXIT
bin=$(release_bin)
echo "binary: $bin ($(linkage "$bin") build)"
# How much of the hot-code layout list (crates/cofferdam/build.rs) this binary still has:
# a low share means bench/symbol-order.sh is due.
order=crates/cofferdam/symbol-order.txt
listed=$(nm --defined-only "$bin" 2>/dev/null | awk '{print $3}' | sort -u | comm -12 - <(sort -u "$order") | wc -l)
echo "hot-code layout: $listed of $(wc -l <"$order") listed functions in the binary"
# Each group of runs gets a job store of its own: on ext4 without a journal (these test
# machines) every run leaves a few freed inodes that stay "recently deleted" for minutes,
# and every later file created near them scans past them, so a store that already holds
# hundreds of runs measures the allocator, not the run (17-32 ms against 6 ms here).
fresh_store() {
  COFFERDAM_HOME=$(mktemp -d -p "$store" home-XXXXXX)
  export COFFERDAM_HOME
}
fresh_store
cd "$work"

hyperfine -N --warmup 5 --runs "$runs" --export-json "$store/startup.json" \
  -n bare '/bin/true' \
  -n bwrap 'bwrap --unshare-all --ro-bind / / --dev /dev --proc /proc /bin/true' \
  -n cofferdam "$bin run -q -- /bin/true" >/dev/null
bare=$(median 0 "$store/startup.json"); bw=$(median 1 "$store/startup.json"); cd_=$(median 2 "$store/startup.json")

# The same three, a run every 0.3 s (hyperfine's untimed --prepare sleeps in between), as a
# person or an agent harness starts them: back to back, as above, hides the cost of a
# cgroup v1 move (the default pids limit when cofferdam runs as root on such a host),
# which waits for a whole RCU grace period unless another move happened a moment before.
# `--pids none` shows the same run without that move.
fresh_store
spaced_runs=$((runs / 5 > 5 ? runs / 5 : 5))
hyperfine -N --warmup 2 --runs "$spaced_runs" --prepare 'sleep 0.3' --export-json "$store/spaced.json" \
  -n bwrap 'bwrap --unshare-all --ro-bind / / --dev /dev --proc /proc /bin/true' \
  -n cofferdam "$bin run -q -- /bin/true" \
  -n cofferdam-nopids "$bin run -q --pids none -- /bin/true" >/dev/null
sbw=$(median 0 "$store/spaced.json"); scd=$(median 1 "$store/spaced.json"); snp=$(median 2 "$store/spaced.json")

# The write loop, timed by itself (date +%s%N around it): bare, inside the stage, and in a
# plain overlay mounted by hand (unshare -Urm, no cofferdam: what overlayfs itself costs).
# Each round writes into directories nothing was ever deleted from, next to where the stage
# lives (in the job store): on ext4 without a journal (these test machines) creating a file
# skips every inode of its block group freed in the last 60-360 s, so a directory just
# emptied by `rm`, or one in a churned part of the disk, measures the allocator instead.
# The rounds alternate; the loop is also timed whole, with the run's start and end.
loop='s=$(date +%s%N); i=0; while [ $i -lt 200 ]; do echo $i > f$i; i=$((i+1)); done; e=$(date +%s%N); echo $(((e - s) / 1000))'
rounds=${LOOP_ROUNDS:-$((runs / 2))}
fresh_store
mkdir -p "$COFFERDAM_HOME/jobs" "$COFFERDAM_HOME/plain"
inner_bare=()
inner_staged=()
inner_overlay=()
for r in $(seq "$rounds"); do
  fresh=$(mktemp -d -p "$COFFERDAM_HOME/jobs" .bench-XXXXXX)
  inner_bare+=("$(cd "$fresh" && sh -c "$loop")")
  round=$(mktemp -d -p "$work")
  inner_staged+=("$(cd "$round" && "$bin" run -q -- sh -c "$loop")")
  o=$(mktemp -d -p "$COFFERDAM_HOME/plain")
  mkdir "$o/lower" "$o/upper" "$o/work" "$o/merged"
  inner_overlay+=("$(unshare -Urm sh -c "mount -t overlay overlay -o lowerdir=$o/lower,upperdir=$o/upper,workdir=$o/work,userxattr,volatile $o/merged && cd $o/merged && sh -c '$loop'" 2>/dev/null || echo 0)")
done
median_of() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) / 1000}'; }
ibare=$(median_of "${inner_bare[@]}")
istaged=$(median_of "${inner_staged[@]}")
ioverlay=$(median_of "${inner_overlay[@]}")
mkdir "$work/whole"
fresh_store
hyperfine -N --warmup 3 --runs "$((runs / 2))" --export-json "$store/writes.json" \
  -n staged-loop "$bin run -q --workdir $work/whole -- sh -c '$loop'" >/dev/null
wstaged=$(median 0 "$store/writes.json")

printf '%-34s %10s %10s\n' benchmark "median ms" ratio
printf '%-34s %10.2f %10s\n' "bare /bin/true" "$bare" "-"
printf '%-34s %10.2f %10s\n' "bwrap --unshare-all /bin/true" "$bw" "-"
printf '%-34s %10.2f %9.2fx %s\n' "cofferdam run -- /bin/true" "$cd_" "$(echo "$cd_ / $bw" | bc -l)" "of bwrap (target <= 1.0)"
printf '%-34s %10.2f %10s\n' "bwrap, 0.3 s apart" "$sbw" "-"
printf '%-34s %10.2f %9.2fx %s\n' "cofferdam run, 0.3 s apart" "$scd" "$(echo "$scd / $sbw" | bc -l)" "of bwrap 0.3 s apart"
printf '%-34s %10.2f %9.2fx %s\n' "  the same with --pids none" "$snp" "$(echo "$snp / $sbw" | bc -l)" "of bwrap 0.3 s apart"
printf '%-34s %10.2f %10s\n' "200-file loop, bare" "$ibare" "-"
printf '%-34s %10.2f %9.2fx %s\n' "200-file loop, in the stage" "$istaged" "$(echo "$istaged / $ibare" | bc -l)" "of bare (target <= 1.2)"
if [ "$ioverlay" != 0 ]; then
  printf '%-34s %10.2f %9.2fx %s\n' "200-file loop, plain overlay" "$ioverlay" "$(echo "$ioverlay / $ibare" | bc -l)" "of bare (overlayfs alone, no cofferdam)"
fi
printf '%-34s %10.2f %9.2fx %s\n' "200-file loop, whole run" "$wstaged" "$(echo "$wstaged / $ibare" | bc -l)" "of the bare loop"
record startup "cofferdam run -- /bin/true" 0 "$cd_" "bwrap --unshare-all /bin/true" "$bw"
record startup "cofferdam run -- /bin/true" 0 "$cd_" "bare /bin/true" "$bare"
record startup "cofferdam run, 0.3 s apart" 0 "$scd" "bwrap, 0.3 s apart" "$sbw"
record startup "cofferdam run --pids none, 0.3 s apart" 0 "$snp" "bwrap, 0.3 s apart" "$sbw"
record writes "200-file loop, in the stage" 0 "$istaged" "200-file loop, bare" "$ibare"
record writes "200-file loop, whole run" 0 "$wstaged" "200-file loop, bare" "$ibare"
[ "$ioverlay" = 0 ] || record writes "200-file loop, plain overlay (no cofferdam)" 0 "$ioverlay" "200-file loop, bare" "$ibare"

# Startup against the workdir's size.
for n in ${BENCH_SIZES:-}; do
  tree=$(mktemp -d)
  make_tree "$tree" "$n"
  # The tree's own unwritten pages are the set-up's, not the run's: on ext4 without a
  # journal (these machines) dirty inode tables make every new inode's allocation scan
  # longer (recently_deleted), which a run that creates its job files would pay.
  sync
  fresh_store
  (
    cd "$tree"
    hyperfine -N --warmup 3 --runs "$((runs / 2 > 5 ? runs / 2 : 5))" --export-json "$store/startup-$n.json" \
      -n bare '/bin/true' \
      -n bwrap 'bwrap --unshare-all --ro-bind / / --dev /dev --proc /proc /bin/true' \
      -n cofferdam "$bin run -q -- /bin/true" >/dev/null
  )
  rm -rf "$tree"
  b=$(median 0 "$store/startup-$n.json"); w=$(median 1 "$store/startup-$n.json"); c=$(median 2 "$store/startup-$n.json")
  printf '%-34s %10.2f %9.2fx %s\n' "cofferdam run, $n-file workdir" "$c" "$(echo "$c / $w" | bc -l)" "of bwrap ($w ms; bare $b ms)"
  record startup "cofferdam run -- /bin/true" "$n" "$c" "bwrap --unshare-all /bin/true" "$w"
  record startup "cofferdam run -- /bin/true" "$n" "$c" "bare /bin/true" "$b"
done

# The init re-exec experiment: what executing the large static binary a second time costs,
# against small static executables doing the same, each started and reaped by hyperfine:
#   nolibc            exit(2) from _start, no C library: the kernel's exec and exit alone
#   empty-glibc       a static glibc `int main(void) { return 0; }`: plus glibc's start-up
#   nsinit            bench/lib/nsinit.c: the init's early namespace steps (user namespace
#                     and maps, then mnt/pid/net/ipc/uts), static glibc
#   cofferdam-noop    the init entry with an unreadable argument: reports and exits at once
#   cofferdam-ns      the init entry doing the same namespace steps as nsinit, then failing
#                     to read a plan (no descriptor 3): the init's start before the plan
# cofferdam-ns minus nsinit is the large binary's own cost; empty-glibc minus nolibc is
# glibc's start-up (on a VM that traps CPUID, mostly its CPU feature and cache probing).
if command -v cc >/dev/null && cc -static -O2 -o "$work/nsinit" "$repo/bench/lib/nsinit.c" 2>/dev/null; then
  printf 'int main(void) { return 0; }\n' >"$work/empty.c"
  printf 'void _start(void) { __asm__ volatile("mov $60, %%eax; xor %%edi, %%edi; syscall"); }\n' >"$work/nolibc.c"
  cc -static -O2 -o "$work/empty" "$work/empty.c"
  cc -static -nostdlib -O2 -o "$work/nolibc" "$work/nolibc.c"
  ids="$(id -u):$(id -g)"
  hyperfine -N -i --warmup 20 --runs "$((runs * 4))" --export-json "$store/reexec.json" \
    -n nolibc "$work/nolibc" -n empty-glibc "$work/empty" -n nsinit "$work/nsinit" \
    -n cofferdam-noop "$bin __cofferdam-sandbox-init x" \
    -n cofferdam-ns "$bin __cofferdam-sandbox-init sealed:$ids:own" >/dev/null 2>&1
  for i in 0 1 2 3 4; do
    printf '%-34s %10.3f\n' "re-exec: $(jq -r ".results[$i].command" "$store/reexec.json" | sed "s|$work/||; s|$bin|cofferdam|")" "$(median "$i" "$store/reexec.json")"
  done
  record reexec "init start: cofferdam's namespaces (re-exec)" 0 "$(median 4 "$store/reexec.json")" "the same steps, small static C" "$(median 2 "$store/reexec.json")"
  record reexec "exec of the binary, no work" 0 "$(median 3 "$store/reexec.json")" "empty static glibc program" "$(median 1 "$store/reexec.json")"
  record reexec "empty static glibc program" 0 "$(median 1 "$store/reexec.json")" "no C library (exec and exit only)" "$(median 0 "$store/reexec.json")"
else
  echo "SKIP-HOST re-exec experiment: no C compiler with a static libc (apt-get install gcc libc6-dev)"
fi
