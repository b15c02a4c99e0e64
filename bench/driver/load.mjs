// Load: wrk with the bench's Lua scripts (bench/wrk/), and one measured
// run of a configuration: workerd's CPU per request from /proc, wrk's
// throughput and latency, the Topology Service calls made.
import { spawn } from "node:child_process";
import { join } from "node:path";
import { retryOnReset } from "../instructions.mjs";
import { request } from "./http.mjs";
import { CLK_TCK, procStat, procStatusKiB, rssSampler } from "./proc.mjs";
import { ROOT } from "./settings.mjs";

let coldRun = 0;

/** The wrk script for a configuration: a new session prefix per request (cold) or the mix. */
export const wrkScript = (target) => join(ROOT, "bench", "wrk", target.cold ? "cold.lua" : "mix.lua");

/** One wrk run against `target`; resolves to the JSON its script's done() prints. */
export function runWrk(target, { seconds, concurrency, script, mixFile, threads: maxThreads }) {
  return new Promise((resolve, reject) => {
    const wrkEnv = { ...process.env, BENCH_MIX_FILE: mixFile };
    if (script.endsWith("cold.lua")) {
      coldRun++;
      // A base no earlier wrk run used: process start time + run counter.
      wrkEnv.BENCH_COLD_BASE = `${String(process.pid % 1000).padStart(3, "0")}${String(coldRun).padStart(4, "0")}`;
    }
    const threads = Math.min(maxThreads, concurrency);
    const args = ["-t", String(threads), "-c", String(concurrency), "-d", `${seconds}s`, "--timeout", "10s", "-s", script, target.url + "/"];
    const child = spawn("wrk", args, { env: wrkEnv, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    child.on("error", reject); // wrk missing: fail the run, stop every child
    child.on("exit", (code) => {
      const line = out.split("\n").find((l) => l.startsWith("BENCH_JSON "));
      if (code !== 0 || !line) reject(new Error(`wrk ${args.join(" ")} exited ${code}: ${err}${out}`));
      else resolve(JSON.parse(line.slice("BENCH_JSON ".length)));
    });
  });
}

/** The Topology Service's count of classify calls so far. */
export async function tsCalls(ts) {
  // The keep-alive agent can hand out a connection the service closed
  // while idle (minutes between two asks under callgrind): asked again
  // once on a reset, on a fresh connection.
  const res = await retryOnReset(() => request(`${ts.admin}/_stats`), { attempts: 2 });
  return JSON.parse(res.text).classify_calls;
}

/** A warm-up, then one measured wrk run of `target` at `concurrency`, and what it cost. */
export async function measure(target, concurrency, ts, sink, opt) {
  const opts = { concurrency, script: wrkScript(target), mixFile: target.mixFile, threads: opt.wrkThreads };
  if (opt.warmupSeconds > 0) {
    await runWrk(target, { ...opts, seconds: opt.warmupSeconds });
    // Let requests that wrk abandoned at the end of the warm-up finish.
    await new Promise((r) => setTimeout(r, 500));
  }
  const node0 = process.cpuUsage();
  const calls0 = await tsCalls(ts);
  const tsCpu0 = procStat(ts.pid).cpuTicks;
  const sinkCpu0 = procStat(sink.pid).cpuTicks;
  const cpu0 = procStat(target.pid).cpuTicks;
  const stopRss = rssSampler(target.pid, 100);
  const w = await runWrk(target, { ...opts, seconds: opt.seconds });
  const cpu1 = procStat(target.pid).cpuTicks;
  const peakRssKiB = stopRss();
  const node1 = process.cpuUsage(node0);
  const calls1 = await tsCalls(ts);
  const us = (ticks) => (ticks * 1e6) / CLK_TCK / Math.max(1, w.requests);
  const errors = Object.values(w.errors).reduce((a, b) => a + b, 0);
  return {
    requests: w.requests,
    rps: w.requests / (w.duration_us / 1e6),
    p50_ms: w.latency_us.p50 / 1000,
    p90_ms: w.latency_us.p90 / 1000,
    p99_ms: w.latency_us.p99 / 1000,
    cpu_us_per_req: us(cpu1 - cpu0),
    peak_rss_mib: peakRssKiB / 1024,
    vm_hwm_mib: procStatusKiB(target.pid, "VmHWM") / 1024,
    ts_calls_per_req: (calls1 - calls0) / Math.max(1, w.requests),
    ts_cpu_us_per_req: us(procStat(ts.pid).cpuTicks - tsCpu0),
    sink_cpu_us_per_req: us(procStat(sink.pid).cpuTicks - sinkCpu0),
    // Miniflare's side of the run (should be ~0 with direct sockets).
    node_cpu_us_per_req: (node1.user + node1.system) / Math.max(1, w.requests),
    errors,
    error_detail: w.errors,
  };
}
