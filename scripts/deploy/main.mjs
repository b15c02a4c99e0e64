// The deploy program behind deploy-worker.sh (its usage is below and in
// docs/deploying.md): arguments, configuration, then a deploy, a rollback
// or a change lock check. Exit statuses: 0 done, 1 deploy failed, 2 usage or
// configuration, 3 change lock active, 130 interrupted outside a rollout.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { CloudflareApi } from "./cloudflare-api.mjs";
import { Deploy } from "./deploy.mjs";
import { detachRoutes } from "./detach-routes.mjs";
import { parseArguments, USAGE } from "./arguments.mjs";
import { DeployError, EXIT, fail, PROGRAM, say } from "./log.mjs";
import { buildWorker, checkChangeLock, checkEnvironment, checkPlaceholders, checkSmokeSecret, checkToken, secretsFileNames, validateRulesets } from "./preflight.mjs";
import { rollback } from "./rollback.mjs";
import { PlanError } from "./rollout-plan.mjs";
import { newRecord, RecordFile } from "./rollout-record.mjs";
import { readSettings } from "./settings.mjs";
import { checkTailWorker } from "./tail-worker.mjs";
import { readWranglerConfig } from "./wrangler-config.mjs";
import { Wrangler } from "./wrangler.mjs";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

async function main(argv) {
  const args = parseArguments(argv);
  if (args.help) return void process.stdout.write(USAGE);
  process.env.WRANGLER_SEND_METRICS = "false";
  process.env.WRANGLER_HIDE_BANNER = "true";
  process.env.CLOUDFLARE_CF_FETCH_ENABLED = "false";
  const settings = readSettings(process.env, ROOT);
  if (settings.metrics.problems.length) fail(EXIT.USAGE, settings.metrics.problems.join("; "));
  if (settings.shadow.problems.length) fail(EXIT.USAGE, settings.shadow.problems.join("; "));
  if (!fs.existsSync(settings.configFile)) fail(EXIT.USAGE, `no wrangler config at ${settings.configFile}`);
  let config;
  try {
    config = readWranglerConfig(settings.configFile);
  } catch (e) {
    fail(EXIT.USAGE, `cannot read ${settings.configFile}: ${e.message}`);
  }
  if (args.mode === "check-lock") {
    for (const name of args.lockEnvironments) checkEnvironment(config, name);
    return checkChangeLock(settings, args.lockEnvironments);
  }
  if (!args.environment) fail(EXIT.USAGE, USAGE.trimEnd(), { raw: true });
  const env = checkEnvironment(config, args.environment);
  if (args.mode === "deploy") checkPlaceholders(settings, config, env, args.dryRun);
  checkToken(settings, args.dryRun);
  const workDir = fs.mkdtempSync(path.join(os.tmpdir(), "deploy-worker."));
  process.on("exit", () => fs.rmSync(workDir, { recursive: true, force: true }));
  const wrangler = new Wrangler({
    bin: settings.wrangler,
    configArgs: settings.configGiven ? ["--config", settings.configFile] : [],
    outputFile: settings.outputFile || path.join(workDir, "wrangler-output.ndjson"),
    env: env.key,
    dryRun: args.dryRun,
  });
  if (args.mode === "detach-routes") {
    say(`detach-routes ${env.workerName} (--env ${env.key})${args.dryRun ? " [dry run]" : ""}`);
    return detachRoutes({ api: new CloudflareApi(), env, wrangler, dryRun: args.dryRun });
  }
  checkSmokeSecret(settings);
  say(`${args.mode} ${env.workerName} (--env ${env.key})${args.dryRun ? " [dry run]" : ""}`);
  if (args.mode === "rollback") {
    return rollback({ settings, env, wrangler, dryRun: args.dryRun, recordFile: settings.rollbackRecord });
  }

  if (args.takeOverRoutes) settings.takeOverRoutes = true;
  if (args.attachRoutes) settings.attachRoutes = true;
  if (settings.secretsFile) settings.secretNames = secretsFileNames(settings.secretsFile);
  await validateRulesets(settings, config, env);
  const tail = checkTailWorker(settings, env);
  checkChangeLock(settings, [env.key]);
  await buildWorker(settings, args.dryRun);

  const recordFile = args.dryRun ? null : settings.recordFile || path.join(ROOT, "rollout-records", `${env.key}.json`);
  const record = new RecordFile(recordFile, newRecord({ environment: env.key, workerName: env.workerName, tag: settings.tag, message: settings.message }));
  const controller = new AbortController();
  // The tail worker's wrangler: the same output file; its config is in its arguments.
  const tailWrangler = tail && new Wrangler({ ...wrangler, configArgs: [] });
  const deploy = new Deploy({ settings, config, env, wrangler, tail, tailWrangler, api: new CloudflareApi(), record, dryRun: args.dryRun, signal: controller.signal, workDir });
  const onSignal = (name) => {
    if (deploy.rolloutActive) {
      say(`${name}: stopping the rollout`);
      controller.abort();
    } else {
      if (!args.dryRun) record.finish("interrupted", { problem: `${name} before traffic moved` });
      process.exit(EXIT.INTERRUPTED);
    }
  };
  process.on("SIGINT", () => onSignal("SIGINT"));
  process.on("SIGTERM", () => onSignal("SIGTERM"));
  try {
    await deploy.run();
  } finally {
    if (recordFile && fs.existsSync(recordFile)) say(`rollout record: ${recordFile}`);
  }
}

main(process.argv.slice(2)).then(
  () => process.exit(EXIT.OK),
  (e) => {
    if (e instanceof DeployError) {
      process.stderr.write(e.raw ? `${e.message}\n` : `${PROGRAM}: error: ${e.message}\n`);
      process.exit(e.code);
    }
    if (e instanceof PlanError) {
      process.stderr.write(`${PROGRAM}: error: ${e.message}\n`);
      process.exit(EXIT.USAGE);
    }
    process.stderr.write(`${PROGRAM}: internal error: ${e.stack}\n`);
    process.exit(EXIT.FAILED);
  },
);
