// The soak's per-interval samples, for its report (bench/report/soak-report.mjs):
// per interval of the run (1 s by default), by when each operation
// started, the operations and documented failure paths the per-phase rows
// count, the failures by kind, the plain requests' p50 and p99, and each
// workerd generation's RSS. The JSON keeps only what is non-zero.

/**
 * The per-phase counters (soak.mjs's `stats` rows) also counted per
 * interval: the operations, and the documented failure paths (not
 * failures). Failures are counted per interval by their kind (`failure`).
 */
export const COUNTERS = ["requests", "router_5xx_intended", "fallback_legacy", "stale_served", "fallback_unscheduled", "keepalive_retries"];

/** Nearest-rank percentile of `xs` (the soak's own `pct`), or null. */
function percentile(xs, p) {
  if (!xs.length) return null;
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/**
 * A timeline of intervals of `intervalMs`. `within(ms, row, fn)` runs `fn`,
 * which counts into phase row `row` (a `stats` row), and adds what it
 * counted (COUNTERS, `by_op`, new `latencies`) to the interval of `ms`
 * (milliseconds since the schedule began); `failure(ms, kind)` counts a
 * failure; `rss(ms, generation, bytes)` keeps a generation's RSS sample;
 * `toJSON()` is what the soak writes.
 */
export function timeline(intervalMs = 1000) {
  const intervals = [];
  const at = (ms) => (intervals[Math.max(0, Math.floor(ms / intervalMs))] ??= { counts: {}, by_op: {}, failures: {}, latencies: [], rss: {} });
  return {
    within(ms, row, fn) {
      const before = COUNTERS.map((k) => row[k]);
      const ops = { ...row.by_op };
      const latencies = row.latencies.length;
      try {
        return fn();
      } finally {
        const iv = at(ms);
        COUNTERS.forEach((k, i) => {
          if (row[k] !== before[i]) iv.counts[k] = (iv.counts[k] ?? 0) + row[k] - before[i];
        });
        for (const [op, n] of Object.entries(row.by_op)) if (n !== (ops[op] ?? 0)) iv.by_op[op] = (iv.by_op[op] ?? 0) + n - (ops[op] ?? 0);
        for (let i = latencies; i < row.latencies.length; i++) iv.latencies.push(row.latencies[i]);
      }
    },
    failure(ms, kind) {
      const f = at(ms).failures;
      f[kind] = (f[kind] ?? 0) + 1;
    },
    rss(ms, generation, bytes) {
      // The last sample in the interval stands for it.
      at(ms).rss[generation] = Math.round((bytes / (1024 * 1024)) * 10) / 10;
    },
    toJSON() {
      const samples = [];
      for (let i = 0; i < intervals.length; i++) {
        const iv = intervals[i] ?? { counts: {}, by_op: {}, failures: {}, latencies: [], rss: {} };
        const s = { t_ms: i * intervalMs, ...iv.counts };
        if (Object.keys(iv.by_op).length) s.by_op = iv.by_op;
        if (Object.keys(iv.failures).length) s.failures = iv.failures;
        if (iv.latencies.length) {
          s.p50_ms = percentile(iv.latencies, 50);
          s.p99_ms = percentile(iv.latencies, 99);
        }
        if (Object.keys(iv.rss).length) s.rss_mib = iv.rss;
        samples.push(s);
      }
      return { interval_ms: intervalMs, samples };
    },
  };
}
