// deploy-worker.sh --detach-routes, the kill switch (docs/operations.md, "The
// kill switch: detaching the route"): the real script against the Cloudflare
// API stand-in deletes the environment's routes to its Worker and nothing
// else, and marks the deployment; a deploy then refuses to attach them until
// told to (--attach-routes), and a mark whose routes were attached again by
// hand (the pinned wrangler's `triggers deploy`) stops nothing.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import path from "node:path";
import { before, test } from "node:test";
import { startStandin } from "./cf-api-standin.mjs";
import { ensureBuild, explain, makeProject, REPO, runDeploy, workerName, workerRoutes } from "./helpers.mjs";

const ENV = "staging";
const NAME = workerName(ENV);

before(() => ensureBuild());

const published = (api) => [...api.scripts.values()].flatMap((s) => s.routes.map((r) => `${r.pattern} -> ${r.script}`)).sort();

test("--detach-routes deletes the environment's routes to its Worker; a deploy refuses to attach them until --attach-routes", async (t) => {
  const api = await startStandin();
  t.after(() => api.close());
  const project = makeProject(t);
  api.seed(NAME, { routes: workerRoutes(ENV) });
  // Another Worker's route in the same zone is not the router's to detach.
  api.seed("another-worker", { routes: [{ pattern: "staging.gitlab.com/static/*", zone_name: "gitlab.com" }] });
  const before = [`staging.gitlab.com/* -> ${NAME}`, "staging.gitlab.com/static/* -> another-worker"];
  assert.deepEqual(published(api), before);

  const dry = await runDeploy(["--detach-routes", ENV, "--dry-run"], project.env(api));
  assert.equal(dry.code, 0, explain(dry));
  assert.match(dry.stdout, new RegExp(`^DRY-RUN: DELETE /zones/[0-9a-f]{32}/workers/routes/[0-9a-f-]+   # staging\\.gitlab\\.com/\\* -> ${NAME}$`, "m"));
  assert.deepEqual(published(api), before, "a dry run deletes nothing");
  assert.equal(api.requests.filter((r) => r.method !== "GET").length, 0);

  const r = await runDeploy(["--detach-routes", ENV], project.env(api));
  assert.equal(r.code, 0, explain(r));
  assert.match(r.stderr, new RegExp(`detached staging\\.gitlab\\.com/\\* from ${NAME}: its requests go to the zone's origin now`));
  assert.match(r.stderr, /deploy-worker\.sh staging --attach-routes/);
  assert.match(r.stderr, /marked the deployment: [0-9a-f-]+@100% \(unchanged\) "routes detached by deploy-worker\.sh --detach-routes at /);
  assert.deepEqual(published(api), ["staging.gitlab.com/static/* -> another-worker"]);

  // The next deploy (CI on the next merge) does not put the router back on its own.
  const refused = await runDeploy([ENV], project.env(api, { DEPLOY_TAG: "def5678" }));
  assert.equal(refused.code, 1, explain(refused));
  assert.match(refused.stderr, /staging\.gitlab\.com\/\*: detached by the kill switch \("routes detached by deploy-worker\.sh --detach-routes at [^"]+"\).*run  deploy-worker\.sh staging --attach-routes .*nothing was changed/s);
  assert.deepEqual(published(api), ["staging.gitlab.com/static/* -> another-worker"]);
  assert.equal(api.scripts.get(NAME).versions.length, 1, "nothing was uploaded");

  const again = await runDeploy(["--detach-routes", ENV], project.env(api));
  assert.equal(again.code, 0, explain(again));
  assert.match(again.stderr, /nothing to detach/);

  // The way back, as docs/operations.md gives it.
  // (spawned, not spawnSync: the stand-in answers from this process's event loop)
  const attach = await new Promise((resolve) => {
    const child = spawn(path.join(REPO, "node_modules/.bin/wrangler"), ["triggers", "deploy", "--env", ENV, "--config", project.config], {
      cwd: project.dir,
      env: project.env(api),
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    const timer = setTimeout(() => child.kill("SIGKILL"), 120_000);
    child.on("close", (status) => {
      clearTimeout(timer);
      resolve({ status, out });
    });
  });
  assert.equal(attach.status, 0, attach.out);
  assert.deepEqual(published(api), before);
  // attached by hand: the mark stops nothing any more (a deploy sees its routes served)
  const afterManual = await runDeploy([ENV], project.env(api, { DEPLOY_TAG: "def5678", ROLLOUT_PERCENTAGES: "100" }));
  assert.equal(afterManual.code, 0, explain(afterManual));

  // Detached again, then attached by the deploy that is told to.
  const detachAgain = await runDeploy(["--detach-routes", ENV], project.env(api));
  assert.equal(detachAgain.code, 0, explain(detachAgain));
  assert.deepEqual(published(api), ["staging.gitlab.com/static/* -> another-worker"]);
  const attached = await runDeploy([ENV, "--attach-routes"], project.env(api, { DEPLOY_TAG: "0a1b2c3", ROLLOUT_PERCENTAGES: "100" }));
  assert.equal(attached.code, 0, explain(attached));
  assert.match(attached.stderr, /--attach-routes: staging\.gitlab\.com\/\*, detached by the kill switch/);
  assert.deepEqual(published(api), before);
  assert.deepEqual(api.unknown.map((q) => `${q.method} ${q.path}`), []);

  // dev is the local stack; an unknown environment is refused.
  for (const env of ["dev", "prod"]) {
    const refused = await runDeploy(["--detach-routes", env], project.env(api));
    assert.equal(refused.code, 2, explain(refused));
  }
});
