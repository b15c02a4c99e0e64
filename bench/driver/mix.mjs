// The request mix every configuration gets, and the Topology Service's
// topology that routes it: ten cells, all served by the sink.
import { writeFileSync } from "node:fs";
import { routableToken } from "../../tests/e2e/tokens.mjs";

const HEX = () => [...Array(32)].map(() => "0123456789abcdef"[Math.floor(Math.random() * 16)]).join("");
const CELLS = 10; // cells 1..10, all served by the sink
const GROUPS = 20; // group-G belongs to cell (G % 10) + 1
const PROJECT_IDS = 1000; // project id P (1..1000) belongs to cell (P % 10) + 1

/** The realistic mix for rules/session_token.json (same proportions as the native bench). */
export function buildMix(n = 500) {
  const kinds = [
    ["session_cookie", 35],
    ["legacy_session", 10],
    ["anonymous", 15],
    ["private_token", 12],
    ["job_token", 8],
    ["bearer_token", 6],
    ["basic_auth_token", 6],
    ["runner_token", 4],
    ["registry_jwt_auth", 4],
  ];
  const total = kinds.reduce((a, k) => a + k[1], 0);
  const rnd = (k) => Math.floor(Math.random() * k);
  const tok = (prefix, cell) => routableToken(prefix, { c: cell, o: 1 + rnd(5000), u: 1 + rnd(1e6) });
  const out = [];
  for (const [kind, weight] of kinds) {
    for (let i = 0; i < Math.round((n * weight) / total); i++) {
      const cell = 1 + rnd(CELLS);
      const project = `group-${rnd(GROUPS)}/project-${rnd(50)}`;
      const h = {
        "User-Agent": "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
        Accept: "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
        "Accept-Language": "en-US,en;q=0.5",
        "Accept-Encoding": "identity",
      };
      let method = "GET";
      let path = `/${project}/-/merge_requests?scope=all&state=opened`;
      let body;
      switch (kind) {
        case "session_cookie":
          h.Cookie = `preferred_language=en; known_sign_in=${HEX()}; _gitlab_session=cell-${cell}-${HEX()}; event_filter=all`;
          break;
        case "legacy_session":
          h.Cookie = `preferred_language=en; _gitlab_session=${HEX()}`;
          break;
        case "anonymous":
          break;
        case "private_token":
          path = `/api/v4/projects/${1 + rnd(PROJECT_IDS)}/issues?state=opened&per_page=20`;
          h["PRIVATE-TOKEN"] = tok("glpat-", cell);
          break;
        case "job_token":
          path = `/api/v4/projects/${1 + rnd(PROJECT_IDS)}/packages/generic/pkg/1.0/file.bin`;
          h["JOB-TOKEN"] = tok("glcbt-", cell);
          break;
        case "bearer_token":
          path = `/api/v4/user`;
          h.Authorization = `Bearer ${tok("glpat-", cell)}`;
          break;
        case "basic_auth_token":
          path = `/${project}.git/info/refs?service=git-upload-pack`;
          h.Authorization = `Basic ${Buffer.from(`user-${rnd(1000)}:${tok("glpat-", cell)}`).toString("base64")}`;
          break;
        case "runner_token":
          method = "POST";
          path = "/api/v4/jobs/request";
          h["RUNNER-TOKEN"] = tok("glrt-", cell);
          h["Content-Type"] = "application/json";
          body = `{"info":{"name":"gitlab-runner","version":"17.0.0"},"last_update":"${HEX()}"}`;
          break;
        case "registry_jwt_auth":
          path = `/jwt/auth?account=user&client_id=docker&offline_token=true&service=container_registry&scope=repository:${project}:pull,push`;
          h.Authorization = `Basic ${Buffer.from("user:not-a-routable-password").toString("base64")}`;
          break;
      }
      out.push({ kind, method, path, headers: h, body });
    }
  }
  for (let i = out.length - 1; i > 0; i--) {
    const j = rnd(i + 1);
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
}

/** The mix as bench/wrk/mix.lua reads it: a request per line, tab-separated fields. */
export function writeMixFile(mix, file) {
  const lines = mix.map((r) => {
    const f = [r.method, r.path, ...Object.entries(r.headers).map(([k, v]) => `${k}: ${v}`)];
    if (r.body) f.push(`@body ${r.body}`);
    return f.join("\t");
  });
  writeFileSync(file, lines.join("\n") + "\n");
}

/** devstack topology's config: every cell at the sink, owning the mix's groups and project ids. */
export function topologyToml(sink) {
  let toml = `[topology]\ncache_control = "max-age=3600"\nnot_found_cache_control = "max-age=3600"\n`;
  for (let id = 1; id <= CELLS; id++) {
    const routes = [];
    for (let g = 0; g < GROUPS; g++) if ((g % CELLS) + 1 === id) routes.push(`group-${g}`);
    // The cells ruleset routes by path: top-level namespaces (routes) and
    // numeric project ids must be known for the mix's paths to route there.
    const projects = [];
    for (let p = 1; p <= PROJECT_IDS; p++) if ((p % CELLS) + 1 === id) projects.push(p);
    toml += `\n[[cells]]\nid = ${id}\naddress = "${sink}"\nsession_prefix = "cell-${id}"\nroutes = ${JSON.stringify(routes)}\nproject_ids = [${projects.join(", ")}]\n`;
  }
  return toml;
}

/**
 * GITLAB_CELLS of `count` cells (token-warm-ops: the mix's ten): cell 1 at
 * the sink, the others at addresses of their own, as the list requires
 * (an address listed twice is left out), never connected to: the service
 * answers every cell with the sink's address, which is cell 1's.
 */
export const cellList = (sink, count = CELLS) =>
  JSON.stringify(
    Array.from({ length: count }, (_, i) => ({
      id: i + 1,
      address: i === 0 ? sink : `cell-${i + 1}.internal:443`,
      session_prefix: `cell-${i + 1}`,
    })),
  );
