#!/usr/bin/env bash
# Runs every fuzz target one after another, each for FUZZ_SECONDS (default 600),
# single-process (-jobs=1 -workers=1) and niced, so it shares a small machine.
# Corpora (corpus/<target>/) and crash artifacts (artifacts/<target>/) stay in
# this directory and are gitignored; libFuzzer's own log of each run goes to
# $FUZZ_LOG_DIR/<target>/fuzz-0.log (default /tmp/router-fuzz-logs).
# Usage: crates/router-core/fuzz/run_all.sh [target...]
set -euo pipefail
cd "$(dirname "$0")"
FUZZ_DIR=$PWD
SECONDS_EACH=${FUZZ_SECONDS:-600}
LOG_DIR=${FUZZ_LOG_DIR:-/tmp/router-fuzz-logs}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(ruleset_parser request_matcher routable_token jwt_claims base64_text)

for t in "${targets[@]}"; do nice -n 10 cargo +nightly fuzz build --fuzz-dir "$FUZZ_DIR" "$t"; done

for t in "${targets[@]}"; do
  mkdir -p "corpus/$t" "artifacts/$t" "$LOG_DIR/$t"
  extra=()
  [ -f "dicts/$t.dict" ] && extra+=("-dict=$FUZZ_DIR/dicts/$t.dict")
  [ "$t" = ruleset_parser ] && extra+=("-max_len=8192")
  echo "== $t: ${SECONDS_EACH}s, log $LOG_DIR/$t/fuzz-0.log" >&2
  # libFuzzer writes fuzz-<job>.log into the working directory in -jobs mode.
  ( cd "$LOG_DIR/$t" && nice -n 10 cargo +nightly fuzz run --fuzz-dir "$FUZZ_DIR" "$t" "$FUZZ_DIR/corpus/$t" -- \
      -max_total_time="$SECONDS_EACH" -jobs=1 -workers=1 -timeout=10 -print_final_stats=1 "${extra[@]}" ) || \
    echo "== $t: exited non-zero (a finding? see artifacts/$t and the log)" >&2
  tail -n 30 "$LOG_DIR/$t/fuzz-0.log" | grep -E '^(#[0-9]+|Done|stat::|==[0-9]+==|SUMMARY|artifact_prefix|Test unit)' | tail -n 15 >&2 || true
done
