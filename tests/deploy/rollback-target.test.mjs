// Unit tests of which version a rollback returns to (scripts/deploy/rollback-target.mjs).
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { previousVersion, RollbackError, targetFromRecord } from "../../scripts/deploy/rollback-target.mjs";

const d = (created_on, ...versions) => ({ created_on, versions: versions.map(([version_id, percentage]) => ({ version_id, percentage })) });

describe("previousVersion (deployment history)", () => {
  test("one version serving: the most recent other version, whatever the order given", () => {
    const history = [d("2026-05-01T10:00:03Z", ["b", 100]), d("2026-05-01T10:00:01Z", ["a", 100]), d("2026-05-01T10:00:02Z", ["b", 50], ["a", 50])];
    assert.equal(previousVersion(history), "a");
  });
  test("a split: the version that served 100 % before the rollout", () => {
    const history = [d("3", ["new", 25], ["old", 75]), d("2", ["new", 5], ["old", 95]), d("1", ["old", 100])];
    assert.equal(previousVersion(history), "old");
  });
  test("0 % entries (a smoke test) are not 'serving'", () => {
    const history = [d("3", ["new", 100]), d("2", ["new", 0], ["old", 100]), d("1", ["old", 100])];
    assert.equal(previousVersion(history), "old");
  });
  test("after a rollback: refused (the most recent other version is the one rolled back from)", () => {
    const rolledBack = { ...d("3", ["a", 100]), annotations: { "workers/message": "rollback by deploy-worker.sh" } };
    const history = [rolledBack, d("2", ["bad", 100]), d("1", ["a", 100])];
    assert.throws(() => previousVersion(history), (e) => e instanceof RollbackError && /was itself a rollback.*ROLLBACK_VERSION/.test(e.message));
    const byWrangler = { ...d("3", ["a", 100]), annotations: { "workers/triggered_by": "rollback" } };
    assert.throws(() => previousVersion([byWrangler, d("2", ["bad", 100])]), /itself a rollback/);
    // An ordinary deploy after the rollback: the history decides again.
    assert.equal(previousVersion([d("4", ["c", 100]), rolledBack, d("2", ["bad", 100])]), "a");
  });
  test("no history or nothing else: a clear error", () => {
    assert.throws(() => previousVersion([]), (e) => e instanceof RollbackError && /no deployments/.test(e.message));
    assert.throws(() => previousVersion([d("1", ["a", 100])]), /nothing to roll back to/);
  });
});

describe("targetFromRecord (rollout record)", () => {
  const record = { kind: "rollout", worker: "w", old_version: "old", new_version: "new", outcome: "completed" };
  test("the new version serves: back to the old one", () => {
    assert.deepEqual(targetFromRecord(record, { workerName: "w", servingNow: [{ id: "new", percentage: 100 }] }), { target: "old" });
    assert.deepEqual(targetFromRecord(record, { workerName: "w", servingNow: [{ id: "new", percentage: 25 }, { id: "old", percentage: 75 }] }), { target: "old" });
  });
  test("the old version already serves alone: nothing to do", () => {
    assert.match(targetFromRecord(record, { workerName: "w", servingNow: [{ id: "old", percentage: 100 }] }).done, /already serves 100%/);
  });
  test("a later deploy superseded it: refused", () => {
    assert.throws(() => targetFromRecord(record, { workerName: "w", servingNow: [{ id: "newer", percentage: 100 }] }), /later deploy changed it/);
  });
  test("another Worker's record, a first deploy's record, an unchanged deploy, not a record", () => {
    assert.throws(() => targetFromRecord(record, { workerName: "x", servingNow: [] }), /for w, not x/);
    assert.throws(() => targetFromRecord({ ...record, kind: "first-deploy", old_version: null }, { workerName: "w", servingNow: [{ id: "new", percentage: 100 }] }), /first deploy/);
    assert.match(targetFromRecord({ ...record, kind: "unchanged", new_version: null }, { workerName: "w", servingNow: [] }).done, /changed nothing/);
    assert.throws(() => targetFromRecord({ hello: 1 }, { workerName: "w", servingNow: [] }), /not a record/);
  });
});
