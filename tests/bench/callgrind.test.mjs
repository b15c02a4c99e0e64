// bench/callgrind.mjs's config patch, against the real workerd: a config
// serialized by Miniflare's own serializer, with V8's `--perf-basic-prof`
// added by `patchV8Flags`, makes workerd write /tmp/perf-<pid>.map (the
// JIT code names BENCH_INSTRUCTIONS_PROFILE reads); the same config
// unpatched does not. And bench/instructions.mjs's comparisons.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, rmSync } from "node:fs";
import { createInterface } from "node:readline";
import { serializeConfig } from "miniflare";
import workerdModule from "workerd";
import { patchV8Flags } from "../../bench/callgrind.mjs";
import { compare, retryOnReset } from "../../bench/instructions.mjs";
import { stopChild } from "../e2e/harness.mjs";
import { runtime } from "../../scripts/runtime-config.mjs";

const WORKERD = workerdModule.default ?? workerdModule;

const config = () =>
  serializeConfig({
    services: [
      {
        name: "main",
        worker: {
          modules: [{ name: "w.mjs", esModule: "export default { fetch() { return new Response('ok'); } };" }],
          ...runtime(),
        },
      },
    ],
    sockets: [{ name: "http", address: "127.0.0.1:0", http: {}, service: { name: "main" } }],
  });

/** Starts workerd on `configBuffer`, answers one request, and says whether it wrote a perf map. */
async function servesAndWritesPerfMap(configBuffer) {
  const child = spawn(WORKERD, ["serve", "--binary", "--experimental", "--control-fd=3", "-"], {
    stdio: ["pipe", "ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr.on("data", (d) => (stderr += d));
  const map = `/tmp/perf-${child.pid}.map`;
  try {
    child.stdin.end(configBuffer);
    const port = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`workerd not listening: ${stderr}`)), 20000);
      createInterface({ input: child.stdio[3] }).on("line", (line) => {
        const msg = JSON.parse(line);
        if (msg.event === "listen" && msg.socket === "http") {
          clearTimeout(timer);
          resolve(msg.port);
        }
      });
      child.once("exit", (code) => reject(new Error(`workerd exited ${code}: ${stderr}`)));
    });
    const res = await fetch(`http://127.0.0.1:${port}/`);
    assert.equal(await res.text(), "ok");
    return existsSync(map);
  } finally {
    await stopChild(child);
    rmSync(map, { force: true });
  }
}

test("the patched config gives workerd its V8 flags; unpatched it has none", { timeout: 60000 }, async () => {
  assert.equal(await servesAndWritesPerfMap(config()), false);
  // (V8's own log, which the flag also starts, goes nowhere instead of the working directory.)
  const flags = ["--perf-basic-prof", "--no-logfile-per-isolate", "--logfile=/dev/null"];
  assert.equal(await servesAndWritesPerfMap(patchV8Flags(config(), flags)), true);
});

test("a config whose V8 flags are already set is refused, not overwritten", () => {
  const once = patchV8Flags(config(), ["--perf-basic-prof"]);
  // The far pointer now fills the slot: a second patch must not replace it.
  assert.throws(() => patchV8Flags(once, ["--perf-basic-prof"]), /already set/);
});

test("instruction counts are compared with the floor and the peer, both with their log lines", () => {
  const rows = compare([
    { config: "floor-log", main: 800_000 },
    { config: "peer-log", main: 900_000 },
    { config: "token-warm", main: 960_000 },
  ]);
  const tw = rows.find((r) => r.config === "token-warm");
  assert.equal(tw.over_floor_log, 160_000);
  assert.equal(tw.over_floor_log_pct, 20);
  assert.equal(tw.vs_peer_log, 960_000 / 900_000);
  assert.equal(compare([{ config: "passthrough", main: 1 }])[0].over_floor_log, null);
});

test("retryOnReset sends again after connection resets only, and gives up after its attempts", async () => {
  const reset = () => Object.assign(new Error("socket hang up"), { code: "ECONNRESET" });
  let calls = 0;
  let retries = 0;
  const value = await retryOnReset(
    async () => {
      calls++;
      if (calls < 3) throw reset();
      return "answer";
    },
    { attempts: 3, onRetry: () => retries++ },
  );
  assert.deepEqual([value, calls, retries], ["answer", 3, 2]);
  calls = 0;
  await assert.rejects(
    retryOnReset(async () => {
      calls++;
      throw reset();
    }, { attempts: 2 }),
    { code: "ECONNRESET" },
  );
  assert.equal(calls, 2, "the last reset is thrown");
  calls = 0;
  await assert.rejects(
    retryOnReset(async () => {
      calls++;
      throw Object.assign(new Error("refused"), { code: "ECONNREFUSED" });
    }, { attempts: 5 }),
    { code: "ECONNREFUSED" },
  );
  assert.equal(calls, 1, "other errors are not retried");
});
