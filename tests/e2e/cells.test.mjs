// Cells as configuration (SPEC §10) through the real worker in
// workerd: GITLAB_CELLS, per-cell circuits (passive health), the scheduled
// probe (active health), resolution without the Topology Service, and the
// sign-in spread. Every cell is this test's own `devstack cell` process, so
// it can be killed and restarted by PID.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { request, requestLogs, sessionCookie, eventually, TEST_BUILD, buildTestWorker } from "./harness.mjs";
import { startCells, stopCells, killCell, restartCell, runCron, healthLines, timed } from "./cells-harness.mjs";
import { routableToken } from "./tokens.mjs";
import { runtime } from "../../scripts/runtime-config.mjs";

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
    assert.ok(sinceDeath < 1000, `first fast 503 ${sinceDeath} ms after the kill`);
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

  test("a slow trial never holds the circuit open past its cool-down", async () => {
    const to3 = { cookie: sessionCookie(3) };
    await killCell(stack, 3);
    // Failures until the circuit opens (fast 503s from the router).
    await eventually(async () => {
      const r = await timed(`${stack.url}/dashboard`, to3);
      assert.equal(r.status, 503);
      assert.equal(r.cell, undefined);
    }, 5000);
    await restartCell(stack, 3);
    // The first trial after the cool-down is a page that takes 15 s: sent
    // again and again until one is not refused at once (it is the trial).
    const slow = new AbortController();
    let trialAt;
    const giveUp = performance.now() + 6000;
    while (trialAt === undefined && performance.now() < giveUp) {
      const sent = performance.now();
      const answered = await Promise.race([
        request(`${stack.url}/dashboard`, { headers: { ...to3, "x-demo-delay-ms": "15000" }, signal: slow.signal }).catch(() => null),
        new Promise((r) => setTimeout(() => r("in flight"), 300)),
      ]);
      if (answered === "in flight") trialAt = sent;
      else assert.equal(answered?.status, 503, "refused while open");
    }
    assert.ok(trialAt !== undefined, "a slow request became the trial");
    // Other users of cell 3 are back one trial spacing (1 s) later, not
    // when the slow trial ends.
    await eventually(async () => assert.equal((await timed(`${stack.url}/dashboard`, to3)).cell, "3"), 5000);
    const back = performance.now() - trialAt;
    slow.abort();
    assert.ok(back < 3000, `traffic back ${back.toFixed(0)} ms after a slow trial went out`);
    console.log(`# passive: with a 15 s trial in flight, cell 3's traffic was back ${back.toFixed(0)} ms after the trial was sent (trial spacing 1000 ms)`);
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

  test("a cell answering 502, 503 or 504 is not opened: a status is the cell's choice", async () => {
    const to2 = { cookie: sessionCookie(2) };
    for (let i = 0; i < 10; i++) {
      for (const status of ["502", "503", "504"]) {
        const r = await timed(`${stack.url}/dashboard`, { ...to2, "x-demo-status": status });
        assert.equal(r.status, Number(status));
        assert.equal(r.cell, "2", "answered by the cell, never refused by the router");
      }
    }
    assert.equal((await timed(`${stack.url}/dashboard`, to2)).cell, "2");
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
    // A client asking the cells for 503s cannot steer the spread: no
    // status a cell answers opens its circuit.
    for (let i = 0; i < 30; i++) {
      const r = await timed(`${stack.urls[i % 2]}/users/sign_in`, { "x-demo-status": "503" });
      assert.equal(r.status, 503);
      assert.ok(r.cell, "the cell's own 503, passed on");
    }
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

describe("a rule that counts gateway statuses (tests/e2e/rules/gateway_statuses.json)", () => {
  let stack;
  before(async () => {
    buildTestWorker();
    stack = await startCells({ build: TEST_BUILD, vars: { GITLAB_RULES_CONFIG: "gateway_statuses", GITLAB_CELL_OPEN_MS: "1500" } });
  });
  after(async () => stack && stopCells(stack));

  test("one organization's maintenance 503s (Retry-After) at 10 a second for 10 s refuse no other user", async () => {
    const maintenance = { cookie: sessionCookie(2), "x-demo-status": "503", "x-demo-response-header": "Retry-After: 60" };
    const others = { cookie: sessionCookie(2) };
    const end = performance.now() + 10_000;
    const org = [];
    const users = [];
    const orgLoop = (async () => {
      while (performance.now() < end) {
        org.push(await timed(`${stack.url}/acme/app`, maintenance));
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    const userLoop = (async () => {
      while (performance.now() < end) users.push(await timed(`${stack.url}/dashboard`, others));
    })();
    await Promise.all([orgLoop, userLoop]);
    assert.ok(org.length >= 60, `${org.length} maintenance answers`);
    assert.ok(org.every((r) => r.status === 503 && r.cell === "2"), "every maintenance 503 is the cell's own");
    const refused = users.filter((r) => r.status !== 200 || r.cell !== "2");
    assert.equal(refused.length, 0, `${refused.length} of ${users.length} other users refused`);
    console.log(`# maintenance: ${org.length} 503s with Retry-After for one organization in 10 s; other users of the cell: ${users.length} requests, ${refused.length} refused`);
  });

  test("gateway statuses count in a row: an answer in between starts over, five open the circuit", async () => {
    const to3 = { cookie: sessionCookie(3) };
    const send = (status) => timed(`${stack.url}/dashboard`, status ? { ...to3, "x-demo-status": status } : to3);
    for (const s of ["502", "503", "504", "502"]) assert.equal((await send(s)).cell, "3");
    assert.equal((await send()).status, 200, "an answer: the run starts over");
    for (const s of ["504", "503", "502", "504"]) assert.equal((await send(s)).cell, "3");
    assert.equal((await send()).cell, "3", "four in a row do not open it");
    for (const s of ["502", "502", "502", "502", "502"]) assert.equal((await send(s)).cell, "3");
    const refused = await send();
    assert.equal(refused.status, 503);
    assert.equal(refused.cell, undefined, "refused by the router once five failed in a row");
    await eventually(async () => assert.equal((await send()).cell, "3"), 5000);
  });
});

describe("the probe cannot blackhole a cell", () => {
  let stack;
  // What an attacker's Worker on the same zone could write: a probe record
  // where the router used to read it (the zone-wide Cache API).
  const attacker = {
    name: "attacker",
    modules: true,
    ...runtime(),
    unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }],
    script: `export default { async fetch(req) {
      const { key, body } = await req.json();
      await caches.default.put(key, new Response(body, { headers: { "cache-control": "max-age=600" } }));
      return new Response("written");
    } }`,
  };
  before(async () => {
    stack = await startCells({
      routers: 2,
      extraWorkers: [attacker],
      vars: { GITLAB_CELL_OPEN_MS: "60000", GITLAB_CELL_HEALTH_REFRESH_MS: "500" },
      // Cell 2's health path answers 404, as GitLab's /-/readiness does to
      // an address outside its monitoring allowlist.
      list: (l) => l.map((c) => (c.id === 2 ? { ...c, health_path: "/-/health?x-demo-status=404" } : c)),
    });
  });
  after(async () => stack && stopCells(stack));

  const allAnswered = async (id, n = 20) => {
    for (let i = 0; i < n; i++) {
      for (const url of stack.urls) {
        const r = await timed(`${url}/dashboard`, { cookie: sessionCookie(id) });
        assert.equal(r.status, 200, `cell ${id} refused: ${r.text}`);
        assert.equal(r.cell, String(id));
      }
    }
  };

  test("a health path answering 404 is a misconfigured probe, logged as an error, and marks nothing down", async () => {
    const result = await runCron(stack, 0);
    assert.equal(result.outcome, "ok");
    const summary = await eventually(() => {
      const line = healthLines(stack).find((l) => Array.isArray(l.misconfigured));
      assert.ok(line);
      return line;
    });
    assert.equal(summary.level, "error");
    assert.deepEqual(summary.misconfigured, [2]);
    assert.deepEqual(summary.down, []);
    assert.match(summary.message, /monitoring allowlist/);
    await allAnswered(2);
  });

  test("a record written into the Cache API by another Worker is not read", async () => {
    const ns = createHash("sha256").update(`${stack.vars.GITLAB_TOPOLOGY_SERVICE_URL}\n${stack.vars.GITLAB_PROXY_HOST}`).digest("hex").slice(0, 32);
    const now = Date.now();
    const writer = (await stack.mf.unsafeGetDirectURL("attacker")).toString();
    for (const body of [`cell-health 1 ${now}\n3 0 0 1 refused\n`, `cell-health 2 ${now}\n3 d 0 1 refused\n`]) {
      const r = await fetch(writer, { method: "POST", body: JSON.stringify({ key: `https://gitlab-http-router.internal/${ns}/v1/cell-health`, body }) });
      assert.equal(await r.text(), "written");
      await new Promise((r) => setTimeout(r, 600));
      await allAnswered(3, 5);
    }
  });

  test("a record dated in the future is refused, and the real probe's record is still applied", async () => {
    const kv = await stack.mf.getKVNamespace("ROUTER_CONTROL", "router");
    const tenYears = Date.now() + 10 * 365 * 86_400_000;
    await kv.put("cell-health", `cell-health 2 ${tenYears}\n3 d 0 1 refused\n`);
    await new Promise((r) => setTimeout(r, 600));
    await allAnswered(3, 5);
    // Cell 3 really dies; the cron finds it; every isolate refuses it.
    await killCell(stack, 3);
    await runCron(stack, 0);
    await eventually(async () => {
      const r = await timed(`${stack.urls[1]}/dashboard`, { cookie: sessionCookie(3) });
      assert.equal(r.status, 503);
      assert.equal(r.cell, undefined);
    }, 5000);
  });
});

describe("one circuit report per request", () => {
  // A request to cell 3 that is still waiting for its headers after the
  // headers timeout, and whose fetch then throws (the cell is killed).
  let stack;
  const HEADERS_TIMEOUT_MS = 200;
  before(async () => {
    stack = await startCells({
      vars: { GITLAB_CELL_HEADERS_TIMEOUT_MS: String(HEADERS_TIMEOUT_MS), GITLAB_CELL_FAILURES: "2", GITLAB_CELL_OPEN_MS: "60000" },
    });
  });
  after(async () => stack && stopCells(stack));

  test("a request past the headers timeout whose fetch then throws counts once", async () => {
    const to3 = { cookie: sessionCookie(3) };
    const first = timed(`${stack.url}/dashboard`, { ...to3, "x-demo-delay-ms": "10000" });
    await new Promise((r) => setTimeout(r, 3 * HEADERS_TIMEOUT_MS));
    await killCell(stack, 3);
    const answered = await first;
    assert.equal(answered.status, 502, answered.text);
    await new Promise((r) => setTimeout(r, 100));
    const opened = () => healthLines(stack).filter((l) => /cell 3 .*circuit opened/.test(l.message ?? ""));
    assert.deepEqual(opened(), [], "one request is one failure of the two that open the circuit");
    const from = stack.logs.length;
    const second = await timed(`${stack.url}/dashboard`, to3);
    assert.equal(second.status, 502, `the second request reached the (dead) cell: ${second.text}`);
    const line = requestLogs(stack, from).find((l) => l.path === "/dashboard");
    assert.notEqual(line?.chosen_by, "circuit_open");
    // The second failure opens it.
    await eventually(() => assert.equal(opened().length, 1));
    assert.match(opened()[0].message, /after 2 failures in a row/);
    const refused = await timed(`${stack.url}/dashboard`, to3);
    assert.equal(refused.status, 503);
  });
});

describe("the probe record's read is off the request path", () => {
  // ROUTER_CONTROL through a binding whose reads of the probe record take
  // READ_DELAY_MS (KV's worst case short of the read's 1 s timeout); every
  // other call goes straight to the namespace.
  const READ_DELAY_MS = 800;
  const slowKv = {
    name: "slow-kv",
    modules: true,
    kvNamespaces: { KV: "router-control" },
    script: `export default function (env) {
      return {
        async get(key, options) {
          if (key === "cell-health") {
            console.log("slow-kv: reading cell-health");
            await new Promise((r) => setTimeout(r, ${READ_DELAY_MS}));
          }
          return env.KV.get(key, options);
        },
        put: (key, value, options) => env.KV.put(key, value, options),
      };
    }`,
  };
  let stack;
  before(async () => {
    stack = await startCells({
      control: false,
      vars: { GITLAB_CELL_HEALTH_REFRESH_MS: "500", GITLAB_CELL_OPEN_MS: "60000" },
      extraWorkers: [slowKv],
      routerOptions: [{ wrappedBindings: { ROUTER_CONTROL: "slow-kv" } }],
    });
  });
  after(async () => stack && stopCells(stack));

  test("with the record's read slowed to 800 ms, no request waits for it, and it is still read once per interval and applied", async () => {
    const kv = await stack.mf.getKVNamespace("KV", "slow-kv");
    await kv.put("control", "{}");
    // The probe found cell 3 down (written as the cron writes it).
    await kv.put("cell-health", `cell-health 2 ${Date.now()}\n1 u 200 1 \n2 u 200 1 \n3 d 0 1 refused\n`);
    const from = stack.logs.length;
    const started = performance.now();
    const times = [];
    while (performance.now() - started < 3000) {
      const r = await timed(`${stack.url}/dashboard`, { cookie: sessionCookie(2) });
      assert.equal(r.cell, "2");
      times.push(r.ms);
    }
    const elapsed = performance.now() - started;
    const [first, ...later] = times;
    const slowest = Math.max(...later);
    const reads = stack.logs.slice(from).filter((l) => l.includes("slow-kv: reading cell-health")).length;
    console.log(`# probe record read taking ${READ_DELAY_MS} ms: first request ${first.toFixed(0)} ms (an isolate's first waits at most 200 ms), the next ${later.length} at most ${slowest.toFixed(0)} ms; ${reads} reads in ${elapsed.toFixed(0)} ms (interval 500 ms)`);
    assert.ok(first < 600, `the isolate's first request waited ${first.toFixed(0)} ms`);
    assert.ok(slowest < 400, `a request waited ${slowest.toFixed(0)} ms for the probe record`);
    assert.ok(reads >= 2, `${reads} reads`);
    assert.ok(reads <= Math.ceil(elapsed / 500) + 1, `${reads} reads in ${elapsed.toFixed(0)} ms: more than one per interval`);
    // Read in the background, and applied: cell 3 is refused at once.
    const r = await timed(`${stack.url}/dashboard`, { cookie: sessionCookie(3) });
    assert.equal(r.status, 503, r.text);
    assert.equal(r.cell, undefined);
  });
});
