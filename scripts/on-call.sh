#!/usr/bin/env bash
# The on-call jobs of .gitlab-ci.yml (docs/operations.md, "The first five
# minutes"): one verb per job; the environment and the reason come from the
# job's variables and have no default.
#
#   scripts/on-call.sh check     the variables are set (before anything is installed)
#   scripts/on-call.sh passthrough | normal | purge | invalidate | rollback
#
#   SWITCH_ENVIRONMENT  the environment of wrangler.toml to change (required)
#   SWITCH_REASON       why, e.g. "INC-123: cells misrouting" (required): the
#                       job log, and the control document's note
#   INVALIDATE_ARGS     invalidate: what, e.g. "--claim route=acme --cell 2" (required)
#   ROLLBACK_VERSION    rollback: the version to return to [default: the one before]
#   START_GENERATION    passthrough, normal, purge, invalidate: with no stored
#                       document, the purge_generation to start from
#                       (rulesctl --start-generation; refused without it)
#   RULESCTL            [default: bin/rulesctl, the build job's artefact]
#
# The control verbs run `rulesctl control … --yes` (running the job is the
# confirmation), which prints the document's old -> new into the job log;
# rollback runs `deploy-worker.sh --rollback`. Exit 2 when a variable is
# missing or wrong; otherwise rulesctl's or deploy-worker.sh's status.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() {
  echo "on-call: $*" >&2
  exit 2
}
# The deployed environments: wrangler.toml's [env.NAME] tables but dev.
environments() {
  sed -n 's/^\[env\.\([A-Za-z0-9_-]*\)\]$/\1/p' wrangler.toml | grep -vx dev | paste -sd ' ' -
}

verb=${1:-}
case "$verb" in
  check | passthrough | normal | purge | invalidate | rollback) ;;
  *) fail "usage: scripts/on-call.sh check|passthrough|normal|purge|invalidate|rollback" ;;
esac
if [ -z "${SWITCH_ENVIRONMENT:-}" ]; then
  fail "SWITCH_ENVIRONMENT is not set: run the job with SWITCH_ENVIRONMENT set to the environment to change, one of: $(environments) (there is no default)"
fi
if ! environments | tr ' ' '\n' | grep -qx -- "$SWITCH_ENVIRONMENT"; then
  fail "SWITCH_ENVIRONMENT=$SWITCH_ENVIRONMENT is not a deployed environment of wrangler.toml: one of $(environments)"
fi
if [ -z "${SWITCH_REASON:-}" ]; then
  fail "SWITCH_REASON is not set: run the job with SWITCH_REASON saying why (e.g. \"INC-123: cells misrouting\"); it goes into the job log and the control document's note"
fi
job=${CI_JOB_NAME:-on-call}
if [ -z "${INVALIDATE_ARGS:-}" ] && { [ "$verb" = invalidate ] || [ "$job" = on-call-invalidate ]; }; then
  fail "INVALIDATE_ARGS is not set: say what to invalidate, e.g. \"--claim route=acme --claim organizationPath=acme-org\" or \"--cell 2\" (docs/operations.md)"
fi
[ "$verb" = check ] && exit 0

echo "on-call: $verb on $SWITCH_ENVIRONMENT by ${GITLAB_USER_LOGIN:-unknown}: $SWITCH_REASON"
note="$SWITCH_REASON (${GITLAB_USER_LOGIN:-CI} in ${CI_JOB_URL:-an on-call job})"
rulesctl=${RULESCTL:-bin/rulesctl}
env=(--env "$SWITCH_ENVIRONMENT")
if [ -n "${START_GENERATION:-}" ]; then env+=(--start-generation "$START_GENERATION"); fi
case "$verb" in
  passthrough) command=("$rulesctl" control set "${env[@]}" mode=passthrough "note=$note" --yes) ;;
  normal) command=("$rulesctl" control set "${env[@]}" mode=normal "note=$note" --yes) ;;
  purge) command=("$rulesctl" control set "${env[@]}" purge "note=$note" --yes) ;;
  invalidate)
    read -ra what <<<"$INVALIDATE_ARGS"
    command=("$rulesctl" control invalidate "${env[@]}" "${what[@]}" --yes)
    ;;
  rollback) command=(bash deploy-worker.sh --rollback "$SWITCH_ENVIRONMENT") ;;
esac
printf 'on-call: running'
printf ' %q' "${command[@]}"
printf '\n'
exec "${command[@]}"
