// The Worker's fetch handler: worker-build's CUSTOM_SHIM
// (scripts/build-worker.sh), bundled with wasm-bindgen's glue into
// build/worker/shim.mjs. `$SNIPPET_…` are filled in by worker-build.
//
// Routing is Rust's (src/lib.rs over crates/router-core); this module only
// carries a request across: it reads the URL, the method and the headers
// the ruleset needs, asks `routeSync` (a plain call: fixed cells, the
// legacy cell, classifications in the isolate's memory cache) or, when that
// cannot answer, `routeAsync` (the Topology Service, rejections, errors),
// and applies the forwarding plan they return. The body stream is handed
// to `fetch` as it is and never enters wasm.
import * as glue from "./index_bg.js";
import wasmModule from "./index.wasm";
import { env as isolateEnv } from "cloudflare:workers";
$SNIPPET_JS_IMPORTS

const imports = {
  "./index_bg.js": glue,
  $SNIPPET_WASM_IMPORTS
};

// After a Rust panic (a trap: panic = "abort") wasm-bindgen's glue starts a
// fresh instance on its next call (`__wbg_reset_state`, scheduled by the
// worker crate's abort handler or by `restartWasm` below). In this
// bundler-target build the glue finds the module and its imports as
// globals; these three names are its.
globalThis.wasmModule = wasmModule;
globalThis.__wbg_get_imports = () => imports;
globalThis.wasmInstance = new WebAssembly.Instance(wasmModule, imports);
glue.__wbg_set_wasm(globalThis.wasmInstance.exports);
globalThis.wasmInstance.exports.__wbindgen_start?.();

const scheduleReset = Object.entries(glue).find(([name]) =>
  name.startsWith("__wbg___wbindgen_reinit_"),
)?.[1];

/**
 * The glue internals panic recovery relies on (wasm-bindgen's and the
 * worker crate's), checked once at start-up: an upgrade that renames one
 * must not break recovery silently. Returns what is missing.
 */
function missingGlue(g = glue, state = globalThis.__worker_init_state, reset = scheduleReset) {
  const missing = [];
  if (typeof reset !== "function") missing.push("__wbg___wbindgen_reinit_* (glue export)");
  if (typeof g.__worker_init_state !== "function") missing.push("__worker_init_state (glue export)");
  if (typeof g.__wbg_set_wasm !== "function") missing.push("__wbg_set_wasm (glue export)");
  if (state === null || typeof state !== "object") missing.push("globalThis.__worker_init_state (worker crate)");
  else if (!("criticalError" in state)) missing.push("__worker_init_state.criticalError (worker crate)");
  return missing;
}

const missing = missingGlue();
const recovery = missing.length === 0;
if (!recovery) {
  console.error(
    JSON.stringify({
      level: "error",
      scope: "wasm-glue",
      message: `panic recovery is off: the glue lacks ${missing.join(", ")}; requests are still served`,
    }),
  );
}

// A panic is seen as it happens: the worker crate's panic hook sets
// `criticalError` on this object (before the trap), whether the panic is in
// `routeSync`'s call or in a `routeAsync` future polled from a microtask,
// which would otherwise leave its request waiting forever.
let panicked = false;
if (recovery) {
  Object.defineProperty(globalThis.__worker_init_state, "criticalError", {
    get: () => panicked,
    set: (value) => {
      panicked = value === true;
      if (panicked) restartWasm();
    },
  });
  addEventListener("error", (event) => {
    if (event.error instanceof WebAssembly.RuntimeError) restartWasm();
  });
}

/** Counts the instances started after panics. */
let generation = 0;

/**
 * `promise` (a `routeAsync`), or a rejection once the instance it runs on
 * has panicked: its futures will never finish. Each request watches on
 * its own timer; workerd does not let one request settle a promise
 * another is waiting on.
 */
function unlessPanic(promise) {
  const mine = generation;
  return new Promise((resolve, reject) => {
    const watch = setInterval(() => {
      if (generation !== mine) {
        clearInterval(watch);
        reject(new Error("the router's wasm instance panicked"));
      }
    }, 20);
    promise.then(
      (value) => {
        clearInterval(watch);
        resolve(value);
      },
      (error) => {
        clearInterval(watch);
        reject(error);
      },
    );
  });
}

/** Set from a panic until the fresh instance has been started. */
let restartPending = false;

/**
 * After a panic: fails every request still waiting on the old instance,
 * and has the glue start a fresh one (state and config read anew) on its
 * next call.
 */
function restartWasm() {
  panicked = false;
  if (!recovery || restartPending) return;
  restartPending = true;
  console.error(
    JSON.stringify({ level: "error", scope: "wasm", message: "Rust panic: restarting the wasm instance" }),
  );
  generation++;
  scheduleReset?.();
  setup = undefined;
  // Start the fresh instance now, before a callback of the old one (a
  // pending fetch's) could reach the glue: any export call does it, and
  // after it those callbacks are refused as "from a previous instance".
  queueMicrotask(() => {
    try {
      glue.__worker_init_state();
    } catch {
      // The next request's call tries again.
    }
  });
}

/**
 * Every position, code and name the entry reads plans and writes its input
 * with (router_core::wire::layout): Rust's, asked once. This module holds
 * none of its own.
 */
const W = JSON.parse(glue.wireLayout());

/**
 * `routerSetup`'s answer, once per instance (made at the top level, and
 * by the first request after a panic), made ready for `scanHeaders` and
 * `apply`: whether the rules need every header, the signing key (its
 * seed, imported when a request first signs), the
 * answer to a failed upstream fetch (the plan's answer form), the
 * circuits' answered slots.
 */
let setup;

function loadSetup(env) {
  const [names, seed, upstreamAnswer, answeredAt, answeredCount] = glue.routerSetup(env);
  return {
    // How many header values routeSync's input carries (null: the rules
    // need every header, asked one by one).
    wantedCount: names === null ? null : names.length,
    // headerKind's memory: header name → what Rust said is done with it.
    kinds: new Map(),
    // The key is imported by the first signed request, not here: setup is
    // made at the top level, outside any request.
    seed,
    signingKey: null,
    upstreamAnswer,
    // routeSync's input buffer in this instance's memory (`inputBuffer`);
    // `setup` is made anew after a panic, so is this.
    input: { memory: globalThis.wasmInstance.exports.memory, address: 0, capacity: 0, view: null },
    // When each listed address last answered, one f64 per circuit in wasm
    // memory (Rust's CellHealth reads them): written here for every
    // response from a listed cell, with no call into wasm.
    answered: { memory: globalThis.wasmInstance.exports.memory, address: answeredAt, count: answeredCount, view: null },
  };
}

/**
 * The Analytics Engine dataset the plans' data points go to, from the
 * environment (the same for every request of an isolate; Rust plans no
 * point without it).
 */
let dataset;

/** Notes in `answered` (setup's) that circuit `circuit` (the plan's index) answered now. */
function noteAnswered(answered, circuit) {
  // A view of a memory that has grown since is detached (length 0).
  if (answered.view === null || answered.view.length === 0) {
    answered.view = new Float64Array(answered.memory.buffer, answered.address, answered.count);
  }
  answered.view[circuit] = Date.now();
}

/** The input buffer as bytes (made anew when wasm memory has grown). */
function inputView(input) {
  // A view of a memory that has grown since is detached (length 0).
  if (input.view === null || input.view.byteLength === 0) {
    input.view = new Uint8Array(input.memory.buffer, input.address, input.capacity);
  }
  return input.view;
}

/**
 * Writes `text` as UTF-8 into routeSync's input buffer (native code, no
 * allocation in wasm) and returns its length in bytes.
 */
function writeInput(text) {
  const input = setup.input;
  // UTF-8 takes at most 3 bytes per UTF-16 unit.
  const room = text.length * 3;
  if (room > input.capacity) {
    input.capacity = Math.max(4096, 2 ** Math.ceil(Math.log2(room)));
    input.address = glue.inputBuffer(input.capacity);
    input.view = null;
  }
  return utf8.encodeInto(text, inputView(input)).written;
}


const utf8Decoder = new TextDecoder();

/**
 * routeSync over `text` (the URL, the method and the header values):
 * the plan, which Rust wrote over the input buffer, or undefined when
 * routeAsync must route the request.
 */
function routeSync(text) {
  const length = glue.routeSync(writeInput(text));
  if (length >= 0) return utf8Decoder.decode(inputView(setup.input).subarray(0, length));
  // Any other negative answer (NOT_ROUTED) means routeAsync.
  return length === W.PLAN_TOO_LONG ? glue.takePlan() : undefined;
}

/**
 * The Ed25519 key as a WebCrypto key: signing in the platform's native
 * code costs a fraction of signing in wasm. PKCS #8 (RFC 8410) holds just
 * the 32-byte seed after this fixed prefix.
 */
function importSigningKey(seed) {
  const pkcs8 = new Uint8Array(48);
  pkcs8.set([0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20]);
  pkcs8.set(seed, 16);
  const key = crypto.subtle.importKey("pkcs8", pkcs8, { name: "Ed25519" }, false, ["sign"]);
  key.catch(() => {}); // reported by the request that needs it
  return key;
}

const utf8 = new TextEncoder();

/** `input` + "." + base64url(Ed25519 signature of it): the signature JWT. */
async function signToken(input) {
  if (setup.signingKey === null) {
    if (setup.seed === null) throw new Error("no signing key is configured");
    setup.signingKey = importSigningKey(setup.seed);
  }
  const signature = new Uint8Array(
    await crypto.subtle.sign("Ed25519", await setup.signingKey, utf8.encode(input)),
  );
  let binary = "";
  for (const byte of signature) binary += String.fromCharCode(byte);
  return `${input}.${btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "")}`;
}


/**
 * What the entry does with a client header named `name`, as Rust decided
 * it (`headerKind`) and remembered here per name (one Map lookup per
 * header): bit 0 set when it is always dropped, and above it the name's
 * position among the values routeSync reads plus one (0: not read).
 */
function headerKind(name) {
  const { kinds } = setup;
  let kind = kinds.get(name);
  if (kind === undefined) {
    kind = glue.headerKind(name);
    // Names are few in practice; a client sending endless new ones only
    // makes this start over.
    if (kinds.size >= W.KINDS_MAX) kinds.clear();
    kinds.set(name, kind);
  }
  return kind;
}

/**
 * One pass over the client's headers (forEach: no iterator objects, one
 * call into the runtime): routeSync's input, the URL, the method and the
 * values the rules need in Rust's order, an absent header as
 * `HEADER_ABSENT`, joined by `SEPARATOR` in one join (so they cross into
 * wasm as one flat string; undefined when the rules need every header),
 * and the names of the headers always dropped.
 */
function scanHeaders(headers, wantedCount, url, method) {
  const parts = wantedCount === null ? null : new Array(wantedCount + 2).fill(W.HEADER_ABSENT);
  const drops = [];
  headers.forEach((value, name) => {
    const kind = headerKind(name);
    if ((kind & 1) === 1) drops.push(name);
    if (kind > 1 && parts !== null) parts[(kind >> 1) + 1] = value;
  });
  if (parts === null) return { input: undefined, drops };
  parts[0] = url;
  parts[1] = method;
  return { input: parts.join(W.SEPARATOR), drops };
}

function errorMessage(error) {
  return error instanceof Error ? error.message : String(error);
}

// The plan (router_core::wire::Plan::encode): fields joined by W.FIELD,
// items inside a field by W.ITEM, each field at its W position.
const FIELD = W.FIELD;
const ITEM = W.ITEM;

/** An answer field (`status ITEM name ITEM value … ITEM body`) as a Response. */
function response(field) {
  const items = field.split(ITEM);
  const headers = new Headers();
  for (let i = 1; i + 1 < items.length - 1; i += 2) headers.set(items[i], items[i + 1]);
  return new Response(items[items.length - 1], { status: Number(items[0]), headers });
}

/** Writes a request's log line as its plan says, once the status is known. */
function writeLog(head, tail, minStatus, status, duration) {
  if (head !== "" && status >= Number(minStatus)) {
    console.log(`${head}"status":${status},"duration_ms":${duration}${tail}`);
  }
}

/** A status's class as a point's blob (`2xx`), by the status's first digit. */
const STATUS_CLASSES = Object.fromEntries(Array.from("0123456789", (digit) => [digit, `${digit}xx`]));

/**
 * Writes a request's data point (docs/metrics.md): the plan's fields `f`
 * from POINT on are its items (router_core::metrics), the blobs in column
 * order and then the doubles; the entry adds what only it knows: the
 * status class (in the blob Rust left empty) and the duration (the log
 * line's). `errorKind` replaces the plan's when a step here failed.
 * Nothing without a dataset or a point; never throws into the request.
 */
function writePoint(f, status, duration, errorKind) {
  // A point always names its action: an empty one is no point.
  if (dataset === undefined || !f[POINT + POINT_ACTION]) return;
  try {
    const blobs = f.slice(POINT, POINT + POINT_DOUBLES_FROM);
    blobs[POINT_STATUS_CLASS] = STATUS_CLASSES[String(status).charAt(0)];
    if (errorKind !== undefined) blobs[POINT_ERROR_KIND] = errorKind;
    const doubles = [duration];
    for (let i = POINT + POINT_DOUBLES_FROM; i < POINT + POINT_FIELDS; i++) doubles.push(Number(f[i]));
    dataset.writeDataPoint({ indexes: [blobs[POINT_CELL]], blobs, doubles });
  } catch {
    // A metrics failure is no reason to fail the request.
  }
}

/**
 * A failure field (`log error opening ITEM answer`) of forward plan `f`:
 * its answer, logged with `why`, the plan's data point with `errorKind`.
 */
function fail(field, why, head, started, f, errorKind) {
  const cut = field.indexOf(ITEM);
  const answer = response(field.slice(cut + 1));
  const escaped = JSON.stringify(why).slice(1, -1);
  const duration = Date.now() - started;
  console.log(`${head}"status":${answer.status},"duration_ms":${duration}${field.slice(0, cut)}${escaped}"}`);
  writePoint(f, answer.status, duration, errorKind);
  return answer;
}

// A plan's fields by position (W): every plan's first (KIND to the data
// point's), then a forward plan's, whose headers to set follow from
// SET_FROM as name, value, name, value, …, so one split reads the whole
// plan. Taken into constants once: the hot path reads them by index.
const { KIND, LOG_HEAD, LOG_TAIL, LOG_MIN_STATUS, ANSWER } = W;
const { URL: TARGET_URL, DROP, SIGN_INPUT, SIGN_HEADER, SIGN_FAILURE, UPSTREAM_FAILURE_LOG } = W;
const { DEADLINE, HELD_STATUS, REPORT, CIRCUIT, HEADERS_TIMEOUT, BODY, RESPONSE_SET, SET_FROM } = W;
const { REPORT_TRIAL, REPORT_GATEWAY, GATEWAY_FROM, GATEWAY_TO } = W;
const { POINT, POINT_FIELDS, POINT_ACTION, POINT_CELL, POINT_STATUS_CLASS, POINT_ERROR_KIND, POINT_DOUBLES_FROM } = W;

/** An answer plan's fields as its Response, logged and counted. */
function answered(f, started) {
  const res = response(f[ANSWER]);
  const duration = Date.now() - started;
  writeLog(f[LOG_HEAD], f[LOG_TAIL], f[LOG_MIN_STATUS], res.status, duration);
  writePoint(f, res.status, duration);
  return res;
}

/**
 * Whether a report's flags (the plan's REPORT) ask to hear of `status`:
 * every one for a trial, the gateway statuses for a rule that counts them.
 */
function reportsStatus(flags, status) {
  if ((flags & REPORT_TRIAL) !== 0) return true;
  return (flags & REPORT_GATEWAY) !== 0 && status >= GATEWAY_FROM && status <= GATEWAY_TO;
}

/**
 * The headers a forward plan `f` sends: the client's, less those
 * `scanHeaders` found always dropped (`drops`) or the plan drops, with the
 * plan's set. Fields are read by index and arrays by counted loops: no
 * iterator objects on the usual path (they cost the most while V8 still
 * runs this unoptimised).
 */
function forwardedHeaders(client, drops, f) {
  const headers = new Headers(client);
  const drop = f[DROP];
  if (drop === "") {
    for (let i = 0; i < drops.length; i++) headers.delete(drops[i]);
  } else {
    // The client's Connection named headers besides the usual set: Rust
    // says which of the client's go (rare; a call per header).
    for (const name of client.keys()) {
      if (glue.droppedBy(name, drop)) headers.delete(name);
    }
  }
  for (let i = SET_FROM; i + 1 < f.length; i += 2) headers.set(f[i], f[i + 1]);
  return headers;
}

/**
 * Does what the plan (from routeSync or routeAsync) says with `request`
 * (`client`: its headers); `drops`: the client headers `scanHeaders` found
 * always dropped.
 */
async function apply(request, client, method, drops, plan, started) {
  const f = plan.split(FIELD);
  if (f[KIND] === W.KIND_ANSWER) return answered(f, started);
  // Taken now: a panic elsewhere while this request awaits resets `setup`.
  const { upstreamAnswer, answered: answeredSlots } = setup;
  const headers = forwardedHeaders(client, drops, f);
  const logHead = f[LOG_HEAD];
  if (f[SIGN_INPUT] !== "") {
    try {
      headers.set(f[SIGN_HEADER], await signToken(f[SIGN_INPUT]));
    } catch (error) {
      if (f[SIGN_FAILURE] !== "") return fail(f[SIGN_FAILURE], errorMessage(error), logHead, started, f, W.SIGNING_FAILED_KIND);
    }
  }
  // A listed cell's address (its circuit): the entry writes when it
  // answered, and reports to Rust only what the plan asks to hear of.
  const circuit = f[CIRCUIT];
  // Empty: nothing reported; else the report's flags.
  const report = f[REPORT];
  const flags = Number(report);
  const sent = Date.now();
  let timer;
  let late = false;
  const headersTimeout = Number(f[HEADERS_TIMEOUT]);
  if (headersTimeout > 0) {
    timer = setTimeout(() => {
      late = true;
      reportOutcome(circuit, flags, W.NO_HEADERS, sent, false);
    }, headersTimeout);
  }
  let upstream;
  try {
    upstream = await fetch(f[TARGET_URL], { method, headers, body: f[BODY] === "1" ? request.body : undefined, redirect: "manual" });
  } catch (error) {
    clearTimeout(timer);
    // Once per request: a fetch that throws after the headers timeout
    // fired was reported then (NO_HEADERS).
    if (report !== "" && !late) reportOutcome(circuit, flags, W.FETCH_FAILED, sent, false);
    return fail(`${f[UPSTREAM_FAILURE_LOG]}${ITEM}${upstreamAnswer}`, errorMessage(error), logHead, started, f, W.UPSTREAM_FAILED_KIND);
  }
  clearTimeout(timer);
  const status = upstream.status;
  if (report !== "") {
    if (late || reportsStatus(flags, status)) {
      reportOutcome(circuit, flags, status, sent, upstream.headers.has(W.RETRY_AFTER));
    } else {
      noteAnswered(answeredSlots, Number(circuit));
    }
  }
  const deadline = Number(f[DEADLINE]);
  if (deadline > 0 && status === HELD_STATUS) {
    // GITLAB_NOT_FOUND_DELAY_MS: the deadline Rust drew, counted from the
    // request's start, so the answer's time does not tell how fast the
    // cell was. A timer; nothing read or buffered, the upstream response
    // returned as it came.
    const left = started + deadline - Date.now();
    if (left > 0) await new Promise((resolve) => setTimeout(resolve, left));
  }
  const duration = Date.now() - started;
  writeLog(logHead, f[LOG_TAIL], f[LOG_MIN_STATUS], status, duration);
  writePoint(f, status, duration);
  const responseSet = f[RESPONSE_SET];
  return responseSet === "" ? upstream : withHeaders(upstream, responseSet);
}

/**
 * A copy of the upstream's response (its WebSocket kept) with the plan's
 * response headers (`name ITEM value …`) set over the cell's.
 */
function withHeaders(upstream, pairs) {
  const { status, webSocket } = upstream;
  const copy = webSocket ? new Response(null, { status, webSocket, headers: upstream.headers }) : new Response(upstream.body, upstream);
  const items = pairs.split(ITEM);
  for (let i = 0; i + 1 < items.length; i += 2) copy.headers.set(items[i], items[i + 1]);
  return copy;
}

function reportOutcome(circuit, flags, status, sent, retryAfter) {
  try {
    glue.cellOutcome(Number(circuit), flags, status, sent, retryAfter);
  } catch (error) {
    if (error instanceof WebAssembly.RuntimeError) restartWasm();
  }
}

/** The router's answer when the entry itself failed (`internalError`). */
function internalError(error) {
  const started = Date.now();
  let plan;
  try {
    // Right after a panic the fresh instance must be running before a
    // string is passed: the glue copies an argument into the instance it
    // has and only then starts the fresh one, which would get a pointer
    // into the old one's memory (and free it in its own heap).
    if (restartPending) glue.__worker_init_state();
    plan = glue.internalError(errorMessage(error));
  } catch {
    plan = INTERNAL_ERROR;
  }
  return answered(plan.split(FIELD), started);
}

/** Asked while the instance is known to work, for when it no longer does. */
const INTERNAL_ERROR = glue.internalError("the router could not be called");

// The isolate's state (settings, ruleset, cell list) is made while the
// isolate starts (`routerStart`, src/start.rs): on Cloudflare during the
// TLS handshake, instead of on the first request's time. Nothing here is
// sent or cached; the settings' problems are logged by the first
// invocation (outside one, no tail worker or Workers Logs sees a line).
// Should any of it fail, the first request makes the state as before.
try {
  glue.routerStart(isolateEnv);
  // What the entry keeps of the state, too: a first request that had to
  // ask for it would have V8 compile the code that answers.
  setup = loadSetup(isolateEnv);
} catch (error) {
  if (error instanceof WebAssembly.RuntimeError) restartWasm();
}

/** Whether the lines `routerStart` held are still to be written. */
let linesHeld = true;

export default {
  async fetch(request, env, ctx) {
    const started = Date.now();
    dataset = env[W.POINT_BINDING];
    try {
      if (linesHeld) {
        linesHeld = false;
        glue.routerRelease();
      }
      if (setup === undefined) {
        setup = loadSetup(env);
        restartPending = false;
      }
      const url = request.url;
      const method = request.method;
      // Each read of a Request property is a call into workerd: once each.
      const client = request.headers;
      const { input, drops } = scanHeaders(client, setup.wantedCount, url, method);
      let plan = input === undefined ? undefined : routeSync(input);
      if (plan === undefined) {
        // The header values alone, as routeAsync takes them.
        const joined = input === undefined ? undefined : input.slice(url.length + method.length + 2);
        plan = await unlessPanic(glue.routeAsync(env, ctx, request, url, method, joined));
      }
      return await apply(request, client, method, drops, plan, started);
    } catch (error) {
      if (error instanceof WebAssembly.RuntimeError) restartWasm();
      return internalError(error);
    }
  },

  // The Cron Trigger ([triggers] in wrangler.toml): Rust probes every
  // listed cell and records what it found for every isolate.
  async scheduled(controller, env, ctx) {
    await glue.routerScheduled(env);
  },
};
