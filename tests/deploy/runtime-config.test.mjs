// The runtime the router deploys on (wrangler.toml's top-level
// compatibility_date and compatibility_flags, read by
// scripts/runtime-config.mjs for the tests, the bench and the soak): a date
// the pinned workerd supports, Node compatibility off as docs/decisions.md
// decided (checked in the pinned workerd, where the flags must make the
// difference), the tail worker on the same runtime, and no environment with
// a runtime of its own.
import { test } from "node:test";
import assert from "node:assert/strict";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Miniflare } from "miniflare";
import workerd from "workerd";
import { COMPATIBILITY_DATE, COMPATIBILITY_FLAGS, parseRuntimeConfig, readRuntimeConfig, runtime } from "../../scripts/runtime-config.mjs";

const REPO = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const NODE_OFF = ["no_nodejs_compat", "no_nodejs_compat_v2"];

/** What a worker run with Miniflare `options` sees of Node's globals. */
async function nodeGlobals(options) {
  const mf = new Miniflare({
    ...options,
    modules: true,
    host: "127.0.0.1",
    port: 0,
    script: "export default { fetch() { return Response.json({ Buffer: typeof Buffer, process: typeof process }); } };",
  });
  try {
    return await (await mf.dispatchFetch("http://localhost/")).json();
  } finally {
    await mf.dispose();
  }
}

test("wrangler.toml's compatibility date is one the pinned workerd supports, and no older than Node compatibility's default", () => {
  const { compatibilityDate } = readRuntimeConfig(path.join(REPO, "wrangler.toml"));
  assert.equal(compatibilityDate, COMPATIBILITY_DATE);
  assert.ok(compatibilityDate <= workerd.compatibilityDate, `${compatibilityDate} is newer than workerd ${workerd.version}'s ${workerd.compatibilityDate}`);
  // The decision in docs/decisions.md is about a date with Node compatibility on by default.
  assert.ok(compatibilityDate >= "2026-08-04", `${compatibilityDate}: docs/decisions.md's Node compatibility decision is for a date from 2026-08-04`);
});

test("wrangler.toml turns Node compatibility off with both flags (docs/decisions.md)", () => {
  for (const flag of NODE_OFF) assert.ok(COMPATIBILITY_FLAGS.includes(flag), `compatibility_flags lacks ${flag}`);
  assert.deepEqual(runtime(), { compatibilityDate: COMPATIBILITY_DATE, compatibilityFlags: [...COMPATIBILITY_FLAGS] });
});

test("in the pinned workerd, the router's runtime has no Node globals, and the same date without the flags has them", async () => {
  assert.deepEqual(await nodeGlobals(runtime()), { Buffer: "undefined", process: "undefined" });
  // The flags are what turns it off: without them this date has Node on.
  assert.deepEqual(await nodeGlobals({ compatibilityDate: COMPATIBILITY_DATE }), { Buffer: "function", process: "object" });
});

test("the tail worker deploys on the router's runtime", () => {
  assert.deepEqual(readRuntimeConfig(path.join(REPO, "tail-worker", "wrangler.toml")), readRuntimeConfig(path.join(REPO, "wrangler.toml")));
});

test("a wrangler.toml whose environment sets its own runtime, or without a date, is refused", () => {
  const top = 'name = "w"\ncompatibility_date = "2026-11-17"\n';
  assert.deepEqual(parseRuntimeConfig(`${top}[env.staging]\nname = "s"\n`), { compatibilityDate: "2026-11-17", compatibilityFlags: [] });
  assert.throws(() => parseRuntimeConfig(`${top}[env.staging]\ncompatibility_date = "2026-12-01"\n`), /\[env\.staging\] sets its own compatibility_date/);
  assert.throws(() => parseRuntimeConfig(`${top}[env.production]\ncompatibility_flags = ["nodejs_compat"]\n`), /\[env\.production\] sets its own compatibility_flags/);
  assert.throws(() => parseRuntimeConfig('name = "w"\n'), /compatibility_date must be/);
  assert.throws(() => parseRuntimeConfig('name = "w"\ncompatibility_date = 2026-11-17\n'), /compatibility_date must be/);
});
