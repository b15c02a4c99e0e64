// The benchmark driver behind `bash bench/run.sh` (which builds first);
// docs/benchmark.md says what it measures and how to read it.
//
// Everything runs on loopback, in this process's children, each stopped by
// PID at the end: `devstack sink` (the upstream), `devstack topology` (the
// local Topology Service, every cell = the sink), and one workerd per
// configuration, started by Miniflare with a direct socket and without
// Miniflare's outbound hop (bench/workerd-options.mjs).
//
// The parts, under bench/driver/:
//   settings.mjs           every BENCH_* setting: name, default, meaning
//   stack.mjs              the sink, the service, the configurations, warming
//   mix.mjs                the request mix and the topology
//   load.mjs               wrk runs and one measured run
//   timed.mjs              the default mode: load rounds, then cold.mjs
//                          (cold start) and streaming.mjs (streams, memory)
//   report.mjs             the printed tables and docs/benchmark.md's results
//   profile-mode.mjs       BENCH_PROFILE
//   paired-mode.mjs        BENCH_PAIRED
//   instructions-mode.mjs  BENCH_INSTRUCTIONS
//   scale-mode.mjs         BENCH_SCALE
//   processes.mjs, proc.mjs, http.mjs: starting, watching and asking them
//
// Writes its tables to stdout and its figures to target/bench/*.json.
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { agent } from "./driver/http.mjs";
import { instructionsMode } from "./driver/instructions-mode.mjs";
import { pairedMode } from "./driver/paired-mode.mjs";
import { log, stopAll } from "./driver/processes.mjs";
import { profileMode } from "./driver/profile-mode.mjs";
import { scaleMode } from "./driver/scale-mode.mjs";
import { ROOT, driverOptions, readSettings } from "./driver/settings.mjs";
import { startStack } from "./driver/stack.mjs";
import { timedMode } from "./driver/timed.mjs";

const OUT_DIR = join(ROOT, "target", "bench");

/** Runs the mode the settings ask for; resolves to the number of runs or parts with errors. */
async function main() {
  const s = readSettings();
  mkdirSync(OUT_DIR, { recursive: true });
  const work = mkdtempSync(join(tmpdir(), "router-bench-"));
  if (s.keepWork) log(`work directory kept: ${work}`);
  else process.once("exit", () => rmSync(work, { recursive: true, force: true }));
  log(`options ${JSON.stringify(driverOptions(s))}`);

  const ctx = await startStack(s, work);
  if (s.scale) return scaleMode(ctx, work, OUT_DIR);
  if (s.instructions) return instructionsMode(ctx, work, OUT_DIR);
  // Fresh instances for every measured pair.
  if (s.paired.length) return pairedMode(ctx, OUT_DIR);

  const targets = [];
  for (const spec of ctx.specs) targets.push(await ctx.start(spec));
  for (const warm of targets.filter((t) => t.warm)) await ctx.warmUp(warm);
  if (s.profile.length) return profileMode(ctx, targets, OUT_DIR);
  return timedMode(ctx, targets, OUT_DIR);
}

let code = 0;
const onSignal = async () => {
  await stopAll();
  process.exit(130);
};
process.on("SIGINT", onSignal);
process.on("SIGTERM", onSignal);
try {
  const bad = await main();
  if (bad) {
    log(`${bad} run(s) had errors`);
    code = 1;
  }
} catch (e) {
  console.error(e);
  code = 1;
} finally {
  await stopAll();
  agent.destroy();
}
process.exit(code);
