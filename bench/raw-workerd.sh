#!/usr/bin/env bash
# What a workerd binary itself costs per request: a hello-world worker
# (`new Response("ok")`, no fetch, no Miniflare) served by `workerd serve`
# on a free loopback port, loaded by wrk (8 connections, 2 s warm-up, 5 s
# measured), workerd's CPU read from /proc. Given several binaries, they run
# in turn, ROUNDS times (default 3), so that two runtimes compare on the
# same machine in the same minutes (docs/benchmark.md, "Results").
#
#   bash bench/raw-workerd.sh node_modules/.bin/workerd /tmp/old/node_modules/.bin/workerd
#
# An older workerd comes from its npm package:
#   npm install --prefix /tmp/old workerd@1.20260426.1
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: bash bench/raw-workerd.sh WORKERD_BIN..." >&2; exit 2; }
command -v wrk >/dev/null || { echo "wrk is needed (apt-get install wrk; bench/run.sh installs it)" >&2; exit 2; }

work=$(mktemp -d)
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat > "$work/w.js" <<'JS'
export default { fetch() { return new Response("ok"); } };
JS
cat > "$work/config.capnp" <<CAPNP
using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [ (name = "main", worker = .w) ],
  sockets = [ (name = "http", address = "127.0.0.1:$port", http = (), service = "main") ]
);
const w :Workerd.Worker = (modules = [(name = "w.js", esModule = embed "w.js")], compatibilityDate = "2026-04-26");
CAPNP

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

for round in $(seq "${ROUNDS:-3}"); do
  for bin in "$@"; do
    "$bin" serve "$work/config.capnp" > /dev/null 2>&1 &
    pid=$!
    for _ in $(seq 50); do
      curl -fs "http://127.0.0.1:$port/" > /dev/null 2>&1 && break
      sleep 0.1
    done
    wrk -t2 -c8 -d2s "http://127.0.0.1:$port/" > /dev/null
    before=$(cpu_ticks "$pid")
    out=$(wrk -t2 -c8 -d5s "http://127.0.0.1:$port/")
    after=$(cpu_ticks "$pid")
    requests=$(echo "$out" | grep -o '[0-9]* requests in' | cut -d' ' -f1)
    ticks_per_s=$(getconf CLK_TCK)
    echo "round $round: $("$bin" --version 2>/dev/null | awk '{print $NF}'): $((requests / 5)) req/s, $(( (after - before) * 1000000 / ticks_per_s / requests )) µs CPU/req"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    pid=""
  done
done
