// Long-lived connections through the real worker in workerd (Miniflare):
// WebSocket pass-through (Action Cable on /-/cable) and long-polls (runners'
// /api/v4/jobs/request, Workhorse's 50 s hold), with workerd's memory
// measured while 200 long-polls wait. One stack serves the whole file and
// its tests run concurrently, so the 50 s long-poll sets the wall time:
//
//   cell 1  legacy cell (nothing here uses it)
//   cell 2  WebSockets
//   cell 3  the 50 s long-poll and the 200 concurrent ones
//   cell 4  the client that disconnects while waiting
//   cell 5  stopped by the test that needs an unreachable cell
//
// The WebSocket tests run after the memory figures are taken, so their
// traffic does not blur them.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { createHash, randomBytes } from "node:crypto";
import { startStack, request, sessionCookie, waitForLog, getJson } from "./harness.mjs";
import { connect } from "./longlived-ws.mjs";
import { workerdChildren, rss } from "./procs.mjs";
import { setTimeout as sleep } from "node:timers/promises";

const MiB = 1024 * 1024;


const mib = (bytes) => `${(bytes / MiB).toFixed(1)} MiB`;

/** Polls `fn` until it returns a truthy value, or throws after `ms`. */
async function until(fn, ms, what) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

describe("long-lived connections through workerd", { concurrency: true }, () => {
  let stack;
  let workerd;
  const cellStats = (id) => getJson(`${stack.cells[id].url}/_stats`);

  before(async () => {
    const earlier = workerdChildren();
    stack = await startStack({ ruleset: "session_prefix", cellCount: 5 });
    const ours = [...workerdChildren()].filter((p) => !earlier.has(p));
    assert.equal(ours.length, 1, `one new workerd child, found ${ours}`);
    workerd = ours[0];
  });
  after(() => stack?.stop());

  // -------------------------------------------------------------------------
  // Long-polls

  test("a long-poll the cell holds for 50 s completes with the cell's answer", { timeout: 120_000 }, async (t) => {
    const body = JSON.stringify({ token: "runner-token", last_update: "0" });
    const started = Date.now();
    const res = await request(`${stack.url}/api/v4/jobs/request`, {
      method: "POST",
      headers: { cookie: sessionCookie(3), "content-type": "application/json", "x-demo-delay-ms": "50000" },
      body,
    });
    const elapsed = Date.now() - started;
    t.diagnostic(`50 s long-poll answered after ${elapsed} ms`);
    assert.equal(res.status, 200, res.text);
    const echo = res.json();
    assert.equal(echo.cell, "3");
    assert.equal(echo.path, "/api/v4/jobs/request");
    assert.equal(echo.body_sha256, createHash("sha256").update(body).digest("hex"));
    assert.ok(elapsed >= 50_000 && elapsed < 60_000, `elapsed ${elapsed} ms`);
    const line = await waitForLog(stack, (l) => l.path === "/api/v4/jobs/request" && l.duration_ms >= 50_000);
    assert.ok(line, "the router logged the long-poll");
    assert.equal(line.status, 200);
    assert.equal(line.upstream, stack.cells[3].addr);
  });

  test("a client that disconnects while its long-poll waits: nothing leaks, the router keeps serving", { timeout: 30_000 }, async (t) => {
    const DELAY = 4000;
    const base = await cellStats(4);
    const req = http.request(`${stack.url}/api/v4/jobs/request`, {
      method: "POST",
      headers: { cookie: sessionCookie(4), "x-demo-delay-ms": String(DELAY), "content-length": "2" },
    });
    let answered = false;
    req.on("error", () => {});
    req.on("response", () => (answered = true));
    req.end("{}");
    await until(async () => (await cellStats(4)).in_flight === 1, 5000, "the long-poll to reach cell 4");
    const disconnectedAt = Date.now();
    req.destroy();

    await sleep(500);
    const soon = await cellStats(4);
    // Once the cell's delay is over, the request must be gone either way.
    const end = await until(async () => {
      const s = await cellStats(4);
      return s.in_flight === 0 && s;
    }, DELAY + 5000, "cell 4 to finish the abandoned long-poll");
    const finishedAfter = Date.now() - disconnectedAt;
    const cancelled = end.abandoned > base.abandoned;
    t.diagnostic(
      `client disconnect during a long-poll: ${cancelled ? "workerd cancelled the upstream request" : "workerd did NOT cancel the upstream request; the cell answered it after its delay"}` +
        ` (cell in flight 0.5 s after the disconnect: ${soon.in_flight}; cell done ${finishedAfter} ms after the disconnect)`,
    );
    if (!cancelled) {
      // The worker kept awaiting the cell and logged the answer nobody read.
      const line = await waitForLog(stack, (l) => l.upstream === stack.cells[4].addr && l.path === "/api/v4/jobs/request", 3000);
      assert.ok(line, "the router logged the abandoned long-poll");
      t.diagnostic(`router log for it: status ${line.status}, duration ${line.duration_ms} ms`);
    }
    assert.equal(answered, false, "the client went away before any answer");
    // The router still serves that cell.
    const res = await request(`${stack.url}/after-disconnect`, { headers: { cookie: sessionCookie(4) } });
    assert.equal(res.status, 200);
    assert.equal(res.json().cell, "4");
  });

  test("a client that goes away in the middle of a streamed answer: the router stops pulling from the cell", { timeout: 30_000 }, async (t) => {
    const base = await cellStats(1);
    const total = 1024 * MiB;
    let received = 0;
    const disconnectedAt = await new Promise((resolve, reject) => {
      const req = http.request(`${stack.url}/group/project/-/archive/main.zip`, {
        headers: { cookie: sessionCookie(1), "x-demo-response-bytes": String(total), "accept-encoding": "identity" },
      });
      req.on("error", () => {});
      req.on("response", (res) => {
        if (res.statusCode !== 200) reject(new Error(`status ${res.statusCode}`));
        res.on("data", (c) => {
          received += c.length;
          if (received >= 4 * MiB && !req.destroyed) {
            req.destroy();
            resolve(Date.now());
          }
        });
        res.on("error", () => {});
        res.on("end", () => reject(new Error("the whole body arrived")));
      });
      req.end();
    });
    await until(async () => (await cellStats(1)).responses_cut > base.responses_cut, 10_000, "cell 1 to see its streamed answer cut");
    t.diagnostic(`client read ${mib(received)} of ${mib(total)}, then left; the cell's stream was cut ${Date.now() - disconnectedAt} ms later`);
  });

  // -------------------------------------------------------------------------
  // One after another: the memory figures under 200 long-polls first, then
  // the WebSocket tests, so that their traffic does not blur the figures.
  describe("in turn: workerd's memory under 200 waits, then WebSocket pass-through", { concurrency: false }, () => {
    test("200 concurrent long-polls, twice: all complete and workerd's memory stays flat", { timeout: 90_000 }, async (t) => {
      const N = 200;
      const DELAY = 12_000;
      // Warm the isolate first (wasm instantiated, ruleset compiled, cell 3
      // cached) so "before" is the steady state, not the cold start.
      for (let i = 0; i < 20; i++) {
        const res = await request(`${stack.url}/warm`, { headers: { cookie: sessionCookie(3) } });
        assert.equal(res.status, 200);
      }
      await sleep(500);
      const before = rss(workerd);
      const rounds = [];
      for (let round = 1; round <= 2; round++) {
        const waitingBefore = (await cellStats(3)).in_flight;
        const started = Date.now();
        const polls = Array.from({ length: N }, (_, i) =>
          request(`${stack.url}/api/v4/jobs/request?round=${round}&n=${i}`, {
            method: "POST",
            headers: { cookie: sessionCookie(3), "x-demo-delay-ms": String(DELAY), "content-type": "application/json" },
            body: `{"n":${i}}`,
          }),
        );
        // All N are held by the cell at once...
        await until(async () => (await cellStats(3)).in_flight >= waitingBefore + N, 10_000, `${N} requests in flight at cell 3`);
        // ...while workerd waits on them: sample its RSS until they answer.
        let during = rss(workerd);
        let settled = false;
        const all = Promise.all(polls).finally(() => (settled = true));
        while (!settled) {
          during = Math.max(during, rss(workerd));
          await sleep(250);
        }
        const results = await all;
        const elapsed = Date.now() - started;
        await sleep(1000);
        const afterRss = rss(workerd);
        rounds.push({ round, elapsed_ms: elapsed, rss_during_max: mib(during), rss_after: mib(afterRss), growth_during: mib(during - before), growth_after: mib(afterRss - before) });
        t.diagnostic(`round ${round}: ${N} waits of ${DELAY} ms answered in ${elapsed} ms; workerd RSS before ${mib(before)}, during (max) ${mib(during)}, after ${mib(afterRss)}`);

        const seen = new Set();
        for (const res of results) {
          assert.equal(res.status, 200, res.text);
          const echo = res.json();
          assert.equal(echo.cell, "3");
          seen.add(echo.query);
        }
        assert.equal(seen.size, N, "every long-poll got its own answer");
        assert.ok(elapsed < DELAY + 10_000, `they waited together (${elapsed} ms), not one after another`);
        assert.ok(during - before < 64 * MiB, `RSS grew by ${mib(during - before)} while ${N} long-polls waited`);
        assert.ok(afterRss - before < 64 * MiB, `RSS after is ${mib(afterRss - before)} above before`);
      }
      t.diagnostic(`workerd RSS figures ${JSON.stringify({ waits: N, delay_ms: DELAY, rss_before: mib(before), rounds })}`);
    });

    const open = async (cell, extra = {}) => {
      const r = await connect(`${stack.url}/-/cable`, {
        headers: { host: "gitlab.example.com", origin: "https://gitlab.example.com", cookie: sessionCookie(cell), ...extra },
        protocols: ["actioncable-v1-json", "actioncable-unsupported"],
      });
      assert.equal(r.status, 101, `handshake answered ${r.status}: ${r.text}`);
      const hello = await r.ws.next();
      assert.equal(hello.type, "text");
      return { ...r, hello: JSON.parse(hello.data) };
    };

    test("a cell-2 session opens /-/cable on cell 2 with the forwarding and rule headers, Origin untouched", async () => {
      const { ws, headers, hello } = await open(2, { "x-forwarded-host": "evil.example", "x-gitlab-http-router-rule-action": "spoofed" });
      assert.equal(headers["x-demo-cell"], "2");
      assert.equal(headers.upgrade.toLowerCase(), "websocket");
      assert.equal(headers["sec-websocket-protocol"], "actioncable-v1-json");
      assert.equal(hello.cell, "2");
      assert.equal(hello.path, "/-/cable");
      const h = hello.headers;
      assert.equal(h["x-forwarded-host"], "gitlab.example.com");
      assert.equal(h["x-forwarded-proto"], "http");
      assert.equal(h["x-gitlab-http-router-rule-action"], "classify");
      assert.equal(h["x-gitlab-http-router-rule-type"], "SESSION_PREFIX");
      assert.equal(h.origin, "https://gitlab.example.com", "Origin reaches the cell untouched");
      assert.equal(h.host, stack.cells[2].addr);
      assert.match(h.cookie, /_gitlab_session=cell-2-/);
      assert.equal(h["sec-websocket-protocol"], "actioncable-v1-json, actioncable-unsupported");
      assert.doesNotMatch(JSON.stringify(h), /evil\.example|spoofed/);
      const line = await waitForLog(stack, (l) => l.path === "/-/cable" && l.status === 101);
      assert.ok(line, "the router logged the upgrade");
      assert.equal(line.upstream, stack.cells[2].addr);
      assert.equal(line.classify_type, "SESSION_PREFIX");
      ws.close(1000);
      assert.equal((await ws.closed).code, 1000);
    });

    test("1,000 text and binary messages of mixed sizes up to 64 KiB echo back intact and in order", { timeout: 60_000 }, async (t) => {
      const { ws } = await open(2);
      const fixed = [0, 1, 125, 126, 127, 1000, 65535, 65536];
      let seed = 12345;
      const rand = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
      const sizeOf = (i) => {
        if (i < fixed.length * 2) return fixed[i >> 1];
        const r = rand();
        return r < 0.6 ? Math.floor(rand() * 1024) : r < 0.9 ? Math.floor(rand() * 16384) : Math.floor(rand() * 65537);
      };
      const TEXT = "cable ✓ é 😀 {\"identifier\":\"GraphqlChannel\"} ";
      const TEXT_BYTES = Buffer.byteLength(TEXT);
      const textOf = (n, i) => {
        // Multi-byte UTF-8 throughout, cut on a character boundary, padded
        // with ASCII to exactly n bytes.
        let s = `#${i} ` + TEXT.repeat(Math.ceil(n / TEXT_BYTES));
        s = Buffer.from(s).subarray(0, n).toString("utf8").replace(/\ufffd+$/, "");
        return s + "x".repeat(n - Buffer.byteLength(s));
      };
      const messages = Array.from({ length: 1000 }, (_, i) => {
        const n = sizeOf(i);
        return i % 2 === 0 ? textOf(n, i) : randomBytes(n);
      });
      const total = messages.reduce((a, m) => a + (typeof m === "string" ? Buffer.byteLength(m) : m.length), 0);

      const WINDOW = 32;
      const started = Date.now();
      let sent = 0;
      for (let got = 0; got < messages.length; got++) {
        while (sent < messages.length && sent - got < WINDOW) ws.send(messages[sent++]);
        const m = await ws.next(15_000);
        const want = messages[got];
        if (typeof want === "string") {
          assert.equal(m.type, "text", `message ${got}`);
          assert.ok(m.data === want, `text message ${got} (${Buffer.byteLength(want)} bytes) differs`);
        } else {
          assert.equal(m.type, "binary", `message ${got}`);
          assert.ok(want.equals(m.data), `binary message ${got} (${want.length} bytes) differs`);
        }
      }
      const ms = Date.now() - started;
      t.diagnostic(`1000 messages, ${mib(total)} each way, echoed in ${ms} ms`);
      assert.ok(!ws.maskedFromServer, "server frames are never masked");
      ws.close(1000);
      await ws.closed;
    });

    test("the client closing ends the cell's side cleanly with the client's code", async () => {
      const { ws } = await open(2);
      const before = (await cellStats(2)).websocket_closes.length;
      ws.close(4002, "client done");
      const closed = await ws.closed;
      assert.equal(closed.clean, true, "the close was answered");
      assert.equal(closed.code, 4002, "the cell's answer carries the code back");
      const end = await until(async () => {
        const s = await cellStats(2);
        return s.websocket_closes.length > before && s.websocket_closes.at(-1);
      }, 5000, "cell 2 to record the close");
      assert.deepEqual({ by: end.by, code: end.code, reason: end.reason }, { by: "peer", code: 4002, reason: "client done" });
      assert.equal(end.error, null);
    });

    test("the cell closing (close:4001) ends the client's side cleanly with the cell's code", async () => {
      const { ws } = await open(2);
      const before = (await cellStats(2)).websocket_closes.length;
      ws.send("close:4001");
      const m = await ws.next();
      assert.deepEqual(m, { type: "close", code: 4001, reason: "closed on request" });
      const closed = await ws.closed;
      assert.equal(closed.clean, true);
      assert.equal(closed.code, 4001);
      const end = await until(async () => {
        const s = await cellStats(2);
        return s.websocket_closes.length > before && s.websocket_closes.at(-1);
      }, 5000, "cell 2 to record the close");
      assert.equal(end.by, "cell");
      assert.equal(end.code, 4001);
    });

    test("a client that drops its connection ends the cell's session", async (t) => {
      const { ws } = await open(2);
      const before = (await cellStats(2)).websocket_closes.length;
      ws.destroy();
      const s = await until(async () => {
        const s = await cellStats(2);
        return s.websocket_closes.length > before && s;
      }, 5000, "cell 2's session to end");
      assert.equal(s.websockets_open, 0, "no session left open at the cell");
      t.diagnostic(`cell saw: ${JSON.stringify(s.websocket_closes.at(-1))}`);
    });

    test("an upgrade to an unreachable cell answers 502 at once, not a hang", async () => {
      const cell5 = stack.children[4];
      assert.match(cell5.spawnargs.join(" "), /--id 5 /);
      cell5.kill("SIGTERM");
      if (cell5.exitCode === null) await new Promise((r) => cell5.once("exit", r));
      const started = Date.now();
      const r = await connect(`${stack.url}/-/cable`, {
        headers: { origin: "https://gitlab.example.com", cookie: sessionCookie(5) },
        timeoutMs: 10_000,
      });
      const elapsed = Date.now() - started;
      assert.equal(r.ok, false);
      assert.equal(r.status, 502);
      assert.match(r.text, /upstream unreachable/);
      assert.ok(elapsed < 5000, `answered in ${elapsed} ms`);
      const line = await waitForLog(stack, (l) => l.path === "/-/cable" && l.status === 502);
      assert.ok(line, "the router logged the failure");
      assert.equal(line.upstream, stack.cells[5].addr);
      assert.match(line.error, /upstream fetch failed/);
    });
  });
});
