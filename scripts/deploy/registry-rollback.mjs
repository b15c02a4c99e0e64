// What a rollback in a registry-migration environment does to the
// repositories: a ruleset with `rollout` blocks (registry_migration) moves a
// slice of repositories to their new registry, and putting back a version
// from before that step moves them back; whatever was pushed to the new
// registry since is no longer served (docs/registry.md, "Operating it").
// A rollback is still the way out of a broken step, so this warns, loudly,
// and the rollout record keeps the warning; it refuses nothing.
import fs from "node:fs";
import path from "node:path";

/**
 * The warning for rolling back `workerName` in an environment whose
 * `[vars]` are `vars` (rules/ beside `configFile`); null when its ruleset
 * migrates nothing (no `rollout` block) or cannot be read.
 */
export function registryMoveBackWarning(configFile, vars, workerName) {
  const name = vars?.GITLAB_RULES_CONFIG;
  if (!name) return null;
  let rules;
  try {
    const doc = JSON.parse(fs.readFileSync(path.join(path.dirname(configFile), "rules", `${name}.json`), "utf8"));
    rules = Array.isArray(doc) ? doc : (doc?.rules ?? []);
  } catch {
    return null;
  }
  const migrating = rules.filter((r) => r && typeof r === "object" && r.rollout).map((r) => r.id);
  if (migrating.length === 0) return null;
  return (
    `${workerName} runs ${name}, which moves repositories between registries (rules ${migrating.join(", ")}): ` +
    "if the version rolled back to has a smaller rollout (a lower percentage, another seed, a narrower include), " +
    "its repositories move BACK to the legacy registry and whatever was pushed to the new one since is no longer served " +
    "(docs/registry.md, Operating it). Check which repositories moved with  rulesctl diff  and copy their new data back, or roll forward instead"
  );
}
