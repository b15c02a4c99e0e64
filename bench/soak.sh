#!/usr/bin/env bash
# The soak test under faults: the built worker (build/) in
# workerd through Miniflare in front of devstack, 32 clients of mixed
# traffic for 15 minutes while the Topology Service goes down, slows, errs
# and answers 404, cell 4 is killed and restarted and the worker is
# reloaded, then all of it at once (the storm). Prints a table per fault
# phase, writes target/soak/latest.json and its HTML report
# target/soak/latest.html, exits non-zero on any corrupt
# body, lost message, unintended 5xx, wrong cell outside a documented
# fallback, stale answer not used, or unbounded memory. docs/soak.md.
#
#   bash bench/soak.sh            # 32 clients, 15 minutes
#   bash bench/soak.sh --short    # CI: 8 clients, 100 s (under 3 minutes in all)
#   bash bench/soak.sh --clients 16 --seconds 300 --seed 7
#   bash bench/soak.sh --record   # also writes the figures into docs/soak.md
#   bash bench/soak.sh --short --worker null   # the null worker in the router's place
#   bash bench/soak.sh --short --vs-null       # both, same seed: router RSS vs the null worker's
#   bash bench/soak.sh --short --vs-null --matched-io   # the null worker making the router's I/O
#
# Needs build/ (scripts/build-worker.sh) and node_modules; builds devstack
# (debug, as the e2e tests use it) when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/node-env.sh

null_only=false
prev=""
for a in "$@"; do
  if [ "$prev" = "--worker" ] && [ "$a" = "null" ]; then null_only=true; fi
  prev="$a"
done
if [ "$null_only" = false ] && [ ! -f build/index.js ]; then
  echo "build/index.js is missing: run bash scripts/build-worker.sh first" >&2
  exit 2
fi
if [ ! -x target/debug/devstack ]; then
  echo "==> building devstack" >&2
  cargo build --quiet -p devstack
fi
exec node bench/soak.mjs "$@"
