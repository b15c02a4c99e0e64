// The command line of deploy-worker.sh.
import { EXIT, fail, PROGRAM } from "./log.mjs";

export const USAGE = `Usage:
  deploy-worker.sh <environment> [--dry-run] [--take-over-routes] [--attach-routes]
  deploy-worker.sh --rollback <environment> [--dry-run]
  deploy-worker.sh --check-lock [<environment>...]
  deploy-worker.sh --detach-routes <environment> [--dry-run]

Deploys the router to a wrangler environment of wrangler.toml (staging,
production, registry-staging, registry-production): validates the rulesets,
checks the change lock, builds, checks the routes are published, uploads a
new version, smoke-tests it alone, then moves traffic to it in the steps of
ROLLOUT_PERCENTAGES (default "5 25 50 75 100"), checking health after each
step and rolling back on failure. ROLLOUT_RECORD names the JSON record a
deploy writes; --rollback with ROLLBACK_RECORD undoes that deploy.
--detach-routes deletes the environment's routes to its Worker (the kill
switch: requests go to the zone's origin; docs/operations.md) and marks the
Worker's deployment so; a deploy then refuses to attach them again unless
told to with --attach-routes (or ATTACH_ROUTES=true).
--dry-run prints the wrangler commands instead of running them.
A first deploy (the Worker serves none of its routes yet) goes to the
canary route (CANARY_ROUTE) first and moves the routes to the router only
after the canary's health check passes. A route that another Worker serves
is taken over only with --take-over-routes (or TAKE_OVER_ROUTES=true).
A configuration that still has a REPLACE_ME value is refused.
See the top of deploy-worker.sh and docs/deploying.md for the variables.
`;

/** argv -> {mode, environment, lockEnvironments, dryRun, takeOverRoutes, attachRoutes}; exit 2 on a mistake. */
export function parseArguments(argv) {
  const args = { mode: "deploy", environment: "", lockEnvironments: [], dryRun: false, help: false, takeOverRoutes: false, attachRoutes: false };
  for (const arg of argv) {
    if (arg === "-h" || arg === "--help") args.help = true;
    else if (arg === "--dry-run") args.dryRun = true;
    else if (arg === "--take-over-routes") args.takeOverRoutes = true;
    else if (arg === "--attach-routes") args.attachRoutes = true;
    else if (arg === "--rollback") args.mode = "rollback";
    else if (arg === "--check-lock") args.mode = "check-lock";
    else if (arg === "--detach-routes") args.mode = "detach-routes";
    else if (arg.startsWith("-")) fail(EXIT.USAGE, `${USAGE}\n${PROGRAM}: error: unknown option ${arg}`, { raw: true });
    else if (args.mode === "check-lock") args.lockEnvironments.push(arg);
    else if (!args.environment) args.environment = arg;
    else fail(EXIT.USAGE, `${USAGE}\n${PROGRAM}: error: unexpected argument ${arg}`, { raw: true });
  }
  for (const [given, flag] of [[args.takeOverRoutes, "--take-over-routes"], [args.attachRoutes, "--attach-routes"]]) {
    if (given && args.mode !== "deploy") fail(EXIT.USAGE, `${USAGE}\n${PROGRAM}: error: ${flag} is for a deploy`, { raw: true });
  }
  return args;
}
