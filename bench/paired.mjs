// BENCH_PAIRED mode: two configurations loaded at the same time, one wrk
// each, so whatever else the machine does (another build, the other
// configuration's own load, CPU frequency) weighs on both alike. On a
// shared 2-core machine the CPU per request of one configuration moves by
// ±100 µs between sequential runs; the difference between two
// configurations measured side by side moves far less, and it is the
// difference the warm targets are about.
//
// Every measurement starts both configurations afresh: a workerd instance
// kept for all rounds carries its own lasting offset (where its heap and
// code landed), and an A/A run (the same build on both sides) came out at
// +67 and +89 µs for whichever instance happened to be `a`.

/** The median of numbers (the mean of the middle two for an even count). */
export const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

/**
 * Parses `a:b,c:d` into pairs of configuration names.
 * @returns {[string, string][]}
 */
export function parsePairs(text) {
  return text
    .split(",")
    .filter(Boolean)
    .map((pair) => {
      const names = pair.split(":");
      if (names.length !== 2 || !names[0] || !names[1]) throw new Error(`BENCH_PAIRED: "${pair}" is not a:b`);
      return names;
    });
}

/**
 * Runs every pair `rounds` times at each concurrency (the pair's order
 * alternates per round) and returns per-round runs and per-pair medians of
 * `a − b` (CPU µs per request) and `a / b` (req/s).
 *
 * `fresh(name)` starts (and warms) an instance of a configuration,
 * resolving to `{name, pid, …}`, and `retire(target)` stops it: each
 * measurement gets two new instances, started in the pair's order.
 * `load(target, concurrency, seconds)` runs wrk and resolves to
 * `{requests, rps, errors}`; `cpuTicks(pid)` (`{cpuTicks, userTicks}`)
 * and `ticksPerSecond` read workerd's CPU.
 */
export async function pairedRuns({ pairs, fresh, retire, rounds, concurrency, seconds, warmupSeconds, load, cpuTicks, ticksPerSecond, log }) {
  const runs = [];
  for (let round = 1; round <= rounds; round++) {
    for (const c of concurrency) {
      for (const [aName, bName] of pairs) {
        const pair = [];
        try {
          for (const name of round % 2 ? [aName, bName] : [bName, aName]) pair.push(await fresh(name));
          runs.push(await measurePair(pair, aName, bName, round, c));
        } finally {
          for (const t of pair) await retire(t);
        }
      }
    }
  }

  async function measurePair(pair, aName, bName, round, c) {
    if (warmupSeconds > 0) {
      await Promise.all(pair.map((t) => load(t, c, warmupSeconds)));
      await new Promise((r) => setTimeout(r, 500));
    }
    const cpu0 = pair.map((t) => cpuTicks(t.pid));
    const results = await Promise.all(pair.map((t) => load(t, c, seconds)));
    const cpu1 = pair.map((t) => cpuTicks(t.pid));
    const m = Object.fromEntries(
      pair.map((t, i) => [
        t.name,
        {
          rps: results[i].rps,
          errors: results[i].errors,
          cpu_us_per_req: ((cpu1[i].cpuTicks - cpu0[i].cpuTicks) * 1e6) / ticksPerSecond / Math.max(1, results[i].requests),
          user_us_per_req: ((cpu1[i].userTicks - cpu0[i].userTicks) * 1e6) / ticksPerSecond / Math.max(1, results[i].requests),
        },
      ]),
    );
    const a = m[aName];
    const b = m[bName];
    const run = {
      round,
      concurrency: c,
      a: aName,
      b: bName,
      a_cpu_us_per_req: a.cpu_us_per_req,
      b_cpu_us_per_req: b.cpu_us_per_req,
      cpu_extra_us: a.cpu_us_per_req - b.cpu_us_per_req,
      user_extra_us: a.user_us_per_req - b.user_us_per_req,
      a_rps: a.rps,
      b_rps: b.rps,
      rps_ratio: a.rps / b.rps,
      errors: a.errors + b.errors,
    };
    log(`paired round ${round} c=${c} ${aName} vs ${bName}: ${a.cpu_us_per_req.toFixed(0)} vs ${b.cpu_us_per_req.toFixed(0)} µs CPU/req (${run.cpu_extra_us >= 0 ? "+" : ""}${run.cpu_extra_us.toFixed(0)}; user ${a.user_us_per_req.toFixed(0)} vs ${b.user_us_per_req.toFixed(0)}), req/s ×${run.rps_ratio.toFixed(2)}${run.errors ? `, ${run.errors} ERRORS` : ""}`);
    return run;
  }
  const summary = [];
  for (const c of concurrency) {
    for (const [aName, bName] of pairs) {
      const rs = runs.filter((r) => r.concurrency === c && r.a === aName && r.b === bName);
      summary.push({
        concurrency: c,
        a: aName,
        b: bName,
        rounds: rs.length,
        a_cpu_us_per_req: median(rs.map((r) => r.a_cpu_us_per_req)),
        b_cpu_us_per_req: median(rs.map((r) => r.b_cpu_us_per_req)),
        cpu_extra_us: median(rs.map((r) => r.cpu_extra_us)),
        cpu_extra_us_min: Math.min(...rs.map((r) => r.cpu_extra_us)),
        cpu_extra_us_max: Math.max(...rs.map((r) => r.cpu_extra_us)),
        user_extra_us: median(rs.map((r) => r.user_extra_us)),
        cpu_ratio: median(rs.map((r) => r.a_cpu_us_per_req / r.b_cpu_us_per_req)),
        rps_ratio: median(rs.map((r) => r.rps_ratio)),
      });
    }
  }
  return { runs, summary, errors: runs.reduce((n, r) => n + r.errors, 0) };
}

/**
 * The warm targets (issue 54) a pair against `peer-log` measures: the
 * router at least as fast, and no more CPU than `peer-log` (so no more
 * over `floor-log` either: both sides pay the same floor).
 */
const AGAINST_PEER_LOG = (x) => [
  [`${x.rps_ratio.toFixed(3)}× peer-log req/s`, "≥ 1.00", x.rps_ratio >= 1],
  [`CPU ${x.cpu_extra_us.toFixed(1)} µs over peer-log`, "≤ 0", x.cpu_extra_us <= 0],
];
const TARGETS = {
  "token-warm:peer-log": AGAINST_PEER_LOG,
  "cells:peer-log": AGAINST_PEER_LOG,
};

/** One line per target a summary row measures. */
export function targetLines(summary) {
  return summary
    .filter((x) => TARGETS[`${x.a}:${x.b}`])
    .flatMap((x) =>
      TARGETS[`${x.a}:${x.b}`](x).map(([what, target, ok]) => `   c=${x.concurrency} ${x.a}: ${what} (target ${target}: ${ok ? "met" : "NOT met"})`),
    );
}
