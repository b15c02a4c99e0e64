// The routing checks of a version (docs/deploying.md, "Routing checks"):
// requests of each rule family sent through that version with the version
// override header, each checked for WHERE it went, not only for its status.
// They are derived from the environment's configuration and ruleset, never
// written per environment:
//   session   a session cookie of every cell GITLAB_CELLS lists with a
//             session_prefix (GitLab's `_gitlab_session=<prefix>-<32 hex>`):
//             must reach that cell
//   token     when the ruleset reads routable tokens (a
//             `routable-token-payload` transform from a header): a token
//             for every listed cell (`rulesctl token --cell <id>`), in the
//             first such rule's header: must reach that cell
//   claim     one GET/HEAD request of each claim kind the ruleset
//             classifies (its route table, tests/rules/<ruleset>.cases.json:
//             the first case of each kind): must be decided by the rule the
//             route table names, reach a listed cell, and the same cell the
//             version that serves now sends it to
//   legacy    the route table's first request that falls through to the
//             legacy cell: must go to GITLAB_PROXY_HOST
//   registry  every request whose rule targets the registry (the registry
//             environments): must be answered by a registry (a
//             `Docker-Distribution-API-Version` header), by the same cell
//             as the old version
// Where a request went is read from the answer: the router names the rule,
// the cell and the upstream in its answer to a request carrying the
// smoke-test secret (ROUTE_HEADERS); with ROUTING_CHECK_CELL_HEADER set,
// each cell must also name itself in that response header (its GITLAB_CELLS
// id; set at the cell's load balancer), the same cell the router named.
// No check sends a write.
import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { SMOKE_TEST_HEADER, smokeUrlProblem, versionOverride } from "./health-check.mjs";

/** The header a container registry answers every /v2/ request with. */
export const REGISTRY_HEADER = "docker-distribution-api-version";

/**
 * The response headers the router names a smoke-test request's route in
 * (router_core's forward plan: only for a request carrying the smoke-test
 * secret, overwriting any the cell sent).
 */
export const ROUTE_HEADERS = {
  rule: "x-gitlab-http-router-route-rule",
  cell: "x-gitlab-http-router-route-cell",
  upstream: "x-gitlab-http-router-route-upstream",
};

/** Reads the routing-check settings from the environment (settings.mjs). */
export function readRoutingSettings(env) {
  const cellHeader = (env.ROUTING_CHECK_CELL_HEADER || "").trim().toLowerCase();
  return {
    cellHeader,
    // On unless ROUTING_CHECKS says otherwise: the router names each route.
    enabled: !["false", "0", "no", "off"].includes(String(env.ROUTING_CHECKS ?? "").trim().toLowerCase()),
  };
}

function rulesOf(doc) {
  return Array.isArray(doc) ? doc : Array.isArray(doc?.rules) ? doc.rules : [];
}

/** A classify expectation's claim kind: its type, or its claims' names, with its target (`route@registry`). */
export function claimKind(classify) {
  if (!classify || typeof classify !== "object") return null;
  const base = classify.type ?? (Array.isArray(classify.claims) && classify.claims[0] ? Object.keys(classify.claims[0]).sort().join("+") : null);
  if (!base) return null;
  return classify.target ? `${base}@${classify.target}` : base;
}

/** The header rules that turn a routable token into a CELL_ID claim, in ruleset order. */
function tokenRules(rules) {
  const out = [];
  for (const rule of rules) {
    const transforms = [rule.transform ?? []].flat();
    const match = [rule.match ?? []].flat();
    const header = match.find((m) => m?.type === "header" && typeof m.name === "string");
    if (rule.action === "classify" && rule.classify?.type === "CELL_ID" && header && transforms.some((t) => t?.type === "routable-token-payload")) {
      out.push({ id: rule.id, header: header.name.toLowerCase(), bearer: /bearer/i.test(header.regexValue ?? "") });
    }
  }
  return out;
}

/** A route-table request's headers and cookies as request headers. */
function credentialHeaders(req) {
  const headers = {};
  for (const [name, value] of Object.entries(req.headers ?? {})) headers[name.toLowerCase()] = String(value);
  const cookies = Object.entries(req.cookies ?? {}).map(([k, v]) => `${k}=${v}`);
  if (cookies.length) headers.cookie = cookies.join("; ");
  return headers;
}

const pathOf = (url) => {
  const u = new URL(url);
  return `${u.pathname}${u.search}`;
};

/**
 * The checks for an environment (pure but for the files it reads):
 * [{name, family, method, path, headers, expect: {cell?, listedCell?, sameAsOld?, registry?}, token?}].
 * `vars` the environment's [vars]; `rulesDir` where its ruleset is;
 * `casesDir` where the route tables are (tests/rules).
 */
export function planRoutingChecks({ vars, rulesDir, casesDir }) {
  const name = vars.GITLAB_RULES_CONFIG;
  const rulesFile = path.join(rulesDir, `${name}.json`);
  const rules = rulesOf(JSON.parse(fs.readFileSync(rulesFile, "utf8")));
  const cells = cellsOf(vars);
  const casesFile = path.join(casesDir, `${name}.cases.json`);
  const cases = fs.existsSync(casesFile) ? rulesOf(JSON.parse(fs.readFileSync(casesFile, "utf8"))) : null;
  // The rule the route table says decides a cell's session.
  const sessionRule = (cases ?? []).find((c) => c.expect?.classify?.type === "SESSION_PREFIX")?.expect?.rule;
  const checks = [];
  const notes = [];
  // Sessions: GitLab's own cookie, whatever the ruleset says (a listed
  // cell's session must reach it: the user is signed in there).
  for (const cell of cells) {
    if (!cell.session_prefix) continue;
    checks.push({
      name: `session of cell ${cell.id}`,
      family: "session",
      method: "GET",
      path: "/",
      headers: { cookie: `_gitlab_session=${cell.session_prefix}-${"0123456789abcdef".repeat(2)}` },
      expect: { cell: cell.id, ...(sessionRule ? { rule: sessionRule } : {}) },
    });
  }
  const tokens = tokenRules(rules);
  if (tokens.length > 0) {
    for (const cell of cells) {
      checks.push({
        name: `routable token of cell ${cell.id} (${tokens[0].header}, rule ${tokens[0].id})`,
        family: "token",
        method: "GET",
        path: "/api/v4/version",
        headers: {},
        token: { cell: cell.id, header: tokens[0].header, bearer: tokens[0].bearer },
        expect: { cell: cell.id, rule: tokens[0].id },
      });
    }
  }
  if (cases === null) {
    notes.push(`no route table ${casesFile}: no claim checks for ${name}`);
    return { checks, notes, ruleset: name };
  }
  const legacy = cells.find((c) => c.address === vars.GITLAB_PROXY_HOST);
  const kinds = new Set();
  let legacyDone = false;
  for (const c of cases) {
    const req = c.request ?? {};
    const method = (req.method ?? "GET").toUpperCase();
    if (method !== "GET" && method !== "HEAD") continue;
    // Claims carrying credentials are the session and token families';
    // the legacy fallthrough may carry made-up ones (a session without a
    // cell prefix), never a template the route table fills in.
    const credentials = Object.keys(req.cookies ?? {}).length + Object.keys(req.headers ?? {}).length > 0;
    if (JSON.stringify(req).includes("{{")) continue;
    const expect = c.expect ?? {};
    const rule = typeof expect.rule === "string" ? { rule: expect.rule } : {};
    if (expect.action === "classify") {
      if (credentials) continue;
      const kind = claimKind(expect.classify);
      if (!kind || kinds.has(kind) || /^(SESSION_PREFIX|CELL_ID)\b/.test(kind)) continue;
      kinds.add(kind);
      const registry = expect.classify?.target === "registry";
      checks.push({
        name: `${kind} claim (rule ${expect.rule}): ${method} ${pathOf(req.url)}`,
        family: registry ? "registry" : "claim",
        method,
        path: pathOf(req.url),
        headers: {},
        expect: { ...rule, listedCell: cells.length > 0, sameAsOld: true, ...(registry ? { registry: true } : {}) },
      });
    } else if (expect.action === "proxy" && expect.proxy?.address === null && !legacyDone) {
      legacyDone = true;
      const registry = String(req.url).includes("/v2/");
      checks.push({
        name: `legacy fallthrough (rule ${expect.rule}): ${method} ${pathOf(req.url)}`,
        family: "legacy",
        method,
        path: pathOf(req.url),
        headers: credentialHeaders(req),
        expect: {
          ...rule,
          ...(vars.GITLAB_PROXY_HOST ? { upstream: String(vars.GITLAB_PROXY_HOST) } : {}),
          ...(legacy ? { cell: legacy.id } : { sameAsOld: true }),
          ...(registry ? { registry: true } : {}),
        },
      });
    }
  }
  return { checks, notes, ruleset: name };
}

/** GITLAB_CELLS' list (none when it is unset or unreadable: the config check reports that). */
function cellsOf(vars) {
  try {
    const cells = vars.GITLAB_CELLS ? JSON.parse(String(vars.GITLAB_CELLS)) : [];
    return Array.isArray(cells) ? cells : [];
  } catch {
    return [];
  }
}

function runCapture(words, args, cwd) {
  return new Promise((resolve) => {
    const [cmd, ...rest] = words;
    const child = spawn(cmd, [...rest, ...args], { cwd, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    child.on("error", (e) => resolve({ status: 127, stdout, stderr: e.message }));
    child.on("close", (code) => resolve({ status: code ?? 128, stdout, stderr }));
  });
}

/** A routable token for `cell` from `rulesctl token` (seeded: the same token each run). */
export async function makeToken(rulesctl, cwd, cell) {
  const r = await runCapture(rulesctl, ["token", "--cell", String(cell), "--seed", String(52_000 + Number(cell))], cwd);
  const token = r.stdout.trim().split("\n").pop() ?? "";
  if (r.status !== 0 || !token) throw new Error(`rulesctl token --cell ${cell} failed (exit ${r.status}): ${r.stderr.trim() || "no token printed"}`);
  return token;
}

async function send(url, { method, headers }, timeoutS, signal) {
  const signals = [AbortSignal.timeout(timeoutS * 1000), ...(signal ? [signal] : [])];
  try {
    const res = await fetch(url, { method, headers, redirect: "manual", signal: AbortSignal.any(signals) });
    await res.body?.cancel();
    return { status: res.status, headers: res.headers };
  } catch (e) {
    return { status: null, error: e.name === "TimeoutError" ? `no answer within ${timeoutS}s` : (e.cause?.message ?? e.message) };
  }
}

/**
 * What a check's answer says of where it went: {status, cell, rule,
 * upstream, namedBy, selfNamed, registry, error?}. `cell` is the router's
 * naming when it named the route (`namedBy: "router"`), else the cell's own
 * (`"cell"`), else null; `selfNamed` what the cell said of itself in
 * `cellHeader` (null: nothing; undefined: no header asked for).
 */
export function observed(answer, cellHeader) {
  const h = answer.headers;
  const get = (name) => (h && name ? h.get(name) : null);
  const routed = get(ROUTE_HEADERS.upstream) !== null;
  const selfNamed = cellHeader ? get(cellHeader) : undefined;
  const named = (name) => get(name) || null;
  return {
    status: answer.status,
    namedBy: routed ? "router" : selfNamed ? "cell" : null,
    cell: routed ? named(ROUTE_HEADERS.cell) : (selfNamed ?? null),
    rule: routed ? named(ROUTE_HEADERS.rule) : null,
    upstream: routed ? named(ROUTE_HEADERS.upstream) : null,
    ...(cellHeader ? { selfNamed } : {}),
    registry: h ? h.has(REGISTRY_HEADER) : false,
    ...(answer.error ? { error: answer.error } : {}),
  };
}

/**
 * Why `got` (through the new version) breaks `check`'s expectation; null
 * when it does not. `cellHeader`: the header cells name themselves in
 * (""); `old`: the old version's answer, for the checks that compare.
 */
export function routingProblem(check, got, { cellHeader, cells, old }) {
  if (got.status === null) return `no answer (${got.error})`;
  if (got.status >= 500) return `answered ${got.status}`;
  const ids = cells.map((c) => String(c.id));
  const e = check.expect;
  if (e.registry && !got.registry) return `answered ${got.status} without ${REGISTRY_HEADER}: no registry answered it`;
  const wantsWhere = e.cell !== undefined || e.listedCell || e.rule !== undefined || e.upstream !== undefined;
  if (got.namedBy !== "router" && wantsWhere && !cellHeader) {
    return `answered ${got.status} without ${ROUTE_HEADERS.upstream}: the router named no route (it names it only to the smoke-test secret: SMOKE_TEST_SECRET must equal the Worker's GITLAB_SMOKE_TEST_SECRET)`;
  }
  if (cellHeader && got.selfNamed === null && (e.cell !== undefined || e.listedCell)) {
    return `answered ${got.status} without ${cellHeader}: no cell named itself${e.cell !== undefined ? ` (expected cell ${e.cell})` : ""}`;
  }
  if (got.namedBy === "router") {
    if (e.rule !== undefined && got.rule !== e.rule) return `decided by rule ${got.rule ?? "(none)"}, expected rule ${e.rule} (the route table's)`;
    if (e.upstream !== undefined && got.upstream !== e.upstream) return `sent to ${got.upstream}, expected the legacy cell GITLAB_PROXY_HOST=${e.upstream}`;
    if (cellHeader && got.selfNamed !== null && got.cell !== null && got.selfNamed !== got.cell) {
      return `the router sent it to cell ${got.cell} (${got.upstream}), but cell ${got.selfNamed} answered: check that cell's address in GITLAB_CELLS`;
    }
  }
  if (e.cell !== undefined && got.cell !== String(e.cell)) return `reached ${got.cell === null ? "no listed cell" : `cell ${got.cell}`}${got.upstream ? ` (${got.upstream})` : ""}, expected cell ${e.cell}`;
  if (e.listedCell && !ids.includes(String(got.cell))) return `reached ${got.cell === null ? `${got.upstream ?? "an upstream"}, no listed cell` : `cell ${got.cell}`}, which GITLAB_CELLS does not list`;
  // The old version names where it sent a request the same way, or (a
  // version from before the router named routes, without a cell header) not at all.
  if (e.sameAsOld && old && old.status !== null && old.namedBy !== null && old.cell !== got.cell) {
    return `reached cell ${got.cell ?? "(none named)"}; the version serving now sends it to cell ${old.cell ?? "(none named)"}`;
  }
  if (e.sameAsOld && old && old.status !== null && e.registry && old.registry !== got.registry) return "a registry answers it through the old version but not through the new";
  return null;
}

/** An answer as the deploy's log line says it: `200 from cell 2 (rule session_cookie, 10.0.0.2:443)`. */
function describe(got) {
  if (got.status === null) return "no answer";
  if (got.namedBy === null) return `${got.status}`;
  const where = got.cell !== null ? `cell ${got.cell}` : (got.upstream ?? "(none named)");
  const how = got.namedBy === "router" ? ` (rule ${got.rule ?? "(none)"}, ${got.upstream})` : "";
  return `${got.status} from ${where}${how}`;
}

/**
 * Runs the routing checks against `url`'s origin through `newVersion`
 * (and, for the checks that compare, through `oldVersion` too); with
 * `override` false, plainly (the new version is the only one). Returns
 * {ok, problem, checks: [{name, family, path, expect, new, old?, problem}]}.
 */
export async function runRoutingChecks({ url, override = true, vars, rulesDir, casesDir, rulesctl, cwd, cellHeader, workerName, newVersion, oldVersion, smokeSecret, timeoutS = 10, signal, say = () => {} }) {
  const plan = planRoutingChecks({ vars, rulesDir, casesDir });
  const cells = cellsOf(vars);
  // The secret opens the router's naming of each route; it travels only
  // over https: or to loopback (a first deploy's canary is https:).
  const secret = smokeSecret && smokeUrlProblem(url) === null ? { [SMOKE_TEST_HEADER]: smokeSecret } : {};
  // Without the secret and without cells that name themselves nothing says
  // where a request went (a first deploy without SMOKE_TEST_SECRET): the
  // checks see statuses and registry answers only.
  const blind = !secret[SMOKE_TEST_HEADER] && !cellHeader;
  if (blind) plan.notes.push("no SMOKE_TEST_SECRET to send (or not over https:) and no ROUTING_CHECK_CELL_HEADER: the routing checks see statuses and registry answers, not where each request went");
  const origin = new URL(url).origin;
  const results = [];
  const tokens = new Map();
  for (const check of plan.checks) {
    const headers = { ...check.headers };
    if (check.token) {
      let token = tokens.get(check.token.cell);
      if (!token) {
        try {
          token = await makeToken(rulesctl, cwd, check.token.cell);
        } catch (e) {
          results.push({ name: check.name, family: check.family, path: check.path, expect: check.expect, problem: e.message });
          continue;
        }
        tokens.set(check.token.cell, token);
      }
      headers[check.token.header] = check.token.bearer ? `Bearer ${token}` : token;
    }
    const through = async (version) =>
      observed(
        await send(
          `${origin}${check.path}`,
          // Without `override` the new version is the only one: no override header.
          { method: check.method, headers: { ...headers, ...secret, ...(override ? { "cloudflare-workers-version-overrides": versionOverride(workerName, version) } : {}) } },
          timeoutS,
          signal,
        ),
        cellHeader,
      );
    const got = await through(newVersion);
    const old = check.expect.sameAsOld && oldVersion ? await through(oldVersion) : undefined;
    const problem = routingProblem(blind ? { ...check, expect: check.expect.registry ? { registry: true } : {} } : check, got, { cellHeader, cells, old });
    say(`routing check: ${check.name}: ${describe(got)}${old ? ` (old version: ${describe(old)})` : ""}${problem ? ` -- ${problem}` : ""}`);
    results.push({ name: check.name, family: check.family, path: check.path, expect: check.expect, new: got, ...(old ? { old } : {}), problem });
  }
  const failed = results.filter((r) => r.problem);
  return {
    ok: failed.length === 0,
    problem: failed.length ? `routing check${failed.length > 1 ? "s" : ""} failed: ${failed.map((r) => `${r.name}: ${r.problem}`).join("; ")}` : null,
    ruleset: plan.ruleset,
    notes: plan.notes,
    checks: results,
  };
}
