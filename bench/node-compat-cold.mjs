// What workerd's Node compatibility costs a fresh isolate: the benchmark's
// cold start (bench/driver/cold.mjs: fresh workerd processes, configurations
// interleaved) of the router (build/, session_token) and of the JS floor,
// each with Node compatibility on (the default of a compatibility date from
// 2026-08-04: nodejs_compat and nodejs_compat_v2) and off
// (`no_nodejs_compat` and `no_nodejs_compat_v2`), on wrangler.toml's
// compatibility date. Prints, per configuration, the median and the range
// of workerd's CPU (start-up, first request, both) and wall time, and of
// the difference on − off within each sample's pair.
// docs/decisions.md ("The runtime", under "The edge") has the
// figures and the decision they made.
//
//   source scripts/node-env.sh
//   BENCH_COLD_SAMPLES=15 node bench/node-compat-cold.mjs
//   node bench/node-compat-cold.mjs --instructions 3
//
// `--instructions N`: instead of timing, N fresh workerd per configuration
// run under valgrind's callgrind (bench/callgrind.mjs), counting the
// instructions (every thread) of the start-up and of the first request:
// counts that move by about 1 % between runs where CPU time on a shared
// machine moves by tens of per cent.
//
// Reads the benchmark's settings (bench/driver/settings.mjs): BENCH_COLD_SAMPLES
// (fresh workerd per configuration), DEVSTACK_BIN, BENCH_PEERS_DIR (without
// the peers, the floor rows are left out), BENCH_OUTBOUND_HOP.
import { mkdtempSync } from "node:fs";
import { join } from "node:path";
import { Miniflare } from "miniflare";
import { COMPATIBILITY_DATE } from "../scripts/runtime-config.mjs";
import workerdModule from "workerd";
import { callgrindPid, dumpCounters, partCounts, waitForPart, writeLauncher } from "./callgrind.mjs";
import { coldStart } from "./driver/cold.mjs";
import { request } from "./driver/http.mjs";
import { log } from "./driver/processes.mjs";
import { runOnStack } from "./driver/run.mjs";
import { median } from "./paired.mjs";
import { workerdOptions } from "./workerd-options.mjs";

const DEFAULT_ON = "2026-08-04";
const ON = [];
const OFF = ["no_nodejs_compat", "no_nodejs_compat_v2"];

/** What a worker run with `flags` sees of Node: `{ Buffer, process }` typeofs. */
async function nodeGlobals(flags) {
  const mf = new Miniflare({
    ...workerdOptions(),
    script: "export default { fetch() { return Response.json({ Buffer: typeof Buffer, process: typeof process }); } };",
    compatibilityFlags: flags,
  });
  try {
    return await (await mf.dispatchFetch("http://localhost/")).json();
  } finally {
    await mf.dispose();
  }
}

const fmt = (x) => x.toFixed(1);
const REQUEST1 = {
  path: "/group-3/project-1/-/tree/main",
  headers: { cookie: "_gitlab_session=cell-3-0123456789abcdef0123456789abcdef", "accept-encoding": "identity" },
};

/**
 * `count` fresh workerd per spec under callgrind (interleaved): the
 * instructions of the start-up (to ready) and of the first request, all threads.
 */
async function countColdStarts(specs, count, work) {
  const workerd = workerdModule.default ?? workerdModule;
  const samples = [];
  for (let i = 0; i < count; i++) {
    const order = [...specs.slice(i % specs.length), ...specs.slice(0, i % specs.length)];
    for (const spec of order) {
      const dir = mkdtempSync(join(work, `cg-${spec.name}-`));
      const before = process.env.MINIFLARE_WORKERD_PATH;
      process.env.MINIFLARE_WORKERD_PATH = writeLauncher(dir, { workerd });
      let mf;
      try {
        mf = new Miniflare({ ...workerdOptions(), ...spec.options });
        await mf.ready;
      } finally {
        if (before === undefined) delete process.env.MINIFLARE_WORKERD_PATH;
        else process.env.MINIFLARE_WORKERD_PATH = before;
      }
      try {
        const pid = callgrindPid(dir);
        dumpCounters(pid);
        await waitForPart(dir, pid, 1);
        const url = (await mf.unsafeGetDirectURL("")).toString().replace(/\/$/, "");
        const res = await request(`${url}${REQUEST1.path}`, { headers: REQUEST1.headers });
        if (res.status !== 200) throw new Error(`${spec.name}: ${res.status} ${res.text.slice(0, 200)}`);
        dumpCounters(pid);
        await waitForPart(dir, pid, 2);
        const ready = partCounts(dir, pid, 1).all / 1e6;
        const first = partCounts(dir, pid, 2).all / 1e6;
        samples.push({ config: spec.name, sample: i + 1, ready_minstr: ready, first_minstr: first, total_minstr: ready + first });
        log(`${spec.name} #${i + 1}: start-up ${fmt(ready)} M instructions, first request ${fmt(first)} M`);
      } finally {
        await mf.dispose().catch(() => {});
      }
    }
  }
  return samples;
}

await runOnStack("router-compat-", async (ctx, s, work) => {
  if (COMPATIBILITY_DATE < DEFAULT_ON) throw new Error(`wrangler.toml's compatibility_date ${COMPATIBILITY_DATE} is before ${DEFAULT_ON}: Node compatibility is not on by default`);
  // The two settings do what they say in this workerd.
  const on = await nodeGlobals(ON);
  const off = await nodeGlobals(OFF);
  if (on.Buffer !== "function" || on.process !== "object") throw new Error(`Node compatibility on, but the worker sees ${JSON.stringify(on)}`);
  if (off.Buffer !== "undefined" || off.process !== "undefined") throw new Error(`Node compatibility off, but the worker sees ${JSON.stringify(off)}`);

  const w = ctx.workers;
  const specs = [
    { name: "router-node-on", options: { ...w.router("session_token"), compatibilityFlags: ON } },
    { name: "router-node-off", options: { ...w.router("session_token"), compatibilityFlags: OFF } },
    ...(ctx.peersThere
      ? [
          { name: "floor-node-on", options: { ...w.floor(), compatibilityFlags: ON } },
          { name: "floor-node-off", options: { ...w.floor(), compatibilityFlags: OFF } },
        ]
      : []),
  ];
  const instructions = process.argv[2] === "--instructions" ? Number(process.argv[3] ?? 3) : 0;
  const n = instructions || s.coldSamples;
  log(`compatibility date ${COMPATIBILITY_DATE}; ${n} fresh workerd per configuration${instructions ? " under callgrind" : ""} (${specs.map((x) => x.name).join(", ")})`);
  const samples = instructions
    ? await countColdStarts(specs, instructions, work)
    : (await coldStart(specs, REQUEST1, { samples: s.coldSamples, outboundHop: s.outboundHop })).samples;
  const keys = instructions
    ? [
        ["ready_minstr", "start-up M instructions"],
        ["first_minstr", "first request M instructions"],
        ["total_minstr", "total M instructions"],
      ]
    : [
        ["cpu_ready_ms", "CPU start-up ms"],
        ["cpu_first_ms", "CPU first request ms"],
        ["cpu_total_ms", "CPU total ms"],
        ["ready_ms", "ready ms"],
        ["first_ms", "first ms"],
      ];
  console.log(`Cold start, compatibility date ${COMPATIBILITY_DATE}, ${n} fresh workerd per configuration (interleaved${instructions ? ", under callgrind" : ""}): median [min–max]`);
  console.log("");
  console.log(`| config | ${keys.map(([, h]) => h).join(" | ")} |`);
  console.log(`| --- | ${keys.map(() => "---:").join(" | ")} |`);
  for (const spec of specs) {
    const mine = samples.filter((x) => x.config === spec.name);
    const cell = (k) => {
      const v = mine.map((x) => x[k]);
      return `${fmt(median(v))} [${fmt(Math.min(...v))}–${fmt(Math.max(...v))}]`;
    };
    console.log(`| \`${spec.name}\` | ${keys.map(([k]) => cell(k)).join(" | ")} |`);
  }
  // The same sample's pair (started one after the other): on − off.
  console.log("");
  console.log("On − off, per sample (the two started one after the other): median [min–max]");
  console.log("");
  console.log(`| worker | ${keys.map(([, h]) => h).join(" | ")} |`);
  console.log(`| --- | ${keys.map(() => "---:").join(" | ")} |`);
  for (const worker of ["router", "floor"]) {
    const pairs = [];
    for (const x of samples.filter((y) => y.config === `${worker}-node-on`)) {
      const y = samples.find((z) => z.config === `${worker}-node-off` && z.sample === x.sample);
      if (y) pairs.push([x, y]);
    }
    if (!pairs.length) continue;
    const cell = (k) => {
      const d = pairs.map(([x, y]) => x[k] - y[k]);
      return `${fmt(median(d))} [${fmt(Math.min(...d))}–${fmt(Math.max(...d))}]`;
    };
    console.log(`| ${worker} | ${keys.map(([k]) => cell(k)).join(" | ")} |`);
  }
  return 0;
});
