// Workers Logs (wrangler.toml [env.<name>.observability]): the pinned
// wrangler accepts each deployed environment's block and sends it to the
// Cloudflare API stand-in, on a first deploy in the script upload's
// metadata and on a gradual rollout as the non-versioned script settings
// that `wrangler versions deploy` patches. docs/logging.md, Workers Logs.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { before, describe, test } from "node:test";
import { parse } from "smol-toml";
import { startStandin } from "./cf-api-standin.mjs";
import { REPO, ensureBuild, explain, makeProject, runDeploy, workerName, workerRoutes } from "./helpers.mjs";
import { readWranglerConfig } from "../../scripts/deploy/wrangler-config.mjs";

/** What each deployed environment must send (docs/operations.md says why these rates). */
const EXPECTED = {
  staging: { enabled: true, head_sampling_rate: 0.1 },
  production: { enabled: true, head_sampling_rate: 0.01 },
  "registry-staging": { enabled: true, head_sampling_rate: 0.1 },
  "registry-production": { enabled: true, head_sampling_rate: 0.01 },
};

before(() => ensureBuild());

test("every deployable environment of wrangler.toml has Workers Logs on, with the expected head sampling rate", () => {
  const file = path.join(REPO, "wrangler.toml");
  const doc = parse(fs.readFileSync(file, "utf8"));
  const { deployable } = readWranglerConfig(file);
  assert.deepEqual([...deployable].sort(), Object.keys(EXPECTED).sort(), "a new environment needs its [env.<name>.observability] and a row here");
  for (const name of deployable) {
    assert.deepEqual({ ...doc.env[name].observability }, EXPECTED[name], `[env.${name}.observability]`);
  }
});

describe("the observability settings reach the Cloudflare API stand-in", { concurrency: 2 }, () => {
  for (const env of ["staging", "production"]) {
    const name = workerName(env);
    const want = EXPECTED[env];

    test(`${env}: a first deploy carries them in the script upload's metadata`, async (t) => {
      const api = await startStandin();
      t.after(() => api.close());
      const project = makeProject(t);
      const r = await runDeploy([env], project.env(api));
      assert.equal(r.code, 0, explain(r));
      const puts = api.requests.filter((q) => q.method === "PUT" && q.path.endsWith(`/workers/scripts/${name}`));
      assert.equal(puts.length, 1, explain(r));
      assert.deepEqual(puts[0].metadata.observability, want, "metadata.observability of the script upload");
    });

    test(`${env}: a gradual rollout patches them into the script settings at its first (0 %) step`, async (t) => {
      const api = await startStandin();
      t.after(() => api.close());
      const project = makeProject(t);
      const oldVersion = api.seed(name, { tag: "0ldc0de", routes: workerRoutes(env) });
      const r = await runDeploy([env], project.env(api, { ROLLOUT_PERCENTAGES: "100" }));
      assert.equal(r.code, 0, explain(r));
      const upload = api.requests.find((q) => q.method === "POST" && q.path.endsWith(`/scripts/${name}/versions`));
      assert.ok(upload, explain(r));
      assert.equal(upload.metadata.observability, undefined, "a non-versioned setting: not part of the version");
      // From the first deployment on (the new version at 0 %), each
      // `wrangler versions deploy` is a deployment POST then a settings PATCH.
      const writes = api.requests.filter(
        (q) => (q.method === "POST" && q.path.endsWith(`/scripts/${name}/deployments`)) || (q.method === "PATCH" && q.path.endsWith(`/scripts/${name}/script-settings`)),
      );
      const first = writes.findIndex((q) => q.method === "POST");
      assert.equal(writes[first].json.versions.find((v) => v.version_id !== oldVersion)?.percentage, 0, explain(r));
      const steps = writes.slice(first);
      assert.deepEqual(steps.map((q) => q.method), ["POST", "PATCH", "POST", "PATCH"], explain(r));
      for (const patch of steps.filter((q) => q.method === "PATCH")) assert.deepEqual(patch.json.observability, want, "PATCH script-settings body");
      assert.deepEqual(api.scripts.get(name).settings.observability, want, "the Worker's settings afterwards");
    });
  }
});
