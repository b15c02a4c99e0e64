// Shared parts of the hostile-input suite (hostile.test.mjs): a raw HTTP/1.1
// client over node:net for what node:http refuses to send, routable-token
// and JWT mutators, per-case accounting of which cell saw what, and the
// outcome classification that every case is judged by.
import net from "node:net";
import { crc32 } from "node:zlib";
import http from "node:http";
import { setTimeout as sleep } from "node:timers/promises";
import { HEX32, stopChild, startReady, requestLogs, freePort } from "./harness.mjs";

export { stopChild };

export const MARK = "SPOOFED-MARK";
export const KIB = 1024;
/** A request head smaller than this reaches the worker; workerd
 * (1.20261117) answers 431 itself from about 449 KiB (one header value of
 * 459,696 bytes routes, 459,711 is refused). */
export const HEAD_LIMIT = 448 * KIB;
export const session = (cell, name = "_gitlab_session", hex = HEX32) => `${name}=cell-${cell}-${hex}`;

// ---------------------------------------------------------------------------
// Raw HTTP/1.1 over a socket: the bytes go out exactly as given.

/**
 * Writes `bytes` to the router's socket and reads responses until
 * `responses` of them are complete (or the server closes). Resolves with
 * the first response parsed (status, lower-case headers, body text) plus
 * `responses`, the number of complete responses read, or with
 * `{status: null, error}` when the connection ends without a response.
 */
export function rawRequest(baseUrl, bytes, { timeout = 10_000, responses = 1 } = {}) {
  const { hostname, port } = new URL(baseUrl);
  return new Promise((resolve) => {
    const sock = net.connect({ host: hostname, port: Number(port) });
    let buf = Buffer.alloc(0);
    let settled = false;
    const finish = (err) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      sock.destroy();
      const parsed = parseResponses(buf);
      if (!parsed.length) return resolve({ status: null, error: err?.code ?? (buf.length ? "INCOMPLETE" : "CLOSED"), headers: {}, text: "" });
      resolve({ ...parsed[0], responses: parsed.length });
    };
    const timer = setTimeout(() => finish({ code: "TIMEOUT" }), timeout);
    sock.on("data", (d) => {
      buf = Buffer.concat([buf, d]);
      if (parseResponses(buf).length >= responses) finish();
    });
    sock.on("end", () => finish());
    sock.on("close", () => finish());
    sock.on("error", (e) => finish(e));
    sock.write(bytes);
  });
}

/** The complete HTTP/1.1 responses at the start of `buf` (never HEAD). */
function parseResponses(buf) {
  const out = [];
  let at = 0;
  for (;;) {
    const sep = buf.indexOf("\r\n\r\n", at);
    if (sep < 0) return out;
    const [statusLine, ...lines] = buf.subarray(at, sep).toString("latin1").split("\r\n");
    const headers = {};
    for (const l of lines) {
      const i = l.indexOf(":");
      if (i > 0) headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
    }
    const status = Number(statusLine.split(" ")[1]);
    let p = sep + 4;
    let body;
    if (/chunked/i.test(headers["transfer-encoding"] ?? "")) {
      const parts = [];
      for (;;) {
        const e = buf.indexOf("\r\n", p);
        if (e < 0) return out;
        const n = parseInt(buf.subarray(p, e).toString("latin1"), 16);
        if (Number.isNaN(n)) return out;
        if (n === 0) {
          if (buf.length < e + 4) return out;
          p = e + 4;
          break;
        }
        if (buf.length < e + 2 + n + 2) return out;
        parts.push(buf.subarray(e + 2, e + 2 + n));
        p = e + 2 + n + 2;
      }
      body = Buffer.concat(parts);
    } else if (headers["content-length"] !== undefined) {
      const n = Number(headers["content-length"]);
      if (buf.length < p + n) return out;
      body = buf.subarray(p, p + n);
      p += n;
    } else if (status === 204 || status === 304 || (status >= 100 && status < 200)) {
      body = Buffer.alloc(0);
    } else {
      return out; // delimited by the connection closing: wait for it
    }
    out.push({ status, headers, text: body.toString("utf8") });
    at = p;
  }
}

/**
 * A request head from lines (no line endings) joined by `eol`; strings are
 * latin1 so "\xff" is one byte, Buffers go in unchanged.
 */
export function rawHead(lines, { eol = "\r\n", body = "" } = {}) {
  const parts = [];
  for (const line of lines) {
    parts.push(Buffer.isBuffer(line) ? line : Buffer.from(line, "latin1"));
    parts.push(Buffer.from(eol, "latin1"));
  }
  parts.push(Buffer.from(eol, "latin1"));
  parts.push(Buffer.isBuffer(body) ? body : Buffer.from(body, "latin1"));
  return Buffer.concat(parts);
}

/**
 * One request through node:http with the path sent verbatim (harness's
 * `request` takes a URL, which node normalises first: `..`, `%2e` and
 * backslashes would never reach workerd). Header values are checked by
 * node as usual (CR, LF, NUL are refused with ERR_INVALID_CHAR).
 */
export function httpRequest(baseUrl, { method = "GET", path = "/", headers = {} } = {}) {
  const { hostname, port } = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: hostname, port: Number(port), method, path, agent: false, headers: { "accept-encoding": "identity", ...headers } }, (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, text: Buffer.concat(chunks).toString("utf8") }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end();
  });
}

// ---------------------------------------------------------------------------
// Routable tokens, built field by field so each can be broken on purpose
// (the honest generator is tokens.mjs; this one is its crooked twin).

export const RANDOM16 = Buffer.from("5b99b570747ab240bdf01c7b5e4b988e", "hex");
const b36 = (n, width) => n.toString(36).padStart(width, "0");
export const crcOf = (signed) => b36(crc32(signed), 7);

/**
 * `<prefix><b64(random ‖ payload ‖ lengthByte)>.<version>.<lenField><crc>`
 * with every piece overridable: `encode(buf)` (the base64 flavour),
 * `lengthByte`, `version`, `lenField`, and `crc` (a function of the signed
 * part, or a fixed string).
 */
export function craftToken({
  prefix = "glpat-",
  payload = "c:3\no:1",
  random = RANDOM16,
  lengthByte,
  encode = (b) => b.toString("base64url"),
  version = "01",
  lenField,
  crc = crcOf,
} = {}) {
  const p = Buffer.from(payload, "latin1");
  const raw = Buffer.concat([random, p, Buffer.from([(lengthByte ?? p.length) & 0xff])]);
  const encoded = encode(raw);
  const signed = `${prefix}${encoded}.${version}.${lenField ?? b36(encoded.length, 2)}`;
  return signed + (typeof crc === "function" ? crc(signed) : crc);
}

export const basicAuth = (user, password) => `Basic ${Buffer.from(`${user}:${password}`, "latin1").toString("base64")}`;

// ---------------------------------------------------------------------------
// JWTs (never verified by the router: it only ever reads them).

export const b64url = (s) => Buffer.from(s).toString("base64url");
export const jwt = (header, claims, sig = "c2lnbmF0dXJl") =>
  `${b64url(typeof header === "string" ? header : JSON.stringify(header))}.${b64url(typeof claims === "string" ? claims : JSON.stringify(claims))}.${sig}`;

// ---------------------------------------------------------------------------
// Extra demo cells (the registry stack's registries), stopped by PID.

export async function startCell(id) {
  const { child, ready } = await startReady(["cell", "--id", String(id), "--listen", "127.0.0.1:0"], `cell ${id}`);
  return { id: String(id), addr: ready.addr, url: `http://${ready.addr}`, child };
}


// ---------------------------------------------------------------------------
// Running a case and judging its outcome.

const PANIC = /panicked|RuntimeError|unreachable/;
const RUNTIME_ERROR = /Uncaught exception: kj\//;

/**
 * The context of one stack: `cells` maps the id the echo reports ("1",
 * "r2", ...) to its base URL; `victims` are cells no hostile case may reach
 * unless it expects to.
 */
export function makeContext(stack, cells) {
  return { stack, cells, totals: Object.fromEntries(Object.keys(cells).map((id) => [id, 0])), results: [] };
}

async function resetCounters(ctx) {
  await Promise.all([
    ...Object.values(ctx.cells).map((url) => fetch(`${url}/_stats/reset`, { method: "POST" }).then((r) => r.arrayBuffer())),
    fetch(`${ctx.stack.topology.admin}/_stats/reset`, { method: "POST" }).then((r) => r.arrayBuffer()),
  ]);
}

async function readCounters(ctx) {
  const entries = await Promise.all(
    Object.entries(ctx.cells).map(async ([id, url]) => {
      const s = await (await fetch(`${url}/_stats`)).json();
      return [id, { requests: s.requests, paths: s.last_requests.map((r) => r.path) }];
    }),
  );
  const topology = await (await fetch(`${ctx.stack.topology.admin}/_stats`)).json();
  return { cells: Object.fromEntries(entries), classify: topology.last_requests.map((r) => r.body), byType: topology.by_type };
}

/**
 * Sends one case and returns what happened: the response, the router's log
 * lines and every other output line it caused, which cells it reached and
 * what the Topology Service was asked, and its outcome:
 *
 * * `cell:<id>`: answered (status < 400) by that cell, through the router;
 * * `4xx:router`: the router answered a 4xx itself (a reject rule, a bad URL);
 * * `4xx:upstream`: a cell's HTTP server refused it (e.g. too many headers);
 * * `4xx:runtime`: workerd refused it before the worker ran (no router log line);
 * * `5xx:runtime`: workerd failed it before the worker ran, with its own
 *   "Uncaught exception: kj/..." line (bad Host, bad request target);
 * * `5xx:router` / `5xx:upstream`: a 5xx after the worker ran;
 * * `error:<code>`: the connection ended without any response.
 */
export async function runCase(ctx, c) {
  await resetCounters(ctx);
  const logStart = ctx.stack.logs.length;

  let res;
  try {
    if (c.raw) {
      res = await rawRequest(ctx.stack.url, c.raw(ctx), { responses: c.responses ?? 1 });
    } else {
      const headers = typeof c.headers === "function" ? c.headers(ctx) : (c.headers ?? {});
      res = await httpRequest(ctx.stack.url, { method: c.method ?? "GET", path: c.path ?? "/", headers });
    }
  } catch (e) {
    res = { status: null, error: e.code ?? e.message, headers: {}, text: "" };
  }
  // The worker's log line travels through workerd's stdout: give it a moment.
  const wanted = c.routerLines ?? 1;
  const deadline = Date.now() + (res.headers?.["x-demo-cell"] ? 2000 : 300);
  while (requestLogs(ctx.stack, logStart).length < wanted && Date.now() < deadline) await sleep(5);
  const routerLines = requestLogs(ctx.stack, logStart);
  const output = ctx.stack.logs.slice(logStart);
  const counters = await readCounters(ctx);
  for (const [id, s] of Object.entries(counters.cells)) ctx.totals[id] += s.requests;

  let echo = null;
  try {
    echo = JSON.parse(res.text);
  } catch {
    // not an echo
  }
  const cell = res.headers?.["x-demo-cell"];
  const routed = routerLines.length > 0;
  let outcome;
  if (res.status === null) outcome = `error:${res.error}`;
  else if (cell && res.status < 400) outcome = `cell:${cell}`;
  else if (res.status >= 400 && res.status < 500) outcome = !routed ? "4xx:runtime" : routerLines.at(-1).upstream ? "4xx:upstream" : "4xx:router";
  else if (res.status >= 500) outcome = !routed && output.some((l) => RUNTIME_ERROR.test(l)) ? "5xx:runtime" : routerLines.at(-1)?.upstream && !/^gitlab-http-router:/.test(res.text) ? "5xx:upstream" : "5xx:router";
  else outcome = `other:${res.status}`;
  const result = { family: c.family, name: c.name, host: new URL(ctx.stack.url).host, outcome, status: res.status, res, echo, routerLines, output, counters };
  ctx.results.push(result);
  return result;
}

/** Percent-decodes (invalid UTF-8 becomes U+FFFD) for comparing paths. */
export function lenientDecode(path) {
  const bytes = [];
  const raw = Buffer.from(path, "utf8");
  for (let i = 0; i < raw.length; i++) {
    if (raw[i] === 0x25 && /^[0-9a-fA-F]{2}$/.test(raw.subarray(i + 1, i + 3).toString("latin1"))) {
      bytes.push(parseInt(raw.subarray(i + 1, i + 3).toString("latin1"), 16));
      i += 2;
    } else bytes.push(raw[i]);
  }
  return Buffer.from(bytes).toString("utf8");
}

/** Whether `outcome` is one of `allowed` ("4xx" allows any 4xx). */
export function outcomeAllowed(outcome, allowed) {
  return allowed.some((a) => a === outcome || (a === "4xx" && outcome.startsWith("4xx:")) || (a === "error" && outcome.startsWith("error:")));
}

/**
 * The checks every case gets, whatever its family: the outcome is one it
 * allows; no panic or wasm trap was printed; only the cell that answered
 * saw a request (at most `maxRequests` of them); a 5xx came from the router
 * only when the case asks for one; what the Topology Service was asked is
 * a well-formed classify body.
 */
/** Headers only the router or Cloudflare may set. */
const PROTECTED = /^(x-gitlab-http-router-|x-forwarded-|cf-access-|forwarded$|x-real-ip$|true-client-ip$|x-original-url$|x-rewrite-url$)/;

export function commonProblems(r, c) {
  const problems = [];
  if (!outcomeAllowed(r.outcome, c.expect)) problems.push(`outcome ${r.outcome} (status ${r.status}) not in [${c.expect.join(", ")}]: ${JSON.stringify((r.res.text ?? "").slice(0, 160))}`);
  const panics = r.output.filter((l) => PANIC.test(l));
  if (panics.length) problems.push(`panic/trap in workerd output: ${panics.join(" | ").slice(0, 400)}`);
  const answered = r.outcome.startsWith("cell:") ? r.outcome.slice(5) : null;
  for (const [id, s] of Object.entries(r.counters.cells)) {
    if (s.requests === 0) continue;
    if (id !== answered) problems.push(`cell ${id} saw ${s.requests} request(s) (${s.paths.join(" ")}) but the outcome is ${r.outcome}`);
    else if (s.requests > (c.maxRequests ?? 1)) problems.push(`cell ${id} saw ${s.requests} requests, expected at most ${c.maxRequests ?? 1}`);
  }
  // The router must classify the path it forwards: whatever the cell got is
  // what the router logged (percent-encoding of non-ASCII aside, which
  // fetch adds). A difference means a rule judged one path and a cell
  // served another.
  if (answered && r.routerLines.length) {
    const seen = r.counters.cells[answered]?.paths[0];
    const classified = r.routerLines[0].path;
    if (seen !== undefined && classified !== undefined && lenientDecode(seen) !== lenientDecode(classified)) {
      problems.push(`the router classified ${JSON.stringify(classified)} but cell ${answered} was sent ${JSON.stringify(seen)}`);
    }
  }
  if (/^5xx:(router|upstream)/.test(r.outcome) && !c.expect.includes(r.outcome)) problems.push(`a 5xx after the worker ran: ${r.res.text}`);
  for (const body of r.counters.classify) {
    const ok =
      body && typeof body === "object" &&
      Object.keys(body).every((k) => ["type", "value", "target", "claims"].includes(k)) &&
      (body.claims === undefined || (Array.isArray(body.claims) && body.claims.length === 1 && Object.keys(body.claims[0]).length === 1)) &&
      (body.value === undefined || typeof body.value === "string");
    if (!ok) problems.push(`malformed classify body sent to the Topology Service: ${JSON.stringify(body)}`);
  }
  if (r.counters.byType.INVALID) problems.push("the Topology Service received an INVALID classify body");
  if (r.echo?.headers) {
    const h = r.echo.headers;
    for (const [raw, value] of Object.entries(h)) {
      const name = raw.replaceAll("_", "-"); // Rack reads both spellings as one
      if (PROTECTED.test(name) && value.includes(MARK)) {
        problems.push(`spoofed ${name}: ${value} reached the cell`);
      }
    }
  }
  return problems;
}

/** Per-family lines: count and outcome histogram. */
export function summary(results, title) {
  const families = new Map();
  for (const r of results) {
    if (!families.has(r.family)) families.set(r.family, { count: 0, outcomes: {}, failed: 0 });
    const f = families.get(r.family);
    f.count++;
    f.outcomes[r.outcome] = (f.outcomes[r.outcome] ?? 0) + 1;
    if (r.problems?.length) f.failed++;
  }
  const lines = [`${title}: ${results.length} cases`];
  for (const [name, f] of families) {
    const hist = Object.entries(f.outcomes)
      .sort((a, b) => b[1] - a[1])
      .map(([o, n]) => `${o}=${n}`)
      .join(" ");
    lines.push(`  ${name.padEnd(22)} ${String(f.count).padStart(4)} cases  ${hist}${f.failed ? `  FAILED=${f.failed}` : ""}`);
  }
  return lines;
}

/** A loopback port nothing listens on (bound, then released). */
export const closedPort = freePort;
