// deploy-worker.sh --detach-routes <environment>: the kill switch
// (docs/operations.md, "The kill switch: detaching the route"). Deletes,
// through the zone routes API, every route of the environment (wrangler.toml)
// that points at its Worker: the hostname's requests then go to the zone's
// origin without the router. `wrangler triggers deploy --env <env>`, or the
// next deploy (it publishes missing routes), attaches them again.
import { routeZone } from "./routes.mjs";
import { EXIT, fail, say } from "./log.mjs";

/** The published routes to delete: the environment's patterns, pointing at its Worker. Pure. */
export function routesToDetach(wanted, published, workerName) {
  const patterns = new Set(wanted.map((r) => (typeof r === "string" ? r : r.pattern)));
  return published.filter((r) => patterns.has(r.pattern) && r.script === workerName);
}

export async function detachRoutes({ api, env, dryRun }) {
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
  say(
    `${dryRun ? "would detach" : "detached"} ${detached} route(s). Attach again with  npx wrangler triggers deploy --env ${env.key}  (the next deploy also does: hold deploys meanwhile)`,
  );
}
