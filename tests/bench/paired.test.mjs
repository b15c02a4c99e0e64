// bench/paired.mjs's arithmetic, with stand-in instances and load: fresh
// instances per measurement, which configuration starts each round, the
// per-request CPU from workerd's clock ticks, the medians, and the
// target lines. (The load itself is wrk against
// workerd: `BENCH_PAIRED=… bash bench/run.sh`, docs/benchmark.md.)
import { test } from "node:test";
import assert from "node:assert/strict";
import { parsePairs, pairedRuns, targetLines } from "../../bench/paired.mjs";

test("BENCH_PAIRED is parsed into pairs, and a malformed pair is refused", () => {
  assert.deepEqual(parsePairs("token-warm:floor-log,cells:token-warm"), [
    ["token-warm", "floor-log"],
    ["cells", "token-warm"],
  ]);
  assert.deepEqual(parsePairs(""), []);
  for (const bad of ["token-warm", "a:b:c", ":b", "a:"]) {
    assert.throws(() => parsePairs(bad), /is not a:b/, bad);
  }
});

/**
 * Instances started by `fresh`: the n-th instance of a configuration
 * advances its CPU clock `ticksPerRequest[n]` ticks per request while
 * loaded (the last figure repeats); the load serves `requests` per run.
 */
function standIn(spec, requests = 1000) {
  const live = new Map();
  const started = [];
  const retired = [];
  let pid = 100;
  const fresh = async (name) => {
    const n = started.filter((x) => x === name).length;
    started.push(name);
    const t = { name, pid: pid++, ticks: 0, user: 0, per: spec[name][Math.min(n, spec[name].length - 1)] };
    live.set(t.pid, t);
    return t;
  };
  const retire = async (t) => {
    live.delete(t.pid);
    retired.push(t.pid);
  };
  const load = async (target, concurrency, seconds) => {
    assert.ok(live.has(target.pid), "loaded after it was retired");
    target.ticks += target.per * requests;
    target.user += (target.per * requests) / 2;
    return { requests, rps: requests / seconds, errors: 0 };
  };
  const cpuTicks = (pid) => {
    const t = live.get(pid);
    return { cpuTicks: t.ticks, userTicks: t.user };
  };
  return { started, retired, live, fresh, retire, load, cpuTicks };
}

test("each measurement starts two fresh instances, alternating which starts, and the medians are of a − b", async () => {
  // 1 tick per request = 1000 µs at 1000 ticks/s; a's instances cost 0.9,
  // 0.7, 0.8 ticks per request in rounds 1-3, b's always 0.6.
  const { started, retired, live, fresh, retire, load, cpuTicks } = standIn({ a: [0.9, 0.7, 0.8], b: [0.6] });
  const { runs, summary, errors } = await pairedRuns({
    pairs: [["a", "b"]],
    fresh,
    retire,
    rounds: 3,
    concurrency: [8],
    seconds: 2,
    warmupSeconds: 0,
    load,
    cpuTicks,
    ticksPerSecond: 1000,
    log: () => {},
  });
  assert.deepEqual(started, ["a", "b", "b", "a", "a", "b"]);
  assert.equal(retired.length, 6);
  assert.equal(live.size, 0);
  assert.equal(errors, 0);
  assert.deepEqual(
    runs.map((r) => Math.round(r.cpu_extra_us)),
    [300, 100, 200],
  );
  assert.equal(summary.length, 1);
  const [row] = summary;
  assert.equal(Math.round(row.cpu_extra_us), 200);
  assert.equal(Math.round(row.cpu_extra_us_min), 100);
  assert.equal(Math.round(row.cpu_extra_us_max), 300);
  assert.equal(Math.round(row.user_extra_us), 100);
  assert.equal(Math.round(row.a_cpu_us_per_req), 800);
  assert.equal(row.rps_ratio, 1);
});

test("a configuration that fails to start fails the run, and what was started is stopped", async () => {
  const { started, retired, live, fresh, retire, load, cpuTicks } = standIn({ a: [1] });
  const failing = async (name) => (name === "broken" ? Promise.reject(new Error("workerd did not start")) : fresh(name));
  await assert.rejects(
    pairedRuns({ pairs: [["a", "broken"]], fresh: failing, retire, rounds: 1, concurrency: [8], seconds: 1, warmupSeconds: 0, load, cpuTicks, ticksPerSecond: 100, log: () => {} }),
    /workerd did not start/,
  );
  assert.deepEqual(started, ["a"]);
  assert.equal(retired.length, 1);
  assert.equal(live.size, 0);
});

test("target lines say met or NOT met for the pairs the targets name, and nothing for others", () => {
  const row = (a, b, cpu_extra_us, rps_ratio = 1) => ({ concurrency: 8, a, b, cpu_extra_us, rps_ratio });
  const lines = targetLines([
    row("token-warm", "peer-log", 3.5, 1.05),
    row("cells", "peer-log", -2, 0.98),
    row("token-warm", "floor-log", 9.5),
    row("token-warm", "base-token-warm", -30),
  ]);
  assert.equal(lines.length, 4);
  assert.match(lines[0], /c=8 token-warm: 1\.050× peer-log req\/s \(target ≥ 1\.00: met\)/);
  assert.match(lines[1], /c=8 token-warm: CPU 3\.5 µs over peer-log \(target ≤ 0: NOT met\)/);
  assert.match(lines[2], /c=8 cells: 0\.980× peer-log req\/s \(target ≥ 1\.00: NOT met\)/);
  assert.match(lines[3], /c=8 cells: CPU -2\.0 µs over peer-log \(target ≤ 0: met\)/);
});
