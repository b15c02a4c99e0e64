// What one request leaves in workerd's RSS, by the I/O its worker does
// (docs/soak.md, "Memory"): a worker that answers "ok" and, per mode, also
// makes one subrequest to a loopback server (`sub`, as the router asks the
// Topology Service), one Cache API read (`match`) or one write (`put`,
// max-age 660 as the router stores answers) over the soak's 923 keys.
// 8 clients back to back, `n` requests, through a direct socket (as the
// soak reaches the router); workerd's VmRSS before and after. Every
// process it starts is stopped.
//
//   node bench/workerd-rss-per-op.mjs [n]          # every mode, n = 10000
//   node bench/workerd-rss-per-op.mjs 20000 none sub
import http from "node:http";
import { Miniflare } from "miniflare";
import { workerdChildren, rss } from "../tests/e2e/procs.mjs";
import { runtime } from "../scripts/runtime-config.mjs";

const n = Number(process.argv[2] ?? 10_000);
const modes = process.argv.length > 3 ? process.argv.slice(3) : ["none", "sub", "match", "put"];
const KEYS = 923;

const script = `export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    const key = "https://classify.invalid/q/" + url.searchParams.get("k");
    switch (url.searchParams.get("m")) {
      case "sub": {
        const r = await fetch("http://" + env.UPSTREAM + "/classify", { method: "POST", body: JSON.stringify({ type: "SESSION_PREFIX", value: key }) });
        await r.text();
        break;
      }
      case "match": {
        const r = await caches.default.match(key);
        if (r) await r.text();
        break;
      }
      case "put":
        await caches.default.put(key, new Response(JSON.stringify({ action: "PROXY", proxy: { address: "127.0.0.1:1" }, question: key.padEnd(300) }), { headers: { "cache-control": "max-age=660", "content-type": "application/json" } }));
        break;
    }
    return new Response("ok");
  },
};`;

const mib = (b) => (b / 1024 / 1024).toFixed(1);

async function measure(mode, upstream) {
  const before = workerdChildren();
  const mf = new Miniflare({
    modules: true,
    script,
    ...runtime(),
    bindings: { UPSTREAM: upstream },
    host: "127.0.0.1",
    port: 0,
    cf: false,
    unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }],
  });
  try {
    const url = (await mf.unsafeGetDirectURL()).toString();
    const pid = [...workerdChildren()].find((p) => !before.has(p));
    const start = rss(pid);
    let i = 0;
    const client = async () => {
      while (i < n) {
        const r = await fetch(`${url}?k=${i++ % KEYS}&m=${mode}`);
        await r.text();
      }
    };
    const t = Date.now();
    await Promise.all(Array.from({ length: 8 }, client));
    const end = rss(pid);
    return { mode, n, start, end, ms: Date.now() - t };
  } finally {
    await mf.dispose();
  }
}

const server = http.createServer((req, res) => {
  req.resume();
  req.on("end", () => res.end('{"action":"PROXY","proxy":{"address":"127.0.0.1:1"}}'));
});
await new Promise((r) => server.listen(0, "127.0.0.1", r));
try {
  const upstream = `127.0.0.1:${server.address().port}`;
  for (const mode of modes) {
    const r = await measure(mode, upstream);
    console.log(`${mode.padEnd(5)} ${r.n} requests in ${r.ms} ms: RSS ${mib(r.start)} -> ${mib(r.end)} MiB, ${((r.end - r.start) / r.n / 1024).toFixed(1)} KiB a request`);
  }
} finally {
  server.close();
}
