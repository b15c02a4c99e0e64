// The benchmark's HTML report (docs/benchmark.md, "Report"): from a timed
// run's JSON (target/bench/latest.json), one self-contained page beside it
// (latest.html): CPU per request of every configuration against the floor
// and the peer, per concurrency, and the cold start (wall and CPU, ready
// and the first request, over the floor), with the run's tables.
//
//   node bench/report/bench-report.mjs [target/bench/latest.json [out.html]]   # writes target/bench/latest.html
import { coldVerdicts, fmt, targetVerdicts } from "../driver/report.mjs";
import { esc, page, table, when } from "./html.mjs";
import { reportCommand, writeReport } from "./write.mjs";
import { barChart } from "./svg.mjs";

// The yardsticks and baselines; every other configuration is the router.
const YARDSTICKS = new Set(["null", "null-log", "rust-null", "rust-floor", "workers-rs", "floor", "floor-log", "peer", "peer-log"]);
const COLOR = { router: "#0969da", yardstick: "#8c959f", floor: "#1a7f37", peer: "#bf8700" };
const kindOf = (config) => (YARDSTICKS.has(config) ? "yardstick" : "router");

const signed = (x, d = 0) => (x === null || x === undefined ? "" : `${x >= 0 ? "+" : "−"}${fmt(Math.abs(x), d)}`);

/** CPU per request at one concurrency: a bar per configuration, the floor and the peer as lines. */
function cpuChart(summary, c) {
  const rows = summary.filter((s) => s.concurrency === c);
  const get = (name) => rows.find((s) => s.config === name);
  const floor = get("floor-log");
  const peer = get("peer-log");
  const refs = [];
  if (floor) refs.push({ value: floor.cpu_us_per_req, label: `floor-log ${fmt(floor.cpu_us_per_req)} µs`, color: COLOR.floor });
  if (peer) refs.push({ value: peer.cpu_us_per_req, label: `peer-log ${fmt(peer.cpu_us_per_req)} µs`, color: COLOR.peer });
  return barChart({
    id: `cpu-c${c}`,
    title: `CPU per request at c=${c}, µs (workerd, all threads; median over rounds, whisker: fastest–slowest round)`,
    unit: "µs CPU per request",
    refs,
    // The cold-cache configuration costs ten times the rest: cut at 2.5 × the peer.
    cap: peer ? 2.5 * peer.cpu_us_per_req : Infinity,
    rows: rows.map((s) => ({
      label: s.config,
      segments: [{ name: kindOf(s.config) === "router" ? "the router" : "yardsticks and baselines", value: s.cpu_us_per_req, color: COLOR[kindOf(s.config)] }],
      range: Number.isFinite(s.cpu_us_per_req_min) && Number.isFinite(s.cpu_us_per_req_max) && s.rounds > 1 ? [s.cpu_us_per_req_min, s.cpu_us_per_req_max] : undefined,
      text: `${fmt(s.cpu_us_per_req)} µs${floor && s.vs_floor_log_cpu_extra_us !== null ? ` (${signed(s.vs_floor_log_cpu_extra_us)} vs floor-log)` : ""}`,
    })),
  });
}

/** The cold start: ready and the first request stacked, wall time or CPU, the floor and the peer as lines. */
function coldChart(cold, what) {
  const wall = what === "wall";
  const [ready, first, total, over] = wall ? ["ready_ms", "first_ms", "total_ms", "over_floor_total_ms"] : ["cpu_ready_ms", "cpu_first_ms", "cpu_total_ms", "over_floor_cpu_ms"];
  const get = (name) => cold.summary.find((x) => x.config === name);
  const refs = [];
  if (get("floor")) refs.push({ value: get("floor")[total], label: `floor ${fmt(get("floor")[total], 1)} ms`, color: COLOR.floor });
  if (get("peer")) refs.push({ value: get("peer")[total], label: `peer ${fmt(get("peer")[total], 1)} ms`, color: COLOR.peer });
  return barChart({
    id: `cold-${what}`,
    title: wall ? "Cold start, wall time, ms: ready (Miniflare constructed → workerd ready, script evaluated) + the first routed request (median of the samples)" : "Cold start, workerd CPU, ms (all threads, schedstat): ready + the first routed request (median of the samples)",
    unit: wall ? "ms wall time" : "ms CPU",
    refs,
    rows: cold.summary.map((x) => ({
      label: x.config,
      segments: [
        { name: "ready", value: x[ready], color: "#54aeff" },
        { name: "first request", value: x[first], color: "#0550ae" },
      ],
      text: `${fmt(x[total], 1)} ms${x[over] !== null && x.config !== "floor" ? ` (${signed(x[over], 1)} vs floor)` : ""}`,
    })),
  });
}

/** The report's HTML for a timed run's result (what bench/driver/timed.mjs writes). */
export function benchReport(result) {
  const { meta, summary, cold_start: cold, streaming = [], memory = [], sizes, native } = result;
  const o = meta.options;
  const concurrency = [...new Set(summary.map((s) => s.concurrency))];
  const parts = [];
  parts.push(`<h2>CPU per request against the floor and the peer</h2>`);
  if (!summary.some((s) => s.config === "floor-log")) parts.push(`<p>No floor and peer in this run (no peers found): the bars stand alone.</p>`);
  for (const c of concurrency) parts.push(cpuChart(summary, c));
  const verdicts = targetVerdicts(summary, concurrency);
  if (verdicts.length && summary.some((s) => s.config === "floor-log")) parts.push(`<p>Targets:</p><ul>${verdicts.map((v) => `<li>${esc(v)}</li>`).join("")}</ul>`);
  parts.push(
    table(
      ["config", "conc", "req/s", "p50 ms", "p99 ms", "CPU µs/req", "CPU +µs over floor-log", "req/s × peer-log", "CPU +µs over peer-log", "TS calls/req"],
      summary.map((s) => [s.config, s.concurrency, fmt(s.rps), fmt(s.p50_ms, 2), fmt(s.p99_ms, 2), fmt(s.cpu_us_per_req), fmt(s.vs_floor_log_cpu_extra_us), fmt(s.vs_peer_log_rps, 2), fmt(s.vs_peer_log_cpu_extra_us), fmt(s.ts_calls_per_req, 2)]),
    ),
  );
  parts.push(`<h2>Cold start</h2>`);
  if (cold?.summary?.length) {
    parts.push(coldChart(cold, "wall"), coldChart(cold, "cpu"));
    const cv = coldVerdicts(cold.summary);
    if (cv.length) parts.push(`<ul>${cv.map((v) => `<li>${esc(v)}</li>`).join("")}</ul>`);
    parts.push(
      table(
        ["config", "samples", "ready ms", "first ms", "total ms", "over floor ms", "CPU ready ms", "CPU first ms", "CPU total ms", "CPU over floor ms"],
        cold.summary.map((x) => [x.config, x.samples ?? "-", fmt(x.ready_ms, 1), fmt(x.first_ms, 1), fmt(x.total_ms, 1), fmt(x.over_floor_total_ms, 1), fmt(x.cpu_ready_ms, 1), fmt(x.cpu_first_ms, 1), fmt(x.cpu_total_ms, 1), fmt(x.over_floor_cpu_ms, 1)]),
      ),
    );
  } else parts.push(`<p>Not run in this run (BENCH_COLD_SAMPLES=0).</p>`);
  if (streaming.length) {
    parts.push(`<h2>Streaming and memory</h2>`);
    parts.push(table(["config", "transfer", "MiB/s", "ok", "RSS before MiB", "RSS peak MiB", "growth MiB"], streaming.map((s) => [s.config, `${s.direction} ${s.mib} MiB`, fmt(s.mib_per_s), s.ok ? "yes" : { text: "NO", cls: "bad" }, fmt(s.rss_before_mib, 1), fmt(s.rss_peak_mib, 1), fmt(s.rss_growth_mib, 1)])));
    parts.push(table(["config", "idle RSS MiB", "VmHWM MiB", "grows with body size"], memory.map((m) => [m.config, fmt(m.idle_rss_mib, 1), fmt(m.vm_hwm_mib, 1), m.grows_with_body ? { text: "YES", cls: "bad" } : "no"])));
  }
  parts.push(`<h2>Sizes and the native rules engine</h2>`);
  if (sizes) parts.push(`<p>build/worker/index.wasm ${esc(sizes.wasm_gzip_bytes.toLocaleString("en"))} bytes gzip -9 (${esc(fmt(sizes.wasm_gzip_bytes / 1024, 1))} KiB; limit 275), ${esc(fmt(sizes.wasm_raw_bytes / 1024))} KiB raw.</p>`);
  parts.push(`<p>${native ? `Rules engine, native (divan, fastest sample): ${esc(fmt(native.ns_per_request))} ns per request (session_token mix), ${esc(fmt(native.ns_per_request_cells))} ns (cells).` : "Rules engine, native: not run."}</p>`);
  parts.push(`<p class="meta">Written by <code>bash bench/run.sh</code> (bench/report/bench-report.mjs) from target/bench/latest.json; docs/benchmark.md says what each configuration is and how it is measured.</p>`);
  const ran = `${when(meta.date)}${meta.commit ? `, commit ${meta.commit}` : ""}`;
  const head = `<h1>Benchmark${meta.quick ? " (BENCH_QUICK)" : ""}</h1>
<p class="meta">${esc(ran)}: ${esc(meta.cores)} cores, load average ${esc(fmt(meta.loadavg_at_end?.[0], 1))} at the end; ${esc(o.rounds)} round(s) × ${esc(o.seconds)} s at c=${esc(o.concurrency.join(", c="))}; CPU is workerd's, all threads, per request.</p>`;
  return page(`Benchmark ${when(meta.date)}`, `${head}\n${parts.join("\n")}`);
}

/** Writes the report for the JSON at `jsonPath` beside it (same name, .html) or at `htmlPath`; its path. */
export const writeBenchReport = (jsonPath, htmlPath) => writeReport(benchReport, jsonPath, htmlPath);

reportCommand(import.meta.url, benchReport, "target/bench/latest.json");
