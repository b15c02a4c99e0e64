// The routing checks and the bake's metrics comparison end to end: the real
// deploy-worker.sh and pinned wrangler against cf-api-standin.mjs, the
// health checks answered by edge-standin.mjs running the real built router
// (workerd, one instance per version, with the [vars] that version was
// uploaded with) in front of two loopback cells that name themselves, and a
// real rulesctl making the routable tokens.
//   - a healthy rollout passes, every family checked at every step
//   - a new version whose classification is broken (its ruleset sends every
//     session to the legacy cell) is stopped by the routing checks of the
//     smoke test: never promoted
//   - a new version whose 5xx ratio (the stand-in's Analytics Engine data)
//     is worse than the old's from 50 % on is rolled back at 50 %
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { before, describe, test } from "node:test";
import { perVersionQuery } from "../../scripts/deploy/analytics.mjs";
import { startStandin } from "./cf-api-standin.mjs";
import { startEdge } from "./edge-standin.mjs";
import { REPO, SMOKE_SECRET, ensureBuild, explain, loopbackCells, makeProject, runDeploy, setStagingVars, workerName, workerRoutes } from "./helpers.mjs";

const ENV = "staging";
const NAME = workerName(ENV);
const TAG = "abc1234";
const CELL_HEADER = "x-gitlab-cell-id";
const DATASET = "gitlab_http_router_staging";
const RULESCTL = process.env.RULESCTL_BIN ?? path.join(REPO, "target/debug/rulesctl");

before(() => {
  ensureBuild();
  if (!fs.existsSync(RULESCTL)) {
    const r = spawnSync("cargo", ["build", "-q", "--bin", "rulesctl"], { cwd: REPO, stdio: "inherit" });
    if (r.status !== 0) throw new Error("cargo build --bin rulesctl failed");
  }
});

/** `cellHeader`: the cells name themselves and the deploy checks it too (ROUTING_CHECK_CELL_HEADER). */
async function setup(t, { cellHeader = true } = {}) {
  const { cell1, cell2, vars } = await loopbackCells(t, { header: cellHeader ? CELL_HEADER : null });
  const api = await startStandin();
  t.after(() => api.close());
  const project = makeProject(t);
  setStagingVars(project.config, vars);
  const edge = await startEdge(api, NAME, { smokeSecret: SMOKE_SECRET, router: { build: path.join(project.dir, "build"), host: "staging.gitlab.com" } });
  t.after(() => edge.close());
  // The version serving now: the same build, uploaded with the healthy vars.
  const seededVars = { ...vars, GITLAB_ENVIRONMENT: "staging", GITLAB_ROUTER_SIGNING_POLICY: "optional" };
  const oldVersion = api.seed(NAME, { tag: "0ldc0de", routes: workerRoutes(ENV), bindings: Object.entries(seededVars).map(([name, text]) => ({ name, type: "plain_text", text })) });
  const record = () => JSON.parse(fs.readFileSync(path.join(project.dir, "rollout-record.json"), "utf8"));
  const env = (extra = {}) =>
    project.env(api, {
      HEALTH_CHECK_URL: edge.url("/users/sign_in"),
      ROUTING_CHECKS: "true",
      ...(cellHeader ? { ROUTING_CHECK_CELL_HEADER: CELL_HEADER } : {}),
      RULESCTL: RULESCTL,
      BAKE_MIN_REQUESTS: "100",
      ...extra,
    });
  return { api, edge, project, oldVersion, record, env, cell1, cell2 };
}

const split = (versions) => Object.fromEntries(versions.map((v) => [v.version_id, v.percentage]));
const newestVersion = (api) => api.scripts.get(NAME).versions[0].id;
const healthy = { requests: 4000, errors: 4, p99_ms: 180 };

/**
 * A rollout of a broken version (its ruleset classifies everything to the
 * first, legacy, cell): stopped at the smoke test by the routing checks,
 * nothing shifted. Resolves setup's parts.
 */
async function deployBroken(t, options) {
  const parts = await setup(t, options);
  const { api, project, env, oldVersion } = parts;
  api.setMetrics(DATASET, () => healthy);
  setStagingVars(project.config, { GITLAB_RULES_CONFIG: "firstcell" });
  // A ruleset change the shadow gate would stop first: these tests are the routing checks'.
  const r = await runDeploy([ENV], env({ ROLLOUT_PERCENTAGES: "50 100", SHADOW_GATE: "false" }));
  assert.equal(r.code, 1, explain(r));
  const newVersion = newestVersion(api);
  assert.deepEqual(api.deploymentsPosted(NAME).map(split), [{ [newVersion]: 0, [oldVersion]: 100 }, { [oldVersion]: 100 }]);
  // the router names the upstream it sent the session to: cell 1's address
  assert.match(r.stderr, /SMOKE TEST FAILED before any traffic was shifted \(routing checks? failed: session of cell 2: reached cell 1 \(127\.0\.0\.1:\d+\), expected cell 2/);
  return parts;
}

describe("routing checks and the metrics comparison through the real router", { concurrency: 1 }, () => {
  test("a healthy rollout passes: every family reaches its cell at every step, the metrics compare", async (t) => {
    const { api, edge, record, env, oldVersion } = await setup(t);
    api.setMetrics(DATASET, ({ tag }) => (tag === TAG ? { requests: 1000, errors: 1, p99_ms: 190 } : healthy));
    const r = await runDeploy([ENV], env({ ROLLOUT_PERCENTAGES: "50 100" }));
    // ROUTING_HEALTH_LOG=1 shows the deploy's log (the routing checks and metrics lines)
    if (process.env.ROUTING_HEALTH_LOG) process.stderr.write(r.stderr);
    assert.equal(r.code, 0, explain(r));
    const rec = record();
    assert.equal(rec.outcome, "completed");
    assert.deepEqual(rec.steps.map((s) => [s.percentage, s.health.ok]), [[0, true], [50, true], [100, true]]);
    for (const step of rec.steps) {
      const byName = Object.fromEntries(step.health.routing.checks.map((c) => [c.name.split(" (")[0].split(":")[0], c]));
      assert.equal(byName["session of cell 1"].new.cell, "1");
      assert.equal(byName["session of cell 2"].new.cell, "2");
      assert.equal(byName["routable token of cell 2"].new.cell, "2");
      assert.equal(byName["routable token of cell 1"].new.cell, "1");
      // compared with the old version while it is in the deployment (an override reaches nothing else)
      assert.equal(step.health.routing.checks.some((c) => c.family === "claim" && c.old), step.percentage < 100, `at ${step.percentage}%`);
      assert.ok(step.health.routing.checks.some((c) => c.family === "legacy" && c.new.cell === "1"), "the legacy fallthrough reaches cell 1");
      assert.ok(step.health.routing.checks.every((c) => c.problem === null), JSON.stringify(step.health.routing.checks));
    }
    assert.equal(rec.steps[0].health.metrics, undefined, "no traffic at the smoke test: no comparison");
    assert.deepEqual(rec.steps.slice(1).map((s) => s.health.metrics.verdict), ["comparable", "comparable"]);
    assert.deepEqual(api.sqlQueries(), [perVersionQuery(DATASET, 1), perVersionQuery(DATASET, 1)]);
    assert.deepEqual(api.unknown, []);
    // the routing checks went through both versions by override, and only by override
    const newVersion = newestVersion(api);
    assert.ok(edge.requests.some((q) => q.how === "override" && q.version === oldVersion));
    assert.ok(edge.requests.every((q) => q.how === "override" && [newVersion, oldVersion].includes(q.version)));
  });

  test("a new version whose classification sends every session to the legacy cell is stopped by the routing checks, never promoted", async (t) => {
    const { record, cell2 } = await deployBroken(t);
    const rec = record();
    assert.equal(rec.outcome, "rolled-back");
    assert.deepEqual(rec.steps.map((s) => [s.percentage, s.health.ok]), [[0, false]]);
    const session2 = rec.steps[0].health.routing.checks.find((c) => c.name === "session of cell 2");
    assert.deepEqual([session2.new.status, session2.new.cell], [200, "1"]);
    // the router it ran was the real one: cell 2 never saw the smoke test's session
    assert.ok(cell2.seen.every((q) => !String(q.headers.cookie ?? "").includes("cell-2-")));
  });

  test("cells that do not name themselves: the router names each route to the smoke-test secret, a healthy rollout passes and a broken classification is stopped", async (t) => {
    const healthySetup = await setup(t, { cellHeader: false });
    healthySetup.api.setMetrics(DATASET, () => healthy);
    const ok = await runDeploy([ENV], healthySetup.env({ ROLLOUT_PERCENTAGES: "100" }));
    assert.equal(ok.code, 0, explain(ok));
    const smoke = healthySetup.record().steps[0].health.routing.checks;
    const byName = Object.fromEntries(smoke.map((c) => [c.name.split(" (")[0].split(":")[0], c.new]));
    const { cell1, cell2 } = healthySetup;
    assert.deepEqual(byName["session of cell 2"], { status: 200, namedBy: "router", cell: "2", rule: "session_cookie", upstream: `127.0.0.1:${cell2.port}`, registry: false });
    assert.deepEqual([byName["routable token of cell 1"].cell, byName["routable token of cell 1"].rule], ["1", "private_token"]);
    assert.deepEqual([byName["legacy fallthrough"].rule, byName["legacy fallthrough"].upstream], ["legacy", `127.0.0.1:${cell1.port}`]);
    assert.match(ok.stderr, /routing check: session of cell 2: 200 from cell 2 \(rule session_cookie, 127\.0\.0\.1:\d+\)/);
    // the router drops the secret before the cell, and names routes to nobody else
    assert.ok([...cell1.seen, ...cell2.seen].every((q) => q.headers["x-gitlab-http-router-smoke-test"] === undefined));

    await deployBroken(t, { cellHeader: false });
  });

  test("a new version whose 5xx ratio grows past the old's at 50 % is rolled back at 50 %", async (t) => {
    const { api, record, env, oldVersion } = await setup(t);
    api.setMetrics(DATASET, ({ tag, percentage }) => (tag === TAG ? (percentage >= 50 ? { requests: 2000, errors: 120, p99_ms: 185 } : { requests: 400, errors: 0, p99_ms: 175 }) : healthy));
    const r = await runDeploy([ENV], env({ ROLLOUT_PERCENTAGES: "10 50 100" }));
    assert.equal(r.code, 1, explain(r));
    const newVersion = newestVersion(api);
    assert.deepEqual(api.deploymentsPosted(NAME).map(split), [
      { [newVersion]: 0, [oldVersion]: 100 },
      { [newVersion]: 10, [oldVersion]: 90 },
      { [newVersion]: 50, [oldVersion]: 50 },
      { [oldVersion]: 100 },
    ]);
    assert.match(r.stderr, /health check failed at 50% \(metrics comparison: the new version is worse: 5xx ratio 0\.0600 against the old version's 0\.0010/);
    assert.match(r.stderr, /ROLLED BACK/);
    const rec = record();
    assert.equal(rec.outcome, "rolled-back");
    assert.deepEqual(rec.steps.map((s) => [s.percentage, s.health.ok, s.health.metrics?.verdict ?? null]), [[0, true, null], [10, true, "comparable"], [50, false, "worse"]]);
    assert.equal(rec.rollback.to, oldVersion);
  });
});
