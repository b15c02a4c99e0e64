// The classification cache and the Topology Service client through the
// real worker in workerd: memory and Cache API levels, TTLs, negative
// answers, Cache-Tag, coalescing, retries, timeouts and the service down.
import { test, describe } from "node:test";
import assert from "node:assert/strict";
import { startStack, startReady, stopChild, topologyToml, request, waitForLog, requestLogs, sessionCookie, getJson, postJson, scratchDir } from "./harness.mjs";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { createHash } from "node:crypto";

/**
 * The router's Cache API key for a classify body: under the deployment's
 * namespace (SHA-256 of the service URL and the legacy cell), the kind, the
 * target and the SHA-256 of the body, as the core makes them.
 */
function cacheKeyUrl(stack, kind, body, target = "web") {
  const sha256 = (text) => createHash("sha256").update(text).digest("hex");
  const namespace = sha256(`${stack.vars.GITLAB_TOPOLOGY_SERVICE_URL}\n${stack.vars.GITLAB_PROXY_HOST}`).slice(0, 32);
  return `https://gitlab-http-router.internal/${namespace}/v1/classify/${kind.toLowerCase()}-${target}-${sha256(body)}`;
}

const stats = (stack) => getJson(`${stack.topology.admin}/_stats`);
const faults = (stack, f) => postJson(`${stack.topology.admin}/_faults`, f);
const resetStats = (stack) => postJson(`${stack.topology.admin}/_stats/reset`, {});

async function cellFor(stack, cell, { url = stack.url, path = "/" } = {}) {
  const started = Date.now();
  const res = await request(`${url}${path}`, { headers: { cookie: sessionCookie(cell) } });
  return { status: res.status, cell: res.status === 200 ? res.json().cell : null, ms: Date.now() - started, text: res.text };
}

describe("classification cache", () => {
  test("a second request with the same key makes no second service call; after the TTL it does", async () => {
    const stack = await startStack({ topology: { cacheControl: "max-age=2" } });
    try {
      assert.equal((await cellFor(stack, 2, { path: "/first" })).cell, "2");
      assert.equal((await cellFor(stack, 2, { path: "/second" })).cell, "2");
      assert.equal((await stats(stack)).classify_calls, 1);
      const second = await waitForLog(stack, (l) => l.path === "/second");
      assert.equal(second.cache, "memory");

      await sleep(2300);
      assert.equal((await cellFor(stack, 2, { path: "/third" })).cell, "2");
      assert.equal((await stats(stack)).classify_calls, 2, "expired entries are asked again");
      assert.equal((await waitForLog(stack, (l) => l.path === "/third")).cache, "service");
    } finally {
      await stack.stop();
    }
  });

  test("a memory hit (routeSync, no await) forwards and logs exactly what the service-answered request did", async () => {
    const stack = await startStack();
    try {
      const send = (path) =>
        request(`${stack.url}${path}`, {
          headers: {
            host: "gitlab.example.com",
            cookie: `theme=dark; ${sessionCookie(2)}`,
            connection: "x-hop",
            "x-hop": "dropped",
            "x-forwarded-host": "evil.example",
            "x-gitlab-http-router-rule-action": "spoofed",
            "cf-access-client-secret": "spoofed",
            "x-kept": "kept",
          },
        });
      const first = await send("/first?q=1");
      const second = await send("/first?q=1");
      assert.equal(first.status, 200);
      assert.equal(second.status, 200);
      const [a, b] = [first.json(), second.json()];
      assert.equal(a.cell, "2");
      // Apart from the per-request ids, which both paths set.
      const perRequest = ({ "x-request-id": id, traceparent, ...rest }) => rest;
      assert.deepEqual(perRequest(b.headers), perRequest(a.headers), "the same forwarded headers on both paths");
      assert.notEqual(b.headers["x-request-id"], a.headers["x-request-id"]);
      assert.match(b.headers.traceparent, /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
      assert.equal(a.headers["x-forwarded-host"], "gitlab.example.com");
      assert.equal(a.headers["x-gitlab-http-router-rule-action"], "classify");
      assert.equal(a.headers["x-gitlab-http-router-rule-type"], "SESSION_PREFIX");
      assert.equal(a.headers["x-kept"], "kept");
      for (const gone of ["x-hop", "cf-access-client-secret"]) assert.equal(a.headers[gone], undefined, gone);

      const viaMemory = await waitForLog(stack, (l) => l.path === "/first" && l.cache === "memory");
      const viaService = await waitForLog(stack, (l) => l.path === "/first" && l.cache === "service");
      assert.ok(viaMemory && viaService, JSON.stringify(requestLogs(stack)));
      assert.equal(viaMemory.request_id, b.headers["x-request-id"]);
      assert.equal(viaService.traceparent, a.headers.traceparent);
      const routing = ({ cache, chosen_by, duration_ms, service_ms, attempts, request_id, traceparent, ...rest }) => rest;
      assert.deepEqual(routing(viaMemory), routing(viaService), "the same log fields apart from the cache level, why, and timings");
      assert.equal(viaMemory.chosen_by, "cache");
      assert.equal(viaService.chosen_by, "service");
      assert.equal(viaMemory.status, 200);
      assert.equal(typeof viaMemory.duration_ms, "number");
    } finally {
      await stack.stop();
    }
  });

  test("another isolate is answered by the Cache API, which keeps the service's and the router's tags", async () => {
    const stack = await startStack({ routers: 2, probe: true });
    try {
      assert.equal((await cellFor(stack, 3)).cell, "3");
      assert.equal((await cellFor(stack, 3, { url: stack.urls[1], path: "/other-isolate" })).cell, "3");
      assert.equal((await stats(stack)).classify_calls, 1);
      assert.equal((await waitForLog(stack, (l) => l.path === "/other-isolate")).cache, "cache-api");

      const key = cacheKeyUrl(stack, "SESSION_PREFIX", '{"type":"SESSION_PREFIX","value":"cell-3"}');
      const entry = await getJson(`${stack.probeUrl}/?key=${encodeURIComponent(key)}`);
      assert.ok(entry.found, `no Cache API entry at ${key}`);
      const tags = entry.cacheTag.split(",");
      for (const tag of ["cell-3", "classify-session-prefix", "router-classify-session-prefix", "router-target-web", `router-cell-${stack.cells[3].addr}`]) {
        assert.ok(tags.includes(tag), `${tag} in ${entry.cacheTag}`);
      }
      // The TTL plus the stale window (600 s): an expired entry stands in
      // for a failing service (stale-evicted.test.mjs).
      assert.equal(entry.cacheControl, "max-age=660");
      assert.equal(entry.body.classification.address, stack.cells[3].addr);
      // When the service was asked: what targeted invalidation compares
      // with an invalidation's time (docs/operations.md).
      assert.ok(entry.body.asked_at_ms > Date.now() - 60_000 && entry.body.asked_at_ms <= Date.now(), `asked_at_ms ${entry.body.asked_at_ms}`);
    } finally {
      await stack.stop();
    }
  });

  test("a 404 answer is cached: 100 requests, 1 service call, all at the legacy cell", async () => {
    const stack = await startStack();
    try {
      for (let i = 0; i < 100; i++) {
        const r = await cellFor(stack, 99);
        assert.equal(r.cell, "1");
      }
      const s = await stats(stack);
      assert.equal(s.classify_calls, 1);
    } finally {
      await stack.stop();
    }
  });

  test("no-store answers are used but never cached", async () => {
    const stack = await startStack({ topology: { cacheControl: "no-store" } });
    try {
      for (let i = 0; i < 3; i++) assert.equal((await cellFor(stack, 2)).cell, "2");
      assert.equal((await stats(stack)).classify_calls, 3);
    } finally {
      await stack.stop();
    }
  });

  test("50 concurrent requests for one uncached key make one service call", async () => {
    // A generous per-attempt timeout: on a loaded machine a retry would be a
    // second (legitimate) call and hide what this test is about.
    const stack = await startStack({ vars: { GITLAB_TOPOLOGY_TIMEOUT_MS: "3000" } });
    try {
      await faults(stack, { latency_ms: 200 });
      const results = await Promise.all(Array.from({ length: 50 }, () => cellFor(stack, 2)));
      assert.deepEqual(new Set(results.map((r) => r.cell)), new Set(["2"]), results.filter((r) => r.cell !== "2").map((r) => `${r.status} ${r.text}`).join("\n"));
      assert.equal((await stats(stack)).classify_calls, 1);
      assert.ok(await waitForLog(stack, (l) => l.coalesced === true), "waiting requests are logged as coalesced");
    } finally {
      await stack.stop();
    }
  });
});

describe("Topology Service failures", () => {
  // Per attempt 300 ms, 2 retries, back-off 50/100 ms (+ jitter): the worst
  // case is 3 × 300 + 150 = 1050 ms of added latency.
  const WORST_CASE_MS = 1050;

  test("service down: every request still answered, no 5xx, bounded extra latency, stale entries preferred", async () => {
    const stack = await startStack({ topology: { cacheControl: "max-age=1" }, vars: { GITLAB_CACHE_STALE_IF_ERROR_SECONDS: "300" } });
    try {
      assert.equal((await cellFor(stack, 2)).cell, "2");
      await sleep(1200); // cell-2's entry is now expired but within the stale window
      await faults(stack, { refuse_connections: true });
      const stale = await cellFor(stack, 2, { path: "/stale" });
      assert.equal(stale.cell, "2", "an expired entry stands in for the failing service");
      assert.equal((await waitForLog(stack, (l) => l.path === "/stale")).cache, "stale");

      for (let i = 0; i < 10; i++) {
        const r = await cellFor(stack, 3, { path: `/down-${i}` });
        assert.equal(r.status, 200);
        assert.equal(r.cell, "1", "unknown keys fall back to the legacy cell");
        assert.ok(r.ms < WORST_CASE_MS + 500, `took ${r.ms} ms`);
      }
      // The stale request's 3 failed attempts and /down-0's first 2 open
      // the breaker (5 in a row): later requests make no call at all.
      const first = await waitForLog(stack, (l) => l.path === "/down-0");
      assert.equal(first.cache, "fallback");
      assert.equal(first.attempts, 2);
      const later = await waitForLog(stack, (l) => l.path === "/down-9");
      assert.equal(later.cache, "fallback");
      assert.equal(later.attempts, undefined, "no attempt while the breaker is open");
      assert.match(later.error, /circuit open/);
    } finally {
      await stack.stop();
    }
  });

  test("an outage costs the service a few calls, not three per request (retry budget and breaker)", async () => {
    const stack = await startStack({ vars: { GITLAB_TOPOLOGY_BREAKER_OPEN_MS: "1000" } });
    try {
      await faults(stack, { error_rate: 1, error_status: 503 });
      const started = Date.now();
      for (let i = 0; i < 1000; i++) {
        // A new key every time, as an attacker or a cold cache would send.
        const r = await cellFor(stack, 1000 + i, { path: `/outage-${i}` });
        assert.equal(r.cell, "1");
      }
      const seconds = (Date.now() - started) / 1000;
      const calls = (await stats(stack)).classify_calls;
      console.log(`service calls for 1,000 requests during an outage (503s) through workerd: ${calls} in ${seconds.toFixed(1)} s`);
      // 5 failures open the breaker; then one probe per second (open_ms).
      assert.ok(calls <= 5 + Math.ceil(seconds) + 1, `${calls} calls in ${seconds} s`);
      await faults(stack, { error_rate: 0 });
      await sleep(1100);
      assert.equal((await cellFor(stack, 2, { path: "/recovered" })).cell, "2", "a probe closes the breaker once the service is back");
    } finally {
      await stack.stop();
    }
  });

  test("service slow: each attempt times out, retries are counted, latency stays bounded", async () => {
    const stack = await startStack();
    try {
      await faults(stack, { latency_ms: 2000 });
      const r = await cellFor(stack, 2, { path: "/slow" });
      assert.equal(r.cell, "1");
      assert.ok(r.ms >= 900 && r.ms < WORST_CASE_MS + 500, `took ${r.ms} ms`);
      const line = await waitForLog(stack, (l) => l.path === "/slow");
      assert.equal(line.attempts, 3);
      assert.equal(line.cache, "fallback");
      assert.match(line.error, /timed out/);
      assert.equal((await stats(stack)).classify_calls, 3);
    } finally {
      await stack.stop();
    }
  });

  test("a 5xx then a success: the retry succeeds", async () => {
    const stack = await startStack();
    try {
      await faults(stack, { fail_next: 1, error_status: 503 });
      const r = await cellFor(stack, 2, { path: "/retried" });
      assert.equal(r.cell, "2");
      const line = await waitForLog(stack, (l) => l.path === "/retried");
      assert.equal(line.attempts, 2);
      assert.equal(line.cache, "service");
      assert.equal((await stats(stack)).classify_calls, 2);
    } finally {
      await stack.stop();
    }
  });

  test("4xx answers are not retried", async () => {
    const stack = await startStack({ topology: {} });
    try {
      await faults(stack, { fail_next: 1, error_status: 429 });
      const r = await cellFor(stack, 2, { path: "/429" });
      assert.equal(r.cell, "1");
      assert.equal((await stats(stack)).classify_calls, 1);
    } finally {
      await stack.stop();
    }
  });

  test("the Cloudflare Access service token is sent to the Topology Service and never to a cell", async () => {
    const stack = await startStack({ vars: { GITLAB_TOPOLOGY_SERVICE_CLIENT_ID: "id-123.access", GITLAB_TOPOLOGY_SERVICE_CLIENT_SECRET: "s3cret" } });
    try {
      const res = await request(`${stack.url}/`, { headers: { cookie: sessionCookie(2) } });
      const echo = res.json();
      assert.equal(echo.cell, "2");
      assert.doesNotMatch(JSON.stringify(echo.headers), /s3cret|id-123/);
      const s = await stats(stack);
      assert.equal(s.last_requests.at(-1).headers["cf-access-client-id"], "id-123.access");
    } finally {
      await stack.stop();
    }
  });
});

/** Starts another Topology Service with `cells` ({id, address}); stop with stopChild(ts.child). */
async function startTopology(cells) {
  const dir = scratchDir("router-e2e-ts-");
  const cfg = join(dir, "topology.toml");
  writeFileSync(cfg, topologyToml(cells));
  const ts = await startReady(["topology", "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"], "second topology");
  return { child: ts.child, url: `http://${ts.ready.addr}`, admin: `http://${ts.ready.admin}` };
}

// Cache keys that cannot be made to collide, a service client that follows
// no redirect, and a Cache API namespace per deployment of a zone.
describe("cache isolation", () => {
  // Its FNV-1a key was cell-2's: one request stored its 404 under cell-2's key.
  const FORGED_CELL_2 = "296371275170884690274592503895712990101298676239";

  test("the audit's forged session prefix no longer poisons cell-2's entry, in memory or in the Cache API", async () => {
    const stack = await startStack({ routers: 2 });
    try {
      const forged = await cellFor(stack, FORGED_CELL_2, { path: "/forged" });
      assert.equal(forged.cell, "1", "the forged prefix belongs to no cell");
      // Same isolate (memory), then another isolate (the Cache API).
      for (const [i, url] of stack.urls.entries()) {
        const victim = await cellFor(stack, 2, { url, path: `/victim-${i}` });
        assert.equal(victim.cell, "2", `router ${i}: ${victim.text}`);
        const line = await waitForLog(stack, (l) => l.path === `/victim-${i}`);
        assert.notEqual(line.cache, "memory", "not answered by the forged value's entry");
      }
      assert.equal((await stats(stack)).classify_calls, 2, "one call per distinct question");
    } finally {
      await stack.stop();
    }
  });

  test("a Topology Service that answers 307 is not followed: no credentials elsewhere, the legacy cell, the error logged", async () => {
    const stack = await startStack({ vars: { GITLAB_TOPOLOGY_SERVICE_CLIENT_ID: "id-123.access", GITLAB_TOPOLOGY_SERVICE_CLIENT_SECRET: "s3cret" } });
    // Where the redirect points: a service that would send cell-2 to cell 3.
    const elsewhere = await startTopology([{ id: 2, address: stack.cells[3].addr }]);
    try {
      await faults(stack, { redirect_to: `${elsewhere.url}/v1/classify` });
      const r = await cellFor(stack, 2, { path: "/redirected" });
      assert.equal(r.cell, "1", "the legacy cell, not the redirect's answer");
      const line = await waitForLog(stack, (l) => l.path === "/redirected");
      assert.equal(line.cache, "fallback");
      assert.equal(line.attempts, 3, "a 3xx is retried like a 5xx");
      assert.match(line.error, /status 307/);
      const there = await getJson(`${elsewhere.admin}/_stats`);
      assert.equal(there.classify_calls, 0, "the redirect target was never called");
      assert.equal((await stats(stack)).classify_calls, 3);
    } finally {
      await stopChild(elsewhere.child);
      await stack.stop();
    }
  });

  test("two deployments on one Cache API never read each other's answers", async () => {
    // Router 1 is "staging": its own Topology Service, where cell-2's
    // session prefix belongs to a staging cell (a demo cell with id 9).
    const stagingCell = await startReady(["cell", "--id", "9", "--listen", "127.0.0.1:0"], "staging cell");
    const staging = await startTopology([{ id: 2, address: stagingCell.ready.addr }]);
    const both = await startStack({
      routers: 2,
      probe: true,
      routerVars: [{}, { GITLAB_TOPOLOGY_SERVICE_URL: staging.url, GITLAB_ALLOWED_UPSTREAMS: stagingCell.ready.addr }],
    }).catch(async (e) => {
      await stopChild(staging.child);
      await stopChild(stagingCell.child);
      throw e;
    });
    try {
      assert.equal((await cellFor(both, 2, { url: both.urls[0], path: "/production" })).cell, "2");
      const onStaging = await cellFor(both, 2, { url: both.urls[1], path: "/staging" });
      assert.equal(onStaging.cell, "9", "staging asked its own service, not production's cached answer");
      assert.equal((await waitForLog(both, (l) => l.path === "/staging")).cache, "service");
      assert.equal((await getJson(`${staging.admin}/_stats`)).classify_calls, 1);
      // And back: production is not answered by staging's entry either.
      const again = await cellFor(both, 2, { url: both.urls[0], path: "/production-again" });
      assert.equal(again.cell, "2");
      const body = '{"type":"SESSION_PREFIX","value":"cell-2"}';
      const prodEntry = await getJson(`${both.probeUrl}/?key=${encodeURIComponent(cacheKeyUrl(both, "SESSION_PREFIX", body))}`);
      const stagingStack = { vars: { ...both.vars, GITLAB_TOPOLOGY_SERVICE_URL: staging.url } };
      const stagingEntry = await getJson(`${both.probeUrl}/?key=${encodeURIComponent(cacheKeyUrl(stagingStack, "SESSION_PREFIX", body))}`);
      assert.equal(prodEntry.body.classification.address, both.cells[2].addr);
      assert.equal(stagingEntry.body.classification.address, stagingCell.ready.addr);
      assert.equal(prodEntry.body.question, body, "every entry carries its question");
    } finally {
      await both.stop();
      await stopChild(staging.child);
      await stopChild(stagingCell.child);
    }
  });
});
