#!/usr/bin/env bash
# Installs what building and testing the router needs, skipping each piece
# that is already present at the right version (safe to run again):
#   the project's own Node (scripts/node-env.sh, into toolchain/node), the
#   wasm32 target, worker-build, wasm-bindgen-cli at the Cargo.lock version,
#   cargo-fuzz, and the npm packages from package-lock.json (wrangler,
#   miniflare, binaryen's wasm-opt, smol-toml for the deploy program).
# With --registry it also installs Debian's docker-registry and skopeo, and
# chromium (the reports' browser test, tests/bench/report-render.test.mjs); with
# --npm-only it installs only the npm packages (what deploy-worker.sh
# --check-lock and --dry-run need).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/node-env.sh

WORKER_BUILD_VERSION=0.8.7
# The fuzz targets' runner (crates/router-core/fuzz; scripts/test.sh runs them briefly).
CARGO_FUZZ_VERSION=0.13.2
say() { printf '==> %s\n' "$*" >&2; }

# npm ci runs only when package-lock.json changed since the last install.
install_npm_packages() {
  local lock_hash
  lock_hash=$(sha256sum package-lock.json | cut -d' ' -f1)
  if [ "$(cat node_modules/.lock-hash 2>/dev/null || true)" != "$lock_hash" ]; then
    say "installing npm packages from package-lock.json"
    npm ci --no-audit --no-fund --loglevel=error
    echo "$lock_hash" > node_modules/.lock-hash
  fi
}

# scripts/node-env.sh (sourced above) put the project's Node first on PATH.
say "node $(node --version) from $(dirname "$(command -v node)"), npm $(npm --version)"

if [ "${1:-}" = "--npm-only" ]; then
  install_npm_packages
  exit 0
fi

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
  say "adding the wasm32-unknown-unknown target"
  rustup target add wasm32-unknown-unknown
fi

installed_version() { # binary -> its version (last word of --version), or empty
  "${CARGO_HOME:-$HOME/.cargo}/bin/$1" --version 2>/dev/null | awk '{print $NF}' | sed 's/^v//' || true
}

if [ "$(installed_version worker-build)" != "$WORKER_BUILD_VERSION" ]; then
  say "installing worker-build $WORKER_BUILD_VERSION (a few minutes, once)"
  cargo install worker-build --version "$WORKER_BUILD_VERSION" --locked
fi

# wasm-bindgen-cli must equal the wasm-bindgen that Cargo.lock pins.
WASM_BINDGEN_VERSION=$(awk '/^name = "wasm-bindgen"$/ {getline; gsub(/"/, "", $3); print $3; exit}' Cargo.lock)
if [ "$(installed_version wasm-bindgen)" != "$WASM_BINDGEN_VERSION" ]; then
  say "installing wasm-bindgen-cli $WASM_BINDGEN_VERSION (a few minutes, once)"
  cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION"
fi

# cargo-fuzz runs the fuzz targets with the nightly toolchain, which the
# machine image provides (rustup toolchain install nightly): without it the
# fuzz step of scripts/test.sh fails with a message saying so.
if [ "$(installed_version cargo-fuzz)" != "$CARGO_FUZZ_VERSION" ]; then
  say "installing cargo-fuzz $CARGO_FUZZ_VERSION (about a minute, once)"
  cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi

install_npm_packages

# devstack's demo cell 2 serves a Git repository through `git http-backend`.
if ! command -v git >/dev/null; then
  say "installing git (Debian)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq git >/dev/null
fi

# gitlab-ci-local (the pipeline test) copies the work tree with rsync.
if ! command -v rsync >/dev/null; then
  say "installing rsync (Debian)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rsync >/dev/null
fi

if [ "${1:-}" = "--registry" ]; then
  if ! command -v docker-registry >/dev/null || ! command -v skopeo >/dev/null; then
    say "installing docker-registry and skopeo (Debian)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-registry skopeo >/dev/null
  fi
fi

# The HTML reports of the soak and the benchmark are checked in headless
# Chromium (tests/bench/report-render.test.mjs), with the suites that need --registry.
if [ "${1:-}" = "--registry" ] && ! command -v chromium >/dev/null; then
  say "installing chromium (Debian)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
