// Shared pieces of the deploy tests: a throw-away project directory per test
// (the repo's wrangler.toml and rules/, a copy of build/), a stub rulesctl,
// a runner for the real deploy-worker.sh with the pinned wrangler pointed
// at a cf-api-standin, and loopback cells for the real router
// (edge-standin.mjs's `router`).
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parse } from "smol-toml";

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const SCRIPT = path.join(REPO, "deploy-worker.sh");
export const ACCOUNT_ID = "0123456789abcdef0123456789abcdef";
/** The smoke-test secret the deploy sends and the edge stand-in asks for. */
export const SMOKE_SECRET = "smoke-test-secret-0123";

/** Builds the worker once when build/ is missing (the tests use SKIP_BUILD=true). */
export function ensureBuild() {
  if (fs.existsSync(path.join(REPO, "build/worker/index.wasm")) && fs.existsSync(path.join(REPO, "build/index.js"))) return;
  const r = spawnSync("bash", ["scripts/build-worker.sh"], { cwd: REPO, stdio: "inherit" });
  if (r.status !== 0) throw new Error("bash scripts/build-worker.sh failed");
}

/** What the tests put in place of wrangler.toml's REPLACE_ME values (example.test: never resolved). */
export const FILLED = {
  GITLAB_TOPOLOGY_SERVICE_URL: "https://topology.example.test",
  GITLAB_PROXY_HOST: "legacy.example.test",
  GITLAB_ALLOWED_UPSTREAMS: "*.cells.example.test,legacy.example.test",
  GITLAB_CELLS:
    '[{"id":1,"address":"legacy.example.test","session_prefix":"cell-1","health_path":"/-/readiness"},{"id":2,"address":"cell-2.cells.example.test","session_prefix":"cell-2","health_path":"/-/readiness"}]',
};

/**
 * wrangler.toml text with every `KEY = "REPLACE_ME"` filled in as an operator
 * would: the vars from FILLED, a KV namespace id per environment (32 hex
 * digits). Throws on a placeholder it does not know.
 */
export function fillPlaceholders(text) {
  let kv = 0;
  const out = text.replace(/^(\w+) = "REPLACE_ME"$/gm, (line, key) => {
    if (key === "id") return `id = "${(++kv).toString(16).padStart(32, "0")}"`;
    if (!(key in FILLED)) throw new Error(`fillPlaceholders: no test value for ${key}`);
    return `${key} = '${FILLED[key]}'`;
  });
  const left = out.split("\n").find((l) => !l.trimStart().startsWith("#") && l.includes("REPLACE_ME"));
  if (left) throw new Error(`fillPlaceholders: a REPLACE_ME value is left: ${left}`);
  return out;
}

/**
 * A temp project: wrangler.toml is the repo's, its REPLACE_ME values filled
 * in (fillPlaceholders), with `main` made absolute and
 * the [build] table left out (its command builds in the repo, and SKIP_BUILD
 * means the prebuilt build/ is what ships); rules/ links to the repo's;
 * build/ is a copy, so a concurrent rebuild cannot change it mid-test;
 * tail-worker/ is a copy too.
 */
export function makeProject(t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "deploy-test-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const lines = fs.readFileSync(path.join(REPO, "wrangler.toml"), "utf8").split("\n");
  const out = [];
  let inBuild = false;
  for (const line of lines) {
    if (/^\s*\[/.test(line)) inBuild = /^\s*\[build\]\s*$/.test(line);
    if (!inBuild) out.push(line);
  }
  const config = fillPlaceholders(out.join("\n")).replace(/^main = "build\/index.js"$/m, `main = "${path.join(dir, "build/index.js")}"`);
  fs.writeFileSync(path.join(dir, "wrangler.toml"), config);
  fs.symlinkSync(path.join(REPO, "rules"), path.join(dir, "rules"));
  fs.cpSync(path.join(REPO, "build"), path.join(dir, "build"), { recursive: true });
  // The tail worker (deployed first, from tail-worker/wrangler.toml beside wrangler.toml).
  fs.cpSync(path.join(REPO, "tail-worker"), path.join(dir, "tail-worker"), { recursive: true });
  for (const sub of ["home", "xdg", "tmp"]) fs.mkdirSync(path.join(dir, sub));
  // No change lock unless a test writes one.
  fs.writeFileSync(path.join(dir, "change-lock.toml"), "");
  // rulesctl stand-in: records its arguments, exits RULESCTL_STUB_EXIT (0).
  const stub = path.join(dir, "rulesctl-stub.sh");
  fs.writeFileSync(stub, `#!/usr/bin/env bash\necho "$*" >> "${path.join(dir, "rulesctl.calls")}"\nexit "\${RULESCTL_STUB_EXIT:-0}"\n`);
  return {
    dir,
    config: path.join(dir, "wrangler.toml"),
    wasmSize: fs.statSync(path.join(dir, "build/worker/index.wasm")).size,
    rulesctlCalls: () => {
      const f = path.join(dir, "rulesctl.calls");
      return fs.existsSync(f) ? fs.readFileSync(f, "utf8").trim().split("\n") : [];
    },
    env(api, extra = {}) {
      return {
        PATH: process.env.PATH,
        LANG: "C.UTF-8",
        HOME: path.join(dir, "home"),
        XDG_CONFIG_HOME: path.join(dir, "xdg"),
        TMPDIR: path.join(dir, "tmp"),
        WRANGLER_SEND_METRICS: "false",
        WRANGLER_HIDE_BANNER: "true",
        CLOUDFLARE_CF_FETCH_ENABLED: "false",
        WRANGLER_OUTPUT_FILE_PATH: path.join(dir, "wrangler-output.ndjson"),
        WRANGLER_CONFIG: path.join(dir, "wrangler.toml"),
        RULESCTL: `bash ${stub}`,
        CHANGE_LOCK_FILE: path.join(dir, "change-lock.toml"),
        CHANGE_LOCK_NOW: "2026-05-01T12:00:00Z",
        SKIP_BUILD: "true",
        BAKE_SECONDS: "0",
        SMOKE_DELAY_SECONDS: "0",
        SMOKE_TEST_SECRET: SMOKE_SECRET,
        // edge-standin.mjs without `router` answers statuses only and names
        // no route: the rollout's mechanics are tested here, the routing
        // checks through the real router (routing-health.test.mjs).
        ROUTING_CHECKS: "false",
        ROLLOUT_RECORD: path.join(dir, "rollout-record.json"),
        DEPLOY_TAG: "abc1234",
        DEPLOY_MESSAGE: "test deploy",
        CI: "true",
        ...(api
          ? {
              CLOUDFLARE_API_BASE_URL: api.baseUrl,
              CLOUDFLARE_API_TOKEN: "test",
              CLOUDFLARE_ACCOUNT_ID: ACCOUNT_ID,
            }
          : {}),
        ...extra,
      };
    },
  };
}

/** Runs deploy-worker.sh; resolves {code, signal, stdout, stderr, output}. */
export function runDeploy(args, env, opts = {}) {
  return startDeploy(args, env, opts).done;
}

/** Starts deploy-worker.sh: {child, done} (done as runDeploy's promise). */
export function startDeploy(args, env, { timeoutMs = 300_000 } = {}) {
  // its own process group, so a timeout stops wrangler too, not only the program
  const child = spawn("bash", [SCRIPT, ...args], { cwd: REPO, env, stdio: ["ignore", "pipe", "pipe"], detached: true });
  const done = new Promise((resolve, reject) => {
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    const timer = setTimeout(() => {
      try {
        process.kill(-child.pid, "SIGKILL");
      } catch {}
      reject(new Error(`deploy-worker.sh ${args.join(" ")} timed out\n${stdout}\n${stderr}`));
    }, timeoutMs);
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, output: stdout + stderr });
    });
  });
  return { child, done };
}

/** The Worker name of a wrangler environment, read from the repo's wrangler.toml. */
export function workerName(env) {
  const text = fs.readFileSync(path.join(REPO, "wrangler.toml"), "utf8");
  const section = text.split(/^\[/m).find((s) => s.startsWith(`env.${env}]`));
  const m = section?.match(/^name = "([^"]+)"/m);
  if (!m) throw new Error(`no [env.${env}] name in wrangler.toml`);
  return m[1];
}

/** The routes of a wrangler environment, as wrangler.toml lists them. */
export function workerRoutes(env) {
  return parse(fs.readFileSync(path.join(REPO, "wrangler.toml"), "utf8")).env[env].routes ?? [];
}

/** Requests that change state (anything but GET; an Analytics Engine SQL query is a POST that reads). */
export const writes = (api) => api.requests.filter((r) => r.method !== "GET" && !r.path.endsWith("/analytics_engine/sql"));

/** Shows what the script printed when an assertion fails. */
export const explain = (result) => `exit ${result.code}\n--- stdout\n${result.stdout}\n--- stderr\n${result.stderr}`;

/** A loopback server answering every request with `status` and `headers`. */
export async function serve(t, headers = {}, status = 200) {
  const seen = [];
  const server = http.createServer((req, res) => {
    seen.push({ method: req.method, url: req.url, headers: req.headers });
    req.resume();
    res.writeHead(status, { "content-type": "text/plain", ...headers });
    res.end("ok\n");
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(() => new Promise((resolve) => (server.closeAllConnections?.(), server.close(resolve))));
  return { port: server.address().port, seen };
}

/**
 * Two loopback cells (the legacy cell is cell 1; with `header`, each names
 * itself in it) and a Topology Service that knows no key: sessions and
 * tokens of listed cells resolve through GITLAB_CELLS, the rest go to the
 * legacy cell. `vars`: the router's [vars] for them, ruleset session_token.
 */
export async function loopbackCells(t, { header = null } = {}) {
  const cell1 = await serve(t, header ? { [header]: "1" } : {});
  const cell2 = await serve(t, header ? { [header]: "2" } : {});
  const topology = await serve(t, { "content-type": "application/json" }, 404);
  const vars = {
    GITLAB_RULES_CONFIG: "session_token",
    GITLAB_TOPOLOGY_SERVICE_URL: `http://127.0.0.1:${topology.port}`,
    GITLAB_PROXY_HOST: `127.0.0.1:${cell1.port}`,
    GITLAB_UPSTREAM_SCHEME: "http",
    GITLAB_ALLOWED_UPSTREAMS: `127.0.0.1:${cell1.port},127.0.0.1:${cell2.port}`,
    GITLAB_CELLS: JSON.stringify([
      { id: 1, address: `127.0.0.1:${cell1.port}`, session_prefix: "cell-1", health_path: "/-/readiness" },
      { id: 2, address: `127.0.0.1:${cell2.port}`, session_prefix: "cell-2", health_path: "/-/readiness" },
    ]),
  };
  return { cell1, cell2, vars };
}

/** wrangler.toml's [env.staging.vars] with `values` set (each key replaced or added). */
export function setStagingVars(file, values) {
  const lines = fs.readFileSync(file, "utf8").split("\n");
  const start = lines.indexOf("[env.staging.vars]");
  if (start < 0) throw new Error(`${file} has no [env.staging.vars]`);
  let end = lines.findIndex((l, i) => i > start && /^\s*\[/.test(l));
  if (end === -1) end = lines.length;
  const left = new Map(Object.entries(values));
  for (let i = start + 1; i < end; i++) {
    const m = lines[i].match(/^([A-Z_]+) = /);
    if (m && left.has(m[1])) {
      lines[i] = `${m[1]} = ${JSON.stringify(left.get(m[1]))}`;
      left.delete(m[1]);
    }
  }
  lines.splice(end, 0, ...[...left].map(([k, v]) => `${k} = ${JSON.stringify(v)}`));
  fs.writeFileSync(file, lines.join("\n"));
}
