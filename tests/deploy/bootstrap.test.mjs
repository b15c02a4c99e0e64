// The first deploy to a new account (docs/deploying.md, "First deploy to a
// new account"), end to end: the real deploy-worker.sh and the pinned
// wrangler against the Cloudflare API stand-in (cf-api-standin.mjs, which
// logs every route change with what the Worker behind each route serves)
// and the edge stand-in (edge-standin.mjs: a draft Worker's empty handler
// answers 500). What is checked: the router reaches the canary route first
// and gitlab.com/* only after the canary's check; no route ever points at a
// Worker that is not serving the router; a route another Worker serves is
// refused without --take-over-routes and moved (and moved back) with it; a
// REPLACE_ME left in wrangler.toml is refused, dry run included; a draft
// Worker made by `wrangler secret put` is deployed as a first deploy. And the
// pure parts: placeholderPaths, canaryRoute, canaryHealthUrl, foreignRoutes.
// BOOTSTRAP_LOG=<file> keeps the full first deploy's output.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { before, describe, test } from "node:test";
import { placeholderPaths } from "../../scripts/deploy/placeholders.mjs";
import { canaryHealthUrl, canaryRoute, foreignRoutes } from "../../scripts/deploy/routes.mjs";
import { readWranglerConfig } from "../../scripts/deploy/wrangler-config.mjs";
import { startStandin } from "./cf-api-standin.mjs";
import { startEdge } from "./edge-standin.mjs";
import { ensureBuild, explain, makeProject, REPO, runDeploy, workerName, workerRoutes, writes } from "./helpers.mjs";

const ENV = "production";
const NAME = workerName(ENV);
const ROUTES = workerRoutes(ENV).map((r) => r.pattern); // ["gitlab.com/*"]
const CANARY = `${NAME}.gitlab.com/*`;
const OTHER = "legacy-router";
/** The secret the Worker gets with its first upload; the deploy itself never has it. */
const WORKER_SMOKE_SECRET = "only-the-worker-knows-0123";

before(() => ensureBuild());

async function setup(t) {
  const api = await startStandin();
  t.after(() => api.close());
  const edge = await startEdge(api, NAME, { smokeSecret: WORKER_SMOKE_SECRET });
  t.after(() => edge.close());
  const project = makeProject(t);
  const secrets = path.join(project.dir, "secrets.json");
  fs.writeFileSync(secrets, JSON.stringify({ GITLAB_SMOKE_TEST_SECRET: WORKER_SMOKE_SECRET, GITLAB_ROUTER_SIGNING_KEY: "c2VlZA==" }));
  // No SMOKE_TEST_SECRET: a first deploy must not need it.
  const env = (extra = {}) =>
    project.env(api, {
      SMOKE_TEST_SECRET: "",
      HEALTH_CHECK_URL: edge.url("/users/sign_in"),
      CANARY_HEALTH_CHECK_URL: edge.url("/canary/users/sign_in"),
      SECRETS_FILE: secrets,
      ...extra,
    });
  return { api, edge, project, env };
}

/** Runs a command with `input` on stdin: {status, output}. */
function run(cmd, args, env, input) {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { env, stdio: ["pipe", "pipe", "pipe"] });
    let output = "";
    child.stdout.on("data", (d) => (output += d));
    child.stderr.on("data", (d) => (output += d));
    child.on("close", (status) => resolve({ status, output }));
    child.stdin.end(input);
  });
}

/** A loopback server answering every request with `status`. */
async function answering(t, status) {
  const server = http.createServer((q, s) => {
    s.writeHead(status);
    s.end();
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  t.after(() => {
    server.closeAllConnections();
    return new Promise((r) => server.close(r));
  });
  return `http://127.0.0.1:${server.address().port}/users/sign_in`;
}

/** Every route change the stand-in saw: no route ever points at a Worker serving anything but a router. */
function assertNeverAnEmptyWorker(api) {
  for (const entry of api.routeLog) {
    for (const route of entry.routes) {
      assert.ok(route.serving.length > 0, `${entry.via}: ${route.pattern} points at ${route.script}, which serves nothing`);
      for (const v of route.serving) assert.ok(v.router, `${entry.via}: ${route.pattern} points at ${route.script}, serving ${v.version_id}, which is not a router`);
    }
  }
}

/** [pattern -> script] after each route change. */
const routeStates = (api) => api.routeLog.map((e) => Object.fromEntries(e.routes.map((r) => [r.pattern, r.script])));

describe("the first deploy to a new account", { concurrency: 2 }, () => {
  test("an empty account: the router on the canary, its check, then gitlab.com/*; never an empty Worker on a route; no override, no smoke-test secret", async (t) => {
    const { api, edge, env } = await setup(t);
    const r = await runDeploy([ENV], env());
    if (process.env.BOOTSTRAP_LOG) fs.writeFileSync(process.env.BOOTSTRAP_LOG, r.output);
    assert.equal(r.code, 0, explain(r));
    // the routes: the canary alone, then the production routes alone (the canary dropped)
    assert.deepEqual(routeStates(api), [{ [CANARY]: NAME }, Object.fromEntries(ROUTES.map((p) => [p, NAME]))]);
    assertNeverAnEmptyWorker(api);
    const version = api.scripts.get(NAME).versions[0];
    assert.equal(version.annotations["workers/tag"], "abc1234");
    assert.deepEqual(api.latestDeployment(NAME).versions, [{ version_id: version.id, percentage: 100 }]);
    // the canary's check before the routes moved, the routes' after: each reached the router, without an override
    const canaryProbe = edge.requests.findIndex((q) => q.path === "/canary/users/sign_in");
    assert.deepEqual(edge.requests.map((q) => [q.path, q.override, q.version, q.status]), [
      ["/canary/users/sign_in", null, version.id, 200],
      ["/users/sign_in", null, version.id, 200],
    ]);
    assert.equal(canaryProbe, 0);
    const order = r.stderr.split("\n");
    const at = (re) => order.findIndex((l) => re.test(l));
    assert.ok(at(/health check: .*\/canary\/users\/sign_in answered 200/) < at(/canary healthy: moving gitlab\.com\/\* to/), r.stderr);
    assert.ok(at(/canary healthy/) < at(/wrangler triggers deploy --env production$/), r.stderr);
    // the secrets came with the first upload (names only in the stand-in)
    assert.deepEqual(api.scripts.get(NAME).secrets.sort(), ["GITLAB_ROUTER_SIGNING_KEY", "GITLAB_SMOKE_TEST_SECRET"]);
    assert.equal(api.requests.filter((q) => q.method === "PUT" && q.path.endsWith(`/scripts/${NAME}/secrets`)).length, 0, "no secret put");
    assert.deepEqual(api.unknown, []);
  });

  test("a failing canary check leaves gitlab.com/* untouched", async (t) => {
    const { api, edge, env } = await setup(t);
    edge.breakTag("abc1234");
    const r = await runDeploy([ENV], env());
    assert.equal(r.code, 1, explain(r));
    assert.match(r.stderr, /CANARY CHECK FAILED .*503/);
    assert.match(r.stderr, /gitlab\.com\/\* were not touched/);
    assert.deepEqual(routeStates(api), [{ [CANARY]: NAME }]);
    assert.equal(edge.requests.length, 1);
  });

  test("a route another Worker serves: refused without --take-over-routes, nothing written; taken over with it", async (t) => {
    const { api, env } = await setup(t);
    api.seed(OTHER, { tag: "legacy", routes: workerRoutes(ENV) });
    const refused = await runDeploy([ENV], env());
    assert.equal(refused.code, 1, explain(refused));
    assert.match(refused.stderr, /gitlab\.com\/\* \(served by the Worker legacy-router\).*--take-over-routes.*nothing was changed/s);
    assert.deepEqual(writes(api), [], "nothing uploaded, no route touched");

    const r = await runDeploy([ENV, "--take-over-routes"], env());
    assert.equal(r.code, 0, explain(r));
    assert.match(r.stderr, /taking over gitlab\.com\/\* from the Worker legacy-router/);
    // the canary first (the other Worker keeps gitlab.com/* meanwhile), then the one PUT that moves it, then the canary goes
    assert.deepEqual(routeStates(api), [
      { [ROUTES[0]]: OTHER, [CANARY]: NAME },
      { [ROUTES[0]]: NAME, [CANARY]: NAME },
      { [ROUTES[0]]: NAME },
    ]);
    assert.match(api.routeLog[1].via, /^PUT zone route/);
    assertNeverAnEmptyWorker(api);
    assert.deepEqual(api.unknown, []);
  });

  test("TAKE_OVER_ROUTES=true, and the check after the move fails: the route goes back to the other Worker", async (t) => {
    const { api, env } = await setup(t);
    api.seed(OTHER, { tag: "legacy", routes: workerRoutes(ENV) });
    const r = await runDeploy([ENV], env({ TAKE_OVER_ROUTES: "true", HEALTH_CHECK_URL: await answering(t, 503) }));
    assert.equal(r.code, 1, explain(r));
    assert.match(r.stderr, /ROUTES MOVED BACK/);
    assert.match(r.stderr, /gitlab\.com\/\* is back on the Worker legacy-router/);
    assert.deepEqual(routeStates(api).at(-1), { [ROUTES[0]]: OTHER, [CANARY]: NAME });
    assertNeverAnEmptyWorker(api);
  });

  test("an unowned route whose check fails after the move points at no Worker again", async (t) => {
    const { api, env } = await setup(t);
    const r = await runDeploy([ENV], env({ HEALTH_CHECK_URL: await answering(t, 502) }));
    assert.equal(r.code, 1, explain(r));
    assert.match(r.stderr, /ROUTES MOVED BACK.*\n.*gitlab\.com\/\* no longer point at a Worker/);
    assert.deepEqual(routeStates(api).at(-1), { [CANARY]: NAME });
    assert.equal(JSON.parse(fs.readFileSync(env().ROLLOUT_RECORD, "utf8")).outcome, "rolled-back");
  });

  test("a draft Worker made by `wrangler secret put` (empty fetch handler) is deployed as a first deploy: no route ever points at it", async (t) => {
    const { api, project, env } = await setup(t);
    // not spawnSync: the stand-ins answer from this process
    const put = await run(path.join(REPO, "node_modules/.bin/wrangler"), ["secret", "put", "GITLAB_SMOKE_TEST_SECRET", "--env", ENV, "--config", project.config], env(), `${WORKER_SMOKE_SECRET}\n`);
    assert.equal(put.status, 0, put.output);
    const draft = api.scripts.get(NAME);
    assert.ok(draft, "wrangler secret put created the Worker");
    assert.equal(api.isRouter(draft.versions.at(-1)), false, "as a draft: no router in it");
    assert.deepEqual(draft.routes, []);

    // as CI would run it once the secret is known (the old program then published the routes to the draft)
    const r = await runDeploy([ENV], env({ SECRETS_FILE: "", SMOKE_TEST_SECRET: WORKER_SMOKE_SECRET }));
    assert.equal(r.code, 0, explain(r));
    assertNeverAnEmptyWorker(api);
    assert.match(r.stderr, /first deploy: .*serves none of its routes.*a draft Worker/);
    assert.deepEqual(routeStates(api), [{ [CANARY]: NAME }, Object.fromEntries(ROUTES.map((p) => [p, NAME]))]);
    assert.ok(api.scripts.get(NAME).secrets.includes("GITLAB_SMOKE_TEST_SECRET"), "the draft's secret is kept");
    assert.deepEqual(api.unknown, []);
  });
});

describe("placeholders", { concurrency: 2 }, () => {
  test("the shipped wrangler.toml: every deployed environment has REPLACE_ME values, dev none", () => {
    const config = readWranglerConfig(path.join(REPO, "wrangler.toml"));
    assert.deepEqual(placeholderPaths(config.environment("dev").raw), []);
    for (const name of config.deployable) {
      const paths = placeholderPaths(config.environment(name).raw);
      for (const key of ["vars.GITLAB_TOPOLOGY_SERVICE_URL", "vars.GITLAB_PROXY_HOST", "vars.GITLAB_ALLOWED_UPSTREAMS", "kv_namespaces[0].id"]) assert.ok(paths.includes(key), `${name}: ${key}`);
    }
  });

  test("a deploy and a dry run refuse the shipped wrangler.toml, listing each placeholder; nothing reaches the API", async (t) => {
    const api = await startStandin();
    t.after(() => api.close());
    const project = makeProject(t);
    const env = project.env(api);
    delete env.WRANGLER_CONFIG; // the repository's own wrangler.toml
    for (const args of [[ENV], [ENV, "--dry-run"]]) {
      const r = await runDeploy(args, env);
      assert.equal(r.code, 2, explain(r));
      assert.match(r.stderr, /still has 5 REPLACE_ME placeholders for production/);
      for (const key of ["vars.GITLAB_TOPOLOGY_SERVICE_URL", "vars.GITLAB_PROXY_HOST", "vars.GITLAB_ALLOWED_UPSTREAMS", "vars.GITLAB_CELLS", "kv_namespaces[0].id"]) {
        assert.ok(r.stderr.includes(`[env.production] ${key}`), `${key}\n${r.stderr}`);
      }
      assert.doesNotMatch(r.stdout, /DRY-RUN: wrangler/);
    }
    // ALLOW_PLACEHOLDERS: a dry run warns and goes on; a deploy still refuses
    const dry = await runDeploy([ENV, "--dry-run"], { ...env, ALLOW_PLACEHOLDERS: "true" });
    assert.equal(dry.code, 0, explain(dry));
    assert.match(dry.stderr, /warning: .*still has 5 REPLACE_ME/);
    const real = await runDeploy([ENV], { ...env, ALLOW_PLACEHOLDERS: "true" });
    assert.equal(real.code, 2, explain(real));
    assert.match(real.stderr, /ALLOW_PLACEHOLDERS applies to --dry-run only/);
    assert.deepEqual(api.requests, []);
  });

  test("one placeholder left in a filled-in config is refused", async (t) => {
    const api = await startStandin();
    t.after(() => api.close());
    const project = makeProject(t);
    const text = fs.readFileSync(project.config, "utf8");
    const section = text.indexOf("[env.production.vars]");
    const at = text.indexOf("GITLAB_PROXY_HOST = ", section);
    fs.writeFileSync(project.config, `${text.slice(0, at)}GITLAB_PROXY_HOST = "legacy-REPLACE_ME.example"\n# ${text.slice(at)}`);
    const r = await runDeploy([ENV], project.env(api));
    assert.equal(r.code, 2, explain(r));
    assert.match(r.stderr, /still has 1 REPLACE_ME placeholder for production:\n\s+\[env\.production\] vars\.GITLAB_PROXY_HOST\n/);
    assert.deepEqual(api.requests, []);
  });
});

describe("the first deploy's pure parts", () => {
  test("placeholderPaths: keys and values, however deep", () => {
    assert.deepEqual(placeholderPaths({ a: "x", vars: { B: "REPLACE_ME", C: "ok" }, kv: [{ id: "REPLACE_ME" }], REPLACE_ME: 1 }), ["vars.B", "kv[0].id", "REPLACE_ME"]);
    assert.deepEqual(placeholderPaths({ vars: { A: "replace_me" } }), []);
  });

  test("canaryRoute: <worker>.<zone>/* by default; CANARY_ROUTE in the zone; never a route of the environment", () => {
    const routes = [{ pattern: "gitlab.com/*", zone_name: "gitlab.com" }];
    assert.deepEqual(canaryRoute(routes, "w"), { pattern: "w.gitlab.com/*", zone_name: "gitlab.com" });
    assert.deepEqual(canaryRoute(routes, "w", "canary.gitlab.com/*"), { pattern: "canary.gitlab.com/*", zone_name: "gitlab.com" });
    assert.match(canaryRoute(routes, "w", "canary.example.com/*").problem, /not in the zone gitlab\.com/);
    assert.match(canaryRoute(routes, "w", "gitlab.com/*").problem, /one of the environment's own routes/);
    assert.match(canaryRoute([{ pattern: "x.example/*", custom_domain: true }], "w").problem, /zone_name/);
  });

  test("canaryHealthUrl: given, or HEALTH_CHECK_URL on the canary's host; loopback as it is", () => {
    assert.equal(canaryHealthUrl("https://gitlab.com/users/sign_in", "w.gitlab.com/*"), "https://w.gitlab.com/users/sign_in");
    assert.equal(canaryHealthUrl("https://gitlab.com/users/sign_in", "w.gitlab.com/*", "https://c.example/x"), "https://c.example/x");
    assert.equal(canaryHealthUrl("http://127.0.0.1:8080/x", "w.gitlab.com/*"), "http://127.0.0.1:8080/x");
    assert.equal(canaryHealthUrl("", "w.gitlab.com/*"), "");
  });

  test("foreignRoutes: the routes another Worker serves", () => {
    const owners = {
      routes: [
        { pattern: "a/*", zoneId: "z", published: { id: "1", script: "other" } },
        { pattern: "b/*", zoneId: "z", published: { id: "2", script: "me" } },
        { pattern: "c/*", zoneId: "z", published: null },
      ],
      uncheckable: [],
    };
    assert.deepEqual(foreignRoutes(owners, "me"), [{ pattern: "a/*", zoneId: "z", id: "1", owner: "other" }]);
  });
});

