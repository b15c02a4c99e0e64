// The driver's tables: the text report each mode prints, and the results
// table a timed run writes into docs/benchmark.md (between its markers).
import { join } from "node:path";
import { commitLabel, writeDocSection } from "../doc-section.mjs";
import { median } from "../paired.mjs";
import { log } from "./processes.mjs";
import { ROOT, commandLine } from "./settings.mjs";

export const medOrNull = (xs) => (xs.some((x) => x === null || x === undefined) || xs.length === 0 ? null : median(xs));
export const fmt = (x, d = 0) => (x === undefined || x === null || Number.isNaN(x) ? "-" : x.toFixed(d));
/** A text table: the first two columns left-aligned, the rest right-aligned. */
export const table = (header, rows) => {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)));
  const line = (r) => r.map((c, i) => (i < 2 ? String(c).padEnd(widths[i]) : String(c).padStart(widths[i]))).join("  ");
  return [line(header), line(widths.map((w) => "-".repeat(w))), ...rows.map(line)].join("\n");
};

/** The native rules bench's figures from divan's output (`cargo bench -p router-core --bench rules`). */
export function parseDivan(text) {
  // The divan row "mix_decide  fastest │ slowest │ median │ mean │ samples │ iters":
  // one iteration decides the 1000-request mix.
  const unit = { ps: 1e-3, ns: 1, "µs": 1e3, us: 1e3, ms: 1e6, s: 1e9 };
  const toNs = (cell) => {
    const m = cell.trim().match(/^([\d.]+)\s*(ps|ns|µs|us|ms|s)$/);
    return m ? Number(m[1]) * unit[m[2]] : NaN;
  };
  const row = (name) => {
    const line = text.split("\n").find((l) => new RegExp(`[─ ]${name}\\s`).test(l));
    if (!line) return null;
    const cells = line.slice(line.indexOf(name) + name.length).split("│");
    return { fastest: toNs(cells[0]), median: toNs(cells[2]), mean: toNs(cells[3]) };
  };
  const mix = row("mix_decide");
  const withKey = row("mix_with_cache_key");
  const cellsMix = row("cells_mix_decide");
  const kinds = {};
  for (const k of ["session_cookie", "legacy_session", "anonymous", "private_token", "job_token", "bearer_token", "basic_auth_token", "runner_token", "registry_jwt_auth"]) {
    const r = row(k);
    if (r) kinds[k] = r.fastest;
  }
  if (!mix) return null;
  // On a shared machine the fastest sample is the cost of the code; the
  // median also carries whatever else the cores were doing.
  return {
    ns_per_request: mix.fastest / 1000,
    ns_per_request_median: mix.median / 1000,
    ns_per_request_mean: mix.mean / 1000,
    ns_per_request_with_cache_key: withKey ? withKey.fastest / 1000 : null,
    ns_per_request_cells: cellsMix ? cellsMix.fastest / 1000 : null,
    ns_per_request_by_kind: kinds,
  };
}

/**
 * The Rust yardsticks, by configuration name and the key their figures
 * carry (`vs_rust_floor_cpu_extra_us`, …): what any Rust/wasm router pays
 * (`rust-floor`) and the workers-rs way (`workers-rs`).
 */
export const RUST_YARDSTICKS = [
  ["rust-floor", "rust_floor"],
  ["workers-rs", "workers_rs"],
];

/** A router row's CPU and req/s against the Rust yardsticks in its run, as one clause ("" without them). */
function againstRust(row) {
  const parts = RUST_YARDSTICKS.filter(([, key]) => row[`vs_${key}_cpu_extra_us`] != null).map(
    ([name, key]) => `${fmt(row[`vs_${key}_cpu_extra_us`], 1)} µs over ${name} (${fmt(row[`vs_${key}_rps`], 2)}× its req/s)`,
  );
  return parts.length ? `; ${parts.join(", ")}` : "";
}

/** How a verdict line says whether its target holds. */
const verdict = (ok) => (ok ? "met" : "NOT met");

/**
 * The warm targets (issue 54), one line per routed configuration and
 * concurrency: `token-warm` and `cells` at least as fast as `peer-log`
 * (req/s ≥ 1.00×) and no more CPU over `floor-log` than `peer-log`'s;
 * `passthrough` (no rule runs) for reference. Each with its CPU and req/s
 * against the Rust yardsticks.
 */
export function targetVerdicts(summary, concurrency) {
  const get = (name, c) => summary.find((s) => s.config === name && s.concurrency === c);
  const lines = [];
  for (const c of concurrency) {
    const peerLog = get("peer-log", c);
    for (const [name, label] of [["token-warm", "session_token (token-warm)"], ["cells", "cells"]]) {
      const row = get(name, c);
      if (!row) continue;
      const cpu = peerLog
        ? `${fmt(row.vs_floor_log_cpu_extra_us, 1)} µs over floor-log against peer-log's ${fmt(peerLog.vs_floor_log_cpu_extra_us, 1)} (target ≤ peer-log's: ${verdict(row.vs_floor_log_cpu_extra_us <= peerLog.vs_floor_log_cpu_extra_us)})`
        : `${fmt(row.vs_floor_log_cpu_extra_us, 1)} µs over floor-log`;
      lines.push(`c=${c} ${label}: ${cpu}, ${fmt(row.vs_peer_log_rps, 3)}× peer-log req/s (target ≥ 1.00: ${verdict(row.vs_peer_log_rps >= 1)})${againstRust(row)}`);
    }
    const pass = get("passthrough", c);
    if (pass) lines.push(`c=${c} passthrough (no rule runs): ${fmt(pass.vs_floor_log_cpu_extra_us, 1)} µs over floor-log, ${fmt(pass.vs_peer_log_rps, 2)}× peer-log req/s${againstRust(pass)}`);
  }
  return lines;
}

/**
 * The cold-start targets (issue 54), one line per router configuration:
 * the first request's CPU within 2× `rust-floor`'s (what any Rust/wasm
 * router pays) and ≤ 8 ms; when `rust-floor` itself is above 4 ms the 2×
 * is the target. For reference, the same against `workers-rs`, the peer
 * and, the router logging every request, `peer-log` over `floor-log`.
 */
export function coldVerdicts(summary) {
  const find = (name) => summary.find((x) => x.config === name);
  const peer = find("peer");
  const peerLog = find("peer-log");
  const rustFloor = find("rust-floor");
  const workersRs = find("workers-rs");
  const ratio = (a, b) => (b > 0 ? a / b : NaN);
  return summary
    .filter((x) => x.config.startsWith("router-"))
    .map((r) => {
      const parts = [`${r.config}: first request CPU ${fmt(r.cpu_first_ms, 1)} ms`];
      if (rustFloor) {
        const within = r.cpu_first_ms <= 2 * rustFloor.cpu_first_ms;
        const target = rustFloor.cpu_first_ms > 4
          ? `target ≤ 2×, rust-floor being over 4 ms: ${verdict(within)}`
          : `target ≤ 2× and ≤ 8 ms: ${verdict(within && r.cpu_first_ms <= 8)}`;
        parts.push(`, ${fmt(ratio(r.cpu_first_ms, rustFloor.cpu_first_ms), 1)}× rust-floor's ${fmt(rustFloor.cpu_first_ms, 1)} ms (${target})`);
      } else {
        parts.push(` (target ≤ 8 ms: ${verdict(r.cpu_first_ms <= 8)}; no rust-floor in the run)`);
      }
      const others = [
        workersRs && `${fmt(ratio(r.cpu_first_ms, workersRs.cpu_first_ms), 1)}× workers-rs's ${fmt(workersRs.cpu_first_ms, 1)} ms`,
        peer && `${fmt(ratio(r.cpu_first_ms, peer.cpu_first_ms), 1)}× the peer's ${fmt(peer.cpu_first_ms, 1)} ms`,
        peerLog && `${fmt(ratio(r.cpu_first_ms, peerLog.cpu_first_ms), 1)}× peer-log's ${fmt(peerLog.cpu_first_ms, 1)} ms`,
      ].filter(Boolean);
      if (others.length) parts.push(`; ${others.join(", ")}`);
      if (peerLog && r.over_floor_log_cpu_ms != null) {
        parts.push(`; CPU over floor-log ${fmt(r.over_floor_log_cpu_ms, 1)} vs peer-log's ${fmt(peerLog.over_floor_log_cpu_ms, 1)} ms`);
      }
      if (peer) parts.push(`; total time ${fmt(ratio(r.total_ms, peer.total_ms), 2)}× the peer's`);
      return parts.join("");
    });
}

/** The timed run's text report (stdout). */
export function timedReport(result, { opt, peersDir, warmStats }) {
  const { summary, runs, cold_start: cold, streaming, memory, sizes, native } = result;
  const out = [];
  out.push(`\n== Per-request cost (workerd, Miniflare direct socket, wrk; ${opt.rounds} round(s) × ${opt.seconds}s; medians over rounds)`);
  out.push(
    table(
      ["config", "conc", "req/s", "p50 ms", "p99 ms", "CPU µs/req", "peak RSS MiB", "TS calls/req", "req/s ×null", "p50 ×null", "p99 ×null", "CPU ×null", "CPU +µs"],
      summary.map((s) => [
        s.config, s.concurrency, fmt(s.rps), fmt(s.p50_ms, 2), fmt(s.p99_ms, 2), fmt(s.cpu_us_per_req), fmt(s.peak_rss_mib, 1), fmt(s.ts_calls_per_req, 2),
        fmt(s.vs_null.rps, 2), fmt(s.vs_null.p50, 2), fmt(s.vs_null.p99, 2), fmt(s.vs_null.cpu, 2), fmt(s.vs_null.cpu_extra_us),
      ]),
    ),
  );
  const has = (name) => summary.some((s) => s.config === name);
  if (has("floor-log") && has("peer-log")) {
    out.push(`\n== Against the floor and the peer (same round and concurrency; medians over rounds)`);
    out.push(
      table(
        ["config", "conc", "req/s", "CPU µs/req", "CPU +µs over floor-log", "req/s ×peer-log", "CPU +µs over peer-log", "CPU +µs over rust-floor", "req/s ×rust-floor", "CPU +µs over workers-rs"],
        summary.map((s) => [
          s.config, s.concurrency, fmt(s.rps), fmt(s.cpu_us_per_req), fmt(s.vs_floor_log_cpu_extra_us), fmt(s.vs_peer_log_rps, 2), fmt(s.vs_peer_log_cpu_extra_us),
          fmt(s.vs_rust_floor_cpu_extra_us), fmt(s.vs_rust_floor_rps, 2), fmt(s.vs_workers_rs_cpu_extra_us),
        ]),
      ),
    );
    out.push(...targetVerdicts(summary, opt.concurrency).map((v) => `   ${v}`));
  } else {
    out.push(`\n== Against the floor and the peer: skipped (no peers at ${peersDir})`);
  }
  if (cold) {
    out.push(`\n== Cold start (fresh workerd per sample, ${opt.coldSamples} samples each, medians; "ready": Miniflare constructed → workerd ready with the script loaded and evaluated; "first": then one routed request → its response; CPU: workerd's threads, schedstat)`);
    out.push(
      table(
        ["config", "ready ms", "first ms", "total ms", "over floor ms", "CPU ready ms", "CPU first ms", "CPU total ms", "CPU over floor ms"],
        cold.summary.map((x) => [x.config, fmt(x.ready_ms, 1), fmt(x.first_ms, 1), fmt(x.total_ms, 1), fmt(x.over_floor_total_ms, 1), fmt(x.cpu_ready_ms, 1), fmt(x.cpu_first_ms, 1), fmt(x.cpu_total_ms, 1), fmt(x.over_floor_cpu_ms, 1)]),
      ),
    );
    out.push(...coldVerdicts(cold.summary).map((v) => `   ${v}`));
  }
  out.push(`\n== Every run (ratios against the null worker of the same round and concurrency)`);
  out.push(
    table(
      ["config", "round", "conc", "req/s", "p50 ms", "p99 ms", "CPU µs/req", "RSS MiB", "req/s ×null", "CPU ×null", "CPU +µs floor-log", "req/s ×peer-log", "errors"],
      runs.map((r) => [r.config, r.round, r.concurrency, fmt(r.rps), fmt(r.p50_ms, 2), fmt(r.p99_ms, 2), fmt(r.cpu_us_per_req), fmt(r.peak_rss_mib, 1), fmt(r.vs_null.rps, 2), fmt(r.vs_null.cpu, 2), fmt(r.vs_floor_log_cpu_extra_us), fmt(r.vs_peer_log_rps, 2), r.errors]),
    ),
  );
  if (streaming.length) {
    out.push(`\n== Streaming (fresh workerd per worker; accept-encoding: identity; VmRSS sampled every 20 ms)`);
    out.push(
      table(
        ["config", "transfer", "MiB/s", "ok", "RSS before MiB", "RSS peak MiB", "growth MiB"],
        streaming.map((s) => [s.config, `${s.direction} ${s.mib} MiB`, fmt(s.mib_per_s), s.ok ? "yes" : "NO", fmt(s.rss_before_mib, 1), fmt(s.rss_peak_mib, 1), fmt(s.rss_growth_mib, 1)]),
      ),
    );
    out.push(
      table(
        ["config", "idle RSS MiB", `peak RSS ${opt.streamSmallMiB} MiB bodies`, `peak RSS ${opt.streamMiB} MiB bodies`, "VmHWM MiB", "grows with body size"],
        memory.map((m) => [m.config, fmt(m.idle_rss_mib, 1), fmt(m[`peak_rss_mib_${opt.streamSmallMiB}`], 1), fmt(m[`peak_rss_mib_${opt.streamMiB}`], 1), fmt(m.vm_hwm_mib, 1), m.grows_with_body ? "YES" : "no"]),
      ),
    );
  }
  out.push(`\n== Sizes: build/worker/index.wasm ${fmt(sizes.wasm_raw_bytes / 1024)} KiB raw, ${fmt(sizes.wasm_gzip_bytes / 1024)} KiB gzip -9 (aim ≤ 250, limit 275); build/worker/shim.mjs ${fmt(sizes.js_raw_bytes / 1024)} KiB raw, ${fmt(sizes.js_gzip_bytes / 1024, 1)} KiB gzip`);
  if (native) {
    const kinds = Object.entries(native.ns_per_request_by_kind).map(([k, v]) => `${k} ${fmt(v)}`).join(", ");
    out.push(`== Rules engine, native (rules/session_token.json, 1000-request mix, divan fastest sample): ${fmt(native.ns_per_request)} ns/request (target < 2000; median ${fmt(native.ns_per_request_median)}); with the cache key ${fmt(native.ns_per_request_with_cache_key)} ns`);
    out.push(`   by kind, ns: ${kinds}`);
  } else {
    out.push(`== Rules engine, native: not run`);
  }
  out.push(`== Warm: ${warmStats.keys} distinct keys classified while warming, ${warmStats.replay} service calls on replay. JSON: target/bench/latest.json`);
  return out.join("\n");
}

export const RESULTS_BEGIN = "<!-- results: begin -->";
export const RESULTS_END = "<!-- results: end -->";

/** A Markdown table: `align` per column, "l" or "r". */
function mdTable(header, align, rows) {
  const line = (cells) => `| ${cells.join(" | ")} |`;
  return [line(header), line(align.map((a) => (a === "r" ? "---:" : "---"))), ...rows.map(line)].join("\n");
}

const clock = (d) => d.toISOString().slice(11, 16);

/**
 * The results section of docs/benchmark.md for a timed run: the command,
 * when and on what, the per-request table with the yardsticks' ratios and
 * the targets, the cold start, streaming and memory, sizes and the native
 * bench.
 */
export function resultsSection(result, { command, commit, started, ended, runStarted, bad }) {
  const { meta, summary, cold_start: cold, streaming, memory, sizes, native } = result;
  const o = meta.options;
  const from = runStarted ?? started;
  const minutes = Math.round((ended - from) / 60000);
  const out = [];
  out.push(
    `\`${command}\` on ${ended.toISOString().slice(0, 10)}, ${clock(from)}–${clock(ended)} UTC (${minutes} min${runStarted ? ", builds and the native bench included" : ""}), commit ${commit}; ${meta.cores} cores, load average ${fmt(meta.loadavg_at_end[0], 1)} at the end${bad ? `; **${bad} part(s) had errors**` : ""}.`,
  );
  out.push("");
  out.push(`Per request: ${o.rounds} round(s) × ${o.seconds} s at each concurrency, medians over rounds; CPU is workerd's, all threads; the ratios are against \`floor-log\` and \`peer-log\` of the same round and concurrency.`);
  out.push("");
  out.push(
    mdTable(
      ["config", "conc", "req/s", "p50 ms", "p99 ms", "CPU µs/req", "CPU +µs over floor-log", "req/s × peer-log", "TS calls/req"],
      ["l", "r", "r", "r", "r", "r", "r", "r", "r"],
      summary.map((s) => [`\`${s.config}\``, s.concurrency, fmt(s.rps), fmt(s.p50_ms, 2), fmt(s.p99_ms, 2), fmt(s.cpu_us_per_req), fmt(s.vs_floor_log_cpu_extra_us), fmt(s.vs_peer_log_rps, 2), fmt(s.ts_calls_per_req, 2)]),
    ),
  );
  const verdicts = targetVerdicts(summary, o.concurrency);
  if (verdicts.length && summary.some((s) => s.config === "floor-log")) {
    out.push("");
    out.push("Targets:");
    out.push("");
    for (const v of verdicts) out.push(`* ${v}`);
  }
  if (cold) {
    out.push("");
    out.push(`Cold start: ${o.coldSamples} fresh workerd per configuration, medians; ready = Miniflare constructed → workerd ready with the script evaluated, first = one routed request → its response; CPU = workerd's threads (schedstat).`);
    out.push("");
    out.push(
      mdTable(
        ["config", "ready ms", "first ms", "total ms", "CPU first ms", "CPU total ms", "CPU over floor ms"],
        ["l", "r", "r", "r", "r", "r", "r"],
        cold.summary.map((x) => [`\`${x.config}\``, fmt(x.ready_ms, 1), fmt(x.first_ms, 1), fmt(x.total_ms, 1), fmt(x.cpu_first_ms, 1), fmt(x.cpu_total_ms, 1), fmt(x.over_floor_cpu_ms, 1)]),
      ),
    );
    const cv = coldVerdicts(cold.summary);
    if (cv.length) {
      out.push("");
      for (const v of cv) out.push(`* ${v}`);
    }
  }
  if (streaming.length) {
    const rate = (config, direction, mib) => fmt(streaming.find((s) => s.config === config && s.direction === direction && s.mib === mib)?.mib_per_s);
    out.push("");
    out.push("Streaming (MiB/s, one transfer each, `accept-encoding: identity`) and workerd's memory (VmRSS sampled every 20 ms):");
    out.push("");
    out.push(
      mdTable(
        ["config", `upload ${o.streamSmallMiB} MiB`, `download ${o.streamSmallMiB} MiB`, `upload ${o.streamMiB} MiB`, `download ${o.streamMiB} MiB`, "idle RSS MiB", `peak RSS MiB, ${o.streamMiB} MiB bodies`, "grows with body size"],
        ["l", "r", "r", "r", "r", "r", "r", "l"],
        memory.map((m) => [`\`${m.config}\``, rate(m.config, "upload", o.streamSmallMiB), rate(m.config, "download", o.streamSmallMiB), rate(m.config, "upload", o.streamMiB), rate(m.config, "download", o.streamMiB), fmt(m.idle_rss_mib, 1), fmt(m[`peak_rss_mib_${o.streamMiB}`], 1), m.grows_with_body ? "**yes**" : "no"]),
      ),
    );
  }
  out.push("");
  out.push(`Sizes: \`build/worker/index.wasm\` ${sizes.wasm_gzip_bytes.toLocaleString("en")} bytes gzip -9 (${fmt(sizes.wasm_gzip_bytes / 1024, 1)} KiB; aim ≤ 250, limit 275), ${fmt(sizes.wasm_raw_bytes / 1024)} KiB raw; \`build/worker/shim.mjs\` ${fmt(sizes.js_gzip_bytes / 1024, 1)} KiB gzip.`);
  out.push("");
  out.push(
    native
      ? `Rules engine, native (divan, fastest sample, 1000-request mixes): \`session_token\` ${fmt(native.ns_per_request)} ns per request (target < 2000), ${fmt(native.ns_per_request_with_cache_key)} with the cache key; \`cells\` ${fmt(native.ns_per_request_cells)} ns.`
      : "Rules engine, native: not run.",
  );
  return out.join("\n");
}

/** Writes the timed run's results into docs/benchmark.md (BENCH_RECORD=1, the default). */
export function recordResults(result, { started, runStarted, bad }) {
  const file = join(ROOT, "docs", "benchmark.md");
  const body = resultsSection(result, {
    command: commandLine(),
    commit: commitLabel(ROOT, file),
    started,
    ended: new Date(),
    runStarted: runStarted ? new Date(runStarted * 1000) : null,
    bad,
  });
  if (writeDocSection(file, RESULTS_BEGIN, RESULTS_END, body)) log("results written into docs/benchmark.md (BENCH_RECORD=0 leaves it alone)");
  else log(`docs/benchmark.md has no "${RESULTS_BEGIN}" … "${RESULTS_END}" section: results not written`);
}
