// Are the environment's routes published, pointing at its Worker? Read
// through the zone routes API (as wrangler does before publishing).

/**
 * Which of the wanted routes (wrangler.toml entries) are not published for
 * `workerName`, given the routes published per zone
 * ({zone: [{pattern, script}]}). Routes that cannot be checked this way (a
 * custom domain, a pattern without zone_name/zone_id) are listed as
 * uncheckable. Pure.
 */
export function missingRoutes(wanted, publishedByZone, workerName) {
  const missing = [];
  const uncheckable = [];
  for (const route of wanted) {
    const zone = routeZone(route);
    const pattern = typeof route === "string" ? route : route.pattern;
    if (!zone) {
      uncheckable.push(pattern);
      continue;
    }
    const published = publishedByZone[zone] ?? [];
    if (!published.some((r) => r.pattern === pattern && r.script === workerName)) missing.push(pattern);
  }
  return { missing, uncheckable };
}

/** The zone a route is looked up in: {name} or {id}, as one string key; null if none. */
export function routeZone(route) {
  if (typeof route !== "object" || route === null || route.custom_domain) return null;
  if (route.zone_id) return `id:${route.zone_id}`;
  if (route.zone_name) return `name:${route.zone_name}`;
  return null;
}

/** Reads the published routes of every zone the wanted routes name, then compares. */
export async function checkRoutes(api, wanted, workerName) {
  const publishedByZone = {};
  for (const route of wanted) {
    const zone = routeZone(route);
    if (!zone || zone in publishedByZone) continue;
    let zoneId = route.zone_id;
    if (!zoneId) {
      const zones = await api.get("/zones", { name: route.zone_name });
      if (!zones?.length) throw new Error(`zone ${route.zone_name} not found (does the API token have Zone:Read?)`);
      zoneId = zones[0].id;
    }
    publishedByZone[zone] = await api.get(`/zones/${zoneId}/workers/routes`);
  }
  return missingRoutes(wanted, publishedByZone, workerName);
}
