// BENCH_SCALE: what gitlab.com's sizes cost a request. The router, built
// with `test-rulesets` into target/worker-scale/ (bench/run.sh; the build
// adds the generated `cells_50` and `cells_200` rulesets, build.rs), in
// three dimensions, each variant against the smallest of its dimension:
//
//   cells          GITLAB_CELLS of 10, 100 and 1,000 cells (`cells` rules)
//   cache entries  GITLAB_MEMORY_CACHE_ENTRIES 100, 1,000 and 10,000, the
//                  cache filled to that many entries before the mix warms
//                  it (`session_token` rules, whose mix needs ~40 keys)
//   rules          `cells` (33 rules) and `cells_50`, `cells_200`: the
//                  same with generated path rules in front
//
// First request: the cold start's CPU (bench/driver/cold.mjs), min and
// median over BENCH_COLD_SAMPLES fresh processes. Warm request:
// instructions per request under callgrind (bench/instructions.mjs), at
// fixed tiers unless BENCH_V8_FLAGS says otherwise, so sizes compare by
// count whatever the machine's load.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { haveCallgrind, sendMix } from "../instructions.mjs";
import { median } from "../paired.mjs";
import { COLD_REQUEST, coldStart } from "./cold.mjs";
import { counter } from "./instructions-mode.mjs";
import { cellList } from "./mix.mjs";
import { log } from "./processes.mjs";
import { fmt, table } from "./report.mjs";
import { ROOT, driverOptions } from "./settings.mjs";

/** The build the scale run loads (bench/run.sh builds it under BENCH_SCALE=1). */
export const SCALE_BUILD = join(ROOT, "target", "worker-scale");

/** V8 flags that fix the tiers (docs/benchmark.md, "Instruction counts"). */
export const FIXED_TIERS = ["--no-liftoff", "--no-maglev", "--no-turbofan", "--always-sparkplug"];

/**
 * The variants: `{ name, dimension, size, ruleset, bindings, fill }`,
 * `fill` the distinct keys put in the memory cache before warming.
 */
export function scaleVariants(sinkAddr, cellsRules = rulesIn("cells")) {
  return [
    ...[10, 100, 1000].map((n) => ({ name: `scale-cells-${n}`, dimension: "cells", size: n, ruleset: "cells", bindings: { GITLAB_CELLS: cellList(sinkAddr, n) }, fill: 0 })),
    ...[100, 1000, 10000].map((n) => ({ name: `scale-cache-${n}`, dimension: "cache entries", size: n, ruleset: "session_token", bindings: { GITLAB_MEMORY_CACHE_ENTRIES: String(n) }, fill: n })),
    ...[cellsRules, 50, 200].map((n) => ({ name: `scale-rules-${n}`, dimension: "rules", size: n, ruleset: n === cellsRules ? "cells" : `cells_${n}`, bindings: {}, fill: 0 })),
  ];
}

/** The number of rules in rules/<name>.json. */
function rulesIn(name) {
  return JSON.parse(readFileSync(join(ROOT, "rules", `${name}.json`), "utf8")).rules.length;
}

/**
 * `count` requests each naming a session prefix no other request names
 * (as bench/wrk/cold.lua's): each a memory cache miss, one service call
 * (404), one entry.
 */
export function fillRequests(count, tag) {
  return Array.from({ length: count }, (_, i) => ({
    method: "GET",
    path: "/group-1/project-1/-/merge_requests",
    headers: { cookie: `_gitlab_session=cell-fill${tag}x${i}-0123456789abcdef0123456789abcdef`, "accept-encoding": "identity" },
  }));
}

/** Each variant's figures against the smallest size of its dimension (`first_*_ms`, `warm`). */
export function againstSmallest(rows) {
  return rows.map((r) => {
    const smallest = rows.filter((x) => x.dimension === r.dimension).sort((a, b) => a.size - b.size)[0];
    const pct = (a, b) => (a == null || b == null || b === 0 ? null : (100 * (a - b)) / b);
    return { ...r, warm_vs_smallest_pct: pct(r.warm, smallest.warm), first_vs_smallest_pct: pct(r.first_median_ms, smallest.first_median_ms) };
  });
}

/** The scale run: prints its table, writes target/bench/scale.json; resolves to the errors seen. */
export async function scaleMode(ctx, work, outDir) {
  const { s, workers: w } = ctx;
  if (!haveCallgrind()) throw new Error("BENCH_SCALE needs valgrind (Debian package valgrind): not found");
  const opt = { ...driverOptions(s).instr };
  if (opt.v8Flags.length === 0) opt.v8Flags = FIXED_TIERS;
  const variants = scaleVariants(ctx.sinkAddr).filter((v) => s.configs.length === 0 || s.configs.includes(v.name));
  const spec = (v, more = {}) => ({
    name: v.name,
    warm: true,
    options: { ...w.router(v.ruleset, { ...v.bindings, ...more }), scriptPath: join(SCALE_BUILD, "index.js"), modulesRoot: SCALE_BUILD },
  });

  log(`scale: first request, ${s.coldSamples} fresh workerd per variant (${variants.map((v) => v.name).join(", ")})`);
  const cold = s.coldSamples === 0 ? { samples: [], summary: [] } : await coldStart(
    variants.map((v) => spec(v)),
    COLD_REQUEST,
    { samples: s.coldSamples, outboundHop: s.outboundHop },
  );
  for (const x of cold.summary) log(`${x.config}: first request CPU ${fmt(x.cpu_first_ms, 1)} ms (median of ${x.samples}), ready ${fmt(x.cpu_ready_ms, 1)} ms`);
  writeFileSync(join(outDir, "scale.json"), JSON.stringify({ cold: cold.samples }, null, 2) + "\n");

  const count = await counter(ctx, work, opt);
  let errors = 0;
  const rows = [];
  for (const v of variants) {
    // Under callgrind the router's 30 s cap on not-found answers would
    // expire the fill's entries while it runs (as in BENCH_INSTRUCTIONS).
    const x = spec(v, { GITLAB_CACHE_NEGATIVE_TTL_SECONDS: "3600" });
    const warmUp = async (t) => {
      if (v.fill > 0) {
        log(`${v.name}: filling the memory cache with ${v.fill} keys`);
        errors += await sendMix(t.url, fillRequests(v.fill, v.size), { count: v.fill, concurrency: 4 });
      }
      await ctx.warmUp(t);
    };
    log(`${v.name}: under callgrind (${opt.warm} requests to settle, ${opt.windows} × ${opt.requests} counted; V8 ${opt.v8Flags.join(" ")})`);
    const counted = await count(x, warmUp);
    errors += counted.errors;
    const firsts = cold.samples.filter((c) => c.config === v.name).map((c) => c.cpu_first_ms);
    const readies = cold.samples.filter((c) => c.config === v.name).map((c) => c.cpu_ready_ms);
    rows.push({
      name: v.name,
      dimension: v.dimension,
      size: v.size,
      ruleset: v.ruleset,
      first_min_ms: firsts.length ? Math.min(...firsts) : null,
      first_median_ms: firsts.length ? median(firsts) : null,
      ready_median_ms: readies.length ? median(readies) : null,
      warm: counted.main,
      warm_min: counted.main_min,
      warm_max: counted.main_max,
      service_calls: counted.service_calls,
      errors: counted.errors,
    });
  }
  const out = againstSmallest(rows);
  writeFileSync(join(outDir, "scale.json"), JSON.stringify({ options: { ...opt, coldSamples: s.coldSamples }, cold: cold.samples, results: out }, null, 2) + "\n");
  const k = (x) => (x == null ? "-" : fmt(x / 1000, 1));
  const pct = (x) => (x == null ? "-" : `${x >= 0 ? "+" : ""}${fmt(x, 1)}`);
  console.log(`\n== Scale (target/worker-scale; first request: workerd CPU over ${s.coldSamples} fresh processes; warm: k instructions/request on the isolate's thread, ${opt.windows} × ${opt.requests}, median (min–max); V8 ${opt.v8Flags.join(" ")})`);
  console.log(
    table(
      ["dimension", "size", "ruleset", "first CPU ms min", "median", "vs smallest %", "ready CPU ms", "warm k instr/req", "min–max", "vs smallest %", "TS calls", "errors"],
      out.map((r) => [r.dimension, r.size, r.ruleset, fmt(r.first_min_ms, 1), fmt(r.first_median_ms, 1), pct(r.first_vs_smallest_pct), fmt(r.ready_median_ms, 1), k(r.warm), `${k(r.warm_min)}–${k(r.warm_max)}`, pct(r.warm_vs_smallest_pct), String(r.service_calls), String(r.errors)]),
    ),
  );
  return errors;
}
