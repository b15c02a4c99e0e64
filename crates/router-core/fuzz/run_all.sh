#!/usr/bin/env bash
# Runs every fuzz target one after another, each for FUZZ_SECONDS, single-process and niced,
# so it shares a small machine.
#
#   run_all.sh [target...]        explore: FUZZ_SECONDS each (default 600), corpora kept in
#                                 corpus/<target>/ (started from corpus-seed/<target>/), crash
#                                 artifacts in artifacts/<target>/ (both gitignored)
#   run_all.sh --ci [target...]   CI (scripts/test.sh): FUZZ_SECONDS each (default 12) from the
#                                 committed corpus-seed/<target>/ (copied: nothing committed is
#                                 touched); exits non-zero when any target finds a crash
#
# Both print each target's executions and coverage (libFuzzer's `cov`: covered edges; `ft`:
# features) and, at the end, one line per target. libFuzzer's log of each run is
# $FUZZ_LOG_DIR/<target>.log (default /tmp/router-fuzz-logs). The build uses FUZZ_SANITIZER
# (default address; CI: none, router-core has no unsafe code and the build is twice as fast).
set -euo pipefail
cd "$(dirname "$0")"
FUZZ_DIR=$PWD
ci=false
if [ "${1:-}" = --ci ]; then
  ci=true
  shift
fi
if $ci; then
  SECONDS_EACH=${FUZZ_SECONDS:-12}
  SANITIZER=${FUZZ_SANITIZER:-none}
else
  SECONDS_EACH=${FUZZ_SECONDS:-600}
  SANITIZER=${FUZZ_SANITIZER:-address}
fi
LOG_DIR=${FUZZ_LOG_DIR:-/tmp/router-fuzz-logs}
ALL=(request settings cells control probe_record topology_answer learn_answer regex_differential
  ruleset_parser request_matcher routable_token jwt_claims base64_text)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${ALL[@]}")
mkdir -p "$LOG_DIR"

build_start=$(date +%s)
build() {
  nice -n 10 cargo +nightly fuzz build --fuzz-dir "$FUZZ_DIR" -s "$SANITIZER" "$@" 2>&1 |
    grep -vE '^\s+(Compiling|Downloaded|Downloading)' >&2 || true
}
if [ ${#targets[@]} -eq ${#ALL[@]} ]; then build; else for t in "${targets[@]}"; do build "$t"; done; fi
for t in "${targets[@]}"; do
  bin=$(ls "$FUZZ_DIR"/target/*/release/"$t" 2>/dev/null | head -n 1)
  [ -x "$bin" ] || { echo "== $t: not built" >&2; exit 1; }
done
echo "== built ${#targets[@]} targets in $(( $(date +%s) - build_start ))s (sanitizer: $SANITIZER)" >&2

summary=()
failed=()
for t in "${targets[@]}"; do
  if $ci; then
    corpus=$(mktemp -d)
    cp -r "corpus-seed/$t/." "$corpus/" 2>/dev/null || true
  else
    corpus="$FUZZ_DIR/corpus/$t"
    mkdir -p "$corpus"
    cp -rn "corpus-seed/$t/." "$corpus/" 2>/dev/null || true
  fi
  mkdir -p "artifacts/$t"
  extra=()
  [ -f "dicts/$t.dict" ] && extra+=("-dict=$FUZZ_DIR/dicts/$t.dict")
  [ "$t" = ruleset_parser ] && extra+=("-max_len=8192")
  log="$LOG_DIR/$t.log"
  echo "== $t: ${SECONDS_EACH}s, log $log" >&2
  status=0
  nice -n 10 cargo +nightly fuzz run --fuzz-dir "$FUZZ_DIR" -s "$SANITIZER" "$t" "$corpus" -- \
    -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2560 -print_final_stats=1 \
    -artifact_prefix="$FUZZ_DIR/artifacts/$t/" "${extra[@]}" >"$log" 2>&1 || status=$?
  $ci && rm -rf "$corpus"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  last=$(grep -E '^#[0-9]+' "$log" | grep -o 'cov: [0-9]* ft: [0-9]* corp: [^ ]*' | tail -n 1)
  line=$(printf '%-20s execs %-10s %s' "$t" "${execs:-?}" "${last:-no stats}")
  if [ "$status" -ne 0 ]; then
    line="$line  FAILED (exit $status)"
    failed+=("$t")
    grep -E 'panicked at|^SUMMARY|Test unit written|^==[0-9]+==ERROR' "$log" | head -n 5 >&2 || true
  fi
  echo "== $line" >&2
  summary+=("$line")
done

echo "== fuzz summary (${SECONDS_EACH}s each)" >&2
printf '%s\n' "${summary[@]}" >&2
if [ ${#failed[@]} -gt 0 ]; then
  echo "== crash found in: ${failed[*]} (inputs in crates/router-core/fuzz/artifacts/<target>/;" \
    "add each, bytes inline, to crates/router-core/tests/fuzz_regressions.rs)" >&2
  exit 1
fi
