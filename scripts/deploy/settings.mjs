// The environment variables of deploy-worker.sh, read once, with their
// defaults (docs/deploying.md, "Variables"), and the version's tag and
// message from CI or git.
import { spawnSync } from "node:child_process";
import path from "node:path";
import { readMetricsSettings } from "./analytics.mjs";
import { readRoutingSettings } from "./routing-checks.mjs";
import { readShadowSettings } from "./shadow-gate.mjs";

/** "true", "1" and "yes" are true. */
export function isTrue(value) {
  return ["true", "1", "yes"].includes(String(value ?? ""));
}

/** Splits a command given as one string (WRANGLER, RULESCTL) into words. */
export function words(command) {
  return command.trim().split(/\s+/).filter(Boolean);
}

function git(root, args) {
  const r = spawnSync("git", ["-C", root, ...args], { encoding: "utf8" });
  return r.status === 0 ? r.stdout.trim() : "";
}

/** DEPLOY_TAG, CI_COMMIT_SHORT_SHA, or the git short sha (+"-dirty"); at most 25 characters. */
export function versionTag(env, root) {
  let tag = env.DEPLOY_TAG || env.CI_COMMIT_SHORT_SHA || "";
  if (!tag) {
    tag = git(root, ["rev-parse", "--short", "HEAD"]);
    if (tag && git(root, ["status", "--porcelain", "--untracked-files=no"])) tag += "-dirty";
  }
  return (tag || "untagged").slice(0, 25);
}

/** DEPLOY_MESSAGE, CI_COMMIT_TITLE, or the last commit's subject; one line, at most 100 characters. */
export function versionMessage(env, root) {
  const message = env.DEPLOY_MESSAGE || env.CI_COMMIT_TITLE || git(root, ["log", "-1", "--format=%s"]) || "deploy-worker.sh";
  return message.replaceAll("\n", " ").slice(0, 100).trimEnd();
}

/** Everything the program reads from its environment. */
export function readSettings(env, root) {
  return {
    root,
    configFile: env.WRANGLER_CONFIG || path.join(root, "wrangler.toml"),
    configGiven: Boolean(env.WRANGLER_CONFIG),
    // The tail worker's config: tail-worker/wrangler.toml beside the router's.
    tailConfigFile: env.TAIL_WORKER_CONFIG || path.join(path.dirname(env.WRANGLER_CONFIG || path.join(root, "wrangler.toml")), "tail-worker", "wrangler.toml"),
    wrangler: words(env.WRANGLER || path.join(root, "node_modules/.bin/wrangler")),
    rulesctl: words(env.RULESCTL || "cargo run -q --bin rulesctl --"),
    token: env.CLOUDFLARE_API_TOKEN || "",
    percentages: env.ROLLOUT_PERCENTAGES,
    overrideLast: isTrue(env.OVERRIDE_LAST_PERCENTAGE),
    bakeSeconds: env.BAKE_SECONDS ?? "60",
    healthCmd: env.HEALTH_CHECK_CMD || "",
    healthUrl: env.HEALTH_CHECK_URL || "",
    healthTimeout: env.HEALTH_CHECK_TIMEOUT || "10",
    smokeSecret: env.SMOKE_TEST_SECRET || "",
    lockFile: env.CHANGE_LOCK_FILE || path.join(root, "change-lock.toml"),
    lockFileGiven: Boolean(env.CHANGE_LOCK_FILE),
    lockOverride: isTrue(env.CHANGE_LOCK_OVERRIDE),
    lockNow: env.CHANGE_LOCK_NOW || "",
    skipBuild: isTrue(env.SKIP_BUILD),
    rollbackVersion: env.ROLLBACK_VERSION || "",
    recordFile: env.ROLLOUT_RECORD || "",
    rollbackRecord: env.ROLLBACK_RECORD || "",
    outputFile: env.WRANGLER_OUTPUT_FILE_PATH || "",
    // The first deploy (docs/deploying.md, "First deploy to a new account").
    takeOverRoutes: isTrue(env.TAKE_OVER_ROUTES),
    // Attach routes the kill switch detached (--detach-routes): only when told to.
    attachRoutes: isTrue(env.ATTACH_ROUTES),
    canaryRoute: env.CANARY_ROUTE || "",
    canaryHealthUrl: env.CANARY_HEALTH_CHECK_URL || "",
    secretsFile: env.SECRETS_FILE || "",
    allowPlaceholders: isTrue(env.ALLOW_PLACEHOLDERS),
    // The routing checks and the bake's metrics comparison (routing-checks.mjs, analytics.mjs).
    routing: readRoutingSettings(env),
    metrics: readMetricsSettings(env),
    // A ruleset's promotion, checked against its shadow evaluation (shadow-gate.mjs).
    shadow: readShadowSettings(env),
    tag: versionTag(env, root),
    message: versionMessage(env, root),
  };
}
