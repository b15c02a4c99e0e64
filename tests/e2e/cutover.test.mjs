// The cutover drill (bench/cutover-drill.mjs) through workerd:
// two routers (isolates) sharing one Cache API in front of the demo
// topology, the control document in wrangler's local KV store written by
// the real rulesctl, organization acme moved from cell 2 to cell 3 with a
// targeted invalidation and back with a global purge, under the same mixed
// load. Counted: the service calls of each, the time until every acme
// request reaches its new cell, and every other request's status and cell.
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { ROOT, startDemoStack, startStack, scratchDir, getJson, postJson, request, setControl } from "./harness.mjs";
import { runDrill, otherTraffic, rulesctlRunner } from "../../bench/cutover-drill.mjs";

const INTERVAL_MS = 1000;
const EXTRA_PROJECTS = Array.from({ length: 40 }, (_, i) => 301 + i);

test("cutover drill: a targeted invalidation moves acme within one interval and asks the service only for acme's keys", async () => {
  const dir = scratchDir("router-cutover-");
  const rulesctl = rulesctlRunner(join(ROOT, "target", "debug", "rulesctl"), `--env dev --local --persist-to ${dir} --config ${join(ROOT, "wrangler.toml")}`, {
    cwd: ROOT,
    env: { ...process.env, WRANGLER_SEND_METRICS: "false" },
  });
  await rulesctl("set", "--start-generation", "0", "reset"); // the document exists: the Cache API is used
  const stack = await startDemoStack({
    routers: 2,
    control: { id: "router-control-dev", persist: join(dir, "v3", "kv") },
    vars: { GITLAB_CONTROL_REFRESH_SECONDS: String(INTERVAL_MS / 1000) },
    // More hot keys on cell 3 for the global purge to throw away.
    topology: (toml) => toml.replace("project_ids = [300]", `project_ids = [300, ${EXTRA_PROJECTS.join(", ")}]`),
  });
  try {
    const others = otherTraffic(EXTRA_PROJECTS);
    const { targeted, global } = await runDrill({
      routers: stack.urls,
      topology: stack.topology.admin,
      cells: { 2: stack.cells[2].url, 3: stack.cells[3].url },
      intervalMs: INTERVAL_MS,
      others,
      invalidate: async (claims) => {
        const dry = await rulesctl("invalidate", "--dry-run", ...claims.flatMap((c) => ["--claim", c]));
        assert.match(dry, /dry run: would run/);
        await rulesctl("invalidate", ...claims.flatMap((c) => ["--claim", c]));
      },
      purge: async () => rulesctl("set", "purge", "note=cutover drill: global purge"),
      log: (line) => console.log(`# ${line}`),
    });
    const doc = JSON.parse(await rulesctl("show"));
    assert.equal(doc.invalidations.length, 4, JSON.stringify(doc));
    assert.equal(doc.purge_generation, 1);

    for (const [name, r] of [["targeted", targeted], ["global", global]]) {
      assert.deepEqual(r.othersWrong.slice(0, 3), [], `${name}: other organizations refused or misrouted`);
      assert.equal(r.acmeElsewhere, 0, `${name}: acme never reached a third cell`);
      assert.equal(r.acmeRefusedWithRetryAfter, r.acmeRefused, `${name}: acme's 503s carry Retry-After`);
      assert.notEqual(r.convergedMs, null, `${name}: acme never settled on its new cell`);
      assert.ok(r.convergedMs <= INTERVAL_MS + 500, `${name}: acme converged ${r.convergedMs} ms after the write`);
    }
    // acme's 4 keys, asked by at most both isolates (the second usually
    // reads the first's Cache API entry).
    assert.ok(targeted.calls >= 4 && targeted.calls <= 8, `targeted: ${targeted.calls} calls`);
    assert.ok(global.calls >= others.length, `global purge: ${global.calls} calls for ${others.length} other keys`);
    console.log(`# service calls: targeted invalidation ${targeted.calls}, global purge ${global.calls} (same drill, ${others.length + 4} keys, 2 isolates)`);
    // The routers said what they applied.
    const applied = stack.logs.filter((l) => /invalidations applied: 4 in force/.test(l));
    assert.ok(applied.length >= 2, "both isolates applied the list");
    assert.ok((await getJson(`${stack.cells[2].url}/_stats`)).maintenance_refused > 0, "cell 2 was in maintenance");
  } finally {
    await stack.stop();
  }
});

test("by cell and by tag: only the answers naming them are asked again, once per colo", async () => {
  const stack = await startStack({
    ruleset: "cells",
    cellCount: 3,
    cellRoutes: { 2: ["acme", "acme2"], 3: ["beta"] },
    control: true,
    routers: 2,
    listCells: true,
    vars: { GITLAB_CONTROL_REFRESH_SECONDS: String(INTERVAL_MS / 1000) },
  });
  const paths = { "/acme/app": "2", "/acme2/app": "2", "/beta/app": "3" };
  const all = async () => {
    for (const router of stack.urls) {
      for (const [path, cell] of Object.entries(paths)) {
        const res = await request(router + path);
        assert.equal(res.headers["x-demo-cell"], cell, path);
      }
    }
  };
  const calls = async () => (await getJson(`${stack.topology.admin}/_stats`)).classify_calls;
  const apply = async (doc) => {
    await setControl(stack, doc);
    await new Promise((r) => setTimeout(r, INTERVAL_MS + 50));
    for (const router of stack.urls) await request(`${router}/-/health-of-nothing`); // starts the reads
    await new Promise((r) => setTimeout(r, 200));
    await postJson(`${stack.topology.admin}/_stats/reset`, {});
  };
  try {
    await apply({});
    await all();
    assert.equal(await calls(), 3, "one call per key, the other isolate reads the Cache API");
    await postJson(`${stack.topology.admin}/_stats/reset`, {});
    await all();
    assert.equal(await calls(), 0, "all cached");

    const at = Date.now();
    await apply({ invalidations: [{ at_ms: at, cell: 2 }] });
    await all();
    assert.equal(await calls(), 2, "acme and acme2 (cell 2) asked again once, beta not");
    await all();
    assert.equal(await calls(), 2, "and cached again");

    await apply({ invalidations: [{ at_ms: at, cell: 2 }, { at_ms: Date.now(), tag: "cell-3" }] });
    await all();
    assert.equal(await calls(), 1, "beta (tagged cell-3 by the service) asked again, cell 2's new answers kept");
    assert.ok(stack.logs.some((l) => /invalidations applied: 2 in force \(2 in the document\), 1 memory entries dropped/.test(l)), "logged");
  } finally {
    await stack.stop();
  }
});
