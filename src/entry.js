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

// A panic is seen as it happens: the worker crate's panic hook sets
// `criticalError` on this object (before the trap), whether the panic is in
// `routeSync`'s call or in a `routeAsync` future polled from a microtask,
// which would otherwise leave its request waiting forever.
const initState = globalThis.__worker_init_state ?? {};
let panicked = false;
Object.defineProperty(initState, "criticalError", {
  get: () => panicked,
  set: (value) => {
    panicked = value === true;
    if (panicked) restartWasm();
  },
});
addEventListener("error", (event) => {
  if (event.error instanceof WebAssembly.RuntimeError) restartWasm();
});

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
  if (restartPending) return;
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
 * `routerSetup`'s answer, once per instance, made ready for `scanHeaders`
 * and `forward`: the header names the rules need (as a name → position
 * map; null when they need every header), the client headers always
 * dropped (a Set), the headers a plan sets, the prefixes of client headers
 * always dropped.
 */
let setup;

function loadSetup(env) {
  const [names, baseDrop, setNames, dropPrefixes, seed] = glue.routerSetup(env);
  return {
    wanted: names === null ? null : new Map(names.map((name, i) => [name, i])),
    baseDrop: new Set(baseDrop),
    setNames,
    dropPrefixes,
    signingKey: seed === null ? null : importSigningKey(seed),
  };
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
  const signature = new Uint8Array(
    await crypto.subtle.sign("Ed25519", await setup.signingKey, utf8.encode(input)),
  );
  let binary = "";
  for (const byte of signature) binary += String.fromCharCode(byte);
  return `${input}.${btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "")}`;
}

/**
 * One pass over the client's headers (forEach: no iterator objects, one
 * call into the runtime): the values the rules need, joined by NUL in
 * `wanted`'s order with an absent header as "\x01" (so they cross into wasm
 * as one string), and every header name, to find what to drop.
 */
function scanHeaders(headers, wanted) {
  const values = wanted === null ? null : new Array(wanted.size).fill("\u0001");
  const names = [];
  headers.forEach((value, name) => {
    names.push(name);
    if (values !== null) {
      const i = wanted.get(name);
      if (i !== undefined) values[i] = value;
    }
  });
  return { joined: values === null ? undefined : values.join("\u0000"), names };
}

function textResponse(status, body) {
  return new Response(body, {
    status,
    headers: { "content-type": "text/plain; charset=utf-8" },
  });
}

function errorMessage(error) {
  return error instanceof Error ? error.message : String(error);
}

/**
 * A request the router could not forward after all: its log line (the
 * plan's, with this status and error) and a plain-text answer.
 */
function failed(status, answer, why, logHead, started) {
  const ms = Date.now() - started;
  console.log(`${logHead}"status":${status},"duration_ms":${ms},"error":${JSON.stringify(why)}}`);
  return textResponse(status, `gitlab-http-router: ${answer}\n`);
}

/** Forwards `request` as the plan (see `plan` in src/lib.rs) says. */
async function forward(request, method, clientHeaderNames, plan, started) {
  const [url, drop, host, proto, action, ruleType, signingInput, logHead, logTail, logAlways, forwardedFor] =
    plan.split("\u0000");
  const { baseDrop, setNames, dropPrefixes } = setup;
  let signature = "";
  if (signingInput !== "") {
    try {
      signature = await signToken(signingInput);
    } catch (error) {
      const why = `request signing failed: ${errorMessage(error)}`;
      return failed(503, "request signing unavailable", why, logHead, started);
    }
  }
  const dropped = drop === "" ? baseDrop : new Set(drop.split(","));
  const headers = new Headers(request.headers);
  for (const name of clientHeaderNames) {
    // Names compare with "_" read as "-" (forward::drop_key): Rack maps
    // X_Forwarded_Host and X-Forwarded-Host to the same variable.
    const key = name.includes("_") ? name.replaceAll("_", "-") : name;
    if (dropped.has(key) || dropPrefixes.some((prefix) => key.startsWith(prefix))) headers.delete(name);
  }
  const values = [host, proto, action, ruleType, signature, forwardedFor];
  for (let i = 0; i < setNames.length; i++) {
    if (values[i] !== "") headers.set(setNames[i], values[i]);
  }
  let response;
  try {
    response = await fetch(url, {
      method,
      headers,
      body: request.body,
      redirect: "manual",
    });
  } catch (error) {
    const why = `upstream fetch failed: ${errorMessage(error)}`;
    return failed(502, "upstream unreachable", why, logHead, started);
  }
  const status = response.status;
  if (logAlways === "1" || status >= 500) {
    console.log(`${logHead}"status":${status},"duration_ms":${Date.now() - started}${logTail}`);
  }
  return response;
}

export default {
  async fetch(request, env, ctx) {
    const started = Date.now();
    try {
      if (setup === undefined) {
        setup = loadSetup(env);
        restartPending = false;
      }
      const url = request.url;
      const method = request.method;
      const { joined, names } = scanHeaders(request.headers, setup.wanted);
      let plan = joined === undefined ? undefined : glue.routeSync(env, url, method, joined);
      if (plan === undefined) {
        plan = await unlessPanic(glue.routeAsync(env, ctx, request, url, method, joined));
        if (typeof plan !== "string") return plan;
      }
      return await forward(request, method, names, plan, started);
    } catch (error) {
      if (error instanceof WebAssembly.RuntimeError) restartWasm();
      console.error(
        JSON.stringify({ level: "error", scope: "router", message: errorMessage(error) }),
      );
      return textResponse(502, "gitlab-http-router: internal error\n");
    }
  },
};
