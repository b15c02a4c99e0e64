// The frame a bench script runs in (bench/driver.mjs,
// bench/node-compat-cold.mjs): the settings, a work directory, the stack,
// and every process it started stopped at the end whatever happens.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { agent } from "./http.mjs";
import { log, stopAll } from "./processes.mjs";
import { readSettings } from "./settings.mjs";
import { startStack } from "./stack.mjs";

/**
 * Reads the settings, makes a work directory (`<tmp>/<prefix>…`, removed at
 * exit unless BENCH_KEEP_WORK is set), starts the stack
 * (bench/driver/stack.mjs) and runs `body(ctx, settings, work)`. Every
 * process started is stopped at the end, on an error and on SIGINT or
 * SIGTERM. Exits 1 when `body` throws or resolves to a number of runs with
 * errors other than 0, else 0.
 */
export async function runOnStack(prefix, body) {
  const onSignal = async () => {
    await stopAll();
    process.exit(130);
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  let code = 0;
  try {
    const s = readSettings();
    const work = mkdtempSync(join(tmpdir(), prefix));
    if (s.keepWork) log(`work directory kept: ${work}`);
    else process.once("exit", () => rmSync(work, { recursive: true, force: true }));
    const bad = await body(await startStack(s, work), s, work);
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
}
