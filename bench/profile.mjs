// A V8 CPU profile of one worker under load, through workerd's inspector
// (Miniflare `inspectorPort: 0`), for `BENCH_PROFILE=config,... bash
// bench/run.sh`. With the wasm name section kept, Rust functions show
// by name; wasm-bindgen's JS glue (build/index.js) shows which JS APIs the
// wasm calls and how often the boundary is crossed.
import WebSocket from "ws";

/** Connects to worker `target` ("core:user:" is the user worker) of a Miniflare started with inspectorPort. */
export async function connect(mf, target = "core:user:") {
  const base = (await mf.getInspectorURL()).toString().replace(/\/$/, "");
  const ws = new WebSocket(`${base}/${target}`);
  await new Promise((resolve, reject) => {
    ws.once("open", resolve);
    ws.once("error", reject);
  });
  let id = 0;
  const pending = new Map();
  ws.on("message", (data) => {
    const msg = JSON.parse(data.toString());
    if (msg.id && pending.has(msg.id)) {
      const { resolve, reject } = pending.get(msg.id);
      pending.delete(msg.id);
      if (msg.error) reject(new Error(JSON.stringify(msg.error)));
      else resolve(msg.result);
    }
  });
  const send = (method, params = {}) =>
    new Promise((resolve, reject) => {
      const n = ++id;
      pending.set(n, { resolve, reject });
      ws.send(JSON.stringify({ id: n, method, params }));
    });
  return { send, close: () => ws.close() };
}

/** Runs `load()` with the profiler on; returns the CDP profile. */
export async function profile(mf, load, { target, intervalUs = 100 } = {}) {
  const c = await connect(mf, target);
  await c.send("Profiler.enable");
  await c.send("Profiler.setSamplingInterval", { interval: intervalUs });
  await c.send("Profiler.start");
  const loadResult = await load();
  const { profile } = await c.send("Profiler.stop");
  c.close();
  return { profile, loadResult };
}

const IGNORE = new Set(["(root)", "(idle)", "(program)"]);

/** Longer gaps between samples are not attributed to the sampled function. */
const MAX_SAMPLE_GAP_US = 10_000;

function key(frame) {
  const name = frame.functionName || "(anonymous)";
  const url = frame.url || "";
  const where = url.startsWith("wasm://") ? "wasm" : url.split("/").pop() || "native";
  return `${name} [${where}]`;
}

/**
 * Self and inclusive time per function (µs per request), and totals by
 * kind: Rust in wasm, wasm-bindgen glue (index.js), other JS/builtins,
 * garbage collector.
 */
export function summarize(profile, requests) {
  const nodes = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map();
  for (const n of profile.nodes) for (const ch of n.children ?? []) parent.set(ch, n.id);
  const selfUs = new Map();
  // A sample stands for the time until the next one, except a gap far
  // longer than the sampling interval (the sampler stalled: one 127 ms gap
  // once made talc's allocate look 4x its cost); those are counted apart.
  let gapUs = 0;
  let gaps = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    let dt = profile.timeDeltas[i + 1] ?? 0; // the time until the next sample
    if (dt > MAX_SAMPLE_GAP_US) {
      gapUs += dt;
      gaps++;
      dt = 0;
    }
    selfUs.set(profile.samples[i], (selfUs.get(profile.samples[i]) ?? 0) + dt);
  }
  const bySelf = new Map();
  const byIncl = new Map();
  // entry_js: the entry and wasm-bindgen's glue, bundled into shim.mjs.
  const kinds = { wasm: 0, entry_js: 0, other_js: 0, gc: 0, program: 0, idle: 0 };
  for (const [id, us] of selfUs) {
    const n = nodes.get(id);
    const f = n.callFrame;
    const k = key(f);
    if (f.functionName === "(idle)") kinds.idle += us;
    else if (f.functionName === "(program)") kinds.program += us;
    else if (f.functionName === "(garbage collector)") kinds.gc += us;
    else if ((f.url || "").startsWith("wasm://")) kinds.wasm += us;
    else if (/(shim\.mjs|index\.js)$/.test(f.url || "")) kinds.entry_js += us;
    else kinds.other_js += us;
    if (!IGNORE.has(f.functionName)) bySelf.set(k, (bySelf.get(k) ?? 0) + us);
    // Inclusive: every distinct function on the stack gets the sample.
    const seen = new Set();
    for (let p = id; p !== undefined; p = parent.get(p)) {
      const pk = key(nodes.get(p).callFrame);
      if (seen.has(pk) || IGNORE.has(nodes.get(p).callFrame.functionName)) continue;
      seen.add(pk);
      byIncl.set(pk, (byIncl.get(pk) ?? 0) + us);
    }
  }
  const per = (us) => us / Math.max(1, requests);
  const top = (m, n) =>
    [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(([name, us]) => ({ name, us_per_req: per(us) }));
  const busy = kinds.wasm + kinds.entry_js + kinds.other_js + kinds.gc + kinds.program;
  return {
    requests,
    busy_us_per_req: per(busy),
    unattributed_gaps: { count: gaps, us_per_req: per(gapUs) },
    kinds_us_per_req: Object.fromEntries(Object.entries(kinds).map(([k, v]) => [k, per(v)])),
    top_self: top(bySelf, 25),
    top_inclusive: top(byIncl, 30),
  };
}
