// deploy-worker.sh --rollback: puts a version that served before back at
// 100 %: ROLLBACK_VERSION, else the one the rollout record (ROLLBACK_RECORD)
// says served before that deploy, else the previous one in the history.
import { deploymentVersions, readDeploymentHistory } from "./deployment-state.mjs";
import { EXIT, fail, say, warn } from "./log.mjs";
import { previousVersion, ROLLBACK_MESSAGE, RollbackError, targetFromRecord } from "./rollback-target.mjs";
import { registryMoveBackWarning } from "./registry-rollback.mjs";
import { readRecord, RecordFile } from "./rollout-record.mjs";
import { lastEntry } from "./wrangler.mjs";

export async function rollback({ settings, env, wrangler, dryRun, recordFile }) {
  const envArgs = ["--env", env.key];
  const message = ROLLBACK_MESSAGE;
  const moveBack = registryMoveBackWarning(settings.configFile, env.vars, env.workerName);
  if (moveBack) warn(`REGISTRY: ${moveBack}`);
  let target = settings.rollbackVersion;
  let record = null;
  if (!target && recordFile) {
    try {
      record = readRecord(recordFile);
    } catch (e) {
      fail(EXIT.FAILED, `${e.message}; nothing was changed`);
    }
  }
  if (dryRun) {
    if (record) process.stderr.write(`# the rollout record ${recordFile} says ${record.old_version ?? "no version"} served before ${record.new_version ?? "that deploy"}\n`);
    else if (!target) wrangler.run(["deployments", "list", ...envArgs, "--json"]);
    wrangler.run(["versions", "deploy", `${target || record?.old_version || "<previous-version-id>"}@100%`, ...envArgs, "--yes", "--message", message]);
    return;
  }
  try {
    if (!target && record) {
      const status = await wrangler.json(["deployments", "status", ...envArgs, "--json"]);
      if (!status.ok) {
        process.stderr.write(status.result.stderr);
        fail(EXIT.FAILED, "wrangler deployments status failed (above); nothing was changed");
      }
      const decision = targetFromRecord(record, { workerName: env.workerName, servingNow: deploymentVersions(status.value) });
      if (decision.done) return say(decision.done);
      target = decision.target;
      say(`the rollout record ${recordFile} (${record.tag}, ${record.started_at}) says ${target} served before ${record.new_version}`);
    }
    if (!target) target = previousVersion(await readDeploymentHistory(wrangler));
  } catch (e) {
    if (e instanceof RollbackError) fail(EXIT.FAILED, `cannot tell which version to roll back to: ${e.message}`);
    throw e;
  }
  say(`rolling ${env.workerName} back to ${target} at 100%`);
  const r = await wrangler.run(["versions", "deploy", `${target}@100%`, ...envArgs, "--yes", "--message", message]);
  const deployed = lastEntry(r.entries, "version-deploy");
  if (r.status !== 0 || !deployed) fail(EXIT.FAILED, `wrangler versions deploy ${target}@100% failed: the rollback did not happen (see above)`);
  if (record && recordFile) {
    record.rollback = { to: target, deployment_id: deployed.deployment_id, at: new Date().toISOString(), ok: true, by: "deploy-worker.sh --rollback", ...(moveBack ? { warning: moveBack } : {}) };
    record.traffic = `${target} at 100%`;
    new RecordFile(recordFile, record).write();
  }
  say(`done: ${target} serves 100% of ${env.workerName}`);
}
