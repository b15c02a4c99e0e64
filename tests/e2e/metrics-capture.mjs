// The metrics dataset as the e2e tests see it: a wrapped binding
// (Miniflare `wrappedBindings`) standing in for ROUTER_METRICS, whose
// `writeDataPoint` prints each point on the router's stdout, which the
// harness collects. Miniflare's own Analytics Engine emulation keeps
// nothing (its writeDataPoint does nothing), so the tests read the points
// here, as rows with the SQL API's column names, and run the documented
// queries' arithmetic over them (docs/metrics.md, docs/operations.md,
// the deploy's shadow gate).

const MARK = "router-metrics-point";

/** The capture worker: `label` names the router, `throws` makes every write throw. */
const SCRIPT = `export default function (env) {
  return {
    writeDataPoint(point) {
      if (env.throws) throw new Error("the dataset refuses every point");
      console.log("${MARK} " + env.label + " " + JSON.stringify(point));
    },
  };
}`;

export const CAPTURE_WORKER = { name: "metrics-capture", modules: true, script: SCRIPT };

/** Miniflare options binding ROUTER_METRICS to the capture worker as `label`. */
export function captureBinding(label, { throws = false } = {}) {
  return { wrappedBindings: { ROUTER_METRICS: { scriptName: CAPTURE_WORKER.name, bindings: { label, throws } } } };
}

/** Every point router `label` wrote (from log line `from` on), as written. */
export function capturedPoints(logs, label, from = 0) {
  const prefix = `${MARK} ${label} `;
  return logs
    .slice(from)
    .filter((l) => l.includes(prefix))
    .map((l) => JSON.parse(l.slice(l.indexOf(prefix) + prefix.length)));
}

/**
 * A point as the SQL API's row: index1, blob1…, double1…, and
 * `_sample_interval` 1 (nothing is sampled away locally).
 */
export function asRow(point) {
  const row = { index1: point.indexes[0], _sample_interval: 1 };
  point.blobs.forEach((b, i) => (row[`blob${i + 1}`] = b));
  point.doubles.forEach((d, i) => (row[`double${i + 1}`] = d));
  return row;
}

/**
 * docs/operations.md's "error ratio per cell", over `rows`:
 * `SELECT blob8 AS cell, SUM(_sample_interval) AS requests,
 * sumIf(_sample_interval, blob9 = '5xx') / SUM(_sample_interval) AS error_ratio
 * … GROUP BY cell ORDER BY error_ratio DESC`.
 */
export function errorRatioPerCell(rows) {
  const by = new Map();
  for (const r of rows) {
    const g = by.get(r.blob8) ?? { cell: r.blob8, requests: 0, errors: 0 };
    g.requests += r._sample_interval;
    if (r.blob9 === "5xx") g.errors += r._sample_interval;
    by.set(r.blob8, g);
  }
  return [...by.values()]
    .map((g) => ({ cell: g.cell, requests: g.requests, error_ratio: g.errors / g.requests }))
    .sort((a, b) => b.error_ratio - a.error_ratio || a.cell.localeCompare(b.cell));
}

/**
 * The shadow gate's query (scripts/deploy/shadow-gate.mjs, shadowQuery)
 * over `rows`: `SELECT blob3 AS rule, blob11 AS shadow_rule, blob12 AS
 * difference, SUM(_sample_interval) AS requests … WHERE blob2 = '<version>'
 * AND blob11 != '' GROUP BY rule, shadow_rule, difference ORDER BY requests DESC`.
 */
export function shadowRows(rows, version) {
  const by = new Map();
  for (const r of rows) {
    if (r.blob2 !== version || !r.blob11) continue;
    const key = JSON.stringify([r.blob3, r.blob11, r.blob12]);
    const g = by.get(key) ?? { rule: r.blob3, shadow_rule: r.blob11, difference: r.blob12, requests: 0 };
    g.requests += r._sample_interval;
    by.set(key, g);
  }
  return [...by.values()].sort((a, b) => b.requests - a.requests);
}
