// A local stand-in for the part of the Cloudflare API that the pinned wrangler
// (package.json) calls when deploy-worker.sh deploys, uploads versions, splits
// traffic and rolls back (wrangler-contract.test.mjs checks it on that
// wrangler). It listens on 127.0.0.1 on a free port, keeps state so
// wrangler's reads see its writes, records every request, and answers
// anything it does not implement with a loud log line and a 404 in the
// Cloudflare envelope, so a call wrangler starts making is found at once.
//
//   const api = await startStandin();
//   api.baseUrl            -> http://127.0.0.1:PORT/client/v4 (CLOUDFLARE_API_BASE_URL)
//   api.seed(name, {tag, routes, secrets}) -> an existing Worker with one version
//                            at 100 % (its routes published, its secrets' names set);
//                            its version counts as a router (api.isRouter)
//   api.isRouter(version)  -> the version is a router: seeded, or uploaded with a
//                            wasm module (a draft `wrangler secret put` creates,
//                            `export default { fetch() {} }`, is not)
//   api.routeLog           -> one entry per route change (scripts/:name/routes PUT,
//                            zone route PUT): every published route, the Worker
//                            it points at and the versions that Worker serves then
//   PUT .../scripts/:name/secrets: wrangler secret put (10007 when no Worker:
//                            wrangler then creates a draft Worker); a new version
//                            with the secret, deployed at 100 %, as the API does
//   PUT /zones/:zone/workers/routes/:id: points a route at another Worker (take-over)
//   api.failDeploymentPost(3) -> the 3rd POST .../deployments answers 500
//   api.failRoutesPut(1)   -> the 1st PUT .../scripts/:name/routes answers 500
//   api.failScriptPut(name) -> every PUT .../scripts/:name (wrangler deploy) answers 500
//   api.failDeploymentsGet(403, 9109) -> every GET .../scripts/:name/deployments
//                            answers that status and API error code
//   api.setShadow(dataset, (version_id) => [{rule, shadow_rule, difference, requests}])
//                          -> the shadow gate's query's rows for that version
//   api.setMetrics(dataset, ({version_id, tag, percentage}) => {requests, errors, p99_ms} | null)
//                          -> what the Analytics Engine SQL API answers for the
//                            dataset (POST .../analytics_engine/sql), per version
//                            (percentage: its share in the latest deployment);
//                            only the per-version query of docs/operations.md is
//                            understood, anything else is refused loudly (400)
//   api.bindingsOf(versionId) -> the bindings the version was uploaded with
//                            (seed(name, {bindings}) for a seeded one)
//   api.kvPut(ns, key, text) / api.kvGet(ns, key) -> a Workers KV value (wrangler kv key get/put --remote)
//   api.requests           -> [{method, path, query, json?, text?, parts?, status}]
//   api.unknown            -> the requests nothing here implements
//   await api.close()
// STANDIN_DEBUG=1 logs every call to stderr.
// The `compatibility_date` in its answers is a canned value of a fake API
// answer, not the router's runtime (wrangler.toml, scripts/runtime-config.mjs):
// the deploy program does not read it.
import http from "node:http";
import { createHash, randomUUID } from "node:crypto";

const envelope = (result, extra = {}) => ({ success: true, errors: [], messages: [], result, ...extra });
const failure = (code, message) => ({ success: false, errors: [{ code, message }], messages: [], result: null });

const zoneId = (name) => createHash("md5").update(name).digest("hex");

export async function startStandin({ log = Boolean(process.env.STANDIN_DEBUG) } = {}) {
  const scripts = new Map(); // name -> script record
  const kv = new Map(); // namespace id -> Map(key -> text)
  const kvStore = (ns) => kv.get(ns) ?? kv.set(ns, new Map()).get(ns);
  const requests = [];
  const unknown = [];
  let deploymentPosts = 0;
  const failingPosts = new Set();
  let routesPuts = 0;
  const failingRoutesPuts = new Set();
  const failingScriptPuts = new Set();
  let failingDeploymentsGet = null;
  let clock = Date.parse("2026-05-01T10:00:00Z");
  // version id -> the bindings its upload's metadata carried
  const uploadedBindings = new Map();
  // Analytics Engine: dataset -> ({version_id, tag, percentage}) => counts | null
  const metrics = new Map();
  // Analytics Engine: dataset -> (version_id) => the shadow gate's rows
  const shadows = new Map();
  const now = () => new Date((clock += 1000)).toISOString();

  function newVersion(script, { tag = null, message = null, triggeredBy = "upload", parts = [], seeded = false, bindings = [] } = {}) {
    const created = now();
    const version = {
      id: randomUUID(),
      number: script.versions.length + 1,
      metadata: {
        author_id: "standin",
        author_email: "deployer@example.com",
        source: "wrangler",
        created_on: created,
        modified_on: created,
        hasPreview: false,
      },
      annotations: {
        "workers/triggered_by": triggeredBy,
        ...(tag ? { "workers/tag": tag } : {}),
        ...(message ? { "workers/message": message } : {}),
      },
      resources: {
        script: { etag: randomUUID().replace(/-/g, ""), handlers: ["fetch"], last_deployed_from: "wrangler" },
        script_runtime: { compatibility_date: "2026-04-26", compatibility_flags: [], usage_model: "standard", limits: {} },
        bindings: [],
      },
      parts,
      seeded,
    };
    script.versions.unshift(version);
    uploadedBindings.set(version.id, bindings);
    return version;
  }

  /** A router version: seeded by a test, or uploaded with a wasm module. */
  function isRouter(version) {
    return Boolean(version && (version.seeded || version.parts.some((p) => p.type === "application/wasm" || /\.wasm$/.test(p.name) || /\.wasm$/.test(p.filename ?? ""))));
  }

  // The secret_text bindings of an upload's metadata: their names join the Worker's secrets.
  function keepSecretNames(script, metadata) {
    for (const b of metadata?.bindings ?? []) if (b.type === "secret_text" && !script.secrets.includes(b.name)) script.secrets.push(b.name);
  }

  const routeLog = [];
  /** After a route change: every published route, its Worker and what that Worker serves. */
  function logRoutes(via) {
    const routes = [...scripts.values()].flatMap((sc) =>
      sc.routes.map((r) => ({
        pattern: r.pattern,
        script: sc.name,
        serving: (sc.deployments[0]?.versions ?? []).map((v) => {
          const version = sc.versions.find((x) => x.id === v.version_id);
          return { version_id: v.version_id, percentage: v.percentage, router: isRouter(version), tag: version?.annotations["workers/tag"] ?? null };
        }),
      })),
    );
    routeLog.push({ via, routes });
  }

  function newDeployment(script, versions, message, triggeredBy = "deployment") {
    const deployment = {
      id: randomUUID(),
      source: "wrangler",
      strategy: "percentage",
      author_email: "deployer@example.com",
      created_on: now(),
      annotations: { "workers/triggered_by": triggeredBy, ...(message ? { "workers/message": message } : {}) },
      versions,
    };
    script.deployments.unshift(deployment);
    return deployment;
  }

  function newScript(name) {
    const created = now();
    const script = {
      name,
      id: name,
      tag: randomUUID().replace(/-/g, ""),
      created_on: created,
      modified_on: created,
      versions: [],
      deployments: [],
      subdomain: { enabled: false, previews_enabled: false },
      routes: [],
      // The names of the Worker's secrets (wrangler secret put).
      secrets: [],
      // Cron Triggers (wrangler.toml [triggers] crons), as wrangler PUTs them.
      schedules: [],
      settings: { logpush: false, tail_consumers: null, observability: null, tags: [], placement: {}, compatibility_date: "2026-04-26", compatibility_flags: [], usage_model: "standard", bindings: [] },
    };
    scripts.set(name, script);
    return script;
  }

  function seed(name, { tag = "0ldc0de", message = "seeded by the test", routes = [], secrets = [], bindings = [] } = {}) {
    const script = newScript(name);
    script.secrets = [...secrets];
    script.routes = routes.map((r) => ({ id: randomUUID(), script: name, ...r }));
    const version = newVersion(script, { tag, message, seeded: true, bindings });
    newDeployment(script, [{ version_id: version.id, percentage: 100 }], message, "upload");
    return version.id;
  }

  function serviceOf(script) {
    return {
      id: script.name,
      default_environment: {
        environment: "production",
        created_on: script.created_on,
        modified_on: script.modified_on,
        script: {
          id: script.name,
          tag: script.tag,
          etag: script.versions[0]?.resources.script.etag,
          handlers: ["fetch"],
          modified_on: script.modified_on,
          created_on: script.created_on,
          usage_model: "standard",
          compatibility_date: "2026-04-26",
          last_deployed_from: "wrangler",
        },
      },
      created_on: script.created_on,
      modified_on: script.modified_on,
    };
  }

  async function readBody(req) {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    return Buffer.concat(chunks);
  }

  // Multipart bodies are parsed with the platform's Request.formData(); for
  // each part we keep its name, file name, type and size (the metadata part
  // is also kept as JSON, since it carries the tag, message and main module).
  async function parseMultipart(headers, body) {
    const request = new Request("http://standin/", { method: "POST", headers: { "content-type": headers["content-type"] }, body });
    const form = await request.formData();
    const parts = [];
    let metadata = null;
    for (const [name, value] of form.entries()) {
      if (typeof value === "string") {
        parts.push({ name, size: Buffer.byteLength(value), type: "text/plain", filename: null });
        if (name === "metadata") metadata = JSON.parse(value);
      } else {
        const buffer = Buffer.from(await value.arrayBuffer());
        parts.push({ name, size: buffer.length, type: value.type, filename: value.name ?? null });
        if (name === "metadata") metadata = JSON.parse(buffer.toString("utf8"));
      }
    }
    return { parts, metadata };
  }

  function send(res, status, payload) {
    const body = JSON.stringify(payload);
    res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
    res.end(body);
  }

  async function handle(req, res) {
    const url = new URL(req.url, "http://127.0.0.1");
    const raw = await readBody(req);
    const record = { method: req.method, path: url.pathname, query: Object.fromEntries(url.searchParams) };
    const type = req.headers["content-type"] ?? "";
    if (raw.length > 0) {
      if (type.startsWith("multipart/form-data")) {
        const { parts, metadata } = await parseMultipart(req.headers, raw);
        record.parts = parts;
        record.metadata = metadata;
      } else if (type.includes("json")) {
        try {
          record.json = JSON.parse(raw.toString("utf8"));
        } catch {
          record.text = raw.toString("utf8");
        }
      } else {
        record.text = raw.toString("utf8");
      }
    }
    requests.push(record);
    if (log) process.stderr.write(`cf-api-standin: ${req.method} ${url.pathname}${url.search}\n`);
    const reply = (status, payload) => {
      record.status = status;
      send(res, status, payload);
    };

    // Zones: wrangler deploy looks up the zone of every route (zone_name).
    // Every zone name exists here, with an id derived from the name.
    if (url.pathname === "/client/v4/zones" && req.method === "GET") {
      const name = url.searchParams.get("name");
      const zones = name ? [{ id: zoneId(name), name, status: "active" }] : [];
      return reply(200, envelope(zones, { result_info: { page: 1, per_page: 50, count: zones.length, total_count: zones.length } }));
    }
    let zm;
    if ((zm = url.pathname.match(/^\/client\/v4\/zones\/([0-9a-f]{32})\/workers\/routes$/)) && req.method === "GET") {
      const routes = [...scripts.values()].flatMap((s) => s.routes.filter((r) => zoneId(r.zone_name ?? "") === zm[1]));
      return reply(200, envelope(routes));
    }
    // PUT a zone's route by id: point it at another Worker (the API's route update).
    if ((zm = url.pathname.match(/^\/client\/v4\/zones\/([0-9a-f]{32})\/workers\/routes\/([^/]+)$/)) && req.method === "PUT") {
      const owner = [...scripts.values()].find((sc) => sc.routes.some((r) => r.id === zm[2] && zoneId(r.zone_name ?? "") === zm[1]));
      if (!owner) return reply(404, failure(10019, "route not found"));
      const to = scripts.get(record.json?.script);
      if (!to) return reply(400, failure(10007, "workers.api.error.script_not_found"));
      const route = owner.routes.find((r) => r.id === zm[2]);
      owner.routes = owner.routes.filter((r) => r !== route);
      const moved = { ...route, pattern: record.json.pattern ?? route.pattern, script: to.name };
      to.routes.push(moved);
      logRoutes(`PUT zone route ${moved.pattern} -> ${to.name}`);
      return reply(200, envelope({ id: moved.id, pattern: moved.pattern, script: moved.script }));
    }

    // Workers Analytics Engine's SQL API: the query is the body.
    if (/^\/client\/v4\/accounts\/[0-9a-f]{32}\/analytics_engine\/sql$/.test(url.pathname) && req.method === "POST") {
      return answerSql(req, record, reply);
    }

    // DELETE a route by id (deploy-worker.sh --detach-routes): the Worker no longer serves its pattern.
    if ((zm = url.pathname.match(/^\/client\/v4\/zones\/([0-9a-f]{32})\/workers\/routes\/([^/]+)$/)) && req.method === "DELETE") {
      for (const script of scripts.values()) {
        const route = script.routes.find((r) => r.id === zm[2] && zoneId(r.zone_name ?? "") === zm[1]);
        if (route) {
          script.routes = script.routes.filter((r) => r !== route);
          logRoutes(`DELETE zone route ${route.pattern} (was -> ${script.name})`);
          return reply(200, envelope({ id: route.id }));
        }
      }
      return reply(404, failure(10020, `stand-in: no route ${zm[2]} in zone ${zm[1]}`));
    }

    // Workers KV values: what `wrangler kv key get/put --remote` calls (rulesctl control).
    const km = url.pathname.match(/^\/client\/v4\/accounts\/([0-9a-f]{32})\/storage\/kv\/namespaces\/([^/]+)\/values\/([^/]+)$/);
    if (km && (req.method === "GET" || req.method === "PUT")) {
      const store = kvStore(km[2]);
      const key = decodeURIComponent(km[3]);
      if (req.method === "GET") {
        if (!store.has(key)) return reply(404, failure(10009, "get: 'key not found'"));
        record.status = 200;
        res.writeHead(200, { "content-type": "application/octet-stream" });
        return res.end(store.get(key));
      }
      let value = raw.toString("utf8");
      if (type.startsWith("multipart/form-data")) {
        const form = await new Request("http://standin/", { method: "POST", headers: { "content-type": type }, body: raw }).formData();
        const part = form.get("value");
        value = typeof part === "string" ? part : Buffer.from(await part.arrayBuffer()).toString("utf8");
      }
      store.set(key, value);
      return reply(200, envelope(null));
    }

    const prefix = url.pathname.match(/^\/client\/v4\/accounts\/([0-9a-f]{32})\/workers\/(.*)$/);
    if (prefix) {
      const rest = prefix[2];
      let m;
      // GET services/:name: 10090 tells wrangler the Worker does not exist yet.
      if ((m = rest.match(/^services\/([^/]+)$/)) && req.method === "GET") {
        const script = scripts.get(m[1]);
        return script ? reply(200, envelope(serviceOf(script))) : reply(404, failure(10090, "workers.api.error.service_not_found"));
      }
      // GET workers/:name (the Workers API's Worker resource): wrangler
      // deploy reads the Worker's workers.dev and Preview URL state from it
      // (subdomain.enabled / previews_enabled) before it POSTs
      // scripts/:name/subdomain.
      if ((m = rest.match(/^workers\/([^/]+)$/)) && req.method === "GET") {
        const script = scripts.get(m[1]);
        if (!script) return reply(404, failure(10007, "workers.api.error.script_not_found"));
        return reply(200, envelope({
          id: script.tag,
          name: script.name,
          created_on: script.created_on,
          updated_on: script.modified_on,
          logpush: script.settings.logpush,
          observability: script.settings.observability ?? { enabled: false },
          subdomain: { ...script.subdomain },
          tags: script.settings.tags,
          tail_consumers: script.settings.tail_consumers ?? [],
        }));
      }
      if ((m = rest.match(/^subdomain$/)) && req.method === "GET") {
        return reply(200, envelope({ subdomain: "gitlab-standin" }));
      }
      if ((m = rest.match(/^scripts\/([^/]+)(\/.*)?$/))) {
        const name = m[1];
        const sub = m[2] ?? "";
        let script = scripts.get(name);
        // PUT scripts/:name: wrangler deploy (creates the Worker, a version and a 100 % deployment).
        if (sub === "" && req.method === "PUT") {
          if (failingScriptPuts.has(name)) return reply(500, failure(10013, `stand-in: PUT scripts/${name} fails on purpose`));
          if (!record.parts) return reply(400, failure(10000, "expected a multipart body"));
          script ??= newScript(name);
          script.modified_on = now();
          const annotations = record.metadata?.annotations ?? {};
          keepSecretNames(script, record.metadata);
          const version = newVersion(script, {
            tag: annotations["workers/tag"],
            message: annotations["workers/message"],
            triggeredBy: "upload",
            parts: record.parts,
            bindings: record.metadata?.bindings ?? [],
          });
          const deployment = newDeployment(script, [{ version_id: version.id, percentage: 100 }], annotations["workers/message"], "upload");
          return reply(200, envelope({
            id: name,
            etag: version.resources.script.etag,
            handlers: ["fetch"],
            created_on: script.created_on,
            modified_on: script.modified_on,
            usage_model: "standard",
            compatibility_date: "2026-04-26",
            startup_time_ms: 3,
            has_modules: true,
            has_assets: false,
            deployment_id: version.id,
            pipeline_hash: null,
            placement_mode: null,
            tail_consumers: null,
            logpush: false,
            tag: script.tag,
            etag_version: version.id,
          }));
        }
        if (!script) return reply(404, failure(10007, "workers.api.error.script_not_found"));
        // wrangler secret put: a new version of the latest one, with the secret, deployed at 100 %.
        if (sub === "/secrets" && req.method === "PUT") {
          const secretName = record.json?.name;
          if (!secretName) return reply(400, failure(10000, "expected {name, text, type}"));
          if (!script.secrets.includes(secretName)) script.secrets.push(secretName);
          const latest = script.versions[0];
          const version = newVersion(script, { triggeredBy: "secret", parts: latest?.parts ?? [], seeded: latest?.seeded ?? false });
          newDeployment(script, [{ version_id: version.id, percentage: 100 }], null, "secret");
          return reply(200, envelope({ name: secretName, type: "secret_text" }));
        }
        if (sub === "/deployments" && req.method === "GET") {
          if (failingDeploymentsGet) return reply(failingDeploymentsGet.status, failure(failingDeploymentsGet.code, "stand-in: GET deployments fails on purpose"));
          return reply(200, envelope({ deployments: script.deployments.map(({ ...d }) => d) }));
        }
        if (sub === "/deployments" && req.method === "POST") {
          deploymentPosts += 1;
          if (failingPosts.has(deploymentPosts)) {
            return reply(500, failure(10013, `stand-in: deployment POST #${deploymentPosts} fails on purpose`));
          }
          const versions = record.json?.versions ?? [];
          const sum = versions.reduce((total, v) => total + v.percentage, 0);
          const missing = versions.find((v) => !script.versions.some((known) => known.id === v.version_id));
          if (versions.length === 0 || versions.length > 2 || sum !== 100 || missing) {
            return reply(400, failure(10215, `invalid deployment: ${JSON.stringify(versions)}`));
          }
          const deployment = newDeployment(script, versions, record.json?.annotations?.["workers/message"]);
          return reply(200, envelope(deployment));
        }
        if (sub === "/versions" && req.method === "POST") {
          if (!record.parts) return reply(400, failure(10000, "expected a multipart body"));
          const annotations = record.metadata?.annotations ?? {};
          keepSecretNames(script, record.metadata);
          const version = newVersion(script, {
            tag: annotations["workers/tag"],
            message: annotations["workers/message"],
            parts: record.parts,
            bindings: record.metadata?.bindings ?? [],
          });
          script.modified_on = now();
          return reply(200, envelope({
            id: version.id,
            number: version.number,
            metadata: { ...version.metadata, has_preview: false },
            annotations: version.annotations,
            resources: version.resources,
            startup_time_ms: 3,
          }));
        }
        if (sub === "/versions" && req.method === "GET") {
          const items = script.versions.map(({ parts, ...v }) => v);
          return reply(200, envelope({ items }, { result_info: { page: 1, per_page: items.length, count: items.length, total_count: items.length } }));
        }
        if ((m = sub.match(/^\/versions\/([^/]+)$/)) && req.method === "GET") {
          const version = script.versions.find((v) => v.id === m[1]);
          if (!version) return reply(404, failure(10221, "workers.api.error.version_not_found"));
          const { parts, ...rest } = version;
          // The bindings it was uploaded with, as the API lists them: a secret's value is never given.
          const bindings = (uploadedBindings.get(version.id) ?? []).map(({ text, ...b }) => (b.type === "secret_text" ? b : { ...b, ...(text !== undefined ? { text } : {}) }));
          return reply(200, envelope({ ...rest, resources: { ...rest.resources, bindings } }));
        }
        // GET scripts/:name/secrets: wrangler deploy and versions upload
        // warn (and ask) when a [vars] name or binding would override
        // a secret of the Worker; names and types only, as the API answers.
        if (sub === "/secrets" && req.method === "GET") {
          return reply(200, envelope(script.secrets.map((name) => ({ name, type: "secret_text" }))));
        }
        if (sub === "/settings" && req.method === "GET") return reply(200, envelope(script.settings));
        if ((sub === "/settings" || sub === "/script-settings") && req.method === "PATCH") {
          Object.assign(script.settings, record.json ?? {});
          return reply(200, envelope(script.settings));
        }
        if (sub === "/script-settings" && req.method === "GET") return reply(200, envelope(script.settings));
        if (sub === "/subdomain" && req.method === "GET") return reply(200, envelope(script.subdomain));
        if (sub === "/subdomain" && req.method === "POST") {
          Object.assign(script.subdomain, record.json ?? {});
          return reply(200, envelope(script.subdomain));
        }
        if (sub === "/schedules" && req.method === "GET") return reply(200, envelope({ schedules: script.schedules }));
        if (sub === "/schedules" && req.method === "PUT") {
          script.schedules = (record.json ?? []).map((s) => ({ cron: s.cron, created_on: now(), modified_on: now() }));
          return reply(200, envelope({ schedules: script.schedules }));
        }
        if (sub === "/routes" && req.method === "GET") return reply(200, envelope(script.routes));
        if (sub === "/routes" && req.method === "PUT") {
          routesPuts += 1;
          if (failingRoutesPuts.has(routesPuts)) {
            return reply(500, failure(10013, `stand-in: routes PUT #${routesPuts} fails on purpose`));
          }
          // A pattern another Worker's route has is refused, as the API does.
          const taken = (record.json ?? []).find((r) => [...scripts.values()].some((other) => other !== script && other.routes.some((o) => o.pattern === r.pattern)));
          if (taken) return reply(409, failure(10020, `route pattern ${taken.pattern} is already in use by another Worker`));
          script.routes = (record.json ?? []).map((r) => ({ id: randomUUID(), script: name, ...r }));
          logRoutes(`PUT scripts/${name}/routes`);
          return reply(200, envelope(script.routes));
        }
      }
    }
    unknown.push(record);
    process.stderr.write(`cf-api-standin: UNKNOWN CALL ${req.method} ${url.pathname}${url.search} -> 404\n`);
    record.status = 404;
    return send(res, 404, failure(7003, `cf-api-standin does not implement ${req.method} ${url.pathname}`));
  }

  // The one query the stand-in understands: docs/operations.md's "Per
  // version during a rollout" (whitespace aside), with any dataset and
  // number of minutes, as JSON. The answer is computed from setMetrics'
  // counts the way the SQL would: requests, 5xx / requests, the p99 given.
  const PER_VERSION = new RegExp(
    "^SELECT blob2 AS version, SUM\\(_sample_interval\\) AS requests, sumIf\\(_sample_interval, blob9 = '5xx'\\) / SUM\\(_sample_interval\\) AS error_ratio, " +
      "quantileWeighted\\(0\\.99, double1, _sample_interval\\) AS p99_ms FROM ([A-Za-z_][A-Za-z0-9_]*) WHERE timestamp > NOW\\(\\) - INTERVAL '([0-9]+)' MINUTE " +
      "GROUP BY version ORDER BY requests DESC FORMAT JSON$",
  );

  // The shadow gate's query (scripts/deploy/shadow-gate.mjs), answered
  // from setShadow's rows for the version it names.
  const SHADOW = new RegExp(
    "^SELECT blob3 AS rule, blob11 AS shadow_rule, blob12 AS difference, SUM\\(_sample_interval\\) AS requests FROM ([A-Za-z_][A-Za-z0-9_]*) " +
      "WHERE timestamp > NOW\\(\\) - INTERVAL '([0-9]+)' MINUTE AND blob2 = '([A-Za-z0-9-]+)' AND blob11 != '' " +
      "GROUP BY rule, shadow_rule, difference ORDER BY requests DESC FORMAT JSON$",
  );

  function answerShadowSql(match, reply) {
    const [, dataset, , version] = match;
    const rows = (shadows.get(dataset)?.(version) ?? []).map((r) => ({ ...r, requests: String(r.requests) }));
    const meta = ["rule", "shadow_rule", "difference"].map((name) => ({ name, type: "String" }));
    return reply(200, { meta: [...meta, { name: "requests", type: "UInt64" }], data: rows, rows: rows.length, rows_before_limit_at_least: rows.length });
  }

  function answerSql(req, record, reply) {
    const refuse = (status, why) => {
      unknown.push(record);
      process.stderr.write(`cf-api-standin: REFUSED Analytics Engine SQL (${why}): ${JSON.stringify(record.text ?? "")}\n`);
      record.status = status;
      return reply(status, failure(status === 401 ? 10000 : 7003, `cf-api-standin: ${why}`));
    };
    if (!/^Bearer \S+$/.test(req.headers.authorization ?? "")) return refuse(401, "no bearer token");
    const query = (record.text ?? "").replace(/\s+/g, " ").trim();
    const shadow = query.match(SHADOW);
    if (shadow) return answerShadowSql(shadow, reply);
    const m = query.match(PER_VERSION);
    if (!m) return refuse(400, "a query the stand-in does not understand");
    const [, dataset] = m;
    const source = metrics.get(dataset);
    const rows = [];
    for (const script of scripts.values()) {
      const shares = script.deployments[0]?.versions ?? [];
      for (const v of script.versions) {
        const counts = source?.({ version_id: v.id, tag: v.annotations["workers/tag"] ?? null, percentage: shares.find((s) => s.version_id === v.id)?.percentage ?? 0 });
        if (!counts || !counts.requests) continue;
        rows.push({ version: v.id, requests: String(counts.requests), error_ratio: counts.errors / counts.requests, p99_ms: counts.p99_ms });
      }
    }
    rows.sort((a, b) => Number(b.requests) - Number(a.requests));
    const body = {
      meta: [
        { name: "version", type: "String" },
        { name: "requests", type: "UInt64" },
        { name: "error_ratio", type: "Float64" },
        { name: "p99_ms", type: "Float64" },
      ],
      data: rows,
      rows: rows.length,
      rows_before_limit_at_least: rows.length,
    };
    // The SQL API answers the rows as they are, not in the API's envelope.
    return reply(200, body);
  }

  const server = http.createServer((req, res) => {
    handle(req, res).catch((err) => {
      process.stderr.write(`cf-api-standin: handler error: ${err.stack}\n`);
      if (!res.headersSent) send(res, 500, failure(10000, String(err)));
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();

  return {
    port,
    baseUrl: `http://127.0.0.1:${port}/client/v4`,
    requests,
    unknown,
    scripts,
    seed,
    kvPut(ns, key, text) {
      kvStore(ns).set(key, text);
    },
    kvGet(ns, key) {
      return kvStore(ns).get(key);
    },
    isRouter,
    routeLog,
    failDeploymentPost(n) {
      failingPosts.add(n);
    },
    failRoutesPut(n) {
      failingRoutesPuts.add(n);
    },
    failScriptPut(name) {
      failingScriptPuts.add(name);
    },
    failDeploymentsGet(status, code) {
      failingDeploymentsGet = { status, code };
    },
    /** the POST .../deployments bodies that succeeded, oldest first */
    deploymentsPosted(name) {
      return requests
        .filter((r) => r.method === "POST" && r.status === 200 && r.path.endsWith(`/workers/scripts/${name}/deployments`))
        .map((r) => r.json.versions);
    },
    setShadow(dataset, source) {
      shadows.set(dataset, source);
    },
    setMetrics(dataset, source) {
      metrics.set(dataset, source);
    },
    bindingsOf(versionId) {
      return uploadedBindings.get(versionId) ?? null;
    },
    /** the Analytics Engine SQL queries that were answered */
    sqlQueries() {
      return requests.filter((r) => r.path.endsWith("/analytics_engine/sql") && r.status === 200).map((r) => r.text);
    },
    latestDeployment(name) {
      return scripts.get(name)?.deployments[0] ?? null;
    },
    close() {
      server.closeAllConnections?.();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}
