// BENCH_PAIRED: two configurations loaded at the same time, so the
// machine's noise weighs on both alike (bench/paired.mjs).
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { pairedRuns, targetLines } from "../paired.mjs";
import { runWrk, wrkScript } from "./load.mjs";
import { log, retire } from "./processes.mjs";
import { CLK_TCK, procStat } from "./proc.mjs";
import { fmt, table } from "./report.mjs";
import { driverOptions } from "./settings.mjs";

/**
 * Each pair's two configurations under load at the same time, each
 * measurement on two workerd instances started (and warmed) for it;
 * prints the CPU difference and the req/s ratio per pair and concurrency,
 * medians over BENCH_ROUNDS, and writes target/bench/paired.json.
 */
export async function pairedMode(ctx, outDir) {
  const { s, specs } = ctx;
  const fresh = async (name) => {
    const spec = specs.find((x) => x.name === name);
    if (!spec) throw new Error(`BENCH_PAIRED: no configuration ${name} (have ${specs.map((x) => x.name).join(", ")})`);
    const t = await ctx.start(spec);
    if (t.warm) await ctx.warmUp(t);
    return t;
  };
  const load = async (t, concurrency, seconds) => {
    const w = await runWrk(t, { concurrency, script: wrkScript(t), mixFile: t.mixFile, seconds, threads: s.wrkThreads });
    return { requests: w.requests, rps: w.requests / (w.duration_us / 1e6), errors: Object.values(w.errors).reduce((a, b) => a + b, 0) };
  };
  const result = await pairedRuns({
    pairs: s.paired,
    fresh,
    retire,
    rounds: s.rounds,
    concurrency: s.concurrency,
    seconds: s.seconds,
    warmupSeconds: s.warmupSeconds,
    load,
    cpuTicks: (pid) => procStat(pid),
    ticksPerSecond: CLK_TCK,
    log,
  });
  writeFileSync(join(outDir, "paired.json"), JSON.stringify({ options: driverOptions(s), ...result }, null, 2) + "\n");
  console.log(`\n== Paired (both configurations loaded at once, one wrk each; ${s.rounds} round(s) × ${s.seconds}s; medians over rounds of per-round figures)`);
  console.log(
    table(
      ["a", "b", "conc", "a CPU µs/req", "b CPU µs/req", "CPU a−b µs", "min", "max", "CPU a/b", "req/s a/b"],
      result.summary.map((x) => [x.a, x.b, String(x.concurrency), fmt(x.a_cpu_us_per_req), fmt(x.b_cpu_us_per_req), fmt(x.cpu_extra_us), fmt(x.cpu_extra_us_min), fmt(x.cpu_extra_us_max), fmt(x.cpu_ratio, 3), fmt(x.rps_ratio, 2)]),
    ),
  );
  for (const line of targetLines(result.summary)) console.log(line);
  return result.errors;
}
