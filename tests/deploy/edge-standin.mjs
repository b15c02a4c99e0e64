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
//
//   const edge = await startEdge(api, workerName, { smokeSecret });
//   edge.url("/-/health"); edge.breakTag("abc1234"); edge.requests; await edge.close()
import { createHash } from "node:crypto";
import http from "node:http";

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

export async function startEdge(api, workerName, { smokeSecret } = {}) {
  const requests = [];
  const brokenTags = new Set();

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
    breakTag(tag) {
      brokenTags.add(tag);
    },
    close() {
      server.closeAllConnections?.();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}
