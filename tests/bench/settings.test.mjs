// bench/driver/settings.mjs: the one place the driver reads its
// environment. Every BENCH_ variable the bench uses is declared there, and
// the defaults and the smoke run's apply as documented.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { ROOT, SETTINGS, commandLine, driverOptions, readSettings } from "../../bench/driver/settings.mjs";

test("defaults, the smoke run's defaults, and a variable given over both", () => {
  const plain = readSettings({});
  assert.deepEqual([plain.seconds, plain.rounds, plain.coldSamples, plain.streamMiB, plain.concurrency], [8, 3, 7, 1024, [8, 32]]);
  assert.equal(plain.record, true);
  assert.equal(plain.peersDir, join(ROOT, "..", "shared", "peers"));
  const quick = readSettings({ BENCH_QUICK: "1" });
  assert.deepEqual([quick.seconds, quick.rounds, quick.coldSamples, quick.streamMiB], [2, 1, 2, 256]);
  const given = readSettings({ BENCH_QUICK: "1", BENCH_SECONDS: "5", BENCH_CONCURRENCY: "4,16", BENCH_RECORD: "0", BENCH_PAIRED: "a:b" });
  assert.deepEqual([given.seconds, given.concurrency, given.record, given.paired], [5, [4, 16], false, [["a", "b"]]]);
  assert.throws(() => readSettings({ BENCH_ROUNDS: "three" }), /BENCH_ROUNDS=three: not a number/);
});

test("the JSON's options keep their shape", () => {
  const o = driverOptions(readSettings({ BENCH_INSTRUCTIONS_WARM: "12000", BENCH_V8_FLAGS: "--no-liftoff --no-maglev", BENCH_KEEP_WORK: "1" }));
  assert.deepEqual(Object.keys(o), ["seconds", "warmupSeconds", "rounds", "concurrency", "streamSmallMiB", "streamMiB", "extra", "skipStream", "wrkThreads", "coldSamples", "profile", "paired", "configs", "skipYardsticks", "traceYardsticks", "outboundHop", "keepWork", "instructions", "instr"]);
  assert.deepEqual(o.instr, { warm: 12000, windows: 3, requests: 1000, concurrency: 1, profile: false, profileTop: 40, v8Flags: ["--no-liftoff", "--no-maglev"], keep: true });
});

test("the command line names the settings given, quoted, and none set by the bench itself", () => {
  const line = commandLine({ BENCH_SKIP_BUILD: "1", BENCH_V8_FLAGS: "--a --b", BENCH_NATIVE_OUTPUT: "target/bench/native.txt", BENCH_RUN_STARTED: "1", PATH: "/bin" });
  assert.equal(line, "BENCH_SKIP_BUILD=1 BENCH_V8_FLAGS='--a --b' bash bench/run.sh");
  assert.equal(commandLine({}), "bash bench/run.sh");
});

/** Every file under `dir`, recursively. */
const files = (dir) => readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(join(dir, e.name)) : [join(dir, e.name)]));

test("every BENCH_ variable used under bench/ is declared, and every declared one is used", () => {
  const declared = new Set(SETTINGS.map((s) => s.name));
  const used = new Set();
  for (const file of files(join(ROOT, "bench")).filter((f) => /\.(mjs|sh|lua)$/.test(f) && !f.endsWith("settings.mjs"))) {
    for (const m of readFileSync(file, "utf8").matchAll(/\bBENCH_[A-Z0-9_]*[A-Z0-9]\b/g)) {
      // BENCH_JSON is the marker wrk's scripts print, not a setting.
      if (m[0] !== "BENCH_JSON") used.add(m[0]);
    }
  }
  assert.deepEqual([...used].filter((n) => !declared.has(n)), [], "used but not in bench/driver/settings.mjs");
  // Read by the driver through readSettings; the rest by name somewhere.
  const unused = SETTINGS.filter((s) => !s.key && !used.has(s.name)).map((s) => s.name);
  assert.deepEqual(unused, []);
  const runSh = readFileSync(join(ROOT, "bench", "run.sh"), "utf8");
  const notInRunSh = SETTINGS.filter((s) => ["run.sh", "both"].includes(s.by) && !runSh.includes(`\${${s.name}`)).map((s) => s.name);
  assert.deepEqual(notInRunSh, [], "said to be read by bench/run.sh, which does not");
});

test("the driver reads its settings nowhere but bench/driver/settings.mjs", () => {
  const driver = [join(ROOT, "bench", "driver.mjs"), ...files(join(ROOT, "bench", "driver"))].filter((f) => !f.endsWith("settings.mjs"));
  for (const file of driver) {
    assert.doesNotMatch(readFileSync(file, "utf8"), /env(\.|\[")BENCH_/, file);
  }
});
