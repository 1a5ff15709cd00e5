#!/usr/bin/env bash
# Start of a scoped run (`--tier scoped`: Landlock + seccomp on a copy of the workdir, no
# namespaces) on a large workdir, against copying that workdir, in the same run:
#   cofferdam run --tier scoped -- /bin/true   the whole run: the copy into the job, the
#                                              command, the seal, the copy's removal
#   cp -a --reflink=auto                       the copy alone (its removal untimed)
#   cp -a --reflink=auto, then rm -rf          the copy and its removal, as the run does
# The workdir is SCOPED_FILES files (default 50000) of SCOPED_BYTES bytes in all (default
# 1 GiB), in directories of 100, in the page cache. The copy clones files where the
# filesystem can (btrfs, XFS) as cp --reflink=auto does, else copies them. Needs hyperfine
# and jq; measures the static release build (`cargo build-static`) unless COFFERDAM_BIN
# names a binary.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib/common.bash
need bench/scoped.sh hyperfine jq bc python3
runs=${RUNS:-5}
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
hyperfine -N --warmup 1 --runs "$runs" --export-json "$base/scoped.json" \
  --prepare "rm -rf $base/copy" \
  -n cp "cp -a --reflink=auto $tree $base/copy" \
  -n cofferdam "$bin run -q --tier scoped -- /bin/true" \
  -n cp-rm "sh -c 'cp -a --reflink=auto $tree $base/copy && rm -rf $base/copy'" >/dev/null
cp_=$(median 0 "$base/scoped.json")
cd_=$(median 1 "$base/scoped.json")
cprm=$(median 2 "$base/scoped.json")
printf '%-52s %10s %10s\n' benchmark "median ms" ratio
printf '%-52s %10.1f %10s\n' "cp -a --reflink=auto, $files files, $du MiB" "$cp_" "-"
printf '%-52s %10.1f %10s\n' "  the same, then rm -rf" "$cprm" "-"
printf '%-52s %10.1f %9.2fx %s\n' "cofferdam run --tier scoped -- /bin/true" "$cd_" \
  "$(echo "$cd_ / $cp_" | bc -l)" "of cp -a ($(printf %.2f "$(echo "$cd_ / $cprm" | bc -l)")x of cp -a + rm -rf)"
record scoped "scoped run -- /bin/true, $du MiB workdir" "$files" "$cd_" "cp -a --reflink=auto" "$cp_"
record scoped "scoped run -- /bin/true, $du MiB workdir" "$files" "$cd_" "cp -a --reflink=auto + rm -rf" "$cprm"
