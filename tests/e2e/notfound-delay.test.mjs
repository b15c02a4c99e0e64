// GITLAB_NOT_FOUND_DELAY_MS through the real worker in workerd, in front of
// `devstack up` (the `cells` ruleset, the Topology Service): a 404 a cell
// returns for a classified request is answered at a deadline drawn once per
// request from the range (counted from the request's start, so how fast or
// slow the cell was does not show); 200s, unclassified requests and the
// router's own answers are not held. The demo cells answer any status asked
// with `x-demo-status`, after `x-demo-delay-ms`.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { startDemoStack, request, requestLogs } from "./harness.mjs";
import { workerdChildren, rss } from "./procs.mjs";

const MIN = 100;
const MAX = 500;
// Router 1 holds its 404s longer, so a hundred of them surely wait at once.
const LONG = "2000-3000";
const MiB = 1024 * 1024;
let stack;

before(async () => {
  stack = await startDemoStack({
    routers: 2,
    vars: { GITLAB_NOT_FOUND_DELAY_MS: `${MIN}-${MAX}` },
    routerVars: [{}, { GITLAB_NOT_FOUND_DELAY_MS: LONG }],
  });
  // Warm: wasm instantiated, cell 2's group classified.
  for (const url of stack.urls) for (let i = 0; i < 5; i++) await request(`${url}/cell2-group/warm`);
});

after(async () => {
  await stack?.stop();
});

/** Milliseconds `path` takes through the router, and its status. */
async function timed(path, headers = {}, router = 0) {
  const started = performance.now();
  let bytes = 0;
  const res = await request(`${stack.urls[router]}${path}`, { headers, sink: (chunk) => (bytes += chunk.length) });
  return { ms: performance.now() - started, status: res.status, cell: res.headers["x-demo-cell"], bytes };
}

const quantile = (sorted, q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];

/**
 * The two-sample Kolmogorov–Smirnov test: the largest distance between
 * the two empirical distributions, and its p-value (the asymptotic
 * Kolmogorov distribution, with Stephens' small-sample correction).
 */
function kolmogorovSmirnov(a, b) {
  const x = [...a].sort((p, q) => p - q);
  const y = [...b].sort((p, q) => p - q);
  let i = 0;
  let j = 0;
  let d = 0;
  while (i < x.length && j < y.length) {
    const v = Math.min(x[i], y[j]);
    while (i < x.length && x[i] <= v) i++;
    while (j < y.length && y[j] <= v) j++;
    d = Math.max(d, Math.abs(i / x.length - j / y.length));
  }
  const en = Math.sqrt((x.length * y.length) / (x.length + y.length));
  const lambda = (en + 0.12 + 0.11 / en) * d;
  let p = 0;
  for (let k = 1; k <= 100; k++) p += 2 * (-1) ** (k - 1) * Math.exp(-2 * k * k * lambda * lambda);
  return { d, p: Math.min(1, Math.max(0, p)) };
}

test("200 cell 404s for a classified path are delayed, spread over the range", async (t) => {
  const times = [];
  // 20 rounds of 10 at once (few enough that queueing on two cores does
  // not blur the figures): 200 delays in about 6 s.
  for (let round = 0; round < 20; round++) {
    const batch = await Promise.all(
      Array.from({ length: 10 }, (_, i) => timed(`/cell2-group/missing-${round}-${i}`, { "x-demo-status": "404" })),
    );
    for (const r of batch) {
      assert.equal(r.status, 404);
      assert.equal(r.cell, "2");
      times.push(r.ms);
    }
  }
  times.sort((a, b) => a - b);
  const figures = {
    n: times.length,
    min: Math.round(times[0]),
    p10: Math.round(quantile(times, 0.1)),
    p25: Math.round(quantile(times, 0.25)),
    p50: Math.round(quantile(times, 0.5)),
    p75: Math.round(quantile(times, 0.75)),
    p90: Math.round(quantile(times, 0.9)),
    max: Math.round(times[times.length - 1]),
  };
  const buckets = Array(8).fill(0);
  for (const ms of times) buckets[Math.min(7, Math.max(0, Math.floor(((ms - MIN) / (MAX - MIN)) * 8)))]++;
  t.diagnostic(`404 delays (ms, client side) ${JSON.stringify(figures)}; per eighth of the range ${JSON.stringify(buckets)}`);
  // Never shorter than the range's floor (timers may run a little late,
  // never early), never far past its ceiling (a loaded machine adds
  // its queueing on top).
  assert.ok(times[0] >= MIN - 5, `fastest ${times[0]} ms`);
  assert.ok(times[times.length - 1] <= MAX + 500, `slowest ${times[times.length - 1]} ms`);
  // Spread: uniform over 100-500 has quartiles near 200, 300 and 400, so
  // half the delays lie in a 200 ms band; one fixed delay would put them
  // within a few ms of each other.
  assert.ok(figures.p75 - figures.p25 > 100, `interquartile ${figures.p75 - figures.p25} ms`);
  assert.ok(figures.p50 > MIN + 100 && figures.p50 < MAX + 200, `p50 ${figures.p50}`);
  assert.ok(buckets.filter((b) => b > 0).length >= 6, `buckets ${buckets}`);
});

// The KS test's level: at 0.05 a router that leaks nothing fails one run
// in twenty by chance; at 0.001 one in a thousand, while a 60 ms
// difference in 500 samples each still gives p far below it (simulated
// over 2,000 runs of uniform 100–500 ms delays: never missed).
const KS_LEVEL = 0.001;

test("404s from a fast cell and a slow one take the same time: 500 samples each, Kolmogorov–Smirnov p > 0.001", async (t) => {
  // Cell 2 answers its 404s at once, cell 3 60 ms later: without a
  // deadline the router would add its delay on top and the difference
  // would show. Sent interleaved, 20 at a time.
  const fast = [];
  const slow = [];
  for (let round = 0; round < 50; round++) {
    const batch = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        i % 2 === 0
          ? timed(`/cell2-group/gone-${round}-${i}`, { "x-demo-status": "404" })
          : timed(`/cell3-group/gone-${round}-${i}`, { "x-demo-status": "404", "x-demo-delay-ms": "60" }),
      ),
    );
    for (const [i, r] of batch.entries()) {
      assert.equal(r.status, 404);
      assert.equal(r.cell, i % 2 === 0 ? "2" : "3");
      (i % 2 === 0 ? fast : slow).push(r.ms);
    }
  }
  const { d, p } = kolmogorovSmirnov(fast, slow);
  const med = (xs) => Math.round(quantile([...xs].sort((a, b) => a - b), 0.5));
  const min = (xs) => Math.round(Math.min(...xs));
  t.diagnostic(`fast cell: ${fast.length} 404s, min ${min(fast)} ms, median ${med(fast)} ms; slow cell (+60 ms): ${slow.length}, min ${min(slow)} ms, median ${med(slow)} ms; KS D ${d.toFixed(3)}, p ${p.toFixed(3)}`);
  console.log(`# 404 deadline: KS D ${d.toFixed(3)}, p ${p.toFixed(3)} (fast min ${min(fast)} ms, slow min ${min(slow)} ms)`);
  assert.ok(p > KS_LEVEL, `the two cells' 404 timings differ: D ${d.toFixed(3)}, p ${p.toFixed(4)}`);
  // The test can tell them apart when they differ: the slow cell's own
  // time, measured beside the router, without a deadline.
  assert.ok(kolmogorovSmirnov(fast, slow.map((ms) => ms + 60)).p < KS_LEVEL, "the test has the power to see 60 ms");
});

test("200s, unclassified 404s and other statuses are not delayed", async (t) => {
  const ok = [];
  for (let round = 0; round < 20; round++) {
    const batch = await Promise.all(Array.from({ length: 10 }, (_, i) => timed(`/cell2-group/found-${round}-${i}`)));
    for (const r of batch) {
      assert.equal(r.status, 200);
      ok.push(r.ms);
    }
  }
  ok.sort((a, b) => a - b);
  t.diagnostic(`200s (ms): p50 ${Math.round(quantile(ok, 0.5))}, p90 ${Math.round(quantile(ok, 0.9))}, max ${Math.round(ok[ok.length - 1])}`);
  // Medians: a loaded machine (two cores, other builds) puts a tail on
  // any single request; a delayed 404 is never under MIN.
  assert.ok(quantile(ok, 0.5) < MIN, `p50 of the 200s is ${quantile(ok, 0.5)} ms`);

  const median = async (path, headers, expect) => {
    const times = [];
    for (let i = 0; i < 20; i++) {
      const r = await timed(path, headers);
      assert.equal(r.status, expect.status);
      assert.equal(r.cell, expect.cell);
      times.push(r.ms);
    }
    return quantile(times.sort((a, b) => a - b), 0.5);
  };
  // The root page goes to the legacy cell by the ruleset's last rule, no
  // classification: its 404 is not delayed.
  const root = await median("/", { "x-demo-status": "404" }, { status: 404, cell: "1" });
  assert.ok(root < MIN, `unclassified 404s took ${root} ms (median)`);
  const line = requestLogs(stack).findLast((l) => l.path === "/");
  assert.equal(line.action, "proxy");
  // Other statuses from the cell are not delayed either.
  const gone = await median("/cell2-group/gone", { "x-demo-status": "410" }, { status: 410, cell: "2" });
  assert.ok(gone < MIN, `410s took ${gone} ms (median)`);
  t.diagnostic(`medians: unclassified 404 ${Math.round(root)} ms, classified 410 ${Math.round(gone)} ms`);
});


// While the router holds a 404, workerd (1.20261117) reads ahead up to
// about 1 MiB of its body (the 1.20260426 runtime about 0.15 MiB): memory
// per held 404 is the runtime's read-ahead, not the body. With 4 MiB bodies
// a router that buffered them would grow by N × 4 MiB.
test("100 delayed 404s waiting at once hold no bodies: workerd's memory grows by its read-ahead, not by the bodies", async (t) => {
  const [workerd] = [...workerdChildren()];
  assert.ok(workerd, "workerd's pid");
  const N = 100;
  const BODY = 4 * MiB; // 400 MiB if they were buffered
  await sleep(300);
  const before = rss(workerd);
  let during = before;
  let done = false;
  const sends = [];
  const firstDone = [];
  const all = Promise.all(
    Array.from({ length: N }, (_, i) => {
      sends.push(performance.now());
      return timed(`/cell2-group/big-missing-${i}`, { "x-demo-status": "404", "x-demo-response-bytes": String(BODY) }, 1).then((r) => {
        firstDone.push(performance.now());
        return r;
      });
    }),
  ).finally(() => (done = true));
  while (!done) {
    during = Math.max(during, rss(workerd));
    await sleep(20);
  }
  const results = await all;
  for (const r of results) {
    assert.equal(r.status, 404);
    assert.equal(r.bytes, BODY, "the whole body arrives after the delay");
    assert.ok(r.ms >= 2000 - 5, `a ${r.ms} ms answer`);
  }
  const lastSend = Math.max(...sends);
  const firstAnswer = Math.min(...firstDone);
  t.diagnostic(
    `${N} delayed 404s of ${BODY} bytes: all sent ${Math.round(firstAnswer - lastSend)} ms before the first answer; workerd RSS before ${(before / MiB).toFixed(1)} MiB, max during ${(during / MiB).toFixed(1)} MiB`,
  );
  assert.ok(firstAnswer > lastSend, `all ${N} were waiting at once`);
  const perHeld = (during - before) / N;
  t.diagnostic(`${(perHeld / MiB).toFixed(2)} MiB per held 404`);
  assert.ok(perHeld < 1.5 * MiB, `RSS grew by ${((during - before) / MiB).toFixed(1)} MiB, ${(perHeld / MiB).toFixed(2)} MiB per held 404 of ${BODY / MiB} MiB`);
});
