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
//   shadow.mjs             the shadow evaluation's configurations (run when named)
//   mix.mjs                the request mix and the topology
//   load.mjs               wrk runs and one measured run
//   timed.mjs              the default mode: load rounds, then cold.mjs
//                          (cold start) and streaming.mjs (streams, memory)
//   report.mjs             the printed tables and docs/benchmark.md's results
//   profile-mode.mjs       BENCH_PROFILE
//   paired-mode.mjs        BENCH_PAIRED
//   instructions-mode.mjs  BENCH_INSTRUCTIONS
//   scale-mode.mjs         BENCH_SCALE
//   run.mjs                the settings, work directory and stack every script starts from
//   processes.mjs, proc.mjs, http.mjs: starting, watching and asking them
//
// Writes its tables to stdout and its figures to target/bench/*.json.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { instructionsMode } from "./driver/instructions-mode.mjs";
import { pairedMode } from "./driver/paired-mode.mjs";
import { log } from "./driver/processes.mjs";
import { profileMode } from "./driver/profile-mode.mjs";
import { runOnStack } from "./driver/run.mjs";
import { scaleMode } from "./driver/scale-mode.mjs";
import { ROOT, driverOptions } from "./driver/settings.mjs";
import { timedMode } from "./driver/timed.mjs";

const OUT_DIR = join(ROOT, "target", "bench");

/** Runs the mode the settings ask for; resolves to the number of runs or parts with errors. */
await runOnStack("router-bench-", async (ctx, s, work) => {
  mkdirSync(OUT_DIR, { recursive: true });
  log(`options ${JSON.stringify(driverOptions(s))}`);
  if (s.scale) return scaleMode(ctx, work, OUT_DIR);
  if (s.instructions) return instructionsMode(ctx, work, OUT_DIR);
  // Fresh instances for every measured pair.
  if (s.paired.length) return pairedMode(ctx, OUT_DIR);

  const targets = [];
  for (const spec of ctx.specs) targets.push(await ctx.start(spec));
  for (const warm of targets.filter((t) => t.warm)) await ctx.warmUp(warm);
  if (s.profile.length) return profileMode(ctx, targets, OUT_DIR);
  return timedMode(ctx, targets, OUT_DIR);
});
