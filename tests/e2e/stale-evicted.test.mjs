// A stale answer evicted from memory, through the real worker in workerd: more keys
// than the memory cache holds (GITLAB_MEMORY_CACHE_ENTRIES=2), the TTL
// passes, the Topology Service errs. An answer evicted from memory must
// still stand in from the Cache API for the stale window (the full soak
// sent such keys to the legacy cell 17-82 s after routing them right), and
// not after it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { startStack, request, sessionCookie, postJson, waitForLog } from "./harness.mjs";

const TTL_S = 1;
const STALE_S = 6;

async function cellFor(stack, cell, path) {
  const res = await request(`${stack.url}${path}`, { headers: { cookie: sessionCookie(cell) } });
  assert.equal(res.status, 200, res.text);
  return res.json().cell;
}

test("an answer evicted from the memory cache stands in from the Cache API while the service errs, for the stale window", async () => {
  const stack = await startStack({
    topology: { cacheControl: `max-age=${TTL_S}`, notFoundCacheControl: `max-age=${TTL_S}` },
    vars: { GITLAB_MEMORY_CACHE_ENTRIES: "2", GITLAB_CACHE_STALE_IF_ERROR_SECONDS: String(STALE_S) },
  });
  try {
    const routed = Date.now();
    assert.equal(await cellFor(stack, 2, "/routed-2"), "2");
    assert.equal(await cellFor(stack, 3, "/routed-3"), "3");
    // Four more keys (prefixes no cell has: 404s, cached too) push both out
    // of the two-entry memory cache.
    for (const other of [5, 6, 7, 8]) assert.equal(await cellFor(stack, other, `/filler-${other}`), "1");

    await sleep(Math.max(0, routed + TTL_S * 1000 + 300 - Date.now()));
    await postJson(`${stack.topology.admin}/_faults`, { error_rate: 1, error_status: 503 });
    for (const cell of [2, 3]) {
      const path = `/while-erring-${cell}`;
      assert.equal(await cellFor(stack, cell, path), String(cell), `cell-${cell}'s evicted, expired answer stands in`);
      const line = await waitForLog(stack, (l) => l.path === path);
      assert.equal(line?.cache, "stale", JSON.stringify(line));
      assert.match(line.error, /topology service/);
    }

    // Past the TTL plus the stale window: the legacy cell.
    await sleep(Math.max(0, routed + (TTL_S + STALE_S) * 1000 + 500 - Date.now()));
    assert.equal(await cellFor(stack, 2, "/after-the-window"), "1");
    assert.equal((await waitForLog(stack, (l) => l.path === "/after-the-window"))?.cache, "fallback");
  } finally {
    await stack.stop();
  }
});
