// Metrics (wrangler.toml [[env.<name>.analytics_engine_datasets]],
// docs/metrics.md): every environment binds its own Workers Analytics
// Engine dataset as ROUTER_METRICS and names itself in GITLAB_ENVIRONMENT,
// and the pinned wrangler sends the binding to the Cloudflare API
// stand-in, in a first deploy's script upload and in a gradual rollout's
// version upload (bindings belong to the version).
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { before, describe, test } from "node:test";
import { parse } from "smol-toml";
import { startStandin } from "./cf-api-standin.mjs";
import { REPO, ensureBuild, explain, makeProject, runDeploy, workerName, workerRoutes } from "./helpers.mjs";
import { readWranglerConfig } from "../../scripts/deploy/wrangler-config.mjs";

const BINDING = "ROUTER_METRICS";
/** Each environment's dataset (docs/metrics.md). */
const DATASETS = {
  dev: "gitlab_http_router_dev",
  staging: "gitlab_http_router_staging",
  production: "gitlab_http_router_production",
  "registry-staging": "gitlab_http_router_registry_staging",
  "registry-production": "gitlab_http_router_registry_production",
};

before(() => ensureBuild());

test("every environment of wrangler.toml binds its own dataset as ROUTER_METRICS and names itself in GITLAB_ENVIRONMENT", () => {
  const file = path.join(REPO, "wrangler.toml");
  const doc = parse(fs.readFileSync(file, "utf8"));
  const { deployable } = readWranglerConfig(file);
  assert.deepEqual(Object.keys(doc.env).sort(), Object.keys(DATASETS).sort(), "a new environment needs its dataset and a row here");
  for (const name of deployable) assert.ok(name in DATASETS, name);
  for (const [name, dataset] of Object.entries(DATASETS)) {
    assert.deepEqual(doc.env[name].analytics_engine_datasets.map((d) => ({ ...d })), [{ binding: BINDING, dataset }], `[[env.${name}.analytics_engine_datasets]]`);
    assert.equal(doc.env[name].vars.GITLAB_ENVIRONMENT, name, `[env.${name}.vars] GITLAB_ENVIRONMENT`);
  }
  assert.equal(doc.analytics_engine_datasets, undefined, "none at the top level: bindings are not inherited");
});

/** The ROUTER_METRICS binding of an upload's metadata. */
const metricsBinding = (metadata) => metadata.bindings.find((b) => b.name === BINDING);

describe("the dataset binding reaches the Cloudflare API stand-in", { concurrency: 2 }, () => {
  test("staging: a first deploy's script upload binds it", async (t) => {
    const api = await startStandin();
    t.after(() => api.close());
    const project = makeProject(t);
    const r = await runDeploy(["staging"], project.env(api));
    assert.equal(r.code, 0, explain(r));
    const name = workerName("staging");
    const puts = api.requests.filter((q) => q.method === "PUT" && q.path.endsWith(`/workers/scripts/${name}`));
    assert.equal(puts.length, 1, explain(r));
    assert.deepEqual(metricsBinding(puts[0].metadata), { name: BINDING, type: "analytics_engine", dataset: DATASETS.staging }, JSON.stringify(puts[0].metadata.bindings));
  });

  test("production: a gradual rollout's version upload binds it", async (t) => {
    const api = await startStandin();
    t.after(() => api.close());
    const project = makeProject(t);
    const name = workerName("production");
    api.seed(name, { tag: "0ldc0de", routes: workerRoutes("production") });
    const r = await runDeploy(["production"], project.env(api, { ROLLOUT_PERCENTAGES: "100" }));
    assert.equal(r.code, 0, explain(r));
    const upload = api.requests.find((q) => q.method === "POST" && q.path.endsWith(`/scripts/${name}/versions`));
    assert.ok(upload, explain(r));
    assert.deepEqual(metricsBinding(upload.metadata), { name: BINDING, type: "analytics_engine", dataset: DATASETS.production }, JSON.stringify(upload.metadata.bindings));
  });
});
