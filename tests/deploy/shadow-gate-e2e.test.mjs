// The shadow gate end to end: the disagreements it reads are the data
// points the real worker wrote. The serving staging version runs
// session_token with cells as its shadow at sample 1 in the real built
// router (edge-standin.mjs: workerd, one instance per version, with the
// [vars] and the version metadata that version was uploaded with) in front
// of loopback cells, its ROUTER_METRICS bound to the capture worker
// (tests/e2e/metrics-capture.mjs). A route table goes through the edge;
// the stand-in's Analytics Engine answers the gate's query from the points
// the worker wrote for that version (blob2), and the deploy promoting
// cells is refused until SHADOW_INTENDED lists exactly the rule pairs
// `rulesctl diff session_token cells` finds over the same table.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { before, test } from "node:test";
import { startStandin } from "./cf-api-standin.mjs";
import { startEdge } from "./edge-standin.mjs";
import { REPO, SMOKE_SECRET, ensureBuild, explain, loopbackCells, makeProject, runDeploy, setStagingVars, workerName, workerRoutes } from "./helpers.mjs";
import { CAPTURE_WORKER, asRow, captureBinding, capturedPoints, shadowRows } from "../e2e/metrics-capture.mjs";
import { eventually, sessionCookie } from "../e2e/harness.mjs";

const ENV = "staging";
const NAME = workerName(ENV);
const DATASET = "gitlab_http_router_staging";
const HOST = "staging.gitlab.com";
const RULESCTL = process.env.RULESCTL_BIN ?? path.join(REPO, "target/debug/rulesctl");

/** The route table: the requests the serving version evaluates in its shadow. */
const TABLE = [
  { path: "/" },
  { path: "/explore" },
  { path: "/gitlab-org/gitlab" },
  { path: "/gitlab-org/gitlab/-/issues/1" },
  { path: "/api/v4/projects/1" },
  { path: "/dashboard", cookies: { _gitlab_session: sessionCookie(2).split("=")[1] } },
  { path: "/users/sign_in" },
  { path: "/-/snippets/5" },
];

before(() => {
  ensureBuild();
  if (!fs.existsSync(RULESCTL)) {
    const r = spawnSync("cargo", ["build", "-q", "--bin", "rulesctl"], { cwd: REPO, stdio: "inherit" });
    if (r.status !== 0) throw new Error("cargo build --bin rulesctl failed");
  }
});

/** `rulesctl diff session_token cells --json` over TABLE: its changes counted as the gate names them. */
function rulesctlDisagreements(t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "shadow-gate-e2e-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const requests = path.join(dir, "requests.jsonl");
  fs.writeFileSync(requests, TABLE.map((r) => JSON.stringify({ method: "GET", url: `https://${HOST}${r.path}`, cookies: r.cookies })).join("\n") + "\n");
  const run = spawnSync(RULESCTL, ["diff", "session_token", "cells", "--rules-dir", path.join(REPO, "rules"), "--requests", requests, "--json"], { encoding: "utf8" });
  assert.equal(run.status, 0, run.stderr);
  return named(JSON.parse(run.stdout).changes.map((c) => ({ rule: c.old.rule, shadow_rule: c.new.rule, difference: c.difference, requests: 1 })));
}

/** Disagreeing rows summed by the gate's name for them, "rule>shadow_rule (difference)". */
function named(rows) {
  const out = {};
  for (const r of rows.filter((r) => r.difference !== "")) {
    const name = `${r.rule}>${r.shadow_rule} (${r.difference})`;
    out[name] = (out[name] ?? 0) + r.requests;
  }
  return out;
}

test("the shadow gate reads the disagreements the serving worker wrote: refused until SHADOW_INTENDED lists rulesctl diff's pairs, then promoted", async (t) => {
  const { vars } = await loopbackCells(t);
  const api = await startStandin();
  t.after(() => api.close());
  const project = makeProject(t);
  // The candidate: cells, with the same cells.
  setStagingVars(project.config, { ...vars, GITLAB_RULES_CONFIG: "cells" });
  const edge = await startEdge(api, NAME, {
    smokeSecret: SMOKE_SECRET,
    router: { build: path.join(project.dir, "build"), host: HOST, options: (version) => captureBinding(version), extraWorkers: [CAPTURE_WORKER] },
  });
  t.after(() => edge.close());
  const serving = { ...vars, GITLAB_ENVIRONMENT: "staging", GITLAB_ROUTER_SIGNING_POLICY: "optional", GITLAB_SHADOW_RULES_CONFIG: "cells", GITLAB_SHADOW_SAMPLE: "1" };
  const bindings = [...Object.entries(serving).map(([name, text]) => ({ name, type: "plain_text", text })), { name: "CF_VERSION_METADATA", type: "version_metadata" }];
  const oldVersion = api.seed(NAME, { tag: "0ldc0de", routes: workerRoutes(ENV), bindings });
  // Analytics Engine: the gate's query over the points each version's router wrote.
  const rowsOf = (version) => capturedPoints(edge.routerLogs, version).map(asRow);
  api.setShadow(DATASET, (version) => shadowRows(rowsOf(version), version));
  api.setMetrics(DATASET, () => ({ requests: 4000, errors: 4, p99_ms: 180 }));

  for (const r of TABLE) {
    const headers = r.cookies ? { cookie: Object.entries(r.cookies).map(([k, v]) => `${k}=${v}`).join("; ") } : {};
    const res = await fetch(edge.url(r.path), { headers, redirect: "manual" });
    await res.arrayBuffer();
    assert.deepEqual([res.status, res.headers.get("x-standin-version")], [200, oldVersion], `${r.path}: a cell answered, on the serving version`);
  }
  const points = await eventually(() => {
    const rows = rowsOf(oldVersion);
    assert.equal(rows.length, TABLE.length, "one data point per request");
    return rows;
  }, 5000);
  // The worker names its version (blob2) and evaluated every request in the shadow.
  assert.deepEqual(points.map((p) => p.blob2), TABLE.map(() => oldVersion));
  assert.ok(points.every((p) => p.blob11 !== ""), JSON.stringify(points));
  const expected = rulesctlDisagreements(t);
  assert.deepEqual(named(shadowRows(points, oldVersion)), expected, "the worker's disagreements are rulesctl diff's, per request");
  const disagreeing = Object.values(expected).reduce((a, b) => a + b, 0);
  assert.ok(disagreeing > 0 && disagreeing < TABLE.length, "the rulesets disagree on some requests, agree on others");
  // SHADOW_INTENDED's pairs; the gate's problem names five at the most.
  const pairs = [...new Set(Object.keys(expected).map((name) => name.split(" ")[0]))];
  assert.ok(pairs.length >= 2 && Object.keys(expected).length <= 5, JSON.stringify(expected));

  const record = () => JSON.parse(fs.readFileSync(path.join(project.dir, "rollout-record.json"), "utf8"));
  const run = (extra = {}) =>
    runDeploy([ENV], project.env(api, { HEALTH_CHECK_URL: edge.url("/users/sign_in"), ROLLOUT_PERCENTAGES: "100", SHADOW_MIN_EVALUATED: String(TABLE.length), BAKE_MIN_REQUESTS: "100", ...extra }));

  // Nothing declared: refused, every pair named with its count.
  const refused = await run();
  assert.equal(refused.code, 1, explain(refused));
  assert.match(refused.stderr, new RegExp(`shadow gate: ${disagreeing} of ${TABLE.length} evaluated requests decided differently`));
  for (const [name, n] of Object.entries(expected)) assert.ok(refused.stderr.includes(`${name}: ${n}`), `${name}: ${n} named`);
  assert.equal(api.scripts.get(NAME).versions.length, 1, "nothing uploaded");
  assert.deepEqual([record().outcome, record().shadow.verdict], ["refused", "disagrees"]);
  assert.deepEqual(named(record().shadow.disagreements), expected);

  // One pair left out of SHADOW_INTENDED: refused, only that pair named.
  const [left, ...declared] = pairs;
  const leftOut = Object.entries(expected).filter(([name]) => name.startsWith(`${left} `));
  const short = await run({ SHADOW_INTENDED: declared.join(",") });
  assert.equal(short.code, 1, explain(short));
  const problem = short.stderr.match(/shadow gate: (\d+) of (\d+) evaluated requests decided differently.*?: (.*); nothing was changed/);
  assert.ok(problem, explain(short));
  assert.deepEqual([Number(problem[1]), Number(problem[2]), problem[3]], [leftOut.reduce((a, [, n]) => a + n, 0), TABLE.length, leftOut.map(([name, n]) => `${name}: ${n}`).join(", ")]);
  assert.equal(api.scripts.get(NAME).versions.length, 1, "nothing uploaded");

  // Exactly rulesctl diff's pairs: promoted.
  const promoted = await run({ SHADOW_INTENDED: pairs.join(",") });
  assert.equal(promoted.code, 0, explain(promoted));
  assert.match(promoted.stderr, new RegExp(`shadow gate: cells is within what was declared on ${TABLE.length} evaluated requests \\(${disagreeing} intended and 0 other disagreements\\)`));
  assert.deepEqual([record().outcome, record().shadow.verdict], ["completed", "within"]);
  const newVersion = api.scripts.get(NAME).versions[0].id;
  assert.notEqual(newVersion, oldVersion);
  assert.deepEqual(api.latestDeployment(NAME).versions.map((v) => [v.version_id, v.percentage]), [[newVersion, 100]]);
  // The smoke test went through the new version's router, which names its own version.
  assert.ok(rowsOf(newVersion).length > 0 && rowsOf(newVersion).every((p) => p.blob2 === newVersion && p.blob11 === ""), "the new version writes its own points, no shadow");
  assert.deepEqual(api.unknown, []);
});
