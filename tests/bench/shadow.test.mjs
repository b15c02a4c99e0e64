// Shadow evaluation's configurations (bench/driver/shadow.mjs) and which
// configurations a run asks for (bench/driver/stack.mjs's chosen).
import { test } from "node:test";
import assert from "node:assert/strict";
import { SHADOWS, shadowConfigurations } from "../../bench/driver/shadow.mjs";
import { chosen } from "../../bench/driver/stack.mjs";
import { readSettings } from "../../bench/driver/settings.mjs";

const router = (ruleset) => ({ scriptPath: "build/index.js", bindings: { GITLAB_RULES_CONFIG: ruleset, GITLAB_PROXY_HOST: "sink" } });
const specs = [
  { name: "null", options: { scriptPath: "null.mjs" } },
  { name: "floor-log", options: { scriptPath: "floor.mjs" } },
  { name: "token-warm", options: router("session_token"), warm: true },
  { name: "cells", options: router("cells"), warm: true },
];
const all = [...specs, ...shadowConfigurations(specs)];
const names = (env) => chosen(all, readSettings(env)).map((x) => x.name);

test("a shadow configuration is its base with the two settings added", () => {
  const byName = Object.fromEntries(shadowConfigurations(specs).map((x) => [x.name, x]));
  assert.deepEqual(Object.keys(byName), SHADOWS.map((x) => x.name));
  const tws = byName["token-warm-shadow"];
  assert.deepEqual(tws.options.bindings, { GITLAB_RULES_CONFIG: "session_token", GITLAB_PROXY_HOST: "sink", GITLAB_SHADOW_RULES_CONFIG: "cells", GITLAB_SHADOW_SAMPLE: "1" });
  assert.equal(tws.options.scriptPath, "build/index.js");
  assert.equal(tws.warm, true);
  assert.equal(byName["cells-shadow"].options.bindings.GITLAB_SHADOW_RULES_CONFIG, "session_token");
  assert.equal(byName["token-warm-shadow-unsampled"].options.bindings.GITLAB_SHADOW_SAMPLE, "0");
  assert.equal(byName["token-warm-shadow-agree"].options.bindings.GITLAB_SHADOW_RULES_CONFIG, "session_token");
  // The base configuration is left as it was.
  assert.equal(specs[2].options.bindings.GITLAB_SHADOW_RULES_CONFIG, undefined);
  // No base among the configurations (BENCH_SCALE's own), no shadow.
  assert.deepEqual(shadowConfigurations(specs.slice(0, 2)), []);
});

test("shadow configurations run only when named", () => {
  assert.deepEqual(names({}), ["null", "floor-log", "token-warm", "cells"]);
  assert.deepEqual(names({ BENCH_CONFIGS: "token-warm-shadow,token-warm", BENCH_SKIP_YARDSTICKS: "1" }), ["token-warm", "token-warm-shadow"]);
  assert.deepEqual(names({ BENCH_CONFIGS: "cells-shadow" }), ["null", "floor-log", "cells-shadow"]);
  assert.deepEqual(names({ BENCH_PAIRED: "token-warm-shadow:token-warm" }), ["null", "floor-log", "token-warm", "cells", "token-warm-shadow"]);
  assert.deepEqual(names({ BENCH_PROFILE: "cells-shadow" }), ["null", "floor-log", "token-warm", "cells", "cells-shadow"]);
  assert.throws(() => names({ BENCH_CONFIGS: "token-warm-shadows" }), /unknown configurations: token-warm-shadows/);
});
