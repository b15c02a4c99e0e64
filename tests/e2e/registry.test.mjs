// Container registry routing with real parts: the built worker in workerd,
// devstack's Topology Service and demo cells, two real registries (Debian's
// docker-registry, distribution 2.8) as the legacy registry and cell 2's
// registry, and skopeo as the client. Images are pushed through the router,
// must land whole in the registry the rules select (and not in the other),
// must pull back through the router with identical digests, and the
// router's own log must show it carried every upload.
//
// Needs: bash scripts/build-worker.sh, cargo build -p devstack,
// bash scripts/setup.sh --registry (docker-registry and skopeo).
import { test, before, after, describe } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtempSync, existsSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startStack, request, requestLogs, postJson, eventually } from "./harness.mjs";
import {
  requireRegistryTools,
  startRegistry,
  startPlainHttpFront,
  skopeo,
  skopeoOk,
  jwtHS256,
  registryClaims,
  migrationRules,
  rolloutBucket,
} from "./registry-harness.mjs";
import { writeOciImage, readOciImage, MANIFEST_TYPE } from "./registry-oci.mjs";

const REPO_PATH = /^\/v2\/([a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:\/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)\/(?:manifests|blobs|tags|referrers)\//;


const scratch = mkdtempSync(join(tmpdir(), "router-registry-test-"));
let legacy; // the legacy registry (GITLAB_PROXY_HOST of the registry deployment; also cell 1's registryAddress)
let cell2; // cell 2's registry

before(async () => {
  requireRegistryTools();
  [legacy, cell2] = await Promise.all([startRegistry("legacy"), startRegistry("cell2")]);
});
after(async () => {
  await Promise.all([legacy?.stop(), cell2?.stop()]);
  rmSync(scratch, { recursive: true, force: true });
});

/** Starts a registry-deployment stack: the router with `ruleset`, GITLAB_PROXY_HOST = the legacy registry. */
async function registryStack(ruleset, cellRoutes) {
  const stack = await startStack({
    ruleset,
    cellCount: 3,
    cellRoutes,
    // Cell 3 deliberately has no registry.
    topology: { registryAddresses: { 1: legacy.addr, 2: cell2.addr } },
    vars: { GITLAB_PROXY_HOST: legacy.addr },
  });
  try {
    stack.front = await startPlainHttpFront(stack.url.replace("http://", ""));
  } catch (e) {
    await stack.stop();
    throw e;
  }
  const stop = stack.stop;
  stack.stop = async () => {
    await stack.front.stop();
    await stop();
  };
  return stack;
}

/** Methods the registry rulesets treat as writes (`onOutage: unavailable`). */
const WRITES = ["POST", "PUT", "PATCH", "DELETE"];
const isUpload = (method, path) => ["POST", "PATCH", "PUT"].includes(method) && /\/blobs\/uploads\//.test(path);
const blobFile = (registry, digest) => {
  const hex = digest.split(":")[1];
  return join(registry.dir, "data", "docker", "registry", "v2", "blobs", "sha256", hex.slice(0, 2), hex, "data");
};

/**
 * Pushes a fresh 3-layer OCI image with skopeo through the router to
 * `repo:tag`, then proves: it is whole in `home` and absent from `other`;
 * every request for the repository went through the router to `home`; the
 * registry received exactly the uploads the router logged (none bypassed
 * it); and it pulls back through the router with identical digests.
 */
async function pushThroughRouter(stack, repo, home, other) {
  const tag = "v1";
  const src = mkdtempSync(join(scratch, "src-"));
  const image = writeOciImage(src, tag);
  const routerMark = requestLogs(stack).length;
  const homeMark = home.requests().length;
  const otherMark = other.requests().length;
  const otherSawNothing = () =>
    assert.deepEqual(
      other.requests().slice(otherMark).filter((r) => r.uri.startsWith(`/v2/${repo}/`)),
      [],
      `${other.label} saw no request for ${repo}`,
    );
  const ref = `docker://${stack.front.addr}/${repo}:${tag}`;

  await skopeoOk(["copy", "--dest-tls-verify=false", "--preserve-digests", `oci:${src}:${tag}`, ref]);

  // Whole in `home`: the manifest by tag with the source's digest, every blob present.
  const manifest = await fetch(`${home.url}/v2/${repo}/manifests/${tag}`, { headers: { accept: MANIFEST_TYPE } });
  assert.equal(manifest.status, 200, `${repo} manifest in ${home.label}`);
  assert.equal(manifest.headers.get("docker-content-digest"), image.manifestDigest);
  for (const digest of image.blobDigests) {
    assert.equal((await fetch(`${home.url}/v2/${repo}/blobs/${digest}`, { method: "HEAD" })).status, 200, digest);
    assert.ok(existsSync(blobFile(home, digest)), `${digest} stored in ${home.label}`);
  }
  // The router carried it: every request for this repository went to `home`,
  // and `home` received exactly the uploads the router logged.
  const pushed = await eventually(() => {
    const lines = requestLogs(stack).slice(routerMark).filter((l) => l.path.startsWith(`/v2/${repo}/`));
    const uploads = lines.filter((l) => isUpload(l.method, l.path));
    const received = home
      .requests()
      .slice(homeMark)
      .filter((r) => r.uri.startsWith(`/v2/${repo}/`) && isUpload(r.method, r.uri.split("?")[0]));
    // One POST, PATCH and PUT per blob (config and layers), all seen by both.
    assert.equal(uploads.length, 3 * image.blobDigests.length, "uploads in the router log");
    assert.deepEqual(
      received.map((r) => `${r.method} ${r.uri.split("?")[0]}`).sort(),
      uploads.map((l) => `${l.method} ${l.path}`).sort(),
      "the registry received exactly the uploads the router carried",
    );
    assert.ok(lines.some((l) => l.method === "PUT" && l.path === `/v2/${repo}/manifests/${tag}` && l.status === 201));
    return { lines, uploads };
  });
  for (const l of pushed.lines) {
    assert.equal(l.upstream, home.addr, `${l.method} ${l.path} went to ${l.upstream}`);
    assert.ok(l.status < 500, `${l.method} ${l.path}: ${l.status}`);
  }

  // Pull back through the router: same manifest digest, same blobs, intact.
  const pullMark = requestLogs(stack).length;
  const dst = mkdtempSync(join(scratch, "dst-"));
  await skopeoOk(["copy", "--src-tls-verify=false", "--preserve-digests", ref, `oci:${dst}:${tag}`]);
  const pulled = readOciImage(dst, tag);
  assert.equal(pulled.manifestDigest, image.manifestDigest);
  assert.equal(pulled.configDigest, image.configDigest);
  assert.deepEqual(pulled.layerDigests, image.layerDigests);
  assert.ok(pulled.intact, "every pulled blob hashes to its digest");
  const raw = await skopeoOk(["inspect", "--raw", "--tls-verify=false", ref]);
  assert.equal(`sha256:${createHash("sha256").update(raw.stdout).digest("hex")}`, image.manifestDigest);
  await eventually(() => {
    const gets = requestLogs(stack)
      .slice(pullMark)
      .filter((l) => l.method === "GET" && l.path.startsWith(`/v2/${repo}/blobs/`));
    assert.equal(gets.length, image.blobDigests.length, "every blob of the pull came through the router");
    for (const l of gets) assert.equal(l.upstream, home.addr);
  });
  // Neither the push nor the pull touched `other`; it has neither the
  // repository nor any of the image's blob data.
  otherSawNothing();
  const elsewhere = await fetch(`${other.url}/v2/${repo}/manifests/${tag}`, { headers: { accept: MANIFEST_TYPE } });
  assert.equal(elsewhere.status, 404, `${repo} must not be in ${other.label}`);
  for (const digest of [image.manifestDigest, ...image.blobDigests]) {
    assert.ok(!existsSync(blobFile(other, digest)), `${digest} must not be stored in ${other.label}`);
  }
  const catalog = async (r) => (await (await fetch(`${r.url}/v2/_catalog`)).json()).repositories;
  assert.ok((await catalog(home)).includes(repo));
  assert.ok(!(await catalog(other)).includes(repo));

  rmSync(src, { recursive: true, force: true });
  rmSync(dst, { recursive: true, force: true });
  return { image, uploads: pushed.uploads.length };
}

/** No repository's requests were split between two upstreams. */
function assertNoSplit(stack) {
  const where = new Map();
  for (const l of requestLogs(stack)) {
    const m = REPO_PATH.exec(l.path);
    if (!m || !l.upstream) continue;
    const set = where.get(m[1]) ?? new Set();
    set.add(l.upstream);
    where.set(m[1], set);
  }
  const split = [...where].filter(([, s]) => s.size > 1).map(([r, s]) => `${r}: ${[...s].join(", ")}`);
  assert.deepEqual(split, [], "repositories whose requests went to two places");
  return where.size;
}

function assertNoCrash(stack) {
  const bad = stack.logs.filter((l) => /panicked|RuntimeError|unreachable executed|Uncaught/i.test(l));
  assert.deepEqual(bad, [], "the worker never panicked");
}

describe("container_registry ruleset, real registries and skopeo", () => {
  let stack;
  before(async () => {
    stack = await registryStack("container_registry", {
      1: ["gitlab-org", "gitlab-com"],
      2: ["cell2-group"],
      3: ["cell3-group"],
    });
  });
  after(() => stack?.stop());

  test("/v2/ and /v2/_catalog go to the first cell's registry", async () => {
    for (const path of ["/v2/", "/v2/_catalog"]) {
      const res = await request(`${stack.url}${path}`);
      assert.equal(res.status, 200, path);
      assert.equal(res.headers["docker-distribution-api-version"], "registry/2.0");
      const line = await eventually(() => {
        const l = requestLogs(stack).findLast((x) => x.path === path);
        assert.ok(l);
        return l;
      });
      assert.equal(line.rule, "registry_base");
      assert.equal(line.classify_type, "FIRST_CELL");
      assert.equal(line.upstream, legacy.addr);
    }
  });

  test("a push to a legacy-cell repository lands whole in the legacy registry, through the router, and pulls back identical", async () => {
    const { uploads } = await pushThroughRouter(stack, "gitlab-org/build/images/app", legacy, cell2);
    assert.equal(uploads, 12);
  });

  test("a push to a cell-2 repository (nested groups) lands whole in cell 2's registry, through the router, and pulls back identical", async () => {
    const { uploads } = await pushThroughRouter(stack, "cell2-group/backend/api/image", cell2, legacy);
    assert.equal(uploads, 12);
    const line = requestLogs(stack).findLast((l) => l.path.startsWith("/v2/cell2-group/backend/api/image/manifests/"));
    assert.equal(line.rule, "registry_repository");
    assert.equal(line.classify_type, "ROUTE");
  });

  test("upload Location URLs point back at the router (the registry builds them from X-Forwarded-Host/Proto)", async () => {
    const res = await request(`${stack.url}/v2/cell2-group/location/check/blobs/uploads/`, {
      method: "POST",
      headers: { host: "registry.example.test:8443" },
    });
    assert.equal(res.status, 202);
    assert.match(res.headers.location, /^http:\/\/registry\.example\.test:8443\/v2\/cell2-group\/location\/check\/blobs\/uploads\/[0-9a-f-]+\?_state=/);
    // Following it through the router reaches the same upload session on cell 2's registry.
    const follow = new URL(res.headers.location);
    const status = await request(`${stack.url}${follow.pathname}${follow.search}`, { headers: { host: follow.host } });
    assert.equal(status.status, 204);
    assert.equal(status.headers["docker-upload-uuid"], res.headers["docker-upload-uuid"]);
    const del = await request(`${stack.url}${follow.pathname}${follow.search}`, { method: "DELETE", headers: { host: follow.host } });
    assert.equal(del.status, 204);
    await eventually(() => {
      const lines = requestLogs(stack).filter((l) => l.path.startsWith("/v2/cell2-group/location/check/"));
      assert.deepEqual(lines.map((l) => l.upstream), [cell2.addr, cell2.addr, cell2.addr]);
    });
  });

  test("a cell without a registryAddress gives a clear 502, not its web address", async () => {
    for (const [method, path] of [
      ["GET", "/v2/cell3-group/app/manifests/latest"],
      ["POST", "/v2/cell3-group/app/blobs/uploads/"],
    ]) {
      const res = await request(`${stack.url}${path}`, { method });
      assert.equal(res.status, 502, `${method} ${path}`);
      assert.match(res.text, /gitlab-http-router: cell has no registry address for a registry request/);
      const line = await eventually(() => {
        const l = requestLogs(stack).findLast((x) => x.path === path && x.method === method);
        assert.ok(l);
        return l;
      });
      assert.equal(line.rule, WRITES.includes(method) ? "registry_repository_write" : "registry_repository");
      assert.match(line.error, /no registry address/);
      assert.equal(line.upstream ?? undefined, undefined, "nothing was forwarded (not to cell 3's web address either)");
    }
  });

  test("a repository no cell owns goes to the legacy registry", async () => {
    const res = await request(`${stack.url}/v2/nobody-owns/this/image/tags/list`);
    assert.equal(res.status, 404);
    assert.equal(res.json().errors[0].code, "NAME_UNKNOWN");
    const line = await eventually(() => {
      const l = requestLogs(stack).findLast((x) => x.path === "/v2/nobody-owns/this/image/tags/list");
      assert.ok(l);
      return l;
    });
    assert.equal(line.rule, "registry_repository");
    assert.equal(line.upstream, legacy.addr);
  });

  test("malformed /v2/ paths get the legacy registry or a clear 4xx, never a 5xx from the router", async () => {
    const component = (n) => "a".repeat(n);
    // [raw path, rule expected; null when the URL parser resolves dot segments into a valid repository]
    const cases = [
      ["/v2/gitlab-org%2Fno-such%2Fimage/manifests/v1", "encoded_repository_name"],
      ["/v2/%67itlab-org/no-such/image/manifests/v1", "encoded_repository_name"],
      ["/v2/Gitlab-Org/Build/manifests/latest", "legacy_registry"],
      ["/v2/gitlab-org//build/manifests/latest", "legacy_registry"],
      ["/v2//gitlab-org/build/manifests/latest", "legacy_registry"],
      ["/v2/gitlab-org/build/images/app/", "legacy_registry"],
      ["/v2/gitlab-org/-bad/manifests/latest", "legacy_registry"],
      ["/v2/gitlab-org/build/manifests", "legacy_registry"],
      ["/v2/g%C3%AFtlab/app/manifests/latest", "encoded_repository_name"],
      ["/v2/gitlab-org/app%00/manifests/latest", "encoded_repository_name"],
      ["/v2/_catalog/extra", "legacy_registry"],
      // Names over distribution's 255 characters are not classified (the rules' maxLength):
      // the legacy registry answers them as it will (no 4xx asked of it: "overlong").
      [`/v2/gitlab-org/${component(100)}/${component(100)}/${component(100)}/manifests/latest`, "overlong"],
      [`/v2/gitlab-org/${component(300)}/manifests/latest`, "overlong"],
      [`/v2/${"x/".repeat(2000)}x/manifests/latest`, "overlong"],
      // At the limit, still classified (a cell owns gitlab-org).
      [`/v2/gitlab-org/${component(244)}/manifests/latest`, "registry_repository"],
      ["/v2/gitlab-org/x/../../cell2-group/dotdot/tags/list", null],
      ["/v2/gitlab-org/x/%2e%2e/%2E%2E/cell2-group/dotdot/tags/list", null],
      ["/v2/./cell2-group/./dotdot/tags/list", null],
    ];
    for (const [path, rule] of cases) {
      const mark = requestLogs(stack).length;
      const res = await request(`${stack.url}${path}`);
      const shown = `${path.slice(0, 100)}: ${res.status} ${res.text.slice(0, 120)}`;
      const line = await eventually(() => {
        const l = requestLogs(stack).slice(mark)[0];
        assert.ok(l, `a log line for ${path}`);
        return l;
      });
      // The router itself never fails these: no router error, no router-made 5xx.
      assert.equal(line.error, undefined, `${shown}: ${line.error}`);
      assert.doesNotMatch(res.text, /^gitlab-http-router:/, shown);
      assert.equal(line.status, res.status, shown);
      if (rule === "legacy_registry" || rule === null) assert.ok(res.status >= 400 && res.status < 500 || res.status === 301, shown);
      // Percent-encoded names would be decoded by a registry into another repository: the router refuses them itself.
      if (rule === "encoded_repository_name") {
        assert.equal(res.status, 400, shown);
        assert.match(res.text, /NAME_INVALID/, shown);
        assert.equal(line.upstream ?? null, null, shown);
      }
      if (res.status === 301) {
        // distribution's router cleans "//" with a redirect to a path on the same host: the retry comes back through the router.
        assert.match(res.headers.location, /^\/v2\/[^/]/, shown);
      }
      if (rule) {
        assert.equal(line.rule, rule === "overlong" ? "legacy_registry" : rule, shown);
      } else {
        // Dot segments are resolved before routing; what is routed is what is forwarded.
        assert.equal(line.path, "/v2/cell2-group/dotdot/tags/list", path);
        assert.equal(line.upstream, cell2.addr, path);
        assert.equal(res.json().errors[0].code, "NAME_UNKNOWN");
        const seen = await eventually(() => {
          const r = cell2.requests().findLast((x) => x.uri.startsWith("/v2/cell2-group/dotdot/"));
          assert.ok(r);
          return r;
        });
        assert.equal(seen.uri, line.path);
      }
      if (line.rule === "legacy_registry") assert.equal(line.upstream, legacy.addr, path);
      if (res.status >= 500) {
        // Only the registry's own answer (distribution cannot store a 300-byte path component) passes through.
        assert.equal(line.upstream, legacy.addr, shown);
        assert.equal(res.json().errors[0].code, "UNKNOWN", shown);
      }
    }
    // Still serving.
    assert.equal((await request(`${stack.url}/v2/`)).status, 200);
    assertNoCrash(stack);
  });

  test("no repository's requests were split between registries", () => {
    assert.ok(assertNoSplit(stack) >= 4);
  });

  test("Topology Service down: a repository already classified keeps its registry; nothing crashes", async () => {
    await postJson(`${stack.topology.admin}/_faults`, { refuse_connections: true });
    const mark = requestLogs(stack).length;
    const known = await request(`${stack.url}/v2/cell2-group/backend/api/image/manifests/v1`, { headers: { accept: MANIFEST_TYPE } });
    assert.equal(known.status, 200, "served by cell 2's registry from the cached classification");
    // Never classified before: SPEC §6 falls back to the legacy registry,
    // GITLAB_PROXY_HOST (docs/registry.md discusses why a 503 would be safer
    // for pushes). The Topology Service would have said cell 2 owns
    // cell2-group, so landing in the legacy registry is the fallback's doing.
    const unknownPath = "/v2/cell2-group/never-seen/image/tags/list";
    const legacyMark = legacy.requests().length;
    const cell2Mark = cell2.requests().length;
    const unknown = await request(`${stack.url}${unknownPath}`);
    assert.equal(unknown.status, 404, `the legacy registry's own answer: ${unknown.text}`);
    assert.equal(unknown.json().errors[0].code, "NAME_UNKNOWN", unknown.text);
    const lines = await eventually(() => {
      const l = requestLogs(stack).slice(mark);
      assert.equal(l.length, 2);
      return l;
    });
    assert.equal(lines[0].upstream, cell2.addr);
    assert.ok(["memory", "cache-api", "stale"].includes(lines[0].cache), lines[0].cache);
    assert.equal(lines[1].path, unknownPath);
    assert.equal(lines[1].rule, "registry_repository");
    assert.equal(lines[1].cache, "fallback", "no classification: the SPEC §6 fallback");
    assert.match(lines[1].error, /^topology service unreachable/);
    assert.equal(lines[1].upstream, legacy.addr, "the router forwarded it to GITLAB_PROXY_HOST");
    assert.equal(lines[1].status, 404);
    // The legacy registry received exactly this request, and cell 2's registry nothing.
    await eventually(() =>
      assert.deepEqual(
        legacy.requests().slice(legacyMark).map((r) => [r.method, r.uri, r.status]),
        [["GET", unknownPath, 404]],
      ),
    );
    assert.deepEqual(cell2.requests().slice(cell2Mark).filter((r) => r.uri.startsWith("/v2/cell2-group/never-seen/")), []);
    assertNoCrash(stack);
  });

  test("Topology Service down: a push to a repository never classified gets 503 with Retry-After, never the legacy registry; a cached pull still works", async () => {
    // Still refusing connections (the test above).
    const repo = "cell2-group/outage/image";
    const legacyMark = legacy.requests().length;
    const cell2Mark = cell2.requests().length;
    const mark = requestLogs(stack).length;
    const src = mkdtempSync(join(scratch, "outage-"));
    writeOciImage(src, "v1");
    const push = await skopeo(["copy", "--retry-times", "0", "--dest-tls-verify=false", `oci:${src}:v1`, `docker://${stack.front.addr}/${repo}:v1`]);
    assert.notEqual(push.code, 0, "the push fails rather than landing in the wrong registry");
    assert.match(push.stderr, /503|unavailable/i, push.stderr);
    const refused = await eventually(() => {
      const l = requestLogs(stack).slice(mark).filter((x) => x.path.startsWith(`/v2/${repo}/`) && WRITES.includes(x.method));
      assert.ok(l.length >= 1, "the upload start reached the router");
      return l;
    });
    for (const l of refused) {
      assert.equal(l.status, 503, `${l.method} ${l.path}`);
      assert.equal(l.rule, "registry_repository_write");
      assert.equal(l.cache, "fallback");
      assert.equal(l.upstream ?? undefined, undefined, "nothing was forwarded");
      assert.match(l.error, /topology service (unreachable|not asked).*onOutage: unavailable/);
    }
    const direct = await request(`${stack.url}/v2/${repo}/blobs/uploads/`, { method: "POST" });
    assert.equal(direct.status, 503);
    assert.match(direct.headers["retry-after"], /^[1-9][0-9]*$/);
    assert.equal(direct.json().errors[0].code, "UNAVAILABLE");
    // Reads (skopeo's HEAD of each blob) may reach the legacy registry, as
    // any read of an unclassified repository does; no write does.
    const writesTo = (r, m) =>
      r.requests().slice(m).filter((x) => x.uri.startsWith(`/v2/${repo}/`) && WRITES.includes(x.method));
    assert.deepEqual(writesTo(legacy, legacyMark), [], "no write of the push reached the legacy registry");
    assert.deepEqual(writesTo(cell2, cell2Mark), []);
    const catalog = async (r) => (await (await fetch(`${r.url}/v2/_catalog`)).json()).repositories ?? [];
    assert.ok(!(await catalog(legacy)).includes(repo), "nothing of it is stored in the legacy registry");
    // A read of a repository classified before the outage still works.
    const dst = mkdtempSync(join(scratch, "outage-pull-"));
    await skopeoOk(["copy", "--src-tls-verify=false", `docker://${stack.front.addr}/cell2-group/backend/api/image:v1`, `oci:${dst}:v1`]);
    assert.ok(readOciImage(dst, "v1").intact);
    rmSync(src, { recursive: true, force: true });
    rmSync(dst, { recursive: true, force: true });
    assertNoCrash(stack);
  });
});

describe("registry_migration ruleset: a gradual move of repositories, through the worker", () => {
  // The Topology Service says cell 2 (and its registry) owns gitlab-org and
  // gitlab-com: the rollout decides which of their repositories already go there.
  let stack;
  const { migrated, rollout } = migrationRules();
  const candidates = Array.from({ length: 30 }, (_, i) => `gitlab-org/e2e/image-${i}`);
  const migratedRepo = candidates.find(migrated);
  const legacyRepo = candidates.find((r) => !migrated(r));
  before(async () => {
    stack = await registryStack("registry_migration", { 2: ["gitlab-org", "gitlab-com", "acme"] });
  });
  after(() => stack?.stop());

  test("the shipped step is 5 % of the included repositories", () => {
    assert.equal(rollout.percentage, 5);
    assert.ok(migratedRepo && legacyRepo, "the candidates hold both kinds");
  });

  test("the worker moves exactly the repositories the shipped rollout selects, every request of each to one place", async () => {
    const low = (prefix) => {
      for (let i = 0; ; i++) if (rolloutBucket(rollout.seed, `${prefix}${i}`) < 500) return `${prefix}${i}`;
    };
    const repos = [
      ...candidates,
      low("gitlab-com/www/image-"), // included, low bucket: moves
      low("gitlab-org/gitlab/image-"), // excluded though its bucket is low
      low("gitlab-com/gl-infra/image-"), // excluded though its bucket is low
      low("acme/app/image-"), // not included though its bucket is low (and cell 2 owns acme)
    ];
    let moved = 0;
    for (const repo of repos) {
      const mark = requestLogs(stack).length;
      const expected = migrated(repo) ? cell2.addr : legacy.addr;
      moved += expected === cell2.addr;
      const tags = await request(`${stack.url}/v2/${repo}/tags/list`);
      assert.equal(tags.status, 404, repo);
      const head = await request(`${stack.url}/v2/${repo}/manifests/latest`, { method: "HEAD" });
      assert.equal(head.status, 404, repo);
      const upload = await request(`${stack.url}/v2/${repo}/blobs/uploads/`, { method: "POST" });
      assert.equal(upload.status, 202, repo);
      const next = new URL(upload.headers.location);
      const cancel = await request(`${stack.url}${next.pathname}${next.search}`, { method: "DELETE", headers: { host: next.host } });
      assert.equal(cancel.status, 204, repo);
      const lines = await eventually(() => {
        const l = requestLogs(stack).slice(mark);
        assert.equal(l.length, 4);
        return l;
      });
      for (const l of lines) {
        assert.equal(l.upstream, expected, `${repo}: ${l.method} ${l.path}`);
        const rule = migrated(repo) ? "registry_repository_migrated" : "registry_repository_legacy";
        assert.equal(l.rule, migrated(repo) && WRITES.includes(l.method) ? `${rule}_write` : rule, repo);
      }
    }
    assert.ok(moved >= 2 && moved <= repos.length - 4, `${moved} of ${repos.length} moved`);
    assertNoSplit(stack);
  });

  test("a migrated repository: skopeo push lands only in the new registry, pull back identical", async () => {
    await pushThroughRouter(stack, migratedRepo, cell2, legacy);
    const line = requestLogs(stack).findLast((l) => l.path.startsWith(`/v2/${migratedRepo}/manifests/`));
    assert.equal(line.rule, "registry_repository_migrated");
  });

  test("a repository not migrated yet: skopeo push lands only in the legacy registry, pull back identical", async () => {
    await pushThroughRouter(stack, legacyRepo, legacy, cell2);
    const line = requestLogs(stack).findLast((l) => l.path.startsWith(`/v2/${legacyRepo}/manifests/`));
    assert.equal(line.rule, "registry_repository_legacy");
    assert.equal(line.action, "proxy");
  });

  test("a registry bearer token (JWT) routes the /v2/ ping by its repository claim", async () => {
    for (const [repo, rule, upstream] of [
      [migratedRepo, "registry_base_token_migrated", cell2.addr],
      [legacyRepo, "registry_base", legacy.addr],
    ]) {
      const token = jwtHS256(registryClaims(repo), "any-key-the-router-does-not-verify");
      const mark = requestLogs(stack).length;
      const res = await request(`${stack.url}/v2/`, { headers: { authorization: `Bearer ${token}` } });
      assert.equal(res.status, 200);
      const line = await eventually(() => {
        const l = requestLogs(stack).slice(mark)[0];
        assert.ok(l);
        return l;
      });
      assert.equal(line.rule, rule, repo);
      assert.equal(line.upstream, upstream, repo);
      if (rule === "registry_base_token_migrated") assert.equal(line.classify_type, "ROUTE");
    }
    // The path decides repository requests: a migrated repository's token on another repository's path moves nothing.
    const token = jwtHS256(registryClaims(migratedRepo));
    const mark = requestLogs(stack).length;
    await request(`${stack.url}/v2/${legacyRepo}/tags/list`, { headers: { authorization: `Bearer ${token}` } });
    const line = await eventually(() => {
      const l = requestLogs(stack).slice(mark)[0];
      assert.ok(l);
      return l;
    });
    assert.equal(line.upstream, legacy.addr);
  });

  test("malformed registry JWTs get the first cell's registry, never a 5xx", async () => {
    const b64 = (x) => Buffer.from(typeof x === "string" ? x : JSON.stringify(x)).toString("base64url");
    const migratedToken = jwtHS256(registryClaims(migratedRepo));
    const tokens = [
      "not-a-jwt",
      "a.b.c",
      `${b64({ alg: "HS256" })}.${b64("[]")}.sig`,
      `${b64({ alg: "none" })}.${b64({ access: "x" })}.`,
      `${b64({ alg: "HS256" })}.${b64({ access: [] })}.sig`,
      `${b64({ alg: "HS256" })}.${b64({ access: [{ name: null }] })}.sig`,
      `${b64({ alg: "HS256" })}.${b64({ access: [{ name: 42 }] })}.sig`,
      `${b64({ alg: "HS256" })}.${b64({ exp: "tomorrow", access: [{ name: migratedRepo }] })}.sig`,
      `${b64("not json")}.${b64({ access: [{ name: migratedRepo }] })}.sig`,
      `${b64({ alg: "HS256" })}.${b64({ access: [{ name: migratedRepo }] })}`, // two parts
      `${migratedToken}.extra`,
      `${migratedToken.slice(0, 40)}!${migratedToken.slice(41)}`,
      jwtHS256({ access: [{ type: "repository", name: `gitlab-org/${"a".repeat(20_000)}` }] }), // over 16 KiB
    ];
    for (const token of tokens) {
      const mark = requestLogs(stack).length;
      const res = await request(`${stack.url}/v2/`, { headers: { authorization: `Bearer ${token}` } });
      assert.equal(res.status, 200, token.slice(0, 80));
      const line = await eventually(() => {
        const l = requestLogs(stack).slice(mark)[0];
        assert.ok(l);
        return l;
      });
      assert.equal(line.rule, "registry_base", token.slice(0, 80));
      assert.equal(line.upstream, legacy.addr);
    }
    // A claim that is no repository name at all: whatever it classifies to, a registry answers, not the router.
    for (const name of ["gitlab-org/../../etc/passwd", "gitlab-org/%2e%2e", "gitlab-org/\u0000x", `gitlab-org/${"é".repeat(100)}`]) {
      const res = await request(`${stack.url}/v2/`, { headers: { authorization: `Bearer ${jwtHS256(registryClaims(name))}` } });
      assert.equal(res.status, 200, name);
    }
    assert.equal((await request(`${stack.url}/v2/${migratedRepo}/tags/list`)).status, 200);
    assertNoCrash(stack);
  });
});

describe("session_token ruleset: /jwt/auth scopes, malformed ones included", () => {
  let stack;
  before(async () => {
    stack = await startStack({ ruleset: "session_token", cellCount: 3, cellRoutes: { 2: ["cell2-group"], 3: ["cell3-group"] } });
  });
  after(() => stack?.stop());

  const auth = (query) => request(`${stack.url}/jwt/auth?${query}`);

  test("the first repository scope picks the cell", async () => {
    for (const [query, cell] of [
      ["service=container_registry&scope=repository:cell2-group/app/image:pull,push", "2"],
      ["service=container_registry&scope=repository:cell3-group/app:pull", "3"],
      ["service=container_registry&scope=repository:cell2-group/app:*", "2"],
      ["scope=repository%3Acell2-group%2Fapp%3Apull&service=container_registry", "2"],
      ["service=container_registry&scope=junk&scope=repository:cell3-group/x:pull", "3"],
      ["service=container_registry&scope=repository:gitlab-org/app:pull", "1"],
    ]) {
      const res = await auth(query);
      assert.equal(res.status, 200, query);
      const echo = res.json();
      assert.equal(echo.cell, cell, query);
      assert.equal(echo.path, "/jwt/auth");
      if (cell !== "1") assert.equal(echo.headers["x-gitlab-http-router-rule-type"], "route", query);
    }
  });

  test("malformed scopes go to the legacy cell, never a 5xx", async () => {
    const queries = [
      "service=container_registry",
      "scope=",
      "scope=repository:Cell2-Group/App:pull",
      "scope=repository:cell2-group/app",
      "scope=repository::pull",
      "scope=repository:cell2-group//app:pull",
      "scope=repository:/cell2-group/app:pull",
      "scope=repository:cell2-group/../x:pull",
      "scope=repository:cell2-group/app:pull:extra",
      "scope=repository:cell2-group/app:PULL",
      "scope=registry:catalog:*",
      "scope=%ff%fe%fd",
      "scope=repository:cell2-group%00/app:pull",
      "scope=repository:cell2-group/app%0a:pull",
      `scope=repository:cell2-group/${"a".repeat(8000)}:pull%`,
      "scope=%",
      "scope",
      "&&&=&=",
    ];
    for (const query of queries) {
      const res = await auth(query);
      assert.ok(res.status < 500, `${query.slice(0, 80)}: ${res.status}`);
      assert.equal(res.status, 200, query.slice(0, 80));
      assert.equal(res.json().cell, "1", query.slice(0, 80));
    }
    assertNoCrash(stack);
  });
});
