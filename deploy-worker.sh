#!/usr/bin/env bash
# Deploys the GitLab Cells HTTP router to one wrangler environment, moving
# traffic to the new Worker version in steps, with a health check after each
# step and a rollback to the version that served before when one fails.
# docs/deploying.md is the operator's guide; SPEC.md §8 the contract.
#
#   deploy-worker.sh <environment> [--dry-run]      validate, check the change
#                                                   lock, build, upload, roll out
#   deploy-worker.sh --rollback <environment> [--dry-run]
#                                                   put the previous version back
#                                                   at 100 % (ignores the lock)
#   deploy-worker.sh --check-lock [<environment>...]
#                                                   exit 3 when a change lock is
#                                                   active (for the CI job)
#
# Environment (defaults in brackets):
#   CLOUDFLARE_API_TOKEN        required, except with --dry-run
#   CLOUDFLARE_ACCOUNT_ID       the account (wrangler asks the API when unset)
#   ROLLOUT_PERCENTAGES         ["5 25 50 75 100"] traffic steps for the new version
#   OVERRIDE_LAST_PERCENTAGE    [false] true: only the last listed step
#   BAKE_SECONDS                [60] wait after each step before the health check
#   HEALTH_CHECK_CMD            shell command; exit 0 = healthy (it gets
#                               DEPLOY_ENVIRONMENT, DEPLOY_WORKER_NAME,
#                               DEPLOY_PERCENTAGE, DEPLOY_NEW_VERSION,
#                               DEPLOY_OLD_VERSION)
#   HEALTH_CHECK_URL            URL that must answer 2xx/3xx; requested with
#                               Cloudflare-Workers-Version-Overrides naming
#                               the new version
#   HEALTH_CHECK_TIMEOUT        [10] seconds for HEALTH_CHECK_URL
#   CHANGE_LOCK_FILE            [change-lock.toml beside this script]
#   CHANGE_LOCK_OVERRIDE        [false] true: deploy even during a change lock
#   CHANGE_LOCK_NOW             ISO 8601 time used as "now" (tests)
#   SKIP_BUILD                  [false] true: use build/ as it is
#   DEPLOY_TAG                  [CI_COMMIT_SHORT_SHA or git short sha] version tag
#   DEPLOY_MESSAGE              [CI_COMMIT_TITLE or the last commit's subject]
#   ROLLBACK_VERSION            --rollback: this version instead of the previous one
#   WRANGLER                    [node_modules/.bin/wrangler]
#   WRANGLER_CONFIG             [wrangler.toml beside this script]; its rules/
#                               directory holds the rulesets
#   RULESCTL                    [cargo run -q --bin rulesctl --] ruleset validator
#
# Exit status: 0 done (or nothing to do), 1 deploy failed (validation, wrangler,
# health check: the message says where traffic is), 2 usage or configuration
# error, 3 change lock active.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly ROOT
readonly DEFAULT_PERCENTAGES="5 25 50 75 100"

export WRANGLER_SEND_METRICS=false
export WRANGLER_HIDE_BANNER=true
export CLOUDFLARE_CF_FETCH_ENABLED=false

DRY_RUN=false
MODE=deploy
ENVIRONMENT=""
LOCK_ENVIRONMENTS=()
CONFIG=""
CONFIG_ARGS=()
WORKER_NAME=""
WORK_DIR=""
WRANGLER_BIN=()
# Traffic bookkeeping for the messages and the rollback.
NEW_VERSION=""
OLD_VERSION=""
STATE=""
ROLLOUT_ACTIVE=false
BAKE_PID=""

usage() {
  cat <<'EOF'
Usage:
  deploy-worker.sh <environment> [--dry-run]
  deploy-worker.sh --rollback <environment> [--dry-run]
  deploy-worker.sh --check-lock [<environment>...]

Deploys the router to a wrangler environment of wrangler.toml (staging,
production, registry-staging, registry-production): validates the rulesets,
checks the change lock, builds, uploads a new version and moves traffic to it
in the steps of ROLLOUT_PERCENTAGES (default "5 25 50 75 100"), checking
health after each step and rolling back on failure.
--dry-run prints the wrangler commands instead of running them.
See the top of this file and docs/deploying.md for the variables.
EOF
}

say() { printf '==> %s\n' "$*" >&2; }
warn() { printf 'deploy-worker.sh: warning: %s\n' "$*" >&2; }
die() { # exit code, message
  local code="$1"
  shift
  printf 'deploy-worker.sh: error: %s\n' "$*" >&2
  exit "$code"
}
is_true() { [ "${1:-}" = "true" ] || [ "${1:-}" = "1" ] || [ "${1:-}" = "yes" ]; }

# --- helpers in Python (3.11: tomllib) ---------------------------------------

read -r -d '' PY_HELPER <<'PY' || true
import datetime as dt
import json
import sys
import tomllib

def load_toml(path):
    with open(path, "rb") as f:
        return tomllib.load(f)

def parse_time(value, what):
    if isinstance(value, dt.datetime):
        t = value
    elif isinstance(value, str):
        try:
            t = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise SystemExit(f"{what}: {value!r} is not an ISO 8601 time")
    else:
        raise SystemExit(f"{what}: {value!r} is not a time (write e.g. 2026-12-18T00:00:00Z)")
    if t.tzinfo is None:
        raise SystemExit(f"{what}: {value!r} has no time zone: write it in UTC with a Z")
    return t.astimezone(dt.timezone.utc)

def fmt(t):
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")

def load_json(path):
    with open(path) as f:
        text = f.read()
    start = min([i for i in (text.find("{"), text.find("[")) if i >= 0], default=-1)
    if start < 0:
        raise SystemExit(f"no JSON in {path}")
    return json.loads(text[start:])

cmd, args = sys.argv[1], sys.argv[2:]

if cmd == "envs":  # CONFIG -> environment names
    for name in load_toml(args[0]).get("env", {}):
        print(name)

elif cmd == "env-get":  # CONFIG ENV KEY[.KEY] -> value (exit 5 when missing)
    node = load_toml(args[0]).get("env", {}).get(args[1])
    for key in args[2].split("."):
        if not isinstance(node, dict) or key not in node:
            sys.exit(5)
        node = node[key]
    print(node)

elif cmd == "lock":  # FILE NOW [ENV...] -> exit 10 and a description when locked
    path, now_text, envs = args[0], args[1], args[2:]
    try:
        data = load_toml(path)
    except (OSError, tomllib.TOMLDecodeError) as e:
        print(f"cannot read the change lock file {path}: {e}", file=sys.stderr)
        sys.exit(11)
    now = dt.datetime.now(dt.timezone.utc)
    if now_text:
        try:
            now = dt.datetime.fromisoformat(now_text.strip())
        except ValueError:
            print(f"CHANGE_LOCK_NOW={now_text!r} is not an ISO 8601 time", file=sys.stderr)
            sys.exit(11)
        if now.tzinfo is None:
            now = now.replace(tzinfo=dt.timezone.utc)
        now = now.astimezone(dt.timezone.utc)
    locks = data.get("lock", [])
    unknown = set(data) - {"lock"}
    if unknown or not isinstance(locks, list):
        print(f"{path}: only [[lock]] tables are allowed (found {sorted(unknown) or 'lock = ...'})", file=sys.stderr)
        sys.exit(11)
    active, upcoming = [], []
    try:
        for i, lock in enumerate(locks, 1):
            where = f"{path}: lock #{i}"
            extra = set(lock) - {"start", "end", "reason", "environments"}
            if extra:
                raise SystemExit(f"{where}: unknown key(s) {sorted(extra)}")
            for key in ("start", "end", "reason"):
                if key not in lock:
                    raise SystemExit(f"{where}: `{key}` is missing")
            start = parse_time(lock["start"], f"{where} start")
            end = parse_time(lock["end"], f"{where} end")
            if end <= start:
                raise SystemExit(f"{where}: end {fmt(end)} is not after start {fmt(start)}")
            scope = lock.get("environments")
            if scope is not None and (not isinstance(scope, list) or not all(isinstance(e, str) for e in scope)):
                raise SystemExit(f"{where}: `environments` must be a list of environment names")
            if scope is not None and envs and not set(scope) & set(envs):
                continue
            label = "all environments" if scope is None else ", ".join(scope)
            text = f"{fmt(start)} until {fmt(end)} ({label}): {lock['reason']}"
            if start <= now < end:
                active.append(text)
            elif now < start <= now + dt.timedelta(days=3):
                upcoming.append(text)
    except SystemExit as e:
        print(e.code, file=sys.stderr)
        sys.exit(11)
    for text in upcoming:
        print(f"upcoming change lock: {text}", file=sys.stderr)
    if active:
        print(f"now is {fmt(now)}")
        for text in active:
            print(f"change lock active from {text}")
        sys.exit(10)

elif cmd == "deployment":  # FILE (deployments status --json) -> "id percentage" lines
    deployment = load_json(args[0])
    for v in deployment.get("versions", []):
        if v.get("percentage", 0) > 0:
            print(v["version_id"], int(round(v["percentage"])))

elif cmd == "version":  # FILE (versions view --json) -> "tag created_on"
    version = load_json(args[0])
    tag = (version.get("annotations") or {}).get("workers/tag") or "-"
    print(tag, (version.get("metadata") or {}).get("created_on", "-"))

elif cmd == "output":  # NDJSON SKIP_LINES TYPE -> id in wrangler's last TYPE entry
    # (version-upload: version_id; version-deploy: deployment_id)
    found, key = "", {"version-upload": "version_id", "version-deploy": "deployment_id"}[args[2]]
    try:
        with open(args[0]) as f:
            for n, line in enumerate(f):
                if n < int(args[1]) or not line.strip():
                    continue
                entry = json.loads(line)
                if entry.get("type") == args[2] and entry.get(key):
                    found = entry[key]
    except FileNotFoundError:
        pass
    if not found:
        sys.exit(1)
    print(found)

elif cmd == "previous":  # FILE (deployments list --json) -> the version to roll back to
    deployments = load_json(args[0])
    deployments = sorted(deployments, key=lambda d: d.get("created_on", ""), reverse=True)
    if not deployments:
        raise SystemExit("the Worker has no deployments")
    serving = [v for v in deployments[0]["versions"] if v.get("percentage", 0) > 0]
    ids = {v["version_id"] for v in serving}
    if len(serving) > 1:
        # A rollout in progress: go back to the version that served 100 %
        # before it started.
        for d in deployments[1:]:
            whole = [v for v in d["versions"] if v.get("percentage", 0) >= 100]
            if whole and whole[0]["version_id"] in ids:
                print(whole[0]["version_id"])
                sys.exit(0)
        raise SystemExit("the deployment is split and no earlier deployment served one of its versions at 100 %: set ROLLBACK_VERSION")
    for d in deployments[1:]:
        others = [v for v in d["versions"] if v["version_id"] not in ids and v.get("percentage", 0) > 0]
        if others:
            print(max(others, key=lambda v: v["percentage"])["version_id"])
            sys.exit(0)
    raise SystemExit("no earlier deployment served another version: nothing to roll back to (set ROLLBACK_VERSION)")

else:
    raise SystemExit(f"unknown helper command {cmd}")
PY

py() { python3 -c "$PY_HELPER" "$@"; }

# --- small pieces -------------------------------------------------------------

readonly SAFE_WORD='^[A-Za-z0-9_@%+=:,./<>-]+$'
quote_words() { # prints its arguments as one shell-safe command line
  local out="" word
  for word in "$@"; do
    if [[ "$word" =~ $SAFE_WORD ]]; then
      out+="$word "
    else
      out+="'${word//\'/\'\\\'\'}' "
    fi
  done
  printf '%s' "${out% }"
}

# Runs wrangler with the environment's config; with --dry-run prints it.
wrangler_run() {
  if "$DRY_RUN"; then
    printf 'DRY-RUN: wrangler %s\n' "$(quote_words "$@")"
    return 0
  fi
  say "wrangler $(quote_words "$@")"
  "${WRANGLER_BIN[@]}" "$@" "${CONFIG_ARGS[@]}"
}

# Runs wrangler quietly, its stdout into $1; stderr into $1.err.
wrangler_capture() {
  local out="$1"
  shift
  "${WRANGLER_BIN[@]}" "$@" "${CONFIG_ARGS[@]}" >"$out" 2>"$out.err"
}

cleanup() {
  if [ -n "$WORK_DIR" ]; then rm -rf "$WORK_DIR"; fi
}

# --- configuration ------------------------------------------------------------

load_config() {
  CONFIG="${WRANGLER_CONFIG:-$ROOT/wrangler.toml}"
  [ -f "$CONFIG" ] || die 2 "no wrangler config at $CONFIG"
  if [ -n "${WRANGLER_CONFIG:-}" ]; then CONFIG_ARGS=(--config "$CONFIG"); fi
  command -v python3 >/dev/null || die 2 "python3 (3.11+, for tomllib) is needed to read $CONFIG"
  local bin="${WRANGLER:-$ROOT/node_modules/.bin/wrangler}"
  read -r -a WRANGLER_BIN <<<"$bin"
}

check_environment() {
  local env="$1" all known
  all="$(py envs "$CONFIG")" || die 2 "cannot read $CONFIG (above)"
  known="$(grep -vx dev <<<"$all" | tr '\n' ' ')"
  if [ "$env" = "dev" ]; then
    die 2 "environment 'dev' is the local stack (wrangler dev); deployable environments: ${known% }"
  fi
  if ! grep -qxF -- "$env" <<<"$all"; then
    die 2 "unknown environment '$env': $CONFIG defines ${known% }"
  fi
  WORKER_NAME="$(py env-get "$CONFIG" "$env" name)" || die 2 "[env.$env] in $CONFIG has no name"
}

check_token() {
  if ! "$DRY_RUN" && [ -z "${CLOUDFLARE_API_TOKEN:-}" ]; then
    die 2 "CLOUDFLARE_API_TOKEN is not set: create an API token with the 'Edit Cloudflare Workers' permissions and export it (in CI: a masked, protected variable), or use --dry-run"
  fi
}

validate_rulesets() {
  local ruleset rules_dir
  rules_dir="$(dirname "$CONFIG")/rules"
  ruleset="$(py env-get "$CONFIG" "$ENVIRONMENT" vars.GITLAB_RULES_CONFIG)" ||
    die 1 "[env.$ENVIRONMENT.vars] in $CONFIG does not set GITLAB_RULES_CONFIG"
  if [ ! -f "$rules_dir/$ruleset.json" ]; then
    die 1 "GITLAB_RULES_CONFIG = \"$ruleset\" for $ENVIRONMENT, but there is no $rules_dir/$ruleset.json (rulesets: $(find "$rules_dir" -maxdepth 1 -name '*.json' -printf '%f ' 2>/dev/null | sed 's/\.json / /g'))"
  fi
  local var
  for var in GITLAB_TOPOLOGY_SERVICE_URL GITLAB_PROXY_HOST; do
    py env-get "$CONFIG" "$ENVIRONMENT" "vars.$var" >/dev/null ||
      die 1 "[env.$ENVIRONMENT.vars] in $CONFIG does not set $var"
  done
  local -a rulesctl
  read -r -a rulesctl <<<"${RULESCTL:-cargo run -q --bin rulesctl --}"
  say "validating the rulesets ($(quote_words "${rulesctl[@]}" validate)); $ENVIRONMENT uses $ruleset"
  local status=0
  (cd "$ROOT" && "${rulesctl[@]}" validate) || status=$?
  case "$status" in
    0) ;;
    1) die 1 "rulesctl validate: the rulesets are invalid (see above); nothing was deployed" ;;
    *) die 1 "rulesctl validate failed to run (exit $status); nothing was deployed" ;;
  esac
}

# Exit 3 when a change lock covers the given environments (all when none).
check_change_lock() {
  local file="${CHANGE_LOCK_FILE:-$ROOT/change-lock.toml}" out status=0
  if [ ! -f "$file" ]; then
    [ -z "${CHANGE_LOCK_FILE:-}" ] || die 2 "CHANGE_LOCK_FILE=$file does not exist"
    say "no change lock file ($file): not locked"
    return 0
  fi
  out="$(py lock "$file" "${CHANGE_LOCK_NOW:-}" "$@")" || status=$?
  case "$status" in
    0)
      say "change lock: none active${1:+ for $*}"
      ;;
    10)
      if is_true "${CHANGE_LOCK_OVERRIDE:-}"; then
        warn "CHANGE_LOCK_OVERRIDE=true: deploying despite the change lock:"
        printf '%s\n' "$out" | sed 's/^/    /' >&2
        return 0
      fi
      printf 'deploy-worker.sh: a change lock is active, so nothing is deployed:\n' >&2
      printf '%s\n' "$out" | sed 's/^/    /' >&2
      printf 'Wait until it ends, or, for an approved emergency change, set CHANGE_LOCK_OVERRIDE=true.\n' >&2
      exit 3
      ;;
    *)
      if is_true "${CHANGE_LOCK_OVERRIDE:-}"; then
        warn "the change lock file $file is unreadable; CHANGE_LOCK_OVERRIDE=true, so going on"
        return 0
      fi
      die 2 "the change lock file $file is unreadable (see above): fix it; nothing is deployed while it is"
      ;;
  esac
}

build_worker() {
  if is_true "${SKIP_BUILD:-}"; then
    say "SKIP_BUILD=true: using build/ as it is"
  elif "$DRY_RUN"; then
    printf 'DRY-RUN: bash scripts/build-worker.sh\n'
  else
    say "building the worker"
    bash "$ROOT/scripts/build-worker.sh"
  fi
}

version_tag() {
  local tag="${DEPLOY_TAG:-${CI_COMMIT_SHORT_SHA:-}}"
  if [ -z "$tag" ]; then
    tag="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || true)"
    if [ -n "$tag" ] && [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
      tag="$tag-dirty"
    fi
  fi
  tag="${tag:-untagged}"
  printf '%s' "${tag:0:25}"
}

version_message() {
  local message="${DEPLOY_MESSAGE:-${CI_COMMIT_TITLE:-}}"
  [ -n "$message" ] || message="$(git -C "$ROOT" log -1 --format=%s 2>/dev/null || true)"
  message="${message:-deploy-worker.sh}"
  message="${message//$'\n'/ }"
  message="${message:0:100}"
  printf '%s' "${message%"${message##*[! ]}"}"
}

# A tag that names one commit's clean tree: only then is a version with the
# same tag the same code.
tag_is_reusable() { [[ "$1" != "untagged" && "$1" != *-dirty ]]; }

# --- percentages and health ---------------------------------------------------

parse_percentages() {
  local list="${ROLLOUT_PERCENTAGES:-$DEFAULT_PERCENTAGES}" p previous=0
  read -r -a STEPS <<<"$list"
  [ "${#STEPS[@]}" -gt 0 ] || die 2 "ROLLOUT_PERCENTAGES is empty"
  for p in "${STEPS[@]}"; do
    if ! [[ "$p" =~ ^[0-9]+$ ]] || [ "$p" -lt 1 ] || [ "$p" -gt 100 ]; then
      die 2 "ROLLOUT_PERCENTAGES=\"$list\": '$p' is not a whole percentage from 1 to 100"
    fi
    [ "$p" -gt "$previous" ] || die 2 "ROLLOUT_PERCENTAGES=\"$list\" must increase step by step"
    previous="$p"
  done
  if is_true "${OVERRIDE_LAST_PERCENTAGE:-}"; then
    STEPS=("${STEPS[-1]}")
  fi
}

health_check() { # percentage -> 0 when healthy; sets HEALTH_PROBLEM
  HEALTH_PROBLEM=""
  local status=0
  if [ -n "${HEALTH_CHECK_CMD:-}" ]; then
    say "health check: $HEALTH_CHECK_CMD"
    DEPLOY_ENVIRONMENT="$ENVIRONMENT" DEPLOY_WORKER_NAME="$WORKER_NAME" DEPLOY_PERCENTAGE="$1" \
      DEPLOY_NEW_VERSION="$NEW_VERSION" DEPLOY_OLD_VERSION="$OLD_VERSION" \
      bash -c "$HEALTH_CHECK_CMD" >&2 || status=$?
    if [ "$status" -ne 0 ]; then
      HEALTH_PROBLEM="HEALTH_CHECK_CMD ($HEALTH_CHECK_CMD) exited $status"
      return 1
    fi
  fi
  if [ -n "${HEALTH_CHECK_URL:-}" ]; then
    local code
    # The version override header sends the probe to the new version
    # whatever the split (it applies only to versions in the deployment).
    code="$(curl -sS -o /dev/null -w '%{http_code}' --max-time "${HEALTH_CHECK_TIMEOUT:-10}" \
      -H "Cloudflare-Workers-Version-Overrides: $WORKER_NAME=\"$NEW_VERSION\"" \
      "$HEALTH_CHECK_URL" 2>"$WORK_DIR/curl.err")" || true
    say "health check: $HEALTH_CHECK_URL answered ${code:-nothing} (version $NEW_VERSION)"
    if ! [[ "$code" =~ ^[23][0-9][0-9]$ ]]; then
      HEALTH_PROBLEM="HEALTH_CHECK_URL $HEALTH_CHECK_URL answered ${code:-nothing} ($(tr '\n' ' ' <"$WORK_DIR/curl.err")within ${HEALTH_CHECK_TIMEOUT:-10}s; 2xx/3xx expected)"
      return 1
    fi
  fi
  if [ -z "${HEALTH_CHECK_CMD:-}" ] && [ -z "${HEALTH_CHECK_URL:-}" ]; then
    warn "no HEALTH_CHECK_CMD or HEALTH_CHECK_URL: baking without a health check"
  fi
  return 0
}

bake_and_check() { # percentage
  local bake="${BAKE_SECONDS:-60}"
  [[ "$bake" =~ ^[0-9]+$ ]] || die 2 "BAKE_SECONDS=$bake is not a number of seconds"
  if "$DRY_RUN"; then
    printf '# then: bake %ss and run the health check\n' "$bake" >&2
    return 0
  fi
  if [ "$bake" -gt 0 ]; then
    say "baking for ${bake}s at $1%"
    sleep "$bake" &
    BAKE_PID="$!"
    wait "$BAKE_PID" # (so that a cancelled job rolls back at once: on_signal)
    BAKE_PID=""
  fi
  health_check "$1"
}

# --- traffic --------------------------------------------------------------------

describe_split() { # new-percentage -> "NEW at P%, OLD at 100-P%"
  if [ "$1" -ge 100 ]; then
    printf '%s at 100%%' "$NEW_VERSION"
  else
    printf '%s at %s%%, %s at %s%%' "$NEW_VERSION" "$1" "$OLD_VERSION" "$((100 - $1))"
  fi
}

# Puts OLD_VERSION back at 100 % after a failure; prints where traffic is and
# exits 1.
roll_back_and_exit() { # what failed, short form for the deployment message
  local what="$1" short="${2:-failure}"
  ROLLOUT_ACTIVE=false
  printf 'deploy-worker.sh: %s\n' "$what" >&2
  say "rolling back: $OLD_VERSION to 100%"
  if wrangler_run versions deploy "$OLD_VERSION@100%" --env "$ENVIRONMENT" --yes \
    --message "rollback by deploy-worker.sh after a $short of $TAG"; then
    printf 'deploy-worker.sh: ROLLED BACK: %s\ndeploy-worker.sh: traffic is back on %s at 100%% (the version that served before); %s serves nothing.\n' \
      "$what" "$OLD_VERSION" "$NEW_VERSION" >&2
    exit 1
  fi
  local now=""
  if wrangler_capture "$WORK_DIR/after.json" deployments status --env "$ENVIRONMENT" --json; then
    now="$(py deployment "$WORK_DIR/after.json" | awk '{printf "%s%s at %s%%", sep, $1, $2; sep=", "}')"
  fi
  printf 'deploy-worker.sh: %s\ndeploy-worker.sh: THE ROLLBACK FAILED too: traffic is NOT back on %s.\n' "$what" "$OLD_VERSION" >&2
  if [ -n "$now" ]; then
    printf 'deploy-worker.sh: the Cloudflare API says traffic is now: %s\n' "$now" >&2
  else
    printf 'deploy-worker.sh: the current state could not be read; the last state confirmed by wrangler was: %s\n' "$STATE" >&2
  fi
  printf 'deploy-worker.sh: run  deploy-worker.sh --rollback %s  or  wrangler versions deploy %s@100%% --env %s --yes\n' \
    "$ENVIRONMENT" "$OLD_VERSION" "$ENVIRONMENT" >&2
  exit 1
}

on_signal() {
  if [ -n "$BAKE_PID" ]; then kill "$BAKE_PID" 2>/dev/null || true; fi
  if "$ROLLOUT_ACTIVE"; then
    roll_back_and_exit "interrupted during the rollout (traffic was: $STATE)" "interruption"
  fi
  exit 130
}

deploy_step() { # percentage
  local p="$1"
  local -a specs=("$NEW_VERSION@$p%")
  [ "$p" -ge 100 ] || specs+=("$OLD_VERSION@$((100 - p))%")
  say "step: $(describe_split "$p")"
  local before
  before="$(output_lines)"
  if ! wrangler_run versions deploy "${specs[@]}" --env "$ENVIRONMENT" --yes \
    --message "deploy-worker.sh: $TAG at $p%"; then
    roll_back_and_exit "wrangler versions deploy failed at the $p% step (traffic was: $STATE)" "failure at $p%"
  fi
  # wrangler can exit 0 having deployed nothing (TOOLCHAIN.md): a deployment
  # counts only when wrangler reported its id.
  if ! "$DRY_RUN" && ! py output "$WRANGLER_OUTPUT_FILE_PATH" "$before" version-deploy >/dev/null; then
    roll_back_and_exit "wrangler versions deploy exited 0 at the $p% step but reported no deployment (traffic was: $STATE)" "failure at $p%"
  fi
  "$DRY_RUN" || STATE="$(describe_split "$p")"
  if ! bake_and_check "$p"; then
    roll_back_and_exit "health check failed at $p% ($HEALTH_PROBLEM)" "failed health check at $p%"
  fi
}

first_deploy() {
  say "$WORKER_NAME has no deployment yet: first deploy, straight to 100%"
  if ! wrangler_run deploy --env "$ENVIRONMENT" --tag "$TAG" --message "$MESSAGE"; then
    die 1 "wrangler deploy (first deploy of $WORKER_NAME) failed; nothing serves traffic from $WORKER_NAME yet"
  fi
  "$DRY_RUN" && return 0
  if ! bake_and_check 100; then
    die 1 "health check failed after the first deploy ($HEALTH_PROBLEM); there is no earlier version to roll back to: the new version serves 100%"
  fi
  say "done: first deploy of $WORKER_NAME ($TAG) serves 100%"
}

# Reads the deployment serving now into CURRENT_IDS/CURRENT_PCTS. Returns 1
# when the Worker has none yet (first deploy).
read_current_deployment() {
  CURRENT_IDS=()
  CURRENT_PCTS=()
  local file="$WORK_DIR/status.json"
  if ! wrangler_capture "$file" deployments status --env "$ENVIRONMENT" --json; then
    if grep -Eq 'code: (10007|10090)\]|has no deployments' "$file.err" "$file"; then
      return 1
    fi
    cat "$file.err" >&2
    die 1 "wrangler deployments status failed (above); nothing was changed"
  fi
  local id pct
  while read -r id pct; do
    CURRENT_IDS+=("$id")
    CURRENT_PCTS+=("$pct")
  done < <(py deployment "$file")
  [ "${#CURRENT_IDS[@]}" -gt 0 ] || return 1
}

version_tag_of() { # version id -> "tag created_on"
  local file="$WORK_DIR/version-$1.json"
  wrangler_capture "$file" versions view "$1" --env "$ENVIRONMENT" --json ||
    { cat "$file.err" >&2; die 1 "wrangler versions view $1 failed; nothing was changed"; }
  py version "$file"
}

output_lines() { # lines wrangler has written to WRANGLER_OUTPUT_FILE_PATH so far
  if [ -f "$WRANGLER_OUTPUT_FILE_PATH" ]; then wc -l <"$WRANGLER_OUTPUT_FILE_PATH"; else echo 0; fi
}

upload_version() {
  local before
  before="$(output_lines)"
  if ! wrangler_run versions upload --env "$ENVIRONMENT" --tag "$TAG" --message "$MESSAGE"; then
    die 1 "wrangler versions upload failed: nothing was deployed, traffic is unchanged ($STATE)"
  fi
  NEW_VERSION="$(py output "$WRANGLER_OUTPUT_FILE_PATH" "$before" version-upload)" ||
    die 1 "wrangler versions upload reported no version id in $WRANGLER_OUTPUT_FILE_PATH: nothing was deployed, traffic is unchanged ($STATE)"
  say "uploaded version $NEW_VERSION (tag $TAG)"
}

# Decides OLD_VERSION / NEW_VERSION from what serves now; see
# docs/deploying.md "Which version is old".
plan_rollout() {
  local n="${#CURRENT_IDS[@]}" reusable=false
  tag_is_reusable "$TAG" && reusable=true
  local -a tags=()
  local i info
  for ((i = 0; i < n; i++)); do
    info="$(version_tag_of "${CURRENT_IDS[i]}")"
    tags+=("${info%% *}")
  done
  if [ "$n" -eq 1 ]; then
    OLD_VERSION="${CURRENT_IDS[0]}"
    STATE="$OLD_VERSION at 100%"
    if "$reusable" && [ "${tags[0]}" = "$TAG" ]; then
      say "version $OLD_VERSION (tag $TAG) already serves 100% of $WORKER_NAME: nothing to deploy"
      exit 0
    fi
    return 0
  fi
  STATE="${CURRENT_IDS[0]} at ${CURRENT_PCTS[0]}%, ${CURRENT_IDS[1]} at ${CURRENT_PCTS[1]}%"
  local mine=-1
  if "$reusable"; then
    for ((i = 0; i < n; i++)); do
      [ "${tags[i]}" = "$TAG" ] && mine="$i"
    done
  fi
  if [ "$mine" -lt 0 ]; then
    die 1 "$WORKER_NAME is in the middle of another rollout ($STATE; tags ${tags[0]}, ${tags[1]}), not of $TAG: finish that rollout or undo it with  deploy-worker.sh --rollback $ENVIRONMENT  first; nothing was changed"
  fi
  NEW_VERSION="${CURRENT_IDS[mine]}"
  OLD_VERSION="${CURRENT_IDS[1 - mine]}"
  CURRENT_SHARE="${CURRENT_PCTS[mine]}"
  say "rollout of $TAG in progress: $STATE; going on with $NEW_VERSION against $OLD_VERSION (no new upload)"
}

deploy() {
  parse_percentages
  TAG="$(version_tag)"
  MESSAGE="$(version_message)"
  CURRENT_SHARE=0
  if "$DRY_RUN"; then
    wrangler_run deployments status --env "$ENVIRONMENT" --json
    printf '# if %s does not exist yet, instead of what follows: wrangler %s\n' "$WORKER_NAME" \
      "$(quote_words deploy --env "$ENVIRONMENT" --tag "$TAG" --message "$MESSAGE")" >&2
    wrangler_run versions upload --env "$ENVIRONMENT" --tag "$TAG" --message "$MESSAGE"
    NEW_VERSION="<new-version-id>"
    OLD_VERSION="<current-version-id>"
    local p
    for p in "${STEPS[@]}"; do deploy_step "$p"; done
    return 0
  fi
  if ! read_current_deployment; then
    first_deploy
    return 0
  fi
  plan_rollout
  [ -n "$NEW_VERSION" ] || upload_version
  local -a todo=()
  local p
  for p in "${STEPS[@]}"; do
    if ! is_true "${OVERRIDE_LAST_PERCENTAGE:-}" && [ "$p" -le "$CURRENT_SHARE" ]; then
      say "skipping $p%: $NEW_VERSION already has $CURRENT_SHARE%"
      continue
    fi
    todo+=("$p")
  done
  if [ "${#todo[@]}" -eq 0 ]; then
    say "nothing to do: $STATE"
    return 0
  fi
  ROLLOUT_ACTIVE=true
  for p in "${todo[@]}"; do deploy_step "$p"; done
  ROLLOUT_ACTIVE=false
  say "done: $WORKER_NAME serves $STATE"
}

rollback() {
  local target="${ROLLBACK_VERSION:-}"
  if "$DRY_RUN"; then
    [ -n "$target" ] || wrangler_run deployments list --env "$ENVIRONMENT" --json
    wrangler_run versions deploy "${target:-<previous-version-id>}@100%" --env "$ENVIRONMENT" --yes --message "rollback by deploy-worker.sh"
    return 0
  fi
  if [ -z "$target" ]; then
    local file="$WORK_DIR/deployments.json"
    wrangler_capture "$file" deployments list --env "$ENVIRONMENT" --json ||
      { cat "$file.err" >&2; die 1 "wrangler deployments list failed; nothing was changed"; }
    target="$(py previous "$file" 2>&1)" || die 1 "cannot tell which version to roll back to: $target"
  fi
  say "rolling $WORKER_NAME back to $target at 100%"
  wrangler_run versions deploy "$target@100%" --env "$ENVIRONMENT" --yes --message "rollback by deploy-worker.sh" ||
    die 1 "wrangler versions deploy $target@100% failed: the rollback did not happen (see above)"
  say "done: $target serves 100% of $WORKER_NAME"
}

main() {
  while [ "$#" -gt 0 ]; do
    case "$1" in
      -h | --help) usage; exit 0 ;;
      --dry-run) DRY_RUN=true ;;
      --rollback) MODE=rollback ;;
      --check-lock) MODE=check-lock ;;
      -*) usage >&2; die 2 "unknown option $1" ;;
      *)
        if [ "$MODE" = check-lock ]; then
          LOCK_ENVIRONMENTS+=("$1")
        elif [ -z "$ENVIRONMENT" ]; then
          ENVIRONMENT="$1"
        else
          usage >&2
          die 2 "unexpected argument $1"
        fi
        ;;
    esac
    shift
  done
  load_config
  if [ "$MODE" = check-lock ]; then
    local env
    for env in "${LOCK_ENVIRONMENTS[@]}"; do check_environment "$env"; done
    check_change_lock "${LOCK_ENVIRONMENTS[@]}"
    exit 0
  fi
  if [ -z "$ENVIRONMENT" ]; then
    usage >&2
    exit 2
  fi
  check_environment "$ENVIRONMENT"
  check_token
  WORK_DIR="$(mktemp -d "${TMPDIR:-/tmp}/deploy-worker.XXXXXX")"
  trap cleanup EXIT
  # wrangler records uploaded version ids and deployment ids here.
  export WRANGLER_OUTPUT_FILE_PATH="${WRANGLER_OUTPUT_FILE_PATH:-$WORK_DIR/wrangler-output.ndjson}"
  trap on_signal INT TERM
  say "$MODE $WORKER_NAME (--env $ENVIRONMENT)$("$DRY_RUN" && printf ' [dry run]')"
  if [ "$MODE" = rollback ]; then
    rollback
    exit 0
  fi
  validate_rulesets
  check_change_lock "$ENVIRONMENT"
  build_worker
  deploy
}

main "$@"
