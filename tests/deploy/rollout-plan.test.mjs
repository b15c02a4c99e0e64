// Unit tests of the rollout's pure decisions (scripts/deploy/rollout-plan.mjs).
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { describeSplit, parsePercentages, planRollout, PlanError, stepsToRun, tagIsReusable, versionSpecs } from "../../scripts/deploy/rollout-plan.mjs";

describe("parsePercentages", () => {
  test("the default and a custom list", () => {
    assert.deepEqual(parsePercentages(), [5, 25, 50, 75, 100]);
    assert.deepEqual(parsePercentages(" 10   100 "), [10, 100]);
  });
  test("OVERRIDE_LAST_PERCENTAGE keeps only the last step", () => {
    assert.deepEqual(parsePercentages("5 25", true), [25]);
  });
  test("refuses empty, non-whole, out-of-range and non-increasing lists", () => {
    assert.throws(() => parsePercentages("  "), /is empty/);
    for (const bad of ["0 100", "5 101", "5.5", "5 x", "-5"]) assert.throws(() => parsePercentages(bad), (e) => e instanceof PlanError && /not a whole percentage/.test(e.message), bad);
    assert.throws(() => parsePercentages("5 50 25"), /must increase/);
    assert.throws(() => parsePercentages("5 5"), /must increase/);
  });
});

describe("planRollout", () => {
  const old = { id: "old", percentage: 100, tag: "0ldc0de" };
  test("nothing serving: a first deploy", () => {
    assert.deepEqual(planRollout([], "abc"), { kind: "first-deploy" });
  });
  test("another version at 100 %: upload against it", () => {
    assert.deepEqual(planRollout([old], "abc1234"), { kind: "upload", oldVersion: "old" });
  });
  test("this commit at 100 %: nothing to deploy, unless the tag is dirty or missing", () => {
    const mine = { id: "mine", percentage: 100, tag: "abc1234" };
    assert.deepEqual(planRollout([mine], "abc1234"), { kind: "current", version: "mine" });
    assert.equal(planRollout([{ ...mine, tag: "abc1234-dirty" }], "abc1234-dirty").kind, "upload");
    assert.equal(planRollout([{ ...mine, tag: "untagged" }], "untagged").kind, "upload");
  });
  test("this commit split with the old one: resume from its share, no upload", () => {
    const plan = planRollout([{ id: "mine", percentage: 25, tag: "abc1234" }, { ...old, percentage: 75 }], "abc1234");
    assert.deepEqual(plan, { kind: "resume", newVersion: "mine", oldVersion: "old", share: 25 });
  });
  test("this commit in the deployment at 0 % (a smoke test that was interrupted): resume from 0", () => {
    const plan = planRollout([old, { id: "mine", percentage: 0, tag: "abc1234" }], "abc1234");
    assert.deepEqual(plan, { kind: "resume", newVersion: "mine", oldVersion: "old", share: 0 });
  });
  test("a split between two other versions: refused", () => {
    const plan = planRollout([{ id: "a", percentage: 50, tag: "aaa" }, { id: "b", percentage: 50, tag: "bbb" }], "abc1234");
    assert.equal(plan.kind, "refuse");
    assert.match(plan.reason, /aaa, bbb, not abc1234/);
  });
});

describe("steps and specs", () => {
  test("stepsToRun skips steps at or below the share, unless overridden", () => {
    assert.deepEqual(stepsToRun([5, 25, 50, 75, 100], 25), [50, 75, 100]);
    assert.deepEqual(stepsToRun([5, 25, 50], 0), [5, 25, 50]);
    assert.deepEqual(stepsToRun([100], 100), []);
    assert.deepEqual(stepsToRun([25], 50, true), [25]);
  });
  test("versionSpecs: 0 % for the smoke test, a split, and 100 % alone", () => {
    assert.deepEqual(versionSpecs("n", "o", 0), ["n@0%", "o@100%"]);
    assert.deepEqual(versionSpecs("n", "o", 25), ["n@25%", "o@75%"]);
    assert.deepEqual(versionSpecs("n", "o", 100), ["n@100%"]);
  });
  test("describeSplit", () => {
    assert.equal(describeSplit("n", "o", 5), "n at 5%, o at 95%");
    assert.equal(describeSplit("n", "o", 100), "n at 100%");
  });
  test("tagIsReusable", () => {
    assert.equal(tagIsReusable("abc1234"), true);
    assert.equal(tagIsReusable("abc1234-dirty"), false);
    assert.equal(tagIsReusable("untagged"), false);
  });
});
