// Settings the router cannot read, through the real worker in workerd: the
// fallback is used and a warn line says so once per isolate, never a
// refusal of all traffic (router_core::config, README.md Configuration).
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { startStack, request, sessionCookie, eventually } from "./harness.mjs";

/** The router's `config` lines so far, parsed. */
function configLines(stack) {
  return stack.logs
    .map((l) => l.slice(l.indexOf("{")))
    .filter((l) => l.startsWith('{"level"') && l.includes('"scope":"config"'))
    .map((l) => JSON.parse(l));
}

const served = async (url) => (await (await fetch(url)).json()).requests;

describe("a setting the router cannot read", () => {
  test("a GITLAB_ROUTER_SIGNING_POLICY typo without a key: requests are routed (not 503), one warn line", async () => {
    const stack = await startStack({ cellCount: 2, vars: { GITLAB_ROUTER_SIGNING_POLICY: "requird" } });
    try {
      for (let i = 0; i < 3; i++) {
        const res = await request(`${stack.url}/`, { headers: { cookie: sessionCookie(2) } });
        assert.equal(res.status, 200, res.text);
        assert.equal(res.json().cell, "2");
      }
      assert.equal(await served(`${stack.cells[2].url}/_stats`), 3);
      const warn = await eventually(() => {
        const lines = configLines(stack).filter((l) => l.message.startsWith('GITLAB_ROUTER_SIGNING_POLICY="requird"'));
        assert.equal(lines.length, 1, JSON.stringify(configLines(stack)));
        return lines[0];
      });
      assert.equal(warn.level, "warn");
      assert.match(warn.message, /neither required nor optional; using optional/);
      // Still one after more requests: logged per isolate, not per request.
      await request(`${stack.url}/`, { headers: { cookie: sessionCookie(2) } });
      await new Promise((r) => setTimeout(r, 200));
      assert.equal(configLines(stack).filter((l) => l.message.startsWith("GITLAB_ROUTER_SIGNING_POLICY=")).length, 1);
    } finally {
      await stack.stop();
    }
  });

  test("one bad GITLAB_ALLOWED_UPSTREAMS entry: the other entries still allow their cells", async () => {
    // `127.0.0.1:*` allows every started cell; the bad entry once emptied the whole list.
    const stack = await startStack({ cellCount: 3, vars: { GITLAB_ALLOWED_UPSTREAMS: "https://bad.example/, 127.0.0.1:*" } });
    try {
      for (const cell of [2, 3]) {
        const res = await request(`${stack.url}/`, { headers: { cookie: sessionCookie(cell) } });
        assert.equal(res.status, 200, res.text);
        assert.equal(res.json().cell, String(cell));
        assert.equal(await served(`${stack.cells[cell].url}/_stats`), 1);
      }
      const warn = await eventually(() => {
        const lines = configLines(stack).filter((l) => l.message.startsWith("GITLAB_ALLOWED_UPSTREAMS="));
        assert.equal(lines.length, 1, JSON.stringify(configLines(stack)));
        return lines[0];
      });
      assert.equal(warn.level, "warn");
      assert.match(warn.message, /^GITLAB_ALLOWED_UPSTREAMS="https:\/\/bad\.example\/": not an allow-list entry: .*; this entry is left out; the others are allowed$/);
    } finally {
      await stack.stop();
    }
  });
});
