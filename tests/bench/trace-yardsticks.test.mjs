// bench/trace-yardsticks.mjs (BENCH_TRACE_YARDSTICKS=1): a yardstick made
// to send a request id and a traceparent, and to log both, run in workerd
// as the bench runs it, against a loopback upstream; a yardstick that
// changed is refused.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { traceYardsticks, withTrace } from "../../bench/trace-yardsticks.mjs";
import { runInWorkerd } from "./run-in-workerd.mjs";

const PEERS = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "shared", "peers");

/** A yardstick of the floor's shape (the peers directory may be absent). */
const FLOOR = `export default {
  async fetch(req, env) {
    const started = Date.now();
    const url = new URL(req.url);
    const headers = new Headers();
    for (const [k, v] of req.headers) headers.append(k, v);
    headers.set("x-gitlab-http-router-rule-type", "");
    const res = await fetch(\`http://\${env.UPSTREAM}\${url.pathname}\`, { method: req.method, headers, redirect: "manual" });
    if (env.LOG === "1") console.log(JSON.stringify({ status: res.status, duration_ms: Date.now() - started }));
    return res;
  },
};
`;

/** Runs module `text` in workerd for one request: the headers it sent and the lines it logged. */
async function runOnce(text) {
  const dir = mkdtempSync(join(tmpdir(), "yardstick-"));
  try {
    writeFileSync(join(dir, "worker.mjs"), text);
    return await runInWorkerd(join(dir, "worker.mjs"), { bindings: { LOG: "1" }, lines: 1 });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function assertTraced({ sent, logged }) {
  assert.match(sent["x-request-id"], /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.match(sent.traceparent, /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
  assert.equal(logged.length, 1);
  const line = JSON.parse(logged[0]);
  assert.equal(line.request_id, sent["x-request-id"]);
  assert.equal(line.traceparent, sent.traceparent);
}

test("a yardstick sends a request id and a traceparent and logs both", async () => {
  const untraced = await runOnce(FLOOR);
  assert.equal(untraced.sent["x-request-id"], undefined);
  assertTraced(await runOnce(withTrace(FLOOR, "floor")));
});

test("a yardstick without the lines patched, or with two, is refused", () => {
  assert.throws(() => withTrace(FLOOR.replace('"x-gitlab-http-router-rule-type"', '"x-other"'), "floor"), /the yardstick changed/);
  assert.throws(() => withTrace(FLOOR.replace("duration_ms", "ms"), "floor"), /the yardstick changed/);
  const twice = FLOOR.replace(
    'headers.set("x-gitlab-http-router-rule-type", "");',
    'headers.set("x-gitlab-http-router-rule-type", "");\n    headers.set("x-gitlab-http-router-rule-type", "a");',
  );
  assert.throws(() => withTrace(twice, "floor"), /has 2 places/);
});

test("the shipped floor and peer are traced (when ../shared/peers is there)", async (t) => {
  if (!existsSync(join(PEERS, "js-floor.mjs"))) return t.skip(`no peers at ${PEERS}`);
  const out = mkdtempSync(join(tmpdir(), "trace-yardsticks-"));
  try {
    traceYardsticks(PEERS, out);
    for (const file of ["js-floor.mjs", "js-router.mjs"]) {
      assert.match(readFileSync(join(out, file), "utf8"), /headers\.set\("traceparent", traceparent\)/, file);
    }
    assertTraced(await runOnce(readFileSync(join(out, "js-floor.mjs"), "utf8")));
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});
