// The Rust yardsticks (bench/rust-floor, bench/workers-rs) do the floor's
// work: the upstream gets the headers js-floor.mjs sends, and the log line
// has its fields. Skipped until bench/build-yardsticks.sh has built them
// (bench/run.sh does), or without the peers.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { ROOT, readSettings } from "../../bench/driver/settings.mjs";
import { runInWorkerd } from "./run-in-workerd.mjs";

const FLOOR = join(readSettings().peersDir, "js-floor.mjs");
const YARDSTICKS = {
  "rust-floor": join(ROOT, "target", "rust-floor", "worker", "entry.mjs"),
  "workers-rs": join(ROOT, "target", "workers-rs", "build", "index.js"),
};
const HEADERS = { "x-custom": "v", cookie: "a=b", "proxy-authorization": "p", "x-forwarded-host": "evil", "x-gitlab-http-router-rule-type": "forged" };

/** What the upstream got and what was logged, with what differs between two workerd processes (ports, time) taken out. */
async function forwarded(scriptPath) {
  const { sent, logged } = await runInWorkerd(scriptPath, { bindings: { LOG: "1" }, headers: HEADERS, lines: 1 });
  const { host, "x-forwarded-host": forwardedHost, ...rest } = sent;
  assert.match(forwardedHost, /^127\.0\.0\.1:\d+$/);
  const line = JSON.parse(logged[0]);
  return { headers: rest, log: { ...line, upstream: typeof line.upstream, duration_ms: typeof line.duration_ms } };
}

for (const [name, scriptPath] of Object.entries(YARDSTICKS)) {
  const skip = !existsSync(scriptPath) ? "not built (bash bench/build-yardsticks.sh)" : !existsSync(FLOOR) ? `no ${FLOOR}` : false;
  test(`${name} forwards and logs as the floor does`, { skip }, async () => {
    const floor = await forwarded(FLOOR);
    assert.equal(floor.headers["x-custom"], "v");
    assert.equal(floor.headers["proxy-authorization"], undefined);
    assert.deepEqual(await forwarded(scriptPath), floor);
  });
}
