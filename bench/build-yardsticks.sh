#!/usr/bin/env bash
# Builds the benchmark's Rust yardsticks with the router's toolchain
# (rust-toolchain.toml) and release profile, outside its workspace:
#   bench/rust-floor  → target/rust-floor/worker/ (entry.mjs + rust_floor.wasm):
#                       cargo, then wasm-opt as worker-build runs it for the router,
#                       names stripped as scripts/build-worker.sh strips them
#   bench/workers-rs  → target/workers-rs/build/ (worker-build, as the router is built)
# Run by bench/run.sh unless BENCH_SKIP_BUILD is set.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/node-env.sh
root="$PWD"
wasm_opt="$root/node_modules/.bin/wasm-opt"
features=(--enable-mutable-globals --enable-sign-ext --enable-nontrapping-float-to-int
  --enable-bulk-memory --enable-multivalue --enable-reference-types --enable-exception-handling)

out="$root/target/rust-floor/worker"
mkdir -p "$out"
cargo build --quiet --release --target wasm32-unknown-unknown \
  --manifest-path bench/rust-floor/Cargo.toml --target-dir "$root/target/rust-floor"
"$wasm_opt" "$root/target/rust-floor/wasm32-unknown-unknown/release/rust_floor.wasm" \
  -O --one-caller-inline-max-function-size 100 --strip-debug "${features[@]}" -o "$out/rust_floor.wasm"
cp bench/rust-floor/entry.mjs "$out/entry.mjs"

(cd bench/workers-rs && CARGO_TARGET_DIR="$root/target/workers-rs" \
  WASM_BINDGEN_BIN="${CARGO_HOME:-$HOME/.cargo}/bin/wasm-bindgen" \
  WASM_OPT_BIN="$wasm_opt" ESBUILD_BIN="$root/node_modules/.bin/esbuild" \
  CARGO_PROFILE_RELEASE_OPT_LEVEL=z worker-build --release --out-dir "$root/target/workers-rs/build" >/dev/null 2>&1) ||
  { echo "building bench/workers-rs failed" >&2; exit 1; }
"$wasm_opt" "$root/target/workers-rs/build/index_bg.wasm" --strip-debug "${features[@]}" -o "$root/target/workers-rs/build/index_bg.wasm"
for f in "$out/rust_floor.wasm" "$root/target/workers-rs/build/index_bg.wasm"; do
  echo "built $f: $(($(wc -c < "$f") / 1024)) KiB raw, $(($(gzip -9 -c "$f" | wc -c) / 1024)) KiB gzip" >&2
done
