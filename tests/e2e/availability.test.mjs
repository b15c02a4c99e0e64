// Nothing a client sends can take a cell offline, and the router's own
// surfaces hold against hostile input, through the real worker
// in workerd in front of demo cells with GITLAB_CELLS listing them (their
// circuits on): bodies as HTTP means them, client-made failures, TRACE and
// CONNECT, Cloudflare's version override headers, hostile trace headers
// and the plan's separator bytes in client values.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import net from "node:net";
import { startStack, request, rawRequest, requestLogs, sessionCookie, eventually, postJson, getJson } from "./harness.mjs";
import { startCells, stopCells, timed } from "./cells-harness.mjs";

const SECRET = "smoke-0123456789abcdef";
const TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/** The demo cell's echo of what it received. */
async function echo(url, headers = {}, method = "GET") {
  const r = await request(url, { method, headers });
  assert.equal(r.status, 200, `${method} ${url}: ${r.text}`);
  return { ...r.json(), cell: r.headers["x-demo-cell"] };
}

/** The same, sent byte for byte (header values node:http refuses). */
async function rawEcho(base, path, headers) {
  const r = await rawRequest(base, { path, headers: Object.entries(headers) });
  assert.equal(r.status, 200, `${path}: ${r.text}`);
  return { ...r.json(), cell: r.headers["x-demo-cell"] };
}

/** `n` requests of other users of cell `id`: how many were refused. */
async function refusedOf(stack, id, n = 20) {
  let refused = 0;
  for (let i = 0; i < n; i++) {
    const r = await timed(`${stack.url}/dashboard`, { cookie: sessionCookie(id) });
    if (r.status !== 200 || r.cell !== String(id)) refused++;
  }
  return refused;
}

describe("client-made failures never count against a cell", () => {
  let stack;
  before(async () => {
    stack = await startCells({ vars: { GITLAB_CELL_OPEN_MS: "5000", GITLAB_SMOKE_TEST_SECRET: SECRET } });
  });
  after(async () => stack && stopCells(stack));

  test("GET and HEAD with Content-Length: 0, and a GET with an empty chunked body, are answered by the cell", async () => {
    const to2 = { cookie: sessionCookie(2) };
    const asked = [
      ["GET", { ...to2, "content-length": "0" }],
      ["HEAD", { ...to2, "content-length": "0" }],
      ["GET", { ...to2, "transfer-encoding": "chunked" }],
    ];
    for (const [method, headers] of asked) {
      for (let i = 0; i < 5; i++) {
        const r = await request(`${stack.url}/dashboard`, { method, headers });
        assert.equal(r.status, 200, `${method} ${JSON.stringify(headers)}: ${r.text}`);
        assert.equal(r.headers["x-demo-cell"], "2");
        if (method === "GET") assert.equal(r.json().body_bytes, 0);
      }
    }
    assert.equal(await refusedOf(stack, 2), 0, "other users of cell 2 refused");
  });

  test("aborted uploads are logged as possibly the client's and refuse no one", async () => {
    const from = stack.logs.length;
    for (let i = 0; i < 10; i++) {
      await new Promise((resolve) => {
        const req = http.request(`${stack.url}/api/v4/projects/1/uploads`, {
          method: "PUT",
          headers: { cookie: sessionCookie(3), "content-length": "100000" },
        });
        req.on("error", () => {});
        req.write("x".repeat(1000));
        setTimeout(() => {
          req.destroy();
          resolve();
        }, 100);
      });
    }
    const lines = await eventually(() => {
      const l = requestLogs(stack, from).filter((x) => x.method === "PUT");
      assert.ok(l.length >= 10, `${l.length} lines`);
      return l;
    }, 5000);
    for (const l of lines) {
      assert.match(l.error, /the client's upload or the cell; not counted against the cell/);
      // The field the tail worker reads (it sends no such line to Sentry).
      assert.equal(l.error_level, "warn");
    }
    assert.equal(await refusedOf(stack, 3), 0, "other users of cell 3 refused");
  });

  test("TRACE and CONNECT are answered 405 by the router", async () => {
    const trace = await request(`${stack.url}/dashboard`, { method: "TRACE", headers: { cookie: sessionCookie(2) } });
    assert.equal(trace.status, 405);
    assert.equal(trace.headers["x-demo-cell"], undefined);
    assert.match(trace.headers.allow, /GET/);
    // CONNECT by hand: node's client makes a tunnel of it.
    const { port } = new URL(stack.url);
    const answer = await new Promise((resolve, reject) => {
      const socket = net.connect(Number(port), "127.0.0.1", () => {
        socket.write("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n");
      });
      let data = "";
      socket.on("data", (d) => {
        data += d;
        if (data.includes("\r\n\r\n")) {
          socket.destroy();
          resolve(data);
        }
      });
      socket.on("error", reject);
      setTimeout(() => {
        socket.destroy();
        resolve(data);
      }, 3000);
    });
    // workerd does not hand CONNECT to a Worker's fetch (Cloudflare's edge
    // never does); the router answers 405 if one ever arrives (src/tests.rs).
    // Either way it never reaches a cell.
    assert.match(answer, /^HTTP\/1\.1 [45]\d\d /);
    assert.doesNotMatch(answer, /x-demo-cell/i);
    console.log(`# TRACE: ${trace.status}; CONNECT: ${answer.split("\r\n")[0]}`);
  });

  test("version override headers never reach a cell; an override without the smoke-test secret gets 403", async () => {
    const override = { "cloudflare-workers-version-overrides": 'gitlab-http-router="00000000-0000-4000-8000-000000000000"' };
    const to2 = { cookie: sessionCookie(2) };
    for (const headers of [override, { ...override, "x-gitlab-http-router-smoke-test": "guess" }]) {
      const r = await request(`${stack.url}/users/sign_in`, { headers: { ...to2, ...headers } });
      assert.equal(r.status, 403, JSON.stringify(headers));
      assert.equal(r.headers["x-demo-cell"], undefined);
    }
    const smoke = await echo(`${stack.url}/dashboard`, { ...to2, ...override, "x-gitlab-http-router-smoke-test": SECRET });
    assert.equal(smoke.cell, "2");
    const key = await echo(`${stack.url}/dashboard`, { ...to2, "cloudflare-workers-version-key": "user-17" });
    for (const seen of [smoke, key]) {
      for (const name of ["cloudflare-workers-version-overrides", "cloudflare-workers-version-key", "x-gitlab-http-router-smoke-test"]) {
        assert.equal(seen.headers[name], undefined, `${name} reached the cell`);
      }
    }
  });
});

describe("hostile trace headers and separator bytes", () => {
  let stack;
  before(async () => {
    stack = await startCells({ vars: { GITLAB_TOPOLOGY_TIMEOUT_MS: "2000" } });
  });
  after(async () => stack && stopCells(stack));

  test("a later-version traceparent is kept by its first 55 characters, as version 00; tracestate goes only with it", async () => {
    const to2 = { cookie: sessionCookie(2) };
    const hostile = `cc${TRACEPARENT.slice(2)}-"\u0001${"x".repeat(100 * 1024)}`;
    const kept = await rawEcho(stack.url, "/dashboard", { ...to2, traceparent: hostile, tracestate: "congo=t61rcWkgMzE" });
    assert.equal(kept.headers.traceparent, TRACEPARENT);
    assert.equal(kept.headers.tracestate, "congo=t61rcWkgMzE");
    const replaced = await echo(`${stack.url}/dashboard`, { ...to2, traceparent: `ff${TRACEPARENT.slice(2)}`, tracestate: "congo=t61rcWkgMzE" });
    assert.notEqual(replaced.headers.traceparent, `ff${TRACEPARENT.slice(2)}`);
    assert.match(replaced.headers.traceparent, /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    assert.equal(replaced.headers.tracestate, undefined, "dropped with a replaced traceparent");
    const members = Array.from({ length: 40 }, (_, i) => `k${i}=${"v".repeat(20)}`).join(",");
    const capped = await echo(`${stack.url}/dashboard`, { ...to2, traceparent: TRACEPARENT, tracestate: members });
    assert.ok(capped.headers.tracestate.length <= 512, `${capped.headers.tracestate.length} bytes`);
    assert.ok(members.startsWith(capped.headers.tracestate));
  });

  test("separator bytes in Connection, cookies, paths and queries leave the routed request intact", async () => {
    const seen = await rawEcho(stack.url, "/dash%01board/%00x?q=%01cookie&r=a%00b", {
      cookie: sessionCookie(2),
      connection: "x-foo\u0001cookie",
      "x-foo": "1",
    });
    assert.equal(seen.cell, "2", "routed by its session");
    assert.equal(seen.headers.cookie, sessionCookie(2), "the Cookie the request was routed by reached the cell");
    assert.equal(seen.path, "/dash%01board/%00x");
    assert.equal(seen.query, "q=%01cookie&r=a%00b");
    assert.equal(seen.headers["x-foo"], "1", "a Connection token that is no header name removes nothing");
    // A cookie holding them is routed by the session beside it and sent on
    // as it came; the demo cell's HTTP parser then refuses the control
    // byte itself (400), as many servers do.
    const from = stack.logs.length;
    const cookie = `${sessionCookie(2)}; other=a\u0001b\u0001cookie`;
    const r = await rawRequest(stack.url, { path: "/dashboard", headers: [["cookie", cookie]] });
    const line = await eventually(() => {
      const l = requestLogs(stack, from).find((x) => x.path === "/dashboard");
      assert.ok(l);
      return l;
    });
    assert.equal(line.rule, "session_cookie");
    assert.equal(line.cell, 2);
    assert.equal(line.status, r.status);
  });
});

describe("requests coalesced on one lookup", () => {
  test("a hostile traceparent on the leading lookup fails none of the requests coalesced on it", async () => {
    // The service is slow, so the others wait on the first request's call;
    // it refuses (400) a traceparent it cannot read, as a strict one does.
    // No GITLAB_CELLS: a session's cell comes from the service alone.
    const stack = await startStack({ ruleset: "session_prefix", cellCount: 3, vars: { GITLAB_TOPOLOGY_TIMEOUT_MS: "2000" } });
    await postJson(`${stack.topology.admin}/_faults`, { latency_ms: 300 });
    try {
      const hostile = `cc${TRACEPARENT.slice(2)}-"${"x".repeat(1024)}`;
      const cookie = sessionCookie(3);
      const first = request(`${stack.url}/dashboard`, { headers: { cookie, traceparent: hostile } });
      await new Promise((r) => setTimeout(r, 50));
      const victims = await Promise.all(Array.from({ length: 50 }, () => request(`${stack.url}/dashboard`, { headers: { cookie } })));
      const firstAnswer = await first;
      const wrong = victims.filter((v) => v.headers["x-demo-cell"] !== "3");
      assert.equal(wrong.length, 0, `${wrong.length} of 50 coalesced requests misrouted`);
      assert.equal(firstAnswer.headers["x-demo-cell"], "3", "the hostile request itself");
      const stats = await getJson(`${stack.topology.admin}/_stats`);
      for (const call of stats.last_requests) {
        const t = call.headers.traceparent;
        assert.ok(t === undefined || /^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/.test(t), `the service got traceparent ${String(t).slice(0, 80)}`);
      }
    } finally {
      await stack.stop();
    }
  });
});
