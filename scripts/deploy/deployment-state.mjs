// What serves now, read through wrangler: the current deployment's versions
// and their tags.
import { EXIT, fail } from "./log.mjs";

/** API errors that mean "this Worker does not exist yet". */
export const NOT_FOUND_CODES = [10007, 10090];

/** `deployments status --json` -> [{id, percentage}] (0 % versions included). Pure. */
export function deploymentVersions(status) {
  const versions = Array.isArray(status?.versions) ? status.versions : [];
  return versions.map((v) => ({ id: v.version_id, percentage: Math.round(Number(v.percentage ?? 0)) }));
}

function explainFailure(result, what) {
  process.stderr.write(result.stderr || result.stdout || "");
  fail(EXIT.FAILED, `${what} failed${result.errorCode ? ` (API error ${result.errorCode})` : ""} (above); nothing was changed`);
}

/**
 * The deployment serving now: {versions: [{id, percentage}], message}, or
 * null when the Worker does not exist yet (or has no deployment).
 */
export async function readServingDeployment(wrangler) {
  const { ok, value, result } = await wrangler.json(["deployments", "status", "--env", wrangler.env, "--json"]);
  if (!ok) {
    if (NOT_FOUND_CODES.includes(result.errorCode)) return null;
    explainFailure(result, "wrangler deployments status");
  }
  const versions = deploymentVersions(value);
  return versions.length ? { versions, message: String(value?.annotations?.["workers/message"] ?? "") } : null;
}

/** The deployment serving now: [{id, percentage}], or null when the Worker does not exist yet. */
export async function readCurrentDeployment(wrangler) {
  return (await readServingDeployment(wrangler))?.versions ?? null;
}

/**
 * What a version was uploaded with: {tag (null when none), vars (its
 * plain_text bindings: the [vars] it runs with)}.
 */
export async function versionInfoOf(wrangler, id) {
  const { ok, value, result } = await wrangler.json(["versions", "view", id, "--env", wrangler.env, "--json"]);
  if (!ok) explainFailure(result, `wrangler versions view ${id}`);
  const bindings = Array.isArray(value?.resources?.bindings) ? value.resources.bindings : [];
  const vars = Object.fromEntries(bindings.filter((b) => b?.type === "plain_text").map((b) => [b.name, String(b.text ?? "")]));
  return { tag: value?.annotations?.["workers/tag"] ?? null, vars };
}

/** The tag a version was uploaded with (null when none). */
export async function versionTagOf(wrangler, id) {
  return (await versionInfoOf(wrangler, id)).tag;
}

/** `deployments list --json`: the history, for the rollback. */
export async function readDeploymentHistory(wrangler) {
  const { ok, value, result } = await wrangler.json(["deployments", "list", "--env", wrangler.env, "--json"]);
  if (!ok) explainFailure(result, "wrangler deployments list");
  return Array.isArray(value) ? value : (value?.deployments ?? []);
}
