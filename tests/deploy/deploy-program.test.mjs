// Unit tests of the deploy program's smaller pieces (scripts/deploy/*.mjs):
// arguments, wrangler.toml, wrangler's output entries, the routes check, the
// health check against a loopback server, the rollout record.
import assert from "node:assert/strict";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { describe, test } from "node:test";
import { parseArguments } from "../../scripts/deploy/arguments.mjs";
import { deploymentVersions } from "../../scripts/deploy/deployment-state.mjs";
import { healthyStatus, runHealthCheck, versionOverride } from "../../scripts/deploy/health-check.mjs";
import { DeployError } from "../../scripts/deploy/log.mjs";
import { missingRoutes, routeZone } from "../../scripts/deploy/routes.mjs";
import { newRecord, readRecord, RecordFile } from "../../scripts/deploy/rollout-record.mjs";
import { quoteWords } from "../../scripts/deploy/shell-words.mjs";
import { parseWranglerConfig } from "../../scripts/deploy/wrangler-config.mjs";
import { lastEntry, readOutputEntries } from "../../scripts/deploy/wrangler.mjs";
import { REPO } from "./helpers.mjs";

const tempDir = (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "deploy-unit-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
};

describe("arguments", () => {
  test("modes, environment, --dry-run", () => {
    assert.deepEqual(parseArguments(["staging", "--dry-run"]), { mode: "deploy", environment: "staging", lockEnvironments: [], dryRun: true, help: false, takeOverRoutes: false, attachRoutes: false });
    assert.equal(parseArguments(["--rollback", "production"]).mode, "rollback");
    assert.deepEqual(parseArguments(["--detach-routes", "production", "--dry-run"]), { mode: "detach-routes", environment: "production", lockEnvironments: [], dryRun: true, help: false, takeOverRoutes: false, attachRoutes: false });
    assert.deepEqual(parseArguments(["--check-lock", "a", "b"]).lockEnvironments, ["a", "b"]);
    assert.equal(parseArguments(["production", "--attach-routes"]).attachRoutes, true);
    assert.throws(() => parseArguments(["--rollback", "production", "--attach-routes"]), (e) => e instanceof DeployError && e.code === 2);
  });
  test("unknown options and extra arguments exit 2", () => {
    for (const argv of [["--nope"], ["a", "b"]]) assert.throws(() => parseArguments(argv), (e) => e instanceof DeployError && e.code === 2);
  });
});

describe("wrangler.toml", () => {
  test("the repository's environments, Worker names, vars and routes", () => {
    const config = parseWranglerConfig(fs.readFileSync(path.join(REPO, "wrangler.toml"), "utf8"));
    assert.deepEqual(config.deployable, ["staging", "production", "registry-staging", "registry-production"]);
    const staging = config.environment("staging");
    assert.equal(staging.workerName, "gitlab-http-router-staging");
    assert.equal(staging.vars.GITLAB_RULES_CONFIG, "session_token");
    assert.deepEqual(staging.routes.map((r) => ({ ...r })), [{ pattern: "staging.gitlab.com/*", zone_name: "gitlab.com" }]);
    assert.equal(config.environment("nowhere"), null);
  });
});

describe("wrangler's machine-readable output", () => {
  test("entries after a line, malformed lines ignored, the last of a type", (t) => {
    const file = path.join(tempDir(t), "out.ndjson");
    fs.writeFileSync(file, ['{"type":"wrangler-session"}', '{"type":"version-upload","version_id":"v1"}', "not json", '{"type":"version-upload","version_id":"v2"}', ""].join("\n"));
    const all = readOutputEntries(file);
    assert.equal(all.length, 3);
    assert.equal(lastEntry(all, "version-upload").version_id, "v2");
    assert.deepEqual(readOutputEntries(file, 3).map((e) => e.version_id), ["v2"]);
    assert.equal(lastEntry(all, "version-deploy"), null);
    assert.deepEqual(readOutputEntries(path.join(path.dirname(file), "missing")), []);
  });
  test("deployments status --json: versions with rounded percentages, 0 % kept", () => {
    assert.deepEqual(deploymentVersions({ versions: [{ version_id: "a", percentage: 99.9999 }, { version_id: "b", percentage: 0 }] }), [
      { id: "a", percentage: 100 },
      { id: "b", percentage: 0 },
    ]);
    assert.deepEqual(deploymentVersions(null), []);
  });
  test("quoteWords", () => {
    assert.equal(quoteWords(["versions", "deploy", "a@5%", "--message", "it's a test"]), "versions deploy a@5% --message 'it'\\''s a test'");
  });
});

describe("routes check", () => {
  const wanted = [{ pattern: "gitlab.com/*", zone_name: "gitlab.com" }, { pattern: "x.example/*", zone_id: "z1" }, "bare.example/*", { pattern: "cd.example", custom_domain: true }];
  test("published for this Worker, for another one, or not at all", () => {
    const published = { "name:gitlab.com": [{ pattern: "gitlab.com/*", script: "w" }], "id:z1": [{ pattern: "x.example/*", script: "other" }] };
    assert.deepEqual(missingRoutes(wanted, published, "w"), { missing: ["x.example/*"], uncheckable: ["bare.example/*", "cd.example"] });
    assert.deepEqual(missingRoutes(wanted.slice(0, 1), {}, "w").missing, ["gitlab.com/*"]);
  });
  test("routeZone", () => {
    assert.equal(routeZone(wanted[0]), "name:gitlab.com");
    assert.equal(routeZone(wanted[1]), "id:z1");
    assert.equal(routeZone(wanted[2]), null);
    assert.equal(routeZone(wanted[3]), null);
  });
});

describe("health check", () => {
  test("the override header is a structured-header dictionary naming the version", () => {
    assert.equal(versionOverride("gitlab-http-router-staging", "v-1"), 'gitlab-http-router-staging="v-1"');
    assert.deepEqual([199, 200, 302, 399, 400, 503].map(healthyStatus), [false, true, true, true, false, false]);
  });
  test("HEALTH_CHECK_URL on a loopback server: the header arrives; 3xx passes, 5xx and no answer fail", async (t) => {
    const seen = [];
    const secrets = [];
    let status = 302;
    const server = http.createServer((req, res) => {
      seen.push(req.headers["cloudflare-workers-version-overrides"]);
      secrets.push(req.headers["x-gitlab-http-router-smoke-test"]);
      res.writeHead(status, status === 302 ? { location: "/elsewhere" } : {});
      res.end();
    });
    await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
    t.after(() => new Promise((resolve) => server.close(resolve)));
    const url = `http://127.0.0.1:${server.address().port}/-/health`;
    const args = { url, timeoutS: 5, environment: "staging", workerName: "w", newVersion: "v2", oldVersion: "v1", percentage: 0, smokeSecret: "s3cret" };
    const ok = await runHealthCheck(args);
    assert.equal(ok.ok, true, JSON.stringify(ok));
    assert.equal(ok.url.status, 302, "the redirect is not followed");
    status = 503;
    const bad = await runHealthCheck(args);
    assert.equal(bad.ok, false);
    assert.match(bad.problem, /answered 503/);
    assert.deepEqual(seen, ['w="v2"', 'w="v2"']);
    assert.deepEqual(secrets, ["s3cret", "s3cret"], "the smoke-test secret goes with the override");
    const closed = await runHealthCheck({ ...args, url: "http://127.0.0.1:1/" });
    assert.equal(closed.ok, false);
    assert.match(closed.problem, /answered nothing/);
  });
  test("HEALTH_CHECK_CMD gets the step's variables; its exit status decides", async (t) => {
    const out = path.join(tempDir(t), "env");
    const args = { environment: "staging", workerName: "w", newVersion: "v2", oldVersion: "v1", percentage: 25 };
    const ok = await runHealthCheck({ ...args, cmd: `echo "$DEPLOY_ENVIRONMENT $DEPLOY_WORKER_NAME $DEPLOY_PERCENTAGE $DEPLOY_NEW_VERSION $DEPLOY_OLD_VERSION" > ${out}` });
    assert.equal(ok.ok, true);
    assert.equal(fs.readFileSync(out, "utf8"), "staging w 25 v2 v1\n");
    const bad = await runHealthCheck({ ...args, cmd: "exit 7" });
    assert.deepEqual([bad.ok, bad.command.exit], [false, 7]);
  });
  test("neither a command nor a URL: passes, with a warning", async () => {
    const warnings = [];
    const r = await runHealthCheck({ workerName: "w", newVersion: "v", percentage: 5, warn: (m) => warnings.push(m) });
    assert.equal(r.ok, true);
    assert.match(warnings[0], /without a health check/);
  });
});

describe("rollout record", () => {
  test("written at every change, read back as it was", (t) => {
    const file = path.join(tempDir(t), "records/staging.json");
    const record = new RecordFile(file, newRecord({ environment: "staging", workerName: "w", tag: "abc", message: "m", now: new Date("2026-05-01T10:00:00Z") }));
    record.update({ kind: "rollout", old_version: "o", new_version: "n" });
    assert.equal(readRecord(file).outcome, "in-progress");
    const step = record.addStep({ percentage: 0, smoke: true, deployment_id: "d0" });
    step.health = { ok: true };
    record.finish("completed", { traffic: "n at 100%" });
    const back = readRecord(file);
    assert.equal(back.started_at, "2026-05-01T10:00:00.000Z");
    assert.deepEqual(back.steps, [{ percentage: 0, smoke: true, deployment_id: "d0", health: { ok: true } }]);
    assert.equal(back.outcome, "completed");
    assert.ok(back.finished_at);
    assert.deepEqual(fs.readdirSync(path.dirname(file)), ["staging.json"], "no temp file left");
  });
  test("a missing or broken record file is a readable error", (t) => {
    const dir = tempDir(t);
    assert.throws(() => readRecord(path.join(dir, "nope.json")), /no such file/);
    fs.writeFileSync(path.join(dir, "bad.json"), "{");
    assert.throws(() => readRecord(path.join(dir, "bad.json")), /is not JSON/);
  });
});
