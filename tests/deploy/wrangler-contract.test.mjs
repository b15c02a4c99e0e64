// What the deploy program reads from wrangler, checked on the pinned wrangler
// (node_modules/.bin/wrangler, the version package.json pins) against the
// Cloudflare API stand-in: every command it runs, with its flags, as
// wrangler's own output file records it (the wrangler-session entries of
// WRANGLER_OUTPUT_FILE_PATH), and every output-file entry and --json field
// it parses, compared with what the stand-in holds and with what the program
// made of it (the rollout record):
//
//   deployments status --env E --json   versions[].version_id, .percentage
//                                       (command-failed .code 10007: no Worker yet)
//   versions view ID --env E --json     annotations["workers/tag"]
//   deployments list --env E --json     [].created_on, [].versions[].version_id, .percentage
//   deploy [--config TAIL] --env E --tag T --message M    "deploy" .version_id
//   deploy --env E --tag T --message M [--secrets-file F] --config CANARY
//                                       (a first deploy: the routes of E replaced by
//                                       the canary route) "deploy" .version_id
//   versions upload --env E --tag T --message M           "version-upload" .version_id
//   versions deploy A@P% [B@Q%] --env E --yes --message M "version-deploy" .deployment_id
//   triggers deploy --env E [--config CANARY]             exit status only
//   any command                         "command-failed" .code
//
// A new wrangler that renames a flag, an entry or a field fails here, named.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { before, describe, test } from "node:test";
import { startStandin } from "./cf-api-standin.mjs";
import { ensureBuild, explain, makeProject, REPO, runDeploy, workerName, workerRoutes, writes } from "./helpers.mjs";

const ENV = "staging";
const NAME = workerName(ENV);
const TAIL = `${NAME.replace(/-staging$/, "")}-tail-staging`;
const TAG = "abc1234";
const MESSAGE = "test deploy";
const PINNED = JSON.parse(fs.readFileSync(path.join(REPO, "package.json"), "utf8")).devDependencies.wrangler;

before(() => ensureBuild());

async function setup(t, { seed = true, seedTag = "0ldc0de", routes = workerRoutes(ENV) } = {}) {
  const api = await startStandin();
  t.after(() => api.close());
  const project = makeProject(t);
  const oldVersion = seed ? api.seed(NAME, { tag: seedTag, routes, secrets: ["GITLAB_SMOKE_TEST_SECRET"] }) : null;
  const env = project.env(api);
  const outputFile = env.WRANGLER_OUTPUT_FILE_PATH;
  const recordFile = env.ROLLOUT_RECORD;
  return {
    api,
    project,
    oldVersion,
    // wrangler's output file, parsed here (not with the program's reader)
    entries: () => (fs.existsSync(outputFile) ? fs.readFileSync(outputFile, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l)) : []),
    record: () => JSON.parse(fs.readFileSync(recordFile, "utf8")),
  };
}

/**
 * The output file cut into wrangler runs: [{command, session, entries}],
 * command being the arguments as one string, with the router's --config
 * (the program appends it) left out and version ids named by `names`.
 */
function runs(entries, project, names) {
  const out = [];
  for (const e of entries) {
    if (e.type === "wrangler-session") {
      const args = [...e.command_line_args];
      const i = args.lastIndexOf("--config");
      if (i >= 0 && args[i + 1] === project.config) args.splice(i, 2);
      let command = args
        .join(" ")
        .replaceAll(path.join(project.dir, "tail-worker", "wrangler.toml"), "TAIL_CONFIG")
        .replaceAll(path.join(project.dir, `.wrangler-canary.${ENV}.toml`), "CANARY_CONFIG");
      for (const [id, name] of Object.entries(names)) command = command.replaceAll(id, name);
      out.push({ command, session: e, entries: [] });
    } else {
      assert.ok(out.length, `an output entry before any wrangler-session: ${JSON.stringify(e)}`);
      out.at(-1).entries.push(e);
    }
  }
  return out;
}

/** The one entry of `type` a run wrote (fails when there is none or more). */
function only(run, type) {
  const found = run.entries.filter((e) => e.type === type);
  assert.equal(found.length, 1, `${run.command}: expected one "${type}" entry, got ${JSON.stringify(run.entries)}`);
  return found[0];
}

const stepMessage = (p) => (p === 0 ? `deploy-worker.sh: ${TAG} at 0% (smoke test)` : `deploy-worker.sh: ${TAG} at ${p}%`);
const split = (versions) => Object.fromEntries(versions.map((v) => [v.version_id, v.percentage]));
/** The router's API writes, as "METHOD path-after-the-script". */
const routerWrites = (api) =>
  writes(api)
    .filter((r) => r.path.includes(`/workers/scripts/${NAME}`))
    .map((r) => `${r.method} ${r.path.split(`/workers/scripts/${NAME}`)[1] || "/"}`);
const noUnknownCalls = (api) => assert.deepEqual(api.unknown.map((r) => `${r.method} ${r.path}`), [], "wrangler called something the stand-in does not implement");

describe(`the deploy program on the pinned wrangler ${PINNED}`, { concurrency: 2 }, () => {
  test("the wrangler the program runs is the one package.json pins", () => {
    const installed = JSON.parse(fs.readFileSync(path.join(REPO, "node_modules/wrangler/package.json"), "utf8")).version;
    assert.equal(installed, PINNED, "node_modules/wrangler is not the pinned version: npm ci");
  });

  test("a full rollout 0 (smoke test) → 5 → 25 → 50 → 75 → 100 %: the commands, the entries, the fields parsed", async (t) => {
    const { api, project, oldVersion, entries, record } = await setup(t);
    const r = await runDeploy([ENV], project.env(api));
    assert.equal(r.code, 0, explain(r));
    const script = api.scripts.get(NAME);
    const newVersion = script.versions[0].id;
    const tailVersion = api.scripts.get(TAIL).versions[0].id;
    const done = runs(entries(), project, { [oldVersion]: "OLD", [newVersion]: "NEW" });

    // The real pinned wrangler ran every command.
    for (const run of done) assert.equal(run.session.wrangler_version, PINNED, run.command);
    // Every command, with its flags, in order.
    const steps = [0, 5, 25, 50, 75, 100];
    assert.deepEqual(
      done.map((x) => x.command),
      [
        `deployments status --env ${ENV} --json`,
        `versions view OLD --env ${ENV} --json`,
        `deploy --config TAIL_CONFIG --env ${ENV} --tag ${TAG} --message ${MESSAGE}`,
        `versions upload --env ${ENV} --tag ${TAG} --message ${MESSAGE}`,
        ...steps.map((p) => `versions deploy NEW@${p}%${p < 100 ? ` OLD@${100 - p}%` : ""} --env ${ENV} --yes --message ${stepMessage(p)}`),
      ],
    );
    assert.deepEqual(done.flatMap((x) => x.entries.filter((e) => e.type === "command-failed")), [], "no command failed");

    const rec = record();
    // deployments status --json: versions[].version_id -> the version serving before.
    assert.equal(rec.old_version, oldVersion);
    // versions view --json: annotations["workers/tag"] (not ours) -> a new rollout, not a resume.
    assert.equal(rec.kind, "rollout");
    // deploy (the tail worker): "deploy" .version_id.
    assert.equal(only(done[2], "deploy").version_id, tailVersion);
    assert.deepEqual(rec.tail_worker, { name: TAIL, version: tailVersion });
    // versions upload: "version-upload" .version_id -> the version rolled out.
    assert.equal(only(done[3], "version-upload").version_id, newVersion);
    assert.equal(rec.new_version, newVersion);
    // versions deploy: "version-deploy" .deployment_id -> each step's deployment, as the API created it.
    const created = script.deployments.map((d) => d.id).reverse().slice(1); // oldest first, without the seed
    const reported = done.slice(4).map((run) => only(run, "version-deploy").deployment_id);
    assert.deepEqual(reported, created);
    assert.deepEqual(rec.steps.map((s) => [s.percentage, s.deployment_id]), steps.map((p, i) => [p, created[i]]));
    assert.equal(rec.outcome, "completed");

    // What the API received: one upload, then each step's deployment (and
    // the script settings wrangler patches with it), in order.
    assert.deepEqual(routerWrites(api), ["POST /versions", "PATCH /script-settings", ...steps.flatMap(() => ["POST /deployments", "PATCH /script-settings"])]);
    assert.deepEqual(
      api.deploymentsPosted(NAME).map(split),
      steps.map((p) => (p < 100 ? { [newVersion]: p, [oldVersion]: 100 - p } : { [newVersion]: 100 })),
    );
    noUnknownCalls(api);
  });

  test("rollbacks: from the deployment history mid-rollout, and from a rollout record", async (t) => {
    const { api, project, oldVersion, entries, record } = await setup(t);
    // Stopped at 25 % (one step per pipeline), then rolled back from the history.
    const r = await runDeploy([ENV], project.env(api, { ROLLOUT_PERCENTAGES: "5 25", OVERRIDE_LAST_PERCENTAGE: "true" }));
    assert.equal(r.code, 0, explain(r));
    const newVersion = api.scripts.get(NAME).versions[0].id;
    assert.deepEqual(split(api.latestDeployment(NAME).versions), { [newVersion]: 25, [oldVersion]: 75 });
    const from = entries().length;
    const rb = await runDeploy(["--rollback", ENV], project.env(api));
    assert.equal(rb.code, 0, explain(rb));
    const names = { [oldVersion]: "OLD", [newVersion]: "NEW" };
    let done = runs(entries().slice(from), project, names);
    // deployments list --json: [].created_on and [].versions[] -> the version
    // that served 100 % before the split (OLD), not the newest other one.
    assert.deepEqual(
      done.map((x) => x.command),
      [`deployments list --env ${ENV} --json`, `versions deploy OLD@100% --env ${ENV} --yes --message rollback by deploy-worker.sh`],
    );
    for (const run of done) assert.equal(run.session.wrangler_version, PINNED, run.command);
    assert.equal(only(done[1], "version-deploy").deployment_id, api.latestDeployment(NAME).id);
    assert.deepEqual(split(api.latestDeployment(NAME).versions), { [oldVersion]: 100 });

    // A whole rollout of another commit, undone from its rollout record.
    const r2 = await runDeploy([ENV], project.env(api, { ROLLOUT_PERCENTAGES: "100", DEPLOY_TAG: "def5678" }));
    assert.equal(r2.code, 0, explain(r2));
    const third = api.scripts.get(NAME).versions[0].id;
    names[third] = "THIRD";
    const from2 = entries().length;
    const env = project.env(api, { ROLLBACK_RECORD: project.env(api).ROLLOUT_RECORD });
    const rb2 = await runDeploy(["--rollback", ENV], env);
    assert.equal(rb2.code, 0, explain(rb2));
    done = runs(entries().slice(from2), project, names);
    // deployments status --json: versions[] -> THIRD serves, as the record's new version: undo it.
    assert.deepEqual(
      done.map((x) => x.command),
      [`deployments status --env ${ENV} --json`, `versions deploy OLD@100% --env ${ENV} --yes --message rollback by deploy-worker.sh`],
    );
    const deployed = only(done[1], "version-deploy");
    assert.equal(deployed.deployment_id, api.latestDeployment(NAME).id);
    const rec = record();
    assert.deepEqual([rec.rollback.to, rec.rollback.deployment_id, rec.traffic], [oldVersion, deployed.deployment_id, `${oldVersion} at 100%`]);
    assert.deepEqual(api.deploymentsPosted(NAME).slice(-1), [[{ version_id: oldVersion, percentage: 100 }]]);
    noUnknownCalls(api);
  });

  test("a first deploy: command-failed .code 10007 means no Worker yet; wrangler deploy's .version_id is the new version", async (t) => {
    const { api, project, entries, record } = await setup(t, { seed: false });
    const r = await runDeploy([ENV], project.env(api));
    assert.equal(r.code, 0, explain(r));
    const version = api.scripts.get(NAME).versions[0].id;
    const done = runs(entries(), project, { [version]: "NEW" });
    assert.deepEqual(
      done.map((x) => x.command),
      [
        `deployments status --env ${ENV} --json`,
        `deploy --config TAIL_CONFIG --env ${ENV} --tag ${TAG} --message ${MESSAGE}`,
        `deploy --env ${ENV} --tag ${TAG} --message ${MESSAGE} --config CANARY_CONFIG`,
        `deployments status --env ${ENV} --json`,
        `versions view NEW --env ${ENV} --json`,
        `triggers deploy --env ${ENV}`,
      ],
    );
    assert.equal(only(done[0], "command-failed").code, 10007);
    assert.equal(only(done[2], "deploy").version_id, version);
    const rec = record();
    assert.deepEqual([rec.kind, rec.new_version, rec.outcome], ["first-deploy", version, "completed"]);
    // the canary route with the upload, then the environment's routes
    assert.deepEqual(routerWrites(api).filter((w) => w.startsWith("PUT")), ["PUT /", "PUT /routes", "PUT /schedules", "PUT /routes", "PUT /schedules"]);
    noUnknownCalls(api);
  });

  test("command-failed .code other than not-found: the deploy stops, nothing is written", async (t) => {
    const { api, project, entries } = await setup(t);
    // 9109: what the API answers a token without access to the account's Workers
    // (10000 and 9106 would make wrangler run whoami, beyond this stand-in).
    api.failDeploymentsGet(403, 9109);
    const r = await runDeploy([ENV], project.env(api));
    assert.equal(r.code, 1, explain(r));
    assert.match(r.stderr, /wrangler deployments status failed \(API error 9109\).*nothing was changed/);
    const done = runs(entries(), project, {});
    assert.deepEqual(done.map((x) => x.command), [`deployments status --env ${ENV} --json`]);
    assert.equal(only(done[0], "command-failed").code, 9109);
    assert.deepEqual(writes(api), []);
  });

  test("versions view .annotations[\"workers/tag\"] is ours and the routes are gone: triggers deploy publishes the canary, then them; nothing is uploaded", async (t) => {
    const { api, project, oldVersion, entries, record } = await setup(t, { seedTag: TAG, routes: [] });
    const r = await runDeploy([ENV], project.env(api));
    assert.equal(r.code, 0, explain(r));
    const done = runs(entries(), project, { [oldVersion]: "OLD" });
    assert.deepEqual(
      done.map((x) => x.command),
      [
        `deployments status --env ${ENV} --json`,
        `versions view OLD --env ${ENV} --json`,
        `triggers deploy --env ${ENV} --config CANARY_CONFIG`,
        `deployments status --env ${ENV} --json`,
        `versions view OLD --env ${ENV} --json`,
        `triggers deploy --env ${ENV}`,
      ],
    );
    assert.deepEqual(done.flatMap((x) => x.entries.filter((e) => e.type === "command-failed")), []);
    assert.deepEqual(routerWrites(api).filter((w) => w.startsWith("PUT")), ["PUT /routes", "PUT /schedules", "PUT /routes", "PUT /schedules"]);
    assert.equal(routerWrites(api).filter((w) => w.startsWith("POST /versions") || w.startsWith("POST /deployments")).length, 0, "nothing uploaded or deployed");
    assert.deepEqual(api.scripts.get(NAME).routes.map((x) => x.pattern), workerRoutes(ENV).map((x) => x.pattern));
    const rec = record();
    assert.deepEqual([rec.kind, rec.outcome, rec.routes.published], ["first-deploy", "completed", true]);
    noUnknownCalls(api);
  });
});
