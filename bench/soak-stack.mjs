// The soak's stack: `devstack up` with the shipped demo topology
// (cells 1-3 in one process, the Topology Service) plus a cell 4 in its own
// `devstack cell` process so that the soak can kill and restart one cell,
// and the built worker (build/) in workerd through Miniflare, started as
// tests/e2e/harness.mjs starts it. The topology gets many extra namespaces
// and project ids (the soak's cold keys) and short cache lifetimes so that
// entries expire inside a fault phase. Every process is a child of this one,
// stopped by PID. `worker: "null"` puts the soak's null worker
// (bench/soak-null-worker.mjs) in the router's place, in the same Miniflare
// set-up, to tell workerd's own memory from the router's.
import { mkdtempSync, writeFileSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { workerdChildren, rss } from "../tests/e2e/procs.mjs";
import { inspectWorker } from "./soak-inspect.mjs";
import { ROOT, startReady, startRouter, stopChild, freePort, startDevstackUp } from "../tests/e2e/harness.mjs";
import { runtime } from "../scripts/runtime-config.mjs";


/** Cell that owns soak namespace / project i (cells 1-4, cell 1 the legacy cell). */
export const ownerOf = (i) => (i % 4) + 1;
export const nsName = (i) => `soak-ns-${i}`;
export const projectId = (i) => 10_000 + i;

/** The shipped topology with port-0 cells, cell 4 at `cell4Addr`, `keys` soak namespaces and projects. */
function topologyToml({ keys, cell4Addr, cacheControl, notFoundCacheControl }) {
  const shipped = readFileSync(join(ROOT, "devstack", "topology.toml"), "utf8")
    .replace(/^address = .*$/gm, "")
    .replace(/^(listen|admin_listen) = .*$/gm, '$1 = "127.0.0.1:0"')
    .replace(/^cache_control = .*$/m, `cache_control = "${cacheControl}"`)
    .replace(/^not_found_cache_control = .*$/m, `not_found_cache_control = "${notFoundCacheControl}"`);
  const extraRoutes = { 1: [], 2: [], 3: [], 4: [] };
  const extraProjects = { 1: [], 2: [], 3: [], 4: [] };
  for (let i = 0; i < keys; i++) {
    extraRoutes[ownerOf(i)].push(nsName(i));
    extraProjects[ownerOf(i)].push(projectId(i));
  }
  // Blocks: [0] = header and [topology], [1..3] = cells 1..3 in order.
  const blocks = shipped.split(/^\[\[cells\]\]$/m);
  for (let id = 1; id <= 3; id++) {
    blocks[id] = blocks[id]
      .replace(/^routes = \[/m, `routes = [${extraRoutes[id].map((r) => JSON.stringify(r)).join(", ")}, `)
      .replace(/^project_ids = \[/m, `project_ids = [${extraProjects[id].join(", ")}, `);
  }
  let toml = blocks.join("[[cells]]");
  toml += `\n[[cells]]\nid = 4\naddress = "${cell4Addr}"\nsession_prefix = "cell-4"\n`;
  toml += `routes = ${JSON.stringify(["cell4-group", ...extraRoutes[4]])}\n`;
  toml += `project_ids = [400, ${extraProjects[4].join(", ")}]\n`;
  return toml;
}

export { workerdChildren, rss };

/** A ring of the router's log lines (the last `cap`), with a count of all. */
export function logRing(cap = 5000) {
  // `answers`: every request log line, parsed, with when it arrived, so
  // that the soak can show the router's own account of a failed request
  // and tell which legacy-cell answers it reports as its failure path.
  const ring = { lines: [], total: 0, answers: [] };
  ring.push = (line) => {
    ring.total++;
    const at = line.indexOf('{"ruleset"');
    if (at >= 0) {
      try {
        const l = JSON.parse(line.slice(at));
        ring.answers.push({ t: Date.now(), method: l.method, path: l.path, rule: l.rule, cache: l.cache, coalesced: l.coalesced, fell_through: l.fell_through, attempts: l.attempts, service_ms: l.service_ms, error: l.error, upstream: l.upstream, status: l.status, duration_ms: l.duration_ms });
      } catch {
        // Not a whole JSON line.
      }
    }
    ring.lines.push(line);
    if (ring.lines.length > cap) ring.lines.splice(0, ring.lines.length - cap);
  };
  return ring;
}

export async function startSoakStack({ keys, cacheControl, notFoundCacheControl, vars = {}, worker = "router", cacheApi = true }) {
  const stack = { children: [], cells: {}, routers: [], logs: logRing(), worker, cacheApi };
  try {
    // Cell 4 first: its address goes into the topology.
    const cell4Port = await freePort();
    stack.cell4Addr = `127.0.0.1:${cell4Port}`;
    await startCell4(stack);

    const dir = mkdtempSync(join(tmpdir(), "router-soak-"));
    stack.dir = dir;
    const cfg = join(dir, "topology.toml");
    writeFileSync(cfg, topologyToml({ keys, cell4Addr: stack.cell4Addr, cacheControl, notFoundCacheControl }));
    stack.up = await startDevstackUp(cfg, stack, 20000);
    stack.cells[4] = { id: 4, addr: stack.cell4Addr, url: `http://${stack.cell4Addr}` };
    stack.vars = {
      GITLAB_RULES_CONFIG: "cells",
      GITLAB_TOPOLOGY_SERVICE_URL: `http://${stack.topology.addr}`,
      GITLAB_PROXY_HOST: stack.cells[1].addr,
      GITLAB_UPSTREAM_SCHEME: "http",
      GITLAB_ALLOWED_UPSTREAMS: Object.values(stack.cells).map((c) => c.addr).join(","),
      GITLAB_TOPOLOGY_TIMEOUT_MS: "500",
      // Every request: a failure is shown with the router's log line for it.
      GITLAB_REQUEST_LOG: "all",
      // The null worker's: where each cell is.
      ...(worker === "null" ? { SOAK_CELLS: JSON.stringify(Object.fromEntries(Object.values(stack.cells).map((c) => [String(c.id), c.addr]))) } : {}),
      ...vars,
    };
    await startRouterGeneration(stack, stack.vars);
  } catch (e) {
    await stopSoakStack(stack);
    throw e;
  }
  return stack;
}

/** Starts cell 4 (again) on its fixed address. */
export async function startCell4(stack) {
  const { child } = await startReady(["cell", "--id", "4", "--listen", stack.cell4Addr], "cell 4");
  child.stderr.resume();
  stack.cell4 = child;
  stack.children.push(child);
}

/** Kills cell 4 without warning (SIGKILL: connections reset, no goodbye). */
export async function killCell4(stack) {
  const child = stack.cell4;
  stack.cell4 = null;
  if (!child || child.exitCode !== null) return;
  await new Promise((resolve) => {
    child.once("exit", resolve);
    child.kill("SIGKILL");
  });
}

/**
 * The null worker as a Miniflare worker named like the router, with the
 * router's bindings (it reads SOAK_CELLS only): startRouter then runs it
 * with every other option as it runs the router (the Cache API, stdio,
 * direct socket, compatibility date).
 */
function nullWorker(vars) {
  return {
    name: "router",
    modules: true,
    scriptPath: join(ROOT, "bench", "soak-null-worker.mjs"),
    ...runtime(),
    bindings: vars,
    unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }],
  };
}

/**
 * Starts one more router (a new workerd, as a rollout step starts new
 * isolates) with `vars`; resolves with { mf, url, pid, vars, startedAt }.
 * With `stack.worker` "null", the null worker in its place.
 */
export async function startRouterGeneration(stack, vars) {
  const before = workerdChildren();
  // The inspector (on a free port) for the worker's own memory, the null worker's too.
  const miniflare = { inspectorPort: 0 };
  // `cacheApi: false` (--no-cache-api): Miniflare's Cache API off for the worker.
  const wopts = stack.cacheApi ? {} : { cache: false };
  const mf = stack.worker === "null" ? await startRouter(vars, stack.logs, { routers: 0, extraWorkers: [{ ...nullWorker(vars), ...wopts }], miniflare }) : await startRouter(vars, stack.logs, { miniflare, routerOptions: [wopts] });
  const url = (await mf.unsafeGetDirectURL("router")).toString().replace(/\/$/, "");
  const pid = [...workerdChildren()].find((p) => !before.has(p)) ?? null;
  const inspect = (target) =>
    inspectWorker(mf, target).catch((e) => {
      process.stderr.write(`==> ${target}'s memory will not be read: ${e.message}\n`);
      return null;
    });
  // The worker's own, and Miniflare's Cache API worker's (what the router stores there).
  const inspectors = { own: await inspect("core:user:router"), cache: await inspect("cache:cache") };
  const gen = { n: stack.routers.length, mf, url, pid, vars, inspectors, startedAt: Date.now(), disposed: false };
  stack.routers.push(gen);
  return gen;
}

export async function disposeRouter(gen) {
  if (gen.disposed) return;
  gen.disposed = true;
  gen.endedAt = Date.now();
  gen.inspectors.own?.close();
  gen.inspectors.cache?.close();
  await gen.mf.dispose().catch(() => {});
}

export async function stopSoakStack(stack) {
  for (const gen of stack.routers) await disposeRouter(gen);
  for (const child of stack.children) await stopChild(child);
  if (stack.dir) rmSync(stack.dir, { recursive: true, force: true });
}
