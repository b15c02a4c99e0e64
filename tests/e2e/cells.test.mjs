// Cells as configuration (issue 16, SPEC §10) through the real worker in
// workerd: GITLAB_CELLS, per-cell circuits (passive health), the scheduled
// probe (active health), resolution without the Topology Service, and the
// sign-in spread. Every cell is this test's own `devstack cell` process, so
// it can be killed and restarted by PID.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { startReady, startRouter, stopChild, topologyToml, request, requestLogs, sessionCookie, freePort, eventually, scratchDir } from "./harness.mjs";
import { routableToken } from "./tokens.mjs";

/**
 * Cells 1..cellCount (cell 1 is the legacy cell), a Topology Service that
 * knows them (unless `topology: false`), and `routers` copies of the router
 * with GITLAB_CELLS listing every cell.
 */
async function startCells({ cellCount = 3, vars = {}, routers = 1, topology = true } = {}) {
  const stack = { children: [], logs: [], cells: {} };
  try {
    for (let id = 1; id <= cellCount; id++) {
      const { child, ready } = await startReady(["cell", "--id", String(id), "--listen", "127.0.0.1:0"], `cell ${id}`);
      stack.children.push(child);
      stack.cells[id] = { id, addr: ready.addr, child };
    }
    let topologyUrl;
    if (topology) {
      const dir = scratchDir("router-cells-");
      const cfg = join(dir, "topology.toml");
      writeFileSync(cfg, topologyToml(Object.values(stack.cells).map((c) => ({ id: c.id, address: c.addr }))));
      const ts = await startReady(["topology", "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"], "topology");
      stack.children.push(ts.child);
      topologyUrl = `http://${ts.ready.addr}`;
    } else {
      // Nothing listens there: every call fails at once.
      topologyUrl = `http://127.0.0.1:${await freePort()}`;
    }
    stack.list = Object.values(stack.cells).map((c) => ({ id: c.id, address: c.addr, session_prefix: `cell-${c.id}`, health_path: "/-/readiness" }));
    stack.vars = {
      GITLAB_RULES_CONFIG: "cells",
      GITLAB_TOPOLOGY_SERVICE_URL: topologyUrl,
      GITLAB_PROXY_HOST: stack.cells[1].addr,
      GITLAB_UPSTREAM_SCHEME: "http",
      GITLAB_TOPOLOGY_TIMEOUT_MS: "300",
      GITLAB_CELLS: JSON.stringify(stack.list),
      ...vars,
    };
    stack.mf = await startRouter(stack.vars, stack.logs, { routers });
    stack.urls = [];
    for (let i = 0; i < routers; i++) {
      stack.urls.push((await stack.mf.unsafeGetDirectURL(i === 0 ? "router" : `router-${i}`)).toString().replace(/\/$/, ""));
    }
    stack.url = stack.urls[0];
  } catch (e) {
    await stopCells(stack);
    throw e;
  }
  return stack;
}

async function stopCells(stack) {
  if (stack.mf) await stack.mf.dispose().catch(() => {});
  for (const child of stack.children) await stopChild(child);
}

/** Kills a cell's process (SIGKILL: no goodbye) and waits for it to be gone. */
async function killCell(stack, id) {
  const { child } = stack.cells[id];
  await new Promise((resolve) => {
    child.once("exit", resolve);
    child.kill("SIGKILL");
  });
}

/** Starts the cell again on its old address. */
async function restartCell(stack, id) {
  const { child } = await startReady(["cell", "--id", String(id), "--listen", stack.cells[id].addr], `cell ${id} again`);
  stack.children.push(child);
  stack.cells[id].child = child;
}

/** Runs the router's scheduled handler (the Cron Trigger) in router `i`. */
async function runCron(stack, i = 0) {
  const worker = await stack.mf.getWorker(i === 0 ? "router" : `router-${i}`);
  return worker.scheduled({ cron: "* * * * *" });
}

const healthLines = (stack) =>
  stack.logs
    .map((l) => l.slice(l.indexOf("{")))
    .filter((l) => l.startsWith("{") && l.includes('"scope":"cell-health"'))
    .map((l) => JSON.parse(l));

async function timed(url, headers = {}, method = "GET") {
  const t0 = performance.now();
  const res = await request(url, { headers, method });
  return { ...res, ms: performance.now() - t0, at: t0, cell: res.headers["x-demo-cell"] };
}

describe("passive health: a cell that dies gets fast 503s, and traffic returns when it is back", () => {
  let stack;
  before(async () => {
    stack = await startCells({ vars: { GITLAB_CELL_OPEN_MS: "1500" } });
  });
  after(async () => stack && stopCells(stack));

  test("kill cell 3 under traffic", async () => {
    const to3 = { cookie: sessionCookie(3) };
    const to2 = { cookie: sessionCookie(2) };
    // Warm: both sessions' cells known (memory cache), both answer.
    assert.equal((await timed(`${stack.url}/dashboard`, to3)).cell, "3");
    assert.equal((await timed(`${stack.url}/dashboard`, to2)).cell, "2");

    const results3 = [];
    const results2 = [];
    let running = true;
    const loop = async (headers, results) => {
      while (running) results.push(await timed(`${stack.url}/dashboard`, headers));
    };
    const loops = [loop(to3, results3), loop(to2, results2)];
    await new Promise((r) => setTimeout(r, 200));
    const from = stack.logs.length;
    const killedAt = performance.now();
    await killCell(stack, 3);
    // Traffic goes on until the circuit has been open for a while.
    await eventually(() => {
      const fast = results3.filter((r) => r.at > killedAt && r.status === 503);
      assert.ok(fast.length >= 20, `${fast.length} fast 503s so far`);
    }, 10000);
    running = false;
    await Promise.all(loops);

    const after3 = results3.filter((r) => r.at >= killedAt);
    const first503 = after3.findIndex((r) => r.status === 503);
    assert.ok(first503 >= 0, "cell 3's requests get 503s");
    const waited = after3.slice(0, first503);
    // Before the circuit opened: failures (502, the fetch failed), at most
    // the threshold (5) plus any in flight at the kill.
    assert.ok(waited.every((r) => r.status === 502 || r.status === 200), JSON.stringify(waited.map((r) => r.status)));
    const failedBeforeOpen = waited.filter((r) => r.status === 502).length;
    assert.ok(failedBeforeOpen <= 6, `${failedBeforeOpen} requests failed on the dead cell before its circuit opened`);
    const sinceDeath = after3[first503].at + after3[first503].ms - killedAt;
    assert.ok(sinceDeath < 2000, `first fast 503 ${sinceDeath} ms after the kill`);
    const open = after3.slice(first503).filter((r) => r.status === 503);
    for (const r of open) {
      assert.equal(r.headers["retry-after"] !== undefined, true, "Retry-After on every 503");
      assert.ok(Number(r.headers["retry-after"]) >= 1 && Number(r.headers["retry-after"]) <= 2, r.headers["retry-after"]);
    }
    const slowest = Math.max(...open.map((r) => r.ms));
    const median = open.map((r) => r.ms).sort((a, b) => a - b)[Math.floor(open.length / 2)];
    // Other cells untouched throughout.
    assert.ok(results2.length > 20);
    assert.ok(results2.every((r) => r.status === 200 && r.cell === "2"), "cell 2's traffic untouched");

    // The 503's log line names the cell and why; the circuit's opening is logged.
    const lines = requestLogs(stack, from);
    const refused = lines.find((l) => l.status === 503);
    assert.equal(refused.chosen_by, "circuit_open");
    assert.equal(refused.cell, 3);
    assert.match(refused.error, /cell 3 \(127\.0\.0\.1:\d+\) unavailable: circuit open \(its requests failed\)/);
    assert.ok(
      healthLines(stack).some((l) => /cell 3 .*circuit opened in this isolate after 5 failures/.test(l.message)),
      JSON.stringify(healthLines(stack)),
    );
    console.log(
      `# passive: first fast 503 ${sinceDeath.toFixed(0)} ms after cell 3 was killed; ${failedBeforeOpen} requests failed (502) on the dead cell before its circuit opened; ` +
        `${open.length} 503s, median ${median.toFixed(1)} ms, slowest ${slowest.toFixed(1)} ms; cell 2: ${results2.length} requests, all 200`,
    );

    // Back: after the cool-down one trial closes the circuit; no deploy.
    await restartCell(stack, 3);
    const back = performance.now();
    await eventually(async () => {
      const r = await timed(`${stack.url}/dashboard`, to3);
      assert.equal(r.status, 200);
      assert.equal(r.cell, "3");
    }, 5000);
    const returned = performance.now() - back;
    for (let i = 0; i < 10; i++) assert.equal((await timed(`${stack.url}/dashboard`, to3)).cell, "3");
    assert.ok(healthLines(stack).some((l) => /cell 3 .*circuit closed/.test(l.message)));
    console.log(`# passive: traffic back on cell 3 ${returned.toFixed(0)} ms after its restart (cool-down 1500 ms)`);
  });

  test("404s and other client errors never open a circuit", async () => {
    const to2 = { cookie: sessionCookie(2) };
    for (let i = 0; i < 20; i++) {
      for (const status of ["404", "429", "500"]) {
        const r = await timed(`${stack.url}/missing`, { ...to2, "x-demo-status": status });
        assert.equal(r.status, Number(status));
      }
    }
    assert.equal((await timed(`${stack.url}/dashboard`, to2)).status, 200);
  });

  test("a cell answering 503 is opened like a dead one", async () => {
    const to2 = { cookie: sessionCookie(2) };
    const statuses = [];
    for (let i = 0; i < 8; i++) statuses.push((await timed(`${stack.url}/dashboard`, { ...to2, "x-demo-status": "503" })).status);
    const refused = await timed(`${stack.url}/dashboard`, to2);
    assert.equal(refused.status, 503);
    assert.equal(refused.cell, undefined, "answered by the router");
    assert.ok(refused.headers["retry-after"]);
    assert.deepEqual(statuses.slice(0, 5), [503, 503, 503, 503, 503]);
    // Recovers after the cool-down by one trial.
    await eventually(async () => assert.equal((await timed(`${stack.url}/dashboard`, to2)).cell, "2"), 4000);
  });
});

describe("active health and the sign-in spread", () => {
  let stack;
  before(async () => {
    // Four cells, two isolates sharing one Cache API; long cool-down so the
    // stopped cell gets no trial during the test.
    stack = await startCells({ cellCount: 4, routers: 2, vars: { GITLAB_CELL_OPEN_MS: "60000" } });
  });
  after(async () => stack && stopCells(stack));

  test("the scheduled probe marks a stopped cell down before any user request reaches it", async () => {
    const killedAt = performance.now();
    await killCell(stack, 4);
    const result = await runCron(stack, 0);
    assert.equal(result.outcome, "ok", JSON.stringify(result));
    const summary = await eventually(() => {
      const line = healthLines(stack).find((l) => Array.isArray(l.down));
      assert.ok(line, "a summary line per probe run");
      return line;
    });
    assert.deepEqual(summary.down, [4]);
    assert.equal(summary.up, 3);
    assert.equal(summary.cells.length, 4);
    assert.ok(!JSON.stringify(summary).includes("secret"));
    // The other isolate has not served a request yet: its first one reads
    // the record and is answered at once.
    const from = stack.logs.length;
    const r = await timed(`${stack.urls[1]}/dashboard`, { cookie: sessionCookie(4) });
    const sinceDeath = performance.now() - killedAt;
    assert.equal(r.status, 503, r.text);
    assert.ok(Number(r.headers["retry-after"]) > 1);
    const line = requestLogs(stack, from).find((l) => l.status === 503);
    assert.equal(line.chosen_by, "circuit_open");
    assert.match(line.error, /cell 4 .*circuit open \(the health probe found it down\)/);
    assert.ok(!requestLogs(stack).some((l) => l.status === 502), "no request waited on the dead cell");
    // And in the isolate that ran the probe.
    assert.equal((await timed(`${stack.urls[0]}/dashboard`, { cookie: sessionCookie(4) })).status, 503);
    console.log(`# active: a stopped cell refused (503) ${sinceDeath.toFixed(0)} ms after its death, the probe run at once (in production: within one cron interval, 60 s, + GITLAB_CELL_HEALTH_REFRESH_MS, 5 s)`);
  });

  test("300 anonymous sign-in pages spread over the healthy cells, each POST goes back to its cell", async () => {
    const counts = { 1: 0, 2: 0, 3: 0, 4: 0 };
    const pages = [];
    for (let i = 0; i < 300; i++) {
      const url = stack.urls[i % 2];
      const r = await timed(`${url}/users/sign_in`);
      assert.equal(r.status, 200, r.text);
      counts[r.cell]++;
      const cookie = [r.headers["set-cookie"]].flat()[0].split(";")[0];
      assert.match(cookie, new RegExp(`^_gitlab_session=cell-${r.cell}-[0-9a-f]{32}$`));
      pages.push({ url, cell: r.cell, cookie });
    }
    assert.equal(counts[4], 0, "never the cell that is down");
    // Chi-square against uniform over the 3 healthy cells (2 degrees of
    // freedom; 13.82 is p = 0.001).
    const chi = [1, 2, 3].reduce((sum, id) => sum + (counts[id] - 100) ** 2 / 100, 0);
    assert.ok(chi < 13.82, `chi-square ${chi.toFixed(2)} for ${JSON.stringify(counts)}`);
    for (const { url, cell, cookie } of pages) {
      const post = await timed(`${url}/users/sign_in`, { cookie, "content-type": "application/x-www-form-urlencoded" }, "POST");
      assert.equal(post.status, 200);
      assert.equal(post.cell, cell, "the POST reaches the cell that served the form");
    }
    const spread = requestLogs(stack).filter((l) => l.rule === "sign_in_spread");
    assert.ok(spread.length >= 300 && spread.every((l) => l.chosen_by === "spread" && l.action === "spread"));
    console.log(`# spread: 300 sign-in pages over cells 1-3: ${JSON.stringify(counts)}, chi-square ${chi.toFixed(2)}; 300 POSTs back on their cells`);
  });
});

describe("Topology Service down, nothing cached", () => {
  let stack;
  before(async () => {
    stack = await startCells({ topology: false, vars: { GITLAB_TOPOLOGY_RETRIES: "0" } });
  });
  after(async () => stack && stopCells(stack));

  test("keys of listed cells reach their cells; unlisted ones the legacy cell", async () => {
    const cases = [
      [{ cookie: sessionCookie(2) }, "2", "static"],
      [{ cookie: sessionCookie(3) }, "3", "static"],
      [{ "private-token": routableToken("glpat-", { c: 3, o: 1 }) }, "3", "static"],
      [{ "job-token": routableToken("glcbt-", { c: 2, o: 1 }) }, "2", "static"],
      [{ cookie: sessionCookie(7) }, "1", "fallback"],
      [{ "private-token": routableToken("glpat-", { c: 9, o: 1 }) }, "1", "fallback"],
    ];
    for (const [headers, cell, level] of cases) {
      const from = stack.logs.length;
      const r = await timed(`${stack.url}/api/v4/user`, headers);
      assert.equal(r.status, 200, JSON.stringify(headers));
      assert.equal(r.cell, cell, JSON.stringify(headers));
      const line = await eventually(() => {
        const l = requestLogs(stack, from).find((x) => x.path === "/api/v4/user");
        assert.ok(l);
        return l;
      });
      assert.equal(line.cache, level, JSON.stringify(line));
      assert.equal(line.chosen_by, level === "static" ? "static" : "legacy");
      assert.match(line.error, /topology service (unreachable|not asked)/);
    }
  });
});
