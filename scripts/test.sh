#!/usr/bin/env bash
# Runs every test: native unit and integration tests of the core, the
# tools and the local stack, then the end-to-end suites that drive the real
# built worker in workerd (Miniflare) against real loopback servers, and the
# deploy suite against the pinned wrangler. Installs what is missing first.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/node-env.sh

bash scripts/setup.sh --registry

# No known advisory in the lock files (docs/operations.md, Known advisories):
# the check over every tracked package-lock.json and Cargo.lock, then its own
# test (fixtures with vulnerable versions must be reported).
echo "==> known advisories in the lock files (scripts/check-advisories.mjs)" >&2
node scripts/check-advisories.mjs
node --test --test-reporter=spec 'tests/advisories/*.test.mjs'

echo "==> native tests (cargo test)" >&2
cargo test --workspace --exclude gitlab-http-router --quiet
# The edge's pure parts (settings, header filling, plans), natively.
cargo test --quiet -p gitlab-http-router --lib
# The edge's wasm-only parts as wasm, under Node (src/wasm_tests.rs): the
# allocator over talc, routeSync's input buffer and plan, the isolate's
# setup and the routeSync -> routeAsync hand-off.
echo "==> wasm tests (wasm-bindgen-test under Node)" >&2
CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner \
  cargo test --target wasm32-unknown-unknown -p gitlab-http-router --lib wasm_tests

# Every fuzz target for a few seconds from its committed seed corpus
# (docs/fuzzing.md): a crash fails the run. Needs the nightly toolchain.
echo "==> fuzz targets (cargo +nightly fuzz, crates/router-core/fuzz/run_all.sh --ci)" >&2
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "the fuzz targets need the nightly toolchain: rustup toolchain install nightly" >&2
  exit 1
fi
bash crates/router-core/fuzz/run_all.sh --ci

echo "==> building the worker and the local stack" >&2
bash scripts/build-worker.sh
cargo build --quiet -p devstack -p rulesctl

# Every route of GitLab's own route snapshot against the cells ruleset and
# the expectation table (tests/rules/README.md); prints its counts and time.
echo "==> GitLab's route snapshot (rulesctl routes-check)" >&2
target/debug/rulesctl routes-check tests/rules/gitlab_routes.json --quiet

# The wasm budget (gzip -9), enforced: a bigger worker starts slower.
budget_kib=275
gz=$(gzip -9 -c build/worker/index.wasm | wc -c)
echo "==> wasm: $((gz / 1024)) KiB gzip of a ${budget_kib} KiB budget" >&2
if [ "$gz" -gt $((budget_kib * 1024)) ]; then
  echo "build/worker/index.wasm is $gz bytes gzip, over the ${budget_kib} KiB budget" >&2
  exit 1
fi

# The test build (tests/e2e/harness.mjs buildTestWorker), made once here
# so that suites running side by side never build it at the same time.
WORKER_OUT_DIR=target/worker-probe WORKER_FEATURES=panic-probe,memory-probe,test-rulesets bash scripts/build-worker.sh

echo "==> end-to-end tests through workerd" >&2
# tests/bench: the benchmark's own arithmetic (bench/paired.mjs) and the
# soak's and benchmark's HTML reports (in headless Chromium).
# Node expands the quoted globs itself (a directory argument is not searched).
node --test --test-concurrency=2 --test-reporter=spec \
  'tests/e2e/**/*.test.mjs' 'tests/bench/**/*.test.mjs' 'tests/deploy/**/*.test.mjs' 'tests/toolchain/*.test.mjs' \
  'tests/build/*.test.mjs'

# Under three minutes: 8 clients of mixed traffic for 100 s through the
# fault schedule (bench/soak.sh, docs/soak.md).
echo "==> soak (short)" >&2
bash bench/soak.sh --short
