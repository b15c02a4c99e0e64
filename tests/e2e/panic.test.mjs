// A bug that panics in Rust must not take the worker down: the request that
// hit it gets a 502 and a log line, the wasm instance is started afresh,
// and the next requests are routed as before. The release profile aborts
// on panic (a wasm trap), so this is the worst a bug can do.
//
// Needs a build with the `panic-probe` feature (requests to
// /__panic_probe__/sync and /__panic_probe__/async panic in routeSync and,
// after an await, in routeAsync); it is made here into target/worker-probe
// (seconds when up to date). Production builds have no such paths.
import { test, describe, before } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { ROOT, startStack, request, sessionCookie, requestLogs } from "./harness.mjs";
const BUILD = "target/worker-probe";

before(() => {
  const r = spawnSync("bash", ["scripts/build-worker.sh"], {
    cwd: ROOT,
    stdio: ["ignore", "inherit", "inherit"],
    env: { ...process.env, WORKER_OUT_DIR: BUILD, WORKER_FEATURES: "panic-probe", SKIP_BUILD: "" },
  });
  assert.equal(r.status, 0, "building the panic-probe worker");
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
        assert.ok(stack.logs.some((l) => l.includes(`panic probe: route${place === "sync" ? "Sync" : "Async"}`)), "the panic message is logged");
        assert.ok(countLines(stack, '"scope":"config"') > configLines, "the fresh instance read its config again");
      } finally {
        await stack.stop();
      }
    });
  }

  test("requests in flight on the old instance are answered, not lost", async () => {
    const stack = await startStack({ ruleset: "session_token", build: BUILD });
    try {
      // Cold sessions wait on the Topology Service while another request panics.
      const inflight = [3, 2, 3].map((cell, i) => request(`${stack.url}/inflight-${i}`, { headers: { cookie: sessionCookie(cell, "_gitlab_session") } }));
      const hit = request(`${stack.url}/__panic_probe__/sync`);
      const results = await Promise.all([...inflight, hit]);
      for (const r of results) assert.ok([200, 502].includes(r.status), `${r.status} ${r.text}\n${stack.logs.join("\n")}`);
      assert.equal(results.at(-1).status, 502);
      const after = await request(`${stack.url}/after`, { headers: { cookie: sessionCookie(3) } });
      assert.equal(after.status, 200);
      assert.equal(after.json().cell, "3");
    } finally {
      await stack.stop();
    }
  });
});
