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
  const { routes, uncheckable } = routeOwners(wanted, publishedByZone);
  const missing = routes.filter((r) => r.published?.script !== workerName).map((r) => r.pattern);
  return { missing, uncheckable };
}

/** The zone a route is looked up in: {name} or {id}, as one string key; null if none. */
export function routeZone(route) {
  if (typeof route !== "object" || route === null || route.custom_domain) return null;
  if (route.zone_id) return `id:${route.zone_id}`;
  if (route.zone_name) return `name:${route.zone_name}`;
  return null;
}

/**
 * Who serves each wanted route, given the routes published per zone and
 * the zones' ids: {routes: [{pattern, zoneId, published: {id, script} |
 * null}], uncheckable: [pattern]}. Pure.
 */
function routeOwners(wanted, publishedByZone, zoneIds = {}) {
  const routes = [];
  const uncheckable = [];
  for (const route of wanted) {
    const zone = routeZone(route);
    const pattern = typeof route === "string" ? route : route.pattern;
    if (!zone) {
      uncheckable.push(pattern);
      continue;
    }
    const found = (publishedByZone[zone] ?? []).find((r) => r.pattern === pattern);
    routes.push({ pattern, zoneId: zoneIds[zone], published: found ? { id: found.id, script: found.script ?? null } : null });
  }
  return { routes, uncheckable };
}

/** Reads the id and the published routes of every zone the wanted routes name. */
async function readZones(api, wanted) {
  const zoneIds = {};
  const publishedByZone = {};
  for (const route of wanted) {
    const zone = routeZone(route);
    if (!zone || zone in zoneIds) continue;
    let zoneId = route.zone_id;
    if (!zoneId) {
      const zones = await api.get("/zones", { name: route.zone_name });
      if (!zones?.length) throw new Error(`zone ${route.zone_name} not found (does the API token have Zone:Read?)`);
      zoneId = zones[0].id;
    }
    zoneIds[zone] = zoneId;
    publishedByZone[zone] = await api.get(`/zones/${zoneId}/workers/routes`);
  }
  return { zoneIds, publishedByZone };
}

/** Reads the published routes of every zone the wanted routes name, then compares. */
export async function checkRoutes(api, wanted, workerName) {
  const { publishedByZone } = await readZones(api, wanted);
  return missingRoutes(wanted, publishedByZone, workerName);
}

/**
 * Who serves each wanted route now: {routes: [{pattern, zoneId, published:
 * {id, script} | null}], uncheckable: [pattern]}. `published.script` is the
 * Worker the route points at (null: no Worker).
 */
export async function readRouteOwners(api, wanted) {
  const { zoneIds, publishedByZone } = await readZones(api, wanted);
  return routeOwners(wanted, publishedByZone, zoneIds);
}

/** The wanted routes another Worker serves: [{pattern, zoneId, id, owner}]. Pure. */
export function foreignRoutes(owners, workerName) {
  return owners.routes
    .filter((r) => r.published?.script && r.published.script !== workerName)
    .map((r) => ({ pattern: r.pattern, zoneId: r.zoneId, id: r.published.id, owner: r.published.script }));
}

/**
 * The canary route of a first deploy: CANARY_ROUTE (a pattern), or
 * `<worker name>.<zone>/*`, in the zone of the environment's first route
 * that names one (zone_name). {pattern, zone_name} or {problem}. Pure.
 */
export function canaryRoute(routes, workerName, given = "") {
  const zoned = routes.find((r) => typeof r === "object" && r && r.zone_name && !r.custom_domain);
  if (!zoned) return { problem: "none of the environment's routes names a zone_name, so there is no zone for the canary route" };
  const zone = String(zoned.zone_name).toLowerCase();
  const pattern = given || `${workerName}.${zone}/*`;
  const host = pattern.split("/")[0].replace(/^\*\.?/, "").toLowerCase();
  if (host !== zone && !host.endsWith(`.${zone}`)) return { problem: `CANARY_ROUTE=${pattern} is not in the zone ${zone} of the environment's routes` };
  if (routes.some((r) => (typeof r === "string" ? r : r.pattern) === pattern)) return { problem: `CANARY_ROUTE=${pattern} is one of the environment's own routes` };
  return { pattern, zone_name: zoned.zone_name };
}

/**
 * The canary's health check URL: CANARY_HEALTH_CHECK_URL, or
 * HEALTH_CHECK_URL with its host made the canary's (a loopback
 * HEALTH_CHECK_URL, a local stand-in, as it is). "" without either. Pure.
 */
export function canaryHealthUrl(healthUrl, canaryPattern, given = "") {
  if (given) return given;
  if (!healthUrl) return "";
  let url;
  try {
    url = new URL(healthUrl);
  } catch {
    return healthUrl;
  }
  const host = url.hostname.toLowerCase();
  if (host === "localhost" || host === "[::1]" || /^127\./.test(host)) return healthUrl;
  url.hostname = canaryPattern.split("/")[0].replace(/^\*\.?/, "");
  return url.toString();
}
