// The tail worker (tail-worker/; docs/logging.md, "Errors to Sentry: the
// tail worker") deployed with the router by deploy-worker.sh: the real
// script and the pinned wrangler against the Cloudflare API stand-in. The
// tail worker goes first (`wrangler deploy --config tail-worker/wrangler.toml
// --env <env>`), then the router, whose upload names it in
// `tail_consumers`; its failure stops the deploy before the router moves.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { before, describe, test } from "node:test";
import { parse } from "smol-toml";
import { startStandin } from "./cf-api-standin.mjs";
import { REPO, ensureBuild, explain, makeProject, runDeploy, workerName, workerRoutes, writes } from "./helpers.mjs";
import { readWranglerConfig } from "../../scripts/deploy/wrangler-config.mjs";

const TAIL_CONFIG = path.join(REPO, "tail-worker", "wrangler.toml");

/** The tail worker's name in `env`, as tail-worker/wrangler.toml has it. */
const tailName = (env) => parse(fs.readFileSync(TAIL_CONFIG, "utf8")).env[env].name;

const scriptPut = (api, name) => api.requests.findIndex((q) => q.method === "PUT" && q.path.endsWith(`/workers/scripts/${name}`));
const versionsPost = (api, name) => api.requests.findIndex((q) => q.method === "POST" && q.path.endsWith(`/workers/scripts/${name}/versions`));

before(() => ensureBuild());

/**
 * An environment's router and tail worker names, a stand-in (closed after
 * the test) and a project; `seeded`: the router serves one old version.
 */
async function setup(t, env, { seeded = false } = {}) {
  const [name, tail] = [workerName(env), tailName(env)];
  const api = await startStandin();
  t.after(() => api.close());
  const project = makeProject(t);
  const oldVersion = seeded ? api.seed(name, { tag: "0ldc0de", routes: workerRoutes(env) }) : null;
  return { name, tail, api, project, oldVersion };
}

test("every deployable environment names its own tail worker, which tail-worker/wrangler.toml deploys under the same environment", () => {
  const router = parse(fs.readFileSync(path.join(REPO, "wrangler.toml"), "utf8"));
  const tail = parse(fs.readFileSync(TAIL_CONFIG, "utf8"));
  const { deployable } = readWranglerConfig(path.join(REPO, "wrangler.toml"));
  const names = new Set();
  for (const env of deployable) {
    assert.ok(tail.env[env], `tail-worker/wrangler.toml has no [env.${env}]`);
    assert.deepEqual(router.env[env].tail_consumers?.map((c) => ({ ...c })), [{ service: tail.env[env].name }], `[env.${env}] tail_consumers`);
    assert.equal(tail.env[env].vars.SENTRY_ENVIRONMENT, env);
    assert.ok(!("SENTRY_DSN" in tail.env[env].vars), "the DSN is a secret, never a var");
    names.add(tail.env[env].name);
  }
  assert.equal(names.size, deployable.length, "one tail worker per environment");
  assert.equal(router.env.dev.tail_consumers, undefined, "dev (local) has none");
});

describe("deploy-worker.sh deploys the tail worker before the router", { concurrency: 2 }, () => {
  test("first deploy: the tail worker's script upload, then the router's, which names it as its tail consumer", async (t) => {
    const env = "staging";
    const { name, tail, api, project } = await setup(t, env);
    const r = await runDeploy([env], project.env(api));
    assert.equal(r.code, 0, explain(r));
    const [tailAt, routerAt] = [scriptPut(api, tail), scriptPut(api, name)];
    assert.ok(tailAt >= 0 && routerAt > tailAt, `the tail worker first: PUT ${tail} at ${tailAt}, PUT ${name} at ${routerAt}\n${explain(r)}`);
    const tailUpload = api.requests[tailAt].metadata;
    assert.deepEqual(
      tailUpload.bindings.map((b) => [b.name, b.type, b.text]),
      [["SENTRY_ENVIRONMENT", "plain_text", env]],
      "its one var; SENTRY_DSN is a secret put apart",
    );
    assert.equal(tailUpload.tail_consumers, undefined, "the tail worker is tailed by nothing");
    assert.equal(api.scripts.get(tail).versions[0].annotations["workers/tag"], "abc1234");
    assert.deepEqual(api.requests[routerAt].metadata.tail_consumers, [{ service: tail }]);
    assert.deepEqual(JSON.parse(fs.readFileSync(path.join(project.dir, "rollout-record.json"), "utf8")).tail_worker.name, tail);
    assert.deepEqual(api.unknown, []);
  });

  test("rollout: the tail worker before the version upload, which names it; each versions deploy patches it into the script settings", async (t) => {
    const { name, tail, api, project } = await setup(t, "production", { seeded: true });
    const r = await runDeploy(["production"], project.env(api, { ROLLOUT_PERCENTAGES: "100" }));
    assert.equal(r.code, 0, explain(r));
    const [tailAt, uploadAt] = [scriptPut(api, tail), versionsPost(api, name)];
    assert.ok(tailAt >= 0 && uploadAt > tailAt, `the tail worker first: PUT ${tail} at ${tailAt}, versions upload at ${uploadAt}\n${explain(r)}`);
    assert.deepEqual(api.requests[uploadAt].metadata.tail_consumers, [{ service: tail }]);
    // From the first deployment on (the new version at 0 %), each `wrangler
    // versions deploy` is a deployment POST, then a settings PATCH with it.
    const steps = api.requests.filter(
      (q) => (q.method === "POST" && q.path.endsWith(`/scripts/${name}/deployments`)) || (q.method === "PATCH" && q.path.endsWith(`/scripts/${name}/script-settings`)),
    );
    const fromFirst = steps.slice(steps.findIndex((q) => q.method === "POST"));
    assert.deepEqual(fromFirst.map((q) => q.method), ["POST", "PATCH", "POST", "PATCH"], explain(r));
    for (const p of fromFirst.filter((q) => q.method === "PATCH")) assert.deepEqual(p.json.tail_consumers, [{ service: tail }]);
    assert.deepEqual(api.scripts.get(name).settings.tail_consumers, [{ service: tail }]);
    assert.deepEqual(api.unknown, []);
  });

  test("the tail worker's deploy fails: exit 1, the router is neither uploaded nor moved", async (t) => {
    const { name, tail, api, project, oldVersion } = await setup(t, "staging", { seeded: true });
    api.failScriptPut(tail);
    const r = await runDeploy(["staging"], project.env(api));
    assert.equal(r.code, 1, explain(r));
    assert.match(r.stderr, /wrangler deploy of the tail worker gitlab-http-router-tail-staging .* failed: the router was not uploaded, traffic is unchanged/);
    assert.equal(versionsPost(api, name), -1, "no router upload");
    assert.deepEqual(writes(api).filter((q) => q.path.includes(`/scripts/${name}`)), [], "nothing of the router written");
    assert.deepEqual(api.latestDeployment(name).versions, [{ version_id: oldVersion, percentage: 100 }]);
    assert.equal(JSON.parse(fs.readFileSync(path.join(project.dir, "rollout-record.json"), "utf8")).outcome, "failed");
  });

  test("a tail consumer its config does not deploy: exit 2 before anything is written", async (t) => {
    const { api, project } = await setup(t, "staging");
    const file = path.join(project.dir, "tail-worker", "wrangler.toml");
    fs.writeFileSync(file, fs.readFileSync(file, "utf8").replace('name = "gitlab-http-router-tail-staging"', 'name = "some-other-worker"'));
    const r = await runDeploy(["staging"], project.env(api));
    assert.equal(r.code, 2, explain(r));
    assert.match(r.stderr, /tail_consumers names gitlab-http-router-tail-staging, but \[env\.staging\] of .* deploys some-other-worker/);
    assert.deepEqual(writes(api), []);
  });
});
