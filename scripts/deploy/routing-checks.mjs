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
//             the first case of each kind): must reach a listed cell, and
//             the same cell the version that serves now sends it to
//   legacy    the route table's first request that falls through to the
//             legacy cell: must reach the cell at GITLAB_PROXY_HOST
//   registry  every request whose rule targets the registry (the registry
//             environments): must be answered by a registry (a
//             `Docker-Distribution-API-Version` header), by the same cell
//             as the old version
// Where a request went is read from the answer: each cell names itself in
// the response header ROUTING_CHECK_CELL_HEADER (its GITLAB_CELLS id; set
// at the cell's load balancer). No check sends a write.
import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { SMOKE_TEST_HEADER, versionOverride } from "./health-check.mjs";

/** The header a container registry answers every /v2/ request with. */
export const REGISTRY_HEADER = "docker-distribution-api-version";

/** Reads the routing-check settings from the environment (settings.mjs). */
export function readRoutingSettings(env) {
  const cellHeader = (env.ROUTING_CHECK_CELL_HEADER || "").trim().toLowerCase();
  return {
    cellHeader,
    // ROUTING_CHECKS=true without a cell header: statuses and registry answers only.
    enabled: Boolean(cellHeader) || ["true", "1", "yes"].includes(String(env.ROUTING_CHECKS ?? "")),
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
  let cells = [];
  try {
    cells = vars.GITLAB_CELLS ? JSON.parse(String(vars.GITLAB_CELLS)) : [];
  } catch {
    cells = [];
  }
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
      expect: { cell: cell.id },
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
        expect: { cell: cell.id },
      });
    }
  }
  const casesFile = path.join(casesDir, `${name}.cases.json`);
  if (!fs.existsSync(casesFile)) {
    notes.push(`no route table ${casesFile}: no claim checks for ${name}`);
    return { checks, notes, ruleset: name };
  }
  const cases = rulesOf(JSON.parse(fs.readFileSync(casesFile, "utf8")));
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
        expect: { listedCell: cells.length > 0, sameAsOld: true, ...(registry ? { registry: true } : {}) },
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
        expect: { ...(legacy ? { cell: legacy.id } : { sameAsOld: true }), ...(registry ? { registry: true } : {}) },
      });
    }
  }
  return { checks, notes, ruleset: name };
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

/** What a check's answer says of where it went: {status, cell, registry, error?}. */
function observed(answer, cellHeader) {
  return {
    status: answer.status,
    cell: cellHeader && answer.headers ? (answer.headers.get(cellHeader) ?? null) : null,
    registry: answer.headers ? answer.headers.has(REGISTRY_HEADER) : false,
    ...(answer.error ? { error: answer.error } : {}),
  };
}

/** Why `got` (through the new version) breaks `check`'s expectation; null when it does not. */
export function routingProblem(check, got, { cellHeader, cells, old }) {
  if (got.status === null) return `no answer (${got.error})`;
  if (got.status >= 500) return `answered ${got.status}`;
  const ids = cells.map((c) => String(c.id));
  const e = check.expect;
  if (e.registry && !got.registry) return `answered ${got.status} without ${REGISTRY_HEADER}: no registry answered it`;
  if (cellHeader) {
    if (e.cell !== undefined && got.cell !== String(e.cell)) {
      return got.cell === null ? `answered ${got.status} without ${cellHeader}: no cell named itself (expected cell ${e.cell})` : `reached cell ${got.cell}, expected cell ${e.cell}`;
    }
    if (e.listedCell && !ids.includes(String(got.cell))) return `reached ${got.cell === null ? `an answer without ${cellHeader}` : `cell ${got.cell}`}, which GITLAB_CELLS does not list`;
    if (e.sameAsOld && old && old.status !== null && old.cell !== got.cell) return `reached cell ${got.cell ?? "(none named)"}; the version serving now sends it to cell ${old.cell ?? "(none named)"}`;
  }
  if (e.sameAsOld && old && old.status !== null && e.registry && old.registry !== got.registry) return "a registry answers it through the old version but not through the new";
  return null;
}

/**
 * Runs the routing checks against `url`'s origin through `newVersion`
 * (and, for the checks that compare, through `oldVersion` too); with
 * `override` false, plainly (the new version is the only one). Returns
 * {ok, problem, checks: [{name, family, path, expect, new, old?, problem}]}.
 */
export async function runRoutingChecks({ url, override = true, vars, rulesDir, casesDir, rulesctl, cwd, cellHeader, workerName, newVersion, oldVersion, smokeSecret, timeoutS = 10, signal, say = () => {} }) {
  const plan = planRoutingChecks({ vars, rulesDir, casesDir });
  const cells = (() => {
    try {
      return vars.GITLAB_CELLS ? JSON.parse(String(vars.GITLAB_CELLS)) : [];
    } catch {
      return [];
    }
  })();
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
          // Without `override` the new version is the only one: no override header, no secret.
          { method: check.method, headers: override ? { ...headers, "cloudflare-workers-version-overrides": versionOverride(workerName, version), ...(smokeSecret ? { [SMOKE_TEST_HEADER]: smokeSecret } : {}) } : headers },
          timeoutS,
          signal,
        ),
        cellHeader,
      );
    const got = await through(newVersion);
    const old = check.expect.sameAsOld && oldVersion ? await through(oldVersion) : undefined;
    const problem = routingProblem(check, got, { cellHeader, cells, old });
    say(`routing check: ${check.name}: ${got.status ?? "no answer"}${cellHeader ? ` from cell ${got.cell ?? "(none named)"}` : ""}${old ? ` (old version: cell ${old.cell ?? "(none named)"})` : ""}${problem ? ` -- ${problem}` : ""}`);
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
