// The shadow gate (docs/deploying.md, "Shadow evaluation"): a deploy that
// changes GITLAB_RULES_CONFIG promotes a candidate ruleset, and it goes
// ahead only when the version serving now has evaluated that candidate as
// its shadow (GITLAB_SHADOW_RULES_CONFIG) on live traffic and the
// disagreements Analytics Engine counted (blob11: the shadow's rule,
// blob12: what differs; docs/metrics.md) are within what the operator
// declared: SHADOW_MAX_DISAGREEMENTS beyond the rule pairs SHADOW_INTENDED
// lists. SHADOW_GATE=false turns it off (a warning, and the record says so).
import { runQuery } from "./analytics.mjs";

function number(env, name, fallback, problems) {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 0) {
    problems.push(`${name}=${raw} is not a whole number >= 0`);
    return fallback;
  }
  return value;
}

/**
 * SHADOW_GATE, SHADOW_MAX_DISAGREEMENTS, SHADOW_INTENDED ("rule>shadow_rule"
 * pairs, comma-separated; `(none)` names "no rule matched"),
 * SHADOW_WINDOW_MINUTES, SHADOW_MIN_EVALUATED. `problems`: unreadable values.
 */
export function readShadowSettings(env) {
  const problems = [];
  const intended = new Set();
  for (const pair of String(env.SHADOW_INTENDED ?? "").split(",").map((p) => p.trim()).filter(Boolean)) {
    const [rule, shadow, ...rest] = pair.split(">").map((s) => s.trim());
    if (!rule || !shadow || rest.length) problems.push(`SHADOW_INTENDED: ${JSON.stringify(pair)} is not rule>shadow_rule`);
    else intended.add(`${rule}>${shadow}`);
  }
  return {
    enabled: !["false", "0", "no", "off"].includes(String(env.SHADOW_GATE ?? "").trim().toLowerCase()),
    maxDisagreements: number(env, "SHADOW_MAX_DISAGREEMENTS", 0, problems),
    windowMinutes: Math.max(1, number(env, "SHADOW_WINDOW_MINUTES", 60, problems)),
    minEvaluated: number(env, "SHADOW_MIN_EVALUATED", 1000, problems),
    intended,
    problems,
  };
}

/** The query: the shadow's evaluations of `version` over the last `minutes`, by rule pair and difference. */
export function shadowQuery(dataset, version, minutes) {
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(dataset)) throw new Error(`dataset name ${JSON.stringify(dataset)} is not an identifier`);
  if (!/^[A-Za-z0-9-]+$/.test(version)) throw new Error(`version id ${JSON.stringify(version)} is not an id`);
  return [
    "SELECT blob3 AS rule,",
    "       blob11 AS shadow_rule,",
    "       blob12 AS difference,",
    "       SUM(_sample_interval) AS requests",
    `FROM ${dataset}`,
    `WHERE timestamp > NOW() - INTERVAL '${Math.trunc(minutes)}' MINUTE`,
    `  AND blob2 = '${version}' AND blob11 != ''`,
    "GROUP BY rule, shadow_rule, difference",
    "ORDER BY requests DESC",
    "FORMAT JSON",
  ].join("\n");
}

/**
 * The verdict on the query's rows (pure): {ok, verdict, evaluated,
 * disagreements: [{rule, shadow_rule, difference, requests, intended}],
 * unintended, problem?}. `verdict`: "agrees", "within" (only intended
 * pairs, or no more than maxDisagreements others), "disagrees",
 * "too-few-evaluated".
 */
export function shadowVerdict(rows, settings) {
  const all = rows.map((r) => ({ rule: String(r.rule || "(none)"), shadow_rule: String(r.shadow_rule || "(none)"), difference: String(r.difference ?? ""), requests: Number(r.requests) || 0 }));
  const evaluated = all.reduce((n, r) => n + r.requests, 0);
  const disagreements = all.filter((r) => r.difference !== "").map((r) => ({ ...r, intended: settings.intended.has(`${r.rule}>${r.shadow_rule}`) }));
  const unintended = disagreements.filter((d) => !d.intended).reduce((n, d) => n + d.requests, 0);
  const result = { evaluated, disagreements, unintended };
  if (evaluated < settings.minEvaluated) {
    return { ...result, ok: false, verdict: "too-few-evaluated", problem: `the shadow evaluated ${evaluated} requests, fewer than SHADOW_MIN_EVALUATED=${settings.minEvaluated}: let it run longer (or raise GITLAB_SHADOW_SAMPLE)` };
  }
  if (unintended > settings.maxDisagreements) {
    const top = disagreements
      .filter((d) => !d.intended)
      .slice(0, 5)
      .map((d) => `${d.rule}>${d.shadow_rule} (${d.difference}): ${d.requests}`)
      .join(", ");
    return { ...result, ok: false, verdict: "disagrees", problem: `${unintended} of ${evaluated} evaluated requests decided differently, in rule pairs SHADOW_INTENDED does not list (more than SHADOW_MAX_DISAGREEMENTS=${settings.maxDisagreements}): ${top}` };
  }
  return { ...result, ok: true, verdict: disagreements.length ? "within" : "agrees" };
}

/**
 * Whether promoting `candidate` (the new GITLAB_RULES_CONFIG) may go on,
 * given the serving version's id and [vars]. Returns null when the deploy
 * changes no ruleset, else {ok, problem?, skipped?, query?, ...verdict}.
 */
export async function checkPromotion({ settings, metrics, dataset, servingVersion, servingVars, candidate, signal }) {
  const active = servingVars?.GITLAB_RULES_CONFIG;
  if (!active || active === candidate) return null;
  if (!settings.enabled) return { ok: true, skipped: "SHADOW_GATE=false" };
  const shadowed = servingVars.GITLAB_SHADOW_RULES_CONFIG || "";
  if (shadowed !== candidate) {
    return {
      ok: false,
      verdict: "not-shadowed",
      problem: `this deploy changes GITLAB_RULES_CONFIG from ${active} to ${candidate}, which the serving version ${servingVersion} does not evaluate (its GITLAB_SHADOW_RULES_CONFIG is ${shadowed ? JSON.stringify(shadowed) : "unset"}): deploy it as the shadow first (GITLAB_SHADOW_RULES_CONFIG="${candidate}", docs/deploying.md, Shadow evaluation), or set SHADOW_GATE=false`,
    };
  }
  if (!dataset || !metrics.accountId || !metrics.token) {
    return { ok: false, verdict: "unreadable", problem: "the shadow's disagreements cannot be read: the environment binds no ROUTER_METRICS dataset, or CLOUDFLARE_ACCOUNT_ID or an Analytics token is missing (or set SHADOW_GATE=false)" };
  }
  const query = shadowQuery(dataset, servingVersion, settings.windowMinutes);
  let rows;
  try {
    rows = await runQuery({ ...metrics, query, signal });
  } catch (e) {
    return { ok: false, verdict: "unreadable", query, problem: e.message };
  }
  return { query, ...shadowVerdict(rows, settings) };
}
