// The cold start: fresh workerd processes, wall time and CPU from
// Miniflare's construction to ready and on to the first routed response.
import { median } from "../paired.mjs";
import { request } from "./http.mjs";
import { forget, startWorker } from "./processes.mjs";
import { procCpuNs } from "./proc.mjs";

/** The cold start's request: a session naming cell 3, one Topology Service call. */
export const COLD_REQUEST = {
  path: "/group-3/project-1/-/tree/main",
  headers: { cookie: "_gitlab_session=cell-3-0123456789abcdef0123456789abcdef", "accept-encoding": "identity" },
};

/**
 * For each configuration, `samples` fresh workerd processes
 * (configurations interleaved). Per sample, wall time and workerd CPU
 * from Miniflare's construction to ready (workerd up, the script's modules
 * compiled and evaluated: for the router, the wasm compiled and
 * instantiated, its state and the entry's setup made) and on to the first
 * routed response (for the router: the rules, one Topology Service call).
 */
export async function coldStart(specs, request1, { samples: count, outboundHop }) {
  const samples = [];
  for (let i = 0; i < count; i++) {
    const order = [...specs.slice(i % specs.length), ...specs.slice(0, i % specs.length)];
    for (const s of order) {
      const t0 = performance.now();
      const t = await startWorker(`${s.name}-cold`, s.options, { outboundHop });
      const cpuReady = procCpuNs(t.pid);
      const t1 = performance.now();
      const res = await request(`${t.url}${request1.path}`, { headers: request1.headers });
      const t2 = performance.now();
      const cpuFirst = procCpuNs(t.pid);
      if (res.status !== 200) throw new Error(`cold start ${s.name}: ${res.status} ${res.text.slice(0, 200)}`);
      samples.push({
        config: s.name,
        sample: i + 1,
        ready_ms: t.readyAt - t0,
        first_ms: t2 - t1,
        total_ms: t.readyAt - t0 + (t2 - t1),
        cpu_ready_ms: cpuReady / 1e6,
        cpu_first_ms: (cpuFirst - cpuReady) / 1e6,
        cpu_total_ms: cpuFirst / 1e6,
      });
      await t.mf.dispose().catch(() => {});
      forget(t.mf);
    }
  }
  const summary = specs.map((s) => {
    const mine = samples.filter((x) => x.config === s.name);
    const out = { config: s.name, samples: mine.length };
    for (const k of ["ready_ms", "first_ms", "total_ms", "cpu_ready_ms", "cpu_first_ms", "cpu_total_ms"]) out[k] = median(mine.map((x) => x[k]));
    return out;
  });
  const floor = summary.find((x) => x.config === "floor");
  const floorLog = summary.find((x) => x.config === "floor-log");
  for (const x of summary) {
    x.over_floor_total_ms = floor ? x.total_ms - floor.total_ms : null;
    x.over_floor_cpu_ms = floor ? x.cpu_total_ms - floor.cpu_total_ms : null;
    x.over_floor_log_cpu_ms = floorLog ? x.cpu_total_ms - floorLog.cpu_total_ms : null;
  }
  return { samples, summary };
}
