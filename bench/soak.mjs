// The soak test, behind `bash bench/soak.sh`: the built worker in
// workerd (Miniflare) in front of devstack (`devstack up` with the shipped
// topology plus cell 4 in its own process, ruleset `cells`), a sustained
// traffic mix, and a fault schedule running through it:
//
//   baseline    nothing wrong
//   ts-down     the Topology Service refuses connections
//   ts-slow     it answers 1.5 s late (the router's timeout is 500 ms)
//   reload      a new workerd with a changed var takes the traffic (a
//               rollout step); the old one drains, then is disposed
//   ts-5xx      half its answers are 500/502/503
//   ts-404      it answers 404 for everything
//   cell-kill   cell 4 is SIGKILLed, restarted on the same port halfway
//   storm       all at once: half the service's answers are errors and the
//               rest 300 ms late, cell 4 killed, a reload, and a burst of
//               requests for one namespace the service answers 404 for
//   recover-N / final: nothing wrong (the faults' tails land here)
//
// Every answer is judged against the cell that owns its key (the demo cell
// names itself in X-Demo-Cell and its JSON echo). Documented fallbacks
// (README, docs/decisions.md): while the service cannot answer, and for a
// grace period after (circuit breaker open 5 s, retries), a request may go
// to the legacy cell 1 when no entry is cached; a 404 from the service
// sends a key to the next rules / the legacy cell and is cached for the
// negative TTL, so after ts-404 a key may reach cell 1 for that long. A
// request for cell 4 while it is down gets the router's 502 (intended).
// Everything else that is not the right cell, every other router-made 5xx,
// every corrupt or truncated body, lost or reordered WebSocket message and
// long-poll cut short is a failure; so is workerd RSS that keeps growing.
//
// Options: --short (CI: 8 clients, 100 s, small bodies), --clients N,
// --seconds S, --seed N, --record (write the figures into docs/soak.md),
// --worker null (the null worker, bench/soak-null-worker.mjs, in the
// router's place: workerd's own memory under the same traffic), --paced
// (at the last router run's rate, phase by phase, with its seed: for the
// null worker, or the router in another set-up), --vs-null (the router's
// run, then the null worker's paced on it, and a comparison of their RSS
// growth), --no-cache-api (Miniflare's Cache API off: what it takes of
// workerd's RSS; the router's stale answers from it then fail),
// --matched-io (with --worker null or --vs-null: the null worker also makes
// the router's I/O for each request, its Cache API reads and writes and
// Topology Service calls, from the questions the soak names).
// Writes target/soak/latest.json (the null worker: target/soak/null-<mode>.json)
// and its HTML report beside it (bench/report/soak-report.mjs); exit 1 on failure.
import { spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join, relative } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { ROOT } from "../tests/e2e/harness.mjs";
import { commitLabel, writeDocSection } from "./doc-section.mjs";
import { startSoakStack, stopSoakStack, startRouterGeneration, disposeRouter, killCell4, startCell4, rss } from "./soak-stack.mjs";
import { rng, zipf, keySpace, plainRequest, upload, download, longPoll, wsSession } from "./soak-traffic.mjs";
import { timeline } from "./soak-timeline.mjs";
import { writeSoakReport } from "./report/soak-report.mjs";

const MiB = 1024 * 1024;
const args = process.argv.slice(2);
const USAGE = "usage: bash bench/soak.sh [--short] [--clients N] [--seconds S] [--seed N] [--record] [--worker router|null] [--paced] [--vs-null] [--no-cache-api] [--matched-io]";
/** Why the command line is wrong, or null. */
function argsError() {
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (["--short", "--record", "--vs-null", "--paced", "--no-cache-api", "--matched-io", "--help", "-h"].includes(a)) continue;
    if (a === "--worker") {
      const v = args[++i];
      if (!["router", "null"].includes(v)) return `--worker needs router or null, got ${v ?? "nothing"}`;
      continue;
    }
    if (!["--clients", "--seconds", "--seed"].includes(a)) return `unknown argument ${a}`;
    const v = args[++i];
    const min = a === "--seed" ? 0 : 1;
    if (!/^[0-9]+$/.test(v ?? "") || Number(v) < min) return `${a} needs a whole number of at least ${min}, got ${v ?? "nothing"}`;
  }
  return null;
}
const argsBad =
  argsError() ??
  (args.includes("--vs-null") && args.includes("--worker") ? "--vs-null runs both workers: no --worker with it" : null) ??
  (args.includes("--record") && args.includes("--worker") && args[args.indexOf("--worker") + 1] === "null" ? "--record writes the router's figures (with --vs-null, the comparison too), not the null worker's" : null) ??
  (args.includes("--vs-null") && (args.includes("--paced") || args.includes("--no-cache-api")) ? "--vs-null compares a plain router run with the null worker paced on it: no --paced or --no-cache-api with it" : null) ??
  (args.includes("--matched-io") && !args.includes("--vs-null") && !(args.includes("--worker") && args[args.indexOf("--worker") + 1] === "null") ? "--matched-io is the null worker's: with --worker null or --vs-null" : null) ??
  (args.includes("--record") && (args.includes("--paced") || args.includes("--no-cache-api")) ? "--record writes a plain router run's figures: no --paced or --no-cache-api with it" : null);
if (argsBad || args.includes("--help") || args.includes("-h")) {
  process.stderr.write(`${argsBad ? `${argsBad}\n` : ""}${USAGE}\n`);
  process.exit(argsBad ? 2 : 0);
}
const flag = (name) => args.includes(name);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : dflt;
};
const SHORT = flag("--short");
const MODE = SHORT ? "short" : "full";
// The null worker making the router's I/O (bench/soak-null-worker.mjs).
const MATCHED_IO = flag("--matched-io") && args.includes("--worker") && args[args.indexOf("--worker") + 1] === "null";
/** The figures a run of `worker` in this mode left (target/soak/<worker>-<mode>.json), or null. */
function readRun(worker) {
  try {
    return JSON.parse(readFileSync(join(ROOT, "target", "soak", `${worker}-${MODE}.json`), "utf8"));
  } catch {
    return null;
  }
}
// --paced: the last router run of this mode, whose rate and seed the null
// worker's run takes.
const PACED_ON = flag("--paced") ? readRun("router") : null;
if (flag("--paced") && !PACED_ON?.phase_ops) {
  process.stderr.write(`--paced: no router run's figures in target/soak/router-${MODE}.json (run bash bench/soak.sh${SHORT ? " --short" : ""} first)\n`);
  process.exit(2);
}
const O = {
  mode: SHORT ? "short" : "full",
  // What stands in front of the cells: the router (build/) or the null
  // worker (bench/soak-null-worker.mjs: forwards each request to the cell
  // the soak expects, nothing else), same traffic, same workerd set-up.
  worker: args.includes("--worker") ? args[args.indexOf("--worker") + 1] : "router",
  clients: opt("--clients", PACED_ON?.clients ?? (SHORT ? 8 : 32)),
  seconds: opt("--seconds", PACED_ON?.seconds ?? (SHORT ? 100 : 900)),
  seed: opt("--seed", PACED_ON?.seed ?? Date.now() % 1_000_000),
  keys: SHORT ? 300 : 1500, // soak namespaces and projects (each), plus as many unknown ones
  // Short cache lifetimes so that entries expire inside every fault phase.
  ttl: SHORT ? 4 : 15,
  negativeTtl: SHORT ? 4 : 10,
  // GITLAB_MEMORY_CACHE_ENTRIES, plus the generation's number (a reload
  // changes it), from the first generation on in short mode and from the
  // first reload on in full mode (the first runs with the default, 10,000,
  // more than its 4,523 keys): far fewer entries than keys, so that even a
  // slow run (a loaded machine serves a tenth of a quiet one's requests)
  // fills the cache and evicts, and a stale answer must come from the
  // Cache API.
  memoryEntries: SHORT ? 100 : 500,
  // Clients of the storm's 404 burst, on top of --clients.
  burstClients: SHORT ? 2 : 8,
  upload: SHORT ? [64 * 1024, 4 * MiB] : [1 * MiB, 64 * MiB],
  longPollMs: SHORT ? [3_000, 8_000] : [20_000, 50_000],
  wsMs: SHORT ? [3_000, 8_000] : [10_000, 40_000],
  // workerd's own RSS grows with the requests and subrequests it serves,
  // whatever the worker: on workerd 1.20261117 the null worker's second
  // generation grows ~210 MiB in a short run, the router's ~1.5 times that
  // (its Cache API worker shares the process) (docs/soak.md, "Memory").
  rssGrowthLimit: 512 * MiB,
  // What the router itself holds: its wasm memory (flat at 1.4-3.2 MiB)
  // and its JS heap in use (peaks of 40-50 MiB, the null worker's too).
  wasmLimit: 32 * MiB,
  jsHeapLimit: 96 * MiB,
};
const random = rng(O.seed);
const between = ([lo, hi], r = random()) => Math.round(lo + (hi - lo) * r);
const logUniform = ([lo, hi]) => Math.round(Math.exp(Math.log(lo) + (Math.log(hi) - Math.log(lo)) * random()));

// Grace after a service fault ends during which the legacy cell is still a
// documented answer: the breaker stays open 5 s, a request already in its
// retries takes up to 3 × 500 ms plus back-off.
const SERVICE_GRACE_MS = 10_000;
const NOT_FOUND_GRACE_MS = O.negativeTtl * 1000 + 5_000;

// The storm is 1/15 of the run (60 s of the full 900); the other phases
// share the rest.
const STORM_SHARE = 1 / 15;
const STORM_LATENCY_MS = 300;
const PHASES = [
  ["baseline", 0.1],
  ["ts-down", 0.08],
  ["recover-1", 0.07],
  ["ts-slow", 0.08],
  ["recover-2", 0.07],
  ["reload", 0.1],
  ["ts-5xx", 0.08],
  ["recover-3", 0.07],
  ["ts-404", 0.08],
  ["recover-4", 0.08],
  ["cell-kill", 0.09],
  ["storm", null],
  ["final", 0.1],
].map(([name, share]) => ({ name, ms: Math.round((share === null ? STORM_SHARE : share * (1 - STORM_SHARE)) * O.seconds * 1000) }));

const say = (m) => process.stderr.write(`==> ${m}\n`);

if (PACED_ON && (PACED_ON.clients !== O.clients || PACED_ON.seconds !== O.seconds || PACED_ON.seed !== O.seed)) {
  process.stderr.write(`--paced: the router's run had ${PACED_ON.clients} clients, ${PACED_ON.seconds} s, seed ${PACED_ON.seed}; this one would have ${O.clients}, ${O.seconds} s, seed ${O.seed}\n`);
  process.exit(2);
}

// Pacing (--paced): the operations the clients make back to back (plain
// requests, transfers, the storm's 404 burst) start no faster than the
// router's run started them in the same phase; long-polls and WebSockets
// last as long as they are held, whatever the worker. A closed loop of
// clients otherwise gives a worker that answers faster more requests (the
// null worker serves three times the router's, in short mode on a loaded
// machine) and, as workerd's RSS follows what it served, more memory.
const PACED_OPS = ["request", "upload", "download"];
const paceGap = PACED_ON ? PHASES.map((p, i) => p.ms / Math.max(1, PACED_ON.phase_ops[i] ?? 0)) : null;
let nextSlot = 0;
async function paced() {
  if (!paceGap) return;
  const now = Date.now();
  const slot = Math.max(now, nextSlot);
  nextSlot = slot + paceGap[phaseIdx];
  if (slot > now) await sleep(slot - now);
}

// ---------------------------------------------------------------------------
// State shared by the schedule, the clients and the judge.

const windows = []; // { kind: "service" | "not-found" | "cell4-down", from, to, grace }
let phaseIdx = 0;
const stats = PHASES.map((p) => ({
  phase: p.name,
  from: 0,
  to: 0,
  requests: 0,
  by_op: {},
  router_5xx_intended: 0,
  router_5xx_unintended: 0,
  fallback_legacy: 0,
  stale_served: 0,
  stale_ignored: 0,
  fallback_unscheduled: 0,
  wrong_cell: 0,
  corrupt: 0,
  transport_errors: 0,
  keepalive_retries: 0,
  ws_sessions: 0,
  ws_messages: 0,
  ws_lost: 0,
  ws_reordered: 0,
  longpolls: 0,
  longpolls_cut: 0,
  burst: 0,
  latencies: [],
  rss: { start: null, peak: 0, end: null },
}));
const failures = [];
let reqSeq = 0;
// The same counts per second of the run, for the HTML report.
const TIMELINE = timeline(1000);

const overlaps = (o, kind, extra = () => true) =>
  windows.some((w) => w.kind === kind && extra(w) && w.from <= o.ended && (w.to ?? Infinity) + w.grace >= o.started);

function fail(o, kind, detail) {
  pendingFailures.push([o, kind, detail]);
}

// Failures are written out at the end, with the router's log line for the
// request (its lines may arrive after the answer).
const pendingFailures = [];
function recordFailures() {
  for (const [o, kind, detail] of pendingFailures) {
    // The router's line says it answered from its stale entry: stale-if-error
    // was used, and the entry was a "not found" the service gave after the
    // right cell last answered (the ts-404 phase reaches keys through
    // requests of other kinds and refreshes too, which lastFallback does not see).
    if (kind === "stale-ignored" && routerLine(o)?.cache === "stale") {
      stats[phaseAt(o.started)].stale_ignored--;
      continue;
    }
    recordFailure(o, kind, detail);
  }
}

function recordFailure(o, kind, detail) {
  TIMELINE.failure(o.started - T0, kind);
  failures.push({ router_log: o.path ? routerLine(o) ?? null : null, retried_after: o.retried ?? undefined, phase: PHASES[phaseAt(o.started)].name, kind, detail, op: o.op, key_kind: o.kind, want: o.want, got: o.cell, status: o.status, method: o.method, path: o.path, headers: o.headers, at_ms: o.started - T0, duration_ms: o.ended - o.started });
}

function phaseAt(t) {
  for (let i = stats.length - 1; i >= 0; i--) if (stats[i].from && stats[i].from <= t) return i;
  return 0;
}

// Stale-if-error (docs/decisions.md, Failures): an expired memory entry up
// to 600 s old is preferred over an error, the legacy cell comes after. A
// plain request (one classify question) that fell back to the legacy cell
// although the same workerd answered its key from the right cell less than
// 600 s before (and not from the legacy cell since: a 404 is an entry too)
// had an entry to use: a failure.
const lastGood = new Map(); // "generation:key" -> when the right cell last answered
const lastFallback = new Map(); // "generation:key" -> when the legacy cell last stood in
const STALE_MS = 600_000;

function staleCheck(o) {
  // A 404 is an answer, not an error: stale-if-error is for errors only.
  if (o.op !== "request" || overlaps(o, "not-found")) return;
  const k = `${o.generation}:${o.key}`;
  const good = lastGood.get(k);
  if (good === undefined || good >= o.started || good < (lastFallback.get(k) ?? 0) || o.started - good > STALE_MS - 30_000) return;
  stats[phaseAt(o.started)].stale_ignored++;
  fail(o, "stale-ignored", `legacy cell although generation ${o.generation} routed this key to cell ${o.want} ${o.started - good} ms before`);
}

// The legacy cell outside a fault window: documented only if the router
// logged this request as the failure path (the service timed out or its
// breaker was open: on a saturated machine a healthy service can miss the
// 500 ms timeout). Else a wrong cell.
const pending = [];
const SERVICE_FAILURE = /topology service/;

// workerd's log lines reach this process through pipes that lag under
// load (seconds): a line may arrive well after its answer, so the nearest
// matching line up to 30 s later is the request's.
function routerLine(o, pred = () => true) {
  const urlPath = o.path.split("?")[0];
  let best = null;
  for (const l of stack.logs.answers) {
    if (l.method !== o.method || l.path !== urlPath || l.t < o.started || l.t > o.ended + 30_000) continue;
    if (o.status !== null && l.status !== o.status) continue;
    if (!pred(l)) continue;
    if (!best || l.t < best.t) best = l;
  }
  return best;
}

function judgePending() {
  for (const o of pending) {
    const s = stats[phaseAt(o.started)];
    TIMELINE.within(o.started - T0, s, () => judgeOnePending(o, s));
  }
}

/** Judges a legacy-cell answer outside the fault windows against the router's log line for it. */
function judgeOnePending(o, s) {
  let line = routerLine(o, (l) => l.cache === "fallback");
  if (line && SERVICE_FAILURE.test(line.error ?? "")) {
    s.fallback_unscheduled++;
    staleCheck(o);
    (unscheduled[line.error.replace(/[0-9]+ ms/g, "N ms")] ??= 0);
    unscheduled[line.error.replace(/[0-9]+ ms/g, "N ms")]++;
  } else if ((line = routerLine(o, (l) => l.fell_through && (l.attempts >= 2 || l.service_ms >= 450 || l.coalesced || breakerOpenAt(l.t))))) {
    // docs/soak.md, "Legacy answers outside a fault": the service failed, a
    // stale 404 answered and the key fell through to the legacy cell. The
    // outcome is the documented failure path; counted, with its own reason.
    s.fallback_unscheduled++;
    unscheduled[STALE_404]++;
  } else {
    s.wrong_cell++;
    fail(o, "wrong-cell", `cell 1 answered a cell-${o.want} key`);
  }
}
// The breaker was open around `t`: another request's line within 1 s says so.
function breakerOpenAt(t) {
  return stack.logs.answers.some((l) => Math.abs(l.t - t) <= 1000 && /circuit open/.test(l.error ?? ""));
}
const STALE_404 = "service failed, stale 404 fell through, not logged as an error (router defect)";
const unscheduled = { [STALE_404]: 0 };

/** Judges one outcome: counts it in its phase (and its second) and records failures. */
function judge(o) {
  const s = stats[phaseAt(o.started)];
  TIMELINE.within(o.started - T0, s, () => judgeOne(o, s));
}

function judgeOne(o, s) {
  s.requests++;
  s.by_op[o.op] = (s.by_op[o.op] ?? 0) + 1;
  if (o.op === "request" && o.status !== null) s.latencies.push(o.ended - o.started);
  const serviceTrouble = overlaps(o, "service") || overlaps(o, "not-found");
  const cellDown = o.want === 4 && overlaps(o, "cell4-down");
  if (o.op === "websocket") {
    s.ws_sessions++;
    s.ws_messages += o.sent ?? 0;
    s.ws_lost += o.lost ?? 0;
    s.ws_reordered += o.reordered ?? 0;
  }
  if (o.op === "longpoll") s.longpolls++;
  if (o.kind === "burst-404") s.burst++;

  if (o.retried) s.keepalive_retries++;
  if (o.status === null) {
    s.transport_errors++;
    if (o.op === "longpoll") s.longpolls_cut++;
    fail(o, "transport", o.error);
  } else if (o.cell === null) {
    // Answered by the router itself.
    if (o.status >= 500 && cellDown) s.router_5xx_intended++;
    else if (o.status >= 500) {
      s.router_5xx_unintended++;
      fail(o, "router-5xx", `router answered ${o.status} for a cell-${o.want} key`);
    } else fail(o, "router-answer", `router answered ${o.status} itself`);
    if (o.op === "longpoll" && !cellDown) s.longpolls_cut++;
  } else if (o.cell !== o.want) {
    if (o.cell === 1 && serviceTrouble) {
      s.fallback_legacy++;
      staleCheck(o);
    } else if (o.cell === 1) {
      // Judged at the end, against the router's log (its lines may arrive after the answer).
      pending.push(o);
    } else {
      s.wrong_cell++;
      fail(o, "wrong-cell", `cell ${o.cell} answered a cell-${o.want} key`);
    }
  }
  if (o.op === "request" && o.cell !== null) {
    const k = `${o.generation}:${o.key}`;
    if (o.cell === o.want && o.want !== 1) lastGood.set(k, o.ended);
    else if (o.cell === 1 && o.want !== 1) lastFallback.set(k, o.ended);
  }
  for (const p of o.problems) {
    if (p.kind === "corrupt") s.corrupt++;
    if (p.kind === "longpoll-cut") s.longpolls_cut++;
    if (p.kind === "ws-lost" && !o.lost) s.ws_lost++;
    fail(o, p.kind, p.detail);
  }
}

// ---------------------------------------------------------------------------
// Clients. Roles keep concurrency sustained: long-polls and WebSockets hold
// their client for seconds, so they get their own clients.

let stopping = false;
let stack;
let current; // the router generation taking new traffic
const inflight = new Map(); // generation -> operations in flight

async function run(fn) {
  const gen = current;
  inflight.set(gen, (inflight.get(gen) ?? 0) + 1);
  try {
    const o = await fn(() => gen.url);
    o.generation = gen.n;
    gen.requests = (gen.requests ?? 0) + 1;
    (gen.keys ??= new Set()).add(o.key);
    judge(o);
  } catch (e) {
    failures.push({ phase: PHASES[phaseIdx].name, kind: "soak-bug", detail: e.stack });
  } finally {
    inflight.set(gen, inflight.get(gen) - 1);
  }
}

function clients(keys) {
  const pickAny = zipf(keys.length, 1.1, random);
  // Long-lived and transfer traffic stays off cell 4 (killed mid-run: its
  // cut connections would be intended, and say nothing).
  const live = keys.filter((k) => k.cell !== 4);
  const liveTokens = live.filter((k) => k.headers);
  const pickLive = zipf(live.length, 1.1, random);
  const roles = [];
  const n = O.clients;
  const lp = Math.max(1, Math.round(n * 0.25));
  const ws = Math.max(1, Math.round(n * 0.15));
  const xfer = Math.max(1, Math.round(n * 0.1));
  for (let i = 0; i < n; i++) roles.push(i < lp ? "longpoll" : i < lp + ws ? "websocket" : i < lp + ws + xfer ? "transfer" : "request");
  return roles.map(async (role) => {
    await sleep(random() * 1000);
    while (!stopping) {
      if (role === "request" || role === "transfer") await paced();
      if (stopping) break;
      const id = ++reqSeq;
      if (role === "request") await run((base) => plainRequest(base, keys[pickAny()], random, id));
      else if (role === "longpoll") await run((base) => longPoll(base, liveTokens[Math.floor(random() * liveTokens.length)], between(O.longPollMs), id));
      else if (role === "websocket") await run((base) => wsSession(base, liveTokens[Math.floor(random() * liveTokens.length)], between(O.wsMs), random, id));
      else if (random() < 0.5) await run((base) => upload(base, live[pickLive()], logUniform(O.upload), id, id));
      else await run((base) => download(base, live[pickLive()], logUniform(O.upload), id));
    }
  });
}

// ---------------------------------------------------------------------------
// The fault schedule.

async function faults(body) {
  const res = await fetch(`${stack.topology.admin}/_faults${body === "reset" ? "/reset" : ""}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: body === "reset" ? "{}" : JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`POST /_faults ${JSON.stringify(body)}: ${res.status} ${await res.text()}`);
}

async function serviceFault(kind, body, ms, grace, steps) {
  const w = { kind, from: Date.now(), to: null, grace };
  windows.push(w);
  await faults(body);
  if (steps) {
    for (const step of steps) {
      await sleep(ms / steps.length);
      await faults(step);
    }
  } else await sleep(ms);
  await faults("reset");
  w.to = Date.now();
}

const drains = [];
const reloads = [];

async function phase(p) {
  switch (p.name) {
    case "ts-down":
      return serviceFault("service", { refuse_connections: true }, p.ms, SERVICE_GRACE_MS);
    case "ts-slow":
      return serviceFault("service", { latency_ms: 1500 }, p.ms, SERVICE_GRACE_MS);
    case "ts-5xx":
      return serviceFault("service", { error_rate: 0.5, error_status: 503 }, p.ms, SERVICE_GRACE_MS, [{ error_status: 500 }, { error_status: 502 }, { error_status: 503 }]);
    case "ts-404":
      return serviceFault("not-found", { not_found_all: true }, p.ms, NOT_FOUND_GRACE_MS);
    case "cell-kill":
      await cell4Down(p.ms / 2);
      return sleep(p.ms / 2);
    case "reload": {
      const t = Date.now();
      await reload();
      return sleep(Math.max(0, p.ms - (Date.now() - t)));
    }
    case "storm":
      return storm(p.ms);
    default:
      return sleep(p.ms);
  }
}

/** Cell 4 SIGKILLed, started again `ms` later; its keys' 502s are intended meanwhile. */
async function cell4Down(ms) {
  const w = { kind: "cell4-down", from: Date.now() - 500, to: null, grace: 2000 };
  windows.push(w);
  await killCell4(stack);
  await sleep(ms);
  await startCell4(stack);
  w.to = Date.now();
}

/**
 * A new workerd with a changed var (GITLAB_MEMORY_CACHE_ENTRIES) takes new
 * traffic, as a rollout step would; the old one drains what it has in
 * flight, then is disposed.
 */
async function reload() {
  const t = Date.now();
  const old = current;
  const vars = { ...old.vars, GITLAB_MEMORY_CACHE_ENTRIES: String(O.memoryEntries + stack.routers.length) };
  const gen = await startRouterGeneration(stack, vars);
  current = gen;
  const r = { from: old.n, to: gen.n, started_ms: gen.startedAt - t, pid: gen.pid, changed: "GITLAB_MEMORY_CACHE_ENTRIES" };
  reloads.push(r);
  say(`reload: workerd ${gen.pid} (generation ${gen.n}) ready after ${r.started_ms} ms; draining generation ${old.n}`);
  drains.push(
    (async () => {
      const deadline = Date.now() + O.longPollMs[1] + O.wsMs[1] + 60_000;
      while ((inflight.get(old) ?? 0) > 0 && Date.now() < deadline) await sleep(200);
      r.drained_ms = Date.now() - t;
      r.left_in_flight = inflight.get(old) ?? 0;
      r.old_rss_end = rss(old.pid);
      await disposeRouter(old);
    })(),
  );
}

/**
 * Every fault at once for `ms`: the service errs on half its answers
 * (500/502/503 in turn) and answers the rest 300 ms late (the timeout is
 * 500 ms), cell 4 is down for the first two thirds, a reload comes after
 * the first third, and a burst of requests for one namespace no cell
 * knows (the service's 404, then the legacy cell) runs throughout.
 */
async function storm(ms) {
  const t = Date.now();
  const service = serviceFault("service", { error_rate: 0.5, error_status: 503, latency_ms: STORM_LATENCY_MS }, ms, SERVICE_GRACE_MS, [{ error_status: 500 }, { error_status: 502 }, { error_status: 503 }]);
  const cell = cell4Down((2 * ms) / 3);
  const burst = burst404(ms);
  await sleep(ms / 3);
  await reload();
  await Promise.all([service, cell, burst]);
  return sleep(Math.max(0, ms - (Date.now() - t)));
}

/** `O.burstClients` clients back to back on one unknown namespace for `ms`; its cell is the legacy cell. */
async function burst404(ms) {
  const key = { id: "burst-404", kind: "burst-404", cell: 1, ns: `storm-404-${O.seed}` };
  const until = Date.now() + ms;
  await Promise.all(
    Array.from({ length: O.burstClients }, async () => {
      while (!stopping && Date.now() < until) {
        await paced();
        await run((base) => plainRequest(base, key, random, ++reqSeq));
      }
    }),
  );
}

// ---------------------------------------------------------------------------
// workerd memory: every generation's VmRSS once a second.

function sampleRss() {
  let total = 0;
  for (const gen of stack.routers) {
    if (gen.disposed || !gen.pid) continue;
    const v = rss(gen.pid);
    if (v === null) continue;
    (gen.samples ??= []).push({ t: Date.now(), rss: v });
    if (stats[0].from) TIMELINE.rss(Date.now() - T0, gen.n, v);
    total += v;
  }
  const r = stats[phaseIdx].rss;
  if (r.start === null) r.start = total;
  r.peak = Math.max(r.peak, total);
  r.end = total;
}

// The worker's own memory (bench/soak-inspect.mjs: its JS heap, the
// router's wasm memory) and the JS heap of Miniflare's Cache API worker,
// every 5 s, through workerd's inspector.
let ownSampling = false;
async function sampleOwn() {
  if (ownSampling) return; // a slow inspector: skip, do not queue
  ownSampling = true;
  try {
    for (const gen of stack.routers) {
      if (gen.disposed || !gen.inspectors.own) continue;
      const v = await gen.inspectors.own.sample();
      const c = await gen.inspectors.cache?.sample();
      if (v && !gen.disposed) (gen.own ??= []).push({ t: Date.now(), ...v, cache_heap_used: c?.heap_used ?? null });
    }
  } finally {
    ownSampling = false;
  }
}

/** A generation's own memory: its first, largest and last sample, MiB. */
function ownMemory(gen) {
  const s = gen.own ?? [];
  if (!s.length) return null;
  const first = s[0];
  const last = s[s.length - 1];
  const wasm = first.wasm === null ? null : { start: mib(first.wasm), end: mib(last.wasm) };
  const cache = last.cache_heap_used === null ? null : { start: mib(first.cache_heap_used ?? 0), end: mib(last.cache_heap_used) };
  return { samples: s.length, heap_used: { start: mib(first.heap_used), peak: mib(Math.max(...s.map((x) => x.heap_used))), end: mib(last.heap_used) }, heap_total_end: mib(last.heap_total), wasm, cache_heap_used: cache };
}

/** Per generation: RSS early in its life against its end; growth past the limit fails. */
function memoryVerdicts() {
  return stack.routers.map((gen) => {
    const s = gen.samples ?? [];
    const mean = (xs) => (xs.length ? xs.reduce((a, x) => a + x.rss, 0) / xs.length : 0);
    const n = s.length;
    const warm = mean(s.slice(Math.floor(n * 0.1), Math.max(Math.floor(n * 0.1) + 1, Math.floor(n * 0.3))));
    const end = mean(s.slice(Math.floor(n * 0.8)));
    const peak = Math.max(0, ...s.map((x) => x.rss));
    const growth = end - warm;
    const own = ownMemory(gen);
    const ownBounded = !own || ((own.wasm === null || own.wasm.end <= mib(O.wasmLimit)) && own.heap_used.peak <= mib(O.jsHeapLimit));
    return { generation: gen.n, pid: gen.pid, samples: n, requests: gen.requests ?? 0, own, own_bounded: ownBounded, start_mib: mib(s[0]?.rss ?? 0), warm_mib: mib(warm), peak_mib: mib(peak), end_mib: mib(end), growth_mib: mib(growth), bounded: (n < 5 || growth <= O.rssGrowthLimit) && ownBounded };
  });
}

const mib = (b) => Math.round((b / MiB) * 10) / 10;

function pct(xs, p) {
  if (!xs.length) return null;
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

// ---------------------------------------------------------------------------

let T0 = Date.now();

/**
 * --vs-null, after the router's run: the null worker's soak in its own
 * process, paced on the router's run (its rate, options and seed); its
 * report, its exit status.
 */
function runNullPaced() {
  const rest = args.filter((a) => a !== "--vs-null" && a !== "--record");
  say(`--vs-null: the null worker's soak, paced on this run (seed ${O.seed})`);
  const r = spawnSync(process.execPath, [process.argv[1], ...rest, "--worker", "null", "--paced"], { stdio: "inherit", env: { ...process.env, SOAK_VS_NULL_CHILD: "1" } });
  return r.status;
}

async function main() {
  say(`soak (${O.mode}, ${O.worker === "null" ? "the null worker" : "the router"}): ${O.clients} clients, ${O.seconds} s, seed ${O.seed}`);
  const started = Date.now();
  const load = loadavg()[0];
  const vars = { ...(SHORT ? { GITLAB_MEMORY_CACHE_ENTRIES: String(O.memoryEntries) } : {}), ...(MATCHED_IO ? { SOAK_NULL_IO: "matched" } : {}) };
  stack = await startSoakStack({ keys: O.keys, cacheControl: `max-age=${O.ttl}`, notFoundCacheControl: `max-age=${O.negativeTtl}`, vars, worker: O.worker, cacheApi: !flag("--no-cache-api") });
  const startupMs = Date.now() - started;
  current = stack.routers[0];
  say(`stack ready in ${startupMs} ms: router ${current.url} (workerd ${current.pid}), service ${stack.topology.addr}, cells ${Object.values(stack.cells).map((c) => `${c.id}=${c.addr}`).join(" ")}`);
  const keys = keySpace(O.keys, random);
  const sampler = setInterval(sampleRss, 1000);
  const ownSampler = setInterval(() => sampleOwn().catch(() => {}), 5000);
  T0 = Date.now();
  stats[0].from = T0;
  sampleRss();
  const running = clients(keys);
  try {
    for (phaseIdx = 0; phaseIdx < PHASES.length; phaseIdx++) {
      const p = PHASES[phaseIdx];
      const s = stats[phaseIdx];
      s.from = Date.now();
      if (phaseIdx > 0) stats[phaseIdx - 1].to = s.from;
      sampleRss();
      say(`phase ${p.name} (${Math.round(p.ms / 1000)} s) at ${Math.round((s.from - T0) / 1000)} s`);
      await phase(p);
    }
    phaseIdx = PHASES.length - 1;
    stats[phaseIdx].to = Date.now();
    stopping = true;
    say("schedule done: waiting for operations in flight");
    // An unref'd timer: it bounds the wait without keeping the process alive.
    await Promise.race([Promise.all(running), sleep(O.longPollMs[1] + O.wsMs[1] + 60_000, undefined, { ref: false })]);
    await Promise.all(drains);
    sampleRss();
  } finally {
    stopping = true;
    clearInterval(sampler);
    clearInterval(ownSampler);
  }
  await sampleOwn().catch(() => {});
  await sleep(3000); // the router's last log lines
  judgePending();
  recordFailures();
  countStale();
  const memory = memoryVerdicts();
  const caches = cacheVerdict();
  const routerLogs = stack.logs;
  await stopSoakStack(stack);
  const r = report({ startupMs, memory, caches, routerLogs, wallMs: Date.now() - started, load: [load, loadavg()[0]] });
  // The comparison: a paced run against the router run it was paced on, or --vs-null's.
  let compared = [];
  if (PACED_ON && !process.env.SOAK_VS_NULL_CHILD) compared = comparisonLines(PACED_ON, r.summary, null);
  if (flag("--vs-null")) {
    const status = runNullPaced();
    const nul = readRun("null");
    compared = nul && nul.seed === O.seed && nul.paced && nul.date > r.summary.date ? comparisonLines(r.summary, nul, status) : [`RSS vs the null worker: no figures from its run (exit ${status})`];
  }
  if (compared.length) process.stdout.write(`\n${compared.join("\n")}\n`);
  if (flag("--record")) recordFigures([...r.out, ...compared], r.ok);
}

/** Answers the router logged as stale (an expired entry standing in for a failing service), per phase. */
function countStale() {
  for (const l of stack.logs.answers) {
    if (l.cache !== "stale") continue;
    const s = stats[phaseAt(l.t)];
    TIMELINE.within(l.t - T0, s, () => s.stale_served++);
  }
}

/**
 * Keys each generation was asked for against its memory cache: the soak
 * must push the cache past its capacity (else eviction goes untested).
 */
function cacheVerdict() {
  const gens = stack.routers.map((gen) => ({ generation: gen.n, keys: gen.keys?.size ?? 0, memory_entries: Number(gen.vars.GITLAB_MEMORY_CACHE_ENTRIES ?? 10_000) }));
  // The null worker has no cache: not applicable.
  if (O.worker === "null") return { generations: gens, applicable: false, past_capacity: true };
  return { generations: gens, applicable: true, past_capacity: gens.some((g) => g.keys > g.memory_entries) };
}

/**
 * One run's memory figures, kept per worker and mode
 * (target/soak/<worker>-<mode>.json) for the other worker's run to compare
 * against.
 */
function memorySummary(memory, requests, ok, phaseOps) {
  const max = (k) => Math.max(0, ...memory.map((m) => m[k]));
  return {
    worker: O.worker,
    mode: O.mode,
    clients: O.clients,
    seconds: O.seconds,
    seed: O.seed,
    date: new Date().toISOString(),
    commit: commitLabel(ROOT, join(ROOT, "docs", "soak.md")),
    ok,
    requests,
    paced: Boolean(PACED_ON),
    cache_api: !flag("--no-cache-api"),
    matched_io: MATCHED_IO,
    // Operations the clients make back to back, per phase (what --paced matches).
    phase_ops: phaseOps,
    // The soak's measure (end − warm, the limit's), and start → peak.
    growth_mib: max("growth_mib"),
    rise_mib: Math.max(0, ...memory.map((m) => m.peak_mib - m.start_mib)),
    peak_mib: max("peak_mib"),
    generations: memory,
  };
}

const ratio = (a, b) => (b > 0 ? `${(a / b).toFixed(2)}×` : "-");

/** What a run's log lines say it did: answers by level, service attempts, questions the service did not know. */
const ioLine = (io) => `${Object.entries(io.levels).sort((x, y) => y[1] - x[1]).map(([k, v]) => `${k} ${v}`).join(", ")}; service attempts ${io.attempts}, not-known fall-throughs ${io.fell_through}`;

/** A run's name in a comparison: its worker and how it differed from a plain run. */
const runName = (r) => `${r.worker === "null" ? (r.matched_io ? "null (I/O matched)" : "null") : "router"}${r.cache_api === false ? " (Cache API off)" : ""}`;

/**
 * The lines comparing run `a`'s RSS with run `b`'s (the router's with the
 * null worker's, or with another set-up's) under the same traffic, and
 * each one's own memory (inspector).
 */
function comparisonLines(a, b, bStatus) {
  const [na, nb] = [runName(a), runName(b)];
  const r1 = (x) => Math.round(x * 10) / 10;
  const per10k = (r) => (r.requests ? r1((r.growth_mib / r.requests) * 10_000) : 0);
  const own = (r) => {
    const gens = r.generations.filter((g) => g.own);
    if (!gens.length) return "not read";
    const heap = Math.max(...gens.map((g) => g.own.heap_total_end));
    const wasm = gens.filter((g) => g.own.wasm);
    const [lo, hi] = [Math.min(...wasm.map((g) => g.own.wasm.start)), Math.max(...wasm.map((g) => g.own.wasm.end))];
    return `JS heap up to ${heap} MiB${wasm.length ? `, wasm memory ${lo === hi ? `${lo} MiB throughout` : `${lo}–${hi} MiB`}` : ""}`;
  };
  const when = (r) => `${r.date.slice(0, 16).replace("T", " ")}${r.ok ? "" : " FAILED"}`;
  return [
    `RSS, ${na} vs ${nb} (same traffic: ${nb} ${b.paced ? `paced on the ${na} run` : "NOT paced"}, seed ${b.seed}; runs of ${when(a)} and ${when(b)}${bStatus ? `, exit ${bStatus}` : ""}):`,
    `  growth (end − warm, largest generation) ${na} ${a.growth_mib} MiB, ${nb} ${b.growth_mib} MiB: ${ratio(a.growth_mib, b.growth_mib)}; start → peak ${r1(a.rise_mib)} and ${r1(b.rise_mib)} MiB: ${ratio(a.rise_mib, b.rise_mib)}; peak ${a.peak_mib} and ${b.peak_mib} MiB: ${ratio(a.peak_mib, b.peak_mib)}`,
    `  requests ${a.requests} and ${b.requests}; growth per 10,000 requests ${per10k(a)} and ${per10k(b)} MiB; their own memory: ${na} ${own(a)}; ${nb} ${own(b)}`,
    ...(a.io && b.io && b.matched_io ? [`  I/O (their logs): ${na} ${ioLine(a.io)}; ${nb} ${ioLine(b.io)}`] : []),
  ];
}

function report({ startupMs, memory, caches, routerLogs, wallMs, load }) {
  const rows = stats.map((s) => ({
    phase: s.phase,
    seconds: Math.round((s.to - s.from) / 1000),
    from_ms: s.from - T0,
    to_ms: s.to - T0,
    requests: s.requests,
    by_op: s.by_op,
    router_5xx_intended: s.router_5xx_intended,
    router_5xx_unintended: s.router_5xx_unintended,
    fallback_legacy: s.fallback_legacy,
    stale_served: s.stale_served,
    stale_ignored: s.stale_ignored,
    fallback_unscheduled: s.fallback_unscheduled,
    wrong_cell: s.wrong_cell,
    corrupt: s.corrupt,
    transport_errors: s.transport_errors,
    keepalive_retries: s.keepalive_retries,
    ws_sessions: s.ws_sessions,
    ws_messages: s.ws_messages,
    ws_lost: s.ws_lost,
    ws_reordered: s.ws_reordered,
    longpolls: s.longpolls,
    longpolls_cut: s.longpolls_cut,
    burst: s.burst,
    p50_ms: pct(s.latencies, 50),
    p99_ms: pct(s.latencies, 99),
    rss_mib: { start: mib(s.rss.start ?? 0), peak: mib(s.rss.peak), end: mib(s.rss.end ?? 0) },
  }));
  const total = (k) => rows.reduce((a, r) => a + r[k], 0);
  const allLat = stats.flatMap((s) => s.latencies);
  const memoryOk = memory.every((m) => m.bounded);
  const ok = failures.length === 0 && memoryOk && caches.past_capacity;

  const head = ["phase", "s", "reqs", "5xx ok", "5xx BAD", "legacy fb", "stale", "stale!", "fb load", "wrong", "corrupt", "xport", "ka retry", "ws msgs", "ws lost", "ws reord", "lp", "lp cut", "p50", "p99", "RSS MiB start/peak/end"];
  const line = (r) => [r.phase, r.seconds, r.requests, r.router_5xx_intended, r.router_5xx_unintended, r.fallback_legacy, r.stale_served, r.stale_ignored, r.fallback_unscheduled, r.wrong_cell, r.corrupt, r.transport_errors, r.keepalive_retries, r.ws_messages, r.ws_lost, r.ws_reordered, r.longpolls, r.longpolls_cut, r.p50_ms ?? "-", r.p99_ms ?? "-", `${r.rss_mib.start}/${r.rss_mib.peak}/${r.rss_mib.end}`];
  const table = [head, ...rows.map(line), ["total", Math.round(wallMs / 1000), total("requests"), total("router_5xx_intended"), total("router_5xx_unintended"), total("fallback_legacy"), total("stale_served"), total("stale_ignored"), total("fallback_unscheduled"), total("wrong_cell"), total("corrupt"), total("transport_errors"), total("keepalive_retries"), total("ws_messages"), total("ws_lost"), total("ws_reordered"), total("longpolls"), total("longpolls_cut"), pct(allLat, 50) ?? "-", pct(allLat, 99) ?? "-", ""]];
  const widths = head.map((_, i) => Math.max(...table.map((r) => String(r[i]).length)));
  const out = [];
  out.push(`soak (${O.mode}${O.worker === "null" ? ", the null worker in the router's place" : ""}${PACED_ON ? `, paced on the router's run of ${PACED_ON.date.slice(0, 16).replace("T", " ")}` : ""}${flag("--no-cache-api") ? ", Miniflare's Cache API off" : ""}): ${O.clients} clients, ${O.seconds} s schedule, seed ${O.seed}, stack start-up ${startupMs} ms, wall ${Math.round(wallMs / 1000)} s, load average ${load[0].toFixed(1)} at the start, ${load[1].toFixed(1)} at the end`);
  for (const r of table) out.push(r.map((c, i) => String(c).padStart(i === 0 ? 0 : widths[i]).padEnd(i === 0 ? widths[0] : 0)).join("  "));
  const notes = [];
  notes.push("(5xx ok: the router's 502 for cell 4 while it was down; legacy fb: cell 1 answered while the service could not, a documented fallback; stale: answers the router logged as stale (an expired entry standing in for the failing service); stale!: legacy fb for keys the same workerd had routed right < 570 s before (stale-if-error not used); fb load: cell 1 outside the fault windows, logged by the router as its failure path (the service missed the timeout on a loaded machine or the breaker was open); ka retry: a request sent again after its reused keep-alive connection was reset before any answer; p50/p99: plain requests, ms)");
  notes.push("workerd generations:");
  for (const m of memory) {
    const c = caches.generations.find((g) => g.generation === m.generation);
    notes.push(`  #${m.generation} pid ${m.pid}: RSS start ${m.start_mib}, warm ${m.warm_mib}, peak ${m.peak_mib}, end ${m.end_mib} MiB (growth ${m.growth_mib} MiB${m.bounded ? "" : m.own_bounded ? `, OVER the ${mib(O.rssGrowthLimit)} MiB limit` : ", the router's own memory OVER its limit"}); ${m.requests} requests, ${c.keys} keys asked${caches.applicable ? `, memory cache ${c.memory_entries} entries` : ""}`);
    const own = m.own;
    notes.push(own ? `     its own (inspector, ${own.samples} samples): JS heap used ${own.heap_used.start} → ${own.heap_used.end} MiB (peak ${own.heap_used.peak}, heap ${own.heap_total_end})${own.wasm ? `, wasm memory ${own.wasm.start} → ${own.wasm.end} MiB` : ""}${own.cache_heap_used ? `; the Cache API worker's JS heap ${own.cache_heap_used.start} → ${own.cache_heap_used.end} MiB` : ""}` : "     its own: not read (no inspector answer)");
  }
  if (Object.values(unscheduled).some((v) => v)) notes.push(`fallbacks outside the fault windows, by the router's logged reason: ${JSON.stringify(unscheduled)}`);
  for (const r of reloads) notes.push(`  reload #${r.from} -> #${r.to}: new workerd ready in ${r.started_ms} ms, old drained in ${r.drained_ms} ms (${r.left_in_flight} left in flight)`);
  const burst = total("burst");
  if (burst) notes.push(`storm: ${burst} requests of the 404 burst (${O.burstClients} clients on one namespace no cell knows), judged like the others (their cell: the legacy cell)`);
  // What each answer cost in I/O besides the cell: a memory hit none, a
  // Cache API hit one Cache API read, the service a read, the service's
  // call and a write (a subrequest each).
  const levels = {};
  for (const l of routerLogs.answers) if (l.cache !== undefined) levels[l.cache] = (levels[l.cache] ?? 0) + 1;
  let attempts = 0;
  let fellThrough = 0;
  for (const l of routerLogs.answers) {
    attempts += l.attempts ?? 0;
    if (l.fell_through) fellThrough++;
  }
  if (caches.applicable || MATCHED_IO) notes.push(`answers by level (${MATCHED_IO ? "the I/O-matched null worker's" : "the router's"} log): ${Object.entries(levels).sort((a, b) => b[1] - a[1]).map(([k, v]) => `${k} ${v}`).join(", ") || "none logged"}`);
  if (caches.applicable || MATCHED_IO) notes.push(`  service attempts ${attempts}, answers after a question the service did not know ${fellThrough}`);
  if (!caches.applicable) notes.push(MATCHED_IO ? "null worker, I/O matched: the router's Cache API reads and writes and service calls for each request's questions, its answers unused; the cache-capacity check, stale and fallback columns do not apply" : "null worker: no cache, no Topology Service: the cache-capacity check, stale and fallback columns do not apply (its answers are judged like the router's: cell, echo, bodies, WebSockets, long-polls, cell 4's 502s)");
  const summary = memorySummary(memory, total("requests"), ok, stats.map((s) => PACED_OPS.reduce((a, op) => a + (s.by_op[op] ?? 0), 0)));
  summary.levels = levels;
  summary.io = { levels, attempts, fell_through: fellThrough };
  out.push(...notes);
  process.stdout.write(`\n${out.join("\n")}\n`);

  if (failures.length) {
    const byKind = {};
    for (const f of failures) byKind[f.kind] = (byKind[f.kind] ?? 0) + 1;
    process.stdout.write(`\nFAILURES: ${failures.length} (${Object.entries(byKind).map(([k, v]) => `${k} ${v}`).join(", ")}); the first 15:\n`);
    for (const f of failures.slice(0, 15)) {
      const hdrs = Object.entries(f.headers ?? {}).map(([k, v]) => `-H '${k}: ${v}'`).join(" ");
      process.stdout.write(`  [${f.phase} +${f.at_ms} ms, ${f.duration_ms} ms] ${f.kind}: ${f.detail}\n    ${f.op} ${f.key_kind} key (cell ${f.want}), status ${f.status}, cell ${f.got}: curl -X ${f.method} ${hdrs} "$ROUTER${f.path}"\n`);
      process.stdout.write(`    router log: ${f.router_log ? JSON.stringify(f.router_log) : "none"}\n`);
    }
  }
  if (!memoryOk) process.stdout.write(`\nFAILURE: workerd RSS grew more than ${mib(O.rssGrowthLimit)} MiB over a generation's life, or the router's own memory passed its limit (wasm ${mib(O.wasmLimit)} MiB, JS heap in use ${mib(O.jsHeapLimit)} MiB)\n`);
  if (caches.applicable && !caches.past_capacity) process.stdout.write(`\nFAILURE: no generation was asked for more keys than its memory cache holds (eviction untested)\n`);
  const details = O.worker === "null" ? `target/soak/null-${O.mode}.details.json` : "target/soak/latest.json";
  process.stdout.write(`\n${ok ? "soak passed" : "soak FAILED"}; details in ${details}\n`);

  const dir = join(ROOT, "target", "soak");
  mkdirSync(dir, { recursive: true });
  // A router run paced on another or without the Cache API is a variant, not what --paced paces on.
  writeFileSync(join(dir, `${O.worker}-${O.mode}${O.worker === "router" && (PACED_ON || flag("--no-cache-api")) ? "-variant" : ""}.json`), JSON.stringify(summary, null, 2));
  writeFileSync(
    join(ROOT, details),
    JSON.stringify(
      {
        ok,
        date: summary.date,
        commit: summary.commit,
        load_average: load,
        options: O,
        phases: PHASES.map((p) => ({ name: p.name, ms: p.ms })),
        startup_ms: startupMs,
        wall_ms: wallMs,
        fault_windows: windows.map((w) => ({ kind: w.kind, from_ms: w.from - T0, to_ms: w.to - T0, grace_ms: w.grace })),
        rows,
        memory,
        caches,
        paced_on: PACED_ON,
        reloads,
        unscheduled_fallbacks: unscheduled,
        failures: failures.slice(0, 500),
        failures_total: failures.length,
        router_log_lines: routerLogs.total,
        router_log_tail: routerLogs.lines.slice(-50),
        timeline: TIMELINE.toJSON(),
      },
      null,
      2,
    ),
  );
  try {
    process.stdout.write(`report: ${relative(ROOT, writeSoakReport(join(ROOT, details)))}\n`);
  } catch (e) {
    process.stdout.write(`report not written: ${e.message}\n`);
  }
  process.exitCode = ok ? 0 : 1;
  return { out, ok, summary };
}

/**
 * Writes this run's figures into docs/soak.md, between the markers of its
 * mode: the figures there are the soak's own output, never pasted.
 */
function recordFigures(out, ok) {
  const file = join(ROOT, "docs", "soak.md");
  const begin = `<!-- soak figures: ${O.mode} -->`;
  const end = `<!-- end of soak figures: ${O.mode} -->`;
  const command = ["bash bench/soak.sh", ...args.filter((a) => a !== "--record"), ...(args.includes("--seed") ? [] : ["--seed", String(O.seed)])].join(" ");
  const body = [`\`${command}\` on ${new Date().toISOString().slice(0, 10)}, commit ${commitLabel(ROOT, file)}: **${ok ? "passed" : "FAILED"}**`, "", "```", ...out, "```"].join("\n");
  if (!writeDocSection(file, begin, end, body)) {
    process.stderr.write(`--record: docs/soak.md has no "${begin}" ... "${end}" section; nothing written\n`);
    process.exitCode = 1;
    return;
  }
  say(`figures written into docs/soak.md (${O.mode})`);
}

main().catch(async (e) => {
  console.error(e);
  stopping = true;
  if (stack) await stopSoakStack(stack).catch(() => {});
  process.exit(2);
});
