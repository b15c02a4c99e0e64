// A local stand-in for Cloudflare's edge in front of one Worker, for the
// health check: it picks the version a request runs on from the
// cf-api-standin's current deployment the way Cloudflare documents it, and
// answers for that version. Version overrides cannot be served by an API
// stand-in, so this is where the deploy tests point HEALTH_CHECK_URL.
//   Cloudflare-Workers-Version-Overrides: <worker>="<version id>"  -> that
//     version, only if it is in the current deployment (also at 0 %)
//   Cloudflare-Workers-Version-Key: <key> -> a version chosen by a hash of
//     the key and the percentages (the same key, the same version)
//   neither -> a version chosen at random by the percentages
// A version answers 200 "version <id>", or 503 when its tag was marked
// broken, or 500 when it is not a router (api.isRouter: the empty fetch
// handler of a draft Worker `wrangler secret put` created); with `smokeSecret`, as the router does, 403 to an override
// request that lacks x-gitlab-http-router-smoke-test: <secret>. Every
// request is recorded.
// With `router: {build, vars}` a version answers as the real router does
// instead: the built worker in `build` (absolute) runs in workerd
// (Miniflare, tests/e2e/harness.mjs's startRouter), one instance per
// version, with the [vars] that version was uploaded with (the
// cf-api-standin keeps each upload's bindings), `vars` over them and
// GITLAB_SMOKE_TEST_SECRET = smokeSecret; the request is handed to it as
// it came (the override header included: the router checks the secret).
// A version_metadata binding is bound as Cloudflare binds it: {id: the
// version's id, tag, timestamp}. `router.options(version)` adds Miniflare
// worker options to that version's router (e.g. a ROUTER_METRICS binding,
// tests/e2e/metrics-capture.mjs), `router.extraWorkers` runs beside it.
//
//   const edge = await startEdge(api, workerName, { smokeSecret, router });
//   edge.url("/-/health"); edge.breakTag("abc1234"); edge.requests; await edge.close()
import { createHash } from "node:crypto";
import http from "node:http";
import path from "node:path";
import { ROOT as E2E_ROOT, startRouter } from "../e2e/harness.mjs";

/** The override dictionary (RFC 8941, strings only) -> {worker: version}. */
export function parseOverrides(value) {
  const out = {};
  for (const member of (value ?? "").split(",")) {
    const m = member.trim().match(/^([a-z*][a-z0-9_.*-]*)="([^"\\]*)"$/);
    if (m) out[m[1]] = m[2];
  }
  return out;
}

/** 0..99 from a version key. */
export function bucketOf(key) {
  return createHash("sha256").update(key).digest().readUInt32BE(0) % 100;
}

export async function startEdge(api, workerName, { smokeSecret, router } = {}) {
  const requests = [];
  const brokenTags = new Set();
  const routers = new Map(); // version id -> Promise<Miniflare>
  const routerLogs = [];

  function routerOf(version) {
    if (!routers.has(version)) {
      const vars = {};
      const record = api.scripts.get(workerName)?.versions.find((v) => v.id === version);
      for (const b of api.bindingsOf(version) ?? []) {
        if (b.type === "plain_text") vars[b.name] = b.text;
        if (b.type === "version_metadata") vars[b.name] = { id: version, tag: record?.annotations["workers/tag"] ?? "", timestamp: record?.metadata.created_on ?? "" };
      }
      Object.assign(vars, router.vars ?? {}, smokeSecret !== undefined ? { GITLAB_SMOKE_TEST_SECRET: smokeSecret } : {});
      // modulesRoot: the build is outside the repository (a test project's copy).
      const routerOptions = [{ modulesRoot: router.build, ...(router.options?.(version) ?? {}) }];
      routers.set(version, startRouter(vars, routerLogs, { build: path.relative(E2E_ROOT, router.build), routerOptions, extraWorkers: router.extraWorkers ?? [] }));
    }
    return routers.get(version);
  }

  async function viaRouter(req, res, version, how) {
    const mf = await routerOf(version);
    const headers = {};
    for (const [name, value] of Object.entries(req.headers)) if (name !== "host" && name !== "connection") headers[name] = value;
    const answer = await mf.dispatchFetch(`https://${router.host ?? "gitlab.example"}${req.url}`, { method: req.method, headers, redirect: "manual" });
    const body = Buffer.from(await answer.arrayBuffer());
    const out = { "x-standin-version": version };
    answer.headers.forEach((value, name) => {
      if (name !== "content-length" && name !== "transfer-encoding" && name !== "content-encoding") out[name] = value;
    });
    requests.push({ path: req.url, override: req.headers["cloudflare-workers-version-overrides"] ?? null, key: req.headers["cloudflare-workers-version-key"] ?? null, version, how, status: answer.status });
    res.writeHead(answer.status, out);
    res.end(body);
  }

  function choose(req) {
    const deployment = api.latestDeployment(workerName);
    if (!deployment) return { version: null, how: "no deployment" };
    const wanted = parseOverrides(req.headers["cloudflare-workers-version-overrides"])[workerName];
    if (wanted && deployment.versions.some((v) => v.version_id === wanted)) return { version: wanted, how: "override" };
    const key = req.headers["cloudflare-workers-version-key"];
    let point = key ? bucketOf(key) : Math.floor(Math.random() * 100);
    for (const v of deployment.versions) {
      if (point < v.percentage) return { version: v.version_id, how: key ? "key" : "random" };
      point -= v.percentage;
    }
    return { version: deployment.versions.at(-1).version_id, how: "random" };
  }

  const server = http.createServer((req, res) => {
    const { version, how } = choose(req);
    if (router && version) {
      viaRouter(req, res, version, how).catch((e) => {
        process.stderr.write(`edge-standin: the router of ${version} failed: ${e.stack}\n`);
        if (!res.headersSent) res.writeHead(599, { "content-type": "text/plain" });
        res.end(`edge-standin: ${e.message}\n`);
      });
      return;
    }
    const record = api.scripts.get(workerName)?.versions.find((v) => v.id === version);
    const broken = record && brokenTags.has(record.annotations["workers/tag"]);
    const empty = record && !api.isRouter(record);
    const refused = smokeSecret !== undefined && how === "override" && req.headers["x-gitlab-http-router-smoke-test"] !== smokeSecret;
    requests.push({
      path: req.url,
      override: req.headers["cloudflare-workers-version-overrides"] ?? null,
      key: req.headers["cloudflare-workers-version-key"] ?? null,
      version,
      how,
      status: !version ? 404 : refused ? 403 : empty ? 500 : broken ? 503 : 200,
    });
    res.writeHead(requests.at(-1).status, { "content-type": "text/plain", "x-standin-version": version ?? "" });
    res.end(version ? `version ${version}\n` : "no Worker on this route\n");
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  return {
    port,
    url: (p = "/") => `http://127.0.0.1:${port}${p}`,
    requests,
    routerLogs,
    breakTag(tag) {
      brokenTags.add(tag);
    },
    async close() {
      server.closeAllConnections?.();
      await new Promise((resolve) => server.close(resolve));
      for (const mf of routers.values()) await (await mf.catch(() => null))?.dispose().catch(() => {});
    },
  };
}
