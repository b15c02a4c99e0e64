// The tail worker (tail-worker/; docs/logging.md, "Errors to Sentry: the
// tail worker") in workerd: the real built router with the tail worker as
// its tail consumer (Miniflare's `tails`), sending to a Sentry stand-in, a
// real HTTP server on loopback that records every envelope. The router
// catches its own failures (a Rust panic, shown with the test build, is a
// 502 and error lines), so the uncaught exception comes from a second
// worker that throws, tailed by the same consumer. Workerd hands a tail
// consumer one trace item per invocation, so the batch bound is shown by
// calling the tail handler, in workerd, with a batch of TraceItem-shaped
// events.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { randomBytes } from "node:crypto";
import { Miniflare } from "miniflare";
import { ROOT, HEX32, TEST_BUILD, buildTestWorker, startRouter, freePort, request, eventually } from "./harness.mjs";
import { MAX_TEXT, SENT_HEADERS, TEXT_MARGIN, scrubText, scrubValue, sentHeaders, stripUrl } from "../../tail-worker/scrub.mjs";
import { dsnRefusal, parseDsn } from "../../tail-worker/sentry.mjs";
import { itemReports } from "../../tail-worker/reports.mjs";
import { readRuntimeConfig, runtime } from "../../scripts/runtime-config.mjs";

const KEY = "e2epublickey";
const PROJECT = "42";
const AUTH = `Sentry sentry_version=7, sentry_key=${KEY}, sentry_client=gitlab-http-router-tail/1.0`;
const TAIL_SCRIPT = join(ROOT, "tail-worker", "index.mjs");
// The tail worker's own runtime, as tail-worker/wrangler.toml deploys it.
const TAIL_RUNTIME = readRuntimeConfig(join(ROOT, "tail-worker", "wrangler.toml"));

/** What a client's request carries that must never reach Sentry. */
const SECRETS = {
  bearer: "bearer-secret-7f3a9c01",
  pat: "glpat-PrivateTokenSecret0123",
  job: "job-token-secret-5d2e8b",
  deploy: "gldt-DeployTokenSecret4567",
  access: "access-client-secret-9e1f",
  accessId: "access-client-id-3c4d",
  session: `cell-2-${HEX32}`,
  otherCookie: "other-cookie-secret-77aa",
  query: "query-private-token-81bc",
  queryAccess: "query-access-token-92cd",
  pathToken: "glpat-InThePathSecret98765",
};

function secretHeaders() {
  return {
    authorization: `Bearer ${SECRETS.bearer}`,
    "private-token": SECRETS.pat,
    "job-token": SECRETS.job,
    "deploy-token": SECRETS.deploy,
    "cf-access-client-secret": SECRETS.access,
    "cf-access-client-id": SECRETS.accessId,
    cookie: `_gitlab_session=${SECRETS.session}; remember_user_token=${SECRETS.otherCookie}`,
    "user-agent": "tail-test/1.0",
  };
}

/**
 * The Sentry stand-in on a free loopback port: `ok` answers 200 like
 * Sentry; `hang` accepts each request and never answers (until close).
 */
async function startReceiver(mode = "ok") {
  const received = [];
  const hanging = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const raw = Buffer.concat(chunks).toString("utf8");
      received.push({ method: req.method, url: req.url, headers: req.headers, raw, ...parseEnvelope(raw) });
      if (mode === "hang") return void hanging.push(res);
      if (mode.redirectTo) {
        res.writeHead(307, { location: mode.redirectTo });
        return void res.end();
      }
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ id: "ok" }));
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  return {
    port,
    dsn: `http://${KEY}@127.0.0.1:${port}/${PROJECT}`,
    received,
    hanging,
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

/** An envelope's three lines: its header, the item's header, the event. */
function parseEnvelope(raw) {
  const [header, item, payload] = raw.split("\n");
  try {
    return { header: JSON.parse(header), item: JSON.parse(item), payload, event: JSON.parse(payload) };
  } catch {
    return { header: null, item: null, payload, event: null };
  }
}

/** The router's legacy cell: answers every request with its path. */
async function startUpstream() {
  // Answers once the request's body has come whole (an aborted upload: never).
  const server = http.createServer((req, res) => {
    req.on("error", () => {});
    req.on("end", () => res.end(`upstream ${req.url.split("?")[0]}`));
    req.resume();
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { addr: `127.0.0.1:${server.address().port}`, close: () => new Promise((resolve) => server.close(resolve)) };
}

/** The tail worker as Miniflare runs it, sending to `dsn` (unset: no DSN). */
function tailWorker(dsn, vars = {}) {
  return {
    name: "tail",
    modules: true,
    scriptPath: TAIL_SCRIPT,
    ...TAIL_RUNTIME,
    bindings: { SENTRY_ENVIRONMENT: "e2e", ...(dsn ? { SENTRY_DSN: dsn } : {}), ...vars },
  };
}

/**
 * The built router (build/) tailed by the tail worker: router 0 with the
 * session_prefix ruleset and no Topology Service (a session request is a
 * failed classification: an `error` field, answered by the legacy cell),
 * router 1 with a ruleset that does not exist (an error-level `config`
 * line), and `thrower`, a worker that throws. `build`: the router's build
 * directory (the test build has the panic probe).
 */
async function startTailedRouter(dsn, { tailVars = {}, control = false, build = "build" } = {}) {
  const upstream = await startUpstream();
  const noService = await freePort();
  const logs = [];
  const tails = { tails: ["tail"] };
  const vars = {
    GITLAB_RULES_CONFIG: "session_prefix",
    GITLAB_TOPOLOGY_SERVICE_URL: `http://127.0.0.1:${noService}`,
    GITLAB_PROXY_HOST: upstream.addr,
    GITLAB_UPSTREAM_SCHEME: "http",
    GITLAB_ALLOWED_UPSTREAMS: upstream.addr,
    GITLAB_TOPOLOGY_TIMEOUT_MS: "300",
    GITLAB_ROUTER_SIGNING_KEY: randomBytes(32).toString("base64"),
  };
  const thrower = {
    name: "thrower",
    modules: true,
    ...runtime(),
    // The path in the message when there is one: each marker its own fingerprint.
    script: `export default { async fetch(req) {
  const path = new URL(req.url).pathname;
  throw new Error(\`thrown on purpose\${path === "/" ? "" : \` at \${path}\`} with ${SECRETS.pat} in it\`);
} }`,
    unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }],
    ...tails,
  };
  let mf;
  try {
    mf = await startRouter(vars, logs, {
      routers: 2,
      routerOptions: [tails, tails],
      routerVars: [{}, { GITLAB_RULES_CONFIG: "no_such_ruleset" }],
      extraWorkers: [tailWorker(dsn, tailVars), thrower],
      control,
      build,
    });
  } catch (e) {
    await upstream.close();
    throw e;
  }
  const url = async (name) => (await mf.unsafeGetDirectURL(name)).toString().replace(/\/$/, "");
  return {
    mf,
    logs,
    router: await url("router"),
    badRuleset: await url("router-1"),
    thrower: await url("thrower"),
    stop: async () => {
      await mf.dispose();
      await upstream.close();
    },
  };
}

/** A request the router fails to classify (the session's cell is asked of a service that is not there). */
const failingRequest = (stack, path = "/dashboard") => request(`${stack.router}${path}`, { headers: { cookie: `_gitlab_session=${SECRETS.session}` } });

function assertNoSecrets(text, what) {
  for (const [name, secret] of Object.entries(SECRETS)) assert.ok(!text.includes(secret), `${what} carries the ${name} secret: ${text}`);
  assert.ok(!text.includes(HEX32), `${what} carries the session id`);
}

describe("the tail worker in workerd, tailing the built router", () => {
  let receiver;
  let stack;
  before(async () => {
    receiver = await startReceiver("ok");
    stack = await startTailedRouter(receiver.dsn, { control: true });
    const kv = await stack.mf.getKVNamespace("ROUTER_CONTROL", "router");
    await kv.put("control", JSON.stringify({ request_log: "all" }));
  });
  after(async () => {
    await stack?.stop();
    await receiver?.close();
  });

  test("an error-level router line arrives; info lines and routine request lines do not", async () => {
    // The router's first request: it reads the control document (written
    // before it started) and writes an info line, "control document applied".
    const from = receiver.received.length;
    const routine = await request(`${stack.router}/explore`);
    assert.equal(routine.status, 200);
    await eventually(() => assert.ok(stack.logs.some((l) => l.includes('"level":"info"') && l.includes("control document applied")), "the routine invocation wrote an info line"));
    // The marker: an error-level line, from the router whose ruleset does not exist.
    const marker = await request(`${stack.badRuleset}/explore`);
    assert.equal(marker.status, 200, "every request goes to the legacy cell");
    await eventually(() => assert.ok(receiver.received.slice(from).some((r) => r.event?.tags?.scope === "config")));
    const sent = receiver.received.slice(from).map((r) => r.event);
    assert.deepEqual(
      sent.map((e) => [e.level, e.tags.scope, e.message.formatted.split(" names ")[0]]),
      [["error", "config", 'config: GITLAB_RULES_CONFIG="no_such_ruleset"']],
      JSON.stringify(sent, null, 1),
    );
  });

  test("a failed request's line arrives as one Sentry envelope: the DSN's key, the event, none of the request's secrets", async () => {
    const from = receiver.received.length;
    const path = `/api/v4/projects/${SECRETS.pathToken}/issues?private_token=${SECRETS.query}&access_token=${SECRETS.queryAccess}&page=2`;
    const res = await request(`${stack.router}${path}`, { headers: secretHeaders() });
    assert.equal(res.status, 200, res.text);
    assert.match(res.text, /^upstream \/api\/v4\/projects\//, "the legacy cell answered");
    const [got] = await eventually(() => {
      const mine = receiver.received.slice(from);
      assert.equal(mine.length, 1, "one envelope");
      return mine;
    });
    assert.equal(got.method, "POST");
    assert.equal(got.url, `/api/${PROJECT}/envelope/`);
    assert.equal(got.headers["x-sentry-auth"], AUTH);
    assert.equal(got.headers["content-type"], "application/x-sentry-envelope");
    assert.match(got.header.event_id, /^[0-9a-f]{32}$/);
    assert.equal(got.header.event_id, got.event.event_id, "the envelope header names its event");
    assert.deepEqual([got.item.type, got.item.length], ["event", Buffer.byteLength(got.payload)]);
    assert.ok(!("dsn" in got.header), "the DSN is not repeated in the envelope");
    const e = got.event;
    assert.equal(e.level, "error");
    assert.equal(e.environment, "e2e");
    assert.match(e.message.formatted, /^GET request failed: topology service unreachable/);
    assert.equal(e.tags.rule, "session_cookie");
    assert.equal(e.tags.cache, "fallback");
    assert.equal(e.tags.status, "200");
    assert.equal(e.extra.line.error, e.message.formatted.replace("GET request failed: ", ""));
    assert.match(e.extra.line.traceparent, /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/, "the trace id is kept (it is no secret)");
    assert.equal(e.request.method, "GET");
    assert.ok(!e.request.url.includes("page=2"), `the query string is cut: ${e.request.url}`);
    assert.deepEqual(Object.keys(e.request.headers).filter((h) => !SENT_HEADERS.includes(h)), [], "only allow-listed headers");
    assert.equal(e.request.headers["user-agent"], "tail-test/1.0");
    assert.ok(e.extra.line.path.startsWith("/api/v4/projects/"), e.extra.line.path);
    assertNoSecrets(got.raw, "the envelope");
    assertNoSecrets(JSON.stringify(got.headers), "the envelope's headers");
  });

  test("an aborted upload is the client's: its line says error_level warn, and nothing of it reaches Sentry", async () => {
    const from = receiver.received.length;
    const logsFrom = stack.logs.length;
    await new Promise((resolve) => {
      const req = http.request(`${stack.router}/api/v4/projects/1/uploads`, { method: "PUT", headers: { "content-length": "100000" } });
      req.on("error", () => {});
      req.write("x".repeat(1000));
      setTimeout(() => {
        req.destroy();
        resolve();
      }, 200);
    });
    const line = await eventually(() => {
      const found = stack.logs.slice(logsFrom).find((l) => l.includes('"method":"PUT"') && l.includes('"error"'));
      assert.ok(found, stack.logs.slice(logsFrom).join("\n"));
      return JSON.parse(found.slice(found.indexOf("{")));
    }, 5000);
    assert.equal(line.error_level, "warn", JSON.stringify(line));
    assert.match(line.error, /the client's upload or the cell/);
    // A marker after it: once the marker's event is in, the upload's would be too.
    await request(`${stack.thrower}/upload-marker`);
    await eventually(() => assert.ok(receiver.received.slice(from).some((r) => r.event?.exception?.values[0].value.includes("at /upload-marker"))));
    const sent = receiver.received.slice(from).map((r) => r.event.message?.formatted ?? "");
    assert.deepEqual(sent.filter((m) => m.startsWith("PUT")), [], sent.join("\n"));
  });

  test("an uncaught exception arrives as an exception event, its message scrubbed", async () => {
    const from = receiver.received.length;
    const res = await request(`${stack.thrower}/`);
    assert.equal(res.status, 500);
    const [got] = await eventually(() => {
      const mine = receiver.received.slice(from).filter((r) => r.event?.exception);
      assert.equal(mine.length, 1);
      return mine;
    });
    const [ex] = got.event.exception.values;
    assert.equal(ex.type, "Error");
    assert.equal(ex.value, "thrown on purpose with [redacted] in it");
    assert.deepEqual(ex.mechanism, { type: "cloudflare-tail", handled: false });
    assert.equal(got.event.tags.outcome, "exception");
    assertNoSecrets(got.raw, "the exception's envelope");
  });
});

describe("a Rust panic in the router (the test build's panic probe)", () => {
  before(() => buildTestWorker());

  test("arrives as its panic message, the restart line and the router's internal-error line; the request got its 502", async () => {
    const receiver = await startReceiver("ok");
    const stack = await startTailedRouter(receiver.dsn, { build: TEST_BUILD });
    try {
      const res = await request(`${stack.router}/__panic_probe__/sync`);
      assert.equal(res.status, 502, res.text);
      const messages = await eventually(() => {
        const got = receiver.received.map((r) => r.event.message?.formatted ?? "");
        assert.ok(got.some((m) => m.startsWith("wasm: Rust panic: restarting the wasm instance")), got.join("\n"));
        assert.ok(got.some((m) => m.includes("panic probe: routeSync")), got.join("\n"));
        assert.ok(got.some((m) => m.startsWith("router: internal error")), got.join("\n"));
        return got;
      });
      assert.ok(messages.every((m) => m !== ""), "every event says what happened");
      for (const r of receiver.received) assert.equal(r.event.level, "error");
    } finally {
      await stack.stop();
      await receiver.close();
    }
  });
});

describe("Sentry down or hanging: the router answers as before", () => {
  test("the receiver's port closed: every request answered by the legacy cell; the tail says what it could not send", async () => {
    const closed = await freePort();
    const stack = await startTailedRouter(`http://${KEY}@127.0.0.1:${closed}/${PROJECT}`);
    try {
      for (const path of ["/a", "/b", "/c"]) {
        const res = await failingRequest(stack, path);
        assert.equal(res.status, 200, res.text);
        assert.equal(res.text, `upstream ${path}`);
      }
      await eventually(() => assert.ok(stack.logs.some((l) => l.includes('"scope":"tail"') && l.includes("error reports not delivered to Sentry")), stack.logs.join("\n")));
    } finally {
      await stack.stop();
    }
  });

  test("the receiver accepts and never answers: requests are answered while the tail's sends wait, and it gives up at its timeout", async () => {
    const receiver = await startReceiver("hang");
    const stack = await startTailedRouter(receiver.dsn, { tailVars: { SENTRY_TIMEOUT_MS: "1500" } });
    try {
      const first = await failingRequest(stack, "/first");
      assert.equal(first.status, 200);
      // The tail worker's send for /first is now held open by the receiver.
      await eventually(() => assert.equal(receiver.hanging.length, 1));
      for (const path of ["/second", "/third"]) {
        const res = await failingRequest(stack, path);
        assert.equal(res.status, 200, res.text);
        assert.equal(res.text, `upstream ${path}`);
        assert.ok(receiver.hanging.some((r) => !r.writableEnded), "answered while a send still hangs");
      }
      await eventually(() => assert.ok(stack.logs.some((l) => l.includes("not delivered to Sentry: timed out after 1500 ms")), stack.logs.join("\n")), 6000);
    } finally {
      await stack.stop();
      await receiver.close();
    }
  });
});

/**
 * A worker in workerd that hands the POSTed events to the tail worker's
 * `tail` handler and answers once it has finished (its sends done).
 */
async function startTailHandler(dsn, vars = {}) {
  const logs = [];
  const mf = new Miniflare({
    host: "127.0.0.1",
    port: 0,
    workers: [
      {
        ...tailWorker(dsn, vars),
        name: "tail-handler",
        scriptPath: join(ROOT, "tail-worker", "__handler_test.mjs"),
        script: `import worker from "./index.mjs";
export default { async fetch(req, env) { await worker.tail(await req.json(), env); return new Response("done"); } };`,
      },
    ],
    handleRuntimeStdio(stdout, stderr) {
      for (const s of [stdout, stderr]) s.on("data", (d) => logs.push(...String(d).split("\n").filter(Boolean)));
    },
  });
  await mf.ready;
  return { logs, tail: (events) => mf.dispatchFetch("http://tail/", { method: "POST", body: JSON.stringify(events) }).then((r) => r.text()), stop: () => mf.dispose() };
}

/** A word for `i` without digits (a fingerprint makes numbers alike): xa, xb, …, xba. */
function word(i) {
  let letters = "";
  for (let n = i; n >= 0; n = Math.floor(n / 26) - 1) letters = String.fromCharCode(97 + (n % 26)) + letters;
  return `x${letters}`;
}

/** A TraceItem as workerd hands it over, with `logs` as the router writes them. */
function traceItem({ lines = [], outcome = "ok", exceptions = [] } = {}) {
  return {
    outcome,
    scriptName: "gitlab-http-router-staging",
    scriptVersion: { id: "7e57ab1e-0000-4000-8000-000000000001" },
    eventTimestamp: Date.now(),
    exceptions,
    logs: lines.map(([level, value]) => ({ level, timestamp: Date.now(), message: [typeof value === "string" ? value : JSON.stringify(value)] })),
    event: { request: { url: `https://gitlab.com/x?private_token=${SECRETS.query}`, method: "GET", headers: secretHeaders() } },
  };
}

describe("the tail handler in workerd, given batches", () => {
  test("one event per fingerprint, then at most 20 a batch: 45 failures, 30 repeats of three of them and a bad outcome make 19 events and one counting 27 more", async () => {
    const receiver = await startReceiver("ok");
    const handler = await startTailHandler(receiver.dsn);
    try {
      const failure = (i, ms) => traceItem({ lines: [["error", { level: "error", scope: "resolver", message: `failure ${word(i)} after ${ms} ms` }]] });
      const batch = [];
      for (let i = 0; i < 45; i++) batch.push(failure(i, i));
      // The same failures again, their numbers different: still the same fingerprint.
      for (let i = 0; i < 30; i++) batch.push(failure(i % 3, 1000 + i));
      batch.push(traceItem({ outcome: "exceededCpu" }));
      assert.equal(await handler.tail(batch), "done");
      // The handler has finished: every send it made has been answered (the
      // sends run at once, so they arrive in any order).
      const events = receiver.received.map((r) => r.event);
      assert.equal(events.length, 20, JSON.stringify(events.map((e) => e.message?.formatted)));
      const summary = events.find((e) => e.level === "warning");
      const others = events.filter((e) => e !== summary);
      assert.deepEqual(others.map((e) => e.message.formatted).sort(), Array.from({ length: 19 }, (_, i) => `resolver: failure ${word(i)} after ${i} ms`).sort(), "the first 19");
      assert.deepEqual(
        others.filter((e) => e.extra?.repeats).map((e) => [e.message.formatted, e.extra.repeats]).sort(),
        [0, 1, 2].map((i) => [`resolver: failure ${word(i)} after ${i} ms`, 10]),
        "each of the three stands for its ten repeats",
      );
      assert.deepEqual(summary.extra, { dropped: 27, limit: 20 });
      assert.match(summary.message.formatted, /^27 more error events/);
      assert.equal(summary.release, "7e57ab1e-0000-4000-8000-000000000001");
      for (const r of receiver.received) assertNoSecrets(r.raw, "an envelope");
    } finally {
      await handler.stop();
      await receiver.close();
    }
  });

  test("at most SENTRY_MAX_EVENTS_PER_MINUTE a minute per isolate, a fingerprint once a minute; one warning says what is held back", async () => {
    const receiver = await startReceiver("ok");
    const handler = await startTailHandler(receiver.dsn, { SENTRY_MAX_EVENTS_PER_MINUTE: "5" });
    try {
      const failures = (...names) => names.map((n) => traceItem({ lines: [["error", { level: "error", scope: "resolver", message: `failure ${n}` }]] }));
      const messages = () => receiver.received.map((r) => r.event.message.formatted);
      await handler.tail(failures("xa", "xb", "xc"));
      assert.equal(receiver.received.length, 3);
      // xa again (sent this minute), two new ones within the budget, xf over it.
      await handler.tail(failures("xa", "xd", "xe", "xf"));
      // (The sends of a batch run at once: they arrive in any order.)
      const second = receiver.received.slice(3).map((r) => r.event);
      assert.deepEqual(second.filter((e) => e.level === "error").map((e) => e.message.formatted).sort(), ["resolver: failure xd", "resolver: failure xe"]);
      const [warning, ...more] = second.filter((e) => e.level !== "error");
      assert.deepEqual(more, []);
      assert.equal(warning.level, "warning");
      assert.match(warning.message.formatted, /^error events over 5 a minute in one tail worker isolate are held back until .* \(2 so far\)$/);
      assert.deepEqual(warning.extra, { held: 2, limit_per_minute: 5 });
      // The window is spent and the warning said: nothing more this minute.
      await handler.tail(failures("xg", "xa"));
      assert.equal(receiver.received.length, 6, messages().join("\n"));
    } finally {
      await handler.stop();
      await receiver.close();
    }
  });

  test("what a client causes is not sent: a line marked error_level warn, a failed request whose client went away", async () => {
    const receiver = await startReceiver("ok");
    const handler = await startTailHandler(receiver.dsn);
    try {
      const request = { ruleset: "cells", method: "PUT", path: "/x", rule: null, action: "proxy", status: 502, duration_ms: 3 };
      const upload = { ...request, error_level: "warn", error: "upstream fetch failed (the client's upload or the cell; not counted against the cell): Network connection lost." };
      await handler.tail([
        traceItem({ lines: [["log", upload], ["log", { ...request, method: "GET", error: "upstream fetch failed: refused" }]] }),
        traceItem({ outcome: "canceled", lines: [["log", { ...request, error: "topology service timed out after 300 ms" }], ["error", { level: "error", scope: "resolver", message: "the router's own" }]] }),
        traceItem({ outcome: "responseStreamDisconnected", lines: [["log", { ...request, error: "upstream fetch failed: gone" }]] }),
      ]);
      const sent = receiver.received.map((r) => r.event.message.formatted);
      assert.deepEqual(sent.sort(), ["GET request failed: upstream fetch failed: refused", "resolver: the router's own"]);
    } finally {
      await handler.stop();
      await receiver.close();
    }
  });

  test("Sentry answering a redirect: it is not followed, and the send counts as failed", async () => {
    const elsewhere = await startReceiver("ok");
    const receiver = await startReceiver({ redirectTo: `http://127.0.0.1:${elsewhere.port}/api/${PROJECT}/envelope/` });
    const handler = await startTailHandler(receiver.dsn);
    try {
      await handler.tail([traceItem({ lines: [["error", { level: "error", scope: "config", message: "x" }]] })]);
      assert.equal(receiver.received.length, 1);
      assert.deepEqual(elsewhere.received, [], "nothing sent where the redirect pointed");
      await eventually(() => assert.ok(handler.logs.some((l) => l.includes("1 of 1 error reports not delivered to Sentry: answered 307, a redirect (not followed)")), handler.logs.join("\n")));
    } finally {
      await handler.stop();
      await receiver.close();
      await elsewhere.close();
    }
  });

  test("an http: DSN to a host that is not loopback is refused, with a line that says so: nothing is sent", async () => {
    const receiver = await startReceiver("ok");
    // 0.0.0.0 reaches this machine's receiver, but is no loopback address.
    const handler = await startTailHandler(`http://${KEY}@0.0.0.0:${receiver.port}/${PROJECT}`);
    try {
      await handler.tail([traceItem({ lines: [["error", { level: "error", scope: "config", message: "x" }]] })]);
      assert.deepEqual(receiver.received, []);
      await eventually(() => assert.ok(handler.logs.some((l) => l.includes(`SENTRY_DSN is refused: http://0.0.0.0:${receiver.port} is not a loopback host`)), handler.logs.join("\n")));
    } finally {
      await handler.stop();
      await receiver.close();
    }
  });

  test("what is an error: error lines, failed request lines, console.error text, exceptions, a bad outcome; not info, warn or routine lines", async () => {
    const receiver = await startReceiver("ok");
    const handler = await startTailHandler(receiver.dsn);
    try {
      const request = { ruleset: "cells", method: "POST", path: "/x", rule: "r", action: "classify", status: 200, duration_ms: 3 };
      await handler.tail([
        traceItem({
          lines: [
            ["log", { level: "info", scope: "control", message: "control document applied" }],
            ["error", { level: "warn", scope: "resolver", message: "a warning" }],
            ["log", request],
            ["log", { ...request, status: 502, error: "upstream fetch failed: refused" }],
            ["error", { level: "error", scope: "wasm", message: "Rust panic: restarting the wasm instance" }],
            ["error", "panicked at src/lib.rs:1:1: probe"],
            ["log", "plain text, not an error"],
          ],
        }),
        traceItem({ outcome: "exceededMemory" }),
        traceItem({ outcome: "canceled" }),
        traceItem({ outcome: "exception", exceptions: [{ name: "TypeError", message: "x is undefined", timestamp: Date.now() }] }),
      ]);
      // The sends run at once: they arrive in any order.
      const sent = receiver.received.map((r) => r.event.message?.formatted ?? `${r.event.exception.values[0].type}: ${r.event.exception.values[0].value}`);
      assert.deepEqual(sent.sort(), [
        "POST request failed: upstream fetch failed: refused",
        "wasm: Rust panic: restarting the wasm instance",
        "panicked at src/lib.rs:1:1: probe",
        "invocation ended with outcome exceededMemory",
        "TypeError: x is undefined",
      ].sort());
    } finally {
      await handler.stop();
      await receiver.close();
    }
  });

  test("no SENTRY_DSN: nothing is sent, and the tail says so once", async () => {
    const handler = await startTailHandler(undefined);
    try {
      for (let i = 0; i < 3; i++) await handler.tail([traceItem({ lines: [["error", { level: "error", scope: "config", message: "x" }]] })]);
      assert.equal(handler.logs.filter((l) => l.includes("SENTRY_DSN is not set")).length, 1, handler.logs.join("\n"));
    } finally {
      await handler.stop();
    }
  });
});

describe("the tail handler's CPU (index.mjs in this process, process.cpuUsage around tail())", () => {
  test("20 events with 16 KiB strings (path, User-Agent, Accept) take well under a second of CPU", async () => {
    const receiver = await startReceiver("ok");
    try {
      // A fresh module: its minute window is its own.
      const { default: worker } = await import(`${pathToFileURL(TAIL_SCRIPT)}?cpu`);
      const long = "a".repeat(16 * 1024);
      const batch = Array.from({ length: 20 }, (_, i) => ({
        ...traceItem({ lines: [["log", { ruleset: "cells", method: "GET", path: `/${long}`, rule: null, action: "proxy", status: 502, duration_ms: 3, error: `upstream fetch failed: ${word(i)}` }]] }),
        event: { request: { url: `https://gitlab.com/${long}`, method: "GET", headers: { "user-agent": long, accept: long } } },
      }));
      const env = { SENTRY_DSN: receiver.dsn, SENTRY_ENVIRONMENT: "e2e" };
      const before = process.cpuUsage();
      await worker.tail(batch, env);
      const used = process.cpuUsage(before);
      const ms = (used.user + used.system) / 1000;
      process.stdout.write(`# tail handler, 20 events with 16 KiB strings: ${ms.toFixed(1)} ms of CPU\n`);
      assert.equal(receiver.received.length, 20);
      for (const { event } of receiver.received) {
        for (const text of [event.request.url, event.request.headers["user-agent"], event.request.headers.accept, event.extra.line.path]) {
          assert.ok(text.length <= MAX_TEXT + 1 && text.endsWith("…"), `cut: ${text.length}`);
        }
      }
      assert.ok(ms < 300, `${ms} ms of CPU`);
    } finally {
      await receiver.close();
    }
  });
});

describe("scrubbing (tail-worker/scrub.mjs)", () => {
  test("credentials in text are replaced, whatever their form", () => {
    const cases = [
      [`Authorization: Bearer ${SECRETS.bearer}`, "Authorization: [redacted]"],
      [`failed: PRIVATE-TOKEN: ${SECRETS.pat}`, "failed: PRIVATE-TOKEN: [redacted]"],
      [`job-token: ${SECRETS.job}`, "job-token: [redacted]"],
      [`CF-Access-Client-Secret: ${SECRETS.access}`, "CF-Access-Client-Secret: [redacted]"],
      [`cookie _gitlab_session=${SECRETS.session}; theme=dark`, "cookie _gitlab_session=[redacted]; theme=dark"],
      [`GET /x?private_token=${SECRETS.query}&access_token=${SECRETS.queryAccess}&page=2`, "GET /x?private_token=[redacted]&access_token=[redacted]&page=2"],
      [`{"private_token":"${SECRETS.query}","page":"2"}`, '{"private_token":"[redacted]","page":"2"}'],
      [`token ${SECRETS.pathToken} used`, "token [redacted] used"],
      ["acme-glpat-abcDEF123.01.0123456789 expired", "acme-[redacted] expired"],
      [`the deploy token ${SECRETS.deploy}`, "the deploy token [redacted]"],
      ["Basic dXNlcjpwYXNzd29yZA==", "Basic [redacted]"],
      ["jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", "jwt [redacted]"],
      ["https://user:hunter2@cell-2.example/x", "https://[redacted]@cell-2.example/x"],
      [`session ${HEX32}`, "session [redacted]"],
    ];
    for (const [input, want] of cases) assert.equal(scrubText(input), want, input);
  });

  test("the router's own words are left alone", () => {
    for (const text of [
      "topology service timed out after 300 ms",
      "cell 3 (cell-3.cells.gitlab.net) unavailable: circuit open (its requests failed)",
      'GITLAB_RULES_CONFIG="nope" names no compiled ruleset',
      "the topology service answered 404 for SESSION_PREFIX \"cell-2\", a cell GITLAB_CELLS lists",
    ]) {
      assert.equal(scrubText(text), text);
    }
  });

  test("URLs lose their query strings and user info; headers go by the allow-list; secret-named keys are replaced whole", () => {
    assert.equal(stripUrl(`https://gitlab.com/a/b?private_token=${SECRETS.query}#frag`), "https://gitlab.com/a/b?[redacted]");
    assert.equal(stripUrl("/a/b?x=1"), "/a/b?[redacted]");
    assert.equal(stripUrl("https://u:p@gitlab.com/a"), "https://gitlab.com/a");
    assert.deepEqual(sentHeaders({ ...secretHeaders(), "content-type": "text/plain" }), { "user-agent": "tail-test/1.0", "content-type": "text/plain" });
    const trace = `00-${HEX32}-0123456789abcdef-01`;
    assert.deepEqual(scrubValue({ access_token: "x", nested: { password: "y", note: `a ${SECRETS.pat}` }, traceparent: trace, path: "/p?q=1" }), {
      access_token: "[redacted]",
      nested: { password: "[redacted]", note: "a [redacted]" },
      traceparent: trace,
      path: "/p?[redacted]",
    });
  });

  test("a long message is cut: a secret across the cut leaves nothing of itself", () => {
    const text = `${"x".repeat(1995)} ${SECRETS.pat}`;
    const [event] = itemReports({ outcome: "ok", logs: [{ level: "error", timestamp: 1, message: [text] }] });
    assert.equal(event.message.formatted, `${"x".repeat(1995)} [red…`);
    assert.ok(!event.message.formatted.includes("glpat-Pri"));
  });

  test("cut before scrubbing: a secret within the margin is recognised whole; one the margin cuts in two never moves before the cut", () => {
    // A 64-hex secret from 1990 on: its tail is past the cut, all of it is recognised.
    const hex = HEX32 + HEX32;
    const across = scrubText(`${"x".repeat(1989)} ${hex} ${"y".repeat(20_000)}`);
    assert.equal(across, `${"x".repeat(1989)} [redacted]…`);
    // A long secret redacted early shortens the text by 590 characters; the
    // token the margin's end cuts to `glpat-ABCD` (too short to be known as
    // one) would then sit before the cut, were the cut made after scrubbing.
    const fragment = "glpat-ABCDEFGHIJKLMNOP";
    const head = `private_token=${"s".repeat(601)} `;
    const filler = "z ".repeat((MAX_TEXT + TEXT_MARGIN - 10 - head.length) / 2);
    assert.equal(head.length % 2, 0);
    const text = `${head}${filler}${fragment}${"w".repeat(5000)}`;
    assert.equal(text.indexOf(fragment), MAX_TEXT + TEXT_MARGIN - 10);
    const out = scrubText(text);
    assert.ok(out.startsWith("private_token=[redacted] z z"), out.slice(0, 40));
    assert.ok(!out.includes("glpat"), out.slice(-60));
    assert.ok(!out.includes("s".repeat(20)));
    assert.equal(out.length, MAX_TEXT - 601 + "[redacted]".length + 1, "what lay before the cut, the secret shortened, and …");
  });

  test("the DSN: the envelope endpoint and the public key; anything else is no DSN", () => {
    assert.deepEqual(parseDsn("https://abc123@o1.ingest.example/42"), { endpoint: "https://o1.ingest.example/api/42/envelope/", publicKey: "abc123", projectId: "42" });
    assert.deepEqual(parseDsn("https://abc:legacysecret@sentry.example/prefix/7").endpoint, "https://sentry.example/prefix/api/7/envelope/");
    for (const bad of [undefined, "", "not a dsn", "https://sentry.example/42", "https://k@sentry.example/", "ftp://k@h/1", "http://k@sentry.example/42", "http://k@127.0.0.1.example/1", "http://k@0.0.0.0:9/1"]) {
      assert.equal(parseDsn(bad), null, String(bad));
    }
    for (const loopback of ["http://k@127.0.0.1:9000/1", "http://k@127.1.2.3/1", "http://k@[::1]:9000/1", "http://k@localhost:9000/1"]) {
      assert.equal(parseDsn(loopback).endpoint.startsWith("http://"), true, loopback);
      assert.equal(dsnRefusal(loopback), null, loopback);
    }
    assert.match(dsnRefusal("http://k@sentry.example/42"), /^SENTRY_DSN is refused: http:\/\/sentry\.example is not a loopback host/);
  });
});
