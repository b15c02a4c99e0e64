// Every setting of `bash bench/run.sh`, in one object: its environment
// variable, its default (and the smoke run's, BENCH_QUICK=1), what it
// means, and who reads it (the driver, bench/run.sh, or both). The driver
// reads the environment here and nowhere else; docs/benchmark.md's table of
// settings is this object printed (`node bench/driver/settings.mjs`), and
// tests/bench/settings.test.mjs fails when the two differ or when a BENCH_
// variable used under bench/ is missing here.
import { resolve, join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { parsePairs } from "../paired.mjs";

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

const flag = (text) => text === "1";
const number = (text, name) => {
  const n = Number(text);
  if (!Number.isFinite(n)) throw new Error(`${name}=${text}: not a number`);
  return n;
};
const list = (text) => text.split(",").filter(Boolean);
const numbers = (text, name) => list(text).map((t) => number(t, name));
const words = (t) => t.split(" ").filter(Boolean);
const text = (t) => t;

/**
 * name: the environment variable; key: the property of readSettings()'s
 * answer; default (and quick: the default under BENCH_QUICK=1), as the
 * text the variable would hold; parse: text → value; by: "driver",
 * "run.sh" or both; internal: set by bench/run.sh or the driver, not by
 * hand; meaning: what it does (docs/benchmark.md's table).
 */
export const SETTINGS = [
  { name: "BENCH_QUICK", key: "quick", default: "", parse: flag, by: "driver", meaning: "`1`: a smoke run, with the defaults in brackets" },
  { name: "BENCH_SECONDS", key: "seconds", default: "8", quick: "2", parse: number, by: "driver", meaning: "seconds of each measured wrk run (and of each profiled or paired run)" },
  { name: "BENCH_WARMUP_SECONDS", key: "warmupSeconds", default: "1", parse: number, by: "driver", meaning: "unmeasured wrk seconds before each measured run" },
  { name: "BENCH_ROUNDS", key: "rounds", default: "3", quick: "1", parse: number, by: "driver", meaning: "rounds of every configuration at every concurrency; the configuration order rotates each round" },
  { name: "BENCH_CONCURRENCY", key: "concurrency", default: "8,32", parse: numbers, by: "driver", meaning: "wrk connections, comma-separated: one measured run at each" },
  { name: "BENCH_WRK_THREADS", key: "wrkThreads", default: "2", parse: number, by: "driver", meaning: "wrk threads (never more than the connections)" },
  { name: "BENCH_CONFIGS", key: "configs", default: "", parse: list, by: "driver", meaning: "only these configurations, comma-separated, plus `null`, `floor-log`, `peer-log`, `rust-floor` and `workers-rs` (the baselines); empty: all but the shadow evaluation's (`*-shadow*`, run only when named). Under `BENCH_SCALE`: only these scale variants (`scale-cells-1000`, …)" },
  { name: "BENCH_SKIP_YARDSTICKS", key: "skipYardsticks", default: "", parse: flag, by: "driver", meaning: "`1` with `BENCH_CONFIGS`: leave the baselines out too (two builds compared)" },
  { name: "BENCH_EXTRA", key: "extra", default: "", parse: flag, by: "driver", meaning: "`1`: add `rust-null`, `null-log`, `cold-nocache` and `token-warm-signed`" },
  { name: "BENCH_PEERS_DIR", key: "peersDir", default: "../shared/peers", parse: (t) => resolve(ROOT, t), by: "both", meaning: "where `js-floor.mjs` and `js-router.mjs` are (relative to the repository); missing: the floor and peer rows are skipped" },
  { name: "BENCH_TRACE_YARDSTICKS", key: "traceYardsticks", default: "", parse: flag, by: "driver", meaning: "`1`: the floor and the peer also send and log a request id and a `traceparent`, as SPEC §11 asks of every router (`bench/trace-yardsticks.mjs`)" },
  { name: "BENCH_OUTBOUND_HOP", key: "outboundHop", default: "", parse: flag, by: "driver", meaning: "`1`: every worker's outbound `fetch` through Miniflare's `strip-cf-connecting-ip` worker (see Caveats)" },
  { name: "BENCH_BASE_BUILD", key: "baseBuild", default: "", parse: (t) => (t ? resolve(ROOT, t) : ""), by: "driver", meaning: "a copy of `build/` from another commit: adds `base-passthrough`, `base-token-warm`, `base-cells` and base cold-start rows, run from that copy beside this build" },
  { name: "BENCH_BASE_METRICS", key: "baseMetrics", default: "1", parse: flag, by: "driver", meaning: "`0`: the `base-*` rows run without the `ROUTER_METRICS` dataset bound, so `BENCH_BASE_BUILD=build BENCH_BASE_METRICS=0` measures what the metrics data point costs within one build" },
  { name: "BENCH_COLD_SAMPLES", key: "coldSamples", default: "7", quick: "2", parse: number, by: "driver", meaning: "fresh workerd processes per configuration for the cold start; `0` skips it" },
  { name: "BENCH_STREAM_SMALL_MIB", key: "streamSmallMiB", default: "64", parse: number, by: "driver", meaning: "the smaller streamed upload and download, MiB" },
  { name: "BENCH_STREAM_MIB", key: "streamMiB", default: "1024", quick: "256", parse: number, by: "driver", meaning: "the larger streamed upload and download, MiB" },
  { name: "BENCH_SKIP_STREAM", key: "skipStream", default: "", parse: flag, by: "driver", meaning: "`1`: no streaming and memory part" },
  { name: "BENCH_SKIP_BUILD", key: "skipBuild", default: "", parse: flag, by: "run.sh", meaning: "set (to anything): use `build/`, `target/release/devstack`, the Rust yardsticks (and `target/worker-scale/`) as they are" },
  { name: "BENCH_SKIP_NATIVE", key: "skipNative", default: "", parse: flag, by: "run.sh", meaning: "set (to anything): no native rules bench" },
  { name: "BENCH_RECORD", key: "record", default: "1", parse: flag, by: "driver", meaning: "`0`: leave the results table in docs/benchmark.md alone (a timed run rewrites it otherwise)" },
  { name: "BENCH_PROFILE", key: "profile", default: "", parse: list, by: "driver", meaning: "configurations to profile (V8 CPU profile through the inspector) instead of the timed run" },
  { name: "BENCH_PAIRED", key: "paired", default: "", parse: (t) => parsePairs(t), by: "driver", meaning: "pairs `a:b,…` loaded side by side instead of the timed run" },
  { name: "BENCH_INSTRUCTIONS", key: "instructions", default: "", parse: flag, by: "both", meaning: "`1`: instructions per request under callgrind instead of the timed run (bench/run.sh installs valgrind)" },
  { name: "BENCH_INSTRUCTIONS_WARM", key: "instrWarm", default: "2000", parse: number, by: "driver", meaning: "requests sent to a counted configuration before counting" },
  { name: "BENCH_INSTRUCTIONS_WINDOWS", key: "instrWindows", default: "3", parse: number, by: "driver", meaning: "counted windows per configuration" },
  { name: "BENCH_INSTRUCTIONS_REQUESTS", key: "instrRequests", default: "1000", parse: number, by: "driver", meaning: "requests per counted window" },
  { name: "BENCH_INSTRUCTIONS_CONCURRENCY", key: "instrConcurrency", default: "1", parse: number, by: "driver", meaning: "requests in flight while counting" },
  { name: "BENCH_INSTRUCTIONS_PROFILE", key: "instrProfile", default: "", parse: flag, by: "driver", meaning: "`1`: also the instructions per function (the last window)" },
  { name: "BENCH_INSTRUCTIONS_TOP", key: "instrTop", default: "40", parse: number, by: "driver", meaning: "functions listed by `BENCH_INSTRUCTIONS_PROFILE`" },
  { name: "BENCH_V8_FLAGS", key: "v8Flags", default: "", parse: words, by: "driver", meaning: "more V8 flags for each counted workerd, space-separated; what V8 logs goes to the configuration's `v8.log`" },
  { name: "BENCH_SCALE", key: "scale", default: "", parse: flag, by: "both", meaning: "`1`: the scale run instead of the timed run: the first request (cold start CPU, `BENCH_COLD_SAMPLES` each) and a warm one (instructions, the `BENCH_INSTRUCTIONS_*` settings) at 10, 100 and 1,000 cells, 100, 1,000 and 10,000 cache entries, 33, 50 and 200 rules, on a `test-rulesets` build in `target/worker-scale/` (bench/run.sh builds it and installs valgrind)" },
  { name: "BENCH_KEEP_WORK", key: "keepWork", default: "", parse: flag, by: "driver", meaning: "`1`: keep the run's directory under the system temp directory (topology, mix, callgrind files, V8's perf map)" },
  { name: "DEVSTACK_BIN", key: "devstack", default: "target/release/devstack", parse: (t) => resolve(ROOT, t), by: "driver", meaning: "the devstack binary (sink and Topology Service)" },
  { name: "BENCH_NATIVE_OUTPUT", key: "nativeOutput", default: "", parse: text, by: "driver", internal: true, meaning: "the native bench's output, for the driver to read (set by bench/run.sh)" },
  { name: "BENCH_RUN_STARTED", key: "runStarted", default: "", parse: (t) => (t ? number(t, "BENCH_RUN_STARTED") : null), by: "driver", internal: true, meaning: "when bench/run.sh started, Unix seconds, for the recorded duration (set by bench/run.sh)" },
  { name: "BENCH_MIX_FILE", key: null, default: "", parse: text, by: "wrk", internal: true, meaning: "the request mix, for `bench/wrk/*.lua` (set by the driver)" },
  { name: "BENCH_COLD_BASE", key: null, default: "", parse: text, by: "wrk", internal: true, meaning: "a session-prefix base no earlier wrk run used, for `bench/wrk/cold.lua` (set by the driver)" },
];

/** The settings' values: `{ quick, seconds, …, set }`, `set` naming the variables given (non-empty). */
export function readSettings(env = process.env) {
  const given = (name) => env[name] !== undefined && env[name] !== "";
  const quick = given("BENCH_QUICK") && flag(env.BENCH_QUICK);
  const out = { set: SETTINGS.filter((s) => !s.internal && given(s.name)).map((s) => s.name) };
  for (const s of SETTINGS) {
    if (!s.key) continue;
    const raw = given(s.name) ? env[s.name] : quick && s.quick !== undefined ? s.quick : s.default;
    out[s.key] = s.parse(raw, s.name);
  }
  return out;
}

/**
 * The options object the driver has always written into its JSON
 * (`meta.options` of target/bench/latest.json, `options` of paired.json
 * and instructions.json), from readSettings()'s values.
 */
export function driverOptions(s) {
  return {
    seconds: s.seconds,
    warmupSeconds: s.warmupSeconds,
    rounds: s.rounds,
    concurrency: s.concurrency,
    streamSmallMiB: s.streamSmallMiB,
    streamMiB: s.streamMiB,
    extra: s.extra,
    skipStream: s.skipStream,
    wrkThreads: s.wrkThreads,
    coldSamples: s.coldSamples,
    profile: s.profile,
    paired: s.paired,
    configs: s.configs,
    skipYardsticks: s.skipYardsticks,
    traceYardsticks: s.traceYardsticks,
    outboundHop: s.outboundHop,
    keepWork: s.keepWork,
    instructions: s.instructions,
    instr: {
      warm: s.instrWarm,
      windows: s.instrWindows,
      requests: s.instrRequests,
      concurrency: s.instrConcurrency,
      profile: s.instrProfile,
      profileTop: s.instrTop,
      v8Flags: s.v8Flags,
      keep: s.keepWork,
    },
  };
}

/** The command that ran, as a user would type it: the settings given, then `bash bench/run.sh`. */
export function commandLine(env = process.env) {
  const quote = (v) => (/^[A-Za-z0-9_.,:/=@+-]*$/.test(v) ? v : `'${v.replaceAll("'", `'\\''`)}'`);
  const given = readSettings(env).set.map((name) => `${name}=${quote(env[name])}`);
  return [...given, "bash bench/run.sh"].join(" ");
}

/** docs/benchmark.md's table of settings, in Markdown. */
export function settingsTable() {
  const cell = (s) => {
    if (s.default === "" && s.quick === undefined) return "";
    return `\`${s.default || '""'}\`${s.quick !== undefined ? ` (\`${s.quick}\`)` : ""}`;
  };
  const rows = SETTINGS.filter((s) => !s.internal).map((s) => `| \`${s.name}\` | ${cell(s)} | ${s.by} | ${s.meaning} |`);
  const internal = SETTINGS.filter((s) => s.internal).map((s) => `\`${s.name}\``);
  return [
    "| variable | default (quick) | read by | meaning |",
    "|---|---|---|---|",
    ...rows,
    "",
    `Set by the bench itself, not by hand: ${internal.join(", ")} (\`bench/driver/settings.mjs\` says what each carries).`,
  ].join("\n");
}

if (process.argv[1] === fileURLToPath(import.meta.url)) console.log(settingsTable());
