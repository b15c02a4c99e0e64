// Panic recovery relies on glue internals of wasm-bindgen and the worker
// crate (src/entry.js, `missingGlue`). At start-up the entry checks them
// and, when one is missing, logs one clear error and keeps serving without
// recovery. Checked here against the real build, and against a copy of it
// whose glue lacks one of those internals (as an upgrade could make it).
import { test } from "node:test";
import assert from "node:assert/strict";
import { cpSync, readFileSync, writeFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { startStack, request, sessionCookie, ROOT } from "./harness.mjs";

const glueErrors = (stack) => stack.logs.filter((l) => l.includes('"scope":"wasm-glue"'));

/**
 * A copy of build/ at target/<name> whose glue (worker/shim.mjs) is
 * `patch(text)`; returns its directory for startStack's `build` and a
 * `remove()` for the test's end.
 */
function patchedBuild(name, patch) {
  const copy = `target/${name}`;
  rmSync(join(ROOT, copy), { recursive: true, force: true });
  cpSync(join(ROOT, "build"), join(ROOT, copy), { recursive: true });
  const shim = join(ROOT, copy, "worker", "shim.mjs");
  writeFileSync(shim, patch(readFileSync(shim, "utf8")));
  return { copy, remove: () => rmSync(join(ROOT, copy), { recursive: true, force: true }) };
}

test("the real build has every glue internal panic recovery needs", async () => {
  const stack = await startStack({ ruleset: "session_prefix" });
  try {
    const res = await request(`${stack.url}/explore`);
    assert.equal(res.status, 200);
    assert.deepEqual(glueErrors(stack), []);
  } finally {
    await stack.stop();
  }
});

test("a glue without the reinit export logs one clear error and still routes", async () => {
  const build = patchedBuild("glue-test-build", (text) => {
    assert.ok(text.includes('"__wbg___wbindgen_reinit_"'), "the entry looks the export up by this prefix");
    return text.replaceAll('"__wbg___wbindgen_reinit_"', '"__wbg___renamed_by_an_upgrade_"');
  });
  const stack = await startStack({ ruleset: "session_prefix", build: build.copy });
  try {
    const res = await request(`${stack.url}/explore`);
    assert.equal(res.status, 200, "requests are still served");
    assert.equal(res.json().cell, "1");
    const errors = glueErrors(stack);
    assert.equal(errors.length, 1, errors.join("\n"));
    assert.match(errors[0], /panic recovery is off: the glue lacks __wbg___wbindgen_reinit_\*/);
  } finally {
    await stack.stop();
    build.remove();
  }
});

/** The glue with routeAsync throwing: a 200 was answered by routeSync alone. */
function withoutRouteAsync(text) {
  const calls = text.match(/[\w$]+\.routeAsync\(/g) ?? [];
  assert.equal(calls.length, 1, "the glue calls the wasm export once");
  return text.replace(calls[0], '(() => { throw new Error("routeAsync disabled by the test"); })(');
}

test("routeSync answers from the input the entry writes into wasm memory: routeAsync is never needed, a 30 KB latin-1 cookie included", async () => {
  // A copy of the build whose routeAsync throws: every request it would
  // take fails, so a 200 here was answered by routeSync alone.
  const build = patchedBuild("glue-test-sync-build", withoutRouteAsync);
  const stack = await startStack({ ruleset: "session_prefix", build: build.copy });
  try {
    // The buffer starts at 4 KiB: this request grows it and wasm memory
    // (é and ÿ are latin-1 bytes in a header value, two UTF-8 bytes each).
    const padding = `pad=${"é".repeat(5_000)}${"x".repeat(20_000)}ÿ`;
    for (const [path, cookie] of [
      ["/first", undefined],
      ["/big", `${padding}; after=ÿ`],
      ["/after-big?x=1", "theme=dark"],
    ]) {
      const res = await request(`${stack.url}${path}`, { headers: cookie ? { cookie } : {} });
      assert.equal(res.status, 200, `${path}: ${res.text.slice(0, 200)}`);
      assert.equal(res.json().cell, "1", path);
      assert.equal(res.json().query, path.includes("?") ? "x=1" : "", path);
      // The echo cell reads latin-1 bytes as UTF-8 (U+FFFD each): same length.
      if (cookie) assert.equal(res.json().headers.cookie.length, cookie.length, "the whole cookie is forwarded");
    }
    // The patch bites: a session the memory cache does not hold needs routeAsync.
    const unknown = await request(`${stack.url}/needs-service`, { headers: { cookie: sessionCookie(2) } });
    assert.notEqual(unknown.status, 200, "routeAsync is really off in this copy");
  } finally {
    await stack.stop();
    build.remove();
  }
});

test("a plan longer than routeSync's buffer reaches the entry whole (takePlan)", async () => {
  // routeSync writes its plan over the input buffer (at least 4 KiB, three
  // bytes per character of the input); a plan that does not fit is handed
  // over by takePlan. Here the buffer starts at 16 bytes, so every plan is
  // too long for it, and routeAsync is off as above.
  const build = patchedBuild("glue-test-long-plan-build", (text) => {
    assert.equal(text.split("Math.max(4096,").length, 2, "the entry sizes the buffer at one place");
    return withoutRouteAsync(text.replace("Math.max(4096,", "Math.max(16,"));
  });
  const stack = await startStack({ ruleset: "session_prefix", build: build.copy });
  try {
    for (const path of ["/short", `/${"long/".repeat(400)}end?q=${"v".repeat(500)}`]) {
      const res = await request(`${stack.url}${path}`, { headers: { "x-request-id": "from-the-client" } });
      assert.equal(res.status, 200, `${path.slice(0, 40)}: ${res.text.slice(0, 200)}`);
      const echo = res.json();
      assert.equal(echo.cell, "1");
      assert.equal(`${echo.path}${echo.query ? `?${echo.query}` : ""}`, path, "forwarded to the planned URL");
      assert.equal(echo.headers["x-gitlab-http-router-rule-action"], "proxy", "the plan's headers were set");
      assert.notEqual(echo.headers["x-request-id"], "from-the-client", "the plan's request id replaced the client's");
      assert.match(echo.headers.traceparent ?? "", /^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/);
    }
  } finally {
    await stack.stop();
    build.remove();
  }
});

test("hundreds of new header names: the entry's per-name memory starts over and every request is still routed and filtered", async () => {
  // The entry remembers what it does with each header name (wanted, always
  // dropped) for at most 256 names, then starts over. Four requests bring
  // 320 new names (80 each: the cells take at most 100 headers); then the
  // session cookie and two headers always dropped come for the first time.
  const stack = await startStack({ ruleset: "session_prefix" });
  const junk = (round) => Object.fromEntries(Array.from({ length: 80 }, (_, i) => [`x-junk-${round}-${i}`, "1"]));
  try {
    for (let round = 0; round < 4; round++) {
      const res = await request(`${stack.url}/explore`, { headers: junk(round) });
      assert.equal(res.status, 200, `round ${round}: ${res.text.slice(0, 200)}`);
      assert.equal(res.json().headers[`x-junk-${round}-79`], "1", `round ${round}: forwarded`);
    }
    const res = await request(`${stack.url}/dashboard`, {
      headers: { ...junk(4), cookie: sessionCookie(2), "x-forwarded-foo": "evil", x_gitlab_http_router_rule_type: "forged" },
    });
    assert.equal(res.status, 200, res.text.slice(0, 200));
    const echo = res.json();
    assert.equal(echo.cell, "2", "routed by the session cookie, a name first seen after the memory filled");
    assert.equal(echo.headers["x-forwarded-foo"], undefined, "dropped (x-forwarded-*)");
    assert.equal(echo.headers.x_gitlab_http_router_rule_type, undefined, "dropped (the router's own, _ for -)");
    assert.equal(echo.headers["x-junk-4-79"], "1", "other headers forwarded");
  } finally {
    await stack.stop();
  }
});
