// A bug that panics in Rust must not take the worker down: the request that
// hit it gets a 502 and a log line, the wasm instance is started afresh,
// and the next requests are routed as before. The release profile aborts
// on panic (a wasm trap), so this is the worst a bug can do.
//
// Needs the test build (harness.mjs buildTestWorker: the `panic-probe`
// feature makes requests to /__panic_probe__/sync and /__panic_probe__/async
// panic in routeSync and, after an await, in routeAsync), made into
// target/worker-probe (seconds when up to date). Production builds have no
// such paths.
import { test, describe, before } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { TEST_BUILD, buildTestWorker, startStack, request, sessionCookie, requestLogs, postJson, getJson, eventually } from "./harness.mjs";
const BUILD = TEST_BUILD;

before(() => {
  buildTestWorker();
});

const countLines = (stack, needle) => stack.logs.filter((l) => l.includes(needle)).length;


describe("a Rust panic", () => {
  for (const place of ["sync", "async"]) {
    test(`in ${place === "sync" ? "routeSync" : "routeAsync, after an await,"}: a 502 for that request, then routing as before`, async () => {
      const stack = await startStack({ ruleset: "session_token", build: BUILD });
      try {
        const before = await request(`${stack.url}/before`, { headers: { cookie: sessionCookie(2) } });
        assert.equal(before.status, 200);
        assert.equal(before.json().cell, "2");
        const configLines = countLines(stack, '"scope":"config"');

        const started = Date.now();
        const hit = await request(`${stack.url}/__panic_probe__/${place}`);
        assert.equal(hit.status, 502, hit.text);
        assert.equal(hit.text, "gitlab-http-router: internal error\n");
        assert.ok(Date.now() - started < 5000, "answered, not left waiting");

        // Routed again, by a fresh instance: its isolate state (memory
        // cache, config) is new, so the session is classified again.
        for (const [path, cell] of [["/after", "2"], ["/after-2", "2"], ["/explore", "1"]]) {
          const res = await request(`${stack.url}${path}`, { headers: path === "/explore" ? {} : { cookie: sessionCookie(2) } });
          assert.equal(res.status, 200, `${path}: ${res.text}`);
          assert.equal(res.json().cell, cell, path);
        }
        const logs = requestLogs(stack);
        assert.equal(logs.find((l) => l.path === "/after")?.cache, "cache-api", "a fresh memory cache (the Cache API still has the answer)");
        assert.equal(logs.find((l) => l.path === "/after-2")?.cache, "memory");
        assert.ok(stack.logs.some((l) => l.includes("Rust panic: restarting the wasm instance")), stack.logs.join("\n"));
        // The panicked request's line names what failed: its message was
        // passed to the fresh instance, not read from the dead one's memory.
        const internal = stack.logs.filter((l) => l.includes('"message":"internal error: '));
        assert.ok(internal.length > 0 && internal.every((l) => !l.includes("\\u0000")), internal.join("\n"));
        assert.ok(stack.logs.some((l) => l.includes(`panic probe: route${place === "sync" ? "Sync" : "Async"}`)), "the panic message is logged");
        assert.ok(countLines(stack, '"scope":"config"') > configLines, "the fresh instance read its config again");
      } finally {
        await stack.stop();
      }
    });
  }

  test("requests in flight on the old instance get the internal-error answer, then routing as before", async () => {
    const stack = await startStack({ ruleset: "session_token", build: BUILD });
    try {
      // Cold sessions wait in routeAsync on a slow Topology Service. The
      // panic is sent only once all three have reached it, and is answered
      // long before the Topology Service answers them: so each of them is
      // still waiting on the old instance when it panics, every time.
      await postJson(`${stack.topology.admin}/_faults`, { latency_ms: 1500 });
      await postJson(`${stack.topology.admin}/_stats/reset`, {});
      const paths = ["/inflight-0", "/inflight-1", "/inflight-2"];
      const sent = Date.now();
      const inflight = [3, 2, 3].map((cell, i) => request(`${stack.url}${paths[i]}`, { headers: { cookie: sessionCookie(cell, "_gitlab_session") } }));
      const deadline = Date.now() + 5000;
      while ((await getJson(`${stack.topology.admin}/_stats`)).classify_calls < 3) {
        assert.ok(Date.now() < deadline, "the three requests reach the Topology Service");
        await sleep(10);
      }
      const started = Date.now();
      const hit = await request(`${stack.url}/__panic_probe__/sync`);
      assert.equal(hit.status, 502, hit.text);
      assert.equal(hit.text, "gitlab-http-router: internal error\n");

      // Their routeAsync futures live in the old instance and never finish
      // (its callbacks are refused once the fresh instance starts), so
      // unlessPanic fails them on its next 20 ms tick and the entry answers
      // with internalError's plan: exactly the panicking request's answer,
      // well before the Topology Service's 1.5 s would have passed.
      const results = await Promise.all(inflight);
      assert.ok(Date.now() - started < 1000, `answered when the instance panicked, not after the Topology Service (${Date.now() - started} ms)`);
      for (const [i, r] of results.entries()) {
        assert.equal(r.status, 502, `${paths[i]}: ${r.status} ${r.text}\n${stack.logs.join("\n")}`);
        assert.equal(r.text, "gitlab-http-router: internal error\n", paths[i]);
      }
      // One restart for the one panic; each failed request is logged as an
      // internal error naming the panic.
      assert.equal(countLines(stack, "Rust panic: restarting the wasm instance"), 1, stack.logs.join("\n"));
      const failed = await eventually(() => {
        const lines = stack.logs.filter((l) => l.includes("the router's wasm instance panicked"));
        assert.equal(lines.length, 3, stack.logs.join("\n"));
        return lines;
      });
      for (const l of failed) assert.match(l, /"status":502/);
      assert.deepEqual(requestLogs(stack).filter((l) => paths.includes(l.path)), [], "no request log line claims they were routed");

      // The next request is routed normally by the fresh instance: a cold
      // session classified again (the in-flight answers never reached a cache).
      await postJson(`${stack.topology.admin}/_faults/reset`, {});
      const after = await request(`${stack.url}/after`, { headers: { cookie: sessionCookie(3) } });
      assert.equal(after.status, 200, after.text);
      assert.equal(after.json().cell, "3");
      const line = await eventually(() => {
        const l = requestLogs(stack).find((x) => x.path === "/after");
        assert.ok(l);
        return l;
      });
      assert.equal(line.status, 200);

      // Once the Topology Service has answered the old instance's calls (their
      // callbacks are refused), routing is still undisturbed: no second restart.
      await sleep(Math.max(0, sent + 1800 - Date.now()));
      const late = await request(`${stack.url}/after-late`, { headers: { cookie: sessionCookie(2) } });
      assert.equal(late.status, 200, late.text);
      assert.equal(late.json().cell, "2");
      assert.equal(countLines(stack, "Rust panic: restarting the wasm instance"), 1, stack.logs.join("\n"));
    } finally {
      await stack.stop();
    }
  });
});
