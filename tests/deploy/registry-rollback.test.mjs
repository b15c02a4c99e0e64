// registry-rollback.mjs: which environments a rollback warns for (the
// repo's own rulesets); the warning in a real rollout is in
// rollout-safety.test.mjs.
import assert from "node:assert/strict";
import path from "node:path";
import { test } from "node:test";
import { registryMoveBackWarning } from "../../scripts/deploy/registry-rollback.mjs";
import { REPO } from "./helpers.mjs";

const config = path.join(REPO, "wrangler.toml");
const warning = (ruleset) => registryMoveBackWarning(config, { GITLAB_RULES_CONFIG: ruleset }, "w");

test("only a ruleset with rollout blocks warns, naming its migrating rules", () => {
  assert.match(warning("registry_migration"), /^w runs registry_migration, which moves repositories between registries \(rules registry_base_token_migrated, registry_repository_migrated/);
  for (const quiet of ["cells", "session_token", "container_registry", "firstcell", "no_such_ruleset", undefined]) assert.equal(warning(quiet), null, String(quiet));
});
