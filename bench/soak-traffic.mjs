// The soak's traffic: keys drawn from a skewed distribution, the
// requests made from them, and the checks of every answer. Each operation
// resolves with an outcome record; soak.mjs judges it against the fault
// schedule (which cell is right, which fallback is documented).
import http from "node:http";
import { createHash, randomBytes } from "node:crypto";
import { routableToken } from "../tests/e2e/tokens.mjs";
import { connect } from "../tests/e2e/longlived-ws.mjs";
import { nsName, projectId, ownerOf } from "./soak-stack.mjs";

const HEX32 = "0123456789abcdef0123456789abcdef";

/** A seeded PRNG (mulberry32): the same seed gives the same run plan. */
export function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Zipf(s) sampler over 0..n-1: index 0 hottest. */
export function zipf(n, s, random) {
  const cdf = new Float64Array(n);
  let sum = 0;
  for (let i = 0; i < n; i++) cdf[i] = sum += 1 / Math.pow(i + 1, s);
  for (let i = 0; i < n; i++) cdf[i] /= sum;
  return () => {
    const u = random();
    let lo = 0;
    let hi = n - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cdf[mid] < u) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
}

/**
 * The key space: every way the `cells` ruleset finds a cell. A key is
 * { id, kind, cell, path(suffix), headers }: `cell` the cell that owns it
 * (what a healthy router must answer from). The first keys are the hot
 * ones (sessions, tokens, the shipped namespaces); then, shuffled, the soak
 * namespaces and projects and unknown namespaces (cold).
 */
export function keySpace(nKeys, random) {
  const hot = [];
  for (const cell of [1, 2, 3, 4]) {
    hot.push({ kind: "session", cell, headers: { cookie: `_gitlab_session=cell-${cell}-${HEX32}` } });
    hot.push({ kind: "private-token", cell, headers: { "private-token": routableToken("glpat-", { c: cell, o: 1, u: 7 }) } });
    hot.push({ kind: "job-token", cell, headers: { "job-token": routableToken("glcbt-", { c: cell, o: 1, p: 5 }) } });
    hot.push({ kind: "bearer", cell, headers: { authorization: `Bearer ${routableToken("glpat-", { c: cell, o: 1, u: 9 })}` } });
  }
  for (const [ns, cell] of [["cell2-group", 2], ["acme", 2], ["cell3-group", 3], ["gitlab-org", 1], ["cell4-group", 4]]) {
    hot.push({ kind: "namespace", cell, ns });
  }
  hot.push({ kind: "project", cell: 2, project: 200 });
  hot.push({ kind: "project", cell: 3, project: 300 });
  const cold = [];
  for (let i = 0; i < nKeys; i++) {
    cold.push({ kind: "namespace", cell: ownerOf(i), ns: nsName(i) });
    cold.push({ kind: "project", cell: ownerOf(i), project: projectId(i) });
    // Known to no cell: the path rules hand it on, nothing else matches, the legacy cell.
    cold.push({ kind: "unknown-namespace", cell: 1, ns: `nobody-${i}` });
  }
  for (let i = cold.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [cold[i], cold[j]] = [cold[j], cold[i]];
  }
  const all = [...hot, ...cold];
  all.forEach((k, i) => (k.id = i));
  return all;
}

/** Path and headers of a plain request for `key`. */
export function target(key, random) {
  switch (key.kind) {
    case "namespace":
    case "unknown-namespace":
    case "burst-404":
      return { path: `/${key.ns}/project-${Math.floor(random() * 50)}/-/issues`, headers: {} };
    case "project":
      return { path: `/api/v4/projects/${key.project}/merge_requests`, headers: {} };
    default:
      return { path: random() < 0.5 ? "/api/v4/user" : "/dashboard", headers: { ...key.headers } };
  }
}

/**
 * The classify bodies the router POSTs for `key` (`cells` ruleset, as
 * `rulesctl explain` gives them), in its rules' order: a path claim first,
 * then, when the service does not know it (`notFound: next-rule`), the
 * session or token rule. `transfer`: the transfer paths (a header key's
 * goes through api_project_path's route "soak" first). Sent as
 * `x-soak-questions`, for the I/O-matched null worker.
 */
export function questions(key, transfer = false) {
  const route = (r) => `{"claims":[{"route":${JSON.stringify(r.toLowerCase())}}]}`;
  switch (key.kind) {
    case "namespace":
    case "unknown-namespace":
    case "burst-404":
      return [route(key.ns)];
    case "project":
      return [`{"claims":[{"projectId":"${key.project}"}]}`];
    default: {
      const own = key.kind === "session" ? `{"type":"SESSION_PREFIX","value":"cell-${key.cell}"}` : `{"type":"CELL_ID","value":"${key.cell}"}`;
      return transfer ? [route("soak"), own] : [own];
    }
  }
}
const questionsHeader = (key, transfer) => ({ "x-soak-questions": JSON.stringify(questions(key, transfer)) });

/** Path and headers of a transfer (package upload or download) for `key`. */
export function transferTarget(key) {
  switch (key.kind) {
    case "project":
      return { path: `/api/v4/projects/${key.project}/packages/generic/soak/1.0/blob.bin`, headers: {} };
    case "namespace":
    case "unknown-namespace":
      return { path: `/${key.ns}/project/-/raw/main/blob.bin`, headers: {} };
    default:
      return { path: "/api/v4/projects/soak%2Fblob/packages/generic/soak/1.0/blob.bin", headers: { ...key.headers } };
  }
}

// ---------------------------------------------------------------------------
// HTTP with a deadline, hashing or checking the body as it streams.

/**
 * One request. `body`: a Buffer or a { size, chunks() } generator (streamed).
 * `onChunk(chunk)` sees the response body instead of it being kept.
 * Resolves { status, headers, text, error } (error: a transport failure or
 * the deadline).
 */
export async function send(url, init) {
  const res = await sendOnce(url, init);
  // A keep-alive connection that the server closed as this request went out
  // on it (ECONNRESET before any answer): the request never arrived; HTTP
  // clients send it again, once, on a new connection.
  if (res.error && res.reused && res.status === undefined && /ECONNRESET|socket hang up/.test(res.error)) {
    const again = await sendOnce(url, { ...init, agent: false });
    again.retried = res.error;
    return again;
  }
  return res;
}

function sendOnce(url, { method = "GET", headers = {}, body, onChunk, timeoutMs, agent }) {
  return new Promise((resolve) => {
    let done = false;
    const finish = (r) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      resolve(r);
    };
    const req = http.request(url, { method, agent, headers: { "accept-encoding": "identity", ...headers } }, (res) => {
      const chunks = [];
      let bytes = 0;
      res.on("data", (c) => {
        bytes += c.length;
        if (onChunk) onChunk(c);
        else chunks.push(c);
      });
      res.on("end", () => finish({ status: res.statusCode, headers: res.headers, text: Buffer.concat(chunks).toString("utf8"), bytes }));
      res.on("error", (e) => finish({ status: res.statusCode, headers: res.headers, error: `response: ${e.message}`, bytes }));
      res.on("aborted", () => finish({ status: res.statusCode, headers: res.headers, error: "response aborted", bytes }));
    });
    const timer = setTimeout(() => {
      req.destroy(new Error(`no complete answer within ${timeoutMs} ms`));
    }, timeoutMs);
    req.on("error", (e) => finish({ error: e.message, reused: req.reusedSocket }));
    if (body === undefined) req.end();
    else if (Buffer.isBuffer(body)) req.end(body);
    else {
      (async () => {
        for (const chunk of body.chunks()) {
          if (done) return;
          if (!req.write(chunk)) await new Promise((r) => req.once("drain", r));
        }
        req.end();
      })().catch((e) => finish({ error: `upload: ${e.message}` }));
    }
  });
}

const CHUNK = 64 * 1024;
const BASE = randomBytes(16 * CHUNK);

/** An upload body of `size` bytes (64 KiB chunks of a random 1 MiB block, rotated by `seed`), with its SHA-256. */
export function uploadBody(size, seed) {
  const hash = createHash("sha256");
  const chunkAt = (k, len) => {
    const off = ((seed + k * 7) % 16) * CHUNK;
    return BASE.subarray(off, off + len);
  };
  const n = Math.ceil(size / CHUNK);
  for (let k = 0; k < n; k++) hash.update(chunkAt(k, Math.min(CHUNK, size - k * CHUNK)));
  return {
    size,
    sha256: hash.digest("hex"),
    *chunks() {
      for (let k = 0; k < n; k++) yield chunkAt(k, Math.min(CHUNK, size - k * CHUNK));
    },
  };
}

// The demo cell's download: byte i = i % 251.
const PATTERN = Buffer.from(Array.from({ length: CHUNK + 251 }, (_, i) => i % 251));

/** A checker for a streamed demo-cell download: feed(chunk), then result(). */
export function patternChecker() {
  let offset = 0;
  let firstBad = -1;
  return {
    feed(chunk) {
      for (let p = 0; p < chunk.length && firstBad < 0; p += CHUNK) {
        const piece = chunk.subarray(p, Math.min(chunk.length, p + CHUNK));
        const start = (offset + p) % 251;
        if (!piece.equals(PATTERN.subarray(start, start + piece.length))) {
          for (let i = 0; i < piece.length; i++) {
            if (piece[i] !== (offset + p + i) % 251) {
              firstBad = offset + p + i;
              break;
            }
          }
        }
      }
      offset += chunk.length;
    },
    result: () => ({ bytes: offset, firstBad }),
  };
}

// ---------------------------------------------------------------------------
// Operations. Every request carries `x-soak-request` (its number),
// `x-soak-cell` (the cell the soak expects: the null worker,
// bench/soak-null-worker.mjs, forwards by it; the router forwards it as
// any other header) and `x-soak-questions` (what the router asks the
// service for it: the I/O-matched null worker's questions). Each resolves with an outcome:
//   { op, key, method, path, headers, status, cell (X-Demo-Cell or null),
//     started, ended, problems: [{kind, detail}], ... }
// `problems` are checks that failed regardless of the schedule (corrupt
// bodies, lost messages); the cell and 5xx judgement is soak.mjs's.

const cellOf = (res) => (res.headers?.["x-demo-cell"] !== undefined ? Number(res.headers["x-demo-cell"]) : null);

function outcome(op, key, method, path, headers, started, res) {
  return {
    op,
    key: key.id,
    kind: key.kind,
    want: key.cell,
    method,
    path,
    headers,
    started,
    ended: Date.now(),
    status: res?.status ?? null,
    cell: res ? cellOf(res) : null,
    error: res?.error ?? null,
    retried: res?.retried ?? null,
    problems: [],
  };
}

/** Checks the demo cell's JSON echo (cell, path, body hash). */
function checkEcho(o, res, { path, sha256, bytes }) {
  if (o.cell === null || o.status !== 200) return;
  let echo;
  try {
    echo = JSON.parse(res.text);
  } catch {
    o.problems.push({ kind: "corrupt", detail: `unparsable echo (${res.text.length} bytes): ${res.text.slice(0, 80)}` });
    return;
  }
  if (Number(echo.cell) !== o.cell) o.problems.push({ kind: "corrupt", detail: `echo says cell ${echo.cell}, header ${o.cell}` });
  if (echo.path !== path.split("?")[0]) o.problems.push({ kind: "corrupt", detail: `echo path ${echo.path}` });
  if (sha256 !== undefined && (echo.body_sha256 !== sha256 || echo.body_bytes !== bytes)) {
    o.problems.push({ kind: "corrupt", detail: `cell received ${echo.body_bytes} bytes sha256 ${echo.body_sha256}, sent ${bytes} bytes ${sha256}` });
  }
}

export async function plainRequest(base, key, random, reqId) {
  const { path, headers } = target(key, random);
  const post = random() < 0.25;
  const body = post ? Buffer.from(JSON.stringify({ soak: reqId, at: Date.now() })) : undefined;
  const h = { ...headers, "x-soak-request": String(reqId), "x-soak-cell": String(key.cell), ...questionsHeader(key), ...(post ? { "content-type": "application/json" } : {}) };
  const started = Date.now();
  const res = await send(base() + path, { method: post ? "POST" : "GET", headers: h, body, timeoutMs: 30_000 });
  const o = outcome("request", key, post ? "POST" : "GET", path, h, started, res);
  if (!res.error) checkEcho(o, res, { path, sha256: post ? createHash("sha256").update(body).digest("hex") : undefined, bytes: post ? body.length : undefined });
  return o;
}

export async function upload(base, key, size, seed, reqId) {
  const { path, headers } = transferTarget(key);
  const body = uploadBody(size, seed);
  const chunked = seed % 2 === 0;
  const h = { ...headers, "x-soak-request": String(reqId), "x-soak-cell": String(key.cell), ...questionsHeader(key, true), "content-type": "application/octet-stream", ...(chunked ? {} : { "content-length": String(size) }) };
  const started = Date.now();
  const res = await send(base() + path, { method: "PUT", headers: h, body, timeoutMs: 120_000 + size / 100_000 });
  const o = outcome("upload", key, "PUT", path, h, started, res);
  o.bytes = size;
  if (!res.error) checkEcho(o, res, { path, sha256: body.sha256, bytes: size });
  return o;
}

export async function download(base, key, size, reqId) {
  const { path, headers } = transferTarget(key);
  const h = { ...headers, "x-soak-request": String(reqId), "x-soak-cell": String(key.cell), ...questionsHeader(key, true), "x-demo-response-bytes": String(size) };
  const check = patternChecker();
  const started = Date.now();
  const res = await send(base() + path, { headers: h, onChunk: (c) => check.feed(c), timeoutMs: 120_000 + size / 100_000 });
  const o = outcome("download", key, "GET", path, h, started, res);
  o.bytes = size;
  if (o.status === 200 && o.cell !== null) {
    const { bytes, firstBad } = check.result();
    if (res.error || bytes !== size) o.problems.push({ kind: "corrupt", detail: `download of ${size} bytes: ${bytes} arrived${res.error ? ` (${res.error})` : ""}` });
    else if (firstBad >= 0) o.problems.push({ kind: "corrupt", detail: `download of ${size} bytes: byte ${firstBad} wrong` });
    if (Number(res.headers["content-length"]) !== size) o.problems.push({ kind: "corrupt", detail: `content-length ${res.headers["content-length"]}` });
  }
  return o;
}

/** A runner-style long-poll held `delayMs` by the cell. */
export async function longPoll(base, key, delayMs, reqId) {
  const path = "/api/v4/jobs/request";
  const body = Buffer.from(JSON.stringify({ token: "runner", last_update: String(reqId) }));
  const h = { ...key.headers, "x-soak-request": String(reqId), "x-soak-cell": String(key.cell), ...questionsHeader(key), "content-type": "application/json", "x-demo-delay-ms": String(delayMs) };
  const started = Date.now();
  const res = await send(base() + path, { method: "POST", headers: h, body, timeoutMs: delayMs + 30_000 });
  const o = outcome("longpoll", key, "POST", path, h, started, res);
  o.delayMs = delayMs;
  if (!res.error) checkEcho(o, res, { path, sha256: createHash("sha256").update(body).digest("hex"), bytes: body.length });
  const held = o.ended - started;
  if (o.cell !== null && o.status === 200 && held < delayMs - 5) o.problems.push({ kind: "longpoll-cut", detail: `answered after ${held} ms of ${delayMs}` });
  if (res.error) o.cutShort = `${res.error} after ${held} ms of ${delayMs}`;
  return o;
}

/**
 * A WebSocket echo session on /-/cable for `seconds`: bursts of 1-5
 * numbered messages (text and binary), every echo checked in order.
 */
export async function wsSession(base, key, durationMs, random, reqId) {
  const path = "/-/cable";
  const h = { ...key.headers, "x-soak-request": String(reqId), "x-soak-cell": String(key.cell), ...questionsHeader(key), origin: "http://soak.invalid" };
  const started = Date.now();
  let conn;
  try {
    conn = await connect(base() + path, { headers: h, protocols: ["actioncable-v1-json"], timeoutMs: 15_000 });
  } catch (e) {
    const o = outcome("websocket", key, "GET", path, h, started, { error: e.message });
    return o;
  }
  if (!conn.ok) {
    const o = outcome("websocket", key, "GET", path, h, started, { status: conn.status, headers: conn.headers, text: conn.text });
    return o;
  }
  const ws = conn.ws;
  const o = outcome("websocket", key, "GET", path, h, started, { status: 101, headers: conn.headers });
  o.sent = 0;
  o.echoed = 0;
  o.lost = 0;
  o.reordered = 0;
  try {
    const greeting = await ws.next(10_000);
    if (greeting.type !== "text") throw new Error(`greeting: ${JSON.stringify(greeting)}`);
    const g = JSON.parse(greeting.data);
    o.cell = Number(g.cell);
    const deadline = started + durationMs;
    let seq = 0;
    while (Date.now() < deadline) {
      const burst = 1 + Math.floor(random() * 5);
      const sent = [];
      for (let i = 0; i < burst; i++) {
        const payload = `soak ${reqId} #${seq++} ${randomBytes(8).toString("hex")}`;
        const binary = random() < 0.3;
        ws.send(binary ? Buffer.from(payload) : payload);
        sent.push(payload);
        o.sent++;
      }
      const got = [];
      for (let i = 0; i < burst; i++) {
        const m = await ws.next(10_000).catch(() => null);
        if (!m || m.type === "close") break;
        got.push(m.type === "binary" ? m.data.toString("utf8") : m.data);
      }
      o.echoed += got.length;
      const missing = sent.filter((s) => !got.includes(s));
      o.lost += missing.length;
      const inOrder = got.filter((g2) => sent.includes(g2));
      const expected = sent.filter((s) => got.includes(s));
      if (inOrder.some((g2, i) => g2 !== expected[i])) o.reordered++;
      if (missing.length) {
        o.problems.push({ kind: "ws-lost", detail: `${missing.length} of ${burst} echoes missing after ${o.sent} sent (${ws.error?.message ?? "no error"})` });
        break;
      }
      await new Promise((r) => setTimeout(r, 100 + random() * 400));
    }
    if (o.reordered) o.problems.push({ kind: "ws-reordered", detail: `${o.reordered} bursts out of order` });
    ws.close(1000, "soak done");
    const end = await Promise.race([ws.closed, new Promise((r) => setTimeout(() => r(null), 10_000).unref())]);
    if (!end) o.problems.push({ kind: "ws-lost", detail: "no close answer within 10 s" });
    else if (end.code !== 1000) o.problems.push({ kind: "ws-lost", detail: `closed with ${end.code} ${end.reason}` });
  } catch (e) {
    o.problems.push({ kind: "ws-lost", detail: `session failed: ${e.message}` });
  } finally {
    ws.destroy();
  }
  o.ended = Date.now();
  return o;
}
