// The reports open in a browser and their charts render: headless Chromium
// (Debian's package; bash scripts/setup.sh --registry installs it) loads the
// soak report made from a short soak's JSON (fixtures/soak-short.json,
// written by `bash bench/soak.sh --short`, trimmed) and the benchmark's
// report, and every chart has a size and every series it drew a box with
// an extent; a chart broken in the page (a path of NaN) is caught.
import { before, test } from "node:test";
import assert from "node:assert/strict";
import { benchReport } from "../../bench/report/bench-report.mjs";
import { soakReport } from "../../bench/report/soak-report.mjs";
import { renderProblems, renderedCharts, requireChromium } from "./chromium.mjs";
import { benchFixture, soakFixture } from "./report-fixtures.mjs";

before(() => requireChromium());

test("the soak report's charts render in Chromium: a timeline of operations, failure paths, failures, latency and RSS", async () => {
  const charts = await renderedCharts(soakReport(soakFixture()));
  assert.deepEqual(charts.map((c) => c.id), ["operations", "failure-paths", "failures", "latency", "rss"]);
  assert.deepEqual(renderProblems(charts), []);
  const byId = Object.fromEntries(charts.map((c) => [c.id, c]));
  // A short soak: every kind of operation, documented fallbacks under the faults, two lines of latency, three generations.
  assert.deepEqual(byId.operations.series.map((s) => s.name), ["plain requests", "uploads", "downloads", "long-polls", "WebSockets"]);
  assert.ok(byId["failure-paths"].series.length >= 2, "fallbacks and stale answers drawn");
  assert.deepEqual(byId.latency.series.map((s) => s.name), ["p50", "p99"]);
  assert.deepEqual(byId.rss.series.map((s) => s.name), ["generation #0", "generation #1", "generation #2"]);
  for (const c of charts) assert.ok(c.width >= 1000 && c.height >= 150, `${c.id}: ${c.width} × ${c.height}`);
  for (const s of [...byId.operations.series, ...byId.latency.series]) assert.ok(s.width > 900, `${s.name} spans the run: ${s.width} px`);
  // Each generation's line spans its life; together they span the run.
  assert.ok(byId.rss.series.reduce((a, s) => a + s.width, 0) > 900, "the generations' RSS spans the run");
});

test("a failed run's failures are drawn by kind, in the seconds they happened", async () => {
  const d = soakFixture();
  d.timeline.samples[30].failures = { "wrong-cell": 3 };
  d.timeline.samples[31].failures = { "wrong-cell": 1, transport: 2 };
  d.failures_total = 6;
  const charts = await renderedCharts(soakReport(d));
  assert.deepEqual(renderProblems(charts), []);
  const failures = charts.find((c) => c.id === "failures");
  assert.deepEqual(failures.series.map((s) => s.name), ["transport", "wrong-cell"]);
  assert.ok(failures.series.every((s) => s.width > 0 && s.height > 0 && s.width < 30), "two seconds' bars");
});

test("a chart broken in the page is caught: NaN in a series' path renders nothing", async () => {
  const html = soakReport(soakFixture());
  const broken = html.replace(/(<figure id="latency">[\s\S]*?<path class="series" data-name="p50" d=")[^"]*"/, '$1M NaN NaN L NaN NaN"');
  assert.notEqual(broken, html, "the p50 path was found and broken");
  const problems = renderProblems(await renderedCharts(broken));
  assert.deepEqual(problems, ["latency: series p50 rendered empty (0 × 0)"]);
});

test("the benchmark report's charts render in Chromium: CPU per request per concurrency and the cold start", async () => {
  const charts = await renderedCharts(benchReport(benchFixture()));
  assert.deepEqual(charts.map((c) => c.id), ["cpu-c8", "cpu-c32", "cold-wall", "cold-cpu"]);
  assert.deepEqual(renderProblems(charts), []);
  const bars = (id) => charts.find((c) => c.id === id).series.map((s) => s.name);
  // null, floor-log, peer-log and passthrough; the cold start's five configurations, ready and first request each.
  assert.deepEqual(bars("cpu-c8"), ["null: yardsticks and baselines", "floor-log: yardsticks and baselines", "peer-log: yardsticks and baselines", "passthrough: the router"]);
  assert.equal(bars("cold-cpu").length, 10);
});
