// Unit tests of the routing checks' plan and verdicts (routing-checks.mjs),
// the bake's metrics comparison (analytics.mjs), the Analytics Engine SQL
// endpoint of cf-api-standin.mjs, and the alert rules in deploy/alerts/
// held to docs/operations.md's queries.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { describe, test } from "node:test";
import { parse } from "smol-toml";
import { compareVersions, datasetOf, perVersionQuery, readMetricsSettings, runQuery, windowMinutes } from "../../scripts/deploy/analytics.mjs";
import { ROUTE_HEADERS, claimKind, observed, planRoutingChecks, readRoutingSettings, routingProblem } from "../../scripts/deploy/routing-checks.mjs";
import { startStandin } from "./cf-api-standin.mjs";
import { ACCOUNT_ID, REPO, fillPlaceholders } from "./helpers.mjs";

// The repo's wrangler.toml as an operator fills it in (its REPLACE_ME values: helpers.mjs FILLED).
const config = parse(fillPlaceholders(fs.readFileSync(path.join(REPO, "wrangler.toml"), "utf8")));
const plan = (env) => planRoutingChecks({ vars: config.env[env].vars, rulesDir: path.join(REPO, "rules"), casesDir: path.join(REPO, "tests/rules") });
const summary = (checks) => checks.map((c) => `${c.family} ${c.method} ${c.path} ${JSON.stringify(c.expect)}`);

/** The ```sql blocks of docs/operations.md, whitespace folded, the dataset written as TABLE. */
function operationsQueries() {
  const doc = fs.readFileSync(path.join(REPO, "docs/operations.md"), "utf8");
  return [...doc.matchAll(/```sql\n([\s\S]*?)```/g)].map((m) => normalize(m[1]));
}
const normalize = (sql) =>
  sql
    .replace(/\s+/g, " ")
    .trim()
    .replace(/ FORMAT JSON$/, "")
    .replace(/\bgitlab_http_router_[a-z_]+\b/g, "TABLE");

describe("routing checks: derived from the environment's config and ruleset", () => {
  test("staging (session_token): a session and a token of each listed cell, its claim kind, the legacy fallthrough", () => {
    const { checks, ruleset } = plan("staging");
    assert.equal(ruleset, "session_token");
    assert.deepEqual(summary(checks), [
      'session GET / {"cell":1,"rule":"session_cookie"}',
      'session GET / {"cell":2,"rule":"session_cookie"}',
      'token GET /api/v4/version {"cell":1,"rule":"private_token"}',
      'token GET /api/v4/version {"cell":2,"rule":"private_token"}',
      `legacy GET / {"rule":"legacy","upstream":"${config.env.staging.vars.GITLAB_PROXY_HOST}","cell":1}`,
      'claim GET /jwt/auth?service=container_registry&scope=repository%3Agitlab-org%2Fbuild%2Fimage%3Apush%2Cpull {"rule":"registry_jwt_auth_scope","listedCell":true,"sameAsOld":true}',
    ]);
    // the legacy fallthrough: a session cookie without a cell prefix
    assert.equal(checks[4].headers.cookie, "_gitlab_session=0123456789abcdef0123456789abcdef");
    assert.equal(checks[1].headers.cookie, "_gitlab_session=cell-2-0123456789abcdef0123456789abcdef");
    assert.deepEqual(checks[3].token, { cell: 2, header: "private-token", bearer: false });
  });

  test("registry-production (container_registry, no GITLAB_CELLS): every check must be answered by a registry", () => {
    const { checks } = plan("registry-production");
    assert.ok(checks.length >= 3, summary(checks).join("\n"));
    assert.deepEqual([...new Set(checks.map((c) => c.family))].sort(), ["legacy", "registry"]);
    assert.ok(checks.every((c) => c.expect.registry === true && ["GET", "HEAD"].includes(c.method)), summary(checks).join("\n"));
    assert.ok(checks.some((c) => c.path === "/v2/"), "the registry's base");
  });

  test("no check writes, whatever the ruleset", () => {
    for (const env of ["staging", "production", "registry-staging", "registry-production"]) {
      for (const c of plan(env).checks) assert.ok(["GET", "HEAD"].includes(c.method), `${env}: ${c.method} ${c.path}`);
    }
  });

  test("on unless ROUTING_CHECKS=false; the cell header is an extra check", () => {
    assert.deepEqual(readRoutingSettings({}), { cellHeader: "", enabled: true });
    assert.deepEqual(readRoutingSettings({ ROUTING_CHECK_CELL_HEADER: " X-Cell " }), { cellHeader: "x-cell", enabled: true });
    for (const off of ["false", "0", "no", " OFF "]) assert.equal(readRoutingSettings({ ROUTING_CHECKS: off }).enabled, false, off);
    assert.equal(readRoutingSettings({ ROUTING_CHECKS: "true" }).enabled, true);
  });

  test("an answer's route: the router's naming first, the cell's own as the fallback", () => {
    const answer = (headers, status = 200) => ({ status, headers: new Headers(headers) });
    const routed = { [ROUTE_HEADERS.rule]: "session_cookie", [ROUTE_HEADERS.cell]: "2", [ROUTE_HEADERS.upstream]: "cell-2.example:443" };
    assert.deepEqual(observed(answer({ ...routed, "x-cell": "2" }), "x-cell"), {
      status: 200, namedBy: "router", cell: "2", rule: "session_cookie", upstream: "cell-2.example:443", selfNamed: "2", registry: false,
    });
    // not a listed cell: the router names the upstream, an empty cell
    assert.deepEqual(observed(answer({ ...routed, [ROUTE_HEADERS.cell]: "", [ROUTE_HEADERS.rule]: "" }), ""), {
      status: 200, namedBy: "router", cell: null, rule: null, upstream: "cell-2.example:443", registry: false,
    });
    assert.deepEqual(observed(answer({ "x-cell": "1" }), "x-cell"), { status: 200, namedBy: "cell", cell: "1", rule: null, upstream: null, selfNamed: "1", registry: false });
    assert.deepEqual(observed(answer({}), ""), { status: 200, namedBy: null, cell: null, rule: null, upstream: null, registry: false });
  });

  test("claim kinds", () => {
    assert.equal(claimKind({ type: "FIRST_CELL", target: "registry" }), "FIRST_CELL@registry");
    assert.equal(claimKind({ claims: [{ route: "a/b" }] }), "route");
    assert.equal(claimKind(null), null);
  });

  test("verdicts: where it went, not only its status", () => {
    const cells = [{ id: 1 }, { id: 2 }];
    const ctx = { cellHeader: "", cells };
    const got = (status, cell, { rule = "r", upstream = `cell-${cell}:443`, registry = false, namedBy = "router" } = {}) => ({ status, namedBy, cell, rule, upstream, registry });
    assert.equal(routingProblem({ expect: { cell: 2, rule: "r" } }, got(200, "2"), ctx), null);
    assert.equal(routingProblem({ expect: { cell: 2 } }, got(200, "1"), ctx), "reached cell 1 (cell-1:443), expected cell 2");
    assert.equal(routingProblem({ expect: { cell: 2, rule: "session_cookie" } }, got(200, "2", { rule: "legacy" }), ctx), "decided by rule legacy, expected rule session_cookie (the route table's)");
    assert.equal(routingProblem({ expect: { upstream: "legacy:443" } }, got(200, null, { upstream: "cell-9:443" }), ctx), "sent to cell-9:443, expected the legacy cell GITLAB_PROXY_HOST=legacy:443");
    assert.equal(routingProblem({ expect: { cell: 2 } }, got(502, "2"), ctx), "answered 502");
    assert.match(routingProblem({ expect: { listedCell: true } }, got(200, "9"), ctx), /GITLAB_CELLS does not list/);
    assert.match(routingProblem({ expect: { listedCell: true } }, got(200, null, { upstream: "elsewhere:443" }), ctx), /elsewhere:443, no listed cell/);
    assert.match(routingProblem({ expect: { listedCell: true, sameAsOld: true } }, got(200, "1"), { ...ctx, old: got(200, "2") }), /version serving now sends it to cell 2/);
    assert.equal(routingProblem({ expect: { listedCell: true, sameAsOld: true } }, got(200, "2"), { ...ctx, old: got(200, "2") }), null);
    // an old version that names nothing (from before the router named routes) is not compared
    assert.equal(routingProblem({ expect: { listedCell: true, sameAsOld: true } }, got(200, "2"), { ...ctx, old: got(200, null, { namedBy: null }) }), null);
    // the router named nothing: the smoke-test secret did not open it
    assert.match(routingProblem({ expect: { cell: 2 } }, got(200, null, { namedBy: null }), ctx), /the router named no route .*GITLAB_SMOKE_TEST_SECRET/);
    // a cell header: the cell must name itself, and the cell the router named
    const withHeader = { cellHeader: "x-cell", cells };
    assert.equal(routingProblem({ expect: { cell: 2 } }, { ...got(200, "2"), selfNamed: "2" }, withHeader), null);
    assert.match(routingProblem({ expect: { cell: 2 } }, { ...got(200, "2"), selfNamed: "1" }, withHeader), /the router sent it to cell 2 \(cell-2:443\), but cell 1 answered/);
    assert.match(routingProblem({ expect: { cell: 2 } }, { ...got(200, "2"), selfNamed: null }, withHeader), /without x-cell: no cell named itself \(expected cell 2\)/);
    assert.equal(routingProblem({ expect: { cell: 2 } }, { ...got(200, "2", { namedBy: "cell", rule: null, upstream: null }), selfNamed: "2" }, withHeader), null);
    assert.match(routingProblem({ expect: { registry: true } }, got(200, null, { namedBy: null }), { cellHeader: "", cells: [] }), /no registry answered/);
    assert.equal(routingProblem({ expect: { registry: true } }, got(401, null, { namedBy: null, registry: true }), { cellHeader: "", cells: [] }), null);
  });
});

describe("metrics comparison", () => {
  const limits = readMetricsSettings({});
  const rows = (n, o) => [
    { version: "new", requests: String(n[0]), error_ratio: n[1], p99_ms: n[2] },
    { version: "old", requests: String(o[0]), error_ratio: o[1], p99_ms: o[2] },
  ];
  const verdict = (n, o, l = limits) => compareVersions(rows(n, o), { newVersion: "new", oldVersion: "old" }, l).verdict;

  test("defaults, and values that are not numbers are refused", () => {
    assert.deepEqual([limits.maxErrorRatioIncrease, limits.maxP99Factor, limits.maxP99IncreaseMs, limits.minRequests, limits.enabled], [0.005, 1.5, 50, 100, true]);
    assert.deepEqual(readMetricsSettings({ BAKE_MAX_P99_FACTOR: "0.5", BAKE_MIN_REQUESTS: "x" }).problems, ["BAKE_MAX_P99_FACTOR=0.5 is not a number >= 1", "BAKE_MIN_REQUESTS=x is not a number >= 0"]);
    assert.equal(readMetricsSettings({ BAKE_COMPARE_METRICS: "false" }).enabled, false);
  });

  test("worse 5xx ratio or p99 fails; within the thresholds or too few requests passes", () => {
    assert.equal(verdict([1000, 0.001, 100], [5000, 0.001, 100]), "comparable");
    assert.equal(verdict([1000, 0.0059, 100], [5000, 0.001, 100]), "comparable", "+0.0049 is within 0.005");
    assert.equal(verdict([1000, 0.0061, 100], [5000, 0.001, 100]), "worse");
    assert.equal(verdict([1000, 0.001, 151], [5000, 0.001, 100]), "worse");
    assert.equal(verdict([1000, 0.001, 140], [5000, 0.001, 100]), "comparable", "under 1.5x");
    assert.equal(verdict([1000, 0.001, 40], [5000, 0.001, 10]), "comparable", "4x but only +30 ms");
    assert.equal(verdict([99, 0.9, 9000], [5000, 0.001, 100]), "too-few-requests");
    assert.equal(compareVersions([], { newVersion: "new", oldVersion: "old" }, limits).verdict, "too-few-requests");
  });

  test("the deploy's query is docs/operations.md's per-version query", () => {
    assert.ok(operationsQueries().includes(normalize(perVersionQuery("gitlab_http_router_production", 10))));
    assert.deepEqual([windowMinutes(0), windowMinutes(60), windowMinutes(61), windowMinutes(600)], [1, 1, 2, 10]);
    assert.equal(datasetOf(path.join(REPO, "wrangler.toml"), "registry-staging"), "gitlab_http_router_registry_staging");
  });

  test("the stand-in's SQL API answers the per-version query from seeded counts and refuses anything else loudly", async (t) => {
    const api = await startStandin();
    t.after(() => api.close());
    const old = api.seed("w", { tag: "old" });
    api.setMetrics("gitlab_http_router_staging", ({ version_id }) => (version_id === old ? { requests: 200, errors: 3, p99_ms: 90 } : null));
    const base = { baseUrl: api.baseUrl, accountId: ACCOUNT_ID, token: "t" };
    const data = await runQuery({ ...base, query: perVersionQuery("gitlab_http_router_staging", 5) });
    assert.deepEqual(data, [{ version: old, requests: "200", error_ratio: 0.015, p99_ms: 90 }]);
    await assert.rejects(runQuery({ ...base, query: "SELECT COUNT(*) FROM gitlab_http_router_staging FORMAT JSON" }), /answered 400: .*does not understand/);
    await assert.rejects(runQuery({ ...base, token: "", query: perVersionQuery("gitlab_http_router_staging", 5) }), /answered 401/);
    assert.equal(api.unknown.length, 2, "the refused queries are listed as unknown calls");
  });
});

describe("alert rules (deploy/alerts/)", () => {
  const file = path.join(REPO, "deploy/alerts/grafana-alert-rules.json");
  const rules = JSON.parse(fs.readFileSync(file, "utf8")).groups.flatMap((g) => g.rules);
  const queryOf = (rule) => rule.data.find((d) => d.refId === "A").model.url_options.data;

  test("every alert's query is one docs/operations.md has (no drift)", () => {
    const known = operationsQueries();
    assert.ok(rules.length >= 5);
    for (const rule of rules) assert.ok(known.includes(normalize(queryOf(rule))), `${rule.uid}: its query is not in docs/operations.md:\n${queryOf(rule)}`);
    // and the check can tell: a changed query is not one of them
    assert.ok(!known.includes(normalize(queryOf(rules[0]).replace("'5xx'", "'4xx'"))));
  });

  test("every rule is complete: a uid, a condition its data defines, columns the query selects, the data source provisioned", () => {
    const ds = JSON.parse(fs.readFileSync(path.join(REPO, "deploy/alerts/grafana-datasource.json"), "utf8")).datasources[0];
    const uids = new Set();
    for (const rule of rules) {
      assert.ok(!uids.has(rule.uid), `duplicate uid ${rule.uid}`);
      uids.add(rule.uid);
      assert.ok(rule.data.some((d) => d.refId === rule.condition), rule.uid);
      const a = rule.data.find((d) => d.refId === "A");
      assert.equal(a.datasourceUid, ds.uid, rule.uid);
      for (const c of a.model.columns) assert.match(queryOf(rule), new RegExp(`AS ${c.selector}\\b`), `${rule.uid}: column ${c.selector}`);
      assert.match(queryOf(rule), /FORMAT JSON$/, rule.uid);
    }
  });
});
