// The timed run (the default mode): load rounds over every configuration,
// then the cold start, streaming and memory, sizes and the native bench's
// figures; printed, written to target/bench/latest.json with its HTML
// report (bench/report/bench-report.mjs) and, unless BENCH_RECORD=0, into
// docs/benchmark.md's results table.
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join, relative } from "node:path";
import { gzipSync } from "node:zlib";
import { commitLabel } from "../doc-section.mjs";
import { median } from "../paired.mjs";
import { writeBenchReport } from "../report/bench-report.mjs";
import { COLD_REQUEST, coldStart } from "./cold.mjs";
import { measure } from "./load.mjs";
import { log } from "./processes.mjs";
import { CLK_TCK } from "./proc.mjs";
import { RUST_YARDSTICKS, fmt, medOrNull, parseDivan, recordResults, timedReport } from "./report.mjs";
import { ROOT, driverOptions } from "./settings.mjs";
import { coldConfigurations } from "./stack.mjs";
import { streamingAndMemory } from "./streaming.mjs";

/** Every run of the rounds, with its ratios against the same round's baselines. */
async function loadRounds(ctx, targets) {
  const { s, ts, sinkInfo } = ctx;
  const runs = [];
  for (let round = 1; round <= s.rounds; round++) {
    const rot = (round - 1) % targets.length;
    const order = [...targets.slice(rot), ...targets.slice(0, rot)];
    for (const c of s.concurrency) {
      for (const t of order) {
        const m = await measure(t, c, ts, sinkInfo, s);
        runs.push({ round, concurrency: c, config: t.name, ...m });
        log(`round ${round} c=${c} ${t.name}: ${fmt(m.rps)} req/s, p50 ${fmt(m.p50_ms, 2)} ms, ${fmt(m.cpu_us_per_req)} µs CPU/req${m.errors ? `, ${m.errors} ERRORS` : ""}`);
      }
    }
  }
  for (const r of runs) {
    const same = (name) => runs.find((b) => b.round === r.round && b.concurrency === r.concurrency && b.config === name);
    const base = same("null");
    r.vs_null = {
      rps: r.rps / base.rps,
      p50: r.p50_ms / base.p50_ms,
      p99: r.p99_ms / base.p99_ms,
      cpu: r.cpu_us_per_req / base.cpu_us_per_req,
      cpu_extra_us: r.cpu_us_per_req - base.cpu_us_per_req,
    };
    // The issue-20 yardsticks: CPU over the floor with its log line, req/s
    // against the peer with its log line, same round and concurrency.
    const floorLog = same("floor-log");
    const peerLog = same("peer-log");
    r.vs_floor_log_cpu_extra_us = floorLog ? r.cpu_us_per_req - floorLog.cpu_us_per_req : null;
    r.vs_peer_log_rps = peerLog ? r.rps / peerLog.rps : null;
    r.vs_peer_log_cpu_extra_us = peerLog ? r.cpu_us_per_req - peerLog.cpu_us_per_req : null;
    // The Rust yardsticks: the least any Rust/wasm router pays, and the
    // workers-rs way of writing one (both with the floor's log line).
    for (const [name, key] of RUST_YARDSTICKS) {
      const y = same(name);
      r[`vs_${key}_cpu_extra_us`] = y ? r.cpu_us_per_req - y.cpu_us_per_req : null;
      r[`vs_${key}_rps`] = y ? r.rps / y.rps : null;
    }
  }
  return runs;
}

/** Per configuration and concurrency, the medians over rounds. */
function summarise(runs, targets, concurrency) {
  const summary = [];
  for (const c of concurrency) {
    for (const t of targets) {
      const rs = runs.filter((r) => r.concurrency === c && r.config === t.name);
      const med = (f) => median(rs.map(f));
      summary.push({
        concurrency: c,
        config: t.name,
        rounds: rs.length,
        rps: med((r) => r.rps),
        p50_ms: med((r) => r.p50_ms),
        p99_ms: med((r) => r.p99_ms),
        cpu_us_per_req: med((r) => r.cpu_us_per_req),
        cpu_us_per_req_min: Math.min(...rs.map((r) => r.cpu_us_per_req)),
        cpu_us_per_req_max: Math.max(...rs.map((r) => r.cpu_us_per_req)),
        peak_rss_mib: Math.max(...rs.map((r) => r.peak_rss_mib)),
        ts_calls_per_req: med((r) => r.ts_calls_per_req),
        vs_null: {
          rps: med((r) => r.vs_null.rps),
          p50: med((r) => r.vs_null.p50),
          p99: med((r) => r.vs_null.p99),
          cpu: med((r) => r.vs_null.cpu),
          cpu_extra_us: med((r) => r.vs_null.cpu_extra_us),
        },
        vs_floor_log_cpu_extra_us: medOrNull(rs.map((r) => r.vs_floor_log_cpu_extra_us)),
        vs_peer_log_rps: medOrNull(rs.map((r) => r.vs_peer_log_rps)),
        vs_peer_log_cpu_extra_us: medOrNull(rs.map((r) => r.vs_peer_log_cpu_extra_us)),
        ...Object.fromEntries(
          RUST_YARDSTICKS.flatMap(([, key]) => [`vs_${key}_cpu_extra_us`, `vs_${key}_rps`]).map((k) => [k, medOrNull(rs.map((r) => r[k]))]),
        ),
      });
    }
  }
  return summary;
}

/** build/worker's wasm and JS, raw and gzip -9. */
function sizes() {
  const wasm = readFileSync(join(ROOT, "build", "worker", "index.wasm"));
  const js = readFileSync(join(ROOT, "build", "worker", "shim.mjs"));
  return {
    wasm_raw_bytes: wasm.length,
    wasm_gzip_bytes: gzipSync(wasm, { level: 9 }).length,
    js_raw_bytes: js.length,
    js_gzip_bytes: gzipSync(js, { level: 9 }).length,
  };
}

/** The timed run over started and warmed `targets`; resolves to the number of failed parts. */
export async function timedMode(ctx, targets, outDir) {
  const { s, mix } = ctx;
  const started = new Date();
  const runs = await loadRounds(ctx, targets);
  const summary = summarise(runs, targets, s.concurrency);

  // Cold start: the floor, the peer and the router, fresh processes.
  let cold = null;
  let coldFailed = 0;
  if (s.coldSamples > 0) {
    const coldSpecs = coldConfigurations(ctx);
    log(`cold start: ${s.coldSamples} fresh workerd per configuration (${coldSpecs.map((x) => x.name).join(", ")})`);
    try {
      cold = await coldStart(
        coldSpecs,
        COLD_REQUEST,
        { samples: s.coldSamples, outboundHop: s.outboundHop },
      );
    } catch (e) {
      // Reported, and the run fails, but the load figures are still printed.
      log(`cold start failed: ${e.stack ?? e}`);
      coldFailed = 1;
    }
  }

  let streaming = [];
  let memory = [];
  if (!s.skipStream && ctx.specs.some((x) => x.name === "passthrough")) {
    ({ streaming, memory } = await streamingAndMemory(ctx.specs, s));
  }

  let native = null;
  if (s.nativeOutput && existsSync(s.nativeOutput)) native = parseDivan(readFileSync(s.nativeOutput, "utf8"));

  const meta = {
    date: new Date().toISOString(),
    commit: commitLabel(ROOT, join(ROOT, "docs", "benchmark.md")),
    quick: s.quick,
    options: driverOptions(s),
    cores: cpus().length,
    loadavg_at_end: loadavg(),
    clk_tck: CLK_TCK,
    wrk: execFileSync("sh", ["-c", "wrk --version 2>&1 | head -1 || true"]).toString().trim(),
    load_generator: "wrk + Lua (bench/wrk/*.lua): per-request headers from a pre-formatted mix",
    upstream: "devstack sink (hyper, 200 ok, bodies drained)",
    mix_requests: mix.length,
    warm_distinct_keys: ctx.warmStats.keys,
    warm_replay_service_calls: ctx.warmStats.replay,
    cold: "every request has a session prefix never seen before: memory-cache miss, Cache API match miss, one Topology Service call (404: no cell), Cache API put, memory insert; then the legacy cell. Miniflare's Cache API runs in the same workerd process.",
  };
  const result = { meta, summary, runs, cold_start: cold, streaming, memory, sizes: sizes(), native };
  writeFileSync(join(outDir, "latest.json"), JSON.stringify(result, null, 2) + "\n");
  console.log(timedReport(result, { opt: s, peersDir: s.peersDir, warmStats: ctx.warmStats }));
  try {
    log(`report: ${relative(ROOT, writeBenchReport(join(outDir, "latest.json")))}`);
  } catch (e) {
    log(`report not written: ${e.message}`);
  }

  const bad = coldFailed + runs.filter((r) => r.errors > 0).length + streaming.filter((x) => !x.ok).length + memory.filter((m) => m.grows_with_body).length;
  if (s.record) recordResults(result, { started, runStarted: s.runStarted, bad });
  return bad;
}
