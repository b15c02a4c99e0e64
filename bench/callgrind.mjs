// BENCH_INSTRUCTIONS mode's parts: workerd run under valgrind's callgrind,
// which counts the instructions it executes (every thread, JIT-compiled
// JavaScript and wasm included) instead of timing them. The count for the
// same requests moves by about 1 % between runs whatever else the machine
// does, where CPU time moves by ±30 %, so differences of a few µs that the
// timed rounds cannot resolve show up.
//
// Miniflare starts `MINIFLARE_WORKERD_PATH` with workerd's arguments and
// the config (a binary Cap'n Proto message) on stdin; `writeLauncher`
// writes a shell script for it that saves the config (with V8 flags added
// when asked: `--perf-basic-prof` names the JIT code for the profile) and
// execs valgrind on workerd with that file as its stdin, so the PID
// Miniflare stops is valgrind's.
//
//   node bench/callgrind.mjs patch-config <v8 flag>... < config > patched
import { execFileSync } from "node:child_process";
import { chmodSync, closeSync, existsSync, fstatSync, openSync, readdirSync, readFileSync, readSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const SELF = fileURLToPath(import.meta.url);

/** What `/proc/PID/comm` says for a process valgrind's callgrind runs. */
export const CALLGRIND_COMM = "callgrind-amd64";

/**
 * Writes `<dir>/workerd` for MINIFLARE_WORKERD_PATH: workerd under
 * callgrind, its output in `<dir>/cg.<pid>.out*`. With `v8Flags`, the
 * config gets them (`--perf-basic-prof` writes /tmp/perf-<pid>.map).
 * `instrLevel`: per-instruction counts, which the profile needs.
 */
export function writeLauncher(dir, { workerd, v8Flags = [], instrLevel = false }) {
  const path = join(dir, "workerd");
  const q = (s) => `'${String(s).replaceAll("'", `'\\''`)}'`;
  const vg = [
    "valgrind",
    "--tool=callgrind",
    `--callgrind-out-file=${dir}/cg.%p.out`,
    "--separate-threads=yes",
    "--dump-line=no",
    ...(instrLevel ? ["--dump-instr=yes", "--compress-pos=no", "--compress-strings=no"] : []),
  ];
  const patch = v8Flags.length ? `${q(process.execPath)} ${q(SELF)} patch-config ${v8Flags.map(q).join(" ")}` : "cat";
  writeFileSync(
    path,
    `#!/bin/sh
# Written by bench/callgrind.mjs: workerd under callgrind, config from stdin.
set -e
config=${q(dir)}/config.$$.bin
${patch} > "$config"
exec ${vg.map(q).join(" ")} ${q(workerd)} "$@" < "$config" 2>>${q(dir)}/valgrind.log
`,
  );
  chmodSync(path, 0o755);
  return path;
}

/**
 * Adds V8 flags to a workerd config (`Config.v8Flags`, pointer 2 of the
 * root struct, which Miniflare leaves empty or null): the list and its strings go
 * in a new segment, reached by a far pointer, so nothing else moves.
 */
export function patchV8Flags(buf, flags) {
  const u32 = (o) => buf.readUInt32LE(o);
  const segments = u32(0) + 1;
  const tableWords = Math.ceil((4 + 4 * segments) / 8);
  const sizes = Array.from({ length: segments }, (_, i) => u32(4 + 4 * i));
  const seg0 = tableWords * 8;
  const root = buf.readBigUInt64LE(seg0);
  if ((root & 3n) !== 0n) throw new Error("config: the root pointer is not a plain struct pointer");
  const offset = Number(BigInt.asIntN(30, (root >> 2n) & 0x3fffffffn));
  const dataWords = Number((root >> 32n) & 0xffffn);
  const ptrWords = Number((root >> 48n) & 0xffffn);
  if (ptrWords < 3) throw new Error("config: no v8Flags pointer in the root struct");
  const slot = seg0 + 8 * (1 + offset + dataWords + 2);
  // Miniflare writes an empty list (a list pointer of length 0) when
  // MINIFLARE_WORKERD_V8_FLAGS is unset: as good as none.
  const current = buf.readBigUInt64LE(slot);
  const emptyList = (current & 3n) === 1n && current >> 35n === 0n;
  if (current !== 0n && !emptyList) throw new Error("config: v8Flags is already set");

  // The new segment: a landing pad, the list of text pointers, the texts.
  const texts = flags.map((f) => Buffer.from(`${f}\0`));
  const textWords = texts.map((t) => Math.ceil(t.length / 8));
  const words = 1 + flags.length + textWords.reduce((a, b) => a + b, 0);
  const seg = Buffer.alloc(words * 8);
  const listPtr = (offsetWords, elemSize, count) =>
    1n | (BigInt(offsetWords) << 2n) | (BigInt(elemSize) << 32n) | (BigInt(count) << 35n);
  seg.writeBigUInt64LE(listPtr(0, 6, flags.length), 0); // pad → the list right after it
  let at = 1 + flags.length;
  texts.forEach((t, i) => {
    seg.writeBigUInt64LE(listPtr(at - (1 + i + 1), 2, t.length), 8 * (1 + i));
    t.copy(seg, 8 * at);
    at += textWords[i];
  });
  // Far pointer: landing pad at word 0 of segment `segments`.
  const far = 2n | (0n << 3n) | (BigInt(segments) << 32n);

  const newTableWords = Math.ceil((4 + 4 * (segments + 1)) / 8);
  const table = Buffer.alloc(newTableWords * 8);
  table.writeUInt32LE(segments, 0);
  sizes.forEach((s, i) => table.writeUInt32LE(s, 4 + 4 * i));
  table.writeUInt32LE(words, 4 + 4 * segments);
  const body = Buffer.from(buf.subarray(seg0));
  body.writeBigUInt64LE(far, slot - seg0);
  return Buffer.concat([table, body, seg]);
}

/** The process callgrind runs for this launcher directory (from its output file's name). */
export function callgrindPid(dir) {
  const f = readdirSync(dir).find((n) => /^cg\.\d+\.out$/.test(n));
  if (!f) throw new Error(`no callgrind output in ${dir} (see ${dir}/valgrind.log)`);
  return Number(f.split(".")[1]);
}

/** Dumps (and zeroes) the counters: the next part's files appear. */
export function dumpCounters(pid) {
  execFileSync("callgrind_control", ["-d", String(pid)], { stdio: "ignore" });
}

/** The files of one dump (`part`), one per thread: `cg.<pid>.out.<part>-<thread>`. */
function partFiles(dir, pid, part) {
  const prefix = `cg.${pid}.out.${part}-`;
  return readdirSync(dir)
    .filter((n) => n.startsWith(prefix))
    .map((n) => ({ thread: Number(n.slice(prefix.length)), path: join(dir, n) }));
}

/** 4 KiB of a file: its start or its end. */
function slice(path, fromEnd) {
  const fd = openSync(path, "r");
  try {
    const size = fstatSync(fd).size;
    const buf = Buffer.alloc(Math.min(4096, size));
    readSync(fd, buf, 0, buf.length, fromEnd ? size - buf.length : 0);
    return buf.toString("utf8");
  } finally {
    closeSync(fd);
  }
}
const head = (path) => slice(path, false);
const tail = (path) => slice(path, true);

/** Waits until a dump's files are there (callgrind writes them when it next runs). */
export async function waitForPart(dir, pid, part, timeoutMs = 60000) {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    const files = partFiles(dir, pid, part);
    if (files.length && files.every((f) => /^totals: \d+/m.test(tail(f.path)))) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`callgrind dump ${part} of ${pid} did not appear`);
}

/** A dump file's total (its header's `summary:` line). */
const summaryOf = (path) => Number(head(path).match(/^summary: (\d+)/m)?.[1] ?? 0);

/** Instructions in one dump: the main thread (1: the isolate's) and all threads. */
export function partCounts(dir, pid, part) {
  const files = partFiles(dir, pid, part);
  const main = files.find((f) => f.thread === 1);
  return { main: main ? summaryOf(main.path) : 0, all: files.reduce((a, f) => a + summaryOf(f.path), 0) };
}

/**
 * Self instructions per function in a dump's main-thread file, JIT code
 * named from V8's perf map (`--perf-basic-prof`). Returns [name, count]
 * pairs, largest first; names are prefixed `wasm`, `js`, `builtin` or the
 * native object (`workerd`, `libc.so.6`, …).
 */
export function selfCostByFunction(dir, pid, part, perfMap) {
  const jit = [];
  if (perfMap && existsSync(perfMap)) {
    for (const line of readFileSync(perfMap, "utf8").split("\n")) {
      const m = line.match(/^([0-9a-f]+) ([0-9a-f]+) (.*)$/);
      if (m) jit.push([parseInt(m[1], 16), parseInt(m[2], 16), m[3]]);
    }
    jit.sort((a, b) => a[0] - b[0]);
  }
  const jitName = (addr) => {
    let lo = 0;
    let hi = jit.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (jit[mid][0] <= addr) lo = mid + 1;
      else hi = mid - 1;
    }
    const e = jit[hi];
    if (!e || addr >= e[0] + e[1]) return null;
    const n = e[2];
    if (/^JS:.*-(liftoff|turbofan)$/.test(n) && !n.includes(".mjs") && !n.includes(".js:")) return `wasm ${n.slice(3)}`;
    if (n.startsWith("Builtin:") || n.startsWith("BytecodeHandler:")) return `builtin ${n.slice(n.indexOf(":") + 1)}`;
    return `js ${n.replace(/^JS:/, "")}`;
  };
  const main = partFiles(dir, pid, part).find((f) => f.thread === 1);
  const cost = new Map();
  let ob = "";
  let fn = "";
  let afterCall = false;
  for (const line of readFileSync(main.path, "utf8").split("\n")) {
    if (line.startsWith("ob=")) ob = line.slice(3).split("/").pop();
    else if (line.startsWith("fn=")) fn = line.slice(3);
    else if (line.startsWith("calls=")) afterCall = true;
    else if (line.startsWith("0x")) {
      if (afterCall) {
        afterCall = false; // a call's inclusive cost, not this function's own
        continue;
      }
      const [a, c] = line.split(" ");
      // callgrind names native code (its object can be "???" all the
      // same); JIT code is an address, named from the perf map.
      const name = !fn.startsWith("0x")
        ? `${ob === "???" ? "" : `${ob} `}${fn}`
        : (jitName(parseInt(a, 16)) ?? "JIT code not in the perf map (stubs, jump tables)");
      cost.set(name, (cost.get(name) ?? 0) + Number(c));
    }
  }
  return [...cost].sort((a, b) => b[1] - a[1]);
}

if (process.argv[1] === SELF && process.argv[2] === "patch-config") {
  const chunks = [];
  for await (const c of process.stdin) chunks.push(c);
  process.stdout.write(patchV8Flags(Buffer.concat(chunks), process.argv.slice(3)));
}
