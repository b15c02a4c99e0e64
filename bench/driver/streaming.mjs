// Streaming and memory: big uploads and downloads through the null worker
// and the passthrough router, each in a fresh workerd, with workerd's RSS
// sampled during each.
import { log, startWorker } from "./processes.mjs";
import { MiB, request } from "./http.mjs";
import { procStatusKiB, rssSampler } from "./proc.mjs";
import { fmt } from "./report.mjs";

/** One transfer of `bytes` through `target` (`upload`: PUT to the sink; `download`: from it). */
async function stream(target, direction, bytes) {
  const base = procStatusKiB(target.pid, "VmRSS");
  const stopRss = rssSampler(target.pid, 20);
  const started = process.hrtime.bigint();
  let res;
  if (direction === "upload") {
    res = await request(`${target.url}/upload`, {
      method: "PUT",
      headers: { "content-type": "application/octet-stream", "content-length": String(bytes) },
      bodyBytes: bytes,
    });
  } else {
    res = await request(`${target.url}/download`, {
      headers: { "x-demo-response-bytes": String(bytes) },
      onData: () => {},
    });
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const peak = stopRss();
  const ok =
    res.status === 200 &&
    (direction === "upload" ? Number(res.headers["x-sink-body-bytes"]) === bytes : res.bytes === bytes);
  if (!ok) log(`${target.name} ${direction} ${bytes}: status ${res.status}, ${res.bytes} bytes, sink saw ${res.headers["x-sink-body-bytes"]}`);
  return {
    config: target.name,
    direction,
    mib: bytes / MiB,
    ok,
    seconds,
    mib_per_s: bytes / MiB / seconds,
    rss_before_mib: base / 1024,
    rss_peak_mib: peak / 1024,
    rss_growth_mib: (peak - base) / 1024,
  };
}

/**
 * The null worker and the passthrough router in two fresh workerd
 * processes (so their memory is not the load rounds'): the small and the
 * big transfers both ways, alternating; returns `{ streaming, memory }`.
 */
export async function streamingAndMemory(specs, { streamSmallMiB, streamMiB, outboundHop }) {
  const pair = [];
  for (const name of ["null", "passthrough"]) {
    const spec = specs.find((x) => x.name === name);
    const t = await startWorker(`${name}`, spec.options, { outboundHop });
    await request(`${t.url}/probe`);
    await stream(t, "upload", 8 * MiB); // first use of the body paths
    await stream(t, "download", 8 * MiB);
    t.idleRssMiB = procStatusKiB(t.pid, "VmRSS") / 1024;
    pair.push(t);
    log(`${name} (streaming): ${t.url} (workerd pid ${t.pid}), ${fmt(t.idleRssMiB, 1)} MiB RSS`);
  }
  const streaming = [];
  const peaks = new Map(); // config/mib -> peak RSS MiB over its transfers
  for (const mib of [streamSmallMiB, streamMiB]) {
    for (const direction of ["upload", "download"]) {
      for (const t of mib === streamSmallMiB ? pair : [...pair].reverse()) {
        const s = await stream(t, direction, mib * MiB);
        s.vm_hwm_mib = procStatusKiB(t.pid, "VmHWM") / 1024;
        streaming.push(s);
        const k = `${t.name}/${mib}`;
        peaks.set(k, Math.max(peaks.get(k) ?? 0, s.rss_peak_mib));
        log(`${t.name} ${direction} ${mib} MiB: ${fmt(s.mib_per_s)} MiB/s, workerd RSS ${fmt(s.rss_before_mib)} → peak ${fmt(s.rss_peak_mib)} MiB`);
      }
    }
  }
  const memory = pair.map((t) => {
    const small = peaks.get(`${t.name}/${streamSmallMiB}`);
    const big = peaks.get(`${t.name}/${streamMiB}`);
    return {
      config: t.name,
      idle_rss_mib: t.idleRssMiB,
      [`peak_rss_mib_${streamSmallMiB}`]: small,
      [`peak_rss_mib_${streamMiB}`]: big,
      vm_hwm_mib: procStatusKiB(t.pid, "VmHWM") / 1024,
      // "Does not grow with body size": the big transfers' peak within
      // 16 MiB of the small ones'.
      grows_with_body: big - small > 16,
    };
  });
  return { streaming, memory };
}
