# Shared by the bench/*.sh scripts (sourced; not a benchmark itself).

# release_bin: the binary to measure, as an absolute path: $COFFERDAM_BIN when set, else
# target/release/cofferdam built by `cargo build-static` (the static release build, see
# .cargo/config.toml; a no-op when it is up to date).
release_bin() {
  if [ -n "${COFFERDAM_BIN:-}" ]; then
    realpath "$COFFERDAM_BIN"
  else
    # The alias ends in `-- <rustc flags>`: options cannot follow it, so quiet by variable.
    CARGO_TERM_QUIET=true cargo build-static >&2 || return 1
    realpath target/release/cofferdam
  fi
}

# linkage BIN: "static" or "dynamic" (whether BIN asks for a program interpreter).
linkage() {
  if readelf -lW "$1" 2>/dev/null | grep -q 'Requesting program interpreter'; then
    echo dynamic
  else
    echo static
  fi
}

# median INDEX FILE: the median of hyperfine result INDEX in its JSON export, in ms.
median() { jq -r ".results[$1].median * 1000" "$2"; }

# record GROUP FIGURE FILES VALUE_MS BASELINE BASELINE_MS: one row for bench/run-all.sh
# (when it set BENCH_RESULTS). FILES is the workdir size the figure was taken at (0: not
# applicable); BASELINE is "-" when the figure has none.
record() {
  [ -n "${BENCH_RESULTS:-}" ] || return 0
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$BENCH_RESULTS"
}

# make_tree DIR N: N files of 200-1200 bytes in directories of 100.
make_tree() {
  python3 - "$1" "$2" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, f"d{i // 100:04d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:06d}.txt"), "w") as f:
        f.write(f"old {i}\n" + "o" * (200 + (i * 37) % 1000) + "\n")
PY
}

# need SCRIPT TOOL...: exit 2, naming the Debian packages, unless every TOOL is on PATH.
need() {
  local script=$1 tool missing=()
  shift
  for tool in "$@"; do command -v "$tool" >/dev/null || missing+=("$tool"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  local pkgs
  pkgs=$(printf '%s\n' "${missing[@]}" | sed 's/^bwrap$/bubblewrap/; s/^gnuplot$/gnuplot-nox/' | tr '\n' ' ')
  echo "$script needs ${missing[*]} (apt-get install $pkgs)"
  exit 2
}
