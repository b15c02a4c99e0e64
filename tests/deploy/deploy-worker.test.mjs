// deploy-worker.sh end to end: the real script and the pinned wrangler
// against a local stand-in for the Cloudflare API (cf-api-standin.mjs), one
// stand-in and one temp project per test. Assertions are on what the
// stand-in received.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { before, describe, test } from "node:test";
import { startStandin } from "./cf-api-standin.mjs";
import { ensureBuild, explain, makeProject, runDeploy, startDeploy, workerName, workerRoutes, writes } from "./helpers.mjs";

const ENV = "staging";
const NAME = workerName(ENV);
const OLD_TAG = "0ldc0de";

before(() => ensureBuild());

/** A stand-in (closed after the test) and a project; seeded: NAME serves one old version. */
async function setup(t, { seeded = true } = {}) {
  const api = await startStandin();
  t.after(() => api.close());
  const project = makeProject(t);
  const oldVersion = seeded ? api.seed(NAME, { tag: OLD_TAG, routes: workerRoutes(ENV) }) : null;
  return { api, project, oldVersion };
}

const uploads = (api) => api.requests.filter((r) => r.method === "POST" && r.path.endsWith(`/scripts/${NAME}/versions`));
const deploymentPosts = (api) => api.requests.filter((r) => r.method === "POST" && r.path.endsWith(`/scripts/${NAME}/deployments`));
const split = (versions) => Object.fromEntries(versions.map((v) => [v.version_id, v.percentage]));

function noUnknownCalls(api) {
  assert.deepEqual(api.unknown.map((r) => `${r.method} ${r.path}`), [], "wrangler called something the stand-in does not implement");
}

describe("deploy-worker.sh against the Cloudflare API stand-in", { concurrency: 2 }, () => {
  test("1. first deploy: one script PUT, 100 % on the canary route, then the environment's routes", async (t) => {
    const { api, project } = await setup(t, { seeded: false });
    const r = await runDeploy([ENV], project.env(api));
    assert.equal(r.code, 0, explain(r));
    const puts = api.requests.filter((q) => q.method === "PUT" && q.path.endsWith(`/workers/scripts/${NAME}`));
    assert.equal(puts.length, 1, explain(r));
    assert.equal(uploads(api).length, 0, "no versions upload on a first deploy");
    assert.equal(deploymentPosts(api).length, 0, "no versions deploy on a first deploy");
    const deployment = api.latestDeployment(NAME);
    assert.equal(deployment.versions.length, 1);
    assert.equal(deployment.versions[0].percentage, 100);
    assert.equal(api.scripts.get(NAME).versions[0].annotations["workers/tag"], "abc1234");
    // the canary route was published with it; the environment's routes after the canary's check (dropping the canary)
    const routes = api.requests.filter((q) => q.method === "PUT" && q.path.endsWith(`/scripts/${NAME}/routes`));
    assert.deepEqual(routes.map((q) => q.json.map((x) => x.pattern)), [[`${NAME}.gitlab.com/*`], ["staging.gitlab.com/*"]]);
    assert.deepEqual(api.scripts.get(NAME).routes.map((x) => x.pattern), ["staging.gitlab.com/*"]);
    // The cell health probe's Cron Trigger (wrangler.toml [env.staging.triggers]).
    assert.deepEqual(api.scripts.get(NAME).schedules.map((s) => s.cron), ["* * * * *"]);
    assert.match(r.output, /first deploy/);
    noUnknownCalls(api);
  });

  test("2. default rollout: the new version at 0 % for the smoke test, then 5, 25, 50, 75, 100 %, old at 100-P", async (t) => {
    const { api, project, oldVersion } = await setup(t);
    const r = await runDeploy([ENV], project.env(api));
    assert.equal(r.code, 0, explain(r));
    assert.equal(uploads(api).length, 1);
    const upload = uploads(api)[0];
    assert.equal(upload.metadata.annotations["workers/tag"], "abc1234");
    assert.equal(upload.metadata.annotations["workers/message"], "test deploy");
    const newVersion = api.scripts.get(NAME).versions[0].id;
    assert.notEqual(newVersion, oldVersion);
    const posted = api.deploymentsPosted(NAME).map(split);
    assert.deepEqual(posted, [
      { [newVersion]: 0, [oldVersion]: 100 },
      { [newVersion]: 5, [oldVersion]: 95 },
      { [newVersion]: 25, [oldVersion]: 75 },
      { [newVersion]: 50, [oldVersion]: 50 },
      { [newVersion]: 75, [oldVersion]: 25 },
      { [newVersion]: 100 },
    ]);
    // order of the POSTs, not only their set
    assert.deepEqual(api.deploymentsPosted(NAME).map((v) => v.find((x) => x.version_id === newVersion).percentage), [0, 5, 25, 50, 75, 100]);
    assert.deepEqual(split(api.latestDeployment(NAME).versions), { [newVersion]: 100 });
    // rulesctl validate, then the environment's configuration check, once each
    const calls = project.rulesctlCalls();
    assert.equal(calls.length, 2, calls.join("\n"));
    assert.equal(calls[0], "validate");
    assert.match(calls[1], /^config check --env staging --config \S+wrangler\.toml --json --secret GITLAB_SMOKE_TEST_SECRET$/);
    noUnknownCalls(api);
  });

  test("3. OVERRIDE_LAST_PERCENTAGE=true, ROLLOUT_PERCENTAGES='5 25': exactly one deployment, at 25 %", async (t) => {
    const { api, project, oldVersion } = await setup(t);
    const env = project.env(api, { OVERRIDE_LAST_PERCENTAGE: "true", ROLLOUT_PERCENTAGES: "5 25" });
    const r = await runDeploy([ENV], env);
    assert.equal(r.code, 0, explain(r));
    const newVersion = api.scripts.get(NAME).versions[0].id;
    assert.deepEqual(api.deploymentsPosted(NAME).map(split), [{ [newVersion]: 0, [oldVersion]: 100 }, { [newVersion]: 25, [oldVersion]: 75 }]);

    // The next pipeline's step (same commit): the deployment is split between
    // the old version and ours, so ours goes on against the old one, with no
    // second upload.
    const r2 = await runDeploy([ENV], { ...env, ROLLOUT_PERCENTAGES: "5 25 50" });
    assert.equal(r2.code, 0, explain(r2));
    assert.equal(uploads(api).length, 1, "no second upload for the same commit");
    assert.deepEqual(api.deploymentsPosted(NAME).map(split).at(-1), { [newVersion]: 50, [oldVersion]: 50 });
    assert.equal(api.deploymentsPosted(NAME).length, 3);

    // A different commit while that rollout is unfinished: refused, nothing changes.
    const before = writes(api).length;
    const r3 = await runDeploy([ENV], { ...env, DEPLOY_TAG: "fff9999", ROLLOUT_PERCENTAGES: "5" });
    assert.equal(r3.code, 1, explain(r3));
    assert.match(r3.stderr, /middle of another rollout/);
    assert.equal(writes(api).length, before);

    // Without the override, a re-run resumes after the share already reached.
    const r4 = await runDeploy([ENV], project.env(api));
    assert.equal(r4.code, 0, explain(r4));
    assert.deepEqual(api.deploymentsPosted(NAME).slice(3).map(split), [{ [newVersion]: 75, [oldVersion]: 25 }, { [newVersion]: 100 }]);
    noUnknownCalls(api);
  });

  test("4. a failing smoke test stops the rollout before any traffic moves: old@100 % alone again, exit 1", async (t) => {
    const { api, project, oldVersion } = await setup(t);
    const log = path.join(project.dir, "health.log");
    const r = await runDeploy([ENV], project.env(api, { HEALTH_CHECK_CMD: `echo "$DEPLOY_PERCENTAGE" >> ${log}; false` }));
    assert.equal(r.code, 1, explain(r));
    const newVersion = api.scripts.get(NAME).versions[0].id;
    // the new version only ever joined the deployment at 0 %
    assert.deepEqual(api.deploymentsPosted(NAME).map(split), [{ [newVersion]: 0, [oldVersion]: 100 }, { [oldVersion]: 100 }]);
    assert.equal(fs.readFileSync(log, "utf8"), "0\n", "one check, of the new version at 0 %");
    assert.match(r.stderr, /SMOKE TEST FAILED before any traffic was shifted/);
    assert.match(r.stderr, new RegExp(`nothing was shifted: ${oldVersion} serves 100% as before`));
    assert.deepEqual(split(api.latestDeployment(NAME).versions), { [oldVersion]: 100 });
  });

  test("4b. HEALTH_CHECK_URL: 2xx passes (smoke test, 5 %), 5xx rolls back at the step it failed (25 %)", async (t) => {
    const http = await import("node:http");
    let healthy = 2; // the first two checks pass
    const overrides = [];
    const server = http.createServer((req, res) => {
      overrides.push(req.headers["cloudflare-workers-version-overrides"]);
      res.writeHead(healthy-- > 0 ? 200 : 503);
      res.end();
    });
    await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
    t.after(() => new Promise((resolve) => server.close(resolve)));
    const { api, project, oldVersion } = await setup(t);
    const url = `http://127.0.0.1:${server.address().port}/-/health`;
    const r = await runDeploy([ENV], project.env(api, { HEALTH_CHECK_URL: url, HEALTH_CHECK_TIMEOUT: "5" }));
    assert.equal(r.code, 1, explain(r));
    assert.match(r.stderr, /health check failed at 25%/);
    assert.match(r.stderr, /answered 503/);
    assert.deepEqual(api.deploymentsPosted(NAME).at(-1), [{ version_id: oldVersion, percentage: 100 }]);
    // every probe asked for the new version, whatever the split
    const newVersion = api.scripts.get(NAME).versions[0].id;
    assert.deepEqual(overrides, [1, 2, 3].map(() => `${NAME}="${newVersion}"`));
  });

  test("4c. HEALTH_CHECK_CMD sees which versions and step it checks", async (t) => {
    const { api, project, oldVersion } = await setup(t);
    const log = path.join(project.dir, "health.log");
    const cmd = `echo "$DEPLOY_ENVIRONMENT $DEPLOY_WORKER_NAME $DEPLOY_PERCENTAGE $DEPLOY_NEW_VERSION $DEPLOY_OLD_VERSION" >> ${log}`;
    const r = await runDeploy([ENV], project.env(api, { HEALTH_CHECK_CMD: cmd, ROLLOUT_PERCENTAGES: "10 100" }));
    assert.equal(r.code, 0, explain(r));
    const newVersion = api.scripts.get(NAME).versions[0].id;
    assert.deepEqual(fs.readFileSync(log, "utf8").trim().split("\n"), [
      `${ENV} ${NAME} 0 ${newVersion} ${oldVersion}`,
      `${ENV} ${NAME} 10 ${newVersion} ${oldVersion}`,
      `${ENV} ${NAME} 100 ${newVersion} ${oldVersion}`,
    ]);
  });

  test("5. change lock: nothing uploaded or deployed; CHANGE_LOCK_OVERRIDE=true deploys", async (t) => {
    const { api, project, oldVersion } = await setup(t);
    const lock = path.join(project.dir, "lock.toml");
    fs.writeFileSync(
      lock,
      [
        "[[lock]]",
        "start = 2026-04-30T00:00:00Z",
        "end = 2026-05-04T08:00:00Z",
        'reason = "Release week freeze"',
        `environments = ["${ENV}", "production"]`,
        "",
        "[[lock]]",
        "start = 2026-06-01T00:00:00Z",
        "end = 2026-06-02T00:00:00Z",
        'reason = "later"',
      ].join("\n"),
    );
    const env = project.env(api, { CHANGE_LOCK_FILE: lock, CHANGE_LOCK_NOW: "2026-05-02T09:30:00Z" });
    const r = await runDeploy([ENV], env);
    assert.equal(r.code, 3, explain(r));
    assert.match(r.stderr, /change lock is active/);
    assert.match(r.stderr, /2026-04-30T00:00:00Z until 2026-05-04T08:00:00Z/);
    assert.match(r.stderr, /Release week freeze/);
    assert.equal(api.requests.length, 0, "the stand-in received nothing");

    // A lock for other environments does not stop this one...
    const other = await runDeploy(["--check-lock", "registry-staging"], env);
    assert.equal(other.code, 0, explain(other));
    // ...and the CI job's check fails for this one.
    const check = await runDeploy(["--check-lock", ENV], env);
    assert.equal(check.code, 3, explain(check));

    const r2 = await runDeploy([ENV], { ...env, CHANGE_LOCK_OVERRIDE: "true", ROLLOUT_PERCENTAGES: "100" });
    assert.equal(r2.code, 0, explain(r2));
    assert.match(r2.stderr, /CHANGE_LOCK_OVERRIDE=true/);
    assert.equal(uploads(api).length, 1);
    assert.equal(api.deploymentsPosted(NAME).length, 2, "the smoke test's 0 % and the 100 %");
    assert.notEqual(api.latestDeployment(NAME).versions[0].version_id, oldVersion);
  });

  test("5b. an unreadable change lock file blocks the deploy", async (t) => {
    const { api, project } = await setup(t);
    const lock = path.join(project.dir, "lock.toml");
    fs.writeFileSync(lock, '[[lock]]\nstart = 2026-05-01T00:00:00\nend = 2026-05-02T00:00:00Z\nreason = "no zone"\n');
    const r = await runDeploy([ENV], project.env(api, { CHANGE_LOCK_FILE: lock }));
    assert.equal(r.code, 2, explain(r));
    assert.match(r.stderr, /no time zone/);
    assert.equal(api.requests.length, 0);
  });

  test("6. wrangler fails mid-rollout (4th deployment POST, the 50 % step): rollback attempted, state reported, exit 1", async (t) => {
    const { api, project, oldVersion } = await setup(t);
    api.failDeploymentPost(4);
    const r = await runDeploy([ENV], project.env(api));
    assert.equal(r.code, 1, explain(r));
    const newVersion = api.scripts.get(NAME).versions[0].id;
    const posts = deploymentPosts(api);
    assert.equal(posts.length, 5, explain(r));
    assert.equal(posts[3].status, 500);
    assert.deepEqual(split(posts[3].json.versions), { [newVersion]: 50, [oldVersion]: 50 });
    assert.deepEqual(posts[4].json.versions, [{ version_id: oldVersion, percentage: 100 }], "the rollback attempt");
    assert.match(r.stderr, /wrangler versions deploy failed at the 50% step/);
    assert.match(r.stderr, new RegExp(`traffic is back on ${oldVersion} at 100%`));
    assert.deepEqual(split(api.latestDeployment(NAME).versions), { [oldVersion]: 100 });
  });

  test("6b. the rollback fails too: the script says where traffic really is", async (t) => {
    const { api, project, oldVersion } = await setup(t);
    api.failDeploymentPost(4);
    api.failDeploymentPost(5);
    const r = await runDeploy([ENV], project.env(api));
    assert.equal(r.code, 1, explain(r));
    const newVersion = api.scripts.get(NAME).versions[0].id;
    assert.match(r.stderr, /THE ROLLBACK FAILED/);
    assert.match(r.stderr, new RegExp(`traffic is now: ${newVersion} at 25%, ${oldVersion} at 75%`));
    assert.match(r.stderr, /deploy-worker.sh --rollback staging/);
  });

  test("6c. a cancelled job (SIGTERM while baking) rolls back before it exits", async (t) => {
    const { api, project, oldVersion } = await setup(t);
    const { child, done } = startDeploy([ENV], project.env(api, { BAKE_SECONDS: "600" }));
    t.after(() => child.exitCode === null && child.kill("SIGKILL"));
    // wait for the 5 % step (after the smoke test's 0 %), then for the bake to start
    let exited = false;
    done.then(() => (exited = true));
    while (api.deploymentsPosted(NAME).length < 2 && !exited) await new Promise((resolve) => setTimeout(resolve, 100));
    await new Promise((resolve) => setTimeout(resolve, 500));
    child.kill("SIGTERM");
    const r = await done;
    assert.equal(r.code, 1, explain(r));
    assert.match(r.stderr, /interrupted during the rollout/);
    assert.deepEqual(api.deploymentsPosted(NAME).at(-1), [{ version_id: oldVersion, percentage: 100 }]);
    assert.equal(api.deploymentsPosted(NAME).length, 3);
  });

  test("7. the uploaded version carries the wasm module and the script", async (t) => {
    const { api, project } = await setup(t);
    const r = await runDeploy([ENV], project.env(api, { ROLLOUT_PERCENTAGES: "100" }));
    assert.equal(r.code, 0, explain(r));
    const [upload] = uploads(api);
    const names = upload.parts.map((p) => p.name);
    const wasm = upload.parts.filter((p) => p.name.endsWith(".wasm"));
    assert.equal(wasm.length, 1, `parts: ${names}`);
    assert.equal(wasm[0].size, project.wasmSize, "the wasm part is build/worker/index.wasm, byte for byte in size");
    assert.ok(names.includes("metadata"), `parts: ${names}`);
    assert.ok(upload.parts.some((p) => p.name.endsWith(".js") && p.size > 1000), `parts: ${names}`);
    assert.equal(upload.metadata.main_module, "index.js");
    const vars = Object.fromEntries(upload.metadata.bindings.filter((b) => b.type === "plain_text").map((b) => [b.name, b.text]));
    assert.equal(vars.GITLAB_RULES_CONFIG, "session_token");
    assert.ok(vars.GITLAB_ALLOWED_UPSTREAMS);
  });

  test("8. --dry-run prints the wrangler commands, runs none, needs no token", async (t) => {
    const { api, project } = await setup(t);
    const env = project.env(null, { CLOUDFLARE_API_BASE_URL: api.baseUrl, SKIP_BUILD: "false" });
    const r = await runDeploy([ENV, "--dry-run"], env);
    assert.equal(r.code, 0, explain(r));
    const lines = r.stdout.trim().split("\n");
    assert.ok(lines.every((l) => l.startsWith("DRY-RUN: ")), r.stdout);
    const wrangler = lines.filter((l) => l.startsWith("DRY-RUN: wrangler "));
    assert.equal(wrangler[0], `DRY-RUN: wrangler deployments status --env ${ENV} --json`);
    // The tail worker the router's tail_consumers names, before the router (tail-worker.test.mjs).
    assert.equal(wrangler[1], `DRY-RUN: wrangler deploy --config ${path.join(project.dir, "tail-worker", "wrangler.toml")} --env ${ENV} --tag abc1234 --message 'test deploy'`);
    assert.equal(wrangler[2], `DRY-RUN: wrangler versions upload --env ${ENV} --tag abc1234 --message 'test deploy'`);
    const deploys = wrangler.slice(3);
    assert.equal(deploys.length, 6);
    assert.match(deploys[0], /^DRY-RUN: wrangler versions deploy <new-version-id>@0% <current-version-id>@100% --env staging --yes /);
    assert.match(deploys[1], /^DRY-RUN: wrangler versions deploy <new-version-id>@5% <current-version-id>@95% --env staging --yes /);
    assert.match(deploys[5], /^DRY-RUN: wrangler versions deploy <new-version-id>@100% --env staging --yes /);
    assert.ok(lines.includes("DRY-RUN: bash scripts/build-worker.sh"), "the build is printed, not run");
    assert.equal(api.requests.length, 0, "the stand-in received nothing");

    const rb = await runDeploy(["--rollback", ENV, "--dry-run"], env);
    assert.equal(rb.code, 0, explain(rb));
    assert.match(rb.stdout, /^DRY-RUN: wrangler deployments list --env staging --json$/m);
    assert.match(rb.stdout, /^DRY-RUN: wrangler versions deploy <previous-version-id>@100% --env staging --yes/m);
    assert.equal(api.requests.length, 0);
  });

  test("9. unknown environment, dev, missing token, bad percentages: clear errors, exit 2", async (t) => {
    const { api, project } = await setup(t);
    const unknown = await runDeploy(["nowhere"], project.env(api));
    assert.equal(unknown.code, 2, explain(unknown));
    assert.match(unknown.stderr, /unknown environment 'nowhere'.*staging production registry-staging registry-production/);

    const dev = await runDeploy(["dev"], project.env(api));
    assert.equal(dev.code, 2, explain(dev));
    assert.match(dev.stderr, /local stack/);

    const noToken = project.env(api);
    delete noToken.CLOUDFLARE_API_TOKEN;
    const missing = await runDeploy([ENV], noToken);
    assert.equal(missing.code, 2, explain(missing));
    assert.match(missing.stderr, /CLOUDFLARE_API_TOKEN is not set/);

    const bad = await runDeploy([ENV], project.env(api, { ROLLOUT_PERCENTAGES: "5 50 25" }));
    assert.equal(bad.code, 2, explain(bad));
    assert.match(bad.stderr, /must increase/);

    const usage = await runDeploy([], project.env(api));
    assert.equal(usage.code, 2);
    assert.match(usage.stderr, /^Usage:/m);
    assert.equal(api.requests.length, 0);
  });

  test("invalid rulesets (rulesctl validate exits 1) stop the deploy before any API call", async (t) => {
    const { api, project } = await setup(t);
    const r = await runDeploy([ENV], project.env(api, { RULESCTL_STUB_EXIT: "1" }));
    assert.equal(r.code, 1, explain(r));
    assert.match(r.stderr, /rulesets are invalid/);
    assert.equal(api.requests.length, 0);
  });

  test("an invalid GITLAB_CELLS is refused before any API call", async (t) => {
    const { api, project } = await setup(t);
    const config = fs
      .readFileSync(project.config, "utf8")
      .replace(/(\[env\.staging\.vars\]\n(?:.*\n)*?)GITLAB_CELLS = .*\n/, `$1GITLAB_CELLS = '[{"id":2,"address":"https://cell-2.example/"},{"id":2,"address":"cell-3.example","health_path":"health"}]'\n`);
    assert.match(config, /cell-3\.example/, "the staging list was replaced");
    fs.writeFileSync(project.config, config);
    const r = await runDeploy([ENV], project.env(api));
    assert.equal(r.code, 1, explain(r));
    assert.match(r.stderr, /GITLAB_CELLS in \[env\.staging\.vars\].*invalid/);
    assert.match(r.stderr, /entry 1 \(cell 2\): address: "https:\/\/cell-2\.example\/": expected host\[:port\] only/);
    assert.match(r.stderr, /entry 2 \(cell 2\): health_path "health"/);
    assert.match(r.stderr, /entry 2 \(cell 2\): id 2 is already listed/);
    assert.equal(api.requests.length, 0);
  });

  test("a ruleset name that is not in rules/ is refused", async (t) => {
    const { api, project } = await setup(t);
    const config = fs.readFileSync(project.config, "utf8").replace(/(\[env\.staging\.vars\]\nGITLAB_RULES_CONFIG = )"[^"]+"/, '$1"no_such_ruleset"');
    fs.writeFileSync(project.config, config);
    const r = await runDeploy([ENV], project.env(api));
    assert.equal(r.code, 1, explain(r));
    assert.match(r.stderr, /no_such_ruleset.*no .*rules\/no_such_ruleset\.json/);
    assert.equal(api.requests.length, 0);
  });

  test("--rollback puts the version that served before back at 100 %", async (t) => {
    const { api, project, oldVersion } = await setup(t);
    const r = await runDeploy([ENV], project.env(api, { ROLLOUT_PERCENTAGES: "50 100" }));
    assert.equal(r.code, 0, explain(r));
    const newVersion = api.scripts.get(NAME).versions[0].id;
    // the change lock does not hold back a rollback
    const lock = path.join(project.dir, "lock.toml");
    fs.writeFileSync(lock, '[[lock]]\nstart = 2026-01-01T00:00:00Z\nend = 2027-01-01T00:00:00Z\nreason = "freeze"\n');
    const rb = await runDeploy(["--rollback", ENV], project.env(api, { CHANGE_LOCK_FILE: lock }));
    assert.equal(rb.code, 0, explain(rb));
    assert.deepEqual(api.deploymentsPosted(NAME).at(-1), [{ version_id: oldVersion, percentage: 100 }]);
    assert.match(rb.stderr, new RegExp(`${oldVersion} serves 100%`));
    // rolling back again goes forward to the other one (the previous version)
    const rb2 = await runDeploy(["--rollback", ENV], project.env(api));
    assert.equal(rb2.code, 0, explain(rb2));
    assert.deepEqual(api.deploymentsPosted(NAME).at(-1), [{ version_id: newVersion, percentage: 100 }]);
  });

  test("--rollback in the middle of a rollout returns to the version it started from", async (t) => {
    const { api, project, oldVersion } = await setup(t);
    const r = await runDeploy([ENV], project.env(api, { ROLLOUT_PERCENTAGES: "5 25", OVERRIDE_LAST_PERCENTAGE: "true" }));
    assert.equal(r.code, 0, explain(r));
    const rb = await runDeploy(["--rollback", ENV], project.env(api));
    assert.equal(rb.code, 0, explain(rb));
    assert.deepEqual(split(api.latestDeployment(NAME).versions), { [oldVersion]: 100 });
  });

  test("the same commit already serving 100 % is not deployed again", async (t) => {
    const { api, project } = await setup(t);
    const r = await runDeploy([ENV], project.env(api, { DEPLOY_TAG: OLD_TAG }));
    assert.equal(r.code, 0, explain(r));
    assert.match(r.stderr, /already serves 100%.*nothing to deploy/);
    assert.deepEqual(writes(api), []);
  });
});
