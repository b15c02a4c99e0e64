// The reports as files (bench/report/): self-contained (no script,
// stylesheet, font or image from anywhere, no external URL), every text
// escaped, a chart of broken figures refused; and the soak's per-second
// samples (bench/soak-timeline.mjs) counting what its phase rows count.
import { test } from "node:test";
import assert from "node:assert/strict";
import { benchReport } from "../../bench/report/bench-report.mjs";
import { soakReport } from "../../bench/report/soak-report.mjs";
import { barChart, ticks, timeChart } from "../../bench/report/svg.mjs";
import { timeline } from "../../bench/soak-timeline.mjs";
import { benchFixture, soakFixture } from "./report-fixtures.mjs";

/** Why `html` is not self-contained: every src/href that leaves the page, scripts, imports, external CSS urls. */
function externalReferences(html) {
  const found = [];
  for (const m of html.matchAll(/\s(?:src|href|xlink:href|action|poster|srcset)\s*=\s*("([^"]*)"|'([^']*)'|([^\s>]+))/gi)) {
    const v = m[2] ?? m[3] ?? m[4];
    if (!v.startsWith("#")) found.push(m[0].trim());
  }
  for (const m of html.matchAll(/<(script|link|iframe|img|object|embed)\b[^>]*>/gi)) found.push(m[0]);
  for (const m of html.matchAll(/@import|url\(\s*["']?(?!#)[^)]*\)/gi)) found.push(m[0]);
  for (const m of html.matchAll(/https?:\/\/[^\s"'<>]*/gi)) found.push(m[0]);
  return found;
}

test("the soak and bench reports reference nothing outside themselves", () => {
  for (const [name, html] of [["soak", soakReport(soakFixture())], ["bench", benchReport(benchFixture())]]) {
    assert.deepEqual(externalReferences(html), [], `${name} report`);
    assert.match(html, /<svg class="chart"/, `${name} report has charts`);
  }
  // The check itself finds what it is for.
  const planted = externalReferences('<link rel="stylesheet" href="https://fonts.example/css"><img src="x.png"><p style="background:url(a.png)">');
  for (const bit of ['href="https://fonts.example/css"', 'src="x.png"', "<link", "<img", "url(a.png)"]) assert.ok(planted.some((f) => f.includes(bit)), `finds ${bit}: ${planted}`);
});

test("text from the run is escaped in the soak report", () => {
  const d = soakFixture();
  d.failures = [{ phase: "baseline", at_ms: 5, kind: "wrong-cell", op: "request", key_kind: "<b>ns</b>", want: 2, got: 1, status: 200, detail: `<script>alert("x")</script> & more` }];
  d.failures_total = 1;
  d.options.seed = "<img src=x>";
  const html = soakReport(d);
  assert.ok(!html.includes("<script>") && !html.includes("<b>ns</b>") && !html.includes("<img"), "no markup from the run's text");
  assert.ok(html.includes("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; more"));
  assert.ok(html.includes("&lt;img src=x&gt;"));
});

test("a chart of figures that are not numbers is refused, not drawn", () => {
  const base = { id: "c", title: "t", yLabel: "y", xMax: 3000, intervalMs: 1000 };
  assert.throws(() => timeChart({ ...base, series: [{ name: "p50", color: "#000", kind: "line", points: [[0, 1], [1000, NaN]] }] }), /not a finite number/);
  assert.throws(() => timeChart({ ...base, xMax: 0, series: [{ name: "p50", color: "#000", kind: "line", points: [[0, 1]] }] }), /not a finite number/);
  assert.throws(() => barChart({ id: "b", title: "t", unit: "µs", rows: [{ label: "x", segments: [{ name: "cpu", value: undefined, color: "#000" }] }] }), /not a number/);
  // Gaps (null) are not errors: a line breaks there.
  const ok = timeChart({ ...base, series: [{ name: "p50", color: "#000", kind: "line", points: [[0, 1], [1000, null], [2000, 3]] }] });
  assert.match(ok, /d="M\S+ \S+h1M\S+ \S+h1"/, "two lone points, each a 1 px stroke");
  assert.match(ok, /data-series="1"/);
});

test("axis ticks start at 0 and reach the largest value in steps of 1, 2 or 5 × 10^k", () => {
  assert.deepEqual(ticks(97), [0, 20, 40, 60, 80, 100]);
  assert.deepEqual(ticks(2309, 4), [0, 1000, 2000, 3000]);
  assert.deepEqual(ticks(0.3), [0, 0.1, 0.2, 0.3]);
  assert.deepEqual(ticks(0), [0, 1]);
});

test("the timeline counts per interval what the phase row counted, by when the operation started", () => {
  const tl = timeline(1000);
  const row = { requests: 0, fallback_legacy: 0, stale_served: 0, router_5xx_intended: 0, fallback_unscheduled: 0, keepalive_retries: 0, by_op: {}, latencies: [] };
  const judge = (o) => {
    row.requests++;
    row.by_op[o.op] = (row.by_op[o.op] ?? 0) + 1;
    if (o.op === "request") row.latencies.push(o.ms);
    if (o.legacy) row.fallback_legacy++;
  };
  for (const o of [{ t: 100, op: "request", ms: 5 }, { t: 900, op: "request", ms: 50, legacy: true }, { t: 2500, op: "upload" }, { t: 2600, op: "request", ms: 7 }]) tl.within(o.t, row, () => judge(o));
  tl.failure(2600, "wrong-cell");
  tl.rss(1200, 0, 100 * 1024 * 1024);
  tl.rss(1900, 0, 101.26 * 1024 * 1024);
  tl.rss(1900, 1, 50 * 1024 * 1024);
  assert.deepEqual(tl.toJSON(), {
    interval_ms: 1000,
    samples: [
      { t_ms: 0, requests: 2, fallback_legacy: 1, by_op: { request: 2 }, p50_ms: 50, p99_ms: 50 },
      { t_ms: 1000, rss_mib: { 0: 101.3, 1: 50 } },
      { t_ms: 2000, requests: 2, by_op: { upload: 1, request: 1 }, failures: { "wrong-cell": 1 }, p50_ms: 7, p99_ms: 7 },
    ],
  });
  // The per-interval counts add up to the row's.
  const samples = tl.toJSON().samples;
  assert.equal(samples.reduce((a, s) => a + (s.requests ?? 0), 0), row.requests);
});
