// BENCH_INSTRUCTIONS: instructions per request under callgrind
// (bench/instructions.mjs, bench/callgrind.mjs), which repeat where CPU
// time does not.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { compare, countConfig, haveCallgrind } from "../instructions.mjs";
import { tsCalls } from "./load.mjs";
import { forget, log } from "./processes.mjs";
import { fmt, table } from "./report.mjs";
import { driverOptions } from "./settings.mjs";

/**
 * `count(spec, warmUp = ctx.warmUp)`: counts one configuration under
 * callgrind (bench/instructions.mjs's countConfig) against `ctx`'s stack,
 * warmed by `warmUp` when it is a warm one.
 */
export async function counter(ctx, work, opt) {
  const workerdModule = await import("workerd");
  const workerd = process.env.MINIFLARE_WORKERD_PATH ?? workerdModule.default?.default ?? workerdModule.default;
  const start = async (spec) => {
    const t = await ctx.start(spec);
    t.retire = () => forget(t.mf);
    return t;
  };
  return (spec, warmUp = ctx.warmUp) =>
    countConfig(spec, { start, warmUp, mix: ctx.mix, workDir: work, workerd, opt, log, serviceCalls: () => tsCalls(ctx.ts) });
}

/**
 * Each configuration in turn under callgrind; prints instructions per
 * request, over the floor with its log line and against the peer with its
 * log line, and writes target/bench/instructions.json. Without
 * BENCH_CONFIGS: the floor and the peer with their log lines, the Rust
 * yardsticks,
 * passthrough, token-warm, cells (and the base-* rows with
 * BENCH_BASE_BUILD).
 */
export async function instructionsMode(ctx, work, outDir) {
  const { s, specs } = ctx;
  if (!haveCallgrind()) throw new Error("BENCH_INSTRUCTIONS needs valgrind (Debian package valgrind): not found");
  const opt = driverOptions(s).instr;
  const wanted = s.configs.length
    ? specs.filter((x) => x.name !== "null" || s.configs.includes("null"))
    : specs.filter((x) => ["floor-log", "peer-log", "rust-floor", "workers-rs", "passthrough", "token-warm", "cells"].includes(x.name) || x.name.startsWith("base-"));
  // Under callgrind a request takes ~100 times as long, so the router's
  // 30 s cap on not-found answers would expire warm entries every few
  // hundred requests instead of every few ten thousand: the service's own
  // max-age (an hour) is kept instead, as the timed rounds see it.
  const run = wanted
    .filter((x) => !x.cold)
    .map((x) =>
      x.options.bindings?.GITLAB_RULES_CONFIG
        ? { ...x, options: { ...x.options, bindings: { ...x.options.bindings, GITLAB_CACHE_NEGATIVE_TTL_SECONDS: "3600" } } }
        : x,
    );
  for (const x of wanted.filter((x) => x.cold)) log(`${x.name}: skipped (a cold configuration needs a new key per request; counted configurations replay the mix)`);
  const count = await counter(ctx, work, opt);
  const results = [];
  for (const spec of run) {
    log(`${spec.name}: under callgrind (${opt.warm} requests to settle, ${opt.windows} × ${opt.requests} counted, concurrency ${opt.concurrency})`);
    results.push(await count(spec));
  }
  const rows = compare(results);
  writeFileSync(join(outDir, "instructions.json"), JSON.stringify({ options: opt, results: rows }, null, 2) + "\n");
  const k = (x) => (x === null ? "" : fmt(x / 1000, 1));
  console.log(`\n== Instructions per request under callgrind (the mix; ${opt.windows} windows × ${opt.requests} requests at concurrency ${opt.concurrency}; median, min–max over windows)`);
  console.log(
    table(
      ["config", "k instr/req (isolate)", "min", "max", "mean", "k instr/req (all threads)", "over floor-log k", "over floor-log %", "× peer-log", "over rust-floor k", "over workers-rs k", "TS calls", "errors"],
      rows.map((r) => [r.config, k(r.main), k(r.main_min), k(r.main_max), k(r.main_mean), k(r.all), k(r.over_floor_log), r.over_floor_log_pct === null ? "" : fmt(r.over_floor_log_pct, 1), r.vs_peer_log === null ? "" : fmt(r.vs_peer_log, 3), k(r.over_rust_floor), k(r.over_workers_rs), String(r.service_calls), String(r.errors)]),
    ),
  );
  for (const r of rows.filter((r) => r.top)) {
    console.log(`\n== Where ${r.config}'s isolate thread spends its instructions (self, last window; JIT code named from V8's perf map)`);
    console.log(table(["k instr/req", "function"], r.top.map((f) => [fmt(f.per_request / 1000, 2), f.name.slice(0, 150)])));
  }
  return rows.reduce((a, r) => a + r.errors, 0);
}
