#!/usr/bin/env bash
# Builds the worker into build/ with worker-build, using the locally
# installed wasm-bindgen, wasm-opt and esbuild (worker-build would otherwise
# try to download them). Does nothing when build/ is newer than every
# source, so `wrangler dev` starts fast.
#
# WORKER_OUT_DIR (default build) and WORKER_FEATURES (cargo features, none
# by default) make other builds: the tests build one with the
# `panic-probe`, `memory-probe` and `test-rulesets` features into target/worker-probe.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/node-env.sh
out="${WORKER_OUT_DIR:-build}"
features="${WORKER_FEATURES:-}"

# Deploy jobs ship a build made earlier in the pipeline (and wrangler runs
# this as its [build] command): SKIP_BUILD=true uses build/ as it is.
if [ "${SKIP_BUILD:-}" = "true" ] && [ -f "$out/worker/index.wasm" ]; then
  echo "SKIP_BUILD=true: using $out/ as it is" >&2
  exit 0
fi

stamp="$out/worker/index.wasm"
# A build with the names section kept (KEEP_WASM_NAMES, for profiling) is
# marked, so the next plain build does not take it for up to date.
names_mark="$out/worker/.names-kept"
names_match() { if [ -n "${KEEP_WASM_NAMES:-}" ]; then [ -f "$names_mark" ]; else [ ! -f "$names_mark" ]; fi; }
sources=(src crates/router-core/src crates/router-core/Cargo.toml rules Cargo.toml Cargo.lock build.rs)
case ",$features," in *,test-rulesets,*) sources+=(tests/e2e/rules) ;; esac
# A build made with other features is not this one.
features_mark="$out/worker/.features"
if [ -f "$stamp" ] && [ -z "${FORCE_BUILD:-}" ] && names_match && \
   [ "$(cat "$features_mark" 2>/dev/null)" = "$features" ] && \
   [ -z "$(find "${sources[@]}" -newer "$stamp" -print -quit)" ]; then
  echo "$out/ is up to date" >&2
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
# -p: only the worker package, so router-core's features are the worker's
# (rulesctl, a default member, would switch on key handling it does not use).
cargo_args=(. -p gitlab-http-router)
[ -n "$features" ] && cargo_args+=(--features "$features")
# The wasm is optimised for size throughout: less for V8 to compile on a
# fresh isolate's first request, within the gzip budget
# (docs/performance-ledger.md, "Size"). The native tools keep Cargo.toml's
# release level.
export CARGO_PROFILE_RELEASE_OPT_LEVEL="${CARGO_PROFILE_RELEASE_OPT_LEVEL:-z}"
CUSTOM_SHIM="$PWD/src/entry.js" worker-build --release --out-dir "$out" "${cargo_args[@]}"
# worker-build keeps the wasm names section (function names for stack
# traces, ~40 KiB gzip); drop it unless KEEP_WASM_NAMES is set. Panic
# messages keep their text and location either way.
printf '%s' "$features" > "$features_mark"
rm -f "$names_mark"
if [ -n "${KEEP_WASM_NAMES:-}" ]; then
  touch "$names_mark"
else
  "$WASM_OPT_BIN" "$out/worker/index.wasm" --strip-debug -o "$out/worker/index.wasm" \
    --enable-mutable-globals --enable-sign-ext --enable-nontrapping-float-to-int \
    --enable-bulk-memory --enable-multivalue --enable-reference-types --enable-exception-handling
fi
raw=$(wc -c < "$out/worker/index.wasm")
gz=$(gzip -9 -c "$out/worker/index.wasm" | wc -c)
echo "worker built: $out/worker/index.wasm $((raw / 1024)) KiB raw, $((gz / 1024)) KiB gzip" >&2
