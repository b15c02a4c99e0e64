// What a health check adds to HEALTH_CHECK_CMD / HEALTH_CHECK_URL
// (health-check.mjs): the routing checks through the new version
// (routing-checks.mjs; every check, the smoke test's included) and, after a
// traffic step's bake, the new and old versions' metrics compared
// (analytics.mjs). Both land in the step's `health` in the rollout record.
import path from "node:path";
import { compareBake, datasetOf } from "./analytics.mjs";
import { say, warn } from "./log.mjs";
import { runRoutingChecks } from "./routing-checks.mjs";

/** What was warned of once per deploy (the notes repeat at every step). */
const warned = new Set();
const warnOnce = (text) => {
  if (warned.has(text)) return;
  warned.add(text);
  warn(text);
};

/**
 * `health`: runHealthCheck's passing result; `d`: the Deploy; `url` the
 * health check's URL (a first deploy's canary's, or HEALTH_CHECK_URL);
 * `override` false when the new version is the only one (a first deploy: no
 * override header, no secret). Resolves the health result with `routing`
 * and `metrics`.
 */
export async function addBakeChecks(d, p, health, { url = d.settings.healthUrl, override = true } = {}) {
  const s = d.settings;
  const out = { ...health };
  if (url && s.routing.enabled) {
    const routing = await runRoutingChecks({
      url,
      override,
      vars: d.env.vars,
      rulesDir: path.join(path.dirname(s.configFile), "rules"),
      casesDir: path.join(s.root, "tests", "rules"),
      rulesctl: s.rulesctl,
      cwd: s.root,
      cellHeader: s.routing.cellHeader,
      workerName: d.worker,
      newVersion: d.newVersion,
      // An override reaches only a version in the deployment: at 100 % the
      // old version is out of it, and Cloudflare would answer with the new.
      oldVersion: override && p < 100 ? d.oldVersion : null,
      smokeSecret: s.smokeSecret,
      timeoutS: d.timeout,
      signal: d.signal,
      say,
    });
    for (const note of routing.notes) warnOnce(`routing checks: ${note}`);
    out.routing = routing;
    if (!routing.ok) return { ...out, ok: false, problem: routing.problem };
  } else if (url) {
    warnOnce("ROUTING_CHECKS=false: no routing checks (the health check sees only HEALTH_CHECK_URL's status, not where requests go)");
  }
  if (p > 0 && override && d.oldVersion && !d.signal?.aborted) {
    const metrics = await compareBake({
      metrics: s.metrics,
      dataset: datasetOf(s.configFile, d.env.key),
      newVersion: d.newVersion,
      oldVersion: d.oldVersion,
      bakeSeconds: d.bake,
      signal: d.signal,
      warn,
      say,
    });
    out.metrics = metrics;
    if (!metrics.ok) return { ...out, ok: false, problem: metrics.problem };
  }
  return out;
}
