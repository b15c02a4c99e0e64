#!/usr/bin/env bash
# The router's benchmark (issues 8 and 20): builds the release artifacts,
# runs the native rules bench, then measures on loopback, in the same
# rounds, a do-nothing JS worker, the floor and the peer (from
# ../shared/peers/, used in place; skipped with a note when missing) and
# the router (passthrough, session_token warm, quiet and cold, cells) in
# workerd through Miniflare's direct socket, with wrk as the load
# generator; prints CPU µs over the floor with its log line and req/s
# against the peer with its log line at concurrency 8 and 32, the cold
# start (fresh isolate to first routed response, router vs peer), the wasm
# size, 1 GiB streaming and workerd's memory. Writes
# target/bench/latest.json. Not part of scripts/test.sh.
#
#   bash bench/run.sh                 # default, about 15 minutes
#   BENCH_QUICK=1 bash bench/run.sh   # smoke run, about 5 minutes
#
# Knobs (environment): BENCH_SECONDS (per measured run; 8, quick 2),
# BENCH_ROUNDS (3, quick 1), BENCH_CONCURRENCY ("8,32"),
# BENCH_WARMUP_SECONDS (1), BENCH_COLD_SAMPLES (7, quick 2; 0 skips),
# BENCH_PEERS_DIR (../shared/peers), BENCH_BASE_BUILD (a copy of build/
# from another commit, run beside this one), BENCH_STREAM_MIB (1024,
# quick 256), BENCH_STREAM_SMALL_MIB (64), BENCH_SKIP_STREAM=1,
# BENCH_SKIP_NATIVE=1, BENCH_SKIP_BUILD=1, BENCH_OUTBOUND_HOP=1 (outbound
# fetches through Miniflare's strip-cf-connecting-ip worker, as before
# 2026-12-01), BENCH_EXTRA=1 (adds rust-null,
# null-log, cold-nocache and token-warm-signed), BENCH_WRK_THREADS (2).
# See docs/benchmark.md.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '==> %s\n' "$*" >&2; }

bash scripts/setup.sh

# wrk from Debian: per-request headers need its Lua scripting (oha has none).
if ! command -v wrk >/dev/null; then
  say "installing wrk (Debian)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
fi

# valgrind from Debian: BENCH_INSTRUCTIONS=1 counts instructions under callgrind.
if [ "${BENCH_INSTRUCTIONS:-}" = "1" ] && ! command -v valgrind >/dev/null; then
  say "installing valgrind (Debian)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
fi

if [ -z "${BENCH_SKIP_BUILD:-}" ]; then
  say "building the worker (release) and devstack (release)"
  bash scripts/build-worker.sh
  cargo build --release --quiet -p devstack
fi
if [ -z "${BENCH_SKIP_BUILD:-}" ] && [ "${BENCH_EXTRA:-}" = "1" ]; then
  say "building the Rust floor worker (bench/rust-null, BENCH_EXTRA)"
  (cd bench/rust-null && CARGO_TARGET_DIR="$PWD/../../target/rust-null" \
    WASM_BINDGEN_BIN="${CARGO_HOME:-$HOME/.cargo}/bin/wasm-bindgen" \
    WASM_OPT_BIN="$PWD/../../node_modules/.bin/wasm-opt" \
    ESBUILD_BIN="$PWD/../../node_modules/.bin/esbuild" \
    worker-build --release >/dev/null 2>&1) || { echo "building bench/rust-null failed" >&2; exit 1; }
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
