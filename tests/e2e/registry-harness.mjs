// Registry test parts on top of harness.mjs: Debian's docker-registry
// (distribution 2.8) on a free loopback port with a temp filesystem root,
// skopeo runs, HS256 registry JWTs, and the core's rollout bucket written
// again in JS (to pick repositories and to check the worker against it).
// Every process started here is stopped by its PID.
import { spawn, spawnSync } from "node:child_process";
import { createInterface } from "node:readline";
import { createHmac } from "node:crypto";
import { mkdtempSync, writeFileSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import net from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { ROOT, stopChild, freePort } from "./harness.mjs";


export const REGISTRY_BIN = process.env.DOCKER_REGISTRY_BIN ?? "docker-registry";
export const SKOPEO_BIN = process.env.SKOPEO_BIN ?? "skopeo";

/** Throws a clear message when docker-registry or skopeo is not installed. */
export function requireRegistryTools() {
  const missing = [REGISTRY_BIN, SKOPEO_BIN].filter((bin) => spawnSync(bin, ["--version"], { stdio: "ignore" }).status !== 0);
  if (missing.length) {
    throw new Error(`${missing.join(" and ")} not installed: run bash scripts/setup.sh --registry`);
  }
}


/**
 * Starts `docker-registry serve` on 127.0.0.1:<free port> with a filesystem
 * root in a temp dir and JSON logs. `registry.requests()` are its
 * "response completed" lines, errors included ({method, uri, status, host}).
 */
export async function startRegistry(label) {
  const dir = mkdtempSync(join(tmpdir(), `router-registry-${label}-`));
  let lastErr;
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    const addr = `127.0.0.1:${port}`;
    const config = join(dir, "config.yml");
    writeFileSync(
      config,
      [
        "version: 0.1",
        "log:",
        "  level: info",
        "  formatter: json",
        "  accesslog:",
        "    disabled: true",
        "storage:",
        "  filesystem:",
        `    rootdirectory: ${join(dir, "data")}`,
        "  delete:",
        "    enabled: true",
        "http:",
        `  addr: ${addr}`,
        "",
      ].join("\n"),
    );
    const child = spawn(REGISTRY_BIN, ["serve", config], { stdio: ["ignore", "ignore", "pipe"] });
    const lines = [];
    createInterface({ input: child.stderr }).on("line", (l) => lines.push(l));
    let exited = false;
    child.once("exit", () => (exited = true));
    child.once("error", (e) => {
      exited = true;
      lastErr = e;
    });
    const deadline = Date.now() + 10_000;
    while (!exited && Date.now() < deadline) {
      try {
        const res = await fetch(`http://${addr}/v2/`);
        if (res.status === 200) {
          const registry = {
            label,
            addr,
            url: `http://${addr}`,
            dir,
            child,
            lines,
            requests: () =>
              lines
                .filter((l) => l.startsWith("{") && l.includes('"response completed'))
                .map((l) => JSON.parse(l))
                .filter((l) => String(l.msg).startsWith("response completed"))
                .map((l) => ({
                  method: l["http.request.method"],
                  uri: l["http.request.uri"],
                  status: l["http.response.status"],
                  host: l["http.request.host"],
                })),
            stop: () => stopChild(child).then(() => rmSync(dir, { recursive: true, force: true })),
          };
          return registry;
        }
      } catch {
        // not listening yet
      }
      await sleep(50);
    }
    lastErr ??= new Error(`${label} registry did not start: ${lines.slice(-5).join("\n")}`);
    await stopChild(child);
  }
  rmSync(dir, { recursive: true, force: true });
  throw lastErr;
}


let policyFile;
/** An accept-anything signature policy of our own, so no system file matters. */
function policy() {
  if (!policyFile) {
    const dir = mkdtempSync(join(tmpdir(), "router-skopeo-"));
    process.once("exit", () => rmSync(dir, { recursive: true, force: true }));
    policyFile = join(dir, "policy.json");
    writeFileSync(policyFile, JSON.stringify({ default: [{ type: "insecureAcceptAnything" }] }));
  }
  return policyFile;
}

/** Runs skopeo with `args` (after the global options); resolves {code, stdout, stderr}. */
export function skopeo(args, { timeoutMs = 60_000 } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(SKOPEO_BIN, ["--policy", policy(), ...args], { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.once("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** Throws with skopeo's output unless it exited 0. */
export async function skopeoOk(args) {
  const res = await skopeo(args);
  if (res.code !== 0) throw new Error(`skopeo ${args.join(" ")} exited ${res.code}:\n${res.stderr}${res.stdout}`);
  return res;
}

/**
 * A plain TCP front for the router that answers a TLS ClientHello with a
 * plain-HTTP 400 (as Go's own servers do) and pipes everything else, byte
 * for byte, to `target` (the router's host:port). Why: skopeo pings
 * https://host/v2/ first even with --tls-verify=false; workerd holds a TLS
 * handshake on its plain socket for ~15 s, so every skopeo run would wait
 * for Go's 10 s TLS handshake timeout before falling back to http. Host
 * headers pass unchanged, so the router still sees (and forwards as
 * X-Forwarded-Host) the address the client used, and every request still
 * goes through the router.
 */
export async function startPlainHttpFront(target) {
  const [host, port] = [target.slice(0, target.lastIndexOf(":")), Number(target.slice(target.lastIndexOf(":") + 1))];
  const sockets = new Set();
  const stats = { tlsRefused: 0, connections: 0 };
  const server = net.createServer((client) => {
    sockets.add(client);
    client.once("close", () => sockets.delete(client));
    client.on("error", () => client.destroy());
    client.once("data", (first) => {
      client.pause();
      if (first[0] === 0x16) {
        stats.tlsRefused++;
        client.end("HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain\r\n\r\nplain HTTP only\n");
        return;
      }
      stats.connections++;
      const upstream = net.connect(port, host);
      sockets.add(upstream);
      upstream.once("close", () => {
        sockets.delete(upstream);
        client.destroy();
      });
      client.once("close", () => upstream.destroy());
      upstream.on("error", () => client.destroy());
      upstream.once("connect", () => {
        upstream.write(first);
        client.pipe(upstream);
        upstream.pipe(client);
        client.resume();
      });
    });
  });
  await new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", resolve);
  });
  const addr = `127.0.0.1:${server.address().port}`;
  return {
    addr,
    stats,
    stop: () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

const b64url = (x) => Buffer.from(typeof x === "string" ? x : JSON.stringify(x)).toString("base64url");

/** A compact HS256 JWT (the router reads the claims unverified). */
export function jwtHS256(claims, key = "test-key", header = { alg: "HS256", typ: "JWT" }) {
  const signingInput = `${b64url(header)}.${b64url(claims)}`;
  const sig = createHmac("sha256", key).update(signingInput).digest("base64url");
  return `${signingInput}.${sig}`;
}

/** Registry token claims the way GitLab's /jwt/auth issues them. */
export function registryClaims(repository, actions = ["pull", "push"]) {
  const now = Math.floor(Date.now() / 1000);
  return {
    iss: "gitlab-issuer",
    aud: "container_registry",
    sub: "root",
    iat: now,
    nbf: now - 5,
    exp: now + 300,
    jti: "0123456789abcdef",
    access: [{ type: "repository", name: repository, actions, meta: { project_path: repository } }],
  };
}

const MASK64 = (1n << 64n) - 1n;

/**
 * The core's `rollout_bucket` (crates/router-core/src/select/rollout.rs), again:
 * FNV-1a 64 over seed, a 0 byte and the value, then a 64-bit finalizer,
 * modulo 10,000. The e2e tests check the worker agrees with it.
 */
export function rolloutBucket(seed, value) {
  let h = 0xcbf29ce484222325n;
  for (const b of Buffer.concat([Buffer.from(seed), Buffer.from([0]), Buffer.from(value)])) {
    h ^= BigInt(b);
    h = (h * 0x100000001b3n) & MASK64;
  }
  h ^= h >> 33n;
  h = (h * 0xff51afd7ed558ccdn) & MASK64;
  h ^= h >> 33n;
  h = (h * 0xc4ceb9fe1a85ec53n) & MASK64;
  h ^= h >> 33n;
  return Number(h % 10000n);
}

/** The shipped rules/registry_migration.json and a predicate "is this repository migrated". */
export function migrationRules() {
  const rules = JSON.parse(readFileSync(join(ROOT, "rules", "registry_migration.json"), "utf8"));
  const rollout = rules.find((r) => r.id === "registry_repository_migrated").rollout;
  const include = rollout.include.map((s) => new RegExp(s));
  const exclude = rollout.exclude.map((s) => new RegExp(s));
  const migrated = (repo) =>
    (include.length === 0 || include.some((re) => re.test(repo))) &&
    !exclude.some((re) => re.test(repo)) &&
    (rollout.percentage === undefined || rolloutBucket(rollout.seed, repo) < Math.round(rollout.percentage * 100));
  return { rules, rollout, migrated };
}
