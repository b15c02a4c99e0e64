// BENCH_PROFILE: where a configuration's CPU goes, from a V8 CPU profile
// taken through workerd's inspector under load (bench/profile.mjs).
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { profile as cpuProfile, summarize } from "../profile.mjs";
import { runWrk, wrkScript } from "./load.mjs";
import { startWorker } from "./processes.mjs";
import { CLK_TCK, procStat } from "./proc.mjs";
import { fmt, table } from "./report.mjs";

/**
 * Each named configuration again, in a fresh workerd with its inspector
 * on, profiled under wrk at the first concurrency for BENCH_SECONDS.
 * Prints where its CPU goes; writes target/bench/profile-<config>.cpuprofile
 * (Chrome DevTools can open it) and target/bench/profile.json. The
 * unprofiled instances (`targets`, started and warmed) stay idle.
 */
export async function profileMode(ctx, targets, outDir) {
  const { s, specs } = ctx;
  const results = {};
  const lines = [];
  for (const name of s.profile) {
    const spec = specs.find((x) => x.name === name);
    if (!spec) throw new Error(`BENCH_PROFILE: no configuration ${name} (have ${specs.map((x) => x.name)})`);
    const plain = targets.find((t) => t.name === name);
    const t = await startWorker(`${name}-profiled`, { ...spec.options, inspectorPort: 0 }, { outboundHop: s.outboundHop });
    Object.assign(t, { warm: plain.warm, cold: plain.cold, mixFile: plain.mixFile });
    const c = s.concurrency[0];
    const load = { concurrency: c, script: wrkScript(t), mixFile: t.mixFile, threads: s.wrkThreads };
    await runWrk(t, { ...load, seconds: Math.max(1, s.warmupSeconds) });
    await new Promise((r) => setTimeout(r, 500));
    const cpu0 = procStat(t.pid).cpuTicks;
    const { profile, loadResult } = await cpuProfile(t.mf, () => runWrk(t, { ...load, seconds: s.seconds }));
    const cpuUs = ((procStat(t.pid).cpuTicks - cpu0) * 1e6) / CLK_TCK / loadResult.requests;
    const sum = summarize(profile, loadResult.requests);
    sum.workerd_cpu_us_per_req_while_profiling = cpuUs;
    results[name] = sum;
    writeFileSync(join(outDir, `profile-${name}.cpuprofile`), JSON.stringify(profile));
    lines.push(`\n== Profile of ${name} (c=${c}, ${loadResult.requests} requests; workerd CPU ${fmt(cpuUs)} µs/req while profiling, isolate busy ${fmt(sum.busy_us_per_req)} µs/req)`);
    lines.push(`   by kind, µs/req: ${Object.entries(sum.kinds_us_per_req).map(([k, v]) => `${k} ${fmt(v, 1)}`).join(", ")}`);
    if (sum.unattributed_gaps.count > 0) {
      lines.push(`   ${sum.unattributed_gaps.count} gap(s) between samples over 10 ms left unattributed (${fmt(sum.unattributed_gaps.us_per_req, 1)} µs/req)`);
    }
    lines.push(table(["self µs/req", "function"], sum.top_self.map((f) => [fmt(f.us_per_req, 1), f.name])));
    lines.push("");
    lines.push(table(["incl µs/req", "function"], sum.top_inclusive.map((f) => [fmt(f.us_per_req, 1), f.name])));
  }
  writeFileSync(join(outDir, "profile.json"), JSON.stringify(results, null, 2) + "\n");
  console.log(lines.join("\n"));
  return 0;
}
