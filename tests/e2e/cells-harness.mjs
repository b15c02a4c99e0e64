// The cell-list stack the cells and availability suites share: demo cells
// of their own (each `devstack cell` process can be killed and restarted by
// PID), a Topology Service that knows them, and routers with GITLAB_CELLS
// listing every cell and ROUTER_CONTROL bound.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { startReady, startRouter, stopChild, topologyToml, request, freePort, scratchDir } from "./harness.mjs";

/**
 * Cells 1..cellCount (cell 1 is the legacy cell), a Topology Service that
 * knows them (unless `topology: false`), and `routers` copies of the router
 * with GITLAB_CELLS listing every cell (`routerVars`, `routerOptions`: per
 * router, as startRouter takes them).
 */
export async function startCells({ cellCount = 3, vars = {}, routers = 1, topology = true, build = "build", list = (l) => l, extraWorkers = [], routerVars = [], routerOptions = [], control = true } = {}) {
  const stack = { children: [], logs: [], cells: {} };
  try {
    for (let id = 1; id <= cellCount; id++) {
      const { child, ready } = await startReady(["cell", "--id", String(id), "--listen", "127.0.0.1:0"], `cell ${id}`);
      stack.children.push(child);
      stack.cells[id] = { id, addr: ready.addr, child };
    }
    let topologyUrl;
    if (topology) {
      const dir = scratchDir("router-cells-");
      const cfg = join(dir, "topology.toml");
      writeFileSync(cfg, topologyToml(Object.values(stack.cells).map((c) => ({ id: c.id, address: c.addr }))));
      const ts = await startReady(["topology", "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"], "topology");
      stack.children.push(ts.child);
      topologyUrl = `http://${ts.ready.addr}`;
      stack.topology = { addr: ts.ready.addr, admin: `http://${ts.ready.admin}` };
    } else {
      // Nothing listens there: every call fails at once.
      topologyUrl = `http://127.0.0.1:${await freePort()}`;
    }
    stack.list = list(Object.values(stack.cells).map((c) => ({ id: c.id, address: c.addr, session_prefix: `cell-${c.id}`, health_path: "/-/readiness" })));
    stack.vars = {
      GITLAB_RULES_CONFIG: "cells",
      GITLAB_TOPOLOGY_SERVICE_URL: topologyUrl,
      GITLAB_PROXY_HOST: stack.cells[1].addr,
      GITLAB_UPSTREAM_SCHEME: "http",
      GITLAB_TOPOLOGY_TIMEOUT_MS: "300",
      GITLAB_CELLS: JSON.stringify(stack.list),
      ...vars,
    };
    // ROUTER_CONTROL as every deployment binds it: the probe's record
    // reaches every isolate through it (`control: false`: bound by
    // `routerOptions` instead).
    stack.mf = await startRouter(stack.vars, stack.logs, { routers, build, control, extraWorkers, routerVars, routerOptions });
    stack.urls = [];
    for (let i = 0; i < routers; i++) {
      stack.urls.push((await stack.mf.unsafeGetDirectURL(i === 0 ? "router" : `router-${i}`)).toString().replace(/\/$/, ""));
    }
    stack.url = stack.urls[0];
  } catch (e) {
    await stopCells(stack);
    throw e;
  }
  return stack;
}

export async function stopCells(stack) {
  if (stack.mf) await stack.mf.dispose().catch(() => {});
  for (const child of stack.children) await stopChild(child);
}

/** Kills a cell's process (SIGKILL: no goodbye) and waits for it to be gone. */
export async function killCell(stack, id) {
  const { child } = stack.cells[id];
  await new Promise((resolve) => {
    child.once("exit", resolve);
    child.kill("SIGKILL");
  });
}

/** Starts the cell again on its old address. */
export async function restartCell(stack, id) {
  const { child } = await startReady(["cell", "--id", String(id), "--listen", stack.cells[id].addr], `cell ${id} again`);
  stack.children.push(child);
  stack.cells[id].child = child;
}

/** Runs the router's scheduled handler (the Cron Trigger) in router `i`. */
export async function runCron(stack, i = 0) {
  const worker = await stack.mf.getWorker(i === 0 ? "router" : `router-${i}`);
  return worker.scheduled({ cron: "* * * * *" });
}

export const healthLines = (stack) =>
  stack.logs
    .map((l) => l.slice(l.indexOf("{")))
    .filter((l) => l.startsWith("{") && l.includes('"scope":"cell-health"'))
    .map((l) => JSON.parse(l));

export async function timed(url, headers = {}, method = "GET") {
  const t0 = performance.now();
  const res = await request(url, { headers, method });
  return { ...res, ms: performance.now() - t0, at: t0, cell: res.headers["x-demo-cell"] };
}
