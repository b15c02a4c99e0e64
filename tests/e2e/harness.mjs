// End-to-end harness: the real built worker (build/) in workerd through
// Miniflare, in front of real demo cells and a real local Topology Service
// (crates/devstack), all on free loopback ports. Every process it starts is
// stopped by PID in stop().
import { spawn, spawnSync } from "node:child_process";
import { createInterface } from "node:readline";
import { mkdtempSync, writeFileSync, existsSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import http from "node:http";
import net from "node:net";
import { Miniflare } from "miniflare";
import assert from "node:assert/strict";
import { runtime } from "../../scripts/runtime-config.mjs";

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const DEVSTACK = process.env.DEVSTACK_BIN ?? join(ROOT, "target", "debug", "devstack");
export const HEX32 = "0123456789abcdef0123456789abcdef";

const scratchDirs = [];
process.once("exit", () => {
  for (const dir of scratchDirs) rmSync(dir, { recursive: true, force: true });
});

/** A fresh directory under the system's temp directory, removed when this test process exits. */
export function scratchDir(prefix) {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  scratchDirs.push(dir);
  return dir;
}

/**
 * The test build of the worker (under the repository): the `panic-probe`
 * feature (paths that panic on purpose), the `memory-probe` feature (a
 * path that answers the isolate's wasm memory) and the `test-rulesets` feature
 * (tests/e2e/rules/ compiled in beside rules/). scripts/test.sh builds it
 * before the suites run; buildTestWorker() makes sure it is up to date
 * (seconds when it is).
 */
export const TEST_BUILD = "target/worker-probe";

export function buildTestWorker() {
  const r = spawnSync("bash", ["scripts/build-worker.sh"], {
    cwd: ROOT,
    stdio: ["ignore", "inherit", "inherit"],
    env: { ...process.env, WORKER_OUT_DIR: TEST_BUILD, WORKER_FEATURES: "panic-probe,memory-probe,test-rulesets", SKIP_BUILD: "" },
  });
  if (r.status !== 0) throw new Error(`building the test worker into ${TEST_BUILD} failed`);
}

/** Starts devstack and resolves with it and its first stdout JSON line. */
export function startReady(args, label) {
  return new Promise((resolve, reject) => {
    if (!existsSync(DEVSTACK)) {
      reject(new Error(`${DEVSTACK} is missing: run cargo build -p devstack`));
      return;
    }
    const child = spawn(DEVSTACK, args, { stdio: ["ignore", "pipe", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (d) => {
      stderr = (stderr + d).slice(-4000);
    });
    const lines = createInterface({ input: child.stdout });
    const timer = setTimeout(() => reject(new Error(`${label} not ready: ${stderr}`)), 15000);
    lines.once("line", (line) => {
      clearTimeout(timer);
      resolve({ child, ready: JSON.parse(line) });
    });
    child.once("exit", (code) => reject(new Error(`${label} exited ${code}: ${stderr}`)));
  });
}

/**
 * Starts `devstack up` with the shipped demo topology (devstack/topology.toml:
 * its routes, organizations, project, namespace, user and snippet ids, and
 * cell 2's Git repository) on free ports, and the router in front of it.
 * Resolves like startStack (`control`, `probe`, `routers` as there).
 */
export async function startDemoStack({ ruleset = "cells", vars = {}, topology = (toml) => toml, routers = 1, routerVars = [], routerOptions = [], control = false, probe = false } = {}) {
  const shipped = readFileSync(join(ROOT, "devstack", "topology.toml"), "utf8")
    .replace(/^address = .*$/gm, "")
    .replace(/^(listen|admin_listen) = .*$/gm, '$1 = "127.0.0.1:0"');
  const dir = scratchDir("router-demo-");
  const cfg = join(dir, "topology.toml");
  writeFileSync(cfg, topology(shipped));
  const logs = [];
  const stack = { children: [], logs, cells: {} };
  try {
    await startDevstackUp(cfg, stack);
    stack.vars = {
      GITLAB_RULES_CONFIG: ruleset,
      GITLAB_TOPOLOGY_SERVICE_URL: `http://${stack.topology.addr}`,
      GITLAB_PROXY_HOST: stack.cells[1].addr,
      GITLAB_UPSTREAM_SCHEME: "http",
      GITLAB_ALLOWED_UPSTREAMS: Object.values(stack.cells).map((c) => c.addr).join(","),
      GITLAB_TOPOLOGY_TIMEOUT_MS: "500",
      ...vars,
    };
    // A variable set to undefined is left out (e.g. no Topology Service).
    for (const [k, v] of Object.entries(stack.vars)) if (v === undefined) delete stack.vars[k];
    stack.mf = await startRouter(stack.vars, logs, { routers, routerVars, routerOptions, control, probe });
    stack.urls = [];
    for (let i = 0; i < routers; i++) stack.urls.push((await stack.mf.unsafeGetDirectURL(routerName(i))).toString().replace(/\/$/, ""));
    stack.url = stack.urls[0];
    if (probe) stack.probeUrl = (await stack.mf.unsafeGetDirectURL("cache-probe")).toString().replace(/\/$/, "");
  } catch (e) {
    await stopStack(stack);
    throw e;
  }
  stack.stop = () => stopStack(stack);
  return stack;
}

/**
 * Runs `devstack up --config cfg` into `stack` (its child in
 * `stack.children`, returned too): resolves once the Topology Service's
 * ready line has come, with every cell's in `stack.cells` and the service
 * in `stack.topology`.
 */
export async function startDevstackUp(cfg, stack, timeoutMs = 15000) {
  const child = spawn(DEVSTACK, ["up", "--config", cfg], { stdio: ["ignore", "pipe", "pipe"] });
  stack.children.push(child);
  let stderr = "";
  child.stderr.on("data", (d) => (stderr = (stderr + d).slice(-4000)));
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`devstack up not ready: ${stderr}`)), timeoutMs);
    child.once("exit", (code) => reject(new Error(`devstack up exited ${code}: ${stderr}`)));
    createInterface({ input: child.stdout }).on("line", (line) => {
      const ready = JSON.parse(line);
      if (ready.ready === "cell") stack.cells[ready.id] = { id: Number(ready.id), addr: ready.addr, url: `http://${ready.addr}` };
      if (ready.ready === "topology") {
        clearTimeout(timer);
        stack.topology = { addr: ready.addr, admin: `http://${ready.admin}` };
        resolve();
      }
    });
  });
  return child;
}

/** A Topology Service config for the given cells, in devstack's format. */
export function topologyToml(cells, { cacheControl = "max-age=60", notFoundCacheControl = "max-age=10" } = {}) {
  let toml = `[topology]\ncache_control = "${cacheControl}"\nnot_found_cache_control = "${notFoundCacheControl}"\n`;
  for (const c of cells) {
    toml += `\n[[cells]]\nid = ${c.id}\naddress = "${c.address}"\nsession_prefix = "cell-${c.id}"\n`;
    if (c.registryAddress) toml += `registry_address = "${c.registryAddress}"\n`;
    toml += `routes = ${JSON.stringify(c.routes ?? [])}\n`;
  }
  return toml;
}

/**
 * Starts demo cells 1..cellCount, a Topology Service that knows them, and
 * the router with `vars` (GITLAB_* overrides). Cell 1 is the legacy cell.
 */
export async function startStack({ ruleset = "session_prefix", vars = {}, routerVars = [], cellCount = 3, cellRoutes = {}, topology = {}, routers = 1, probe = false, build = "build", control = false, routerOptions = [], extraWorkers = [], listCells = false } = {}) {
  const children = [];
  const logs = [];
  const stack = { children, logs, cells: {} };
  try {
    for (let id = 1; id <= cellCount; id++) {
      const { child, ready } = await startReady(["cell", "--id", String(id), "--listen", "127.0.0.1:0"], `cell ${id}`);
      children.push(child);
      stack.cells[id] = { id, addr: ready.addr, url: `http://${ready.addr}` };
    }
    const dir = scratchDir("router-e2e-");
    const cfg = join(dir, "topology.toml");
    const cells = Object.values(stack.cells).map((c) => ({
      id: c.id,
      address: c.addr,
      routes: cellRoutes[c.id] ?? [],
      registryAddress: topology.registryAddresses?.[c.id],
    }));
    writeFileSync(cfg, topologyToml(cells, topology));
    const ts = await startReady(["topology", "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"], "topology");
    children.push(ts.child);
    stack.topology = { addr: ts.ready.addr, admin: `http://${ts.ready.admin}` };

    const allowed = Object.values(stack.cells).map((c) => c.addr);
    Object.values(topology.registryAddresses ?? {}).forEach((a) => allowed.push(a));
    stack.vars = {
      GITLAB_RULES_CONFIG: ruleset,
      GITLAB_TOPOLOGY_SERVICE_URL: `http://${stack.topology.addr}`,
      GITLAB_PROXY_HOST: stack.cells[1].addr,
      GITLAB_UPSTREAM_SCHEME: "http",
      GITLAB_ALLOWED_UPSTREAMS: allowed.join(","),
      GITLAB_TOPOLOGY_TIMEOUT_MS: "300",
      // `listCells`: GITLAB_CELLS names the started cells (session prefix cell-<id>).
      ...(listCells ? { GITLAB_CELLS: JSON.stringify(Object.values(stack.cells).map((c) => ({ id: c.id, address: c.addr, session_prefix: `cell-${c.id}` }))) } : {}),
      ...vars,
    };
    for (const [k, v] of Object.entries(stack.vars)) if (v === undefined) delete stack.vars[k];
    stack.mf = await startRouter(stack.vars, logs, { routers, probe, build, routerVars, control, routerOptions, extraWorkers });
    const url = async (name) => (await stack.mf.unsafeGetDirectURL(name)).toString().replace(/\/$/, "");
    stack.urls = [];
    for (let i = 0; i < routers; i++) stack.urls.push(await url(routerName(i)));
    stack.url = stack.urls[0];
    if (probe) stack.probeUrl = await url("cache-probe");
  } catch (e) {
    await stopStack(stack);
    throw e;
  }
  stack.stop = () => stopStack(stack);
  return stack;
}

const routerName = (i) => (i === 0 ? "router" : `router-${i}`);

// Reads the Cache API (shared by every worker of one Miniflare instance,
// like every isolate of a colo) so tests can see what the router stored.
const CACHE_PROBE = `export default { async fetch(req) {
  const key = new URL(req.url).searchParams.get("key");
  const hit = await caches.default.match(key);
  if (!hit) return Response.json({ found: false });
  return Response.json({ found: true, body: await hit.json(), cacheTag: hit.headers.get("cache-tag"), cacheControl: hit.headers.get("cache-control") });
} }`;

/**
 * Starts the built router in workerd. `routers` > 1 runs more copies of
 * the same worker (separate isolates, one shared Cache API); `probe` adds
 * a worker that reads the Cache API. `build`: the build directory (under
 * the repository), build/ unless a test needs another build. `routerVars[i]`
 * overrides `vars` for router i (two configurations, one Cache API);
 * `routerOptions[i]` adds Miniflare worker options (bindings) to router i.
 * `extraWorkers`: further Miniflare workers beside the routers.
 * `control`: bind the `ROUTER_CONTROL` KV namespace (one namespace shared
 * by every router, as by every isolate of a deployment); tests write it
 * with `setControl`. `{ id, persist }` binds namespace `id` kept in the
 * directory `persist` (where `wrangler kv … --local --persist-to DIR`
 * writes: DIR/v3/kv). `miniflare`: further options for the Miniflare
 * instance itself (e.g. `inspectorPort`).
 */
export async function startRouter(vars, logs = [], { routers = 1, probe = false, build = "build", routerVars = [], routerOptions = [], control = false, extraWorkers = [], miniflare = {} } = {}) {
  const workers = [];
  for (let i = 0; i < routers; i++) {
    workers.push({
      // Other Miniflare worker options for router i, e.g. serviceBindings.
      ...(routerOptions[i] ?? {}),
      name: routerName(i),
      modules: true,
      scriptPath: join(ROOT, build, "index.js"),
      modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"] }],
      ...runtime(),
      bindings: { ...vars, ...(routerVars[i] ?? {}) },
      unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }],
      ...(control ? { kvNamespaces: { ROUTER_CONTROL: control.id ?? "router-control" } } : {}),
    });
  }
  if (probe) {
    workers.push({ name: "cache-probe", modules: true, script: CACHE_PROBE, ...runtime(), unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }] });
  }
  // Other workers on the same runtime (sharing its Cache API, as every
  // Worker of a zone does), e.g. one that writes what an attacker would.
  workers.push(...extraWorkers);
  const mf = new Miniflare({
    workers,
    host: "127.0.0.1",
    port: 0,
    cf: false,
    ...(control?.persist ? { kvPersist: control.persist } : {}),
    ...miniflare,
    handleRuntimeStdio(stdout, stderr) {
      for (const stream of [stdout, stderr]) {
        createInterface({ input: stream }).on("line", (line) => logs.push(line));
      }
    },
  });
  await mf.ready;
  return mf;
}

/**
 * Writes the runtime control document (an object, or raw text for an
 * invalid one) into the stack's `ROUTER_CONTROL` namespace; `null`
 * deletes it.
 */
export async function setControl(stack, doc) {
  const kv = await stack.mf.getKVNamespace("ROUTER_CONTROL", "router");
  if (doc === null) await kv.delete("control");
  else await kv.put("control", typeof doc === "string" ? doc : JSON.stringify(doc));
}

/** Stops a child process: SIGTERM, then SIGKILL if it is still there after 3 s. */
export async function stopChild(child) {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  await new Promise((resolve) => {
    const t = setTimeout(() => {
      child.kill("SIGKILL");
      resolve();
    }, 3000);
    child.once("exit", () => {
      clearTimeout(t);
      resolve();
    });
    child.kill("SIGTERM");
  });
}

async function stopStack(stack) {
  if (stack.mf) await stack.mf.dispose().catch(() => {});
  for (const child of stack.children) await stopChild(child);
}

/** The router's structured request log lines (from line `from`), parsed. */
export function requestLogs(stack, from = 0) {
  return stack.logs
    .slice(from)
    .map((l) => l.slice(l.indexOf("{")))
    .filter((l) => l.startsWith('{"ruleset"'))
    .map((l) => JSON.parse(l));
}

/** A request through the router: the demo cell that answered (`x-demo-cell`), the router's log line and the response. */
export async function via(stack, path, { headers = {}, method = "GET" } = {}) {
  const from = stack.logs.length;
  const res = await request(stack.url + path, { method, headers });
  let log;
  for (let i = 0; i < 100 && !log; i++) {
    log = requestLogs(stack, from).find((l) => l.path !== undefined);
    if (!log) await new Promise((r) => setTimeout(r, 10));
  }
  return { status: res.status, cell: res.headers["x-demo-cell"], log, res };
}

/** Each `[path, cell, rule]`: `rule` classifies it and demo cell `cell` answers, the path forwarded as it came. */
export async function assertClassifiedTo(stack, cases) {
  for (const [path, cell, rule] of cases) {
    const r = await via(stack, path);
    assert.equal(r.status, 200, path);
    assert.equal(r.cell, cell, `${path} reached cell ${r.cell}`);
    assert.equal(r.log.rule, rule, path);
    const echo = r.res.json();
    assert.equal(echo.path, path.split("?")[0], `${path}: forwarded as it came`);
    assert.equal(echo.headers["x-gitlab-http-router-rule-action"], "classify", path);
  }
}

/**
 * One HTTP/1.1 request with full control of headers (node:http sends them
 * as given, unlike fetch). `body` may be a Buffer/string or an async
 * iterable of Buffers (streamed with chunked encoding). Resolves with
 * status, headers and the body as text (or `sink(chunk)` is called per
 * chunk when given). `signal` aborts it.
 */
export function request(url, { method = "GET", headers = {}, body, sink, signal } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, signal, headers: { "accept-encoding": "identity", ...headers } }, (res) => {
      const chunks = [];
      res.on("data", (c) => (sink ? sink(c) : chunks.push(c)));
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8");
        resolve({ status: res.statusCode, headers: res.headers, text, json: () => JSON.parse(text) });
      });
      res.on("error", reject);
    });
    req.on("error", reject);
    if (body === undefined) {
      req.end();
    } else if (typeof body === "string" || Buffer.isBuffer(body)) {
      req.end(body);
    } else {
      (async () => {
        for await (const chunk of body) {
          if (!req.write(chunk)) await new Promise((r) => req.once("drain", r));
        }
        req.end();
      })().catch(reject);
    }
  });
}

/**
 * One HTTP/1.1 request written byte for byte on a socket: for header
 * values node:http refuses to send (control bytes such as the plan's
 * separators). Resolves with status, headers (lower-case names) and body.
 */
export function rawRequest(url, { method = "GET", path = "/", headers = [] } = {}) {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), hostname, () => {
      const lines = [`${method} ${path} HTTP/1.1`, `host: ${hostname}:${port}`, "connection: close", "accept-encoding: identity"];
      for (const [name, value] of headers) lines.push(`${name}: ${value}`);
      socket.write(Buffer.from(`${lines.join("\r\n")}\r\n\r\n`, "latin1"));
    });
    let all = Buffer.alloc(0);
    const done = (result) => {
      socket.destroy();
      resolve(result);
    };
    // Resolves as soon as the whole response is in (the runtime may keep
    // the connection open whatever `connection: close` says).
    const parse = (ended) => {
      const cut = all.indexOf("\r\n\r\n");
      if (cut < 0) return ended ? reject(new Error(`no response head: ${all.toString("latin1").slice(0, 200)}`)) : undefined;
      const head = all.subarray(0, cut).toString("latin1").split("\r\n");
      const status = Number(head[0].split(" ")[1]);
      const hdrs = {};
      for (const line of head.slice(1)) {
        const i = line.indexOf(":");
        hdrs[line.slice(0, i).toLowerCase()] = line.slice(i + 1).trim();
      }
      const rest = all.subarray(cut + 4);
      let body;
      if (/chunked/i.test(hdrs["transfer-encoding"] ?? "")) {
        const parts = [];
        let at = 0;
        for (;;) {
          const eol = rest.indexOf("\r\n", at);
          if (eol < 0) return ended ? reject(new Error("cut chunked body")) : undefined;
          const size = parseInt(rest.subarray(at, eol).toString("latin1"), 16);
          if (size === 0) break;
          if (rest.length < eol + 2 + size + 2) return ended ? reject(new Error("cut chunk")) : undefined;
          parts.push(rest.subarray(eol + 2, eol + 2 + size));
          at = eol + 2 + size + 2;
        }
        body = Buffer.concat(parts);
      } else if (hdrs["content-length"] !== undefined) {
        const n = Number(hdrs["content-length"]);
        if (rest.length < n) return ended ? reject(new Error("cut body")) : undefined;
        body = rest.subarray(0, n);
      } else if (!ended) {
        return undefined;
      } else {
        body = rest;
      }
      const text = body.toString("utf8");
      done({ status, headers: hdrs, text, json: () => JSON.parse(text) });
    };
    socket.on("data", (d) => {
      all = Buffer.concat([all, d]);
      parse(false);
    });
    socket.on("error", reject);
    socket.on("end", () => parse(true));
  });
}

export async function getJson(url, init = {}) {
  const res = await fetch(url, init);
  return res.json();
}

export async function postJson(url, body) {
  const res = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  if (!res.ok) throw new Error(`${url}: ${res.status} ${await res.text()}`);
  return res.json().catch(() => ({}));
}

/** A free loopback port (bound, then released). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

export const sessionCookie = (cell, name = "_gitlab_session") => `${name}=cell-${cell}-${HEX32}`;

/** Waits (up to `ms`) for a request log line matching `predicate`. */
export async function waitForLog(stack, predicate, ms = 3000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const line = requestLogs(stack).findLast(predicate);
    if (line || Date.now() > deadline) return line;
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Waits (up to `ms`) for any raw output line matching `predicate`. */
export async function waitForOutput(stack, predicate, ms = 3000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const line = stack.logs.find(predicate);
    if (line || Date.now() > deadline) return line;
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Retries `check` (which throws until it holds) for up to `ms`: logs arrive asynchronously. */
export async function eventually(check, ms = 3000) {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      return await check();
    } catch (e) {
      if (Date.now() > deadline) throw e;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}
