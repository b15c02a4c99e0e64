// The foundation through the real worker in workerd: routing by session
// cookie, forwarding headers, header hygiene, redirects, streaming, and
// failing open to the legacy cell.
import { test, before, after, describe } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { startStack, request, waitForLog, waitForOutput, sessionCookie, postJson, HEX32 } from "./harness.mjs";

describe("session_prefix ruleset", () => {
  let stack;
  before(async () => {
    stack = await startStack({ ruleset: "session_prefix" });
  });
  after(() => stack?.stop());

  test("a cell-2 session cookie reaches cell 2 with forwarding and rule headers", async () => {
    const res = await request(`${stack.url}/dashboard/projects?sort=name`, {
      headers: { host: "gitlab.example.com", cookie: `theme=dark; ${sessionCookie(2)}` },
    });
    assert.equal(res.status, 200);
    const echo = res.json();
    assert.equal(echo.cell, "2");
    assert.equal(echo.path, "/dashboard/projects");
    assert.equal(echo.query, "sort=name");
    assert.equal(echo.headers["x-forwarded-host"], "gitlab.example.com");
    assert.equal(echo.headers["x-forwarded-proto"], "http");
    assert.equal(echo.headers["x-gitlab-http-router-rule-action"], "classify");
    assert.equal(echo.headers["x-gitlab-http-router-rule-type"], "SESSION_PREFIX");
    assert.equal(echo.headers.host, stack.cells[2].addr, "the cell sees its own host");
    assert.match(echo.headers.cookie, /_gitlab_session=cell-2-/);
  });

  test("a session cookie with a hex suffix in its name routes too", async () => {
    const res = await request(`${stack.url}/`, { headers: { cookie: sessionCookie(3, "_gitlab_session_4f2a") } });
    assert.equal(res.json().cell, "3");
  });

  test("no cookie, or a legacy cookie without prefix, reaches the legacy cell", async () => {
    for (const cookie of [undefined, `_gitlab_session=${HEX32}`, "_gitlab_session=cell-2-short", "garbage;;=;"]) {
      const res = await request(`${stack.url}/explore`, { headers: cookie ? { cookie } : {} });
      assert.equal(res.status, 200);
      const echo = res.json();
      assert.equal(echo.cell, "1", `cookie ${cookie}`);
      assert.equal(echo.headers["x-gitlab-http-router-rule-action"], "proxy");
      assert.equal(echo.headers["x-gitlab-http-router-rule-type"], undefined);
    }
  });

  test("a session prefix the Topology Service does not know goes to the legacy cell", async () => {
    const res = await request(`${stack.url}/`, { headers: { cookie: sessionCookie(99) } });
    assert.equal(res.status, 200);
    assert.equal(res.json().cell, "1");
  });

  test("client-sent X-Forwarded-Host and router headers never reach a cell", async () => {
    const res = await request(`${stack.url}/`, {
      headers: {
        host: "gitlab.example.com",
        cookie: sessionCookie(2),
        "x-forwarded-host": "evil.example",
        "x-gitlab-http-router-rule-action": "spoofed",
        "x-gitlab-http-router-rule-type": "spoofed",
        "x-gitlab-http-router-anything": "spoofed",
        "cf-access-client-secret": "stolen",
      },
    });
    const echo = res.json();
    assert.equal(echo.headers["x-forwarded-host"], "gitlab.example.com");
    assert.equal(echo.headers["x-gitlab-http-router-rule-action"], "classify");
    assert.equal(echo.headers["x-gitlab-http-router-rule-type"], "SESSION_PREFIX");
    assert.equal(echo.headers["x-gitlab-http-router-anything"], undefined);
    assert.equal(echo.headers["cf-access-client-secret"], undefined);
    assert.doesNotMatch(JSON.stringify(echo.headers), /evil\.example|spoofed|stolen/);
  });

  test("hop-by-hop headers, and those Connection names, are not forwarded", async () => {
    const res = await request(`${stack.url}/`, {
      headers: { connection: "keep-alive, x-hop-secret", "x-hop-secret": "1", "keep-alive": "timeout=5", te: "trailers", "x-end-to-end": "kept" },
    });
    const h = res.json().headers;
    assert.equal(h["x-hop-secret"], undefined);
    assert.equal(h["keep-alive"], undefined);
    assert.equal(h.te, undefined);
    assert.equal(h["x-end-to-end"], "kept");
  });

  test("the usual Connection: keep-alive or close drops the hop-by-hop headers and nothing else", async () => {
    // These take the edge's default drop list (no list of their own in the plan).
    for (const connection of ["keep-alive", "Keep-Alive, close"]) {
      const res = await request(`${stack.url}/`, {
        headers: { connection, "keep-alive": "timeout=5", close: "1", te: "trailers", "x-forwarded-for": "1.2.3.4", "x-end-to-end": "kept" },
      });
      const h = res.json().headers;
      for (const gone of ["keep-alive", "close", "te", "x-forwarded-for"]) assert.equal(h[gone], undefined, `${connection}: ${gone}`);
      assert.equal(h["x-end-to-end"], "kept");
    }
  });

  test("a 302 from a cell comes back as a 302, not followed", async () => {
    const res = await request(`${stack.url}/users/sign_in`, {
      headers: { cookie: sessionCookie(2), "x-demo-status": "302", "x-demo-location": "https://gitlab.example.com/users/sign_in?redirect=1" },
    });
    assert.equal(res.status, 302);
    assert.equal(res.headers.location, "https://gitlab.example.com/users/sign_in?redirect=1");
    assert.equal(res.headers["x-demo-cell"], "2");
  });

  test("methods and request bodies pass through", async () => {
    const body = JSON.stringify({ title: "hello" });
    const res = await request(`${stack.url}/api/v4/projects/1/issues`, {
      method: "PUT",
      headers: { cookie: sessionCookie(2), "content-type": "application/json" },
      body,
    });
    const echo = res.json();
    assert.equal(echo.method, "PUT");
    assert.equal(echo.body_bytes, body.length);
    assert.equal(echo.body_sha256, createHash("sha256").update(body).digest("hex"));
  });

  test("a 512 MiB upload streams through with the right sha256", { timeout: 300_000 }, async () => {
    const total = 512 * 1024 * 1024;
    const chunk = Buffer.alloc(1024 * 1024);
    for (let i = 0; i < chunk.length; i++) chunk[i] = (i * 31 + 7) & 0xff;
    const hash = createHash("sha256");
    async function* body() {
      for (let sent = 0; sent < total; sent += chunk.length) {
        chunk[0] = (sent / chunk.length) & 0xff; // every MiB differs
        hash.update(chunk);
        yield Buffer.from(chunk);
      }
    }
    const res = await request(`${stack.url}/api/v4/projects/1/uploads`, {
      method: "POST",
      headers: { cookie: sessionCookie(2), "content-type": "application/octet-stream" },
      body: body(),
    });
    assert.equal(res.status, 200);
    const echo = res.json();
    assert.equal(echo.cell, "2");
    assert.equal(echo.body_bytes, total);
    assert.equal(echo.body_sha256, hash.digest("hex"));
  });

  test("a 64 MiB download streams back intact", { timeout: 120_000 }, async () => {
    const n = 64 * 1024 * 1024;
    const hash = createHash("sha256");
    let received = 0;
    const res = await request(`${stack.url}/archive.zip`, {
      headers: { cookie: sessionCookie(3), "x-demo-response-bytes": String(n) },
      sink: (c) => {
        received += c.length;
        hash.update(c);
      },
    });
    assert.equal(res.status, 200);
    assert.equal(received, n);
    const expected = createHash("sha256");
    const block = Buffer.alloc(251 * 4096);
    for (let i = 0; i < block.length; i++) block[i] = i % 251;
    let left = n;
    while (left > 0) {
      const take = Math.min(left, block.length);
      expected.update(block.subarray(0, take));
      left -= take;
    }
    assert.equal(hash.digest("hex"), expected.digest("hex"));
  });

  test("a 30 KB cookie with non-ASCII bytes routes from the memory cache as a short one does, and so does the next request", async () => {
    // routeSync's input buffer starts at 4 KiB: this request makes it grow
    // (and wasm memory with it), the next reuses it. é and ÿ are latin-1
    // bytes in a header value: two UTF-8 bytes each in wasm. (Whether
    // routeSync itself answered is checked in glue.test.mjs, with a build
    // whose routeAsync fails.)
    const padding = `pad=${"é".repeat(5_000)}${"x".repeat(20_000)}ÿ`;
    const warm = await request(`${stack.url}/big-cookie/warm`, { headers: { cookie: sessionCookie(2) } });
    assert.equal(warm.json().cell, "2");
    const big = await request(`${stack.url}/big-cookie/big`, {
      headers: { cookie: `${padding}; ${sessionCookie(2)}; after=ÿ` },
    });
    assert.equal(big.status, 200);
    assert.equal(big.json().cell, "2");
    assert.ok(big.json().headers.cookie.length > 25_000, "the whole cookie is forwarded");
    const line = await waitForLog(stack, (l) => l.path === "/big-cookie/big");
    assert.equal(line?.cache, "memory", "answered from the memory cache");
    const next = await request(`${stack.url}/big-cookie/next?x=1`, { headers: { cookie: `a=b; ${sessionCookie(2)}` } });
    assert.equal(next.json().cell, "2");
    assert.equal(next.json().query, "x=1");
    assert.equal((await waitForLog(stack, (l) => l.path === "/big-cookie/next"))?.cache, "memory");
    const legacy = await request(`${stack.url}/big-cookie/legacy`, { headers: { cookie: padding } });
    assert.equal(legacy.json().cell, "1", "no session among the padding");
  });

  test("every request logs one structured line with rule, action and cache level", async () => {
    await request(`${stack.url}/logged`, { headers: { cookie: sessionCookie(2) } });
    const line = await waitForLog(stack, (l) => l.path === "/logged");
    assert.ok(line, "log line present");
    assert.equal(line.rule, "session_cookie");
    assert.equal(line.action, "classify");
    assert.equal(line.classify_type, "SESSION_PREFIX");
    assert.ok(["memory", "cache-api", "service"].includes(line.cache), line.cache);
    assert.equal(line.upstream, stack.cells[2].addr);
    assert.equal(line.status, 200);
  });
});

describe("passthrough ruleset", () => {
  let stack;
  before(async () => {
    stack = await startStack({ ruleset: "passthrough", cellCount: 2 });
  });
  after(() => stack?.stop());

  test("everything goes to the legacy cell, even with a cell-2 session", async () => {
    const res = await request(`${stack.url}/anything?x=1`, { headers: { cookie: sessionCookie(2) } });
    const echo = res.json();
    assert.equal(echo.cell, "1");
    assert.equal(echo.headers["x-gitlab-http-router-rule-action"], "proxy");
    const stats = await (await fetch(`${stack.topology.admin}/_stats`)).json();
    assert.equal(stats.classify_calls, 0);
  });
});

describe("misconfiguration never crashes the worker", () => {
  test("Topology Service down: requests still answered by the legacy cell", async () => {
    const stack = await startStack({ ruleset: "session_prefix" });
    try {
      await postJson(`${stack.topology.admin}/_faults`, { refuse_connections: true });
      const res = await request(`${stack.url}/`, { headers: { cookie: sessionCookie(3, "_gitlab_session_beef") } });
      assert.equal(res.status, 200);
      assert.equal(res.json().cell, "1");
      const line = await waitForLog(stack, (l) => l.rule === "session_cookie");
      assert.ok(line, "a log line names the fallback");
      assert.equal(line.upstream, stack.cells[1].addr);
      assert.equal(line.cache, "fallback");
      assert.match(line.error, /topology service/i);
    } finally {
      await stack.stop();
    }
  });

  test("an unknown ruleset name sends everything to the legacy cell and logs why", async () => {
    const stack = await startStack({ ruleset: "no_such_ruleset", cellCount: 2 });
    try {
      const res = await request(`${stack.url}/`, { headers: { cookie: sessionCookie(2) } });
      assert.equal(res.status, 200);
      assert.equal(res.json().cell, "1");
      const line = await waitForOutput(stack, (l) => l.includes("no_such_ruleset") && l.includes("names no compiled ruleset"));
      assert.ok(line, `log lines: ${stack.logs.join("\n")}`);
    } finally {
      await stack.stop();
    }
  });

  test("a missing legacy cell gives a clear 502, not a crash", async () => {
    const stack = await startStack({ ruleset: "session_prefix", cellCount: 2, vars: { GITLAB_PROXY_HOST: undefined } });
    try {
      const res = await request(`${stack.url}/`);
      assert.equal(res.status, 502);
      assert.match(res.text, /no upstream configured/);
      // A session for a known cell still routes.
      const routed = await request(`${stack.url}/`, { headers: { cookie: sessionCookie(2) } });
      assert.equal(routed.json().cell, "2");
    } finally {
      await stack.stop();
    }
  });

  test("GITLAB_REQUEST_LOG=errors logs only the outcomes that need attention", async () => {
    const stack = await startStack({ ruleset: "session_prefix", cellCount: 2, vars: { GITLAB_REQUEST_LOG: "errors" } });
    try {
      await request(`${stack.url}/routine`, { headers: { cookie: sessionCookie(2) } });
      await postJson(`${stack.topology.admin}/_faults`, { refuse_connections: true });
      await request(`${stack.url}/fell-back`, { headers: { cookie: sessionCookie(3) } });
      const fell = await waitForLog(stack, (l) => l.path === "/fell-back");
      assert.equal(fell?.cache, "fallback");
      assert.equal(await waitForLog(stack, (l) => l.path === "/routine", 200), undefined, "routine requests are not logged");
    } finally {
      await stack.stop();
    }
  });

  test("a cell the allow-list does not name is refused with 502", async () => {
    const stack = await startStack({ ruleset: "session_prefix", cellCount: 2, vars: { GITLAB_ALLOWED_UPSTREAMS: "" } });
    try {
      const res = await request(`${stack.url}/`, { headers: { cookie: sessionCookie(2) } });
      assert.equal(res.status, 502);
      assert.match(res.text, /not allowed/);
      const cell2 = await (await fetch(`${stack.cells[2].url}/_stats`)).json();
      assert.equal(cell2.requests, 0, "nothing reached cell 2");
    } finally {
      await stack.stop();
    }
  });
});
