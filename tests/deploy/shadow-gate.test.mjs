// The shadow gate (scripts/deploy/shadow-gate.mjs): its settings, query
// and verdicts, then the gate in a real deploy.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { before, describe, test } from "node:test";
import { startStandin } from "./cf-api-standin.mjs";
import { ensureBuild, explain, makeProject, runDeploy, workerName, workerRoutes } from "./helpers.mjs";
import { checkPromotion, readShadowSettings, shadowQuery, shadowVerdict } from "../../scripts/deploy/shadow-gate.mjs";

const settings = (env = {}) => readShadowSettings({ SHADOW_MIN_EVALUATED: "10", ...env });
const row = (rule, shadow_rule, difference, requests) => ({ rule, shadow_rule, difference, requests: String(requests) });

describe("shadow gate", () => {
  test("settings: defaults, intended pairs, unreadable values", () => {
    const s = readShadowSettings({});
    assert.deepEqual([s.enabled, s.maxDisagreements, s.windowMinutes, s.minEvaluated, [...s.intended], s.problems], [true, 0, 60, 1000, [], []]);
    const t = readShadowSettings({ SHADOW_INTENDED: " a>b , (none)>legacy", SHADOW_GATE: "false" });
    assert.deepEqual([t.enabled, [...t.intended]], [false, ["a>b", "(none)>legacy"]]);
    assert.deepEqual(readShadowSettings({ SHADOW_INTENDED: "a", SHADOW_MAX_DISAGREEMENTS: "-1" }).problems, ['SHADOW_INTENDED: "a" is not rule>shadow_rule', "SHADOW_MAX_DISAGREEMENTS=-1 is not a whole number >= 0"]);
  });

  test("the query names the version and the window, and refuses what is not an identifier", () => {
    assert.match(shadowQuery("gitlab_http_router_production", "0a1b-2c", 30), /INTERVAL '30' MINUTE\n {2}AND blob2 = '0a1b-2c' AND blob11 != ''/);
    assert.throws(() => shadowQuery("x; DROP", "v", 1));
    assert.throws(() => shadowQuery("d", "v' OR '1", 1));
  });

  test("verdicts: agreement, intended pairs, a threshold, too few evaluations", () => {
    const agree = [row("session_cookie", "session_cookie", "", 900), row("legacy", "legacy", "", 100)];
    assert.equal(shadowVerdict(agree, settings()).verdict, "agrees");
    const moved = [...agree, row("legacy", "project_path", "rule", 40)];
    const refused = shadowVerdict(moved, settings());
    assert.equal(refused.verdict, "disagrees");
    assert.match(refused.problem, /^40 of 1040 evaluated requests decided differently.*legacy>project_path \(rule\): 40$/);
    assert.equal(shadowVerdict(moved, settings({ SHADOW_INTENDED: "legacy>project_path" })).verdict, "within");
    assert.equal(shadowVerdict(moved, settings({ SHADOW_MAX_DISAGREEMENTS: "40" })).verdict, "within");
    assert.equal(shadowVerdict([row("a", "a", "", 9)], settings()).verdict, "too-few-evaluated");
    assert.equal(shadowVerdict([row("", "", "rule", 50)], settings({ SHADOW_INTENDED: "(none)>(none)" })).verdict, "within");
  });

  test("promotion: no ruleset change passes; a candidate never shadowed is refused before any query", async () => {
    const base = { settings: settings(), metrics: { accountId: "a", token: "t", baseUrl: "http://127.0.0.1:9" }, dataset: "d", servingVersion: "v1" };
    assert.equal(await checkPromotion({ ...base, servingVars: { GITLAB_RULES_CONFIG: "cells" }, candidate: "cells" }), null);
    const never = await checkPromotion({ ...base, servingVars: { GITLAB_RULES_CONFIG: "session_token" }, candidate: "cells" });
    assert.equal(never.verdict, "not-shadowed");
    assert.match(never.problem, /GITLAB_SHADOW_RULES_CONFIG is unset\): deploy it as the shadow first/);
    const off = await checkPromotion({ ...base, settings: settings({ SHADOW_GATE: "false" }), servingVars: { GITLAB_RULES_CONFIG: "session_token" }, candidate: "cells" });
    assert.deepEqual(off, { ok: true, skipped: "SHADOW_GATE=false" });
    const blind = await checkPromotion({ ...base, metrics: { accountId: "", token: "" }, servingVars: { GITLAB_RULES_CONFIG: "session_token", GITLAB_SHADOW_RULES_CONFIG: "cells" }, candidate: "cells" });
    assert.equal(blind.verdict, "unreadable");
  });
});

// The gate in a real deploy: deploy-worker.sh and the pinned wrangler
// against cf-api-standin.mjs, the serving version's [vars] read back from
// its upload (`wrangler versions view`), the disagreements from the
// stand-in's Analytics Engine SQL endpoint.
describe("shadow gate in a deploy (the pinned wrangler, the Cloudflare API stand-in)", { concurrency: 1 }, () => {
  const ENV = "staging";
  const NAME = workerName(ENV);
  const DATASET = "gitlab_http_router_staging";
  before(() => ensureBuild());

  /** staging serving session_token (shadowing `shadow`), the project promoting cells. */
  async function setup(t, shadow) {
    const api = await startStandin();
    t.after(() => api.close());
    const project = makeProject(t);
    const toml = fs.readFileSync(project.config, "utf8");
    const at = toml.indexOf("[env.staging.vars]");
    fs.writeFileSync(project.config, toml.slice(0, at) + toml.slice(at).replace(/GITLAB_RULES_CONFIG = "[a-z_]+"/, 'GITLAB_RULES_CONFIG = "cells"'));
    const vars = { GITLAB_RULES_CONFIG: "session_token", ...(shadow ? { GITLAB_SHADOW_RULES_CONFIG: shadow } : {}) };
    const oldVersion = api.seed(NAME, { tag: "0ldc0de", routes: workerRoutes(ENV), bindings: Object.entries(vars).map(([name, text]) => ({ name, type: "plain_text", text })) });
    const record = () => JSON.parse(fs.readFileSync(path.join(project.dir, "rollout-record.json"), "utf8"));
    const run = (extra = {}) => runDeploy([ENV], project.env(api, { ROLLOUT_PERCENTAGES: "100", SHADOW_MIN_EVALUATED: "100", ...extra }));
    return { api, oldVersion, record, run };
  }

  test("a candidate the serving version never shadowed is refused before anything is uploaded", async (t) => {
    const { api, record, run } = await setup(t, null);
    const r = await run();
    assert.equal(r.code, 1, explain(r));
    assert.match(r.stderr, /shadow gate: this deploy changes GITLAB_RULES_CONFIG from session_token to cells, which the serving version [0-9a-f-]+ does not evaluate .*nothing was changed/);
    assert.equal(api.scripts.get(NAME).versions.length, 1, "nothing uploaded");
    assert.equal(record().outcome, "refused");
    assert.deepEqual(api.sqlQueries(), [], "nothing to ask");
  });

  test("shadowed with disagreements nobody declared: refused; declared intended: promoted", async (t) => {
    const { api, oldVersion, record, run } = await setup(t, "cells");
    api.setShadow(DATASET, (version) =>
      version === oldVersion
        ? [
            { rule: "session_cookie", shadow_rule: "session_cookie", difference: "", requests: 5000 },
            { rule: "legacy", shadow_rule: "project_path", difference: "rule", requests: 120 },
          ]
        : [],
    );
    const refused = await run();
    assert.equal(refused.code, 1, explain(refused));
    assert.match(refused.stderr, /shadow gate: 120 of 5120 evaluated requests decided differently.*legacy>project_path \(rule\): 120; nothing was changed/);
    assert.equal(api.scripts.get(NAME).versions.length, 1, "nothing uploaded");
    assert.equal(record().shadow.verdict, "disagrees");

    const promoted = await run({ SHADOW_INTENDED: "legacy>project_path" });
    assert.equal(promoted.code, 0, explain(promoted));
    assert.match(promoted.stderr, /shadow gate: cells is within what was declared on 5120 evaluated requests \(120 intended and 0 other disagreements\)/);
    assert.equal(record().shadow.verdict, "within");
    assert.equal(record().outcome, "completed");
  });
});
