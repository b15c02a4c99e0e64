// Placeholders: wrangler.toml ships the deployed environments with the
// values only an operator can know (origins, cells, KV namespace ids) set
// to REPLACE_ME. A deploy, and a dry run, refuses an environment that still
// has one (docs/deploying.md, "First deploy to a new account").

/** The marker every placeholder value carries. */
export const PLACEHOLDER = "REPLACE_ME";

/**
 * Where `section` (an environment's table of wrangler.toml, as parsed) still
 * has a placeholder: ["vars.GITLAB_PROXY_HOST", "kv_namespaces[0].id", ...].
 * Every string is looked at, keys and values, however deep. Pure.
 */
export function placeholderPaths(section, prefix = "") {
  const found = [];
  const walk = (value, at) => {
    if (typeof value === "string") {
      if (value.includes(PLACEHOLDER)) found.push(at);
    } else if (Array.isArray(value)) {
      value.forEach((v, i) => walk(v, `${at}[${i}]`));
    } else if (value && typeof value === "object") {
      for (const [k, v] of Object.entries(value)) {
        const here = at ? `${at}.${k}` : k;
        if (k.includes(PLACEHOLDER)) found.push(here);
        walk(v, here);
      }
    }
  };
  walk(section, prefix);
  return found;
}
