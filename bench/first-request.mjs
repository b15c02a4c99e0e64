// Where a fresh isolate's first request goes, function by function: each
// configuration's workerd under callgrind (bench/callgrind.mjs), its
// counters dumped once workerd is ready (the script evaluated), after the
// first routed request, and after a second one (the same request, warm).
// Instructions, not seconds: the same binary and inputs give the same
// counts whatever else the machine does.
//
//   [FIRST_REQUEST_PERF_MAP=1] node bench/first-request.mjs [build dir] [config…]
//
// Prints, per configuration, the instructions of start-up, the first and
// the second request on the isolate's thread and on all threads, then the
// first request's isolate thread by kind (wasm by function, V8's wasm
// compilers, the JavaScript, V8's runtime and parser, workerd, the rest)
// and its top functions. Writes target/bench/first-request.json. A build
// with the wasm names kept (`KEEP_WASM_NAMES=1 WORKER_OUT_DIR=… bash
// scripts/build-worker.sh`) names the wasm functions after Rust's.
import http from "node:http";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { callgrindPid, dumpCounters, partCounts, selfCostByFunction, waitForPart, writeLauncher } from "./callgrind.mjs";
import { forget, log, startWorker, stopAll } from "./driver/processes.mjs";
import { readSettings, ROOT } from "./driver/settings.mjs";
import { fmt, table } from "./driver/report.mjs";
import { cellList as scaleCellList } from "./driver/mix.mjs";
import { startStack } from "./driver/stack.mjs";

/** The first request's kind of work, from a function's name (selfCostByFunction's). */
export function kindOf(name) {
  if (name.startsWith("wasm ")) return "wasm (the router's code)";
  if (/wasm::|Liftoff/.test(name)) return "V8 wasm compilers";
  // Machine code written and registered, by either compiler (on a first
  // request nearly all of it Liftoff's: the JavaScript is interpreted).
  if (/Assembler::|SafepointTable|SourcePositionTable|RelocInfo|RelocIterator|CompareAndCreateXorPatch|ThreadIsolation|JitPage|JitAllocation/.test(name)) return "V8 code generation";
  if (/turboshaft|compiler::|Turbofan|Maglev|maglev|Sparkplug|baseline::/i.test(name)) return "V8 JS compilers";
  if (name.startsWith("js ")) return "JavaScript";
  if (name.startsWith("builtin ")) return "V8 builtins";
  if (/Parser|Scanner|Parse|Bytecode|interpreter::/.test(name)) return "V8 parser and bytecode";
  if (/Heap|GC|Scavenge|Mark|Sweep|Evacuat/.test(name)) return "V8 heap and GC";
  if (/v8::|V8/.test(name)) return "V8 runtime (other)";
  if (/kj::|capnp::|workerd::/.test(name)) return "workerd";
  if (/libc|ld-linux|memcpy|memset|malloc|free/.test(name)) return "libc";
  return "other";
}

/** One GET on a connection of its own, closed after it. */
function getOnce(url, headers) {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { agent: false, headers: { ...headers, connection: "close" } }, (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode, text: Buffer.concat(chunks).toString() }));
      res.on("error", reject);
    });
    req.on("error", reject);
  });
}

/** V8's perf map (`--perf-basic-prof`): `[address, size, name]` per code object, in the order compiled. */
function perfMapEntries(file) {
  if (!existsSync(file)) return [];
  return readFileSync(file, "utf8")
    .split("\n")
    .map((l) => l.match(/^([0-9a-f]+) ([0-9a-f]+) (.*)$/))
    .filter(Boolean)
    .map((m) => [parseInt(m[1], 16), parseInt(m[2], 16), m[3]]);
}

/** The crate a Rust symbol belongs to: its first path segment (`<a::B as c::D>::f` is `a`'s). */
export function crateOf(name) {
  const m = name.replace(/^[<&*\s]+|^(mut|dyn|const)\s+/g, "").match(/^([A-Za-z_][A-Za-z0-9_]*)::/);
  return m ? m[1] : name.startsWith("__") || /^[a-z_]+$/.test(name) ? "(exports and glue)" : "(other)";
}

/** The wasm functions Liftoff compiled among perf map entries, by crate. */
function compiledByCrate(entries) {
  const wasm = entries.filter(([, , n]) => /^JS:.*-liftoff$/.test(n) && !n.includes(".mjs") && !n.includes(".js:"));
  const crates = new Map();
  const fns = wasm.map(([, size, n]) => ({ name: n.slice(3).replace(/-liftoff$/, ""), bytes: size }));
  for (const f of fns) {
    const c = crateOf(f.name);
    const x = crates.get(c) ?? { crate: c, functions: 0, bytes: 0 };
    x.functions++;
    x.bytes += f.bytes;
    crates.set(c, x);
  }
  return {
    functions: fns.length,
    bytes: fns.reduce((a, f) => a + f.bytes, 0),
    crates: [...crates.values()].sort((a, b) => b.bytes - a.bytes),
    largest: [...fns].sort((a, b) => b.bytes - a.bytes).slice(0, 25),
  };
}

async function main() {
  const args = process.argv.slice(2);
  const buildDir = args[0] && existsSync(join(args[0], "index.js")) ? resolve(args.shift()) : join(ROOT, "build");
  const wanted = args.length ? args : ["floor", "peer", "router-session_token", "router-cells"];
  const s = readSettings();
  const work = mkdtempSync(join(ROOT, "target", "bench-first-"));
  const outDir = join(ROOT, "target", "bench");
  mkdirSync(outDir, { recursive: true });
  const ctx = await startStack({ ...s, configs: [], baseBuild: null }, work);
  const w = ctx.workers;
  const router = (ruleset, more = {}) => ({ scriptPath: join(buildDir, "index.js"), modulesRoot: buildDir, bindings: { ...w.routerVars(ruleset), ...more } });
  const cellList = JSON.stringify(Array.from({ length: 1000 }, (_, i) => ({ id: String(i + 1), address: i === 999 ? ctx.sinkAddr : `cell-${i + 1}.internal:443` })));
  const cells = (count) => ({ GITLAB_CELLS: scaleCellList(ctx.sinkAddr, count) });
  const all = {
    floor: w.floor(),
    peer: w.peer(),
    "peer-log": w.peer({ LOG: "1" }),
    "floor-log": w.floor({ LOG: "1" }),
    "rust-floor": w.rustFloor,
    "workers-rs": w.workersRs(),
    "router-session_token": router("session_token"),
    "router-cells": router("cells"),
    "router-session_token-nocache": { ...router("session_token"), cache: false },
    // As operators deploy it: the control document's namespace bound, so
    // the first request reads it (KV as Miniflare emulates it).
    "router-session_token-control": { ...router("session_token"), kvNamespaces: { ROUTER_CONTROL: "router-control" } },
    "router-cells-1000": router("cells", { GITLAB_CELLS: cellList }),
    // The scale run's sizes (bench/driver/scale-mode.mjs): cells_50 and
    // cells_200 are in a test-rulesets build only (target/worker-scale).
    "scale-cells-10": router("cells", cells(10)),
    "scale-cells-100": router("cells", cells(100)),
    "scale-cells-1000": router("cells", cells(1000)),
    "scale-rules-50": router("cells_50"),
    "scale-rules-200": router("cells_200"),
  };
  // The cold start's request (bench/driver/cold.mjs): a session naming cell 3, one service call.
  const first = process.env.FIRST_REQUEST_LEGACY === "1"
    ? { path: "/", headers: {} }
    : { path: "/group-3/project-1/-/tree/main", headers: { cookie: "_gitlab_session=cell-3-0123456789abcdef0123456789abcdef" } };
  const workerdModule = await import("workerd");
  const workerd = process.env.MINIFLARE_WORKERD_PATH ?? workerdModule.default?.default ?? workerdModule.default;
  // --perf-basic-prof names JIT code (the wasm functions) but costs work
  // of its own on every function compiled (V8's JIT logger).
  const perfMap = process.env.FIRST_REQUEST_PERF_MAP === "1";
  const results = [];
  for (const name of wanted) {
    if (!all[name]) throw new Error(`unknown configuration ${name} (have ${Object.keys(all)})`);
    const dir = mkdtempSync(join(work, `cg-${name}-`));
    const launcher = writeLauncher(dir, { workerd, v8Flags: [...(perfMap ? ["--perf-basic-prof", "--no-logfile-per-isolate", `--logfile=${dir}/v8.log`] : []), ...(process.env.FIRST_REQUEST_V8_FLAGS ?? "").split(" ").filter(Boolean)], instrLevel: true });
    process.env.MINIFLARE_WORKERD_PATH = launcher;
    const t = await startWorker(name, all[name], { outboundHop: s.outboundHop });
    delete process.env.MINIFLARE_WORKERD_PATH;
    try {
      const pid = callgrindPid(dir);
      await new Promise((r) => setTimeout(r, Number(process.env.FIRST_REQUEST_IDLE_MS ?? 2000))); // idle: background compile of the script settles
      dumpCounters(pid);
      await waitForPart(dir, pid, 1);
      const mapFile = `/tmp/perf-${pid}.map`;
      const mapAtReady = perfMap ? perfMapEntries(mapFile).length : 0;
      const parts = [];
      for (let i = 0; i < 2; i++) {
        // A new connection each: a kept-alive one may be closed while callgrind dumps.
        const { status, text } = await getOnce(`${t.url}${first.path}`, first.headers);
        const res = { status };
        if (res.status !== 200) throw new Error(`${name}: request ${i + 1} answered ${res.status} ${text.slice(0, 200)} ${t.lines.last.join("\n")}`);
        await new Promise((r) => setTimeout(r, 2000)); // background tier-up counted with its request
        dumpCounters(pid);
        await waitForPart(dir, pid, i + 2);
        parts.push(partCounts(dir, pid, i + 2));
      }
      const startup = partCounts(dir, pid, 1);
      const fns = selfCostByFunction(dir, pid, 2, perfMap ? mapFile : null);
      const secondTop = selfCostByFunction(dir, pid, 3, perfMap ? mapFile : null).slice(0, 25);
      const compiled = perfMap ? compiledByCrate(perfMapEntries(mapFile).slice(mapAtReady)) : null;
      if (process.env.FIRST_REQUEST_KEEP_MAP) copyFileSync(mapFile, join(process.env.FIRST_REQUEST_KEEP_MAP, `perf-${name}.map`));
      rmSync(mapFile, { force: true });
      const kinds = {};
      for (const [fn, n] of fns) kinds[kindOf(fn)] = (kinds[kindOf(fn)] ?? 0) + n;
      const result = { config: name, startup, first: parts[0], second: parts[1], kinds, top: fns.slice(0, 40), secondTop, compiled };
      results.push(result);
      log(`${name}: first request ${fmt(parts[0].main / 1e6, 2)} M instructions (isolate), ${fmt(parts[0].all / 1e6, 2)} M (all threads); second ${fmt(parts[1].main / 1e6, 2)} M`);
    } finally {
      await t.mf.dispose().catch(() => {});
      forget(t.mf);
    }
  }
  await stopAll();
  rmSync(work, { recursive: true, force: true });
  writeFileSync(join(outDir, "first-request.json"), JSON.stringify(results, null, 2) + "\n");
  const M = (n) => fmt(n / 1e6, 2);
  console.log("\n== A fresh isolate under callgrind: M instructions (isolate thread / all threads)");
  console.log(table(["config", "start-up", "first request", "second request"], results.map((r) => [r.config, `${M(r.startup.main)} / ${M(r.startup.all)}`, `${M(r.first.main)} / ${M(r.first.all)}`, `${M(r.second.main)} / ${M(r.second.all)}`])));
  for (const r of results) {
    console.log(`\n== ${r.config}: the first request's isolate thread by kind (M instructions)`);
    console.log(table(["M instr", "kind"], Object.entries(r.kinds).sort((a, b) => b[1] - a[1]).map(([k, n]) => [M(n), k])));
    if (r.compiled) {
      console.log(`\n== ${r.config}: wasm functions V8 compiled for the first request, by crate (${r.compiled.functions} functions, ${fmt(r.compiled.bytes / 1024, 1)} KiB of Liftoff code)`);
      console.log(table(["functions", "KiB code", "crate"], r.compiled.crates.slice(0, 25).map((c) => [String(c.functions), fmt(c.bytes / 1024, 1), c.crate])));
      console.log(table(["bytes", "function"], r.compiled.largest.map((f) => [String(f.bytes), f.name.slice(0, 140)])));
    }
    console.log(`\n== ${r.config}: the second request's isolate thread, top functions`);
    console.log(table(["k instr", "function (self)"], r.secondTop.map(([f, n]) => [fmt(n / 1000, 1), f.slice(0, 140)])));
    console.log(`\n== ${r.config}: the first request's isolate thread, top functions`);
    console.log(table(["k instr", "function (self)"], r.top.slice(0, 25).map(([f, n]) => [fmt(n / 1000, 1), f.slice(0, 140)])));
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch(async (e) => {
    console.error(e);
    await stopAll();
    process.exit(1);
  });
}
