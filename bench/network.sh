#!/usr/bin/env bash
# Cost of the `allow` network path, against the direct path measured in the same run: a
# loopback HTTP server started here; a client on the host (direct) and the same client inside
# `cofferdam run --allow-net 127.0.0.1:PORT` (plain TCP, through the transparent listener and
# the supervisor's relay). Each client times itself, so the sandbox's startup is not counted.
# Prints the median latency of a small request (new connection each) and the throughput of a
# 100 MiB transfer. Targets (issue #5): <= 1 ms added median latency, >= 50% of direct
# throughput. Needs python3; measures the static release build (`cargo build-static`) unless
# COFFERDAM_BIN names a binary.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib/common.bash
bin=$(release_bin)
requests=${REQUESTS:-300}
mib=${MIB:-100}
work=$(mktemp -d)
store=$(mktemp -d)
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work" "$store" 2>/dev/null || true' EXIT
export COFFERDAM_HOME="$store"

cat > "$work/server.py" <<'PY'
import http.server, socketserver, sys, threading
MIB = int(sys.argv[1])
RELEASE = threading.Event()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    def log_message(self, *a): pass
    def do_GET(self):
        if self.path == "/release":
            RELEASE.set()
        if self.path == "/hold":
            # The head and one byte now, the rest once /release is asked for: every
            # held connection stays open (both relay directions up) until then.
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"o")
            self.wfile.flush()
            RELEASE.wait()
            self.wfile.write(b"k")
            return
        big = self.path == "/big"
        n = MIB << 20 if big else 2
        self.send_response(200)
        self.send_header("Content-Length", str(n))
        self.end_headers()
        if not big:
            self.wfile.write(b"ok"); return
        chunk = b"\0" * (1 << 20)
        for _ in range(MIB):
            self.wfile.write(chunk)
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    request_queue_size = 1024
s = S(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
PY
cat > "$work/client.py" <<'PY'
import socket, statistics, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
def get(path):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET " + path + b" HTTP/1.0\r\nHost: x\r\n\r\n")
    total = 0
    while True:
        b = s.recv(1 << 20)
        if not b: break
        total += len(b)
    s.close()
    return total
lat = []
for _ in range(n):
    t = time.perf_counter(); get(b"/small"); lat.append((time.perf_counter() - t) * 1000)
t = time.perf_counter(); size = get(b"/big"); dt = time.perf_counter() - t
print(f"{statistics.median(lat):.3f} {size / dt / (1 << 20):.1f}")
PY

cat > "$work/hold.py" <<'PY'
import socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
conns = []
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /hold HTTP/1.0\r\nHost: x\r\n\r\n")
    conns.append(s)
for s in conns:
    got = b""
    while not got.endswith(b"\r\n\r\no"):
        b = s.recv(1)
        if not b: sys.exit("a held connection ended early")
        got += b
print("ready", flush=True)
for s in conns:
    while s.recv(1 << 16): pass
    s.close()
print("done", flush=True)
PY

coproc SERVER { exec python3 "$work/server.py" "$mib"; }
server=$SERVER_PID
read -r port <&"${SERVER[0]}"

direct=$(python3 "$work/client.py" "$port" "$requests")
allowed=$(cd "$work" && "$bin" run -q --allow-net "127.0.0.1:$port" -- \
  python3 "$work/client.py" "$port" "$requests")
read -r dlat dtp <<<"$direct"
read -r alat atp <<<"$allowed"

printf '%-40s %12s %12s\n' path "median ms" "MiB/s"
printf '%-40s %12.3f %12.1f\n' "direct (host)" "$dlat" "$dtp"
printf '%-40s %12.3f %12.1f\n' "allow (sandbox -> relay -> host)" "$alat" "$atp"
printf 'added median latency %.3f ms (target <= 1), throughput %.0f%% of direct (target >= 50)\n' \
  "$(echo "$alat - $dlat" | bc -l)" "$(echo "100 * $atp / $dtp" | bc -l)"

# HELD (default 200) connections open at once through the relay: the supervisor's memory
# while they are all up (each is a connection thread and a relay thread), against the same
# run holding none. VmSize is the address space (thread stacks reserved), RSS and PSS what
# is resident.
held=${HELD:-200}
# mem PID: "rss_kib pss_kib vmsize_kib threads" of PID.
mem() {
  echo "$(awk '$1 == "Rss:" {r = $2} $1 == "Pss:" {p = $2} END {print r, p}' /proc/"$1"/smaps_rollup)" \
    "$(awk '$1 == "VmSize:" {v = $2} $1 == "Threads:" {t = $2} END {print v, t}' /proc/"$1"/status)"
}
# hold_through N: run hold.py with N connections in the sandbox; print mem of the supervisor
# once all are up.
hold_through() {
  local n=$1 line got sup out=$work/hold.out
  rm -f "$out"
  mkfifo "$out"
  (cd "$work" && exec "$bin" run -q --allow-net "127.0.0.1:$port" -- \
    python3 "$work/hold.py" "$port" "$n") >"$out" &
  sup=$!
  exec {hold_fd}<"$out"
  read -r line <&"$hold_fd"
  [ "$line" = ready ] || { echo "bench/network.sh: hold.py said: $line" >&2; exit 1; }
  got=$(mem "$sup")
  python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/release').read()"
  read -r line <&"$hold_fd" || true
  exec {hold_fd}<&-
  wait "$sup" || true
  echo "$got"
}
read -r r0 p0 v0 t0 <<<"$(hold_through 0)"
# The release is sticky: a fresh server for the held run.
kill "$server" 2>/dev/null || true
wait "$server" 2>/dev/null || true
coproc SERVER { exec python3 "$work/server.py" "$mib"; }
server=$SERVER_PID
read -r port <&"${SERVER[0]}"
read -r rn pn vn tn <<<"$(hold_through "$held")"
printf '%-40s %10s %10s %12s %8s\n' "supervisor" "RSS MiB" "PSS MiB" "VmSize MiB" threads
printf '%-40s %10.1f %10.1f %12.1f %8s\n' "no connection" "$(echo "$r0 / 1024" | bc -l)" \
  "$(echo "$p0 / 1024" | bc -l)" "$(echo "$v0 / 1024" | bc -l)" "$t0"
printf '%-40s %10.1f %10.1f %12.1f %8s\n' "$held connections held" "$(echo "$rn / 1024" | bc -l)" \
  "$(echo "$pn / 1024" | bc -l)" "$(echo "$vn / 1024" | bc -l)" "$tn"
printf 'per connection: %.1f KiB RSS, %.1f KiB address space\n' \
  "$(echo "($rn - $r0) / $held" | bc -l)" "$(echo "($vn - $v0) / $held" | bc -l)"
record memory "supervisor RSS, $held connections held (MiB)" 0 "$(echo "$rn / 1024" | bc -l)" \
  "no connection (MiB)" "$(echo "$r0 / 1024" | bc -l)"
