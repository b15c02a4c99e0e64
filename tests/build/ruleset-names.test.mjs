// The worker's build (build.rs) refuses a ruleset wrangler.toml names but
// rules/ lacks, and an invalid ruleset, whichever setting names it: the
// active GITLAB_RULES_CONFIG or the candidate GITLAB_SHADOW_RULES_CONFIG.
// Runs the real build script through cargo (the native build of the
// worker crate, as `cargo test -p gitlab-http-router --lib` builds it),
// pointed at a temporary wrangler.toml and rules directory.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const ROOT = path.resolve(import.meta.dirname, "../..");

/** A temporary copy of rules/ plus `extra` files, and wrangler.toml whose dev environment gets `vars` lines. */
function project(t, vars, extra = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ruleset-names-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const rules = path.join(dir, "rules");
  fs.cpSync(path.join(ROOT, "rules"), rules, { recursive: true });
  for (const [name, text] of Object.entries(extra)) fs.writeFileSync(path.join(rules, name), text);
  const config = fs.readFileSync(path.join(ROOT, "wrangler.toml"), "utf8").replace(/^\[env\.dev\.vars\]\n/m, `[env.dev.vars]\n${vars}\n`);
  assert.notEqual(config, fs.readFileSync(path.join(ROOT, "wrangler.toml"), "utf8"), "the dev vars were extended");
  const file = path.join(dir, "wrangler.toml");
  fs.writeFileSync(file, config);
  return { rules, file };
}

function build({ rules, file }) {
  const r = spawnSync("cargo", ["build", "--quiet", "-p", "gitlab-http-router", "--lib"], {
    cwd: ROOT,
    env: { ...process.env, GITLAB_ROUTER_RULES_DIR: rules, GITLAB_ROUTER_WRANGLER_CONFIG: file },
    encoding: "utf8",
  });
  return { code: r.status, stderr: r.stderr };
}

const CANDIDATE = fs.readFileSync(path.join(ROOT, "rules/cells.json"), "utf8");

test("a shadow ruleset named but missing fails the build, naming it", (t) => {
  const r = build(project(t, 'GITLAB_SHADOW_RULES_CONFIG = "candidate"'));
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /GITLAB_SHADOW_RULES_CONFIG = "candidate" in \[env\.dev\.vars\] names no ruleset \(rulesets: cells, /);
});

test("an invalid shadow ruleset fails the build, naming the file and the problem", (t) => {
  const invalid = CANDIDATE.replace(/"regexValue": "\^\/api\/v4\/projects\//, '"regexValue": "^/api/v4/projects/(?<unclosed');
  assert.notEqual(invalid, CANDIDATE, "a regex was broken");
  const r = build(project(t, 'GITLAB_SHADOW_RULES_CONFIG = "candidate"', { "candidate.json": invalid }));
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /invalid rulesets:\n\s*rules\/candidate\.json: /);
});

test("a valid shadow ruleset builds", (t) => {
  const r = build(project(t, 'GITLAB_SHADOW_RULES_CONFIG = "candidate"', { "candidate.json": CANDIDATE }));
  assert.equal(r.code, 0, r.stderr);
});
