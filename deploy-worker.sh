#!/usr/bin/env bash
# Deploys the GitLab Cells HTTP router to one wrangler environment: checks
# its routes are published, uploads a new Worker version, smoke-tests it
# alone (in the deployment at 0 %, through Cloudflare's version override
# header), then moves traffic to it in steps with a health check after each,
# rolling back to the version that served before when one fails. The rollout
# itself is the Node program in scripts/deploy/ (main.mjs); this file is its
# entry point. docs/deploying.md is the operator's guide; SPEC.md §8 the
# contract.
#
#   deploy-worker.sh <environment> [--dry-run] [--take-over-routes] [--attach-routes]
#                                                   validate, check the change
#                                                   lock, build, upload, roll out
#   deploy-worker.sh --rollback <environment> [--dry-run]
#                                                   put the previous version back
#                                                   at 100 % (ignores the lock)
#   deploy-worker.sh --check-lock [<environment>...]
#                                                   exit 3 when a change lock is
#                                                   active (for the CI job)
#   deploy-worker.sh --detach-routes <environment> [--dry-run]
#                                                   the kill switch: delete the
#                                                   environment's routes to its
#                                                   Worker (docs/operations.md)
#
# Environment (defaults in brackets):
#   CLOUDFLARE_API_TOKEN        required, except with --dry-run (its permissions:
#                               docs/operations.md, "API token permissions")
#   CLOUDFLARE_ACCOUNT_ID       the account (wrangler asks the API when unset)
#   CLOUDFLARE_API_BASE_URL     [Cloudflare's] API base, for wrangler and the routes check
#   ROLLOUT_PERCENTAGES         ["5 25 50 75 100"] traffic steps for the new version
#   OVERRIDE_LAST_PERCENTAGE    [false] true: only the last listed step
#   BAKE_SECONDS                [60] wait after each step before the health check
#   SMOKE_DELAY_SECONDS         [5] wait after the 0 % deployment before the smoke test
#   HEALTH_CHECK_CMD            shell command; exit 0 = healthy (it gets
#                               DEPLOY_ENVIRONMENT, DEPLOY_WORKER_NAME,
#                               DEPLOY_PERCENTAGE (0 = smoke test),
#                               DEPLOY_NEW_VERSION, DEPLOY_OLD_VERSION)
#   HEALTH_CHECK_URL            URL that must answer 2xx/3xx; requested with
#                               Cloudflare-Workers-Version-Overrides naming
#                               the new version
#   HEALTH_CHECK_TIMEOUT        [10] seconds for HEALTH_CHECK_URL
#   ROUTING_CHECKS              [true] with HEALTH_CHECK_URL, a request of each
#                               rule family through the new version, checked
#                               for the rule and cell the router names
#                               (docs/deploying.md, "Routing checks")
#   CANARY_ROUTE                [<worker name>.<zone>/*] a first deploy's canary
#                               route, in the zone of the environment's routes
#   CANARY_HEALTH_CHECK_URL     [HEALTH_CHECK_URL on the canary's host] the
#                               canary's health check (no override header)
#   SECRETS_FILE                a first deploy uploads these secrets with the
#                               router (JSON or NAME=value lines, wrangler's
#                               --secrets-file)
#   TAKE_OVER_ROUTES            [false] true: as --take-over-routes, move the
#                               routes another Worker serves to this one
#   ATTACH_ROUTES               [false] true: as --attach-routes, attach the
#                               routes --detach-routes detached (else refused)
#   ALLOW_PLACEHOLDERS          [false] true: a --dry-run only warns about
#                               REPLACE_ME values (a deploy refuses them)
#   CHANGE_LOCK_FILE            [change-lock.toml beside this script]
#   CHANGE_LOCK_OVERRIDE        [false] true: deploy even during a change lock
#   CHANGE_LOCK_NOW             ISO 8601 time used as "now" (tests)
#   SKIP_BUILD                  [false] true: use build/ as it is
#   DEPLOY_TAG                  [CI_COMMIT_SHORT_SHA or git short sha] version tag
#   DEPLOY_MESSAGE              [CI_COMMIT_TITLE or the last commit's subject]
#   ROLLOUT_RECORD              where a deploy writes its JSON rollout record
#                               [rollout-records/<environment>.json beside this script]
#   ROLLBACK_RECORD             --rollback: undo the deploy of this rollout record
#                               (unset: the deployment history decides)
#   ROLLBACK_VERSION            --rollback: this version instead of the previous one
#   WRANGLER                    [node_modules/.bin/wrangler]
#   WRANGLER_CONFIG             [wrangler.toml beside this script]; its rules/
#                               directory holds the rulesets
#   TAIL_WORKER_CONFIG          [tail-worker/wrangler.toml beside WRANGLER_CONFIG]
#                               the tail worker the environment's tail_consumers
#                               names, deployed before the router
#   RULESCTL                    [cargo run -q --bin rulesctl --] ruleset validator
#
# Exit status: 0 done (or nothing to do), 1 deploy failed (validation, wrangler,
# routes, smoke test, health check: the message says where traffic is), 2 usage
# or configuration error, 3 change lock active.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly ROOT

die() {
  printf 'deploy-worker.sh: error: %s\n' "$*" >&2
  exit 2
}

# The project's own Node (toolchain/node), installed on first use: it runs
# scripts/deploy/main.mjs and wrangler.
source "$ROOT/scripts/node-env.sh"
[ -f "$ROOT/node_modules/smol-toml/package.json" ] ||
  die "the npm packages are not installed in $ROOT/node_modules: run  bash scripts/setup.sh --npm-only  (npm ci)"

# exec: signals (a cancelled CI job's SIGTERM) reach the program, which rolls back.
exec node "$ROOT/scripts/deploy/main.mjs" "$@"
