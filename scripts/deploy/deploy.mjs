// A deploy: what serves now, the routes, the upload, the smoke test of the
// new version alone (in the deployment at 0 %, reached with the version
// override header), then the traffic steps with a health check after each,
// and a rollback to the version that served before when anything fails.
// A first deploy (the Worker serves none of its routes: it does not exist,
// or is a draft) goes to a canary route first and moves the routes only
// after the canary's health check. Every action lands in the rollout record.
import fs from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { parse, stringify } from "smol-toml";
import { readServingDeployment, readCurrentDeployment, versionInfoOf, versionTagOf } from "./deployment-state.mjs";
import { datasetOf } from "./analytics.mjs";
import { checkPromotion } from "./shadow-gate.mjs";
import { detachedByKillSwitch } from "./detach-routes.mjs";
import { addBakeChecks } from "./bake-checks.mjs";
import { registryMoveBackWarning } from "./registry-rollback.mjs";
import { runHealthCheck } from "./health-check.mjs";
import { EXIT, fail, say, tell, warn } from "./log.mjs";
import { requireSmokeSecret } from "./preflight.mjs";
import { canaryHealthUrl, canaryRoute, checkRoutes, foreignRoutes, readRouteOwners } from "./routes.mjs";
import { describeSplit, describeVersions, parsePercentages, planRollout, stepsToRun, tagIsReusable, versionSpecs } from "./rollout-plan.mjs";
import { lastEntry, Wrangler } from "./wrangler.mjs";
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
    /** Routes moved here from another Worker (--take-over-routes): [{pattern, zoneId, id, owner}]. */
    this.takenOver = [];
  }

  /** The patterns of the environment's routes. */
  get patterns() {
    return this.env.routes.map((r) => (typeof r === "string" ? r : r.pattern));
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
    const deployment = await readServingDeployment(this.wrangler);
    const current = deployment?.versions ?? null;
    const tagged = [];
    for (const v of current ?? []) tagged.push({ ...v, ...(await versionInfoOf(this.wrangler, v.id)) });
    const owners = await this.readOwners();
    this.refuseForeignRoutes(owners, current ? describeVersions(current.filter((v) => v.percentage > 0)) : "");
    this.refuseDetachedRoutes(deployment, owners);
    const first = this.firstDeployReason(current, tagged, owners);
    if (first) return this.firstDeploy(tagged, first);
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
    if (plan.kind !== "current") requireSmokeSecret(this.settings);
    if (plan.kind === "upload") await this.shadowGate(plan.oldVersion, tagged, serving);
    const repaired = await this.ensureRoutes();
    if (plan.kind === "current") {
      this.record.update({ kind: "unchanged", old_version: plan.version });
      if (repaired) {
        // Routes that had gone (some of them): check the only version serving them.
        this.newVersion = plan.version;
        const health = await this.checkHealth(100, { override: false });
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
    const patterns = this.patterns.join(", ");
    const canary = this.env.routes.length ? canaryRoute(this.env.routes, this.worker, this.settings.canaryRoute) : null;
    if (canary?.problem) fail(EXIT.USAGE, `${canary.problem}: set CANARY_ROUTE (docs/deploying.md, "First deploy to a new account")`);
    if (canary) {
      const secrets = this.settings.secretsFile ? ["--secrets-file", this.settings.secretsFile] : [];
      const url = canaryHealthUrl(this.settings.healthUrl, canary.pattern, this.settings.canaryHealthUrl);
      process.stderr.write(
        `# if ${this.worker} serves none of its routes yet (a first deploy), instead of what follows:\n` +
          `#   wrangler ${quoteWords(["deploy", "--config", "<wrangler.toml with the routes of " + this.env.key + " replaced by the canary route>", ...this.envArgs, "--tag", tag, "--message", message, ...secrets])}\n` +
          `#   (the router at 100 % on the canary route ${canary.pattern} only), bake ${this.bake}s, the health check${url ? ` of ${url}` : ""} (no override: the only version),\n` +
          `#   then${this.settings.takeOverRoutes ? " take over the routes another Worker serves (--take-over-routes)," : ""} wrangler ${quoteWords(["triggers", "deploy", ...this.envArgs])} (${patterns} to the router, the canary route dropped), bake, the health check\n`,
      );
    }
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

  /** Who serves the environment's routes now (null: it has none, or they cannot be read). */
  async readOwners() {
    if (this.env.routes.length === 0) return null;
    try {
      return await readRouteOwners(this.api, this.env.routes);
    } catch (e) {
      warn(`cannot read the published routes (${e.message})`);
      return null;
    }
  }

  /** Another Worker serves a route of this environment: refused (nothing changed) unless --take-over-routes. */
  refuseForeignRoutes(owners, serving) {
    const foreign = owners ? foreignRoutes(owners, this.worker) : [];
    if (foreign.length === 0) return;
    const list = foreign.map((f) => `${f.pattern} (served by the Worker ${f.owner})`).join(", ");
    if (this.settings.takeOverRoutes) {
      say(`--take-over-routes: ${list} will move to ${this.worker}`);
      return;
    }
    this.record.finish("refused", { kind: "refused", traffic: serving || null, problem: `routes served by another Worker: ${list}` });
    fail(
      EXIT.FAILED,
      `${list}: another Worker serves ${foreign.length === 1 ? "this route" : "these routes"}. deploy-worker.sh takes a route from another Worker only when told to: run it with --take-over-routes (or TAKE_OVER_ROUTES=true) to move ${foreign.length === 1 ? "it" : "them"} to ${this.worker} (on a first deploy, after its canary's health check passes; the routes go back to their Worker if the check after the move fails); nothing was changed`,
    );
  }

  /**
   * A deploy that changes GITLAB_RULES_CONFIG promotes a candidate: refused
   * (nothing changed) unless the serving version shadowed it on live
   * traffic with no more disagreements than the operator declared
   * (shadow-gate.mjs). The verdict goes into the record's `shadow`.
   */
  async shadowGate(servingVersion, tagged, traffic) {
    const candidate = this.env.vars.GITLAB_RULES_CONFIG;
    const result = await checkPromotion({
      settings: this.settings.shadow,
      metrics: this.settings.metrics,
      dataset: datasetOf(this.settings.configFile, this.env.key),
      servingVersion,
      servingVars: tagged.find((v) => v.id === servingVersion)?.vars,
      candidate,
      signal: this.signal,
    });
    if (result === null) return;
    this.record.update({ shadow: result });
    if (result.skipped) {
      warn(`shadow gate: ${result.skipped}: ${candidate} is promoted without its shadow evaluation being checked`);
      return;
    }
    if (!result.ok) {
      this.record.finish("refused", { kind: "refused", traffic, problem: `shadow gate: ${result.problem}` });
      fail(EXIT.FAILED, `shadow gate: ${result.problem}; nothing was changed`);
    }
    const intended = result.disagreements.filter((d) => d.intended).reduce((n, d) => n + d.requests, 0);
    say(`shadow gate: ${candidate} ${result.verdict === "agrees" ? "agrees with the serving ruleset" : "is within what was declared"} on ${result.evaluated} evaluated requests (${intended} intended and ${result.unintended} other disagreements)`);
  }

  /**
   * The kill switch detached the routes (the serving deployment says so, and
   * a route is still not this Worker's): refused, nothing changed, unless
   * --attach-routes. Routes attached again by hand since pass.
   */
  refuseDetachedRoutes(serving, owners) {
    if (!detachedByKillSwitch(serving)) return;
    const detached = owners ? owners.routes.filter((r) => r.published?.script !== this.worker).map((r) => r.pattern) : this.patterns;
    if (detached.length === 0) return;
    const traffic = describeVersions(serving.versions.filter((v) => v.percentage > 0));
    if (this.settings.attachRoutes) {
      say(`--attach-routes: ${detached.join(", ")}, detached by the kill switch ("${serving.message}"), will point at ${this.worker} again`);
      return;
    }
    this.record.finish("refused", { kind: "refused", traffic, problem: `routes detached by the kill switch: ${detached.join(", ")}` });
    fail(
      EXIT.FAILED,
      `${detached.join(", ")}: detached by the kill switch ("${serving.message}"), so their requests go to the zone's origin without the router. A deploy would attach them again; it does so only when told to: when the router may serve again, run  deploy-worker.sh ${this.env.key} --attach-routes  (or ATTACH_ROUTES=true); nothing was changed`,
    );
  }

  /**
   * Why this deploy is a first deploy, or null when it is not: the Worker
   * does not exist, or it serves none of its routes (a draft Worker, such as
   * the one `wrangler secret put` creates with an empty fetch handler, or a
   * first deploy that stopped before its routes moved). When the routes
   * cannot be read, a Worker none of whose serving versions carries a tag
   * (deploy-worker.sh always tags) counts as a draft.
   */
  firstDeployReason(current, tagged, owners) {
    if (!current) return `${this.worker} has no deployment yet`;
    const router = tagged.some((v) => v.percentage > 0 && v.tag);
    const draft = router ? "" : ` (no version deploy-worker.sh uploaded serves it: a draft Worker, as \`wrangler secret put\` creates one, with an empty fetch handler)`;
    if (this.env.routes.length === 0) return null;
    if (owners && owners.routes.length > 0) {
      if (owners.routes.some((r) => r.published?.script === this.worker)) return null;
      return `${this.worker} serves none of its routes (${this.patterns.join(", ")})${draft}`;
    }
    return router ? null : `${this.worker} exists${draft}`;
  }

  /** The wrangler of this environment with its routes replaced by the canary route (a config written beside wrangler.toml, removed at exit). */
  canaryWrangler() {
    if (this._canaryWrangler) return this._canaryWrangler;
    const doc = parse(this.config.text);
    const section = doc.env[this.env.key];
    delete section.route;
    section.routes = [{ pattern: this.canary.pattern, zone_name: this.canary.zone_name }];
    const file = path.join(path.dirname(this.config.file), `.wrangler-canary.${this.env.key}.toml`);
    fs.writeFileSync(file, `# Written by deploy-worker.sh for a first deploy (the routes of [env.${this.env.key}]: the canary route only); removed when it exits.\n${stringify(doc)}\n`);
    process.on("exit", () => fs.rmSync(file, { force: true }));
    say(`canary config: ${file} (${path.basename(this.config.file)} with the routes of [env.${this.env.key}] replaced by ${this.canary.pattern})`);
    this._canaryWrangler = new Wrangler({ ...this.wrangler, configArgs: ["--config", file] });
    return this._canaryWrangler;
  }

  /**
   * A first deploy: the router at 100 % on the canary route only (wrangler
   * deploy of the config with the canary route instead of the environment's
   * routes, the secrets of SECRETS_FILE in the same upload), the canary's
   * health check, then the routes (taking over those another Worker serves
   * with --take-over-routes) and the health check again; when that fails the
   * routes go back to where they were. Health checks carry no override: the
   * new version is the only one, and it may not have the smoke-test secret.
   */
  async firstDeploy(tagged, reason) {
    const { tag, message, secretsFile } = this.settings;
    this.record.update({ kind: "first-deploy" });
    say(`first deploy: ${reason}`);
    if (this.env.routes.length === 0) return this.firstDeployWithoutRoutes();
    const canary = canaryRoute(this.env.routes, this.worker, this.settings.canaryRoute);
    if (canary.problem) {
      this.record.finish("refused", { problem: canary.problem });
      fail(EXIT.USAGE, `${canary.problem}: set CANARY_ROUTE (docs/deploying.md, "First deploy to a new account"); nothing was changed`);
    }
    this.canary = canary;
    const patterns = this.patterns.join(", ");
    this.canaryUrl = canaryHealthUrl(this.settings.healthUrl, canary.pattern, this.settings.canaryHealthUrl);
    say(`the router goes to the canary route ${canary.pattern} first; ${patterns} move to it only after the canary's health check passes`);
    this.record.update({ canary: { route: canary.pattern, health_check_url: this.canaryUrl || null, health: null } });
    const wrangler = this.canaryWrangler();
    const mine = tagIsReusable(tag) ? tagged.find((v) => v.tag === tag && v.percentage === 100) : undefined;
    if (mine) {
      this.newVersion = mine.id;
      say(`version ${mine.id} (tag ${tag}) already serves 100% of ${this.worker}: no new upload; publishing the canary route`);
      const r = await wrangler.run(["triggers", "deploy", ...this.envArgs]);
      if (r.status !== 0) {
        this.record.finish("failed", { new_version: mine.id, problem: `wrangler triggers deploy (the canary route) exited ${r.status}` });
        fail(EXIT.FAILED, `wrangler triggers deploy (the canary route ${canary.pattern}) failed; ${patterns} were not touched`);
      }
    } else {
      if (!secretsFile) {
        warn(
          `no SECRETS_FILE: the router's first version carries no secrets of its own (${this.worker} keeps any it has). Until GITLAB_SMOKE_TEST_SECRET is set, the smoke test of the next deploy gets 403: add secrets without changing what serves with  wrangler versions secret put NAME --env ${this.env.key}`,
        );
      } else {
        const names = this.settings.secretNames ?? [];
        say(`secrets uploaded with the first version (SECRETS_FILE): ${names.join(", ") || "none"}`);
        if (!names.includes("GITLAB_SMOKE_TEST_SECRET")) warn("SECRETS_FILE has no GITLAB_SMOKE_TEST_SECRET: the smoke test of the next deploy will get 403 until it is set");
      }
      await this.deployTail();
      const r = await wrangler.run(["deploy", ...this.envArgs, "--tag", tag, "--message", message, ...(secretsFile ? ["--secrets-file", secretsFile] : [])]);
      const deployed = lastEntry(r.entries, "deploy");
      if (r.status !== 0) {
        this.record.finish("failed", { new_version: deployed?.version_id ?? null, problem: `wrangler deploy (the canary) exited ${r.status}` });
        fail(EXIT.FAILED, `wrangler deploy (first deploy of ${this.worker}, on the canary route ${canary.pattern}) failed; ${patterns} were not touched. Run  deploy-worker.sh ${this.env.key}  again`);
      }
      this.newVersion = deployed?.version_id ?? null;
    }
    // The router, and only it, serves the Worker now; else no route moves.
    const now = await readCurrentDeployment(this.wrangler);
    const only = now?.length === 1 && now[0].percentage === 100 ? now[0] : null;
    const onlyTag = only ? await versionTagOf(this.wrangler, only.id) : null;
    if (!only || onlyTag !== tag || (this.newVersion && only.id !== this.newVersion)) {
      const seen = now ? describeVersions(now) : "no deployment";
      this.record.finish("failed", { problem: `after the canary deploy ${this.worker} serves ${seen}, not ${tag} alone` });
      fail(EXIT.FAILED, `after the canary deploy ${this.worker} serves ${seen}, not the version tagged ${tag} alone; ${patterns} were not touched`);
    }
    this.newVersion = only.id;
    const canaryCheck = await checkRoutes(this.api, [{ pattern: canary.pattern, zone_name: canary.zone_name }], this.worker).catch((e) => ({ missing: [canary.pattern], error: e.message }));
    if (canaryCheck.missing.length) {
      this.record.finish("failed", { new_version: this.newVersion, problem: `the canary route ${canary.pattern} does not point at ${this.worker}` });
      fail(EXIT.FAILED, `the canary route ${canary.pattern} does not point at ${this.worker}${canaryCheck.error ? ` (${canaryCheck.error})` : ""}; ${patterns} were not touched`);
    }
    this.state = `${this.newVersion} at 100%, on the canary route ${canary.pattern} only`;
    this.record.update({ new_version: this.newVersion, traffic: this.state });
    say(`canary: ${this.newVersion} (tag ${tag}) serves ${canary.pattern}`);
    if (this.bake > 0) say(`baking for ${this.bake}s on the canary`);
    await this.wait(this.bake, 0);
    const canaryHealth = await this.checkHealth(100, { url: this.canaryUrl, override: false });
    this.record.update((r) => ({ canary: { ...r.canary, health: canaryHealth } }));
    if (!canaryHealth.ok) {
      this.record.finish("failed", { traffic: this.state, problem: `canary health check: ${canaryHealth.problem}` });
      fail(
        EXIT.FAILED,
        `deploy-worker.sh: CANARY CHECK FAILED (${canaryHealth.problem})\ndeploy-worker.sh: ${patterns} were not touched (they serve as before the deploy); ${this.worker} serves only its canary route ${canary.pattern}. Fix the cause and run  deploy-worker.sh ${this.env.key}  again.`,
        { raw: true },
      );
    }
    say(`canary healthy: moving ${patterns} to ${this.worker}`);
    await this.ensureRoutes({ force: true });
    this.state = `${this.newVersion} at 100%`;
    this.record.update({ traffic: this.state });
    await this.wait(this.bake, 100);
    const health = await this.checkHealth(100, { override: false });
    this.record.update({ health });
    if (!health.ok) await this.moveRoutesBackAndExit(health.problem);
    this.record.finish("completed", { traffic: this.state });
    say(`done: first deploy of ${this.worker} (${tag}) serves 100% of ${patterns}`);
  }

  /** An environment without routes: wrangler deploy, then the health check. */
  async firstDeployWithoutRoutes() {
    const { tag, message, secretsFile } = this.settings;
    await this.deployTail();
    const r = await this.wrangler.run(["deploy", ...this.envArgs, "--tag", tag, "--message", message, ...(secretsFile ? ["--secrets-file", secretsFile] : [])]);
    const deployed = lastEntry(r.entries, "deploy");
    if (r.status !== 0) {
      this.record.finish("failed", { new_version: deployed?.version_id ?? null, problem: `wrangler deploy exited ${r.status}` });
      fail(EXIT.FAILED, `wrangler deploy (first deploy of ${this.worker}) failed`);
    }
    this.newVersion = deployed?.version_id ?? null;
    this.state = `${this.newVersion ?? "the new version"} at 100%`;
    this.record.update({ new_version: this.newVersion, traffic: this.state });
    await this.wait(this.bake, 100);
    const health = await this.checkHealth(100, { override: false });
    if (!health.ok) {
      this.record.finish("failed", { problem: health.problem });
      fail(EXIT.FAILED, `health check failed after the first deploy (${health.problem}); the new version serves 100% (it has no routes)`);
    }
    this.record.finish("completed");
    say(`done: first deploy of ${this.worker} (${tag}) serves 100%`);
  }

  /**
   * The check after a first deploy moved the routes failed: routes taken
   * from another Worker go back to it, the others stop pointing at this
   * Worker (as before the deploy: no Worker), and this Worker keeps only its
   * canary route. Exits 1 saying where every route is.
   */
  async moveRoutesBackAndExit(problem) {
    tell(`health check failed after the routes moved to ${this.worker} (${problem})`);
    say("moving the routes back to where they were before the deploy");
    const lines = [];
    let ok = true;
    for (const f of this.takenOver) {
      try {
        const owners = await readRouteOwners(this.api, this.env.routes);
        const now = owners.routes.find((r) => r.pattern === f.pattern)?.published;
        if (!now) throw new Error("the route is gone");
        await this.api.put(`/zones/${f.zoneId}/workers/routes/${now.id}`, { pattern: f.pattern, script: f.owner });
        lines.push(`${f.pattern} is back on the Worker ${f.owner}`);
      } catch (e) {
        ok = false;
        lines.push(`${f.pattern} could NOT be given back to ${f.owner} (${e.message}): it still points at ${this.worker}`);
      }
    }
    const r = await this.canaryWrangler().run(["triggers", "deploy", ...this.envArgs]);
    const back = this.patterns.filter((p) => !this.takenOver.some((f) => f.pattern === p));
    if (r.status === 0) {
      if (back.length) lines.push(`${back.join(", ")} no longer point at a Worker (as before the deploy)`);
      lines.push(`${this.worker} serves only its canary route ${this.canary.pattern}`);
    } else {
      ok = false;
      lines.push(`wrangler triggers deploy (the canary route only) failed: ${back.join(", ")} may still point at ${this.worker}`);
    }
    this.record.finish(ok ? "rolled-back" : "rollback-failed", { traffic: lines.join("; "), problem: `health check after the routes moved: ${problem}` });
    const head = ok ? "ROUTES MOVED BACK" : "THE ROUTES COULD NOT ALL BE MOVED BACK";
    fail(EXIT.FAILED, [`${head}: the health check failed after the routes moved to ${this.worker} (${problem})`, ...lines].map((l) => `deploy-worker.sh: ${l}`).join("\n"), { raw: true });
  }

  /**
   * Checks that the environment's routes are published for this Worker and
   * publishes them (wrangler triggers deploy) when not, or always with
   * `force` (a first deploy: the canary route goes). Routes another Worker
   * serves move here first, one API call each, with --take-over-routes
   * only. True when it changed a route.
   */
  async ensureRoutes({ force = false } = {}) {
    const wanted = this.env.routes;
    if (wanted.length === 0) {
      say(`[env.${this.env.key}] has no routes`);
      this.record.update({ routes: { wanted: [], missing: [], published: false } });
      return false;
    }
    const patterns = this.patterns;
    let owners = null;
    let check;
    try {
      owners = await readRouteOwners(this.api, wanted);
      check = { missing: owners.routes.filter((r) => r.published?.script !== this.worker).map((r) => r.pattern), uncheckable: owners.uncheckable };
    } catch (e) {
      warn(`cannot read the published routes (${e.message}): publishing them to be sure`);
      check = { missing: patterns, uncheckable: [] };
    }
    const foreign = owners ? foreignRoutes(owners, this.worker) : [];
    if (foreign.length && !this.settings.takeOverRoutes) this.refuseForeignRoutes(owners, this.state);
    for (const f of foreign) {
      say(`taking over ${f.pattern} from the Worker ${f.owner} (--take-over-routes)`);
      try {
        await this.api.put(`/zones/${f.zoneId}/workers/routes/${f.id}`, { pattern: f.pattern, script: this.worker });
      } catch (e) {
        this.record.finish("failed", { routes: { wanted: patterns, missing: check.missing, published: false, ...this.takenOverNote() }, problem: `taking over ${f.pattern}: ${e.message}` });
        fail(EXIT.FAILED, `taking over ${f.pattern} from ${f.owner} failed (${e.message})${this.takenOver.length ? `; already taken over: ${this.takenOver.map((t) => t.pattern).join(", ")}` : ""}`);
      }
      this.takenOver.push(f);
    }
    const toPublish = [...check.missing.filter((p) => !this.takenOver.some((f) => f.pattern === p)), ...check.uncheckable];
    if (toPublish.length === 0 && !force) {
      say(`routes published: ${patterns.join(", ")}`);
      this.record.update({ routes: { wanted: patterns, missing: [], published: this.takenOver.length > 0, ...this.takenOverNote() } });
      return this.takenOver.length > 0;
    }
    const missing = check.missing.filter((p) => !this.takenOver.some((f) => f.pattern === p));
    if (missing.length) say(`the routes ${missing.join(", ")} do not point at ${this.worker}: publishing them`);
    if (check.uncheckable.length) say(`the routes ${check.uncheckable.join(", ")} cannot be checked here: publishing them`);
    const r = await this.wrangler.run(["triggers", "deploy", ...this.envArgs]);
    if (r.status !== 0) {
      this.record.finish("failed", { routes: { wanted: patterns, missing: check.missing, published: false }, problem: `wrangler triggers deploy exited ${r.status}` });
      fail(EXIT.FAILED, `wrangler triggers deploy failed: the routes ${toPublish.join(", ") || patterns.join(", ")} are not published for ${this.worker} (traffic is unchanged: ${this.state})`);
    }
    const after = await checkRoutes(this.api, wanted, this.worker).catch(() => ({ missing: [] }));
    if (after.missing.length) {
      this.record.finish("failed", { routes: { wanted: patterns, missing: after.missing, published: false }, problem: "routes still missing after wrangler triggers deploy" });
      fail(EXIT.FAILED, `wrangler triggers deploy exited 0 but the routes ${after.missing.join(", ")} still do not point at ${this.worker}`);
    }
    this.record.update({ routes: { wanted: patterns, missing: check.missing, published: true, ...this.takenOverNote() } });
    say(`routes published: ${patterns.join(", ")}`);
    return true;
  }

  /** The record's routes.taken_over, when a route was taken over. */
  takenOverNote() {
    return this.takenOver.length ? { taken_over: this.takenOver.map((t) => t.pattern) } : {};
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

  /** The health check at p %; opts: {url} (default HEALTH_CHECK_URL), {override: false} (the only version: no override header, no secret). */
  async checkHealth(p, { url, override = true } = {}) {
    const s = this.settings;
    const health = await runHealthCheck({
      cmd: s.healthCmd,
      url: url ?? s.healthUrl,
      override,
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
    return health.ok && !this.signal.aborted ? addBakeChecks(this, p, health, { url: url ?? s.healthUrl, override }) : health;
  }

  /** Puts the old version back at 100 % alone; says where traffic is and exits 1. */
  async rollBackAndExit(what, short, { smoke = false } = {}) {
    this.rolloutActive = false;
    tell(what);
    // A smoke test shifted nothing: no repository moved either way.
    const moveBack = smoke ? null : registryMoveBackWarning(this.settings.configFile, this.env.vars, this.worker);
    if (moveBack) warn(`REGISTRY: ${moveBack}`);
    say(`rolling back: ${this.oldVersion} to 100%`);
    const r = await this.wrangler.run(["versions", "deploy", `${this.oldVersion}@100%`, ...this.envArgs, "--yes", "--message", `rollback by deploy-worker.sh after a ${short} of ${this.settings.tag}`]);
    const deployed = lastEntry(r.entries ?? [], "version-deploy");
    const rollback = { to: this.oldVersion, deployment_id: deployed?.deployment_id ?? null, at: new Date().toISOString(), ok: r.status === 0, ...(moveBack ? { warning: moveBack } : {}) };
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
