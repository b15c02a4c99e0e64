// The shadow gate's settings, query and verdicts (scripts/deploy/shadow-gate.mjs).
import assert from "node:assert/strict";
import { describe, test } from "node:test";
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
