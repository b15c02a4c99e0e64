// The deploy's configuration check (scripts/deploy/preflight.mjs,
// checkConfiguration): deploy-worker.sh with the real rulesctl (`config
// check`, the router's own parser) and the pinned wrangler against the
// Cloudflare API stand-in. A configuration problem stops the deploy in
// preflight, before anything is uploaded.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { before, describe, test } from "node:test";
import { startStandin } from "./cf-api-standin.mjs";
import { ensureBuild, explain, makeProject, REPO, runDeploy, workerName, workerRoutes } from "./helpers.mjs";

const ENV = "staging";
const NAME = workerName(ENV);
const RULESCTL = path.join(REPO, "target", "debug", "rulesctl");

before(() => {
  ensureBuild();
  if (!fs.existsSync(RULESCTL)) throw new Error(`${RULESCTL} is missing: run cargo build -p rulesctl`);
});

/** A seeded stand-in and a project whose [env.staging.vars] `name` is `value`. */
async function setup(t, name, value) {
  const api = await startStandin();
  t.after(() => api.close());
  api.seed(NAME, { tag: "0ldc0de", routes: workerRoutes(ENV) });
  const project = makeProject(t);
  if (name) {
    const before = fs.readFileSync(project.config, "utf8");
    const after = before.replace(new RegExp(`(\\[env\\.staging\\.vars\\]\\n(?:.*\\n)*?)${name} = .*\\n`), `$1${name} = ${JSON.stringify(value)}\n`);
    assert.notEqual(after, before, `[env.staging.vars] ${name} was replaced`);
    fs.writeFileSync(project.config, after);
  }
  return { api, project };
}

/** Refused in preflight: exit 1, the setting named, nothing sent to the API. */
function assertRefused(r, api, setting) {
  assert.equal(r.code, 1, explain(r));
  assert.match(r.stderr, /the configuration of \[env\.staging\] in .* has 1 problem; nothing was deployed/, explain(r));
  assert.match(r.stderr, setting, explain(r));
  assert.equal(api.requests.length, 0, "nothing uploaded, nothing asked");
  assert.equal(api.scripts.get(NAME).versions.length, 1, "only the seeded version");
}

describe("the deploy's configuration check (real rulesctl)", { concurrency: 2 }, () => {
  test("the shipped staging configuration passes the check", async (t) => {
    const { project } = await setup(t);
    const r = await runDeploy([ENV, "--dry-run"], project.env(null, { RULESCTL }));
    assert.equal(r.code, 0, explain(r));
    assert.match(r.stderr, /checking the configuration \(.*rulesctl config check --env staging --config /);
    assert.match(r.stderr, /note GITLAB_ROUTER_SIGNING_KEY: not set/, "notes are shown, and pass");
  });

  test("a GITLAB_ROUTER_SIGNING_POLICY typo is refused in preflight", async (t) => {
    const { api, project } = await setup(t, "GITLAB_ROUTER_SIGNING_POLICY", "requird");
    const r = await runDeploy([ENV], project.env(api, { RULESCTL }));
    assertRefused(r, api, /warn GITLAB_ROUTER_SIGNING_POLICY="requird": neither required nor optional; using optional/);
  });

  test("one bad GITLAB_ALLOWED_UPSTREAMS entry is refused in preflight", async (t) => {
    const { api, project } = await setup(t, "GITLAB_ALLOWED_UPSTREAMS", "*.cells.staging.gitlab.net,https://legacy-origin.staging.gitlab.net/");
    const r = await runDeploy([ENV], project.env(api, { RULESCTL }));
    assertRefused(r, api, /warn GITLAB_ALLOWED_UPSTREAMS="https:\/\/legacy-origin\.staging\.gitlab\.net\/": not an allow-list entry/);
  });
});
