// The soak's null worker (`bash bench/soak.sh --worker null`, docs/soak.md,
// "The null worker"): in the router's place, under the same traffic, the
// least a worker in front of the cells can do. It takes the cell the soak
// expects from the request's `x-soak-cell` header (every soak request
// carries it, for the router too), rewrites the URL's host to that cell's
// address (env.SOAK_CELLS: JSON {"<cell>": "host:port"}, the legacy cell 1
// when the header names none) and hands the request to fetch() as it came:
// method, headers, body stream, a WebSocket handshake, redirects not
// followed. No rules, no Topology Service, no cache, no wasm. A cell that
// cannot be reached gets a 502, as the router answers. One JSON log line per
// request, the size and shape of the router's (the soak runs the router
// with GITLAB_REQUEST_LOG=all), so that workerd's log pipe carries as much.
//
// With SOAK_NULL_IO=matched it also makes the router's I/O for the request
// (below), and its log line says what it did as the router's does (`cache`,
// `attempts`, `coalesced`, `fell_through`, `error`).
let cells = null;

export default {
  async fetch(request, env, ctx) {
    const started = Date.now();
    const io = env.SOAK_NULL_IO === "matched" ? await matchedIo(request, env, ctx) : null;
    cells ??= JSON.parse(env.SOAK_CELLS);
    const upstream = cells[request.headers.get("x-soak-cell")] ?? cells["1"];
    const url = new URL(request.url);
    url.protocol = "http:";
    url.host = upstream;
    let response;
    let error;
    try {
      response = await fetch(url, request);
    } catch (e) {
      error = `upstream ${upstream}: ${e.message}`;
      response = new Response(`${error}\n`, { status: 502 });
    }
    console.log(
      JSON.stringify({
        ruleset: "null",
        method: request.method,
        path: url.pathname,
        rule: "null",
        action: "proxy",
        classify_type: "NONE",
        ...(io ? { ...(io.cache ? { cache: io.cache } : {}), attempts: io.attempts, ...(io.coalesced ? { coalesced: true } : {}), ...(io.fell_through ? { fell_through: ["null"] } : {}) } : { cache: "none" }),
        upstream,
        ...(error || io?.error ? { error: [io?.error, error].filter(Boolean).join("; ") } : {}),
        status: response.status,
        duration_ms: Date.now() - started,
      }),
    );
    return response;
  },
};

// --- I/O-matched mode (env.SOAK_NULL_IO "matched"; bash bench/soak.sh
// --vs-null-io): the router's runtime operations without its routing. The
// soak names the request's classify questions in `x-soak-questions` (a JSON
// array of the exact bodies the router POSTs, in its rules' order: the next
// is asked only when the service does not know the one before, as
// `notFound: next-rule` does), and each is resolved as the router's
// resolver does it (crates/router-core/src/resolve): a bounded memory cache
// (second-chance eviction, GITLAB_MEMORY_CACHE_ENTRIES, entries kept for the
// 600 s stale window), then caches.default.match, then POST /v1/classify
// with GITLAB_TOPOLOGY_TIMEOUT_MS, 2 retries with back-off, the breaker
// (5 failures, open 5 s) and retry budget, concurrent misses of one key
// sharing one call (waiters poll every 5 ms), and caches.default.put of the
// answer for its TTL plus the stale window. The answer is not used: the
// request still goes to `x-soak-cell`.
const STALE_S = 600;
const RETRIES = 2;
let timeoutMs = 1000;
let capacity = 10_000;
const memory = new Map(); // key -> { expires, staleUntil, referenced }
const order = [];
const inflight = new Map();
const guard = { state: "closed", failures: 0, until: 0, windowStart: 0, first: 0, retries: 0 };
const worstCase = () => timeoutMs * (RETRIES + 1) + 500 + 500;

function memGet(key, now) {
  const e = memory.get(key);
  if (!e || e.staleUntil <= now) return null;
  e.referenced = true;
  return { fresh: e.expires > now };
}
function memPut(key, expires, notFound) {
  const entry = { expires, staleUntil: expires + STALE_S * 1000, referenced: false, notFound };
  if (memory.has(key)) return void memory.set(key, entry);
  while (memory.size >= capacity && order.length) {
    const victim = order.shift();
    const e = memory.get(victim);
    if (e?.referenced) {
      e.referenced = false;
      order.push(victim);
    } else memory.delete(victim);
  }
  order.push(key);
  memory.set(key, entry);
}
function roll(now) {
  if (now >= guard.windowStart + 10_000) Object.assign(guard, { windowStart: now, first: 0, retries: 0 });
}
function allowFirst(now) {
  if (guard.state !== "closed") {
    if (now < guard.until) return false;
    Object.assign(guard, { state: "probing", until: now + worstCase() });
  }
  roll(now);
  guard.first++;
  return true;
}
function allowRetry(now) {
  if (guard.state !== "closed") return false;
  roll(now);
  if (guard.retries >= 10 + Math.floor(guard.first / 10)) return false;
  guard.retries++;
  return true;
}
function record(ok, now) {
  if (ok) Object.assign(guard, { state: "closed", failures: 0 });
  else if (guard.state === "closed" && guard.failures + 1 < 5) guard.failures++;
  else Object.assign(guard, { state: "open", until: now + 5000 });
}
const ttlOf = (cc, notFound) => {
  const m = /max-age=(\d+)/.exec(cc ?? "");
  const ttl = Math.min(m ? Number(m[1]) : 60, notFound ? 30 : 3600);
  return ttl > 0 ? ttl : null;
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function cacheKey(body) {
  const kind = body.startsWith('{"claims"') ? Object.keys(JSON.parse(body).claims[0])[0].toLowerCase() : JSON.parse(body).type.toLowerCase();
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(body)));
  return `https://gitlab-http-router.internal/soak-null/v1/classify/${kind}-web-${[...digest].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
}

/** One question as the router resolves it: { level, notFound, attempts }. */
async function resolve(body, env, ctx) {
  const now = Date.now();
  const hit = memGet(body, now);
  if (hit?.fresh) return { level: "memory", notFound: memory.get(body).notFound, attempts: 0 };
  const waiting = inflight.get(body);
  if (waiting) {
    for (let waited = 0; waited <= worstCase() + 100; waited += 5) {
      await sleep(5);
      if (waiting.result) return { ...waiting.result, coalesced: true, attempts: waiting.result.attempts };
    }
  }
  const slot = {};
  inflight.set(body, slot);
  try {
    slot.result = await fetchAnswer(body, env, ctx);
    return slot.result;
  } finally {
    inflight.delete(body);
  }
}

async function fetchAnswer(body, env, ctx) {
  const key = await cacheKey(body);
  let stale = false;
  const found = await caches.default.match(key);
  if (found) {
    const a = await found.json();
    if (a.expires_at_ms > Date.now()) {
      const notFound = a.classification === "not_found";
      memPut(body, a.expires_at_ms, notFound);
      return { level: "cache-api", notFound, attempts: 0 };
    }
    stale = true;
  }
  const failed = (attempts, error) => ({ level: memGet(body, Date.now()) || stale ? "stale" : "fallback", notFound: false, attempts, error });
  if (!allowFirst(Date.now())) return failed(0, "circuit open");
  for (let attempt = 1; ; attempt++) {
    let error;
    try {
      const r = await fetch(`${env.GITLAB_TOPOLOGY_SERVICE_URL}/v1/classify`, { method: "POST", headers: { "content-type": "application/json" }, body, signal: AbortSignal.timeout(timeoutMs), redirect: "manual" });
      const text = await r.text();
      if (r.status === 200 || r.status === 404) {
        record(true, Date.now());
        const notFound = r.status === 404;
        const ttl = ttlOf(r.headers.get("cache-control"), notFound);
        const result = { level: "service", notFound, attempts: attempt };
        if (ttl) {
          const expires = Date.now() + ttl * 1000;
          memPut(body, expires, notFound);
          const answer = JSON.stringify({ question: body, classification: notFound ? "not_found" : JSON.parse(text), expires_at_ms: expires, tags: (r.headers.get("cache-tag") ?? "").split(",").filter(Boolean) });
          const headers = { "content-type": "application/json", "cache-control": `max-age=${ttl + STALE_S}`, "cache-tag": r.headers.get("cache-tag") ?? "" };
          ctx.waitUntil(caches.default.put(key, new Response(answer, { headers })).catch(() => {}));
        }
        return result;
      }
      if (r.status < 300 || (r.status >= 400 && r.status < 500)) {
        record(true, Date.now());
        return failed(attempt, `topology service answered ${r.status}`);
      }
      error = `topology service answered ${r.status}`;
    } catch (e) {
      error = `topology service: ${e.name === "TimeoutError" ? `timed out after ${timeoutMs} ms` : e.message}`;
    }
    const now = Date.now();
    record(false, now);
    if (attempt > RETRIES || !allowRetry(now)) return failed(attempt, error);
    const exp = Math.min(50 * 2 ** (attempt - 1), 500);
    await sleep(exp / 2 + (exp / 2) * Math.random());
  }
}

/** The request's questions, resolved in order until one is known: what its log line says. */
async function matchedIo(request, env, ctx) {
  capacity = Number(env.GITLAB_MEMORY_CACHE_ENTRIES ?? 10_000);
  timeoutMs = Number(env.GITLAB_TOPOLOGY_TIMEOUT_MS ?? 1000);
  const questions = JSON.parse(request.headers.get("x-soak-questions") ?? "[]");
  const log = { cache: undefined, attempts: 0, fell_through: 0 };
  for (const q of questions) {
    const res = await resolve(q, env, ctx);
    log.attempts += res.attempts;
    if (res.coalesced) log.coalesced = true;
    if (res.error) log.error = res.error;
    if (res.notFound) {
      log.fell_through++;
      continue;
    }
    log.cache = res.level;
    break;
  }
  return log;
}
