// What runs before anything is uploaded: the environment exists and has no
// placeholder left, the token is there, the rulesets are valid, the
// configuration has no problem, no change lock is active, the build.
import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { ChangeLockError, evaluateChangeLock, formatTime, parseNow, readChangeLock } from "./change-lock.mjs";
import { EXIT, fail, say, warn } from "./log.mjs";
import { quoteWords } from "./shell-words.mjs";
import { cellsProblems } from "./cells.mjs";
import { smokeUrlProblem } from "./health-check.mjs";
import { PLACEHOLDER, placeholderPaths } from "./placeholders.mjs";

const REQUIRED_VARS = ["GITLAB_TOPOLOGY_SERVICE_URL", "GITLAB_PROXY_HOST"];

/** The environment's section of wrangler.toml; exit 2 for dev or an unknown name. */
export function checkEnvironment(config, name) {
  const known = config.deployable.join(" ");
  if (name === "dev") fail(EXIT.USAGE, `environment 'dev' is the local stack (wrangler dev); deployable environments: ${known}`);
  const env = config.environment(name);
  if (!env) fail(EXIT.USAGE, `unknown environment '${name}': ${config.file} defines ${known}`);
  if (!env.workerName) fail(EXIT.USAGE, `[env.${name}] in ${config.file} has no name`);
  return env;
}

export function checkToken(settings, dryRun) {
  if (!dryRun && !settings.token) {
    fail(EXIT.USAGE, "CLOUDFLARE_API_TOKEN is not set: create an API token with the 'Edit Cloudflare Workers' permissions and export it (in CI: a masked, protected variable), or use --dry-run");
  }
}

/**
 * The router answers a request carrying Cloudflare-Workers-Version-Overrides
 * with 403 unless it carries the smoke-test secret (the Worker secret
 * GITLAB_SMOKE_TEST_SECRET): a HEALTH_CHECK_URL probe of a rollout needs it,
 * and sends it only over https: (or http: to a loopback stand-in). Checked
 * here: the URL; the secret itself is required once the deploy knows it is
 * a rollout (requireSmokeSecret), as a first deploy's probes carry no
 * override and need no secret.
 */
export function checkSmokeSecret(settings) {
  const problem = settings.healthUrl && settings.smokeSecret ? smokeUrlProblem(settings.healthUrl) : null;
  if (problem) fail(EXIT.USAGE, `${problem}; nothing was deployed`);
}

/** A rollout's smoke test reaches the new version through an override: it needs SMOKE_TEST_SECRET. */
export function requireSmokeSecret(settings) {
  if (settings.healthUrl && !settings.smokeSecret) {
    fail(
      EXIT.USAGE,
      "HEALTH_CHECK_URL is set but SMOKE_TEST_SECRET is not: the router refuses (403) a version override without the smoke-test secret. Set SMOKE_TEST_SECRET to the Worker secret GITLAB_SMOKE_TEST_SECRET of this environment (wrangler versions secret put GITLAB_SMOKE_TEST_SECRET --env <env>; in CI: a masked, protected variable); nothing was deployed",
    );
  }
}

/**
 * Refuses an environment whose section of wrangler.toml still has a
 * REPLACE_ME value (exit 2), listing every one. ALLOW_PLACEHOLDERS=true
 * lets a dry run go on with a warning (the CI validate job, on the
 * repository as shipped); never a deploy.
 */
export function checkPlaceholders(settings, config, env, dryRun) {
  const paths = placeholderPaths(env.raw);
  if (paths.length === 0) return;
  const lines = paths.map((p) => `    [env.${env.key}] ${p}`).join("\n");
  const head = `${config.file} still has ${paths.length} ${PLACEHOLDER} placeholder${paths.length === 1 ? "" : "s"} for ${env.key}:\n${lines}`;
  if (dryRun && settings.allowPlaceholders) {
    warn(`${head}\nALLOW_PLACEHOLDERS=true: the dry run goes on; a deploy refuses this configuration`);
    return;
  }
  const allow = settings.allowPlaceholders ? " (ALLOW_PLACEHOLDERS applies to --dry-run only)" : "";
  fail(EXIT.USAGE, `${head}\nput the real values in first (docs/deploying.md, "First deploy to a new account"); nothing was deployed${allow}`);
}

/** The names a SECRETS_FILE sets (JSON object or KEY=value lines, as wrangler reads it); exit 2 when unreadable. */
export function secretsFileNames(file) {
  let text;
  try {
    text = fs.readFileSync(file, "utf8");
  } catch (e) {
    fail(EXIT.USAGE, `SECRETS_FILE=${file}: ${e.code === "ENOENT" ? "no such file" : e.message}; nothing was deployed`);
  }
  try {
    const parsed = JSON.parse(text);
    if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) return Object.keys(parsed);
  } catch {}
  return text
    .split("\n")
    .map((l) => l.match(/^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=/)?.[1])
    .filter(Boolean);
}

function run(cmd, args, cwd) {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { cwd, stdio: ["ignore", 2, 2] });
    child.on("error", () => resolve(127));
    child.on("close", (code) => resolve(code ?? 128));
  });
}

/** The environment's ruleset exists, its vars are set, `rulesctl validate` passes and `rulesctl config check` finds no problem. */
export async function validateRulesets(settings, config, env) {
  const rulesDir = path.join(path.dirname(config.file), "rules");
  const ruleset = env.vars.GITLAB_RULES_CONFIG;
  if (ruleset === undefined) fail(EXIT.FAILED, `[env.${env.key}.vars] in ${config.file} does not set GITLAB_RULES_CONFIG`);
  if (!fs.existsSync(path.join(rulesDir, `${ruleset}.json`))) {
    const present = fs.existsSync(rulesDir) ? fs.readdirSync(rulesDir).filter((f) => f.endsWith(".json")).map((f) => f.slice(0, -5)) : [];
    fail(EXIT.FAILED, `GITLAB_RULES_CONFIG = "${ruleset}" for ${env.key}, but there is no ${rulesDir}/${ruleset}.json (rulesets: ${present.join(" ")})`);
  }
  for (const name of REQUIRED_VARS) {
    if (env.vars[name] === undefined) fail(EXIT.FAILED, `[env.${env.key}.vars] in ${config.file} does not set ${name}`);
  }
  // (a REPLACE_ME left here got this far only in a dry run with ALLOW_PLACEHOLDERS)
  if (env.vars.GITLAB_CELLS !== undefined && !String(env.vars.GITLAB_CELLS).includes(PLACEHOLDER)) {
    const problems = cellsProblems(String(env.vars.GITLAB_CELLS));
    if (problems.length > 0) {
      fail(EXIT.FAILED, `GITLAB_CELLS in [env.${env.key}.vars] of ${config.file} is invalid; nothing was deployed:\n  ${problems.join("\n  ")}`);
    }
    say(`GITLAB_CELLS lists ${JSON.parse(env.vars.GITLAB_CELLS).length} cells`);
  }
  say(`validating the rulesets (${quoteWords([...settings.rulesctl, "validate"])}); ${env.key} uses ${ruleset}`);
  const [cmd, ...args] = settings.rulesctl;
  const status = await run(cmd, [...args, "validate"], settings.root);
  if (status === 1) fail(EXIT.FAILED, "rulesctl validate: the rulesets are invalid (see above); nothing was deployed");
  if (status !== 0) fail(EXIT.FAILED, `rulesctl validate failed to run (exit ${status}); nothing was deployed`);
  await checkConfiguration(settings, config, env);
}

/**
 * The environment's [vars] and secret names through the router's own parser
 * (`rulesctl config check`): any problem stops the deploy before anything is
 * uploaded. The secrets it is told of: GITLAB_SMOKE_TEST_SECRET when the
 * deploy has SMOKE_TEST_SECRET, and wrangler.toml's [env.<env>.secrets]
 * required (read by rulesctl itself).
 */
export async function checkConfiguration(settings, config, env) {
  const args = ["config", "check", "--env", env.key, "--config", config.file, "--json"];
  if (settings.smokeSecret) args.push("--secret", "GITLAB_SMOKE_TEST_SECRET");
  say(`checking the configuration (${quoteWords([...settings.rulesctl, ...args])})`);
  const [cmd, ...rest] = settings.rulesctl;
  const { status, stdout } = await runCapture(cmd, [...rest, ...args], settings.root);
  let result = null;
  try {
    result = stdout.trim() ? JSON.parse(stdout) : null;
  } catch {
    process.stderr.write(stdout);
  }
  const lines = (result?.problems ?? []).map((p) => `${p.level} ${p.message}`);
  for (const line of lines) process.stderr.write(`    ${line}\n`);
  if (status === 1) {
    const failing = lines.filter((l) => !l.startsWith("note "));
    fail(
      EXIT.FAILED,
      `the configuration of [env.${env.key}] in ${config.file} has ${failing.length || "some"} problem${failing.length === 1 ? "" : "s"}; nothing was deployed:\n  ${failing.join("\n  ")}`,
    );
  }
  if (status !== 0) fail(EXIT.FAILED, `rulesctl config check failed to run (exit ${status}); nothing was deployed`);
}

function runCapture(cmd, args, cwd) {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { cwd, stdio: ["ignore", "pipe", 2] });
    let stdout = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.on("error", () => resolve({ status: 127, stdout }));
    child.on("close", (code) => resolve({ status: code ?? 128, stdout }));
  });
}

/** Exit 3 while a change lock covers the environments (all when none); exit 2 for a bad lock file. */
export function checkChangeLock(settings, environments) {
  const file = settings.lockFile;
  if (!fs.existsSync(file)) {
    if (settings.lockFileGiven) fail(EXIT.USAGE, `CHANGE_LOCK_FILE=${file} does not exist`);
    say(`no change lock file (${file}): not locked`);
    return;
  }
  let result;
  let now;
  try {
    now = settings.lockNow ? parseNow(settings.lockNow) : Date.now();
    result = evaluateChangeLock(readChangeLock(file), { now, environments, file });
  } catch (e) {
    if (!(e instanceof ChangeLockError)) throw e;
    process.stderr.write(`${e.message}\n`);
    if (settings.lockOverride) {
      warn(`the change lock file ${file} is unreadable; CHANGE_LOCK_OVERRIDE=true, so going on`);
      return;
    }
    fail(EXIT.USAGE, `the change lock file ${file} is unreadable (see above): fix it; nothing is deployed while it is`);
  }
  for (const text of result.upcoming) process.stderr.write(`upcoming change lock: ${text}\n`);
  if (result.active.length === 0) {
    say(`change lock: none active${environments.length ? ` for ${environments.join(" ")}` : ""}`);
    return;
  }
  const lines = [`now is ${formatTime(now)}`, ...result.active.map((t) => `change lock active from ${t}`)].map((l) => `    ${l}\n`).join("");
  if (settings.lockOverride) {
    warn("CHANGE_LOCK_OVERRIDE=true: deploying despite the change lock:");
    process.stderr.write(lines);
    return;
  }
  fail(
    EXIT.LOCKED,
    `deploy-worker.sh: a change lock is active, so nothing is deployed:\n${lines}Wait until it ends, or, for an approved emergency change, set CHANGE_LOCK_OVERRIDE=true.`,
    { raw: true },
  );
}

/** scripts/build-worker.sh, unless SKIP_BUILD (dry run: printed). */
export async function buildWorker(settings, dryRun) {
  if (settings.skipBuild) return say("SKIP_BUILD=true: using build/ as it is");
  if (dryRun) return void process.stdout.write("DRY-RUN: bash scripts/build-worker.sh\n");
  say("building the worker");
  const status = await run("bash", [path.join(settings.root, "scripts/build-worker.sh")], settings.root);
  if (status !== 0) fail(EXIT.FAILED, `scripts/build-worker.sh failed (exit ${status}); nothing was deployed`);
}
