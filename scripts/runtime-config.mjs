// The runtime the router is deployed on, as wrangler.toml's top level says
// it: `compatibility_date` and `compatibility_flags` (every [env.*] inherits
// both; none sets its own). The one definition: the e2e harnesses, the
// bench and the soak run their workers in workerd with these, so what they
// measure is what deploys (docs/decisions.md, "The runtime").
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parse } from "smol-toml";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");

/**
 * `{ compatibilityDate, compatibilityFlags }` of a wrangler.toml text's top
 * level; throws when the date is missing or not YYYY-MM-DD, or when an
 * environment sets its own (it would deploy on a runtime nothing here runs).
 */
export function parseRuntimeConfig(text, file = "wrangler.toml") {
  const doc = parse(text);
  const date = doc.compatibility_date;
  if (typeof date !== "string" || !/^\d{4}-\d{2}-\d{2}$/.test(date)) throw new Error(`${file}: compatibility_date must be a "YYYY-MM-DD" string, got ${JSON.stringify(date)}`);
  const flags = doc.compatibility_flags ?? [];
  if (!Array.isArray(flags) || flags.some((f) => typeof f !== "string")) throw new Error(`${file}: compatibility_flags must be a list of strings`);
  for (const [name, env] of Object.entries(doc.env ?? {})) {
    for (const key of ["compatibility_date", "compatibility_flags"]) {
      if (env && key in env) throw new Error(`${file}: [env.${name}] sets its own ${key}; the top level's is the one definition`);
    }
  }
  return { compatibilityDate: date, compatibilityFlags: [...flags] };
}

/** The runtime of the wrangler.toml at `file` (default: the repository's). */
export function readRuntimeConfig(file = join(ROOT, "wrangler.toml")) {
  return parseRuntimeConfig(readFileSync(file, "utf8"), file);
}

const DEPLOYED = readRuntimeConfig();

/** wrangler.toml's compatibility_date and compatibility_flags. */
export const COMPATIBILITY_DATE = DEPLOYED.compatibilityDate;
export const COMPATIBILITY_FLAGS = Object.freeze([...DEPLOYED.compatibilityFlags]);

/**
 * Miniflare worker options for the deployed runtime, to spread into a
 * worker's options (`{ ...runtime(), name, script, … }`); a fresh copy.
 */
export function runtime() {
  return { compatibilityDate: COMPATIBILITY_DATE, compatibilityFlags: [...COMPATIBILITY_FLAGS] };
}
