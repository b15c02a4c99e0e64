// The worker's own memory in the soak, read through workerd's inspector
// (the Chrome DevTools Protocol over a WebSocket; Miniflare's
// `inspectorPort: 0`): its isolate's JS heap (`Runtime.getHeapUsage`) and,
// for the router, its wasm memory (`memory.buffer.byteLength` of the
// instance src/entry.js keeps in `globalThis.wasmInstance`; a wasm memory
// never shrinks, so its size is the most the router's Rust ever held at
// once). workerd's RSS holds these and everything else the runtime keeps.
import { connect } from "../tests/e2e/longlived-ws.mjs";

const WASM_BYTES = "globalThis.wasmInstance?.exports?.memory?.buffer?.byteLength ?? null";

/**
 * A DevTools session on inspector target `target` of Miniflare `mf`
 * (`core:user:<name>` for a worker of ours; Miniflare's own have other
 * ids, its Cache API's is `cache:cache`): `sample()` resolves with
 * { heap_used, heap_total, wasm } in bytes (wasm null for a worker
 * without one), or null when the inspector does not answer.
 */
export async function inspectWorker(mf, target = "core:user:router") {
  const base = (await mf.getInspectorURL()).toString().replace(/^ws:/, "http:").replace(/\/$/, "");
  const conn = await connect(`${base}/${target}`, { timeoutMs: 5000 });
  if (!conn.ok) throw new Error(`inspector of ${target}: ${conn.status} ${conn.text}`);
  const ws = conn.ws;
  let id = 0;
  let queue = Promise.resolve();
  let context = null;
  // One call at a time: the answer is the next message with its id. Only
  // Runtime.enable brings an event (the worker's execution context, which
  // Runtime.evaluate needs); the domain is disabled again at once, so that
  // the worker's console lines do not flow to this session.
  const call = (method, params = {}) => {
    const run = async () => {
      const mine = ++id;
      ws.send(JSON.stringify({ id: mine, method, params }));
      for (;;) {
        const m = await ws.next(5000);
        if (m.type === "close") throw new Error("inspector closed");
        const msg = JSON.parse(typeof m.data === "string" ? m.data : m.data.toString("utf8"));
        if (msg.method === "Runtime.executionContextCreated") context ??= msg.params.context.uniqueId;
        if (msg.id === mine) {
          if (msg.error) throw new Error(`${method}: ${msg.error.message}`);
          return msg.result;
        }
      }
    };
    const p = queue.then(run, run);
    queue = p.catch(() => {});
    return p;
  };
  try {
    await call("Runtime.enable");
    await call("Runtime.disable");
  } catch (e) {
    ws.destroy();
    throw e;
  }
  return {
    async sample() {
      try {
        const heap = await call("Runtime.getHeapUsage");
        const wasm = context ? await call("Runtime.evaluate", { uniqueContextId: context, expression: WASM_BYTES, returnByValue: true }) : null;
        return { heap_used: heap.usedSize, heap_total: heap.totalSize, wasm: wasm?.result?.value ?? null };
      } catch {
        return null;
      }
    },
    close() {
      ws.destroy();
    },
  };
}
