// Route learning through the real worker in workerd: the `route_learning`
// ruleset with no Topology Service, in front of `devstack up`'s demo cells
// (devstack/topology.toml), each of which answers the learn endpoint from
// the topology data. The router asks the legacy cell (cell 1); its learn
// calls are counted at that cell (`/_stats` learn_calls), and its faults
// are set with `POST /_learn/mode`.
//
//   /cell2-group/...            routable prefix /cell2-group on cell 2
//   /cell3-group/...            routable prefix /cell3-group on cell 3
//   /acme/...                   routable prefix /acme on cell 2
//   /gitlab-org                 exact (cell 2 owns gitlab-org/cell2-moved)
//   /-/profile                  fixed, exact, cell 1
//   /nobody/...                 404: the legacy cell
//
// Each test uses its own paths: the isolate's caches outlive a test.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { startDemoStack, request, requestLogs, eventually } from "./harness.mjs";

let stack;

before(async () => {
  stack = await startDemoStack({
    ruleset: "route_learning",
    vars: { GITLAB_TOPOLOGY_SERVICE_URL: undefined, GITLAB_TOPOLOGY_RETRIES: "0" },
  });
});

after(async () => {
  await stack?.stop();
});

const legacy = () => stack.cells[1];
const learnCalls = async () => (await (await fetch(`${legacy().url}/_stats`)).json()).learn_calls;
const setMode = (mode, delayMs = 0) => fetch(`${legacy().url}/_learn/mode?set=${mode}&delay_ms=${delayMs}`, { method: "POST" }).then((r) => r.json());

/** GET `path` through the router: which cell answered. */
async function cellOf(path, init = {}) {
  const res = await request(`${stack.url}${path}`, init);
  assert.equal(res.status, 200, `${path}: ${res.status} ${res.text}`);
  return res.headers["x-demo-cell"];
}

test("the first request under a prefix makes one learn call; 100 more under it make none", async () => {
  const before = await learnCalls();
  assert.equal(await cellOf("/cell2-group/demo/-/issues?state=opened"), "2");
  assert.equal((await learnCalls()) - before, 1);
  const paths = Array.from({ length: 100 }, (_, i) =>
    ["/cell2-group/demo/-/merge_requests/" + i, `/cell2-group/p${i}`, `/cell2-group/p${i}/-/tree/main`, "/cell2-group"][i % 4],
  );
  for (const path of paths) assert.equal(await cellOf(path), "2", path);
  assert.equal((await learnCalls()) - before, 1, "every later path was served by the learned prefix");
  // The log line says how: a memory hit on the learn rule.
  const lines = requestLogs(stack).filter((l) => l.path.startsWith("/cell2-group"));
  assert.equal(lines.length, 101);
  assert.equal(lines[0].classify_type, "LEARN");
  assert.equal(lines.filter((l) => l.cache === "memory").length, 100);
});

test("an exact answer does not cover other paths", async () => {
  const before = await learnCalls();
  // gitlab-org is cell 1's, but cell 2 owns gitlab-org/cell2-moved: the
  // answer for /gitlab-org is for that path only.
  assert.equal(await cellOf("/gitlab-org"), "1");
  assert.equal(await cellOf("/gitlab-org"), "1");
  assert.equal((await learnCalls()) - before, 1);
  assert.equal(await cellOf("/gitlab-org/cell2-moved/app"), "2");
  assert.equal((await learnCalls()) - before, 2, "the exact /gitlab-org answer did not serve a path under it");
  // A fixed route: exact too.
  assert.equal(await cellOf("/-/profile"), "1");
  assert.equal(await cellOf("/-/profile"), "1");
  assert.equal((await learnCalls()) - before, 3);
  assert.equal(await cellOf("/-/profile/keys"), "1");
  assert.equal((await learnCalls()) - before, 4);
  // Unknown to every cell: the legacy cell, and the 404 is cached.
  assert.equal(await cellOf("/nobody/app"), "1");
  assert.equal(await cellOf("/nobody/app"), "1");
  assert.equal((await learnCalls()) - before, 5);
});

test("a learn endpoint that fails or answers garbage sends the request to the legacy cell, with a log line", async () => {
  try {
    await setMode("fail");
    assert.equal(await cellOf("/cell3-group/failing/-/issues"), "1");
    await setMode("garbage");
    assert.equal(await cellOf("/cell3-group/garbage/-/issues"), "1");
    await eventually(() => {
      const lines = requestLogs(stack);
      const failing = lines.find((l) => l.path === "/cell3-group/failing/-/issues");
      const garbage = lines.find((l) => l.path === "/cell3-group/garbage/-/issues");
      assert.ok(failing && garbage, "both logged");
      assert.equal(failing.cache, "fallback");
      assert.match(failing.error, /route learning: learn endpoint answered status 500/);
      assert.equal(garbage.cache, "fallback");
      assert.match(garbage.error, /route learning: learn answer not understood/);
      assert.equal(failing.upstream, legacy().addr);
    });
  } finally {
    await setMode("ok");
  }
  // Nothing was cached from the failures: once the endpoint answers, the
  // right cell.
  assert.equal(await cellOf("/cell3-group/garbage/-/issues"), "3");
});

test("50 concurrent first requests make one learn call", async () => {
  const before = await learnCalls();
  // The learn call is slow, so all 50 wait on it.
  await setMode("ok", 300);
  try {
    const cells = await Promise.all(Array.from({ length: 50 }, () => cellOf("/acme/concurrent/-/issues")));
    assert.deepEqual(new Set(cells), new Set(["2"]));
  } finally {
    await setMode("ok");
  }
  assert.equal((await learnCalls()) - before, 1);
  const lines = requestLogs(stack).filter((l) => l.path === "/acme/concurrent/-/issues");
  assert.equal(lines.length, 50);
  assert.equal(lines.filter((l) => l.coalesced).length, 49);
});
