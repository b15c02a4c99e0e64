// The route families of GitLab's route snapshot that name their owner in
// the path (rules/route_claims.txt) through the real worker in
// workerd with the `cells` ruleset, in front of `devstack up` with the
// shipped demo topology: cell 2 owns cell2-group, acme-org, project 200,
// namespace 20, user cell2-user; cell 3 owns cell3-group, cell3-org,
// organization 3, project 300, namespace 30, user 30 and cell3-user. The
// demo cells echo what they received, so each answer shows the cell. Then a
// real container pull (skopeo) through the dependency proxy path, with a
// real registry (Debian's docker-registry) standing in for cell 2's
// dependency proxy.
//
// Needs: bash scripts/build-worker.sh, cargo build -p devstack,
// bash scripts/setup.sh --registry (docker-registry and skopeo).
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startDemoStack, requestLogs, getJson, eventually, via, assertClassifiedTo } from "./harness.mjs";
import { requireRegistryTools, startRegistry, startPlainHttpFront, skopeoOk } from "./registry-harness.mjs";
import { writeOciImage, readOciImage } from "./registry-oci.mjs";

const stats = (stack) => getJson(`${stack.topology.admin}/_stats`);


describe("route families that name their owner reach the owning cell", () => {
  let stack;
  before(async () => {
    // A namespace named after a word GitLab has freed, on cell 3.
    stack = await startDemoStack({ topology: (toml) => toml.replace('routes = ["cell3-group"]', 'routes = ["cell3-group", "ci"]') });
  });
  after(async () => stack?.stop());

  test("one request of each family", async () => {
    const cases = [
      // Unleash clients polling a project's feature flags.
      ["/api/v4/feature_flags/unleash/200/client/features", "2", "api_project_id_families"],
      ["/api/v4/feature_flags/unleash/cell3-group%2Ftool/client/register", "3", "api_project_path"],
      // Composer from a group registry (singular /group/).
      ["/api/v4/group/20/-/packages/composer/packages", "2", "api_namespace_id_families"],
      ["/api/v4/group/cell3-group/-/packages/composer/p2/acme/app.json", "3", "api_namespace_path"],
      // Terraform modules: module_namespace is the top-level group.
      ["/api/v4/packages/terraform/modules/v1/cell3-group/vpc/aws/versions", "3", "api_owner_prefix"],
      // Vulnerability exports.
      ["/api/v4/security/projects/300/vulnerability_exports", "3", "api_project_id_families"],
      ["/api/v4/security/groups/20/vulnerability_exports", "2", "api_namespace_id_families"],
      // Jira DVCS.
      ["/-/jira/cell2-group/app/commit/0123abc", "2", "path_owner_prefix"],
      // The dependency proxy (served by Rails on the group's cell).
      ["/v2/cell3-group/dependency_proxy/containers/alpine/manifests/latest", "3", "path_dependency_proxy"],
      // Users by name, lookups by id.
      ["/users/cell3-user/activity", "3", "path_username"],
      ["/-/s/cell2-user", "2", "path_username"],
      ["/api/v4/users/cell2-user/projects", "2", "api_username"],
      ["/-/p/300", "3", "path_project_id"],
      ["/-/g/20", "2", "path_namespace_id"],
      ["/-/u/30", "3", "path_user_id"],
      // Instance-level package registries whose names carry the owner.
      ["/api/v4/packages/npm/@cell2-group%2fapp", "2", "api_npm_scope"],
      ["/api/v4/packages/conan/v1/conans/app/1.0/cell3-group+tool/stable/download_urls", "3", "api_conan_user"],
      // Group SCIM, organizations, Geo, the Web IDE, internal APIs.
      ["/api/scim/v2/groups/cell2-group/Users", "2", "api_owner_prefix"],
      ["/o/acme-org.json", "2", "path_organization"],
      ["/api/v4/organizations/3", "3", "api_organization_id"],
      ["/-/from_secondary/2/cell2-group/demo/info/lfs/objects/batch", "2", "path_owner_prefix"],
      ["/-/ide/project/cell3-group/tool/edit/main", "3", "path_owner_prefix"],
      ["/api/v4/internal/gitlab_subscriptions/namespaces/30/gitlab_subscription", "3", "api_namespace_id_families"],
      ["/api/v4/internal/observability/project/200/read/traces", "2", "api_project_id_families"],
      // A word GitLab no longer reserves is a namespace like any other.
      ["/ci/app", "3", "path_namespace"],
    ];
    await assertClassifiedTo(stack, cases);
  });

  test("literal routes beside a claimed name are no owner and cost no service call", async () => {
    const before = (await stats(stack)).classify_calls;
    for (const path of [
      "/o/new",
      "/o/new.json",
      "/api/v4/namespaces/storage/limit_exclusions",
      "/api/v4/groups/import",
      "/users/auth/github/callback",
      "/explore/catalog/cells",
      "/v2/",
      "/v2/virtual_registries/container/5/alpine/manifests/latest",
    ]) {
      const r = await via(stack, path);
      assert.equal(r.cell, "1", path);
      assert.equal(r.log.rule, "legacy", path);
      assert.equal(r.log.fell_through, undefined, path);
    }
    assert.equal((await stats(stack)).classify_calls, before, "no classify call");
  });
});

describe("a container pull through the dependency proxy path reaches the group's cell", () => {
  const scratch = mkdtempSync(join(tmpdir(), "router-dependency-proxy-"));
  const repo = "cell2-group/dependency_proxy/containers/alpine";
  let registry;
  let stack;
  let front;
  let image;
  before(async () => {
    requireRegistryTools();
    // Cell 2's dependency proxy speaks the registry API at cell 2's own
    // address: a real registry stands in for it, holding the image.
    registry = await startRegistry("dependency-proxy");
    const src = join(scratch, "src");
    image = writeOciImage(src, "v1");
    await skopeoOk(["copy", "--dest-tls-verify=false", "--preserve-digests", `oci:${src}:v1`, `docker://${registry.addr}/${repo}:v1`]);
    stack = await startDemoStack({
      topology: (toml) =>
        toml.replace(/(\[\[cells\]\]\nid = 2\n)([\s\S]*?)(?=\n\[\[cells\]\])/, (_, head, body) =>
          head + `address = "${registry.addr}"\n` + body.replace(/^(listen|git_repositories) = .*$/gm, ""),
        ),
      vars: { GITLAB_ALLOWED_UPSTREAMS: "127.0.0.1:*" },
    });
    front = await startPlainHttpFront(stack.url.replace("http://", ""));
  });
  after(async () => {
    await front?.stop();
    await stack?.stop();
    await registry?.stop();
    rmSync(scratch, { recursive: true, force: true });
  });

  test("skopeo pulls the image through the router, whole", async () => {
    const mark = requestLogs(stack).length;
    const registryMark = registry.requests().length;
    const dst = join(scratch, "dst");
    await skopeoOk(["copy", "--src-tls-verify=false", "--preserve-digests", `docker://${front.addr}/${repo}:v1`, `oci:${dst}:v1`]);
    const pulled = readOciImage(dst, "v1");
    assert.equal(pulled.manifestDigest, image.manifestDigest);
    assert.deepEqual(pulled.layerDigests, image.layerDigests);
    assert.ok(pulled.intact, "every pulled blob hashes to its digest");
    await eventually(() => {
      const lines = requestLogs(stack).slice(mark).filter((l) => l.path.startsWith(`/v2/${repo}/`));
      const blobs = lines.filter((l) => l.path.includes("/blobs/"));
      assert.equal(blobs.length, image.blobDigests.length, "every blob of the pull came through the router");
      assert.ok(lines.some((l) => l.path === `/v2/${repo}/manifests/v1`), "the manifest came through the router");
      for (const l of lines) {
        assert.equal(l.rule, "path_dependency_proxy", l.path);
        assert.equal(l.upstream, registry.addr, `${l.path} went to ${l.upstream}`);
        assert.equal(l.status, 200, l.path);
      }
      // The registry answered what the router carried.
      const got = registry.requests().slice(registryMark).filter((r) => r.uri.startsWith(`/v2/${repo}/`));
      assert.equal(got.length, lines.length, "the registry saw exactly the router's requests");
    });
  });
});
