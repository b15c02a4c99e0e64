// Signed proxied requests through the real worker in workerd, verified by
// the cell-side tool (`rulesctl signature verify`), and the explicit policy
// when the key is missing or malformed.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { join } from "node:path";
import { startStack, request, sessionCookie, waitForOutput, ROOT } from "./harness.mjs";

const RULESCTL = join(ROOT, "target", "debug", "rulesctl");
const SIGNATURE = "x-gitlab-http-router-signature";

function keygen() {
  const out = execFileSync(RULESCTL, ["signature", "keygen"], { encoding: "utf8" });
  const [, secret] = out.match(/^secret: (\S+)$/m);
  const [, pub] = out.match(/^public: (\S+)$/m);
  return { secret, pub };
}

function verify({ pub, audience, method, url, token, extra = [] }) {
  const r = spawnSync(RULESCTL, ["signature", "verify", "--public-key", pub, "--audience", audience, "--method", method, "--url", url, ...extra, token], { encoding: "utf8" });
  return { code: r.status, claims: r.status === 0 ? JSON.parse(r.stdout) : null, stderr: r.stderr };
}

describe("signed proxied requests", () => {
  const key = keygen();
  let stack;
  before(async () => {
    stack = await startStack({ vars: { GITLAB_ROUTER_SIGNING_KEY: key.secret, GITLAB_ROUTER_SIGNING_POLICY: "required", GITLAB_ROUTER_SIGNATURE_TTL_SECONDS: "30" } });
  });
  after(() => stack?.stop());

  test("every proxied request carries a signature the cell can verify", async () => {
    const echo = (await request(`${stack.url}/api/v4/projects?page=2`, { method: "POST", headers: { cookie: sessionCookie(2), [SIGNATURE]: "forged-by-client" } })).json();
    assert.equal(echo.cell, "2");
    const token = echo.headers[SIGNATURE];
    assert.ok(token && token !== "forged-by-client", "the router's own signature replaces the client's");
    // The cell passes the Content-Length it received (Node sends 0 for a
    // POST without a body): it is signed when present.
    const received = echo.headers["content-length"] === undefined ? [] : ["--content-length", echo.headers["content-length"]];
    const ok = verify({ pub: key.pub, audience: stack.cells[2].addr, method: "POST", url: "/api/v4/projects?page=2", token, extra: received });
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal(ok.claims.rule, "session_cookie");
    assert.equal(ok.claims.typ, "SESSION_PREFIX");
    assert.equal(ok.claims.iss, "gitlab-http-router");
    assert.equal(ok.claims.mth, "POST");
    assert.ok(ok.claims.exp - ok.claims.iat === 30, `ttl ${ok.claims.exp - ok.claims.iat}`);

    for (const [what, bad] of [
      ["another cell", { audience: stack.cells[3].addr }],
      ["another path", { url: "/api/v4/users?page=2" }],
      ["another query", { url: "/api/v4/projects?page=3" }],
      ["another method", { method: "DELETE" }],
      ["another key", { pub: keygen().pub }],
    ]) {
      const r = verify({ pub: key.pub, audience: stack.cells[2].addr, method: "POST", url: "/api/v4/projects?page=2", token, extra: received, ...bad });
      assert.equal(r.code, 1, `${what} must be refused`);
      assert.match(r.stderr, /signature refused/);
    }
  });

  test("Content-Length and Content-Type are signed when present; a 10^8 s token or another issuer is refused", async () => {
    const body = JSON.stringify({ name: "x" });
    const echo = (await request(`${stack.url}/api/v4/projects`, { method: "POST", headers: { cookie: sessionCookie(2), "content-type": "application/json", "content-length": String(body.length) }, body })).json();
    const token = echo.headers[SIGNATURE];
    const base = { pub: key.pub, audience: stack.cells[2].addr, method: "POST", url: "/api/v4/projects", token };
    const received = ["--content-length", echo.headers["content-length"], "--content-type", echo.headers["content-type"]];
    assert.equal(echo.headers["content-type"], "application/json");
    const ok = verify({ ...base, extra: received });
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal(ok.claims.cty, "application/json");
    assert.equal(ok.claims.cl, String(body.length));
    for (const [what, extra] of [
      ["another content type", ["--content-length", echo.headers["content-length"], "--content-type", "text/plain"]],
      ["no content type", ["--content-length", echo.headers["content-length"]]],
      ["another length", ["--content-length", "999", "--content-type", "application/json"]],
      ["another issuer", [...received, "--issuer", "someone-else"]],
      ["a lifetime cap below the router's TTL", [...received, "--max-lifetime", "10"]],
    ]) {
      const r = verify({ ...base, extra });
      assert.equal(r.code, 1, `${what} must be refused`);
      assert.match(r.stderr, /signature refused/);
    }
  });

  test("the legacy cell's requests are signed too, each with its own id", async () => {
    const a = (await request(`${stack.url}/explore`)).json();
    const b = (await request(`${stack.url}/explore`)).json();
    assert.equal(a.cell, "1");
    const ca = verify({ pub: key.pub, audience: stack.cells[1].addr, method: "GET", url: "/explore", token: a.headers[SIGNATURE] });
    const cb = verify({ pub: key.pub, audience: stack.cells[1].addr, method: "GET", url: "/explore", token: b.headers[SIGNATURE] });
    assert.equal(ca.code, 0, ca.stderr);
    assert.equal(ca.claims.rule, "legacy");
    assert.equal(ca.claims.typ, undefined);
    assert.notEqual(ca.claims.jti, cb.claims.jti);
    for (const jti of [ca.claims.jti, cb.claims.jti]) {
      assert.match(jti, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/, "a v4 UUID");
      assert.ok(!a.headers["x-request-id"].includes(jti) && !b.headers["x-request-id"].includes(jti), "not the request id");
    }
  });
});

describe("signing policy", () => {
  test("required without a key: a clear 503 and nothing reaches a cell", async () => {
    const stack = await startStack({ cellCount: 2, vars: { GITLAB_ROUTER_SIGNING_POLICY: "required" } });
    try {
      const res = await request(`${stack.url}/`, { headers: { cookie: sessionCookie(2) } });
      assert.equal(res.status, 503);
      assert.match(res.text, /signing unavailable/);
      for (const id of [1, 2]) assert.equal((await (await fetch(`${stack.cells[id].url}/_stats`)).json()).requests, 0);
      assert.ok(await waitForOutput(stack, (l) => l.includes("GITLAB_ROUTER_SIGNING_KEY: not set, but GITLAB_ROUTER_SIGNING_POLICY is required")));
    } finally {
      await stack.stop();
    }
  });

  test("optional with a malformed key: forwarded unsigned, and the key error is logged", async () => {
    const stack = await startStack({ cellCount: 2, vars: { GITLAB_ROUTER_SIGNING_POLICY: "optional", GITLAB_ROUTER_SIGNING_KEY: "not-a-key" } });
    try {
      const echo = (await request(`${stack.url}/`, { headers: { cookie: sessionCookie(2) } })).json();
      assert.equal(echo.cell, "2");
      assert.equal(echo.headers[SIGNATURE], undefined);
      assert.ok(await waitForOutput(stack, (l) => l.includes("GITLAB_ROUTER_SIGNING_KEY") && l.includes("forwarded unsigned")));
    } finally {
      await stack.stop();
    }
  });
});
