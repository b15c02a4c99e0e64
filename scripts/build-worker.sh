#!/usr/bin/env bash
# Builds the worker into build/ with worker-build, using the locally
# installed wasm-bindgen, wasm-opt and esbuild (worker-build would otherwise
# try to download them). Does nothing when build/ is newer than every
# source, so `wrangler dev` starts fast.
set -euo pipefail
cd "$(dirname "$0")/.."

# Deploy jobs ship a build made earlier in the pipeline (and wrangler runs
# this as its [build] command): SKIP_BUILD=true uses build/ as it is.
if [ "${SKIP_BUILD:-}" = "true" ] && [ -f build/worker/index.wasm ]; then
  echo "SKIP_BUILD=true: using build/ as it is" >&2
  exit 0
fi

stamp=build/worker/index.wasm
if [ -f "$stamp" ] && [ -z "${FORCE_BUILD:-}" ] && \
   [ -z "$(find src crates/router-core/src crates/router-core/Cargo.toml rules Cargo.toml Cargo.lock build.rs -newer "$stamp" -print -quit)" ]; then
  echo "build/ is up to date" >&2
  exit 0
fi
export WASM_BINDGEN_BIN="${CARGO_HOME:-$HOME/.cargo}/bin/wasm-bindgen"
export WASM_OPT_BIN="$PWD/node_modules/.bin/wasm-opt"
export ESBUILD_BIN="$PWD/node_modules/.bin/esbuild"
for tool in "$WASM_BINDGEN_BIN" "$WASM_OPT_BIN" "$ESBUILD_BIN"; do
  [ -x "$tool" ] || { echo "missing $tool: run scripts/setup.sh" >&2; exit 1; }
done
# src/entry.js is the Worker's fetch handler (see its header); worker-build
# bundles it with wasm-bindgen's glue into build/worker/shim.mjs, and
# build/index.js (wrangler.toml's main) re-exports that.
CUSTOM_SHIM="$PWD/src/entry.js" worker-build --release
# worker-build keeps the wasm names section (function names for stack
# traces, ~40 KiB gzip); drop it unless KEEP_WASM_NAMES is set. Panic
# messages keep their text and location either way.
if [ -z "${KEEP_WASM_NAMES:-}" ]; then
  "$WASM_OPT_BIN" build/worker/index.wasm --strip-debug -o build/worker/index.wasm \
    --enable-mutable-globals --enable-sign-ext --enable-nontrapping-float-to-int \
    --enable-bulk-memory --enable-multivalue --enable-reference-types --enable-exception-handling
fi
raw=$(wc -c < build/worker/index.wasm)
gz=$(gzip -9 -c build/worker/index.wasm | wc -c)
echo "worker built: build/worker/index.wasm $((raw / 1024)) KiB raw, $((gz / 1024)) KiB gzip" >&2
