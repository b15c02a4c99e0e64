// GITLAB_CELLS checks of the deploy program (scripts/deploy/cells.mjs), and
// the shipped wrangler.toml's lists.
import { test } from "node:test";
import assert from "node:assert/strict";
import path from "node:path";
import fs from "node:fs";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { cellsProblems } from "../../scripts/deploy/cells.mjs";
import { readWranglerConfig } from "../../scripts/deploy/wrangler-config.mjs";

const ROOT = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "..");

test("a valid list has no problems, ids may be numbers or digit strings", () => {
  assert.deepEqual(cellsProblems('[{"id":1,"address":"a.example:8080","registry_address":"r.example","session_prefix":"cell-1","health_path":"/-/readiness"},{"id":"2","address":"b.example"}]'), []);
  assert.deepEqual(cellsProblems("[]"), []);
});

test("each bad entry is named with what is wrong", () => {
  const problems = cellsProblems(
    JSON.stringify([
      { id: -1, address: "a.example" },
      { id: 2, address: "b.example", weight: 1 },
      { id: 3, address: "c.example:0" },
      { id: 4, address: "d.example", session_prefix: "cell 4" },
      { id: 5, address: "e.example", health_path: "//x" },
      { id: 6, address: "b.example" },
      { id: 7 },
    ]),
  );
  assert.deepEqual(problems, [
    "entry 1: id -1: not a non-negative integer",
    'entry 2: unknown field "weight"',
    'entry 3 (cell 3): address: "c.example:0": bad port',
    'entry 4 (cell 4): session_prefix "cell 4": want letters, digits, - and _',
    'entry 5 (cell 5): health_path "//x": want an absolute path (/-/readiness)',
    'entry 6 (cell 6): address "b.example" is already listed',
    "entry 7 (cell 7): no address",
  ]);
  assert.match(cellsProblems("{")[0], /^not JSON/);
  assert.deepEqual(cellsProblems("{}"), ["not a JSON list"]);
});

test("every environment of the shipped wrangler.toml that lists cells lists them validly (REPLACE_ME: left to the operator)", () => {
  const config = readWranglerConfig(path.join(ROOT, "wrangler.toml"));
  const listed = [];
  for (const name of config.environments) {
    const cells = config.environment(name).vars.GITLAB_CELLS;
    if (cells === undefined) continue;
    listed.push(name);
    if (cells === "REPLACE_ME") continue;
    assert.deepEqual(cellsProblems(cells), [], name);
  }
  assert.deepEqual(listed, ["dev", "staging", "production"]);
  assert.notEqual(config.environment("dev").vars.GITLAB_CELLS, "REPLACE_ME");
});

test("the dev stack's list is what `devstack cells` prints for devstack/topology.toml", (t) => {
  const devstack = path.join(ROOT, "target", "debug", "devstack");
  if (!fs.existsSync(devstack)) return t.skip("target/debug/devstack is not built");
  const printed = JSON.parse(execFileSync(devstack, ["cells", "--config", path.join(ROOT, "devstack", "topology.toml")], { encoding: "utf8" }));
  const shipped = JSON.parse(readWranglerConfig(path.join(ROOT, "wrangler.toml")).environment("dev").vars.GITLAB_CELLS);
  const key = (list) => list.map((c) => [c.id, c.address, c.registry_address, c.session_prefix, c.health_path]);
  assert.deepEqual(key(shipped), key(printed));
  assert.deepEqual(cellsProblems(JSON.stringify(printed)), []);
});
