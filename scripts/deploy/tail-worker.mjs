// The router's tail consumer (tail-worker/; docs/operations.md, "Errors to
// Sentry: the tail worker"): the router's environment names it in
// `tail_consumers`, so it is deployed first, with its own wrangler config
// and the same environment name, straight to 100 % (it serves no request).
import fs from "node:fs";
import { readWranglerConfig } from "./wrangler-config.mjs";
import { EXIT, fail, say } from "./log.mjs";
import { lastEntry } from "./wrangler.mjs";

/**
 * The tail worker `env` (the router's environment) names: {configFile,
 * workerName}, or null when the environment has no `tail_consumers`.
 * Exit 2 when the tail worker's config does not deploy the Worker named.
 */
export function checkTailWorker(settings, env) {
  const services = env.tailConsumers.map((c) => c?.service).filter(Boolean);
  if (services.length === 0) return null;
  const file = settings.tailConfigFile;
  if (services.length > 1) fail(EXIT.USAGE, `[env.${env.key}] names ${services.length} tail consumers (${services.join(", ")}); deploy-worker.sh deploys one, from ${file}`);
  if (!fs.existsSync(file)) fail(EXIT.USAGE, `[env.${env.key}] tail_consumers names ${services[0]}, but there is no tail worker config at ${file}`);
  let config;
  try {
    config = readWranglerConfig(file);
  } catch (e) {
    fail(EXIT.USAGE, `cannot read ${file}: ${e.message}`);
  }
  const tail = config.environment(env.key);
  if (tail?.workerName !== services[0]) {
    fail(EXIT.USAGE, `[env.${env.key}] tail_consumers names ${services[0]}, but [env.${env.key}] of ${file} ${tail ? `deploys ${tail.workerName}` : "does not exist"}`);
  }
  return { configFile: file, workerName: services[0] };
}

/** The wrangler arguments that deploy the tail worker (its config named: not the router's). */
export function tailDeployArgs(tail, envKey, tag, message) {
  return ["deploy", "--config", tail.configFile, "--env", envKey, "--tag", tag, "--message", message];
}

/**
 * `wrangler deploy --config <tail config> --env <env>`; exit 1 (nothing of
 * the router changed) when it fails. `wrangler` runs without the router's
 * --config.
 */
export async function deployTailWorker({ tail, wrangler, envKey, tag, message, record, traffic }) {
  say(`tail worker ${tail.workerName} first (the router's tail_consumers names it)`);
  const r = await wrangler.run(tailDeployArgs(tail, envKey, tag, message));
  if (r.status !== 0) {
    record.finish("failed", { traffic, problem: `wrangler deploy of the tail worker ${tail.workerName} exited ${r.status}` });
    fail(EXIT.FAILED, `wrangler deploy of the tail worker ${tail.workerName} (--config ${tail.configFile}) failed: the router was not uploaded, traffic is unchanged (${traffic || "as before"})`);
  }
  const deployed = lastEntry(r.entries, "deploy");
  record.update({ tail_worker: { name: tail.workerName, version: deployed?.version_id ?? null } });
  say(`tail worker ${tail.workerName} deployed${deployed?.version_id ? ` (version ${deployed.version_id})` : ""}`);
}
