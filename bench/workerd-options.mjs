// The Miniflare options every benchmarked worker runs with: one workerd,
// reached through a direct socket (no Miniflare entry worker in front), no
// `cf` object, and, unless asked for, none of Miniflare's outbound hop.
//
// By default Miniflare sends a worker's every outbound `fetch` through a
// second worker in the same workerd (`strip-cf-connecting-ip`), which
// copies the request's headers into a new `Headers`, drops
// `CF-Connecting-IP`, sets `CF-Worker` and fetches again. Cloudflare does
// that outside the isolate; here it runs on the isolate's thread and was
// counted as the benchmarked worker's own work (~360 k instructions a
// request, ~40 % of the floor's count, and more for every header sent:
// docs/benchmark.md, "Miniflare's outbound hop"). `outboundHop: true`
// (BENCH_OUTBOUND_HOP=1) puts it back, to compare with figures taken
// before it was left out.
import { createInterface } from "node:readline";
import { runtime } from "../scripts/runtime-config.mjs";

/**
 * The options for `new Miniflare({ ...workerdOptions(o), ...worker })`;
 * `onLine(line)` gets each line the worker's workerd writes.
 */
export function workerdOptions({ outboundHop = false, onLine = () => {} } = {}) {
  return {
    modules: true,
    modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"] }],
    ...runtime(),
    host: "127.0.0.1",
    port: 0,
    unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }],
    cf: false,
    stripCfConnectingIp: outboundHop,
    handleRuntimeStdio(stdout, stderr) {
      for (const stream of [stdout, stderr]) createInterface({ input: stream }).on("line", onLine);
    },
  };
}
