#!/usr/bin/env bash
# Start of a scoped run (`--tier scoped`: Landlock + seccomp on a copy of the workdir, no
# namespaces) on a large workdir, against copying that workdir, in the same run:
#   cofferdam run --tier scoped -- /bin/true   the whole run: the copy into the job, the
#                                              command, the seal, the copy's removal
#   cp -a --reflink=auto                       the copy alone (its removal untimed)
#   cp -a --reflink=auto, then rm -rf          the copy and its removal, as the run does
# The workdir is SCOPED_FILES files (default 50000) of SCOPED_BYTES bytes in all (default
# 1 GiB), in directories of 100, in the page cache. The copy clones files where the
# filesystem can (btrfs, XFS) as cp --reflink=auto does, else copies them. RUNS rounds
# (default 3; each round copies and removes the tree twice). Measures the static release
# build (`cargo build-static`) unless COFFERDAM_BIN names a binary.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib/common.bash
need bench/scoped.sh bc python3
runs=${RUNS:-3}
files=${SCOPED_FILES:-50000}
bytes=${SCOPED_BYTES:-1073741824}
bin=$(release_bin)
echo "binary: $bin ($(linkage "$bin") build)"
# The tree, the copies and the job store on one filesystem (so the copy can clone where
# the filesystem can, and both sides write to the same disk).
base=$(mktemp -d -p / cofferdam-bench-XXXXXX 2>/dev/null || mktemp -d)
trap 'rm -rf "$base"' EXIT
export COFFERDAM_HOME=$base/home
tree=$base/work
mkdir "$tree"
python3 - "$tree" "$files" "$bytes" <<'PY'
import os, sys
root, n, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
size = total // n
for i in range(n):
    d = os.path.join(root, f"d{i // 100:04d}")
    if i % 100 == 0:
        os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:06d}.bin"), "wb") as f:
        f.write(bytes([i % 251]) * size)
PY
sync
if ! (cd "$tree" && "$bin" run -q --tier scoped -- /bin/true) >/dev/null 2>"$base/probe.err"; then
  echo "SKIP-HOST bench/scoped.sh: a scoped run does not start here: $(head -c 300 "$base/probe.err")"
  exit 0
fi
du=$(du -sm "$tree" | cut -f1)
cd "$tree"
# Alternated by hand, a round at a time (cp, its removal, the run), not one command's runs
# after another's: on ext4 without a journal (these test machines) every round's 50k
# creates and deletes slow the next round's creates, and alternating gives each side the
# same disk. Each step is timed by itself.
ms() { local t0 t1; t0=$(date +%s%N); "$@" >/dev/null; t1=$(date +%s%N); echo $(((t1 - t0) / 1000000)); }
median_of() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
cps=() rms=() cds=() cprms=()
for i in $(seq "$runs"); do
  c=$(ms cp -a --reflink=auto "$tree" "$base/copy")
  r=$(ms rm -rf "$base/copy")
  d=$(ms "$bin" run -q --tier scoped -- /bin/true)
  cps+=("$c") rms+=("$r") cds+=("$d") cprms+=($((c + r)))
  echo "round $i: cp -a $c ms, rm -rf $r ms, cofferdam run --tier scoped $d ms"
done
cp_=$(median_of "${cps[@]}")
cd_=$(median_of "${cds[@]}")
cprm=$(median_of "${cprms[@]}")
echo "job store after $runs runs: $(du -sm "$COFFERDAM_HOME" | cut -f1) MiB"
printf '%-52s %10s %10s\n' benchmark "median ms" ratio
printf '%-52s %10.1f %10s\n' "cp -a --reflink=auto, $files files, $du MiB" "$cp_" "-"
printf '%-52s %10.1f %10s\n' "  the same, then rm -rf" "$cprm" "-"
printf '%-52s %10.1f %9.2fx %s\n' "cofferdam run --tier scoped -- /bin/true" "$cd_" \
  "$(echo "$cd_ / $cp_" | bc -l)" "of cp -a ($(printf %.2f "$(echo "$cd_ / $cprm" | bc -l)")x of cp -a + rm -rf)"
record scoped "scoped run -- /bin/true, $du MiB workdir" "$files" "$cd_" "cp -a --reflink=auto" "$cp_"
record scoped "scoped run -- /bin/true, $du MiB workdir" "$files" "$cd_" "cp -a --reflink=auto + rm -rf" "$cprm"
