// The rollout's decisions as pure functions: which steps, which version is
// old and which new, what each step deploys. No I/O here.

export const DEFAULT_PERCENTAGES = "5 25 50 75 100";

/** A configuration mistake in the rollout variables (exit 2). */
export class PlanError extends Error {}

/**
 * ROLLOUT_PERCENTAGES -> the steps to deploy: whole, increasing, 1..100;
 * with OVERRIDE_LAST_PERCENTAGE only the last one.
 */
export function parsePercentages(list = DEFAULT_PERCENTAGES, overrideLast = false) {
  const words = list.trim().split(/\s+/).filter(Boolean);
  if (words.length === 0) throw new PlanError("ROLLOUT_PERCENTAGES is empty");
  let previous = 0;
  const steps = words.map((word) => {
    const p = /^[0-9]+$/.test(word) ? Number(word) : NaN;
    if (!(p >= 1 && p <= 100)) throw new PlanError(`ROLLOUT_PERCENTAGES="${list}": '${word}' is not a whole percentage from 1 to 100`);
    if (p <= previous) throw new PlanError(`ROLLOUT_PERCENTAGES="${list}" must increase step by step`);
    previous = p;
    return p;
  });
  return overrideLast ? [steps.at(-1)] : steps;
}

/** A tag names one commit's clean tree only when it is not dirty or missing. */
export function tagIsReusable(tag) {
  return tag !== "untagged" && !tag.endsWith("-dirty");
}

/**
 * Decides what a deploy does, from the versions of the deployment serving now
 * ([{id, percentage, tag}], a version at 0 % included) and this commit's tag:
 *   {kind: "first-deploy"}                      the Worker serves nothing yet
 *   {kind: "current", version}                  this commit already serves 100 %
 *   {kind: "upload", oldVersion}                a new version goes against oldVersion
 *   {kind: "resume", newVersion, oldVersion, share}  this commit's rollout goes on
 *   {kind: "refuse", reason}                    someone else's rollout is unfinished
 */
export function planRollout(versions, tag) {
  const serving = versions.filter((v) => v.percentage > 0);
  if (serving.length === 0) return { kind: "first-deploy" };
  const mine = tagIsReusable(tag) ? versions.find((v) => v.tag === tag) : undefined;
  if (serving.length === 1) {
    const [only] = serving;
    if (mine && mine.id === only.id) return { kind: "current", version: only.id };
    if (mine) return { kind: "resume", newVersion: mine.id, oldVersion: only.id, share: 0 };
    return { kind: "upload", oldVersion: only.id };
  }
  if (!mine) {
    return { kind: "refuse", reason: `tags ${serving.map((v) => v.tag ?? "-").join(", ")}, not ${tag}` };
  }
  const other = serving.find((v) => v.id !== mine.id);
  return { kind: "resume", newVersion: mine.id, oldVersion: other.id, share: mine.percentage };
}

/**
 * The steps still to deploy when the new version already has `share` %:
 * without the override, steps at or below it are skipped (a re-run resumes
 * and never moves traffic back); with it, the step is deployed as asked.
 */
export function stepsToRun(steps, share, overrideLast = false) {
  return overrideLast ? steps : steps.filter((p) => p > share);
}

/** wrangler versions deploy arguments for the new version at p % (0..100). */
export function versionSpecs(newVersion, oldVersion, p) {
  return p >= 100 ? [`${newVersion}@100%`] : [`${newVersion}@${p}%`, `${oldVersion}@${100 - p}%`];
}

/** "NEW at P%, OLD at 100-P%" (or "NEW at 100%"). */
export function describeSplit(newVersion, oldVersion, p) {
  return p >= 100 ? `${newVersion} at 100%` : `${newVersion} at ${p}%, ${oldVersion} at ${100 - p}%`;
}

/** [{id, percentage}] as "A at 60%, B at 40%". */
export function describeVersions(versions) {
  return versions.map((v) => `${v.id} at ${v.percentage}%`).join(", ");
}
