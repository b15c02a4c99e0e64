// The benchmark driver behind `bash bench/run.sh` (which builds first).
//
// Everything runs on loopback, in this process's children, each stopped by
// PID at the end:
//   * `devstack sink`: the upstream (cheap hyper server, 200 "ok\n");
//   * `devstack topology`: the local Topology Service, every cell = the sink;
//   * one workerd per configuration, started by Miniflare with a direct
//     socket (`unsafeDirectSockets`: no Miniflare entry worker in the path)
//     and without Miniflare's outbound hop (bench/workerd-options.mjs;
//     BENCH_OUTBOUND_HOP=1 puts it back):
//       null        bench/null-worker.mjs, fetch() to the sink only
//       floor       ../shared/peers/js-floor.mjs: the work every router must
//                   do (every header read and copied, forwarding and rule
//                   headers set), no rules; floor-log: the same + one log line
//       peer        ../shared/peers/js-router.mjs: a JS router doing the same
//                   job (ordered rules, routable tokens, classification
//                   cache), memory cache warmed; peer-log: + one log line
//       passthrough the router, rules/passthrough.json
//       token-warm  the router, rules/session_token.json, memory cache warmed
//       token-warm-quiet  the same with GITLAB_REQUEST_LOG=errors
//       token-warm-ops    token-warm with ROUTER_CONTROL bound and GITLAB_CELLS
//                   set (the control and cell health checks per request)
//       cells       the router, rules/cells.json (path routing first), warmed
//       token-cold  the router, rules/session_token.json, a new key per request
//     The peers directory (BENCH_PEERS_DIR, default ../shared/peers relative
//     to the repository) is used in place; when it is missing, the floor and
//     peer rows are skipped and said so. BENCH_TRACE_YARDSTICKS=1 runs both
//     patched to send and log a request id and a traceparent, as SPEC §11
//     asks of every router (bench/trace-yardsticks.mjs).
//     (BENCH_EXTRA=1 adds rust-null: a workers-rs worker that only forwards;
//     token-warm-signed: token-warm with every request signed; null-log: the
//     null worker plus one console.log JSON line per request; and
//     cold-nocache: token-cold with Miniflare's Cache API disabled, to price
//     those parts on their own.)
// Load: wrk + a Lua script (bench/wrk/*.lua), rounds × concurrencies ×
// configurations, configuration order rotated every round; the ratios are
// against the null worker, the floor with log (extra CPU µs per request)
// and the peer with log (req/s) of the same round and concurrency. CPU per
// request is workerd's utime+stime delta over the run (/proc/PID/stat)
// divided by wrk's request count; RSS is sampled from /proc/PID/status.
// Cold start: a fresh workerd per sample for the floor, the peer and the
// router (session_token, cells): wall time and workerd CPU (per-thread
// schedstat, ns) from Miniflare's construction to ready (script and wasm
// compiled, module evaluated), and to the first routed response (ruleset
// compiled, one classification through the Topology Service).
// Then streaming: uploads and downloads of BENCH_STREAM_SMALL_MIB and
// BENCH_STREAM_MIB through the null worker and the router, alternating,
// with workerd's RSS sampled during each.
//
// Writes the table to stdout and target/bench/latest.json.
import { spawn, execFileSync } from "node:child_process";
import { createInterface } from "node:readline";
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync, existsSync, readdirSync, rmSync } from "node:fs";
import { tmpdir, cpus, loadavg } from "node:os";
import { join, dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";
import http from "node:http";
import { randomBytes } from "node:crypto";
import { Miniflare } from "miniflare";
import { routableToken } from "../tests/e2e/tokens.mjs";
import { stopChild } from "../tests/e2e/harness.mjs";
import { profile as cpuProfile, summarize } from "./profile.mjs";
import { median, parsePairs, pairedRuns, targetLines } from "./paired.mjs";
import { CALLGRIND_COMM } from "./callgrind.mjs";
import { compare, countConfig, haveCallgrind, retryOnReset } from "./instructions.mjs";
import { traceYardsticks } from "./trace-yardsticks.mjs";
import { workerdOptions } from "./workerd-options.mjs";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const env = process.env;
const QUICK = env.BENCH_QUICK === "1";
const num = (name, dflt) => (env[name] !== undefined && env[name] !== "" ? Number(env[name]) : dflt);
// The run's directory kept (the callgrind files and V8's perf map of an
// instruction count, for callgrind_annotate).
const KEEP_WORK = env.BENCH_KEEP_WORK === "1";
const OPT = {
  seconds: num("BENCH_SECONDS", QUICK ? 2 : 8),
  warmupSeconds: num("BENCH_WARMUP_SECONDS", 1),
  rounds: num("BENCH_ROUNDS", QUICK ? 1 : 3),
  concurrency: (env.BENCH_CONCURRENCY ?? "8,32").split(",").map(Number),
  streamSmallMiB: num("BENCH_STREAM_SMALL_MIB", 64),
  streamMiB: num("BENCH_STREAM_MIB", QUICK ? 256 : 1024),
  extra: env.BENCH_EXTRA === "1",
  skipStream: env.BENCH_SKIP_STREAM === "1",
  wrkThreads: num("BENCH_WRK_THREADS", 2),
  // Fresh workerd processes per configuration for the cold-start figures (0: skip).
  coldSamples: num("BENCH_COLD_SAMPLES", QUICK ? 2 : 7),
  // Config names to profile (V8 CPU profile through the inspector) instead
  // of the measured rounds.
  profile: (env.BENCH_PROFILE ?? "").split(",").filter(Boolean),
  // Pairs of configurations loaded side by side (a:b,...), instead of the
  // measured rounds (bench/paired.mjs).
  paired: parsePairs(env.BENCH_PAIRED ?? ""),
  // Only these configurations (plus `null`, `floor-log` and `peer-log`, the
  // ratios' baselines, unless BENCH_SKIP_YARDSTICKS=1: an A/B of two builds).
  configs: (env.BENCH_CONFIGS ?? "").split(",").filter(Boolean),
  skipYardsticks: env.BENCH_SKIP_YARDSTICKS === "1",
  // The floor and the peer with SPEC section 11's trace headers and log
  // fields added (bench/trace-yardsticks.mjs).
  traceYardsticks: env.BENCH_TRACE_YARDSTICKS === "1",
  // Miniflare's outbound hop put back (bench/workerd-options.mjs).
  outboundHop: env.BENCH_OUTBOUND_HOP === "1",
  keepWork: KEEP_WORK,
  // Instructions per request under callgrind instead of the timed rounds
  // (bench/instructions.mjs).
  instructions: env.BENCH_INSTRUCTIONS === "1",
  instr: {
    warm: num("BENCH_INSTRUCTIONS_WARM", 2000),
    windows: num("BENCH_INSTRUCTIONS_WINDOWS", 3),
    requests: num("BENCH_INSTRUCTIONS_REQUESTS", 1000),
    concurrency: num("BENCH_INSTRUCTIONS_CONCURRENCY", 1),
    profile: env.BENCH_INSTRUCTIONS_PROFILE === "1",
    profileTop: num("BENCH_INSTRUCTIONS_TOP", 40),
    // More V8 flags for the counted workerd, e.g. "--log-deopt": what V8
    // logs goes to the configuration's v8.log (kept with BENCH_KEEP_WORK=1).
    v8Flags: (env.BENCH_V8_FLAGS ?? "").split(" ").filter(Boolean),
    keep: KEEP_WORK,
  },
};
// The peer and the floor, used in place (not copied into the repository).
const PEERS = env.BENCH_PEERS_DIR ? resolve(env.BENCH_PEERS_DIR) : join(ROOT, "..", "shared", "peers");
const DEVSTACK = env.DEVSTACK_BIN ?? join(ROOT, "target", "release", "devstack");
const OUT_DIR = join(ROOT, "target", "bench");
const CLK_TCK = Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim()) || 100;
const MiB = 1024 * 1024;

const children = []; // devstack processes, stopped by PID
const instances = []; // Miniflare instances
const log = (...a) => console.error("bench:", ...a);

// ---------------------------------------------------------------------------
// /proc

function procStat(pid) {
  const s = readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = s.slice(s.lastIndexOf(")") + 2).split(" ");
  return { ppid: Number(f[1]), cpuTicks: Number(f[11]) + Number(f[12]), userTicks: Number(f[11]) };
}

function procStatusKiB(pid, field) {
  const m = readFileSync(`/proc/${pid}/status`, "utf8").match(new RegExp(`^${field}:\\s+(\\d+) kB`, "m"));
  return m ? Number(m[1]) : 0;
}

/** workerd processes this process started (run under callgrind in BENCH_INSTRUCTIONS mode). */
function childWorkerdPids() {
  const out = [];
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const comm = readFileSync(`/proc/${d}/comm`, "utf8").trim();
      if (comm !== "workerd" && comm !== CALLGRIND_COMM) continue;
      if (procStat(d).ppid === process.pid) out.push(Number(d));
    } catch {
      // gone
    }
  }
  return out;
}

/** Samples a process's VmRSS every `ms` until stopped; returns the peak (KiB). */
function rssSampler(pid, ms = 50) {
  let peak = procStatusKiB(pid, "VmRSS");
  const t = setInterval(() => {
    try {
      peak = Math.max(peak, procStatusKiB(pid, "VmRSS"));
    } catch {}
  }, ms);
  return () => {
    clearInterval(t);
    try {
      peak = Math.max(peak, procStatusKiB(pid, "VmRSS"));
    } catch {}
    return peak;
  };
}

// ---------------------------------------------------------------------------
// Processes

function startDevstack(args, label) {
  return new Promise((resolve, reject) => {
    if (!existsSync(DEVSTACK)) {
      reject(new Error(`${DEVSTACK} is missing: cargo build --release -p devstack`));
      return;
    }
    // stderr is ignored: the Topology Service logs every classify call.
    const child = spawn(DEVSTACK, args, { stdio: ["ignore", "pipe", "ignore"] });
    children.push(child);
    const timer = setTimeout(() => reject(new Error(`${label} not ready`)), 15000);
    createInterface({ input: child.stdout }).once("line", (line) => {
      clearTimeout(timer);
      resolve({ child, ready: JSON.parse(line) });
    });
    child.once("exit", (code) => reject(new Error(`${label} exited ${code}`)));
  });
}

async function startWorker(name, options) {
  const before = new Set(childWorkerdPids());
  const lines = { count: 0, last: [] };
  const mf = new Miniflare({
    ...workerdOptions({
      outboundHop: OPT.outboundHop,
      onLine(line) {
        lines.count++;
        lines.last.push(line);
        if (lines.last.length > 20) lines.last.shift();
      },
    }),
    ...options,
  });
  instances.push(mf);
  const startedAt = performance.now();
  await mf.ready;
  const readyAt = performance.now();
  const url = (await mf.unsafeGetDirectURL("")).toString().replace(/\/$/, "");
  const pids = childWorkerdPids().filter((p) => !before.has(p));
  if (pids.length !== 1) throw new Error(`${name}: expected one new workerd process, found ${pids}`);
  return { name, mf, url, pid: pids[0], lines, startedAt, readyAt };
}

/** A process's CPU time in ns: the sum of its threads' schedstat run time (finer than /proc/PID/stat's ticks). */
function procCpuNs(pid) {
  let ns = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, "utf8").split(" ")[0]);
    } catch {
      // thread gone
    }
  }
  return ns;
}

/**
 * Cold start: for each configuration, `OPT.coldSamples` fresh workerd
 * processes (configurations interleaved). Per sample, wall time and
 * workerd CPU from Miniflare's construction to ready (workerd up, the
 * script's modules compiled and evaluated: for the router, the wasm
 * compiled and instantiated) and on to the first routed response (for the
 * router: `routerSetup`, the ruleset compiled, one Topology Service call).
 */
async function coldStart(specs, request1) {
  const samples = [];
  for (let i = 0; i < OPT.coldSamples; i++) {
    const order = [...specs.slice(i % specs.length), ...specs.slice(0, i % specs.length)];
    for (const s of order) {
      const t0 = performance.now();
      const t = await startWorker(`${s.name}-cold`, s.options);
      const cpuReady = procCpuNs(t.pid);
      const t1 = performance.now();
      const res = await request(`${t.url}${request1.path}`, { headers: request1.headers });
      const t2 = performance.now();
      const cpuFirst = procCpuNs(t.pid);
      if (res.status !== 200) throw new Error(`cold start ${s.name}: ${res.status} ${res.text.slice(0, 200)}`);
      samples.push({
        config: s.name,
        sample: i + 1,
        ready_ms: t.readyAt - t0,
        first_ms: t2 - t1,
        total_ms: t.readyAt - t0 + (t2 - t1),
        cpu_ready_ms: cpuReady / 1e6,
        cpu_first_ms: (cpuFirst - cpuReady) / 1e6,
        cpu_total_ms: cpuFirst / 1e6,
      });
      await t.mf.dispose().catch(() => {});
      instances.splice(instances.indexOf(t.mf), 1);
    }
  }
  const summary = specs.map((s) => {
    const mine = samples.filter((x) => x.config === s.name);
    const out = { config: s.name, samples: mine.length };
    for (const k of ["ready_ms", "first_ms", "total_ms", "cpu_ready_ms", "cpu_first_ms", "cpu_total_ms"]) out[k] = median(mine.map((x) => x[k]));
    return out;
  });
  const floor = summary.find((x) => x.config === "floor");
  for (const x of summary) {
    x.over_floor_total_ms = floor ? x.total_ms - floor.total_ms : null;
    x.over_floor_cpu_ms = floor ? x.cpu_total_ms - floor.cpu_total_ms : null;
  }
  return { samples, summary };
}

async function stopAll() {
  for (const mf of instances) await mf.dispose().catch(() => {});
  for (const child of children) await stopChild(child);
}

// ---------------------------------------------------------------------------
// HTTP helpers (node:http, accept-encoding: identity)

const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });

function request(url, { method = "GET", headers = {}, body, bodyBytes, onData } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(
      url,
      { method, agent, headers: { "accept-encoding": "identity", ...headers } },
      (res) => {
        let bytes = 0;
        const chunks = [];
        res.on("data", (c) => {
          bytes += c.length;
          if (onData) onData(c);
          else if (bytes < 1 << 20) chunks.push(c);
        });
        res.on("end", () =>
          resolve({ status: res.statusCode, headers: res.headers, bytes, text: Buffer.concat(chunks).toString() }),
        );
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    if (bodyBytes !== undefined) {
      // Streams bodyBytes bytes from a reused 1 MiB buffer, honouring backpressure.
      const chunk = Buffer.alloc(MiB, 0x61);
      (async () => {
        let left = bodyBytes;
        while (left > 0) {
          const n = Math.min(left, chunk.length);
          if (!req.write(n === chunk.length ? chunk : chunk.subarray(0, n))) {
            await new Promise((r) => req.once("drain", r));
          }
          left -= n;
        }
        req.end();
      })().catch(reject);
    } else {
      req.end(body);
    }
  });
}

// ---------------------------------------------------------------------------
// The request mix

const HEX = () => [...Array(32)].map(() => "0123456789abcdef"[Math.floor(Math.random() * 16)]).join("");
const CELLS = 10; // cells 1..10, all served by the sink
const GROUPS = 20; // group-G belongs to cell (G % 10) + 1
const PROJECT_IDS = 1000; // project id P (1..1000) belongs to cell (P % 10) + 1

/** The realistic mix for rules/session_token.json (same proportions as the native bench). */
function buildMix(n = 500) {
  const kinds = [
    ["session_cookie", 35],
    ["legacy_session", 10],
    ["anonymous", 15],
    ["private_token", 12],
    ["job_token", 8],
    ["bearer_token", 6],
    ["basic_auth_token", 6],
    ["runner_token", 4],
    ["registry_jwt_auth", 4],
  ];
  const total = kinds.reduce((a, k) => a + k[1], 0);
  const rnd = (k) => Math.floor(Math.random() * k);
  const tok = (prefix, cell) => routableToken(prefix, { c: cell, o: 1 + rnd(5000), u: 1 + rnd(1e6) });
  const out = [];
  for (const [kind, weight] of kinds) {
    for (let i = 0; i < Math.round((n * weight) / total); i++) {
      const cell = 1 + rnd(CELLS);
      const project = `group-${rnd(GROUPS)}/project-${rnd(50)}`;
      const h = {
        "User-Agent": "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
        Accept: "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
        "Accept-Language": "en-US,en;q=0.5",
        "Accept-Encoding": "identity",
      };
      let method = "GET";
      let path = `/${project}/-/merge_requests?scope=all&state=opened`;
      let body;
      switch (kind) {
        case "session_cookie":
          h.Cookie = `preferred_language=en; known_sign_in=${HEX()}; _gitlab_session=cell-${cell}-${HEX()}; event_filter=all`;
          break;
        case "legacy_session":
          h.Cookie = `preferred_language=en; _gitlab_session=${HEX()}`;
          break;
        case "anonymous":
          break;
        case "private_token":
          path = `/api/v4/projects/${1 + rnd(PROJECT_IDS)}/issues?state=opened&per_page=20`;
          h["PRIVATE-TOKEN"] = tok("glpat-", cell);
          break;
        case "job_token":
          path = `/api/v4/projects/${1 + rnd(PROJECT_IDS)}/packages/generic/pkg/1.0/file.bin`;
          h["JOB-TOKEN"] = tok("glcbt-", cell);
          break;
        case "bearer_token":
          path = `/api/v4/user`;
          h.Authorization = `Bearer ${tok("glpat-", cell)}`;
          break;
        case "basic_auth_token":
          path = `/${project}.git/info/refs?service=git-upload-pack`;
          h.Authorization = `Basic ${Buffer.from(`user-${rnd(1000)}:${tok("glpat-", cell)}`).toString("base64")}`;
          break;
        case "runner_token":
          method = "POST";
          path = "/api/v4/jobs/request";
          h["RUNNER-TOKEN"] = tok("glrt-", cell);
          h["Content-Type"] = "application/json";
          body = `{"info":{"name":"gitlab-runner","version":"17.0.0"},"last_update":"${HEX()}"}`;
          break;
        case "registry_jwt_auth":
          path = `/jwt/auth?account=user&client_id=docker&offline_token=true&service=container_registry&scope=repository:${project}:pull,push`;
          h.Authorization = `Basic ${Buffer.from("user:not-a-routable-password").toString("base64")}`;
          break;
      }
      out.push({ kind, method, path, headers: h, body });
    }
  }
  for (let i = out.length - 1; i > 0; i--) {
    const j = rnd(i + 1);
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
}

function writeMixFile(mix, file) {
  const lines = mix.map((r) => {
    const f = [r.method, r.path, ...Object.entries(r.headers).map(([k, v]) => `${k}: ${v}`)];
    if (r.body) f.push(`@body ${r.body}`);
    return f.join("\t");
  });
  writeFileSync(file, lines.join("\n") + "\n");
}

function topologyToml(sink) {
  let toml = `[topology]\ncache_control = "max-age=3600"\nnot_found_cache_control = "max-age=3600"\n`;
  for (let id = 1; id <= CELLS; id++) {
    const routes = [];
    for (let g = 0; g < GROUPS; g++) if ((g % CELLS) + 1 === id) routes.push(`group-${g}`);
    // The cells ruleset routes by path: top-level namespaces (routes) and
    // numeric project ids must be known for the mix's paths to route there.
    const projects = [];
    for (let p = 1; p <= PROJECT_IDS; p++) if ((p % CELLS) + 1 === id) projects.push(p);
    toml += `\n[[cells]]\nid = ${id}\naddress = "${sink}"\nsession_prefix = "cell-${id}"\nroutes = ${JSON.stringify(routes)}\nproject_ids = [${projects.join(", ")}]\n`;
  }
  return toml;
}

// ---------------------------------------------------------------------------
// Load runs

let coldRun = 0;

function runWrk(target, { seconds, concurrency, script, mixFile }) {
  return new Promise((resolve, reject) => {
    const wrkEnv = { ...env, BENCH_MIX_FILE: mixFile };
    if (script.endsWith("cold.lua")) {
      coldRun++;
      // A base no earlier wrk run used: process start time + run counter.
      wrkEnv.BENCH_COLD_BASE = `${String(process.pid % 1000).padStart(3, "0")}${String(coldRun).padStart(4, "0")}`;
    }
    const threads = Math.min(OPT.wrkThreads, concurrency);
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

async function tsCalls(ts) {
  // The keep-alive agent can hand out a connection the service closed
  // while idle (minutes between two asks under callgrind): asked again
  // once on a reset, on a fresh connection.
  const res = await retryOnReset(() => request(`${ts.admin}/_stats`), { attempts: 2 });
  return JSON.parse(res.text).classify_calls;
}

async function measure(target, concurrency, ts, sink) {
  const script = join(ROOT, "bench", "wrk", target.cold ? "cold.lua" : "mix.lua");
  const opts = { concurrency, script, mixFile: target.mixFile };
  if (OPT.warmupSeconds > 0) {
    await runWrk(target, { ...opts, seconds: OPT.warmupSeconds });
    // Let requests that wrk abandoned at the end of the warm-up finish.
    await new Promise((r) => setTimeout(r, 500));
  }
  const node0 = process.cpuUsage();
  const calls0 = await tsCalls(ts);
  const tsCpu0 = procStat(ts.pid).cpuTicks;
  const sinkCpu0 = procStat(sink.pid).cpuTicks;
  const cpu0 = procStat(target.pid).cpuTicks;
  const stopRss = rssSampler(target.pid, 100);
  const w = await runWrk(target, { ...opts, seconds: OPT.seconds });
  const cpu1 = procStat(target.pid).cpuTicks;
  const peakRssKiB = stopRss();
  const node1 = process.cpuUsage(node0);
  const calls1 = await tsCalls(ts);
  const us = (ticks) => ((ticks * 1e6) / CLK_TCK / Math.max(1, w.requests));
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

// ---------------------------------------------------------------------------
// Streaming

async function stream(target, direction, bytes) {
  const base = procStatusKiB(target.pid, "VmRSS");
  const stopRss = rssSampler(target.pid, 20);
  const started = process.hrtime.bigint();
  let res;
  if (direction === "upload") {
    res = await request(`${target.url}/upload`, {
      method: "PUT",
      headers: { "content-type": "application/octet-stream", "content-length": String(bytes) },
      bodyBytes: bytes,
    });
  } else {
    res = await request(`${target.url}/download`, {
      headers: { "x-demo-response-bytes": String(bytes) },
      onData: () => {},
    });
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const peak = stopRss();
  const ok =
    res.status === 200 &&
    (direction === "upload" ? Number(res.headers["x-sink-body-bytes"]) === bytes : res.bytes === bytes);
  if (!ok) log(`${target.name} ${direction} ${bytes}: status ${res.status}, ${res.bytes} bytes, sink saw ${res.headers["x-sink-body-bytes"]}`);
  return {
    config: target.name,
    direction,
    mib: bytes / MiB,
    ok,
    seconds,
    mib_per_s: bytes / MiB / seconds,
    rss_before_mib: base / 1024,
    rss_peak_mib: peak / 1024,
    rss_growth_mib: (peak - base) / 1024,
  };
}

// ---------------------------------------------------------------------------
// Report

const medOrNull = (xs) => (xs.some((x) => x === null || x === undefined) || xs.length === 0 ? null : median(xs));
const fmt = (x, d = 0) => (x === undefined || x === null || Number.isNaN(x) ? "-" : x.toFixed(d));
const table = (header, rows) => {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)));
  const line = (r) => r.map((c, i) => (i < 2 ? String(c).padEnd(widths[i]) : String(c).padStart(widths[i]))).join("  ");
  return [line(header), line(widths.map((w) => "-".repeat(w))), ...rows.map(line)].join("\n");
};

function parseDivan(text) {
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
    ns_per_request_by_kind: kinds,
  };
}

// ---------------------------------------------------------------------------

async function main() {
  mkdirSync(OUT_DIR, { recursive: true });
  const work = mkdtempSync(join(tmpdir(), "router-bench-"));
  if (OPT.keepWork) log(`work directory kept: ${work}`);
  else process.once("exit", () => rmSync(work, { recursive: true, force: true }));
  log(`options ${JSON.stringify(OPT)}`);

  const sink = await startDevstack(["sink", "--listen", "127.0.0.1:0"], "sink");
  const sinkAddr = sink.ready.addr;
  const tsCfg = join(work, "topology.toml");
  writeFileSync(tsCfg, topologyToml(sinkAddr));
  const tsProc = await startDevstack(["topology", "--config", tsCfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"], "topology");
  const ts = { addr: tsProc.ready.addr, admin: `http://${tsProc.ready.admin}`, pid: tsProc.child.pid };
  const sinkInfo = { pid: sink.child.pid };

  const mix = buildMix();
  const mixFile = join(work, "mix.tsv");
  writeMixFile(mix, mixFile);

  const routerVars = (ruleset) => ({
    GITLAB_RULES_CONFIG: ruleset,
    GITLAB_TOPOLOGY_SERVICE_URL: `http://${ts.addr}`,
    GITLAB_PROXY_HOST: sinkAddr,
    GITLAB_UPSTREAM_SCHEME: "http",
    GITLAB_ALLOWED_UPSTREAMS: sinkAddr,
  });
  const router = { scriptPath: join(ROOT, "build", "index.js") };
  const nullWorker = { scriptPath: join(ROOT, "bench", "null-worker.mjs") };
  const peersThere = existsSync(join(PEERS, "js-router.mjs")) && existsSync(join(PEERS, "js-floor.mjs"));
  if (!peersThere) log(`no peers at ${PEERS} (js-router.mjs, js-floor.mjs): the floor and peer rows are skipped`);
  const peers = peersThere && OPT.traceYardsticks ? traceYardsticks(PEERS, join(work, "peers-trace")) : PEERS;
  if (OPT.outboundHop) log("every worker's outbound fetch goes through Miniflare's strip-cf-connecting-ip worker (BENCH_OUTBOUND_HOP)");
  if (peers !== PEERS) log(`the floor and the peer send a request id and a traceparent and log both (BENCH_TRACE_YARDSTICKS): ${peers}`);
  // modulesRoot: workerd refuses module names that climb out with "..".
  const floorWorker = { scriptPath: join(peers, "js-floor.mjs"), modulesRoot: peers };
  const peerWorker = { scriptPath: join(peers, "js-router.mjs"), modulesRoot: peers };
  const peerVars = { TS_URL: `http://${ts.addr}/v1/classify` };
  const specs = [
    { name: "null", options: { ...nullWorker, bindings: { UPSTREAM: sinkAddr } } },
    ...(peersThere
      ? [
          { name: "floor", options: { ...floorWorker, bindings: { UPSTREAM: sinkAddr } } },
          { name: "floor-log", options: { ...floorWorker, bindings: { UPSTREAM: sinkAddr, LOG: "1" } } },
          { name: "peer", options: { ...peerWorker, bindings: peerVars }, warm: true },
          { name: "peer-log", options: { ...peerWorker, bindings: { ...peerVars, LOG: "1" } }, warm: true },
        ]
      : []),
    { name: "passthrough", options: { ...router, bindings: routerVars("passthrough") } },
    { name: "token-warm", options: { ...router, bindings: routerVars("session_token") }, warm: true },
    // The same with GITLAB_REQUEST_LOG=errors: no log line for routine requests.
    { name: "token-warm-quiet", options: { ...router, bindings: { ...routerVars("session_token"), GITLAB_REQUEST_LOG: "errors" } }, warm: true },
    // token-warm plus what operations add to every request: the runtime
    // control document (ROUTER_CONTROL bound, empty: one clock read per
    // request, a KV read per interval) and a cell list (GITLAB_CELLS: the
    // per-cell circuit check, the health record read every few seconds).
    {
      name: "token-warm-ops",
      options: {
        ...router,
        bindings: {
          ...routerVars("session_token"),
          GITLAB_CELLS: JSON.stringify(Array.from({ length: 10 }, (_, i) => ({ id: i + 1, address: sinkAddr, session_prefix: `cell-${i + 1}` }))),
        },
        kvNamespaces: ["ROUTER_CONTROL"],
      },
      warm: true,
    },
    // Path routing first (organizations, project ids, namespaces), then the session and token rules.
    { name: "cells", options: { ...router, bindings: routerVars("cells") }, warm: true },
    { name: "token-cold", options: { ...router, bindings: routerVars("session_token") }, cold: true },
  ];
  if (OPT.extra) {
    // The workers-rs floor: a Rust worker that only forwards (no rules, no log).
    specs.push({ name: "rust-null", options: { scriptPath: join(ROOT, "bench", "rust-null", "build", "index.js"), bindings: { UPSTREAM: sinkAddr } } });
    specs.push({ name: "null-log", options: { ...nullWorker, bindings: { UPSTREAM: sinkAddr, LOG: "1" } } });
    specs.push({ name: "cold-nocache", options: { ...router, bindings: routerVars("session_token"), cache: false }, cold: true });
    // token-warm with every forwarded request signed (Ed25519, a fresh key
    // per run), as production runs with GITLAB_ROUTER_SIGNING_POLICY=required.
    const seed = randomBytes(32).toString("base64");
    specs.push({ name: "token-warm-signed", options: { ...router, bindings: { ...routerVars("session_token"), GITLAB_ROUTER_SIGNING_KEY: seed, GITLAB_ROUTER_SIGNING_POLICY: "required" } }, warm: true });
  }
  // A/B in the same rounds: BENCH_BASE_BUILD=<a copy of build/ from another
  // commit> adds base-passthrough, base-token-warm and base-cells, run from that copy.
  if (env.BENCH_BASE_BUILD) {
    const base = { scriptPath: join(env.BENCH_BASE_BUILD, "index.js"), modulesRoot: env.BENCH_BASE_BUILD };
    specs.push({ name: "base-passthrough", options: { ...base, bindings: routerVars("passthrough") } });
    specs.push({ name: "base-token-warm", options: { ...base, bindings: routerVars("session_token") }, warm: true });
    specs.push({ name: "base-cells", options: { ...base, bindings: routerVars("cells") }, warm: true });
  }
  if (OPT.configs.length) {
    const unknown = OPT.configs.filter((c) => !specs.some((s) => s.name === c));
    if (unknown.length) throw new Error(`BENCH_CONFIGS names unknown configurations: ${unknown.join(", ")}`);
    const baselines = OPT.skipYardsticks ? [] : ["null", "floor-log", "peer-log"];
    const paired = OPT.paired.flat();
    specs.splice(0, specs.length, ...specs.filter((s) => baselines.includes(s.name) || OPT.configs.includes(s.name) || paired.includes(s.name)));
  }
  /** Starts a configuration and checks it answers the mix with the sink's 200. */
  const start = async (s) => {
    const t = await startWorker(s.name, s.options);
    Object.assign(t, { warm: !!s.warm, cold: !!s.cold, mixFile });
    log(`${s.name}: ${t.url} (workerd pid ${t.pid})`);
    const r = await request(`${t.url}/probe`, { headers: { cookie: "_gitlab_session=cell-3-0123456789abcdef0123456789abcdef" } });
    if (r.status !== 200 || r.text !== "ok\n") throw new Error(`${t.name}: probe answered ${r.status} ${r.text.slice(0, 200)} ${t.lines.last.join("\n")}`);
    return t;
  };
  // Warm a warm router: every request of the mix once (each distinct
  // classification key), then check that the mix costs no service call.
  let warmKeys = 0;
  let warmCheck = 0;
  const warmUp = async (warm) => {
    const calls0 = await tsCalls(ts);
    for (const r of mix) {
      const res = await request(`${warm.url}${r.path}`, { method: r.method, headers: r.headers, body: r.body });
      if (res.status !== 200) throw new Error(`warming: ${r.kind} ${r.path} → ${res.status} ${res.text.slice(0, 200)}`);
    }
    warmKeys = (await tsCalls(ts)) - calls0;
    for (const r of mix.slice(0, 50)) await request(`${warm.url}${r.path}`, { method: r.method, headers: r.headers, body: r.body });
    warmCheck = (await tsCalls(ts)) - calls0 - warmKeys;
    log(`warmed ${warm.name}: ${warmKeys} service calls for ${mix.length} requests; ${warmCheck} more on replay`);
  };
  if (OPT.instructions) return instructionsMode(specs, start, warmUp, mix, work, ts);
  if (OPT.paired.length) {
    // Fresh instances for every measured pair (pairedMode).
    const fresh = async (name) => {
      const spec = specs.find((s) => s.name === name);
      if (!spec) throw new Error(`BENCH_PAIRED: no configuration ${name} (have ${specs.map((s) => s.name).join(", ")})`);
      const t = await start(spec);
      if (t.warm) await warmUp(t);
      return t;
    };
    return pairedMode(fresh);
  }

  const targets = [];
  for (const s of specs) targets.push(await start(s));
  for (const warm of targets.filter((t) => t.warm)) await warmUp(warm);

  if (OPT.profile.length) return profileMode(specs, targets, ts, sinkInfo);

  // Load rounds.
  const runs = [];
  for (let round = 1; round <= OPT.rounds; round++) {
    const rot = (round - 1) % targets.length;
    const order = [...targets.slice(rot), ...targets.slice(0, rot)];
    for (const c of OPT.concurrency) {
      for (const t of order) {
        const m = await measure(t, c, ts, sinkInfo);
        runs.push({ round, concurrency: c, config: t.name, ...m });
        log(`round ${round} c=${c} ${t.name}: ${fmt(m.rps)} req/s, p50 ${fmt(m.p50_ms, 2)} ms, ${fmt(m.cpu_us_per_req)} µs CPU/req${m.errors ? `, ${m.errors} ERRORS` : ""}`);
      }
    }
  }
  for (const r of runs) {
    const base = runs.find((b) => b.round === r.round && b.concurrency === r.concurrency && b.config === "null");
    r.vs_null = {
      rps: r.rps / base.rps,
      p50: r.p50_ms / base.p50_ms,
      p99: r.p99_ms / base.p99_ms,
      cpu: r.cpu_us_per_req / base.cpu_us_per_req,
      cpu_extra_us: r.cpu_us_per_req - base.cpu_us_per_req,
    };
    // The issue-20 yardsticks: CPU over the floor with its log line, req/s
    // against the peer with its log line, same round and concurrency.
    const same = (name) => runs.find((b) => b.round === r.round && b.concurrency === r.concurrency && b.config === name);
    const floorLog = same("floor-log");
    const peerLog = same("peer-log");
    r.vs_floor_log_cpu_extra_us = floorLog ? r.cpu_us_per_req - floorLog.cpu_us_per_req : null;
    r.vs_peer_log_rps = peerLog ? r.rps / peerLog.rps : null;
    r.vs_peer_log_cpu_extra_us = peerLog ? r.cpu_us_per_req - peerLog.cpu_us_per_req : null;
  }
  const summary = [];
  for (const c of OPT.concurrency) {
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
      });
    }
  }

  // Cold start: the floor, the peer and the router, fresh processes.
  let cold = null;
  let coldFailed = 0;
  if (OPT.coldSamples > 0) {
    const coldSpecs = [
      peersThere && { name: "floor", options: { ...floorWorker, bindings: { UPSTREAM: sinkAddr } } },
      peersThere && { name: "peer", options: { ...peerWorker, bindings: peerVars } },
      { name: "router-session_token", options: { ...router, bindings: routerVars("session_token") } },
      { name: "router-cells", options: { ...router, bindings: routerVars("cells") } },
      // Without Miniflare's Cache API emulation (a JS worker over SQLite in
      // the same workerd, started by the router's first cache lookup; the
      // peer has no shared cache and Cloudflare's is not the isolate's CPU).
      { name: "router-session_token-nocache", options: { ...router, bindings: routerVars("session_token"), cache: false } },
      env.BENCH_BASE_BUILD && { name: "base-router-session_token", options: { scriptPath: join(env.BENCH_BASE_BUILD, "index.js"), modulesRoot: env.BENCH_BASE_BUILD, bindings: routerVars("session_token") } },
      env.BENCH_BASE_BUILD && { name: "base-router-cells", options: { scriptPath: join(env.BENCH_BASE_BUILD, "index.js"), modulesRoot: env.BENCH_BASE_BUILD, bindings: routerVars("cells") } },
    ].filter(Boolean);
    log(`cold start: ${OPT.coldSamples} fresh workerd per configuration (${coldSpecs.map((s) => s.name).join(", ")})`);
    try {
      cold = await coldStart(coldSpecs, {
        path: "/group-3/project-1/-/tree/main",
        headers: { cookie: "_gitlab_session=cell-3-0123456789abcdef0123456789abcdef", "accept-encoding": "identity" },
      });
    } catch (e) {
      // Reported, and the run fails, but the load figures are still printed.
      log(`cold start failed: ${e.stack ?? e}`);
      coldFailed = 1;
    }
  }

  // Streaming and memory, in two fresh workerd processes (the null worker
  // and the passthrough router) so their memory is not the load rounds'.
  const streaming = [];
  let memory = [];
  if (!OPT.skipStream && specs.some((s) => s.name === "passthrough")) {
    const pair = [];
    for (const name of ["null", "passthrough"]) {
      const spec = specs.find((x) => x.name === name);
      const t = await startWorker(`${name}`, spec.options);
      await request(`${t.url}/probe`);
      await stream(t, "upload", 8 * MiB); // first use of the body paths
      await stream(t, "download", 8 * MiB);
      t.idleRssMiB = procStatusKiB(t.pid, "VmRSS") / 1024;
      pair.push(t);
      log(`${name} (streaming): ${t.url} (workerd pid ${t.pid}), ${fmt(t.idleRssMiB, 1)} MiB RSS`);
    }
    const peaks = new Map(); // config/mib -> peak RSS MiB over its transfers
    for (const mib of [OPT.streamSmallMiB, OPT.streamMiB]) {
      for (const direction of ["upload", "download"]) {
        for (const t of mib === OPT.streamSmallMiB ? pair : [...pair].reverse()) {
          const s = await stream(t, direction, mib * MiB);
          s.vm_hwm_mib = procStatusKiB(t.pid, "VmHWM") / 1024;
          streaming.push(s);
          const k = `${t.name}/${mib}`;
          peaks.set(k, Math.max(peaks.get(k) ?? 0, s.rss_peak_mib));
          log(`${t.name} ${direction} ${mib} MiB: ${fmt(s.mib_per_s)} MiB/s, workerd RSS ${fmt(s.rss_before_mib)} → peak ${fmt(s.rss_peak_mib)} MiB`);
        }
      }
    }
    memory = pair.map((t) => {
      const small = peaks.get(`${t.name}/${OPT.streamSmallMiB}`);
      const big = peaks.get(`${t.name}/${OPT.streamMiB}`);
      return {
        config: t.name,
        idle_rss_mib: t.idleRssMiB,
        [`peak_rss_mib_${OPT.streamSmallMiB}`]: small,
        [`peak_rss_mib_${OPT.streamMiB}`]: big,
        vm_hwm_mib: procStatusKiB(t.pid, "VmHWM") / 1024,
        // "Does not grow with body size": the big transfers' peak within
        // 16 MiB of the small ones'.
        grows_with_body: big - small > 16,
      };
    });
  }

  // Sizes and the native bench.
  const wasm = readFileSync(join(ROOT, "build", "worker", "index.wasm"));
  const js = readFileSync(join(ROOT, "build", "worker", "shim.mjs"));
  const sizes = {
    wasm_raw_bytes: wasm.length,
    wasm_gzip_bytes: gzipSync(wasm, { level: 9 }).length,
    js_raw_bytes: js.length,
    js_gzip_bytes: gzipSync(js, { level: 9 }).length,
  };
  let native = null;
  const nativeFile = env.BENCH_NATIVE_OUTPUT;
  if (nativeFile && existsSync(nativeFile)) native = parseDivan(readFileSync(nativeFile, "utf8"));

  const meta = {
    date: new Date().toISOString(),
    quick: QUICK,
    options: OPT,
    cores: cpus().length,
    loadavg_at_end: loadavg(),
    clk_tck: CLK_TCK,
    wrk: execFileSync("sh", ["-c", "wrk --version 2>&1 | head -1 || true"]).toString().trim(),
    load_generator: "wrk + Lua (bench/wrk/*.lua): per-request headers from a pre-formatted mix",
    upstream: "devstack sink (hyper, 200 ok, bodies drained)",
    mix_requests: mix.length,
    warm_distinct_keys: warmKeys,
    warm_replay_service_calls: warmCheck,
    cold: "every request has a session prefix never seen before: memory-cache miss, Cache API match miss, one Topology Service call (404: no cell), Cache API put, memory insert; then the legacy cell. Miniflare's Cache API runs in the same workerd process.",
  };
  const result = { meta, summary, runs, cold_start: cold, streaming, memory, sizes, native };
  writeFileSync(join(OUT_DIR, "latest.json"), JSON.stringify(result, null, 2) + "\n");

  // Print.
  const out = [];
  out.push(`\n== Per-request cost (workerd, Miniflare direct socket, wrk; ${OPT.rounds} round(s) × ${OPT.seconds}s; medians over rounds)`);
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
        ["config", "conc", "req/s", "CPU µs/req", "CPU +µs over floor-log", "req/s ×peer-log", "CPU +µs over peer-log"],
        summary.map((s) => [s.config, s.concurrency, fmt(s.rps), fmt(s.cpu_us_per_req), fmt(s.vs_floor_log_cpu_extra_us), fmt(s.vs_peer_log_rps, 2), fmt(s.vs_peer_log_cpu_extra_us)]),
      ),
    );
    const get = (name, c) => summary.find((s) => s.config === name && s.concurrency === c);
    const verdict = (ok) => (ok ? "met" : "NOT met");
    for (const c of OPT.concurrency) {
      const tok = get("token-warm", c);
      const pass = get("passthrough", c);
      const cells = get("cells", c);
      if (tok) {
        out.push(`   c=${c} session_token (token-warm): ${fmt(tok.vs_floor_log_cpu_extra_us, 1)} µs over floor-log (target ≤ +10: ${verdict(tok.vs_floor_log_cpu_extra_us <= 10)}), ${fmt(tok.vs_peer_log_rps, 2)}× peer-log req/s (target ≥ 1.10: ${verdict(tok.vs_peer_log_rps >= 1.1)})`);
      }
      if (pass) out.push(`   c=${c} passthrough: ${fmt(pass.vs_floor_log_cpu_extra_us, 1)} µs over floor-log (target ≤ +5: ${verdict(pass.vs_floor_log_cpu_extra_us <= 5)})`);
      if (cells && tok) {
        const d = cells.cpu_us_per_req - tok.cpu_us_per_req;
        out.push(`   c=${c} cells − session_token: ${fmt(d, 1)} µs (target within 5: ${verdict(Math.abs(d) <= 5)})`);
      }
    }
  } else {
    out.push(`\n== Against the floor and the peer: skipped (no peers at ${PEERS})`);
  }
  if (cold) {
    out.push(`\n== Cold start (fresh workerd per sample, ${OPT.coldSamples} samples each, medians; "ready": Miniflare constructed → workerd ready with the script loaded and evaluated; "first": then one routed request → its response; CPU: workerd's threads, schedstat)`);
    out.push(
      table(
        ["config", "ready ms", "first ms", "total ms", "over floor ms", "CPU ready ms", "CPU first ms", "CPU total ms", "CPU over floor ms"],
        cold.summary.map((x) => [x.config, fmt(x.ready_ms, 1), fmt(x.first_ms, 1), fmt(x.total_ms, 1), fmt(x.over_floor_total_ms, 1), fmt(x.cpu_ready_ms, 1), fmt(x.cpu_first_ms, 1), fmt(x.cpu_total_ms, 1), fmt(x.over_floor_cpu_ms, 1)]),
      ),
    );
    const peer = cold.summary.find((x) => x.config === "peer");
    for (const r of cold.summary.filter((x) => x.config.startsWith("router-"))) {
      if (!peer) break;
      const ratio = (a, b) => (b > 0 ? a / b : NaN);
      out.push(
        `   ${r.config} / peer: total time ${fmt(ratio(r.total_ms, peer.total_ms), 2)}×, CPU ${fmt(ratio(r.cpu_total_ms, peer.cpu_total_ms), 2)}× (target ≤ 2×: ${ratio(r.cpu_total_ms, peer.cpu_total_ms) <= 2 && ratio(r.total_ms, peer.total_ms) <= 2 ? "met" : "NOT met"}); over the floor: time ${fmt(r.over_floor_total_ms, 1)} vs ${fmt(peer.over_floor_total_ms, 1)} ms, CPU ${fmt(r.over_floor_cpu_ms, 1)} vs ${fmt(peer.over_floor_cpu_ms, 1)} ms`,
      );
    }
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
        ["config", "idle RSS MiB", `peak RSS ${OPT.streamSmallMiB} MiB bodies`, `peak RSS ${OPT.streamMiB} MiB bodies`, "VmHWM MiB", "grows with body size"],
        memory.map((m) => [m.config, fmt(m.idle_rss_mib, 1), fmt(m[`peak_rss_mib_${OPT.streamSmallMiB}`], 1), fmt(m[`peak_rss_mib_${OPT.streamMiB}`], 1), fmt(m.vm_hwm_mib, 1), m.grows_with_body ? "YES" : "no"]),
      ),
    );
  }
  out.push(`\n== Sizes: build/worker/index.wasm ${fmt(sizes.wasm_raw_bytes / 1024)} KiB raw, ${fmt(sizes.wasm_gzip_bytes / 1024)} KiB gzip -9 (aim ≤ 300, limit 350); build/worker/shim.mjs ${fmt(sizes.js_raw_bytes / 1024)} KiB raw, ${fmt(sizes.js_gzip_bytes / 1024, 1)} KiB gzip`);
  if (native) {
    const kinds = Object.entries(native.ns_per_request_by_kind).map(([k, v]) => `${k} ${fmt(v)}`).join(", ");
    out.push(`== Rules engine, native (rules/session_token.json, 1000-request mix, divan fastest sample): ${fmt(native.ns_per_request)} ns/request (target < 2000; median ${fmt(native.ns_per_request_median)}); with the cache key ${fmt(native.ns_per_request_with_cache_key)} ns`);
    out.push(`   by kind, ns: ${kinds}`);
  } else {
    out.push(`== Rules engine, native: not run`);
  }
  out.push(`== Warm: ${warmKeys} distinct keys classified while warming, ${warmCheck} service calls on replay. JSON: target/bench/latest.json`);
  console.log(out.join("\n"));
  const bad = coldFailed + runs.filter((r) => r.errors > 0).length + streaming.filter((s) => !s.ok).length + memory.filter((m) => m.grows_with_body).length;
  return bad;
}

/**
 * BENCH_PROFILE mode: each named configuration again, in a fresh workerd
 * with its inspector on, profiled under wrk at the first concurrency for
 * BENCH_SECONDS. Prints where its CPU goes; writes
 * target/bench/profile-<config>.cpuprofile (Chrome DevTools can open it) and
 * target/bench/profile.json. The unprofiled instances stay idle.
 */
async function profileMode(specs, targets, ts, sinkInfo) {
  const results = {};
  const lines = [];
  for (const name of OPT.profile) {
    const spec = specs.find((s) => s.name === name);
    if (!spec) throw new Error(`BENCH_PROFILE: no configuration ${name} (have ${specs.map((s) => s.name)})`);
    const plain = targets.find((t) => t.name === name);
    const t = await startWorker(`${name}-profiled`, { ...spec.options, inspectorPort: 0 });
    Object.assign(t, { warm: plain.warm, cold: plain.cold, mixFile: plain.mixFile });
    const c = OPT.concurrency[0];
    const script = join(ROOT, "bench", "wrk", t.cold ? "cold.lua" : "mix.lua");
    await runWrk(t, { concurrency: c, script, mixFile: t.mixFile, seconds: Math.max(1, OPT.warmupSeconds) });
    await new Promise((r) => setTimeout(r, 500));
    const cpu0 = procStat(t.pid).cpuTicks;
    const { profile, loadResult } = await cpuProfile(t.mf, () =>
      runWrk(t, { concurrency: c, script, mixFile: t.mixFile, seconds: OPT.seconds }),
    );
    const cpuUs = ((procStat(t.pid).cpuTicks - cpu0) * 1e6) / CLK_TCK / loadResult.requests;
    const sum = summarize(profile, loadResult.requests);
    sum.workerd_cpu_us_per_req_while_profiling = cpuUs;
    results[name] = sum;
    writeFileSync(join(OUT_DIR, `profile-${name}.cpuprofile`), JSON.stringify(profile));
    lines.push(`\n== Profile of ${name} (c=${c}, ${loadResult.requests} requests; workerd CPU ${fmt(cpuUs)} µs/req while profiling, isolate busy ${fmt(sum.busy_us_per_req)} µs/req)`);
    lines.push(`   by kind, µs/req: ${Object.entries(sum.kinds_us_per_req).map(([k, v]) => `${k} ${fmt(v, 1)}`).join(", ")}`);
    if (sum.unattributed_gaps.count > 0) {
      lines.push(`   ${sum.unattributed_gaps.count} gap(s) between samples over 10 ms left unattributed (${fmt(sum.unattributed_gaps.us_per_req, 1)} µs/req)`);
    }
    lines.push(table(["self µs/req", "function"], sum.top_self.map((f) => [fmt(f.us_per_req, 1), f.name])));
    lines.push("");
    lines.push(table(["incl µs/req", "function"], sum.top_inclusive.map((f) => [fmt(f.us_per_req, 1), f.name])));
  }
  writeFileSync(join(OUT_DIR, "profile.json"), JSON.stringify(results, null, 2) + "\n");
  console.log(lines.join("\n"));
  return 0;
}

/**
 * BENCH_PAIRED mode: each pair's two configurations under load at the same
 * time (bench/paired.mjs), each measurement on two workerd instances
 * started (and warmed) for it; prints the CPU difference and the req/s
 * ratio per pair and concurrency, medians over BENCH_ROUNDS, and writes
 * target/bench/paired.json.
 */
async function pairedMode(fresh) {
  const load = async (t, concurrency, seconds) => {
    const script = join(ROOT, "bench", "wrk", t.cold ? "cold.lua" : "mix.lua");
    const w = await runWrk(t, { concurrency, script, mixFile: t.mixFile, seconds });
    return { requests: w.requests, rps: w.requests / (w.duration_us / 1e6), errors: Object.values(w.errors).reduce((a, b) => a + b, 0) };
  };
  const retire = async (t) => {
    await t.mf.dispose();
    instances.splice(instances.indexOf(t.mf), 1);
  };
  const result = await pairedRuns({
    pairs: OPT.paired,
    fresh,
    retire,
    rounds: OPT.rounds,
    concurrency: OPT.concurrency,
    seconds: OPT.seconds,
    warmupSeconds: OPT.warmupSeconds,
    load,
    cpuTicks: (pid) => procStat(pid),
    ticksPerSecond: CLK_TCK,
    log,
  });
  writeFileSync(join(OUT_DIR, "paired.json"), JSON.stringify({ options: OPT, ...result }, null, 2) + "\n");
  console.log(`\n== Paired (both configurations loaded at once, one wrk each; ${OPT.rounds} round(s) × ${OPT.seconds}s; medians over rounds of per-round figures)`);
  console.log(
    table(
      ["a", "b", "conc", "a CPU µs/req", "b CPU µs/req", "CPU a−b µs", "min", "max", "CPU a/b", "req/s a/b"],
      result.summary.map((x) => [x.a, x.b, String(x.concurrency), fmt(x.a_cpu_us_per_req), fmt(x.b_cpu_us_per_req), fmt(x.cpu_extra_us), fmt(x.cpu_extra_us_min), fmt(x.cpu_extra_us_max), fmt(x.cpu_ratio, 3), fmt(x.rps_ratio, 2)]),
    ),
  );
  for (const line of targetLines(result.summary)) console.log(line);
  return result.errors;
}

/**
 * BENCH_INSTRUCTIONS mode (bench/instructions.mjs): each configuration in
 * turn under callgrind; prints instructions per request, over the floor
 * with its log line and against the peer with its log line, and writes
 * target/bench/instructions.json. Without BENCH_CONFIGS: the floor and the
 * peer with their log lines, passthrough, token-warm, cells (and the base-*
 * rows with BENCH_BASE_BUILD).
 */
async function instructionsMode(specs, start, warmUp, mix, work, ts) {
  if (!haveCallgrind()) throw new Error("BENCH_INSTRUCTIONS needs valgrind (Debian package valgrind): not found");
  const wanted = OPT.configs.length
    ? specs.filter((s) => s.name !== "null" || OPT.configs.includes("null"))
    : specs.filter((s) => ["floor-log", "peer-log", "passthrough", "token-warm", "cells"].includes(s.name) || s.name.startsWith("base-"));
  // Under callgrind a request takes ~100 times as long, so the router's
  // 30 s cap on not-found answers would expire warm entries every few
  // hundred requests instead of every few ten thousand: the service's own
  // max-age (an hour) is kept instead, as the timed rounds see it.
  const run = wanted
    .filter((s) => !s.cold)
    .map((s) =>
      s.options.bindings?.GITLAB_RULES_CONFIG
        ? { ...s, options: { ...s.options, bindings: { ...s.options.bindings, GITLAB_CACHE_NEGATIVE_TTL_SECONDS: "3600" } } }
        : s,
    );
  for (const s of wanted.filter((s) => s.cold)) log(`${s.name}: skipped (a cold configuration needs a new key per request; counted configurations replay the mix)`);
  const workerdModule = await import("workerd");
  const workerd = env.MINIFLARE_WORKERD_PATH ?? workerdModule.default?.default ?? workerdModule.default;
  const startAndTrack = async (s) => {
    const t = await start(s);
    t.retire = () => instances.splice(instances.indexOf(t.mf), 1);
    return t;
  };
  const results = [];
  for (const spec of run) {
    log(`${spec.name}: under callgrind (${OPT.instr.warm} requests to settle, ${OPT.instr.windows} × ${OPT.instr.requests} counted, concurrency ${OPT.instr.concurrency})`);
    results.push(await countConfig(spec, { start: startAndTrack, warmUp, mix, workDir: work, workerd, opt: OPT.instr, log, serviceCalls: () => tsCalls(ts) }));
  }
  const rows = compare(results);
  writeFileSync(join(OUT_DIR, "instructions.json"), JSON.stringify({ options: OPT.instr, results: rows }, null, 2) + "\n");
  const k = (x) => (x === null ? "" : fmt(x / 1000, 1));
  console.log(`\n== Instructions per request under callgrind (the mix; ${OPT.instr.windows} windows × ${OPT.instr.requests} requests at concurrency ${OPT.instr.concurrency}; median, min–max over windows)`);
  console.log(
    table(
      ["config", "k instr/req (isolate)", "min", "max", "mean", "k instr/req (all threads)", "over floor-log k", "over floor-log %", "× peer-log", "TS calls", "errors"],
      rows.map((r) => [r.config, k(r.main), k(r.main_min), k(r.main_max), k(r.main_mean), k(r.all), k(r.over_floor_log), r.over_floor_log_pct === null ? "" : fmt(r.over_floor_log_pct, 1), r.vs_peer_log === null ? "" : fmt(r.vs_peer_log, 3), String(r.service_calls), String(r.errors)]),
    ),
  );
  for (const r of rows.filter((r) => r.top)) {
    console.log(`\n== Where ${r.config}'s isolate thread spends its instructions (self, last window; JIT code named from V8's perf map)`);
    console.log(table(["k instr/req", "function"], r.top.map((f) => [fmt(f.per_request / 1000, 2), f.name.slice(0, 150)])));
  }
  return rows.reduce((a, r) => a + r.errors, 0);
}

let code = 0;
const onSignal = async () => {
  await stopAll();
  process.exit(130);
};
process.on("SIGINT", onSignal);
process.on("SIGTERM", onSignal);
try {
  const bad = await main();
  if (bad) {
    log(`${bad} run(s) had errors`);
    code = 1;
  }
} catch (e) {
  console.error(e);
  code = 1;
} finally {
  await stopAll();
  agent.destroy();
}
process.exit(code);
