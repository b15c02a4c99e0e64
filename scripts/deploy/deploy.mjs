// A deploy: what serves now, the routes, the upload, the smoke test of the
// new version alone (in the deployment at 0 %, reached with the version
// override header), then the traffic steps with a health check after each,
// and a rollback to the version that served before when anything fails.
// Every action lands in the rollout record.
import { setTimeout as sleep } from "node:timers/promises";
import { readCurrentDeployment, versionTagOf } from "./deployment-state.mjs";
import { addBakeChecks } from "./bake-checks.mjs";
import { runHealthCheck } from "./health-check.mjs";
import { EXIT, fail, say, tell, warn } from "./log.mjs";
import { checkRoutes } from "./routes.mjs";
import { describeSplit, describeVersions, parsePercentages, planRollout, stepsToRun, versionSpecs } from "./rollout-plan.mjs";
import { lastEntry } from "./wrangler.mjs";
import { quoteWords } from "./shell-words.mjs";
import { deployTailWorker, tailDeployArgs } from "./tail-worker.mjs";

/** Seconds to wait after the 0 % deployment before the smoke test (overrides take a moment to reach every location). */
const SMOKE_DELAY_DEFAULT = "5";

function seconds(value, name) {
  if (!/^[0-9]+$/.test(String(value))) fail(EXIT.USAGE, `${name}=${value} is not a number of seconds`);
  return Number(value);
}

/** Thrown out of a wait when SIGINT/SIGTERM arrived. */
class Interrupted extends Error {}

export class Deploy {
  /** ctx: {settings, env, wrangler, tail, tailWrangler, api, record, dryRun, signal} (tail: tail-worker.mjs, or null) */
  constructor(ctx) {
    Object.assign(this, ctx);
    this.worker = ctx.env.workerName;
    this.newVersion = null;
    this.oldVersion = null;
    this.state = "";
    this.rolloutActive = false;
  }

  get envArgs() {
    return ["--env", this.env.key];
  }

  async run() {
    const steps = parsePercentages(this.settings.percentages, this.settings.overrideLast);
    this.bake = seconds(this.settings.bakeSeconds, "BAKE_SECONDS");
    this.smokeDelay = seconds(process.env.SMOKE_DELAY_SECONDS ?? SMOKE_DELAY_DEFAULT, "SMOKE_DELAY_SECONDS");
    this.timeout = seconds(this.settings.healthTimeout, "HEALTH_CHECK_TIMEOUT");
    if (this.dryRun) return this.printDryRun(steps);
    const current = await readCurrentDeployment(this.wrangler);
    if (!current) return this.firstDeploy();
    const tagged = [];
    for (const v of current) tagged.push({ ...v, tag: await versionTagOf(this.wrangler, v.id) });
    const plan = planRollout(tagged, this.settings.tag);
    const serving = describeVersions(current.filter((v) => v.percentage > 0));
    this.state = serving;
    if (plan.kind === "refuse") {
      this.record.finish("refused", { kind: "refused", traffic: serving, problem: `another rollout is unfinished (${plan.reason})` });
      fail(
        EXIT.FAILED,
        `${this.worker} is in the middle of another rollout (${serving}; ${plan.reason}): finish that rollout or undo it with  deploy-worker.sh --rollback ${this.env.key}  first; nothing was changed`,
      );
    }
    const repaired = await this.ensureRoutes();
    if (plan.kind === "current") {
      this.record.update({ kind: "unchanged", old_version: plan.version });
      if (repaired) {
        // A first deploy that stopped before its routes: finish it as one would have.
        this.newVersion = plan.version;
        const health = await this.checkHealth(100);
        if (!health.ok) {
          this.record.finish("failed", { traffic: serving, problem: health.problem });
          fail(EXIT.FAILED, `health check failed after publishing the routes (${health.problem}); ${plan.version} serves 100%`);
        }
      }
      this.record.finish("unchanged", { traffic: serving });
      say(`version ${plan.version} (tag ${this.settings.tag}) already serves 100% of ${this.worker}: nothing to deploy${repaired ? " (its routes are published now)" : ""}`);
      return;
    }
    this.oldVersion = plan.oldVersion;
    let share = 0;
    if (plan.kind === "resume") {
      this.newVersion = plan.newVersion;
      share = plan.share;
      say(`rollout of ${this.settings.tag} in progress: ${serving}; going on with ${this.newVersion} against ${this.oldVersion} (no new upload)`);
    } else {
      await this.upload();
    }
    this.record.update({ kind: plan.kind === "resume" ? "resume" : "rollout", old_version: this.oldVersion, new_version: this.newVersion });
    const todo = [];
    for (const p of stepsToRun(steps, share, this.settings.overrideLast)) todo.push(p);
    for (const p of steps.filter((p) => !todo.includes(p))) say(`skipping ${p}%: ${this.newVersion} already has ${share}%`);
    if (todo.length === 0) {
      this.record.finish("unchanged", { traffic: serving });
      say(`nothing to do: ${serving}`);
      return;
    }
    this.rolloutActive = true;
    try {
      if (share === 0) await this.smokeTest();
      for (const p of todo) await this.step(p);
    } catch (e) {
      if (e instanceof Interrupted || this.signal.aborted) await this.rollBackAndExit(`interrupted during the rollout (traffic was: ${this.state})`, "interruption");
      throw e;
    }
    this.rolloutActive = false;
    this.record.finish("completed", { traffic: this.state });
    say(`done: ${this.worker} serves ${this.state}`);
  }

  printDryRun(steps) {
    const { tag, message } = this.settings;
    this.wrangler.run(["deployments", "status", ...this.envArgs, "--json"]);
    if (this.tail) {
      process.stderr.write(`# then, before the router's first deploy or upload: the tail worker its tail_consumers names\n`);
      this.tailWrangler.run(tailDeployArgs(this.tail, this.env.key, tag, message));
    }
    process.stderr.write(`# if ${this.worker} does not exist yet, instead of what follows: wrangler ${quoteWords(["deploy", ...this.envArgs, "--tag", tag, "--message", message])}\n`);
    const patterns = this.env.routes.map((r) => (typeof r === "string" ? r : r.pattern)).join(", ");
    process.stderr.write(`# then: check that the routes (${patterns || "none"}) are published; if not: wrangler ${quoteWords(["triggers", "deploy", ...this.envArgs])}\n`);
    this.wrangler.run(["versions", "upload", ...this.envArgs, "--tag", tag, "--message", message]);
    this.newVersion = "<new-version-id>";
    this.oldVersion = "<current-version-id>";
    this.printStep(0);
    process.stderr.write(`# then: wait ${this.smokeDelay}s and run the smoke test (the health check of ${this.newVersion} alone, with Cloudflare-Workers-Version-Overrides)\n`);
    for (const p of steps) {
      this.printStep(p);
      process.stderr.write(`# then: bake ${this.bake}s and run the health check\n`);
    }
  }

  printStep(p) {
    this.wrangler.run(["versions", "deploy", ...versionSpecs(this.newVersion, this.oldVersion, p), ...this.envArgs, "--yes", "--message", this.stepMessage(p)]);
  }

  stepMessage(p) {
    return p === 0 ? `deploy-worker.sh: ${this.settings.tag} at 0% (smoke test)` : `deploy-worker.sh: ${this.settings.tag} at ${p}%`;
  }

  async firstDeploy() {
    const { tag, message } = this.settings;
    say(`${this.worker} has no deployment yet: first deploy, straight to 100%`);
    this.record.update({ kind: "first-deploy" });
    await this.deployTail();
    const r = await this.wrangler.run(["deploy", ...this.envArgs, "--tag", tag, "--message", message]);
    const deployed = lastEntry(r.entries, "deploy");
    if (r.status !== 0) {
      this.record.finish("failed", { new_version: deployed?.version_id ?? null, problem: `wrangler deploy exited ${r.status}` });
      fail(
        EXIT.FAILED,
        `wrangler deploy (first deploy of ${this.worker}) failed. If it failed after uploading the script, ${this.worker} exists without its routes and serves nothing: run  deploy-worker.sh ${this.env.key}  again, it checks the routes and publishes them`,
      );
    }
    this.newVersion = deployed?.version_id ?? null;
    this.state = `${this.newVersion ?? "the new version"} at 100%`;
    this.record.update({ new_version: this.newVersion, traffic: this.state });
    await this.ensureRoutes();
    await this.wait(this.bake, 100);
    const health = await this.checkHealth(100);
    if (!health.ok) {
      this.record.finish("failed", { problem: health.problem });
      fail(EXIT.FAILED, `health check failed after the first deploy (${health.problem}); there is no earlier version to roll back to: the new version serves 100%`);
    }
    this.record.finish("completed");
    say(`done: first deploy of ${this.worker} (${tag}) serves 100%`);
  }

  /**
   * Checks that the environment's routes are published for this Worker and
   * publishes them (wrangler triggers deploy) when not. True when it had to.
   */
  async ensureRoutes() {
    const wanted = this.env.routes;
    if (wanted.length === 0) {
      say(`[env.${this.env.key}] has no routes`);
      this.record.update({ routes: { wanted: [], missing: [], published: false } });
      return false;
    }
    const patterns = wanted.map((r) => (typeof r === "string" ? r : r.pattern));
    let check;
    try {
      check = await checkRoutes(this.api, wanted, this.worker);
    } catch (e) {
      warn(`cannot read the published routes (${e.message}): publishing them to be sure`);
      check = { missing: patterns, uncheckable: [] };
    }
    const toPublish = [...check.missing, ...check.uncheckable];
    if (toPublish.length === 0) {
      say(`routes published: ${patterns.join(", ")}`);
      this.record.update({ routes: { wanted: patterns, missing: [], published: false } });
      return false;
    }
    if (check.missing.length) say(`the routes ${check.missing.join(", ")} do not point at ${this.worker}: publishing them`);
    if (check.uncheckable.length) say(`the routes ${check.uncheckable.join(", ")} cannot be checked here: publishing them`);
    const r = await this.wrangler.run(["triggers", "deploy", ...this.envArgs]);
    if (r.status !== 0) {
      this.record.finish("failed", { routes: { wanted: patterns, missing: check.missing, published: false }, problem: `wrangler triggers deploy exited ${r.status}` });
      fail(EXIT.FAILED, `wrangler triggers deploy failed: the routes ${toPublish.join(", ")} are not published for ${this.worker} (traffic is unchanged: ${this.state})`);
    }
    const after = await checkRoutes(this.api, wanted, this.worker).catch(() => ({ missing: [] }));
    if (after.missing.length) {
      this.record.finish("failed", { routes: { wanted: patterns, missing: after.missing, published: false }, problem: "routes still missing after wrangler triggers deploy" });
      fail(EXIT.FAILED, `wrangler triggers deploy exited 0 but the routes ${after.missing.join(", ")} still do not point at ${this.worker}`);
    }
    this.record.update({ routes: { wanted: patterns, missing: check.missing, published: true } });
    say(`routes published: ${patterns.join(", ")}`);
    return true;
  }

  /** The tail consumer the router's config names, before the router that names it. */
  async deployTail() {
    if (!this.tail) return;
    const { tag, message } = this.settings;
    await deployTailWorker({ tail: this.tail, wrangler: this.tailWrangler, envKey: this.env.key, tag, message, record: this.record, traffic: this.state });
  }

  async upload() {
    const { tag, message } = this.settings;
    await this.deployTail();
    const r = await this.wrangler.run(["versions", "upload", ...this.envArgs, "--tag", tag, "--message", message]);
    if (r.status !== 0) {
      this.record.finish("failed", { traffic: this.state, problem: "wrangler versions upload failed" });
      fail(EXIT.FAILED, `wrangler versions upload failed: nothing was deployed, traffic is unchanged (${this.state})`);
    }
    this.newVersion = lastEntry(r.entries, "version-upload")?.version_id;
    if (!this.newVersion) {
      this.record.finish("failed", { traffic: this.state, problem: "wrangler versions upload reported no version id" });
      fail(EXIT.FAILED, `wrangler versions upload reported no version id in ${this.wrangler.outputFile}: nothing was deployed, traffic is unchanged (${this.state})`);
    }
    say(`uploaded version ${this.newVersion} (tag ${tag})`);
  }

  /** Deploys the new version at p % (0: in the deployment, serving nothing); returns the record's step. */
  async deployAt(p, short) {
    say(p === 0 ? `smoke test: ${this.newVersion} joins the deployment at 0% (${this.oldVersion} keeps 100%)` : `step: ${describeSplit(this.newVersion, this.oldVersion, p)}`);
    const r = await this.wrangler.run(["versions", "deploy", ...versionSpecs(this.newVersion, this.oldVersion, p), ...this.envArgs, "--yes", "--message", this.stepMessage(p)]);
    if (this.signal.aborted) throw new Interrupted();
    const where = p === 0 ? "the 0% (smoke test) deployment" : `the ${p}% step`;
    if (r.status !== 0) await this.rollBackAndExit(`wrangler versions deploy failed at ${where} (traffic was: ${this.state})`, short);
    // wrangler can exit 0 having deployed nothing: a step counts only with its deployment id.
    const deployed = lastEntry(r.entries, "version-deploy");
    if (!deployed?.deployment_id) await this.rollBackAndExit(`wrangler versions deploy exited 0 at ${where} but reported no deployment (traffic was: ${this.state})`, short);
    if (p > 0) this.state = describeSplit(this.newVersion, this.oldVersion, p);
    return this.record.addStep({ percentage: p, ...(p === 0 ? { smoke: true } : {}), deployment_id: deployed.deployment_id, deployed_at: new Date().toISOString() });
  }

  /** The new version alone answers the health check before it takes any traffic. */
  async smokeTest() {
    const step = await this.deployAt(0, "failure before the smoke test");
    await this.wait(this.smokeDelay, 0);
    const health = await this.checkHealth(0);
    if (this.signal.aborted) throw new Interrupted();
    step.health = health;
    this.record.write();
    if (health.ok) return;
    await this.rollBackAndExit(`SMOKE TEST FAILED before any traffic was shifted (${health.problem})`, "failed smoke test", { smoke: true });
  }

  async step(p) {
    const step = await this.deployAt(p, `failure at ${p}%`);
    await this.wait(this.bake, p);
    const health = await this.checkHealth(p);
    if (this.signal.aborted) throw new Interrupted();
    step.health = health;
    this.record.write();
    if (!health.ok) await this.rollBackAndExit(`health check failed at ${p}% (${health.problem})`, `failed health check at ${p}%`);
  }

  async wait(s, p) {
    if (s <= 0) return;
    if (p > 0) say(`baking for ${s}s at ${p}%`);
    try {
      await sleep(s * 1000, undefined, { signal: this.signal });
    } catch {
      throw new Interrupted();
    }
  }

  async checkHealth(p) {
    const s = this.settings;
    const health = await runHealthCheck({
      cmd: s.healthCmd,
      url: s.healthUrl,
      timeoutS: this.timeout,
      environment: this.env.key,
      workerName: this.worker,
      newVersion: this.newVersion,
      oldVersion: this.oldVersion,
      percentage: p,
      signal: this.signal,
      warn,
      smokeSecret: s.smokeSecret,
    });
    // The routing checks and the metrics comparison (bake-checks.mjs).
    return health.ok && !this.signal.aborted ? addBakeChecks(this, p, health) : health;
  }

  /** Puts the old version back at 100 % alone; says where traffic is and exits 1. */
  async rollBackAndExit(what, short, { smoke = false } = {}) {
    this.rolloutActive = false;
    tell(what);
    say(`rolling back: ${this.oldVersion} to 100%`);
    const r = await this.wrangler.run(["versions", "deploy", `${this.oldVersion}@100%`, ...this.envArgs, "--yes", "--message", `rollback by deploy-worker.sh after a ${short} of ${this.settings.tag}`]);
    const deployed = lastEntry(r.entries ?? [], "version-deploy");
    const rollback = { to: this.oldVersion, deployment_id: deployed?.deployment_id ?? null, at: new Date().toISOString(), ok: r.status === 0 };
    if (r.status === 0) {
      const traffic = `${this.oldVersion} at 100%`;
      this.record.finish("rolled-back", { rollback, traffic, problem: what });
      const tail = smoke
        ? `nothing was shifted: ${this.oldVersion} serves 100% as before; ${this.newVersion} took no traffic and is out of the deployment.`
        : `traffic is back on ${this.oldVersion} at 100% (the version that served before); ${this.newVersion} serves nothing.`;
      fail(EXIT.FAILED, `deploy-worker.sh: ${smoke ? "STOPPED" : "ROLLED BACK"}: ${what}\ndeploy-worker.sh: ${tail}`, { raw: true });
    }
    let now = null;
    const status = await this.wrangler.json(["deployments", "status", ...this.envArgs, "--json"]);
    if (!status.ok) process.stderr.write(status.result.stderr);
    if (status.ok) now = (status.value?.versions ?? []).filter((v) => v.percentage > 0).map((v) => `${v.version_id} at ${Math.round(v.percentage)}%`).join(", ");
    this.record.finish("rollback-failed", { rollback, traffic: now ?? this.state, problem: what });
    const lines = [
      what,
      `THE ROLLBACK FAILED too: traffic is NOT back on ${this.oldVersion}.`,
      now ? `the Cloudflare API says traffic is now: ${now}` : `the current state could not be read; the last state confirmed by wrangler was: ${this.state}`,
      `run  deploy-worker.sh --rollback ${this.env.key}  or  wrangler versions deploy ${this.oldVersion}@100% --env ${this.env.key} --yes`,
    ];
    fail(EXIT.FAILED, lines.map((l) => `deploy-worker.sh: ${l}`).join("\n"), { raw: true });
  }
}
