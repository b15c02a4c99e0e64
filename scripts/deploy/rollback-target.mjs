// Which version a rollback returns to, as pure functions: from the
// deployment history, or from the record a deploy job left.

/** No version to return to; the message says why (exit 1). */
export class RollbackError extends Error {}

const serving = (deployment) => deployment.versions.filter((v) => (v.percentage ?? 0) > 0);

/** The message deploy-worker.sh --rollback deploys with (rollback.mjs), found again in the history. */
export const ROLLBACK_MESSAGE = "rollback by deploy-worker.sh";

/** Whether a deployment of the history was a rollback (this program's, or `wrangler rollback`'s). */
const isRollback = (deployment) =>
  deployment.annotations?.["workers/message"] === ROLLBACK_MESSAGE || deployment.annotations?.["workers/triggered_by"] === "rollback";

/**
 * From `wrangler deployments list --json` (any order): during a rollout (two
 * versions serving) the version that served 100 % before it began; otherwise
 * the most recent version other than the one serving now. Refused when the
 * latest deployment was itself a rollback: the most recent other version is
 * then the one it rolled back from.
 */
export function previousVersion(deployments) {
  const history = [...deployments].sort((a, b) => String(b.created_on ?? "").localeCompare(String(a.created_on ?? "")));
  if (history.length === 0) throw new RollbackError("the Worker has no deployments");
  const now = serving(history[0]);
  if (isRollback(history[0])) {
    throw new RollbackError(
      `the latest deployment (${history[0].created_on ?? "?"}, ${now.map((v) => v.version_id).join(", ")}) was itself a rollback: another one from the history would put back the version it rolled back from. Set ROLLBACK_VERSION=<id> to say which version`,
    );
  }
  const ids = new Set(now.map((v) => v.version_id));
  if (now.length > 1) {
    for (const d of history.slice(1)) {
      const whole = d.versions.find((v) => (v.percentage ?? 0) >= 100);
      if (whole && ids.has(whole.version_id)) return whole.version_id;
    }
    throw new RollbackError("the deployment is split and no earlier deployment served one of its versions at 100 %: set ROLLBACK_VERSION");
  }
  for (const d of history.slice(1)) {
    const others = serving(d).filter((v) => !ids.has(v.version_id));
    if (others.length) return others.reduce((a, b) => (b.percentage > a.percentage ? b : a)).version_id;
  }
  throw new RollbackError("no earlier deployment served another version: nothing to roll back to (set ROLLBACK_VERSION)");
}

/**
 * From a rollout record (rollout-record.mjs) and the versions serving now
 * ([{id, percentage}]): {target} to deploy at 100 %, or {done: why} when
 * there is nothing to do. Refuses a record of another Worker, of a deploy
 * that had no version before it, or one a later deploy has superseded.
 */
export function targetFromRecord(record, { workerName, servingNow }) {
  if (!record || typeof record !== "object" || record.kind === undefined) throw new RollbackError("the rollout record is not a record written by deploy-worker.sh");
  if (record.worker !== workerName) throw new RollbackError(`the rollout record is for ${record.worker}, not ${workerName}`);
  const ids = servingNow.filter((v) => v.percentage > 0).map((v) => v.id);
  if (!record.new_version) return { done: `the rollout record says that deploy changed nothing (${record.outcome}): nothing to roll back` };
  if (!record.old_version) throw new RollbackError(`the rollout record is of the first deploy of ${workerName} (${record.new_version}): there is no earlier version to return to (set ROLLBACK_VERSION)`);
  if (ids.length === 1 && ids[0] === record.old_version) return { done: `${record.old_version} (the version before that deploy) already serves 100%: nothing to roll back` };
  if (!ids.includes(record.new_version)) {
    throw new RollbackError(`${workerName} serves ${ids.join(", ") || "nothing"} now, not ${record.new_version} of the rollout record: a later deploy changed it; roll back with ROLLBACK_VERSION=<id> or without the record`);
  }
  return { target: record.old_version };
}
