// deploy-worker.sh --detach-routes <environment>: the kill switch
// (docs/operations.md, "The kill switch: detaching the route"). Deletes,
// through the zone routes API, every route of the environment (wrangler.toml)
// that points at its Worker: the hostname's requests then go to the zone's
// origin without the router. Then it marks the Worker's deployment (the
// same versions deployed again with DETACHED_MESSAGE), so that the next
// deploy, which would publish the missing routes, refuses to unless told
// to (--attach-routes / ATTACH_ROUTES=true).
import { readServingDeployment } from "./deployment-state.mjs";
import { routeZone } from "./routes.mjs";
import { EXIT, fail, say, warn } from "./log.mjs";

/** How a deployment made by --detach-routes opens its message. */
export const DETACHED_MESSAGE = "routes detached by deploy-worker.sh --detach-routes";

/** Whether the serving deployment's message says its routes were detached. Pure. */
export function detachedByKillSwitch(serving) {
  return Boolean(serving?.message?.startsWith(DETACHED_MESSAGE));
}

/** The published routes to delete: the environment's patterns, pointing at its Worker. Pure. */
export function routesToDetach(wanted, published, workerName) {
  const patterns = new Set(wanted.map((r) => (typeof r === "string" ? r : r.pattern)));
  return published.filter((r) => patterns.has(r.pattern) && r.script === workerName);
}

export async function detachRoutes({ api, env, wrangler, dryRun }) {
  const wanted = env.routes.filter((r) => routeZone(r));
  if (wanted.length === 0) {
    fail(EXIT.USAGE, `[env.${env.key}] has no route with a zone_name or zone_id: nothing this can detach (a custom domain is removed in the dashboard)`);
  }
  const zones = new Map(); // zone key -> id
  for (const route of wanted) {
    const key = routeZone(route);
    if (zones.has(key)) continue;
    let id = route.zone_id;
    if (!id) {
      const found = await api.get("/zones", { name: route.zone_name });
      if (!found?.length) fail(EXIT.FAILED, `zone ${route.zone_name} not found (does the API token have Zone:Read?)`);
      id = found[0].id;
    }
    zones.set(key, id);
  }
  let detached = 0;
  for (const [key, zoneId] of zones) {
    const published = await api.get(`/zones/${zoneId}/workers/routes`);
    const mine = wanted.filter((r) => routeZone(r) === key);
    for (const route of routesToDetach(mine, published, env.workerName)) {
      const path = `/zones/${zoneId}/workers/routes/${route.id}`;
      if (dryRun) {
        process.stdout.write(`DRY-RUN: DELETE ${path}   # ${route.pattern} -> ${route.script}\n`);
      } else {
        await api.delete(path);
        say(`detached ${route.pattern} from ${route.script}: its requests go to the zone's origin now`);
      }
      detached += 1;
    }
  }
  if (detached === 0) {
    say(`no route of [env.${env.key}] points at ${env.workerName}: nothing to detach (already detached?)`);
    return;
  }
  await markDetached(wrangler, env, dryRun);
  say(
    `${dryRun ? "would detach" : "detached"} ${detached} route(s). A deploy refuses to attach them again until told to: when the router may serve again, run  deploy-worker.sh ${env.key} --attach-routes`,
  );
}

/** Deploys the serving versions again as they are, with DETACHED_MESSAGE: the mark a deploy reads. */
async function markDetached(wrangler, env, dryRun) {
  const message = `${DETACHED_MESSAGE} at ${new Date().toISOString()}`;
  if (dryRun) {
    process.stdout.write(`DRY-RUN: then deploy the serving versions again, unchanged, with --message "${message}"\n`);
    return;
  }
  const serving = await readServingDeployment(wrangler);
  if (!serving) {
    warn(`${env.workerName} has no deployment to mark: a deploy will not know its routes were detached (hold deploys with a change lock)`);
    return;
  }
  const specs = serving.versions.map((v) => `${v.id}@${v.percentage}%`);
  const r = await wrangler.run(["versions", "deploy", ...specs, "--env", env.key, "--yes", "--message", message]);
  if (r.status !== 0) warn(`marking the deployment failed (above): a deploy will not know its routes were detached (hold deploys with a change lock)`);
  else say(`marked the deployment: ${specs.join(", ")} (unchanged) "${message}"`);
}
