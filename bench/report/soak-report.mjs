// The soak's HTML report (docs/soak.md, "Report"): from the JSON a run
// writes (target/soak/latest.json), one self-contained page beside it
// (latest.html): the verdict, a timeline per second across the phases
// (operations, documented failure paths, failures by kind, p50/p99 of the
// plain requests, each workerd generation's RSS) with the fault windows
// shaded, the per-phase table, the generations and the first failures.
//
//   node bench/report/soak-report.mjs [target/soak/latest.json [out.html]]   # writes target/soak/latest.html
import { esc, page, table, when } from "./html.mjs";
import { reportCommand, writeReport } from "./write.mjs";
import { timeChart } from "./svg.mjs";

const OPS = [
  ["request", "plain requests", "#0969da"],
  ["upload", "uploads", "#1a7f37"],
  ["download", "downloads", "#4ac26b"],
  ["longpoll", "long-polls", "#bf8700"],
  ["websocket", "WebSockets", "#8250df"],
];
// The documented failure paths (counted, not failures), as the soak's table names them.
const PATHS = [
  ["fallback_legacy", "legacy fb (service could not answer)", "#bf8700"],
  ["stale_served", "stale (expired entry stood in)", "#0969da"],
  ["fallback_unscheduled", "fb load (logged failure path outside a fault)", "#8250df"],
  ["router_5xx_intended", "5xx ok (cell 4 down)", "#57606a"],
  ["keepalive_retries", "ka retry (reset keep-alive sent again)", "#bc4c00"],
];
const FAILURE_COLORS = ["#cf222e", "#fa4549", "#82071e", "#ff8182", "#a40e26", "#ffaba8", "#660018", "#d1242f", "#ff6a69"];
const WINDOWS = {
  service: ["the service failing", "#cf222e"],
  "not-found": ["the service answering 404", "#bf8700"],
  "cell4-down": ["cell 4 down", "#8250df"],
};
const windowOf = (kind) => WINDOWS[kind] ?? [kind, "#57606a"];
const GEN_COLORS = ["#0969da", "#1a7f37", "#bf8700", "#8250df", "#cf222e", "#57606a"];

/** The report's HTML for a soak run's JSON (`details`: what bench/soak.mjs writes). */
export function soakReport(details) {
  const tl = details.timeline;
  if (!tl?.samples?.length) throw new Error("the soak's JSON has no timeline (timeline.samples): written by a soak before the per-second samples");
  const rows = details.rows;
  const o = details.options;
  const iv = tl.interval_ms;
  const xMax = Math.max(rows[rows.length - 1].to_ms, tl.samples.length * iv);
  const phases = rows.map((r) => ({ name: r.phase, from: r.from_ms, to: r.to_ms }));
  const bands = [];
  for (const w of details.fault_windows) {
    const [, color] = windowOf(w.kind);
    bands.push({ from: w.from_ms, to: w.to_ms, color, opacity: 0.2 });
    bands.push({ from: w.to_ms, to: w.to_ms + w.grace_ms, color, opacity: 0.07 });
  }
  const kinds = [...new Set(details.fault_windows.map((w) => w.kind))];
  const bandKeys = [...kinds.map((k) => ({ name: windowOf(k)[0], color: windowOf(k)[1], opacity: 0.35 })), { name: "its grace (fallbacks still documented)", color: "#57606a", opacity: 0.15 }];
  const common = { xMax, intervalMs: iv, phases, bands, keys: bandKeys };
  const at = (f) => tl.samples.map((s) => [s.t_ms, f(s)]);

  const failureKinds = [...new Set(tl.samples.flatMap((s) => Object.keys(s.failures ?? {})))].sort();
  const generations = [...new Set(tl.samples.flatMap((s) => Object.keys(s.rss_mib ?? {})))].sort((a, b) => a - b);
  const charts = [
    timeChart({ ...common, id: "operations", title: "Operations started per second, by kind", yLabel: "per second", series: OPS.map(([op, name, color]) => ({ name, color, kind: "bar", points: at((s) => s.by_op?.[op] ?? 0) })) }),
    timeChart({ ...common, id: "failure-paths", title: "Documented failure paths per second (counted, not failures)", yLabel: "per second", series: PATHS.map(([k, name, color]) => ({ name, color, kind: "bar", points: at((s) => s[k] ?? 0) })) }),
    timeChart({ ...common, id: "failures", title: `Failures per second, by kind (${details.failures_total} in all)`, yLabel: "per second", series: failureKinds.map((k, i) => ({ name: k, color: FAILURE_COLORS[i % FAILURE_COLORS.length], kind: "bar", points: at((s) => s.failures?.[k] ?? 0) })) }),
    timeChart({ ...common, id: "latency", title: "Plain requests: p50 and p99 per second, ms", yLabel: "ms", series: [
      { name: "p50", color: "#0969da", kind: "line", points: at((s) => s.p50_ms ?? null) },
      { name: "p99", color: "#cf222e", kind: "line", points: at((s) => s.p99_ms ?? null) },
    ] }),
    timeChart({ ...common, id: "rss", title: "workerd RSS per generation, MiB (VmRSS, sampled every second)", yLabel: "MiB", series: generations.map((g, i) => ({ name: `generation #${g}`, color: GEN_COLORS[i % GEN_COLORS.length], kind: "line", points: at((s) => s.rss_mib?.[g] ?? null) })) }),
  ];

  const n = (x) => (x === null || x === undefined ? "-" : x);
  const phaseTable = table(
    ["phase", "s", "reqs", "5xx ok", "5xx BAD", "legacy fb", "stale", "stale!", "fb load", "wrong", "corrupt", "xport", "ka retry", "ws msgs", "ws lost", "lp", "lp cut", "p50 ms", "p99 ms", "RSS MiB start/peak/end"],
    rows.map((r) => [r.phase, r.seconds, r.requests, r.router_5xx_intended, r.router_5xx_unintended, r.fallback_legacy, r.stale_served, r.stale_ignored, r.fallback_unscheduled, r.wrong_cell, r.corrupt, r.transport_errors, r.keepalive_retries, r.ws_messages, r.ws_lost, r.longpolls, r.longpolls_cut, n(r.p50_ms), n(r.p99_ms), `${r.rss_mib.start}/${r.rss_mib.peak}/${r.rss_mib.end}`]),
  );
  const genTable = table(
    ["generation", "pid", "requests", "RSS start", "warm", "peak", "end", "growth MiB", "bounded", "JS heap used start → end (peak)", "wasm memory MiB"],
    details.memory.map((m) => [`#${m.generation}`, m.pid, m.requests, m.start_mib, m.warm_mib, m.peak_mib, m.end_mib, m.growth_mib, m.bounded ? "yes" : { text: "NO", cls: "bad" }, m.own ? `${m.own.heap_used.start} → ${m.own.heap_used.end} (${m.own.heap_used.peak})` : "not read", m.own?.wasm ? `${m.own.wasm.start} → ${m.own.wasm.end}` : "-"]),
  );
  const failures = details.failures.slice(0, 20);
  const failureTable = failures.length
    ? table(
        ["phase", "at ms", "kind", "op", "key", "want", "got", "status", "detail"],
        failures.map((f) => [f.phase, f.at_ms, f.kind, f.op, f.key_kind, n(f.want), n(f.got), n(f.status), { text: f.detail, cls: "text" }]),
      )
    : "<p>None.</p>";
  const total = rows.reduce((a, r) => a + r.requests, 0);
  const load = details.load_average ? `, load average ${details.load_average[0].toFixed(1)} at the start, ${details.load_average[1].toFixed(1)} at the end` : "";
  const title = `Soak (${o.mode}, ${o.worker === "null" ? "the null worker" : "the router"}): ${details.ok ? "passed" : "FAILED"}`;
  const body = `<h1>Soak (${esc(o.mode)}, ${o.worker === "null" ? "the null worker" : "the router"}): <span class="${details.ok ? "ok" : "bad"}">${details.ok ? "passed" : "FAILED"}</span></h1>
<p class="meta">${esc(when(details.date))}${details.commit ? `, commit ${esc(details.commit)}` : ""}: ${esc(o.clients)} clients, ${esc(o.seconds)} s schedule, seed ${esc(o.seed)}; stack start-up ${esc(details.startup_ms)} ms, wall ${esc(Math.round(details.wall_ms / 1000))} s${esc(load)}; ${esc(total.toLocaleString("en"))} operations, ${esc(details.failures_total)} failures. Every chart counts an operation in the second it started; shaded: the fault windows, lighter their grace.</p>
<h2>Timeline</h2>
${charts.join("\n")}
<h2>Per phase</h2>
${phaseTable}
<h2>workerd generations</h2>
${genTable}
<h2>Failures (the first ${esc(failures.length)} of ${esc(details.failures_total)})</h2>
${failureTable}
<p class="meta">Written by <code>bash bench/soak.sh</code> (bench/report/soak-report.mjs) from its JSON; docs/soak.md says what each column means.</p>`;
  return page(title, body);
}

/** Writes the report for the JSON at `jsonPath` beside it (same name, .html) or at `htmlPath`; its path. */
export const writeSoakReport = (jsonPath, htmlPath) => writeReport(soakReport, jsonPath, htmlPath);

reportCommand(import.meta.url, soakReport, "target/soak/latest.json");
