# Idle runs held in the background while something else is measured; sourced by
# bench/idle.sh and bench/idle_neighbours.sh (not a benchmark itself). The caller sets
# `leaders=()` and calls `stop_all` on exit.

# descendants PID: PID and every process below it.
descendants() {
  local p=$1 c
  echo "$p"
  for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do descendants "$c"; done
}

# wait_sleeping N PID...: until N `sleep` processes run below PIDs (at most 60 s).
wait_sleeping() {
  local want=$1 i n p d
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
  echo "bench: only $n of $want sleeps started in 60 s" >&2
  return 1
}

# start_held COUNT CMD...: start COUNT copies of CMD in the background (their pids are
# appended to `leaders`) and wait until each sleeps.
start_held() {
  local count=$1 i mine=()
  shift
  for i in $(seq "$count"); do
    "$@" </dev/null >/dev/null 2>&1 &
    leaders+=($!)
    mine+=($!)
  done
  [ "$count" -eq 0 ] || wait_sleeping "$count" "${mine[@]}"
}

# stop_all: end every held process and wait for it.
stop_all() {
  local p
  for p in "${leaders[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${leaders[@]}"; do wait "$p" 2>/dev/null || true; done
  leaders=()
}
