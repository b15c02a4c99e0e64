// Runtime controls (docs/operations.md): the ROUTER_CONTROL KV
// document as Miniflare emulates Workers KV, read by the real worker in
// workerd at most once per GITLAB_CONTROL_REFRESH_SECONDS (1 s here): the
// passthrough switch, disabled rules, an invalid document, and the purge
// generation against a storm of 404s from the Topology Service.
import { test, describe } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ROOT, startStack, request, requestLogs, getJson, postJson, sessionCookie, setControl, eventually } from "./harness.mjs";
import { workerdChildren, rss } from "./procs.mjs";

const RULESCTL = join(ROOT, "target", "debug", "rulesctl");

const INTERVAL_MS = 1000;
const stats = (stack) => getJson(`${stack.topology.admin}/_stats`);
const resetStats = (stack) => postJson(`${stack.topology.admin}/_stats/reset`, {});
const cellOf = async (stack, cookie, path = "/dashboard", router = stack.url) =>
  (await request(`${router}${path}`, { headers: cookie ? { cookie } : {} })).json().cell;

/** Polls until `check` holds; returns the ms it took. */
async function timeUntil(check, limitMs) {
  const started = Date.now();
  for (;;) {
    if (await check()) return Date.now() - started;
    if (Date.now() - started > limitMs) throw new Error(`not within ${limitMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function controlLines(stack, from = 0) {
  return stack.logs
    .slice(from)
    .filter((l) => l.includes('"scope":"control"'))
    .map((l) => JSON.parse(l.slice(l.indexOf("{"))));
}

const vars = { GITLAB_CONTROL_REFRESH_SECONDS: String(INTERVAL_MS / 1000) };

describe("ROUTER_CONTROL", () => {
  test("passthrough: within one interval every request goes to the legacy cell with no service call, and back", async () => {
    const stack = await startStack({ ruleset: "session_prefix", cellCount: 3, control: true, vars });
    try {
      assert.equal(await cellOf(stack, sessionCookie(2)), "2");
      await setControl(stack, { mode: "passthrough", note: "INC-1: test" });
      const took = await timeUntil(async () => (await cellOf(stack, sessionCookie(2))) === "1", 5 * INTERVAL_MS);
      console.log(`passthrough took effect after ${took} ms (interval ${INTERVAL_MS} ms)`);
      assert.ok(took <= INTERVAL_MS + 500, `${took} ms`);
      await resetStats(stack);
      const mark = requestLogs(stack).length;
      for (let i = 0; i < 20; i++) {
        assert.equal(await cellOf(stack, sessionCookie(3)), "1");
      }
      assert.equal((await stats(stack)).classify_calls, 0, "no service call in passthrough");
      const lines = await eventually(() => {
        const l = requestLogs(stack).slice(mark);
        assert.equal(l.length, 20);
        return l;
      });
      for (const l of lines) {
        assert.equal(l.mode, "passthrough");
        assert.equal(l.rule, null);
        assert.equal(l.upstream, stack.cells[1].addr);
      }
      const applied = controlLines(stack).find((l) => /mode=passthrough/.test(l.message));
      assert.ok(applied, "the applied document is logged");
      assert.match(applied.message, /INC-1: test/);

      await setControl(stack, { mode: "normal" });
      const back = await timeUntil(async () => (await cellOf(stack, sessionCookie(2))) === "2", 5 * INTERVAL_MS);
      console.log(`back to normal after ${back} ms`);
      assert.ok(back <= INTERVAL_MS + 500, `${back} ms`);
    } finally {
      await stack.stop();
    }
  });

  test("a document with fields this version does not know still applies passthrough (a rollback), named once in a warn line", async () => {
    // What a later version may write (and a rollback leaves in KV): a field
    // of its own, and an invalidation dated in microseconds, which would
    // make cell 2 uncacheable for good.
    const stack = await startStack({ ruleset: "session_prefix", cellCount: 3, control: true, vars });
    try {
      assert.equal(await cellOf(stack, sessionCookie(2)), "2");
      const mark = stack.logs.length;
      await setControl(stack, {
        mode: "passthrough",
        purge_generation: 1,
        sampling: { share: 0.1 },
        invalidations: [{ at_ms: Date.now() * 1000, cell: 2, why: "INC-9" }],
      });
      await timeUntil(async () => (await cellOf(stack, sessionCookie(2))) === "1", 5 * INTERVAL_MS);
      // Two more reads of the same document.
      const until = Date.now() + 2.5 * INTERVAL_MS;
      while (Date.now() < until) await cellOf(stack, sessionCookie(3));
      const lines = controlLines(stack, mark);
      assert.deepEqual(lines.filter((l) => l.level === "error"), [], "not refused");
      const unknown = lines.filter((l) => l.level === "warn" && /fields this version does not know/.test(l.message));
      assert.equal(unknown.length, 1, "once per document applied");
      assert.match(unknown[0].message, /ignored: invalidations\[0\]\.why, sampling|ignored: sampling, invalidations\[0\]\.why/);
      const ahead = lines.filter((l) => l.level === "warn" && /ahead of this isolate's clock, ignored/.test(l.message));
      assert.equal(ahead.length, 1);
      assert.match(ahead[0].message, /cell=2 at_ms \d{16}/);
      assert.ok(lines.some((l) => /control document applied: mode=passthrough .*purge_generation=1/.test(l.message)));
    } finally {
      await stack.stop();
    }
  });

  test("the document is read at most once per interval, not per request", async () => {
    // A KV read is invisible to the test, but its effect is not: a change
    // made just after a read is not seen before the interval has passed.
    const stack = await startStack({
      ruleset: "session_prefix",
      cellCount: 2,
      control: true,
      vars: { GITLAB_CONTROL_REFRESH_SECONDS: "3" },
    });
    try {
      assert.equal(await cellOf(stack, sessionCookie(2)), "2"); // the first read
      const readAt = Date.now();
      await setControl(stack, { mode: "passthrough" });
      const seen = [];
      while (Date.now() - readAt < 2000) {
        seen.push(await cellOf(stack, sessionCookie(2)));
      }
      assert.ok(seen.length >= 10);
      assert.deepEqual([...new Set(seen)], ["2"], "not re-read within the interval");
      await timeUntil(async () => (await cellOf(stack, sessionCookie(2))) === "1", 3000);
    } finally {
      await stack.stop();
    }
  });

  test("a disabled rule is skipped; an invalid document changes nothing", async () => {
    const stack = await startStack({ ruleset: "session_prefix", cellCount: 2, control: true, vars });
    try {
      assert.equal(await cellOf(stack, sessionCookie(2)), "2");
      await setControl(stack, { disabled_rules: ["session_cookie"] });
      await timeUntil(async () => (await cellOf(stack, sessionCookie(2))) === "1", 5 * INTERVAL_MS);
      const line = requestLogs(stack).at(-1);
      assert.equal(line.rule, "legacy", "the next rule decided");

      const mark = stack.logs.length;
      await setControl(stack, '{"mode": "off", "disabled_rules": []}');
      await eventually(async () => {
        // The request that finds a read due makes it.
        assert.equal(await cellOf(stack, sessionCookie(2)), "1", "still disabled");
        const errors = controlLines(stack, mark).filter((l) => l.level === "error");
        assert.ok(errors.length >= 1, "the invalid document is reported");
        assert.match(errors[0].message, /mode "off".*keeping the last known document/);
      }, 5 * INTERVAL_MS);
      for (let i = 0; i < 5; i++) assert.equal(await cellOf(stack, sessionCookie(2)), "1", "still disabled");

      await setControl(stack, { disabled_rules: ["no_such_rule"] });
      await timeUntil(async () => (await cellOf(stack, sessionCookie(2))) === "2", 5 * INTERVAL_MS);
      const unknown = controlLines(stack).find((l) => /names no rule/.test(l.message));
      assert.ok(unknown, "an id naming no rule is reported");
      assert.match(unknown.message, /no_such_rule/);
    } finally {
      await stack.stop();
    }
  });

  test("a 404 storm: after the service recovers, raising purge_generation stops the misrouting within one interval", async () => {
    // Two routers: separate isolates with one Cache API, like a colo. The
    // storm's 404s are cached (memory and Cache API) for 30 s. (No
    // GITLAB_CELLS here: sessions of listed cells heal by themselves,
    // tests/e2e/storm.test.mjs.)
    const stack = await startStack({ ruleset: "session_prefix", cellCount: 3, control: true, routers: 2, vars });
    const [a, b] = stack.urls;
    const users = [sessionCookie(2), sessionCookie(3)];
    try {
      await setControl(stack, {});
      await postJson(`${stack.topology.admin}/_faults`, { not_found_all: true, cache_control: "max-age=30" });
      for (const u of users) assert.equal(await cellOf(stack, u, "/storm", a), "1", "the storm misroutes");
      await postJson(`${stack.topology.admin}/_faults`, { not_found_all: false, cache_control: null });
      // Recovered, but the cached 404s keep misrouting, in router a's memory
      // and, through the Cache API, in router b that never asked.
      for (const u of users) {
        assert.equal(await cellOf(stack, u, "/after", a), "1");
        assert.equal(await cellOf(stack, u, "/after", b), "1");
      }
      await setControl(stack, { purge_generation: 1, note: "after the 404 storm" });
      const purged = Date.now();
      const correct = async (router) => {
        for (const [i, u] of users.entries()) {
          if ((await cellOf(stack, u, "/purged", router)) !== String(2 + (i % 2))) return false;
        }
        return true;
      };
      const tookA = await timeUntil(() => correct(a), 5 * INTERVAL_MS);
      await timeUntil(() => correct(b), 5 * INTERVAL_MS);
      const tookB = Date.now() - purged;
      console.log(`misrouting stopped ${tookA} ms (router a) and ${tookB} ms (router b) after the purge; the cached 404s had 30 s left`);
      assert.ok(tookA <= INTERVAL_MS + 1000 && tookB <= INTERVAL_MS + 1500, `${tookA} / ${tookB} ms`);
    } finally {
      await stack.stop();
    }
  });

  test("a purge cannot be undone by accident: a lower generation and a deleted key are ignored", async () => {
    // Two isolates, one Cache API. A path claim's 404 from a storm is
    // cached under generation 0 (30 s); purge_generation 1 ends it. Writing
    // generation 0 back (by hand, past rulesctl) or deleting the key must
    // not make the generation-0 404s readable again.
    const stack = await startStack({ ruleset: "cells", cellCount: 3, cellRoutes: { 2: ["acme"] }, control: true, routers: 2, vars });
    const [a, b] = stack.urls;
    const routed = async (router) => cellOf(stack, null, "/acme/app", router);
    try {
      await setControl(stack, {});
      await postJson(`${stack.topology.admin}/_faults`, { not_found_all: true, cache_control: "max-age=30" });
      assert.equal(await routed(a), "1", "the storm's 404");
      await postJson(`${stack.topology.admin}/_faults`, { not_found_all: false, cache_control: null });
      assert.equal(await routed(b), "1", "cached in the Cache API under generation 0");
      await setControl(stack, { purge_generation: 1 });
      await timeUntil(async () => (await routed(a)) === "2" && (await routed(b)) === "2", 5 * INTERVAL_MS);

      const mark = stack.logs.length;
      await setControl(stack, { purge_generation: 0, note: "a mistaken rollback" });
      await eventually(async () => {
        assert.equal(await routed(a), "2");
        assert.equal(await routed(b), "2");
        const ignored = controlLines(stack, mark).filter((l) => l.level === "warn" && /lowers purge_generation from 1 to 0: ignored/.test(l.message));
        assert.ok(ignored.length >= 2, "both isolates say so");
      }, 5 * INTERVAL_MS);
      const deleted = stack.logs.length;
      await setControl(stack, null);
      await eventually(async () => {
        await routed(a);
        await routed(b);
        const kept = controlLines(stack, deleted).filter((l) => l.level === "warn" && /control key is missing: keeping the last known document/.test(l.message));
        assert.ok(kept.length >= 2, "both isolates keep their document");
      }, 5 * INTERVAL_MS);
      for (let i = 0; i < 10; i++) {
        assert.equal(await routed(a), "2", "generation 0's 404 stays unread");
        assert.equal(await routed(b), "2");
      }
    } finally {
      await stack.stop();
    }
  });

  test("a new isolate that finds no key routes with the default document, without the Cache API", async () => {
    const stack = await startStack({ ruleset: "session_prefix", cellCount: 3, control: true, routers: 2, vars });
    const [a, b] = stack.urls;
    try {
      assert.equal(await cellOf(stack, sessionCookie(3), "/", a), "3");
      assert.equal(await cellOf(stack, sessionCookie(3), "/", b), "3");
      assert.equal((await stats(stack)).classify_calls, 2, "each isolate asked: no Cache API without the key");
      const warned = controlLines(stack).find((l) => l.level === "warn" && /missing: routing with the default document, without the shared cache/.test(l.message));
      assert.ok(warned, "a warn line says so");
      await setControl(stack, {});
      await new Promise((r) => setTimeout(r, INTERVAL_MS + 100));
      // The requests that find a read due start it (in the background).
      await cellOf(stack, sessionCookie(3), "/", a);
      await cellOf(stack, sessionCookie(3), "/", b);
      await new Promise((r) => setTimeout(r, 200));
      await resetStats(stack);
      assert.equal(await cellOf(stack, sessionCookie(2), "/", a), "2");
      await new Promise((r) => setTimeout(r, 100)); // the Cache API write (waitUntil)
      assert.equal(await cellOf(stack, sessionCookie(2), "/", b), "2");
      assert.equal((await stats(stack)).classify_calls, 1, "with a document, the other isolate is answered by the Cache API");
    } finally {
      await stack.stop();
    }
  });

  test("rulesctl control writes through the pinned wrangler what the worker applies", async () => {
    // wrangler's local KV store (what `wrangler dev` reads), bound as the
    // dev environment binds it (wrangler.toml: id router-control-dev).
    const dir = mkdtempSync(join(tmpdir(), "router-control-"));
    const rulesctl = (...args) =>
      execFileSync(RULESCTL, ["control", ...args, "--env", "dev", "--local", "--persist-to", dir, "--config", join(ROOT, "wrangler.toml")], {
        cwd: ROOT,
        encoding: "utf8",
        env: { ...process.env, WRANGLER_SEND_METRICS: "false" },
      });
    try {
      // No document: degraded (a new isolate would run without the Cache API), exit 1.
      assert.throws(() => rulesctl("show"), /no control document .*the router is DEGRADED/);
      const dry = rulesctl("set", "--dry-run", "--start-generation", "0", "mode=passthrough", "note=INC-2");
      assert.match(dry, /dry run: would run .*wrangler kv key put control '\{"mode":"passthrough","note":"INC-2","purge_generation":0\}' --binding ROUTER_CONTROL --env dev --local/);
      assert.throws(() => rulesctl("show"), /no control document/, "a dry run writes nothing");
      assert.match(rulesctl("set", "--start-generation", "0", "mode=passthrough", "disable=session_cookie", "note=INC-2"), /written \(mode=passthrough/);
      assert.throws(() => rulesctl("set", "disable=no_such_rule"), /names no rule of any ruleset/);
      assert.throws(() => rulesctl("set", "mode=off"), /neither normal nor passthrough/);
      const shown = JSON.parse(rulesctl("show"));
      assert.deepEqual(shown, { mode: "passthrough", disabled_rules: ["session_cookie"], note: "INC-2", purge_generation: 0 });

      const stack = await startStack({
        ruleset: "session_prefix",
        cellCount: 2,
        control: { id: "router-control-dev", persist: join(dir, "v3", "kv") },
        vars,
      });
      try {
        assert.equal(await cellOf(stack, sessionCookie(2)), "1", "the worker applies what rulesctl wrote");
        assert.equal(requestLogs(stack).at(-1).mode, "passthrough");
      } finally {
        await stack.stop();
      }
      assert.match(rulesctl("set", "reset", "purge"), /"purge_generation": 1/);
      // A lower generation is refused by put (set never lowers it).
      const lower = join(dir, "lower.json");
      writeFileSync(lower, '{"mode":"normal"}');
      assert.throws(() => rulesctl("put", lower), /purge_generation 0 is lower than the stored document's 1: refused/);
      assert.throws(() => rulesctl("put", "--dry-run", lower), /lower than the stored/, "a dry run says so too");
      writeFileSync(lower, '{"mode":"normal","purge_generation":1}');
      assert.match(rulesctl("put", lower), /written/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("without the binding the router routes as before and never asks KV", async () => {
    const stack = await startStack({ ruleset: "session_prefix", cellCount: 2, vars });
    try {
      assert.equal(await cellOf(stack, sessionCookie(2)), "2");
      assert.deepEqual(controlLines(stack), []);
    } finally {
      await stack.stop();
    }
  });

  test("a 20 MiB control value is refused after its first 64 KiB: workerd's memory stays flat", async () => {
    const MiB = 1024 * 1024;
    const stack = await startStack({ ruleset: "session_prefix", cellCount: 2, control: true, vars });
    try {
      assert.equal(await cellOf(stack, sessionCookie(2)), "2");
      await setControl(stack, `{"note":"${"x".repeat(20 * MiB)}"}`);
      const pids = [...workerdChildren()];
      const before = Math.max(...pids.map(rss));
      const mark = stack.logs.length;
      let peak = before;
      const refused = await eventually(async () => {
        await cellOf(stack, sessionCookie(2));
        peak = Math.max(peak, ...pids.map(rss));
        const line = controlLines(stack, mark).find((l) => l.level === "error");
        assert.ok(line, "the refusal is logged");
        return line;
      }, 10 * INTERVAL_MS);
      for (let i = 0; i < 20; i++) {
        assert.equal(await cellOf(stack, sessionCookie(2)), "2", "routed with the last good document");
        peak = Math.max(peak, ...pids.map(rss));
      }
      assert.match(refused.message, /over the 65536-byte limit/);
      console.log(`# 20 MiB control value: refused (${refused.message}); workerd RSS ${(before / MiB).toFixed(1)} -> peak ${(peak / MiB).toFixed(1)} MiB`);
      assert.ok(peak - before < 16 * MiB, `workerd grew ${((peak - before) / MiB).toFixed(1)} MiB`);
    } finally {
      await stack.stop();
    }
  });

  test("during a KV outage a new isolate's first request waits at most ~200 ms, the next not at all", async () => {
    // ROUTER_CONTROL as a binding whose reads never answer (KV down).
    const stuckKv = {
      name: "stuck-kv",
      modules: true,
      script: `export default function () {
        return {
          get: () => new Promise(() => {}),
          put: () => new Promise(() => {}),
        };
      }`,
    };
    const stack = await startStack({
      ruleset: "session_prefix",
      cellCount: 2,
      vars,
      routerOptions: [{ wrappedBindings: { ROUTER_CONTROL: "stuck-kv" } }],
      extraWorkers: [stuckKv],
    });
    try {
      const times = [];
      for (let i = 0; i < 10; i++) {
        const started = performance.now();
        assert.equal(await cellOf(stack, sessionCookie(2)), "2", "routed with what the isolate has");
        times.push(performance.now() - started);
      }
      console.log(`# KV never answering: first request ${times[0].toFixed(0)} ms, then ${times.slice(1).map((t) => t.toFixed(0)).join(", ")} ms`);
      assert.ok(times[0] >= 190, `the first request waited ${times[0].toFixed(0)} ms for the first read`);
      assert.ok(times[0] < 700, `the first request waited ${times[0].toFixed(0)} ms`);
      const later = times.slice(1).sort((a, b) => a - b);
      assert.ok(later[Math.floor(later.length / 2)] < 100, `later requests: ${later.map((t) => t.toFixed(0))}`);
    } finally {
      await stack.stop();
    }
  });
});
