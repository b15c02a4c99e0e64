// A smoke test's answer names its route: through the real worker in
// workerd with the `cells` ruleset, GITLAB_CELLS listing the demo cells and
// GITLAB_SMOKE_TEST_SECRET set, a request carrying the secret gets
// `x-gitlab-http-router-route-{rule,cell,upstream}` on the cell's response
// (set over any the cell sent); any other request gets nothing added.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import { startStack, request, waitForLog, sessionCookie } from "./harness.mjs";

const SECRET = "smoke-0123456789abcdef";
const SMOKE = { "x-gitlab-http-router-smoke-test": SECRET };
const ROUTE = ["rule", "cell", "upstream"].map((part) => `x-gitlab-http-router-route-${part}`);

/** The response to `path` and the router's log line for it (by its request id). */
async function routed(stack, path, headers = {}) {
  const id = `route-names-${Math.random().toString(16).slice(2)}`;
  const r = await request(`${stack.url}${path}`, { headers: { ...headers, "cf-ray": id } });
  assert.equal(r.status, 200, `${path}: ${r.text}`);
  const log = await waitForLog(stack, (l) => l.request_id === id);
  return { r, log, route: ROUTE.map((name) => r.headers[name]) };
}

describe("a smoke test's answer names the rule and cell it was routed to", () => {
  let stack;
  before(async () => {
    stack = await startStack({
      ruleset: "cells",
      cellRoutes: { 2: ["cell2-group"], 3: ["cell3-group"] },
      listCells: true,
      vars: { GITLAB_SMOKE_TEST_SECRET: SECRET, GITLAB_REQUEST_LOG: "all" },
    });
  });
  after(async () => stack?.stop());

  test("a session of a listed cell, a classified path and the legacy fallthrough", async () => {
    const cases = [
      ["/dashboard", { cookie: sessionCookie(2) }, "2"],
      ["/cell3-group/tool", {}, "3"],
      ["/nobody-owns-this/tool", {}, "1"],
    ];
    for (const [path, headers, cell] of cases) {
      const { r, log, route } = await routed(stack, path, { ...headers, ...SMOKE });
      assert.equal(r.headers["x-demo-cell"], cell, path);
      assert.ok(log?.rule, `${path}: the log line names its rule: ${JSON.stringify(log)}`);
      assert.deepEqual(route, [log.rule, cell, stack.cells[cell].addr], path);
    }
    const classified = await routed(stack, "/cell3-group/tool", SMOKE);
    assert.equal(classified.log.action, "classify");
    const fell = await routed(stack, "/nobody-owns-this/tool", SMOKE);
    assert.ok(fell.log.fell_through?.length > 0 || fell.log.chosen_by === "legacy", JSON.stringify(fell.log));
  });

  test("with Cloudflare's version override too: the secret alone decides", async () => {
    const { route } = await routed(stack, "/dashboard", {
      cookie: sessionCookie(3),
      "cloudflare-workers-version-overrides": 'gitlab-http-router="v2"',
      ...SMOKE,
    });
    assert.deepEqual(route.slice(1), ["3", stack.cells[3].addr]);
  });

  test("no secret or a wrong one: nothing is added, and a cell's own header passes as it came", async () => {
    for (const headers of [{}, { "x-gitlab-http-router-smoke-test": "guess" }, { "x-gitlab-http-router-smoke-test": "" }]) {
      const { route } = await routed(stack, "/dashboard", { cookie: sessionCookie(2), ...headers });
      assert.deepEqual(route, [undefined, undefined, undefined], JSON.stringify(headers));
    }
    const { route } = await routed(stack, "/dashboard", {
      cookie: sessionCookie(2),
      "x-demo-response-header": "x-gitlab-http-router-route-cell: 9",
    });
    assert.deepEqual(route, [undefined, "9", undefined]);
  });

  test("a cell's own route headers in a smoke test's answer are overwritten", async () => {
    for (const [name, spoofed] of [
      ["x-gitlab-http-router-route-cell", "9"],
      ["x-gitlab-http-router-route-upstream", "evil.example"],
      ["x-gitlab-http-router-route-rule", "spoofed"],
    ]) {
      const { log, route } = await routed(stack, "/dashboard", {
        cookie: sessionCookie(2),
        "x-demo-response-header": `${name}: ${spoofed}`,
        ...SMOKE,
      });
      assert.deepEqual(route, [log.rule, "2", stack.cells[2].addr], name);
    }
  });
});
