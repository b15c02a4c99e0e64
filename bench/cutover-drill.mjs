// The cutover drill (docs/operations.md, "Moving an organization"):
// organization acme (route acme, organization path acme-org, projects
// 200/201) lives on one cell under mixed load through the router; the
// Topology Service's admin API moves it to another cell while the old cell
// answers acme's requests 503 with Retry-After (maintenance mode); then the
// operator makes the router forget acme's answers, and the drill counts
// what that cost the service and how long routing took to follow.
//
// It runs the move twice, in both directions, under the same load: once
// with targeted invalidation (`rulesctl control invalidate --claim ...`),
// once with a global purge (`rulesctl control set purge`), and prints the
// service calls each made.
//
// As a script, against the dev stack (scripts/dev.sh: devstack up with
// devstack/topology.toml, the router under `wrangler dev --env dev`):
//
//   node bench/cutover-drill.mjs [--router URL]... [--topology URL] [--cell ID=URL]...
//        [--rulesctl "CMD"] [--control "ARGS"] [--interval-ms N] [--seconds N]
//
// Defaults: --router http://127.0.0.1:8787, --topology http://127.0.0.1:9096
// (its operator endpoints), --cell 2=http://127.0.0.1:9102 --cell
// 3=http://127.0.0.1:9103, --rulesctl "cargo run -q --bin rulesctl --",
// --control "--env dev --local", --interval-ms 5000 (the dev
// environment's GITLAB_CONTROL_REFRESH_SECONDS), --seconds 3 (load kept
// after the change). Give --router twice for two routers (isolates)
// sharing one Cache API. Exit 1 when a check fails. tests/e2e/cutover.test.mjs
// runs it through workerd.
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import http from "node:http";
import { fileURLToPath } from "node:url";

/** What acme's requests look like: each classifies by one of its claims. */
export const ACME = [
  { path: "/acme/app", claim: "route=acme" },
  { path: "/acme/app/-/issues", claim: "route=acme" },
  { path: "/o/acme-org", claim: "organizationPath=acme-org" },
  { path: "/api/v4/projects/200", claim: "projectId=200" },
  { path: "/api/v4/projects/201/issues", claim: "projectId=201" },
];

/** The claims to invalidate for acme. */
export const ACME_CLAIMS = ["route=acme", "organizationPath=acme-org", "projectId=200", "projectId=201"];

/** The move, as the service's admin API takes it. */
export const ACME_MOVE = { routes: ["acme"], organization_paths: ["acme-org"], project_ids: [200, 201] };

/** Maintenance mode on the cell acme leaves: its paths answer 503. */
const ACME_PREFIXES = ["/acme", "/o/acme-org", "/api/v4/projects/200", "/api/v4/projects/201"];

/**
 * Other organizations' traffic: `[path, headers, cell]`, which must reach
 * `cell` all along. `extraProjects`: project ids of cell 3 to add distinct
 * hot keys (the dev stack's topology has 300 only).
 */
export function otherTraffic(extraProjects = []) {
  const session = (cell) => ({ cookie: `_gitlab_session=cell-${cell}-0123456789abcdef0123456789abcdef` });
  const list = [
    ["/cell2-group/app", {}, "2"],
    ["/cell3-group/app", {}, "3"],
    ["/gitlab-org/gitlab", {}, "1"],
    ["/o/cell3-org", {}, "3"],
    ["/api/v4/projects/300", {}, "3"],
    ["/dashboard", session(2), "2"],
    ["/dashboard", session(3), "3"],
  ];
  for (const id of extraProjects) list.push([`/api/v4/projects/${id}`, {}, "3"]);
  return list;
}

function get(url, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { headers: { "accept-encoding": "identity", ...headers } }, (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode, cell: res.headers["x-demo-cell"], retryAfter: res.headers["retry-after"] }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end();
  });
}

async function post(url, body) {
  const res = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  if (!res.ok) throw new Error(`${url}: ${res.status} ${await res.text()}`);
  return res.json();
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Mixed load over every router (isolate): acme's requests and everyone
 * else's, `concurrency` at a time, until stop() is called. Every response
 * is recorded with its start time.
 */
function startLoad(routers, others, concurrency = 6) {
  const records = [];
  let running = true;
  const keys = [...ACME.map((a) => ({ acme: true, path: a.path, headers: {} })), ...others.map(([path, headers, cell]) => ({ acme: false, path, headers, cell }))];
  let next = 0;
  const worker = async () => {
    while (running) {
      const i = next++;
      const key = keys[i % keys.length];
      const router = routers[Math.floor(i / keys.length) % routers.length];
      const at = Date.now();
      try {
        const r = await get(router + key.path, key.headers);
        records.push({ at, router, ...key, status: r.status, got: r.cell, retryAfter: r.retryAfter });
      } catch (e) {
        records.push({ at, router, ...key, status: 0, error: String(e) });
      }
    }
  };
  const workers = Array.from({ length: concurrency }, worker);
  return {
    records,
    async stop() {
      running = false;
      await Promise.all(workers);
    },
  };
}

/**
 * One move of acme from cell `from` to cell `to` under load, ended by
 * `forget()` (the operator's command). Returns the service calls made from
 * the move until `settleMs` after forget() returned, the time until every
 * acme request reached `to` (from when forget() returned), and what went
 * wrong for anyone else.
 */
async function moveOnce({ routers, topology, cells, from, to, forget, others, settleMs, convergeLimitMs, log }) {
  const load = startLoad(routers, others);
  try {
    await sleep(500); // steady state: everything cached
    await post(`${topology}/_stats/reset`, {});
    const moved = Date.now();
    await post(`${cells[from]}/_maintenance`, { path_prefixes: ACME_PREFIXES, retry_after: 5 });
    await post(`${cells[to]}/_maintenance`, { path_prefixes: [] });
    await post(`${topology}/_move`, { to: Number(to), ...ACME_MOVE });
    await sleep(300);
    const started = Date.now();
    await forget();
    const written = Date.now();
    log(`  ${((written - started) / 1000).toFixed(1)} s to write the control document`);
    // Until every acme request reaches `to` for settleMs, within the limit.
    let converged = null;
    for (;;) {
      await sleep(100);
      const now = Date.now();
      const late = load.records.filter((r) => r.acme && r.at >= written && r.got !== to);
      const lastLate = late.length ? Math.max(...late.map((r) => r.at)) : written;
      const since = load.records.filter((r) => r.acme && r.at > lastLate);
      if (since.length >= 10 && now - lastLate >= settleMs) {
        converged = lastLate - written;
        break;
      }
      if (now - written > convergeLimitMs) break;
    }
    const stats = await (await fetch(`${topology}/_stats`)).json();
    const window = load.records.filter((r) => r.at >= moved);
    const othersWrong = window.filter((r) => !r.acme && (r.status !== 200 || r.got !== r.cell));
    const acmeRefused = window.filter((r) => r.acme && r.status === 503);
    const acmeElsewhere = window.filter((r) => r.acme && r.status === 200 && r.got !== to && r.got !== from);
    return {
      seconds: (Date.now() - moved) / 1000,
      calls: stats.classify_calls,
      byType: stats.by_type,
      convergedMs: converged,
      requests: window.length,
      othersWrong,
      acmeRefused: acmeRefused.length,
      acmeRefusedWithRetryAfter: acmeRefused.filter((r) => r.retryAfter).length,
      acmeElsewhere: acmeElsewhere.length,
    };
  } finally {
    await load.stop();
  }
}

/**
 * The drill: acme from cell 2 to 3 with a targeted invalidation, then back
 * from 3 to 2 with a global purge, under the same load. `invalidate(claims)`
 * and `purge()` write the control document; `intervalMs`: the routers'
 * control interval.
 */
export async function runDrill({ routers, topology, cells, invalidate, purge, intervalMs, others = otherTraffic(), settleMs = 1000, log = console.log }) {
  const convergeLimitMs = intervalMs + 5000;
  // Warm every key in every isolate.
  for (const router of routers) {
    for (const a of ACME) await get(router + a.path);
    for (const [path, headers] of others) await get(router + path, headers);
  }
  log(`cutover drill: ${routers.length} router(s), ${ACME.length} acme paths (${ACME_CLAIMS.length} claims), ${others.length} other keys, control interval ${intervalMs} ms`);
  log("targeted: acme 2 -> 3, then rulesctl control invalidate " + ACME_CLAIMS.map((c) => `--claim ${c}`).join(" "));
  const targeted = await moveOnce({ routers, topology, cells, from: "2", to: "3", forget: () => invalidate(ACME_CLAIMS), others, settleMs, convergeLimitMs, log });
  log("global: acme 3 -> 2, then rulesctl control set purge");
  const global = await moveOnce({ routers, topology, cells, from: "3", to: "2", forget: purge, others, settleMs, convergeLimitMs, log });
  await post(`${cells["3"]}/_maintenance`, { path_prefixes: [] });
  for (const [name, r] of [["targeted invalidation", targeted], ["global purge", global]]) {
    log(
      `${name}: ${r.calls} service calls (${JSON.stringify(r.byType)}), acme converged ${r.convergedMs === null ? "never" : `${r.convergedMs} ms`} after the write, ` +
        `${r.requests} requests in ${r.seconds.toFixed(1)} s, acme 503s ${r.acmeRefused} (${r.acmeRefusedWithRetryAfter} with Retry-After), others refused or misrouted ${r.othersWrong.length}`,
    );
  }
  return { targeted, global };
}

function parseArgs(argv) {
  const opts = { routers: [], cells: {}, topology: "http://127.0.0.1:9096", rulesctl: "cargo run -q --bin rulesctl --", control: "--env dev --local", intervalMs: 5000, seconds: 3 };
  for (let i = 0; i < argv.length; i++) {
    const value = () => argv[++i];
    switch (argv[i]) {
      case "--router": opts.routers.push(value().replace(/\/$/, "")); break;
      case "--topology": opts.topology = value().replace(/\/$/, ""); break;
      case "--cell": { const [id, url] = value().split("="); opts.cells[id] = url.replace(/\/$/, ""); break; }
      case "--rulesctl": opts.rulesctl = value(); break;
      case "--control": opts.control = value(); break;
      case "--interval-ms": opts.intervalMs = Number(value()); break;
      case "--seconds": opts.seconds = Number(value()); break;
      default: throw new Error(`unknown argument ${argv[i]} (see the top of bench/cutover-drill.mjs)`);
    }
  }
  if (!opts.routers.length) opts.routers.push("http://127.0.0.1:8787");
  opts.cells = { 2: "http://127.0.0.1:9102", 3: "http://127.0.0.1:9103", ...opts.cells };
  return opts;
}

/**
 * `rulesctl control VERB ...ARGS CONTROL` as the operator would type it;
 * resolves with its stdout. Asynchronous: the load goes on while wrangler
 * writes (a blocked event loop would pause it, and leave its idle
 * keep-alive connections to be closed under it).
 */
export function rulesctlRunner(command, controlArgs, options = {}) {
  const [program, ...pre] = command.split(" ").filter(Boolean);
  const control = controlArgs.split(" ").filter(Boolean);
  const run = promisify(execFile);
  return async (verb, ...args) => (await run(program, [...pre, "control", verb, ...args, ...control], { encoding: "utf8", ...options })).stdout;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const opts = parseArgs(process.argv.slice(2));
  const rulesctl = rulesctlRunner(opts.rulesctl, opts.control);
  const { targeted, global } = await runDrill({
    routers: opts.routers,
    topology: opts.topology,
    cells: opts.cells,
    intervalMs: opts.intervalMs,
    settleMs: opts.seconds * 1000,
    invalidate: async (claims) => rulesctl("invalidate", ...claims.flatMap((c) => ["--claim", c])),
    purge: async () => rulesctl("set", "purge", "note=cutover drill: global purge"),
  });
  const ok = [targeted, global].every((r) => r.convergedMs !== null && r.othersWrong.length === 0);
  process.exit(ok ? 0 : 1);
}
