// wrangler.toml as the deploy program needs it: the deployable environments,
// each with its Worker name, vars, routes and tail consumers.
import fs from "node:fs";
import { parse } from "smol-toml";

/** Environments that are never deployed (the local stack). */
export const LOCAL_ONLY = ["dev"];

/**
 * Parses wrangler.toml text: {environments, environment(name), text}. An
 * environment is {key, workerName, vars, routes, tailConsumers, raw}; routes are wrangler's
 * entries (a pattern string, or {pattern, zone_name | zone_id | custom_domain});
 * tailConsumers wrangler's `tail_consumers` entries.
 */
export function parseWranglerConfig(text, file = "wrangler.toml") {
  const doc = parse(text);
  const envs = doc.env && typeof doc.env === "object" ? doc.env : {};
  return {
    file,
    text,
    environments: Object.keys(envs),
    deployable: Object.keys(envs).filter((name) => !LOCAL_ONLY.includes(name)),
    environment(name) {
      const env = envs[name];
      if (!env) return null;
      return {
        key: name,
        workerName: typeof env.name === "string" ? env.name : null,
        vars: env.vars && typeof env.vars === "object" ? env.vars : {},
        routes: Array.isArray(env.routes) ? env.routes : env.route ? [env.route] : [],
        // `[{service}]`: the Workers handed this environment's invocations (not inherited).
        tailConsumers: Array.isArray(env.tail_consumers) ? env.tail_consumers : [],
        // the whole table, as parsed (the placeholder check reads every value)
        raw: env,
      };
    },
  };
}

/** Reads and parses a wrangler.toml file. */
export function readWranglerConfig(file) {
  return parseWranglerConfig(fs.readFileSync(file, "utf8"), file);
}
