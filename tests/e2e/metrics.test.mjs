// Metrics in Workers Analytics Engine (docs/metrics.md) through the real
// worker in workerd: every kind of request writes exactly one data point,
// its blobs, doubles and index as docs/metrics.md names them and as the
// request's log line says; a dataset that throws fails no request; and
// the documented error-ratio query, run over the points this run wrote.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import { requestLogs, sessionCookie, eventually, setControl, postJson, HEX32 } from "./harness.mjs";
import { startCells, stopCells, killCell, timed } from "./cells-harness.mjs";
import { CAPTURE_WORKER, captureBinding, capturedPoints, asRow, errorRatioPerCell } from "./metrics-capture.mjs";

const ENVIRONMENT = "e2e";
const VERSION = "0f1e2d3c-0000-4000-8000-000000000001";

/**
 * One request to router `i` of `stack` (labelled `r<i>`), and what it
 * left: its log line and the data points written since it was sent.
 */
async function one(stack, i, path, headers = {}) {
  const from = stack.logs.length;
  const res = await timed(`${stack.urls[i]}${path}`, headers);
  const pathname = path.split("?")[0];
  const { line, points } = await eventually(() => {
    const line = requestLogs(stack, from).find((l) => l.path === pathname);
    assert.ok(line, `the log line of ${path}`);
    const points = capturedPoints(stack.logs, `r${i}`, from);
    assert.ok(points.length > 0, `a data point for ${path}`);
    return { line, points };
  });
  stack.sent[i]++;
  assert.equal(points.length, 1, `exactly one data point for ${path}: ${JSON.stringify(points)}`);
  return { res, line, point: points[0], row: asRow(points[0]) };
}

/**
 * The point holds what the log line says (the same record, one view of
 * it), in docs/metrics.md's positions; `want`: the fields this kind of
 * request must have.
 */
function assertPoint({ point, row, line }, want) {
  assert.equal(point.indexes.length, 1);
  assert.equal(point.blobs.length, 12, JSON.stringify(point));
  assert.equal(point.doubles.length, 4, JSON.stringify(point));
  const fromLine = {
    blob1: ENVIRONMENT,
    blob2: line.version,
    blob3: line.rule ?? "",
    blob4: line.mode ?? line.action,
    blob5: line.classify_type ?? "",
    blob6: line.chosen_by ?? "",
    blob7: line.cache ?? "",
    blob8: line.cell === undefined ? "" : String(line.cell),
    blob9: `${Math.floor(line.status / 100)}xx`,
    // No shadow ruleset here: nothing evaluated (tests/e2e/shadow.test.mjs).
    blob11: "",
    blob12: "",
    // The log line's duration, read once.
    double1: line.duration_ms,
    double2: line.service_ms ?? 0,
    double3: line.attempts ?? 0,
    double4: (line.fell_through ?? []).length,
  };
  for (const [k, v] of Object.entries(fromLine)) assert.equal(row[k], v, `${k} of ${JSON.stringify(point)} against ${JSON.stringify(line)}`);
  assert.equal(row.index1, row.blob8, "the index is the cell");
  assert.equal(row.blob2, VERSION);
  for (const [k, v] of Object.entries(want)) assert.equal(row[k], v, `${k} of ${JSON.stringify(point)}`);
  // Nothing of the request's credentials or path.
  const text = JSON.stringify(point);
  for (const secret of [HEX32, "glpat-", line.path]) if (secret !== "/") assert.ok(!text.includes(secret), `${secret} in ${text}`);
}

describe("one data point per request, from the plan", () => {
  let stack;
  const rows = [];
  before(async () => {
    const vars = { GITLAB_ENVIRONMENT: ENVIRONMENT, CF_VERSION_METADATA: { id: VERSION, tag: "", timestamp: "" }, GITLAB_CONTROL_REFRESH_SECONDS: "1", GITLAB_TOPOLOGY_RETRIES: "0" };
    stack = await startCells({
      vars,
      routers: 4,
      // r0: the cells ruleset; r1: the container registry's (its reject
      // rule); r2: a dataset that throws on every write; r3: Miniflare's
      // own Analytics Engine emulation.
      routerVars: [{}, { GITLAB_RULES_CONFIG: "container_registry" }, {}, {}],
      routerOptions: [captureBinding("r0"), captureBinding("r1"), captureBinding("r2", { throws: true }), { analyticsEngineDatasets: { ROUTER_METRICS: { dataset: "gitlab_http_router_e2e" } } }],
      extraWorkers: [CAPTURE_WORKER],
    });
    stack.sent = [0, 0, 0, 0];
  });
  after(async () => {
    if (!stack) return;
    await stopCells(stack);
    const result = errorRatioPerCell(rows);
    console.log(`# error ratio per cell over the ${rows.length} points this run wrote: ${JSON.stringify(result)}`);
  });
  const keep = (r) => {
    rows.push(r.row);
    return r;
  };

  test("cache miss: the Topology Service answered", async () => {
    const r = keep(await one(stack, 0, "/dashboard", { cookie: sessionCookie(2) }));
    assert.equal(r.res.cell, "2");
    assertPoint(r, { blob3: "session_cookie", blob4: "classify", blob5: "SESSION_PREFIX", blob6: "service", blob7: "service", blob8: "2", blob9: "2xx", blob10: "", double3: 1 });
  });

  test("cache hit: the isolate's memory answered, no service call", async () => {
    const r = keep(await one(stack, 0, "/dashboard", { cookie: sessionCookie(2) }));
    assertPoint(r, { blob6: "cache", blob7: "memory", blob8: "2", blob9: "2xx", double2: 0, double3: 0 });
  });

  test("spread: a sign-in page on a healthy cell", async () => {
    const r = keep(await one(stack, 0, "/users/sign_in"));
    assertPoint(r, { blob3: "sign_in_spread", blob4: "spread", blob5: "", blob6: "spread", blob7: "", blob8: r.res.cell, blob9: "2xx" });
  });

  test("reject: a rule's own answer", async () => {
    const r = keep(await one(stack, 1, "/v2/a%2Fb/manifests/latest"));
    assert.equal(r.res.status, 400);
    assertPoint(r, { blob3: "encoded_repository_name", blob4: "reject", blob6: "", blob8: "", blob9: "4xx", blob10: "", double3: 0 });
  });

  test("a dead cell: its failed fetches (502) and then its open circuit (503), one point each", async () => {
    assert.equal((await one(stack, 0, "/dashboard", { cookie: sessionCookie(3) })).res.cell, "3");
    await killCell(stack, 3);
    const seen = [];
    for (let i = 0; i < 10 && !seen.some((r) => r.res.status === 503); i++) seen.push(keep(await one(stack, 0, `/dashboard-${i}`, { cookie: sessionCookie(3) })));
    const failed = seen.filter((r) => r.res.status === 502);
    assert.ok(failed.length >= 1, JSON.stringify(seen.map((r) => r.res.status)));
    for (const r of failed) assertPoint(r, { blob6: "cache", blob8: "3", blob9: "5xx", blob10: "upstream_unreachable" });
    const open = seen.at(-1);
    assert.equal(open.res.status, 503);
    assertPoint(open, { blob6: "circuit_open", blob8: "3", blob9: "5xx", blob10: "cell_unavailable" });
  });

  test("a throwing dataset fails no request; Miniflare's emulation takes the points", async () => {
    for (const i of [2, 3]) {
      const r = await timed(`${stack.urls[i]}/dashboard`, { cookie: sessionCookie(2) });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.cell, "2");
    }
    assert.equal(capturedPoints(stack.logs, "r2").length, 0);
  });

  test("legacy fallback: the Topology Service refuses connections and nothing is cached", async () => {
    await postJson(`${stack.topology.admin}/_faults`, { refuse_connections: true });
    const r = keep(await one(stack, 0, "/dashboard", { cookie: sessionCookie(7) }));
    assert.equal(r.res.cell, "1");
    assertPoint(r, { blob3: "session_cookie", blob6: "legacy", blob7: "fallback", blob8: "1", blob9: "2xx", blob10: "topology_unreachable", double3: 1 });
  });

  test("passthrough: the control document sends everything to the legacy cell", async () => {
    await setControl(stack, { mode: "passthrough", note: "metrics test" });
    let r;
    await eventually(async () => {
      r = await one(stack, 0, "/dashboard", { cookie: sessionCookie(2) });
      assert.equal(r.line.mode, "passthrough");
    }, 5000);
    keep(r);
    assert.equal(r.res.cell, "1");
    assertPoint(r, { blob3: "", blob4: "passthrough", blob5: "", blob6: "legacy", blob8: "1", blob9: "2xx", double3: 0 });
  });

  test("every request routed wrote one point, no more", async () => {
    // Every cells-ruleset line is a request to r0 but the two to r2 and r3.
    const lines = requestLogs(stack);
    const r0 = lines.filter((l) => l.ruleset === "cells" && l.version === VERSION).length;
    await eventually(() => {
      assert.equal(capturedPoints(stack.logs, "r1").length, stack.sent[1]);
      // r0 and r2/r3 share the ruleset: r2 (throwing) and r3 (emulated) wrote none here.
      assert.equal(capturedPoints(stack.logs, "r0").length, r0 - 2);
    });
  });
});
