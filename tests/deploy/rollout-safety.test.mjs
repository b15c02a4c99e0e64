// The rollout's safety nets end to end (the real deploy-worker.sh, the
// pinned wrangler, cf-api-standin.mjs, and edge-standin.mjs where the
// health check needs a Worker to answer): the smoke test of the new version
// alone before any traffic, the routes check that repairs a half-published
// first deploy, and the rollout record that --rollback consumes.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { before, describe, test } from "node:test";
import { startStandin } from "./cf-api-standin.mjs";
import { startEdge } from "./edge-standin.mjs";
import { SMOKE_SECRET, ensureBuild, explain, makeProject, runDeploy, workerName, workerRoutes, writes } from "./helpers.mjs";

const ENV = "staging";
const NAME = workerName(ENV);
const TAG = "abc1234";

before(() => ensureBuild());

async function setup(t, { seeded = true } = {}) {
  const api = await startStandin();
  t.after(() => api.close());
  const edge = await startEdge(api, NAME, { smokeSecret: SMOKE_SECRET });
  t.after(() => edge.close());
  const project = makeProject(t);
  const oldVersion = seeded ? api.seed(NAME, { tag: "0ldc0de", routes: workerRoutes(ENV) }) : null;
  const record = () => JSON.parse(fs.readFileSync(path.join(project.dir, "rollout-record.json"), "utf8"));
  return { api, edge, project, oldVersion, record };
}

const split = (versions) => Object.fromEntries(versions.map((v) => [v.version_id, v.percentage]));
const newestVersion = (api) => api.scripts.get(NAME).versions[0].id;

describe("smoke test, routes and rollout record", { concurrency: 2 }, () => {
  test("a broken new version fails the smoke test at 0 %: the probe carried the override header, no traffic moved", async (t) => {
    const { api, edge, project, oldVersion, record } = await setup(t);
    edge.breakTag(TAG);
    const r = await runDeploy([ENV], project.env(api, { HEALTH_CHECK_URL: edge.url("/users/sign_in") }));
    assert.equal(r.code, 1, explain(r));
    const newVersion = newestVersion(api);
    // the new version was in a deployment only at 0 %, then taken out again
    assert.deepEqual(api.deploymentsPosted(NAME).map(split), [{ [newVersion]: 0, [oldVersion]: 100 }, { [oldVersion]: 100 }]);
    // one probe, naming the new version, and the edge honoured it (the version was in the deployment)
    assert.deepEqual(
      edge.requests.map(({ path, override, how, version, status }) => ({ path, override, how, version, status })),
      [{ path: "/users/sign_in", override: `${NAME}="${newVersion}"`, how: "override", version: newVersion, status: 503 }],
    );
    assert.match(r.stderr, /SMOKE TEST FAILED before any traffic was shifted \(HEALTH_CHECK_URL .* answered 503/);
    assert.match(r.stderr, /nothing was shifted/);
    const rec = record();
    assert.equal(rec.outcome, "rolled-back");
    assert.deepEqual(rec.steps.map((s) => [s.percentage, s.smoke, s.health.ok]), [[0, true, false]]);
    assert.equal(rec.rollback.to, oldVersion);
  });

  test("HEALTH_CHECK_URL without SMOKE_TEST_SECRET stops the deploy before anything is uploaded; a wrong secret fails the smoke test (403)", async (t) => {
    const { api, edge, project, oldVersion } = await setup(t);
    const missing = await runDeploy([ENV], project.env(api, { HEALTH_CHECK_URL: edge.url("/users/sign_in"), SMOKE_TEST_SECRET: "" }));
    assert.equal(missing.code, 2, explain(missing));
    assert.match(missing.stderr, /HEALTH_CHECK_URL is set but SMOKE_TEST_SECRET is not/);
    assert.deepEqual(writes(api), [], "nothing uploaded or deployed");
    const wrong = await runDeploy([ENV], project.env(api, { HEALTH_CHECK_URL: edge.url("/users/sign_in"), SMOKE_TEST_SECRET: "guess" }));
    assert.equal(wrong.code, 1, explain(wrong));
    assert.match(wrong.stderr, /SMOKE TEST FAILED before any traffic was shifted \(HEALTH_CHECK_URL .* answered 403/);
    assert.deepEqual(api.deploymentsPosted(NAME).at(-1).map((v) => [v.version_id, v.percentage]), [[oldVersion, 100]]);
  });

  test("HEALTH_CHECK_URL over http: to a host that is not loopback: exit 2 before anything is uploaded, the secret never sent", async (t) => {
    const { api, edge, project } = await setup(t);
    // 0.0.0.0 reaches this machine's stand-in, but is no loopback address:
    // a deploy that sent the secret there would show it in edge.requests.
    const url = edge.url("/users/sign_in").replace("127.0.0.1", "0.0.0.0");
    assert.match(url, /^http:\/\/0\.0\.0\.0:/);
    const r = await runDeploy([ENV], project.env(api, { HEALTH_CHECK_URL: url }));
    assert.equal(r.code, 2, explain(r));
    assert.match(r.stderr, /HEALTH_CHECK_URL=http:\/\/0\.0\.0\.0:\d+\/users\/sign_in is http: to 0\.0\.0\.0, which is not loopback: the smoke-test secret \(SMOKE_TEST_SECRET\) would cross the network in the clear/);
    assert.deepEqual(writes(api), [], "nothing uploaded or deployed");
    assert.deepEqual(edge.requests, [], "no probe, so no secret, went out");
  });

  test("a healthy rollout: every probe reaches the new version through the override, from 0 % on", async (t) => {
    const { api, edge, project, oldVersion } = await setup(t);
    const r = await runDeploy([ENV], project.env(api, { HEALTH_CHECK_URL: edge.url("/users/sign_in"), ROLLOUT_PERCENTAGES: "5 100" }));
    assert.equal(r.code, 0, explain(r));
    const newVersion = newestVersion(api);
    assert.deepEqual(api.deploymentsPosted(NAME).map(split), [{ [newVersion]: 0, [oldVersion]: 100 }, { [newVersion]: 5, [oldVersion]: 95 }, { [newVersion]: 100 }]);
    assert.equal(edge.requests.length, 3);
    for (const q of edge.requests) assert.deepEqual([q.override, q.how, q.version, q.status], [`${NAME}="${newVersion}"`, "override", newVersion, 200]);
  });

  test("rolling back a registry_migration step warns that repositories move back, in the log and the record; a smoke test's stop does not", async (t) => {
    const { api, project, oldVersion, record } = await setup(t);
    // staging running the migration ruleset; the health check fails from 50 % on
    const toml = fs.readFileSync(project.config, "utf8");
    const staging = toml.indexOf("[env.staging.vars]");
    fs.writeFileSync(project.config, toml.slice(0, staging) + toml.slice(staging).replace(/GITLAB_RULES_CONFIG = "[a-z_]+"/, 'GITLAB_RULES_CONFIG = "registry_migration"'));
    const r = await runDeploy([ENV], project.env(api, { HEALTH_CHECK_CMD: 'test "$DEPLOY_PERCENTAGE" -lt 50', ROLLOUT_PERCENTAGES: "25 50 100" }));
    assert.equal(r.code, 1, explain(r));
    assert.match(r.stderr, /REGISTRY: .* runs registry_migration, which moves repositories between registries \(rules [a-z_, ]*registry_repository_migrated/);
    assert.match(r.stderr, /move BACK to the legacy registry/);
    const rec = record();
    assert.equal(rec.rollback.to, oldVersion);
    assert.match(rec.rollback.warning, /moves repositories between registries/);

    // the same ruleset stopped at the smoke test: nothing moved, no warning
    const r2 = await runDeploy([ENV], project.env(api, { HEALTH_CHECK_CMD: "false", DEPLOY_TAG: "def5678" }));
    assert.equal(r2.code, 1, explain(r2));
    assert.doesNotMatch(r2.stderr, /REGISTRY:/);
  });

  test("a first deploy that fails at its canary route leaves a Worker without routes; the next run goes on from the canary, nothing uploaded again", async (t) => {
    const { api, project } = await setup(t, { seeded: false });
    api.failRoutesPut(1);
    const r1 = await runDeploy([ENV], project.env(api));
    assert.equal(r1.code, 1, explain(r1));
    assert.ok(api.scripts.has(NAME), "the script was uploaded");
    assert.deepEqual(api.scripts.get(NAME).routes, [], "but its routes are not published");
    assert.match(r1.stderr, /first deploy of .* on the canary route .* failed; staging\.gitlab\.com\/\* were not touched\. Run  deploy-worker.sh staging  again/s);

    const r2 = await runDeploy([ENV], project.env(api));
    assert.equal(r2.code, 0, explain(r2));
    assert.match(r2.stderr, /do not point at gitlab-http-router-staging: publishing them/);
    assert.match(r2.stderr, /wrangler triggers deploy --env staging/);
    assert.deepEqual(api.scripts.get(NAME).routes.map((x) => [x.pattern, x.script]), [["staging.gitlab.com/*", NAME]]);
    assert.match(r2.stderr, /already serves 100% of .*: no new upload; publishing the canary route/);
    assert.match(r2.stderr, /done: first deploy of/);
    assert.equal(api.requests.filter((q) => q.method === "POST" && q.path.endsWith(`/scripts/${NAME}/versions`)).length, 0, "nothing uploaded again");

    // and now it is whole: the next run changes nothing
    const before = writes(api).length;
    const r3 = await runDeploy([ENV], project.env(api));
    assert.equal(r3.code, 0, explain(r3));
    assert.match(r3.stderr, /routes published: staging.gitlab.com\/\*/);
    assert.equal(writes(api).length, before);
    assert.deepEqual(api.unknown, []);
  });

  test("a running Worker whose routes were all removed is deployed as a first deploy: the canary, then its routes", async (t) => {
    const { api, project } = await setup(t);
    api.scripts.get(NAME).routes = [];
    const r = await runDeploy([ENV], project.env(api, { ROLLOUT_PERCENTAGES: "100" }));
    assert.equal(r.code, 0, explain(r));
    assert.match(r.stderr, /first deploy: .* serves none of its routes \(staging\.gitlab\.com\/\*\)/);
    assert.deepEqual(api.routeLog.map((e) => e.routes.map((x) => x.pattern)), [[`${NAME}.gitlab.com/*`], ["staging.gitlab.com/*"]]);
    // wrangler deploy, 100 % at once (nothing was served): no 0 % smoke step
    assert.ok(api.deploymentsPosted(NAME).every((v) => v.length === 1 && v[0].percentage === 100), JSON.stringify(api.deploymentsPosted(NAME)));
    const newest = api.scripts.get(NAME).versions[0];
    assert.equal(newest.annotations["workers/tag"], TAG);
    assert.deepEqual(api.latestDeployment(NAME).versions, [{ version_id: newest.id, percentage: 100 }]);
  });

  test("a route missing from a Worker that serves its other routes is published before the rollout", async (t) => {
    const { api, project } = await setup(t);
    // a second route the seeded Worker does not have yet
    const config = fs.readFileSync(project.config, "utf8").replace(
      '{ pattern = "staging.gitlab.com/*", zone_name = "gitlab.com" },',
      '{ pattern = "staging.gitlab.com/*", zone_name = "gitlab.com" },\n  { pattern = "www.staging.gitlab.com/*", zone_name = "gitlab.com" },',
    );
    fs.writeFileSync(project.config, config);
    const r = await runDeploy([ENV], project.env(api, { ROLLOUT_PERCENTAGES: "100" }));
    assert.equal(r.code, 0, explain(r));
    const routesPut = api.requests.findIndex((q) => q.method === "PUT" && q.path.endsWith(`/scripts/${NAME}/routes`));
    const firstDeployment = api.requests.findIndex((q) => q.method === "POST" && q.path.endsWith(`/scripts/${NAME}/deployments`));
    assert.ok(routesPut >= 0 && routesPut < firstDeployment, "routes first, then the rollout");
    assert.equal(api.scripts.get(NAME).routes.length, 2);
  });

  test("the rollout record lists every step with its deployment id and health; --rollback with it returns to the version before", async (t) => {
    const { api, project, oldVersion, record } = await setup(t);
    const log = path.join(project.dir, "health.log");
    const r = await runDeploy([ENV], project.env(api, { ROLLOUT_PERCENTAGES: "50 100", HEALTH_CHECK_CMD: `echo "$DEPLOY_PERCENTAGE" >> ${log}` }));
    assert.equal(r.code, 0, explain(r));
    const newVersion = newestVersion(api);
    const rec = record();
    assert.deepEqual([rec.environment, rec.worker, rec.tag, rec.kind, rec.outcome], [ENV, NAME, TAG, "rollout", "completed"]);
    assert.deepEqual([rec.old_version, rec.new_version], [oldVersion, newVersion]);
    const deploymentIds = api.scripts.get(NAME).deployments.map((d) => d.id).reverse().slice(1); // oldest first, without the seed
    assert.deepEqual(rec.steps.map((s) => s.percentage), [0, 50, 100]);
    assert.deepEqual(rec.steps.map((s) => s.deployment_id), deploymentIds);
    assert.ok(rec.steps.every((s) => s.health.ok && s.deployed_at && s.health.checked_at));
    assert.equal(rec.traffic, `${newVersion} at 100%`);
    assert.deepEqual(rec.routes, { wanted: ["staging.gitlab.com/*"], missing: [], published: false });

    const env = project.env(api, { ROLLBACK_RECORD: path.join(project.dir, "rollout-record.json") });
    const rb = await runDeploy(["--rollback", ENV], env);
    assert.equal(rb.code, 0, explain(rb));
    assert.match(rb.stderr, new RegExp(`the rollout record .* says ${oldVersion} served before ${newVersion}`));
    assert.deepEqual(split(api.latestDeployment(NAME).versions), { [oldVersion]: 100 });
    assert.equal(record().rollback.to, oldVersion);

    // the same record again: already undone (the history alone would go forward to the new version)
    const before = writes(api).length;
    const rb2 = await runDeploy(["--rollback", ENV], env);
    assert.equal(rb2.code, 0, explain(rb2));
    assert.match(rb2.stderr, /already serves 100%: nothing to roll back/);
    assert.equal(writes(api).length, before);
  });

  test("--rollback refuses a record that a later deploy superseded, and changes nothing", async (t) => {
    const { api, project } = await setup(t);
    const first = path.join(project.dir, "first.json");
    const r1 = await runDeploy([ENV], project.env(api, { ROLLOUT_PERCENTAGES: "100", ROLLOUT_RECORD: first }));
    assert.equal(r1.code, 0, explain(r1));
    const r2 = await runDeploy([ENV], project.env(api, { ROLLOUT_PERCENTAGES: "100", DEPLOY_TAG: "def5678" }));
    assert.equal(r2.code, 0, explain(r2));
    const before = writes(api).length;
    const rb = await runDeploy(["--rollback", ENV], project.env(api, { ROLLBACK_RECORD: first }));
    assert.equal(rb.code, 1, explain(rb));
    assert.match(rb.stderr, /a later deploy changed it/);
    assert.equal(writes(api).length, before);
  });
});
