// Operating the router: request tracing (request id and traceparent on the
// forwarded request, on Topology Service calls and in the log line, with
// the Worker version) and sampled request logs, through the real worker in
// workerd.
import { test, describe } from "node:test";
import assert from "node:assert/strict";
import { startStack, request, waitForLog, requestLogs, sessionCookie } from "./harness.mjs";

const TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TRACEPARENT_RE = /^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;
const VERSION = { id: "7c1a9e42-0000-4000-8000-00000000abcd", tag: "rollout-25", timestamp: "2026-11-30T12:00:00Z" };

async function serviceRequests(stack) {
  return (await (await fetch(`${stack.topology.admin}/_stats`)).json()).last_requests;
}

describe("request tracing", () => {
  test("the ray and a valid traceparent reach the cell and the service, and match the log line", async () => {
    const stack = await startStack({ ruleset: "session_prefix", cellCount: 2, vars: { CF_VERSION_METADATA: VERSION } });
    try {
      const res = await request(`${stack.url}/traced`, {
        headers: { cookie: sessionCookie(2), "cf-ray": "8f1c2a3b4c5d6e7f-AMS", traceparent: TRACEPARENT, "x-request-id": "client-chosen" },
      });
      assert.equal(res.status, 200);
      const echo = res.json();
      assert.equal(echo.cell, "2");
      assert.equal(echo.headers["x-request-id"], "8f1c2a3b4c5d6e7f-AMS", "the client's own id is replaced");
      assert.equal(echo.headers.traceparent, TRACEPARENT);
      const call = (await serviceRequests(stack)).at(-1);
      assert.equal(call.headers["x-request-id"], "8f1c2a3b4c5d6e7f-AMS");
      assert.equal(call.headers.traceparent, TRACEPARENT);
      const line = await waitForLog(stack, (l) => l.path === "/traced");
      assert.equal(line.request_id, "8f1c2a3b4c5d6e7f-AMS");
      assert.equal(line.traceparent, TRACEPARENT);
      assert.equal(line.version, VERSION.id);
    } finally {
      await stack.stop();
    }
  });

  test("without a ray and with a malformed traceparent, both are generated and consistent", async () => {
    const stack = await startStack({ ruleset: "session_prefix", cellCount: 3 });
    try {
      const ids = new Set();
      const traces = new Set();
      for (const bad of ["00-xyz-abc-01", TRACEPARENT.toUpperCase(), `ff${TRACEPARENT.slice(2)}`]) {
        const res = await request(`${stack.url}/fresh`, {
          headers: { cookie: sessionCookie(3), traceparent: bad, "x-request-id": "client-chosen" },
        });
        const echo = res.json();
        assert.equal(echo.cell, "3");
        const id = echo.headers["x-request-id"];
        // A v4 UUID, as crypto.randomUUID writes one.
        assert.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
        assert.match(echo.headers.traceparent, TRACEPARENT_RE);
        traces.add(echo.headers.traceparent.slice(3, 35));
        assert.ok(!id.replaceAll("-", "").includes(echo.headers.traceparent.slice(3, 35)), "ids drawn apart");
        assert.notEqual(echo.headers.traceparent, bad);
        ids.add(id);
        const line = await waitForLog(stack, (l) => l.request_id === id);
        assert.ok(line, `a log line names ${id}`);
        assert.equal(line.traceparent, echo.headers.traceparent);
        assert.equal(line.version, undefined, "no version metadata binding here");
      }
      assert.equal(ids.size, 3, "a new id per request");
      assert.equal(traces.size, 3, "a new trace per request");
      // The first request asked the service (later ones hit the memory cache).
      const calls = await serviceRequests(stack);
      assert.ok(calls.length >= 1);
      const line = requestLogs(stack).find((l) => l.path === "/fresh" && l.cache === "service");
      assert.equal(calls.at(-1).headers["x-request-id"], line.request_id);
      assert.equal(calls.at(-1).headers.traceparent, line.traceparent);
    } finally {
      await stack.stop();
    }
  });
});

describe("GITLAB_REQUEST_LOG=sample:0.01", () => {
  test("every notable line plus about 1 % of routine ones", async () => {
    const stack = await startStack({ ruleset: "session_prefix", cellCount: 2, vars: { GITLAB_REQUEST_LOG: "sample:0.01" } });
    try {
      const N = 1000;
      for (let i = 0; i < N; i += 50) {
        await Promise.all(
          Array.from({ length: 50 }, (_, j) => request(`${stack.url}/routine/${i + j}`, { headers: { cookie: sessionCookie(2) } })),
        );
      }
      // A notable one: a session for a cell the service does not know is
      // fine, but a refused service is a fallback.
      await fetch(`${stack.topology.admin}/_faults`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ refuse_connections: true }),
      });
      await request(`${stack.url}/notable`, { headers: { cookie: sessionCookie(9) } });
      const notable = await waitForLog(stack, (l) => l.path === "/notable");
      assert.equal(notable?.cache, "fallback", "a notable line is always written");
      await new Promise((r) => setTimeout(r, 200));
      const routine = requestLogs(stack).filter((l) => l.path.startsWith("/routine/")).length;
      console.log(`sample:0.01 -> ${routine} log lines per ${N} routine requests`);
      // Binomial(1000, 0.01): P(X = 0) = 4e-5, P(X > 30) < 1e-8.
      assert.ok(routine >= 1 && routine <= 30, `${routine} routine lines`);
    } finally {
      await stack.stop();
    }
  });
});
