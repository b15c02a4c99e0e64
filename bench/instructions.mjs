// BENCH_INSTRUCTIONS mode: each configuration's workerd under callgrind
// (bench/callgrind.mjs), the mix sent a fixed number of times, and the
// instructions workerd executed per request counted. CPU time per request
// on this shared 2-core machine moves by ±30 % between runs; the count
// moves by about 1 %, so the issue-20 differences (a few µs in ~150)
// become visible, and a change can be judged by one run.
//
// Per configuration: start it under callgrind, warm it as the timed rounds
// do, send `warm` more requests (JIT tiers settle), zero the counters, then
// `windows` windows of `requests` requests each, dumping the counters after
// each. Reported: the isolate's thread (where requests run) and all of
// workerd's threads (V8's compiler and GC helpers too), per request,
// median over windows with min–max, and the Topology Service calls made
// while counting (0 for a warm one). With `profile`, the self instructions
// per function of the last window (JIT code named by V8's perf map).
import http from "node:http";
import { execFileSync } from "node:child_process";
import { copyFileSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import { join } from "node:path";
import {
  callgrindPid,
  dumpCounters,
  partCounts,
  selfCostByFunction,
  waitForPart,
  writeLauncher,
} from "./callgrind.mjs";
import { median } from "./paired.mjs";

/**
 * `send()`, sent again after a connection reset (ECONNRESET), up to
 * `attempts` times in all, pausing `pauseMs` × the attempt number before
 * each new try; any other error, or the last reset, is thrown.
 */
export async function retryOnReset(send, { attempts, pauseMs = 0, onRetry = () => {} }) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await send();
    } catch (e) {
      if (e.code !== "ECONNRESET" || attempt === attempts) throw e;
      onRetry();
      if (pauseMs > 0) await new Promise((r) => setTimeout(r, pauseMs * attempt));
    }
  }
}

/** Whether valgrind and callgrind_control are on the PATH. */
export function haveCallgrind() {
  try {
    execFileSync("valgrind", ["--version"], { stdio: "ignore" });
    execFileSync("callgrind_control", ["-h"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

/**
 * Sends `count` requests of `mix` (cycling from `offset`) to `url`,
 * `concurrency` at a time on kept-alive connections, without a
 * `Connection` header (as wrk sends them). Resolves to the number of
 * answers that were not the sink's 200.
 */
export async function sendMix(url, mix, { count, concurrency, offset = 0 }) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });
  let next = 0;
  let bad = 0;
  let resets = 0;
  const one = (r) =>
    new Promise((resolve, reject) => {
      const req = http.request(`${url}${r.path}`, { method: r.method, agent, headers: r.headers }, (res) => {
        if (res.statusCode !== 200) bad++;
        res.resume();
        res.on("end", resolve);
        res.on("error", reject);
      });
      req.removeHeader("connection");
      req.on("error", reject);
      req.end(r.body);
    });
  const worker = async () => {
    while (next < count) {
      const i = next++;
      // A connection closed without an answer (seen now and then under
      // callgrind, right after a dump): the request is sent again on a
      // new one after a pause, up to 5 times.
      await retryOnReset(() => one(mix[(offset + i) % mix.length]), {
        attempts: 5,
        pauseMs: 1000,
        onRetry: () => resets++,
      });
    }
  };
  try {
    await Promise.all(Array.from({ length: concurrency }, worker));
  } finally {
    agent.destroy();
  }
  if (resets) console.error(`bench: ${resets} request(s) sent again after a connection reset`);
  return bad;
}

/**
 * Counts one configuration. `start(spec)` starts it (Miniflare, with
 * MINIFLARE_WORKERD_PATH set to the launcher while it does) and `warmUp`
 * warms it as the timed rounds do.
 */
export async function countConfig(spec, { start, warmUp, mix, workDir, workerd, opt, log, serviceCalls }) {
  const dir = mkdtempSync(join(workDir, `cg-${spec.name}-`));
  const launcher = writeLauncher(dir, {
    workerd,
    // --perf-basic-prof also starts V8's log, by default one file per
    // isolate in the working directory: kept in the run's directory instead.
    v8Flags: [
      ...(opt.profile ? ["--perf-basic-prof"] : []),
      ...opt.v8Flags,
      ...(opt.profile || opt.v8Flags.length ? ["--no-logfile-per-isolate", `--logfile=${dir}/v8.log`] : []),
    ],
    instrLevel: opt.profile,
  });
  const before = process.env.MINIFLARE_WORKERD_PATH;
  process.env.MINIFLARE_WORKERD_PATH = launcher;
  let t;
  try {
    t = await start(spec);
  } finally {
    if (before === undefined) delete process.env.MINIFLARE_WORKERD_PATH;
    else process.env.MINIFLARE_WORKERD_PATH = before;
  }
  try {
    if (t.warm) await warmUp(t);
    const pid = callgrindPid(dir);
    let bad = await sendMix(t.url, mix, { count: opt.warm, concurrency: opt.concurrency });
    dumpCounters(pid);
    await waitForPart(dir, pid, 1);
    const windows = [];
    const calls0 = await serviceCalls();
    for (let w = 0; w < opt.windows; w++) {
      bad += await sendMix(t.url, mix, { count: opt.requests, concurrency: opt.concurrency, offset: w * opt.requests });
      dumpCounters(pid);
      await waitForPart(dir, pid, w + 2);
      const c = partCounts(dir, pid, w + 2);
      windows.push({ main: c.main / opt.requests, all: c.all / opt.requests });
      log(`${spec.name}: window ${w + 1}: ${(c.main / opt.requests / 1000).toFixed(1)}k instructions/request (isolate thread), ${(c.all / opt.requests / 1000).toFixed(1)}k all threads`);
    }
    const service_calls = (await serviceCalls()) - calls0;
    const last = opt.windows + 1;
    const perfMap = `/tmp/perf-${pid}.map`;
    const top = opt.profile
      ? selfCostByFunction(dir, pid, last, perfMap)
          .slice(0, opt.profileTop)
          .map(([name, n]) => ({ name, per_request: n / opt.requests }))
      : null;
    // V8 writes it to /tmp: not left there (moved to the kept work directory).
    if (opt.keep && existsSync(perfMap)) copyFileSync(perfMap, join(dir, `perf-${pid}.map`));
    rmSync(perfMap, { force: true });
    return {
      config: spec.name,
      windows,
      main: median(windows.map((w) => w.main)),
      main_mean: windows.reduce((a, w) => a + w.main, 0) / windows.length,
      main_min: Math.min(...windows.map((w) => w.main)),
      main_max: Math.max(...windows.map((w) => w.main)),
      all: median(windows.map((w) => w.all)),
      errors: bad,
      service_calls,
      top,
    };
  } finally {
    await t.mf.dispose().catch(() => {});
    t.retire?.();
  }
}

/**
 * Adds the issue-20 comparisons: instructions per request over
 * `floor-log` (count and per cent of the floor's) and against `peer-log`.
 */
export function compare(results) {
  const floor = results.find((r) => r.config === "floor-log");
  const peer = results.find((r) => r.config === "peer-log");
  const rustFloor = results.find((r) => r.config === "rust-floor");
  const workersRs = results.find((r) => r.config === "workers-rs");
  return results.map((r) => ({
    ...r,
    over_rust_floor: rustFloor ? r.main - rustFloor.main : null,
    over_workers_rs: workersRs ? r.main - workersRs.main : null,
    over_floor_log: floor ? r.main - floor.main : null,
    over_floor_log_pct: floor ? (100 * (r.main - floor.main)) / floor.main : null,
    vs_peer_log: peer ? r.main / peer.main : null,
  }));
}
