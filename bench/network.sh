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
import http.server, socketserver, sys
MIB = int(sys.argv[1])
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    def log_message(self, *a): pass
    def do_GET(self):
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
