// The `rust-floor` worker's fetch handler, entered as the router's
// src/entry.js is: one pass over the client's headers, the request written
// as UTF-8 into wasm memory, one synchronous call (`forward`), the plan it
// writes back applied: the client's headers less the dropped ones, the set
// ones set, the body streamed to the upstream, the log line written once
// the status is known. Bindings: UPSTREAM ("host:port", plain http), LOG
// ("1" or unset). bench/run.sh copies this beside the wasm it builds.
import wasmModule from "./rust_floor.wasm";

const wasm = new WebAssembly.Instance(wasmModule, {}).exports;
const FIELD = "\u001f";
const ITEM = "\u001e";
const utf8 = new TextEncoder();
const utf8Decoder = new TextDecoder();
let buffer = { address: 0, capacity: 0, view: null };
let ready = false;

/** The buffer as bytes (made anew when wasm memory has grown). */
function view() {
  if (buffer.view === null || buffer.view.byteLength === 0) {
    buffer.view = new Uint8Array(wasm.memory.buffer, buffer.address, buffer.capacity);
  }
  return buffer.view;
}

/** Writes `text` into the buffer (made at least `room` bytes); returns its length in bytes. */
function write(text, room) {
  if (room > buffer.capacity) {
    const capacity = Math.max(4096, 2 ** Math.ceil(Math.log2(room)));
    buffer = { address: wasm.input_buffer(capacity), capacity, view: null };
  }
  return utf8.encodeInto(text, view()).written;
}

export default {
  async fetch(request, env) {
    const started = Date.now();
    if (!ready) {
      const settings = `${env.UPSTREAM}\n${env.LOG ?? ""}`;
      wasm.setup(write(settings, settings.length * 3));
      ready = true;
    }
    const names = [];
    request.headers.forEach((_, name) => names.push(name));
    const text = `${request.url}\n${request.method}\n${names.join("\n")}`;
    const length = wasm.forward(write(text, 4 * text.length + 4 * env.UPSTREAM.length + 512));
    if (length < 0) return new Response("bad request\n", { status: 502 });
    const f = utf8Decoder.decode(view().subarray(0, length)).split(FIELD);
    const headers = new Headers(request.headers);
    if (f[2] !== "") for (const name of f[2].split(ITEM)) headers.delete(name);
    for (let i = 3; i + 1 < f.length; i += 2) headers.set(f[i], f[i + 1]);
    const upstream = await fetch(f[0], { method: request.method, headers, body: request.body, redirect: "manual" });
    if (f[1] !== "") console.log(`${f[1]}"status":${upstream.status},"duration_ms":${Date.now() - started}}`);
    return upstream;
  },
};
