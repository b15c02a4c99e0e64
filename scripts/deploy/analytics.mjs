// The bake's metrics comparison (docs/deploying.md, "Metrics comparison"):
// after each traffic step's bake, the new and the old version's 5xx ratio
// and p99 over the bake, from Workers Analytics Engine's SQL API (the
// router writes a point per request, its version in blob2: docs/metrics.md),
// with the query docs/operations.md gives ("Per version during a rollout").
// The step fails (and the rollout rolls back) when the new version is worse
// than the old by more than the operator's thresholds.
import fs from "node:fs";
import { parse } from "smol-toml";

const DEFAULT_BASE = "https://api.cloudflare.com/client/v4";
/** The router's dataset binding (router_core::metrics::BINDING). */
export const METRICS_BINDING = "ROUTER_METRICS";

function number(env, name, fallback, { min = 0 } = {}) {
  const raw = env[name];
  if (raw === undefined || raw === "") return { value: fallback };
  const value = Number(raw);
  if (!Number.isFinite(value) || value < min) return { value: fallback, problem: `${name}=${raw} is not a number >= ${min}` };
  return { value };
}

/**
 * The comparison's settings (settings.mjs): BAKE_COMPARE_METRICS,
 * BAKE_MAX_ERROR_RATIO_INCREASE, BAKE_MAX_P99_FACTOR,
 * BAKE_MAX_P99_INCREASE_MS, BAKE_MIN_REQUESTS, CLOUDFLARE_ANALYTICS_TOKEN
 * (else CLOUDFLARE_API_TOKEN), CLOUDFLARE_ACCOUNT_ID,
 * CLOUDFLARE_API_BASE_URL. `problems`: values that are not numbers.
 */
export function readMetricsSettings(env) {
  const problems = [];
  const take = (name, fallback, opts) => {
    const r = number(env, name, fallback, opts);
    if (r.problem) problems.push(r.problem);
    return r.value;
  };
  return {
    enabled: !["false", "0", "no", "off"].includes(String(env.BAKE_COMPARE_METRICS ?? "").toLowerCase()),
    maxErrorRatioIncrease: take("BAKE_MAX_ERROR_RATIO_INCREASE", 0.005),
    maxP99Factor: take("BAKE_MAX_P99_FACTOR", 1.5, { min: 1 }),
    maxP99IncreaseMs: take("BAKE_MAX_P99_INCREASE_MS", 50),
    minRequests: take("BAKE_MIN_REQUESTS", 100),
    token: env.CLOUDFLARE_ANALYTICS_TOKEN || env.CLOUDFLARE_API_TOKEN || "",
    accountId: env.CLOUDFLARE_ACCOUNT_ID || "",
    baseUrl: (env.CLOUDFLARE_API_BASE_URL || DEFAULT_BASE).replace(/\/+$/, ""),
    problems,
  };
}

/** The dataset the environment binds as ROUTER_METRICS in wrangler.toml, or null. */
export function datasetOf(configFile, envKey) {
  const doc = parse(fs.readFileSync(configFile, "utf8"));
  const list = doc.env?.[envKey]?.analytics_engine_datasets ?? [];
  return list.find((d) => d.binding === METRICS_BINDING)?.dataset ?? null;
}

/** Minutes of data a bake of `seconds` covers (the SQL API's interval; at least 1). */
export function windowMinutes(seconds) {
  return Math.max(1, Math.ceil(Number(seconds) / 60));
}

/**
 * docs/operations.md's "Per version during a rollout" query over `dataset`
 * and the last `minutes`, as JSON rows.
 */
export function perVersionQuery(dataset, minutes) {
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(dataset)) throw new Error(`dataset name ${JSON.stringify(dataset)} is not an identifier`);
  return [
    "SELECT blob2 AS version,",
    "       SUM(_sample_interval) AS requests,",
    "       sumIf(_sample_interval, blob9 = '5xx') / SUM(_sample_interval) AS error_ratio,",
    "       quantileWeighted(0.99, double1, _sample_interval) AS p99_ms",
    `FROM ${dataset}`,
    `WHERE timestamp > NOW() - INTERVAL '${Math.trunc(minutes)}' MINUTE`,
    "GROUP BY version",
    "ORDER BY requests DESC",
    "FORMAT JSON",
  ].join("\n");
}

/** POSTs `query` to the SQL API; resolves the rows ({data}); throws with the API's words. */
export async function runQuery({ baseUrl, accountId, token, query, timeoutMs = 30_000, signal }) {
  const url = `${baseUrl}/accounts/${accountId}/analytics_engine/sql`;
  const signals = [AbortSignal.timeout(timeoutMs), ...(signal ? [signal] : [])];
  let res;
  try {
    res = await fetch(url, { method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "text/plain" }, body: query, signal: AbortSignal.any(signals) });
  } catch (e) {
    throw new Error(`the Analytics Engine SQL API did not answer (${e.cause?.message ?? e.message})`);
  }
  const text = await res.text();
  if (!res.ok) throw new Error(`the Analytics Engine SQL API answered ${res.status}: ${text.trim().slice(0, 300)}`);
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    throw new Error(`the Analytics Engine SQL API answered something that is not JSON: ${text.trim().slice(0, 200)}`);
  }
  if (!Array.isArray(body?.data)) throw new Error(`the Analytics Engine SQL API answered JSON without a data list: ${text.trim().slice(0, 200)}`);
  return body.data;
}

/** One version's row as numbers (UInt64 columns come quoted), or null. */
function rowOf(rows, version) {
  const row = rows.find((r) => r.version === version);
  if (!row) return null;
  return { requests: Number(row.requests), error_ratio: Number(row.error_ratio), p99_ms: Number(row.p99_ms) };
}

/**
 * The verdict on the two versions' rows (pure): {ok, verdict, problem?,
 * new, old}. `verdict`: "worse" (fails the step), "comparable" (passes),
 * "too-few-requests" (passes: one side had fewer than minRequests).
 */
export function compareVersions(rows, { newVersion, oldVersion }, limits) {
  const n = rowOf(rows, newVersion);
  const o = rowOf(rows, oldVersion);
  const result = { new: n, old: o };
  if (!n || !o || n.requests < limits.minRequests || o.requests < limits.minRequests) {
    return { ...result, ok: true, verdict: "too-few-requests" };
  }
  const problems = [];
  const ratioIncrease = n.error_ratio - o.error_ratio;
  if (ratioIncrease > limits.maxErrorRatioIncrease) {
    problems.push(`5xx ratio ${fmt(n.error_ratio)} against the old version's ${fmt(o.error_ratio)} (+${fmt(ratioIncrease)}, more than BAKE_MAX_ERROR_RATIO_INCREASE=${limits.maxErrorRatioIncrease})`);
  }
  if (n.p99_ms > o.p99_ms * limits.maxP99Factor && n.p99_ms - o.p99_ms > limits.maxP99IncreaseMs) {
    problems.push(`p99 ${Math.round(n.p99_ms)} ms against the old version's ${Math.round(o.p99_ms)} ms (more than BAKE_MAX_P99_FACTOR=${limits.maxP99Factor} times and BAKE_MAX_P99_INCREASE_MS=${limits.maxP99IncreaseMs} ms more)`);
  }
  return problems.length ? { ...result, ok: false, verdict: "worse", problem: problems.join("; ") } : { ...result, ok: true, verdict: "comparable" };
}

const fmt = (x) => (Number.isFinite(x) ? x.toFixed(4) : String(x));

/**
 * Compares the versions over the last bake (`bakeSeconds`). Returns
 * {ok, problem?, skipped?, query, verdict, new, old}.
 */
export async function compareBake({ metrics, dataset, newVersion, oldVersion, bakeSeconds, signal, warn = () => {}, say = () => {} }) {
  if (!metrics.enabled) return { ok: true, skipped: "BAKE_COMPARE_METRICS=false" };
  if (!dataset) {
    warn(`no ${METRICS_BINDING} dataset in this environment's wrangler.toml: the bake compares no metrics`);
    return { ok: true, skipped: "no dataset" };
  }
  if (!metrics.accountId || !metrics.token) {
    warn("no CLOUDFLARE_ACCOUNT_ID (or no CLOUDFLARE_ANALYTICS_TOKEN / CLOUDFLARE_API_TOKEN): the bake compares no metrics");
    return { ok: true, skipped: "no account id or token" };
  }
  const query = perVersionQuery(dataset, windowMinutes(bakeSeconds));
  let rows;
  try {
    rows = await runQuery({ ...metrics, query, signal });
  } catch (e) {
    return { ok: false, query, problem: `metrics comparison: ${e.message} (BAKE_COMPARE_METRICS=false turns the comparison off)` };
  }
  const verdict = compareVersions(rows, { newVersion, oldVersion }, metrics);
  const side = (r) => (r ? `${r.requests} requests, 5xx ratio ${fmt(r.error_ratio)}, p99 ${Math.round(r.p99_ms)} ms` : "no data");
  say(`metrics (${dataset}, last ${windowMinutes(bakeSeconds)} min): new ${side(verdict.new)}; old ${side(verdict.old)}: ${verdict.verdict}`);
  if (verdict.verdict === "too-few-requests") warn(`fewer than BAKE_MIN_REQUESTS=${metrics.minRequests} requests on a version: the bake's metrics decide nothing at this step`);
  return { ...verdict, query, ...(verdict.ok ? {} : { problem: `metrics comparison: the new version is worse: ${verdict.problem}` }) };
}
