// What every mode runs against: the sink and the Topology Service
// (devstack), the request mix, and the configurations (the workers and
// their bindings), with how to start one and warm it.
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { traceYardsticks } from "../trace-yardsticks.mjs";
import { request } from "./http.mjs";
import { tsCalls } from "./load.mjs";
import { buildMix, cellList, topologyToml, writeMixFile } from "./mix.mjs";
import { log, startDevstack, startWorker } from "./processes.mjs";
import { ROOT } from "./settings.mjs";
import { shadowConfigurations } from "./shadow.mjs";

/**
 * Starts the sink and the Topology Service and writes the mix; returns
 * the run's context: `{ s, sinkAddr, sinkInfo, ts, mix, mixFile, peers,
 * peersThere, workers, specs, start, warmUp, warmStats }`.
 */
export async function startStack(s, work) {
  const sink = await startDevstack(s.devstack, ["sink", "--listen", "127.0.0.1:0"], "sink");
  const sinkAddr = sink.ready.addr;
  const tsCfg = join(work, "topology.toml");
  writeFileSync(tsCfg, topologyToml(sinkAddr));
  const tsProc = await startDevstack(s.devstack, ["topology", "--config", tsCfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"], "topology");
  const ts = { addr: tsProc.ready.addr, admin: `http://${tsProc.ready.admin}`, pid: tsProc.child.pid };

  const mix = buildMix();
  const mixFile = join(work, "mix.tsv");
  writeMixFile(mix, mixFile);

  const peersThere = existsSync(join(s.peersDir, "js-router.mjs")) && existsSync(join(s.peersDir, "js-floor.mjs"));
  if (!peersThere) log(`no peers at ${s.peersDir} (js-router.mjs, js-floor.mjs): the floor and peer rows are skipped`);
  const peers = peersThere && s.traceYardsticks ? traceYardsticks(s.peersDir, join(work, "peers-trace")) : s.peersDir;
  if (s.outboundHop) log("every worker's outbound fetch goes through Miniflare's strip-cf-connecting-ip worker (BENCH_OUTBOUND_HOP)");
  if (peers !== s.peersDir) log(`the floor and the peer send a request id and a traceparent and log both (BENCH_TRACE_YARDSTICKS): ${peers}`);

  const ctx = { s, sinkAddr, sinkInfo: { pid: sink.child.pid }, ts, mix, mixFile, peers, peersThere, warmStats: { keys: 0, replay: 0 } };
  ctx.workers = workers(ctx);
  ctx.specs = configurations(ctx);

  /** Starts a configuration and checks it answers the mix with the sink's 200. */
  ctx.start = async (spec) => {
    const t = await startWorker(spec.name, spec.options, { outboundHop: s.outboundHop });
    Object.assign(t, { warm: !!spec.warm, cold: !!spec.cold, mixFile });
    log(`${spec.name}: ${t.url} (workerd pid ${t.pid})`);
    const r = await request(`${t.url}/probe`, { headers: { cookie: "_gitlab_session=cell-3-0123456789abcdef0123456789abcdef" } });
    if (r.status !== 200 || r.text !== "ok\n") throw new Error(`${t.name}: probe answered ${r.status} ${r.text.slice(0, 200)} ${t.lines.last.join("\n")}`);
    return t;
  };
  // Warm a warm router: every request of the mix once (each distinct
  // classification key), then check that the mix costs no service call.
  ctx.warmUp = async (warm) => {
    const calls0 = await tsCalls(ts);
    for (const r of mix) {
      const res = await request(`${warm.url}${r.path}`, { method: r.method, headers: r.headers, body: r.body });
      if (res.status !== 200) throw new Error(`warming: ${r.kind} ${r.path} → ${res.status} ${res.text.slice(0, 200)}`);
    }
    const keys = (await tsCalls(ts)) - calls0;
    for (const r of mix.slice(0, 50)) await request(`${warm.url}${r.path}`, { method: r.method, headers: r.headers, body: r.body });
    const replay = (await tsCalls(ts)) - calls0 - keys;
    ctx.warmStats = { keys, replay };
    log(`warmed ${warm.name}: ${keys} service calls for ${mix.length} requests; ${replay} more on replay`);
  };
  return ctx;
}

/** The workers' Miniflare options and bindings, by role. */
function workers({ s, sinkAddr, ts, peers }) {
  const routerVars = (ruleset) => ({
    GITLAB_RULES_CONFIG: ruleset,
    GITLAB_TOPOLOGY_SERVICE_URL: `http://${ts.addr}`,
    GITLAB_PROXY_HOST: sinkAddr,
    GITLAB_UPSTREAM_SCHEME: "http",
    GITLAB_ALLOWED_UPSTREAMS: sinkAddr,
    GITLAB_ENVIRONMENT: "bench",
  });
  // The metrics dataset every deployed environment binds (docs/metrics.md):
  // Miniflare's emulation, whose writeDataPoint keeps nothing, so a row
  // counts the router's work for the point and the call, not the store's.
  const metrics = { analyticsEngineDatasets: { ROUTER_METRICS: { dataset: "gitlab_http_router_bench" } } };
  const router = { scriptPath: join(ROOT, "build", "index.js"), ...metrics };
  const base = s.baseBuild ? { scriptPath: join(s.baseBuild, "index.js"), modulesRoot: s.baseBuild, ...(s.baseMetrics ? metrics : {}) } : null;
  // modulesRoot: workerd refuses module names that climb out with "..".
  const floor = { scriptPath: join(peers, "js-floor.mjs"), modulesRoot: peers };
  const peer = { scriptPath: join(peers, "js-router.mjs"), modulesRoot: peers };
  const peerVars = { TS_URL: `http://${ts.addr}/v1/classify` };
  return {
    routerVars,
    nullWorker: { scriptPath: join(ROOT, "bench", "null-worker.mjs"), bindings: { UPSTREAM: sinkAddr } },
    // The Rust yardsticks (bench/build-yardsticks.sh builds them), with the
    // floor's log line as the router has its own.
    rustFloor: { scriptPath: join(ROOT, "target", "rust-floor", "worker", "entry.mjs"), bindings: { UPSTREAM: sinkAddr, LOG: "1" } },
    workersRs: (more = { LOG: "1" }) => ({ scriptPath: join(ROOT, "target", "workers-rs", "build", "index.js"), bindings: { UPSTREAM: sinkAddr, ...more } }),
    router: (ruleset, more = {}) => ({ ...router, bindings: { ...routerVars(ruleset), ...more } }),
    base: (ruleset) => ({ ...base, bindings: routerVars(ruleset) }),
    floor: (more = {}) => ({ ...floor, bindings: { UPSTREAM: sinkAddr, ...more } }),
    peer: (more = {}) => ({ ...peer, bindings: { ...peerVars, ...more } }),
  };
}

/**
 * The configurations of the load rounds, in order (docs/benchmark.md,
 * "Configurations"): `{name, options, warm?, cold?}`, narrowed by
 * BENCH_CONFIGS.
 */
function configurations({ s, sinkAddr, peersThere, workers: w }) {
  const specs = [
    { name: "null", options: w.nullWorker },
    ...(peersThere
      ? [
          { name: "floor", options: w.floor() },
          { name: "floor-log", options: w.floor({ LOG: "1" }) },
          { name: "peer", options: w.peer(), warm: true },
          { name: "peer-log", options: w.peer({ LOG: "1" }), warm: true },
        ]
      : []),
    { name: "rust-floor", options: w.rustFloor },
    { name: "workers-rs", options: w.workersRs() },
    { name: "passthrough", options: w.router("passthrough") },
    { name: "token-warm", options: w.router("session_token"), warm: true },
    // The same with GITLAB_REQUEST_LOG=errors: no log line for routine requests.
    { name: "token-warm-quiet", options: w.router("session_token", { GITLAB_REQUEST_LOG: "errors" }), warm: true },
    // token-warm plus what operations add to every request: the runtime
    // control document (ROUTER_CONTROL bound, empty: one clock read per
    // request, a KV read per interval) and a cell list (GITLAB_CELLS: the
    // per-cell circuit check, the health record read every few seconds).
    { name: "token-warm-ops", options: { ...w.router("session_token", { GITLAB_CELLS: cellList(sinkAddr) }), kvNamespaces: ["ROUTER_CONTROL"] }, warm: true },
    // Path routing first (organizations, project ids, namespaces), then the session and token rules.
    { name: "cells", options: w.router("cells"), warm: true },
    { name: "token-cold", options: w.router("session_token"), cold: true },
  ];
  if (s.extra) {
    // The workers-rs entry alone: a Rust worker that only forwards (no header work, no log).
    specs.push({ name: "rust-null", options: w.workersRs({ FORWARD_ONLY: "1" }) });
    specs.push({ name: "null-log", options: { ...w.nullWorker, bindings: { UPSTREAM: sinkAddr, LOG: "1" } } });
    specs.push({ name: "cold-nocache", options: { ...w.router("session_token"), cache: false }, cold: true });
    // token-warm with every forwarded request signed (Ed25519, a fresh key
    // per run), as production runs with GITLAB_ROUTER_SIGNING_POLICY=required.
    const seed = randomBytes(32).toString("base64");
    specs.push({ name: "token-warm-signed", options: w.router("session_token", { GITLAB_ROUTER_SIGNING_KEY: seed, GITLAB_ROUTER_SIGNING_POLICY: "required" }), warm: true });
  }
  // A/B in the same rounds: BENCH_BASE_BUILD=<a copy of build/ from another
  // commit> adds base-passthrough, base-token-warm and base-cells, run from that copy.
  if (s.baseBuild) {
    specs.push({ name: "base-passthrough", options: w.base("passthrough") });
    specs.push({ name: "base-token-warm", options: w.base("session_token"), warm: true });
    specs.push({ name: "base-cells", options: w.base("cells"), warm: true });
  }
  // Shadow evaluation (bench/driver/shadow.mjs), only when named.
  specs.push(...shadowConfigurations(specs));
  return chosen(specs, s);
}

/**
 * The configurations `s` asks for: BENCH_CONFIGS's (with the baselines
 * unless BENCH_SKIP_YARDSTICKS) and BENCH_PAIRED's; without BENCH_CONFIGS
 * every one but those run `onlyNamed`, unless BENCH_PAIRED or BENCH_PROFILE
 * names them.
 */
export function chosen(specs, s) {
  const named = [...s.paired.flat(), ...s.profile];
  if (s.configs.length && !s.scale) {
    const unknown = s.configs.filter((c) => !specs.some((x) => x.name === c));
    if (unknown.length) throw new Error(`BENCH_CONFIGS names unknown configurations: ${unknown.join(", ")}`);
    const baselines = s.skipYardsticks ? [] : ["null", "floor-log", "peer-log", "rust-floor", "workers-rs"];
    return specs.filter((x) => baselines.includes(x.name) || s.configs.includes(x.name) || named.includes(x.name));
  }
  return specs.filter((x) => !x.onlyNamed || named.includes(x.name));
}

/** The cold start's configurations: the floor, the peer, the router (and the base build's). */
export function coldConfigurations({ s, peersThere, workers: w }) {
  return [
    peersThere && { name: "floor", options: w.floor() },
    peersThere && { name: "peer", options: w.peer() },
    // The router logs every request (GITLAB_REQUEST_LOG): its yardsticks
    // are the ones that log too, as in the load rounds. A worker's first
    // console output costs workerd ~10 M instructions under Miniflare
    // (docs/benchmark.md, "Cold start").
    peersThere && { name: "floor-log", options: w.floor({ LOG: "1" }) },
    peersThere && { name: "peer-log", options: w.peer({ LOG: "1" }) },
    // What any Rust/wasm router pays for the same request, and the workers-rs way.
    { name: "rust-floor", options: w.rustFloor },
    { name: "workers-rs", options: w.workersRs() },
    { name: "router-session_token", options: w.router("session_token") },
    { name: "router-cells", options: w.router("cells") },
    // Without Miniflare's Cache API emulation (a JS worker over SQLite in
    // the same workerd, started by the router's first cache lookup; the
    // peer has no shared cache and Cloudflare's is not the isolate's CPU).
    { name: "router-session_token-nocache", options: { ...w.router("session_token"), cache: false } },
    s.baseBuild && { name: "base-router-session_token", options: w.base("session_token") },
    s.baseBuild && { name: "base-router-cells", options: w.base("cells") },
  ].filter(Boolean);
}
