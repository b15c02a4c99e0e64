#!/usr/bin/env bash
# The router's benchmark: builds the release artifacts, runs the native
# rules bench, then bench/driver.mjs: a do-nothing JS worker, the floor and
# the peer (../shared/peers, used in place; skipped with a note when
# missing) and the router under several rulesets, in workerd through
# Miniflare's direct socket, wrk as the load generator; then the cold
# start, streaming and memory, and the wasm size. Prints the tables,
# writes target/bench/latest.json, its HTML report target/bench/latest.html
# and the results table in docs/benchmark.md. Not part of scripts/test.sh.
#
#   bash bench/run.sh                 # default, about 15 minutes
#   BENCH_QUICK=1 bash bench/run.sh   # smoke run, about 5 minutes
#
# Settings are environment variables, every one listed with its default
# and meaning in bench/driver/settings.mjs and docs/benchmark.md
# ("Settings"). This script reads BENCH_SKIP_BUILD, BENCH_SKIP_NATIVE,
# BENCH_SCALE (builds target/worker-scale), BENCH_INSTRUCTIONS (installs
# valgrind) and BENCH_PEERS_DIR; the driver reads the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/node-env.sh

say() { printf '==> %s\n' "$*" >&2; }
# For the recorded duration (docs/benchmark.md's results table).
export BENCH_RUN_STARTED="${BENCH_RUN_STARTED:-$(date +%s)}"

bash scripts/setup.sh

# wrk from Debian: per-request headers need its Lua scripting (oha has none).
if ! command -v wrk >/dev/null; then
  say "installing wrk (Debian)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
fi

# valgrind from Debian: BENCH_INSTRUCTIONS=1 counts instructions under callgrind.
if { [ "${BENCH_INSTRUCTIONS:-}" = "1" ] || [ "${BENCH_SCALE:-}" = "1" ]; } && ! command -v valgrind >/dev/null; then
  say "installing valgrind (Debian)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
fi

if [ -z "${BENCH_SKIP_BUILD:-}" ]; then
  say "building the worker (release) and devstack (release)"
  bash scripts/build-worker.sh
  cargo build --release --quiet -p devstack
fi
if [ -z "${BENCH_SKIP_BUILD:-}" ]; then
  say "building the Rust yardsticks (bench/rust-floor, bench/workers-rs)"
  bash bench/build-yardsticks.sh
fi
if [ -z "${BENCH_SKIP_BUILD:-}" ] && [ "${BENCH_SCALE:-}" = "1" ]; then
  say "building the scale worker (test-rulesets: the generated cells_50 and cells_200) into target/worker-scale"
  WORKER_OUT_DIR=target/worker-scale WORKER_FEATURES=test-rulesets bash scripts/build-worker.sh
fi

mkdir -p target/bench
native_out=target/bench/native.txt
rm -f "$native_out"
if [ -z "${BENCH_SKIP_NATIVE:-}" ]; then
  say "native rules bench (divan)"
  cargo bench --quiet -p router-core --bench rules 2>&1 | tee "$native_out" >&2
fi

peers="${BENCH_PEERS_DIR:-../shared/peers}"
if [ ! -f "$peers/js-router.mjs" ] || [ ! -f "$peers/js-floor.mjs" ]; then
  say "no peers in $peers (js-router.mjs, js-floor.mjs): the floor and peer rows are skipped"
fi

say "load, cold start, streaming and memory through workerd"
BENCH_NATIVE_OUTPUT="$native_out" node bench/driver.mjs
