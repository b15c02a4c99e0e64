// Shadow evaluation (docs/deploying.md, "Shadow evaluation") through the
// real worker in workerd: router r0 evaluates `cells_candidate` (the test
// build's copy of rules/cells.json with one rule changed: path_snippet no
// longer takes the old spelling /snippets/<id>) beside `cells` on every
// request, r1 names the same candidate at sample 0. The disagreements the
// worker reports (log lines and data points) are exactly those `rulesctl
// diff` finds over the same route table; every request routes by the
// active ruleset alike on both; the control document switches the sample
// at run time.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { requestLogs, sessionCookie, eventually, setControl, TEST_BUILD, buildTestWorker } from "./harness.mjs";
import { startCells, stopCells, timed } from "./cells-harness.mjs";
import { CAPTURE_WORKER, captureBinding, capturedPoints, asRow } from "./metrics-capture.mjs";

const ROOT = path.resolve(import.meta.dirname, "../..");
const CANDIDATE = "cells_candidate";

/** The route table: requests both rulesets are run on. */
const TABLE = [
  { path: "/snippets/5" },
  { method: "POST", path: "/snippets/7/raw" },
  { path: "/-/snippets/5" },
  { path: "/api/v4/snippets/5" },
  { path: "/api/v4/projects/1" },
  { path: "/gitlab-org/gitlab" },
  { path: "/dashboard", cookies: { _gitlab_session: sessionCookie(2).split("=")[1] } },
  { path: "/users/sign_in" },
  { path: "/explore" },
  { path: "/api/v4/users/alice" },
];

const headersOf = (r) => (r.cookies ? { cookie: Object.entries(r.cookies).map(([k, v]) => `${k}=${v}`).join("; ") } : {});

/** The shadow's disagreement lines (from log line `from`), parsed. */
function shadowLines(stack, from) {
  return stack.logs
    .slice(from)
    .map((l) => l.slice(l.indexOf("{")))
    .filter((l) => l.startsWith('{"level":"info","scope":"shadow"'))
    .map((l) => JSON.parse(l));
}

/** Sends `r` to router `i`; its request log line, the shadow lines and the data point it left. */
async function send(stack, i, r) {
  const from = stack.logs.length;
  const res = await timed(`${stack.urls[i]}${r.path}`, headersOf(r), r.method ?? "GET");
  const { line, point } = await eventually(() => {
    const line = requestLogs(stack, from).find((l) => l.path === r.path && l.method === (r.method ?? "GET"));
    assert.ok(line, `the log line of ${r.path}`);
    const points = capturedPoints(stack.logs, `r${i}`, from);
    assert.equal(points.length, 1, `one data point for ${r.path}`);
    return { line, point: asRow(points[0]) };
  });
  return { res, line, point, shadow: shadowLines(stack, from) };
}

/** `rulesctl diff cells cells_candidate` over TABLE: its changes, by "METHOD path". */
function rulesctlDiff(t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "shadow-diff-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  // The candidate as the test build compiled it (build.rs writes it into OUT_DIR).
  const candidate = spawnSync("find", ["target", "-path", "*/out/cells_candidate.json", "-newer", "rules/cells.json"], { cwd: ROOT, encoding: "utf8" })
    .stdout.split("\n")
    .filter(Boolean)[0];
  assert.ok(candidate, "the test build's cells_candidate.json");
  fs.copyFileSync(path.join(ROOT, "rules/cells.json"), path.join(dir, "cells.json"));
  fs.copyFileSync(path.join(ROOT, candidate), path.join(dir, `${CANDIDATE}.json`));
  const requests = path.join(dir, "requests.jsonl");
  fs.writeFileSync(requests, TABLE.map((r) => JSON.stringify({ method: r.method ?? "GET", url: `https://gitlab.com${r.path}`, cookies: r.cookies })).join("\n") + "\n");
  const run = spawnSync(path.join(ROOT, "target/debug/rulesctl"), ["diff", "--json", "--rules-dir", dir, "--requests", requests, "cells", CANDIDATE], { encoding: "utf8" });
  assert.ok(run.status === 0 || run.status === 1, run.stderr);
  const doc = JSON.parse(run.stdout);
  return new Map(doc.changes.map((c) => [`${c.method} ${new URL(c.url).pathname}`, { difference: c.difference, active: c.old.rule, shadow: c.new.rule }]));
}

describe("shadow evaluation of a candidate ruleset", () => {
  let stack;
  before(async () => {
    buildTestWorker();
    const shadow = { GITLAB_SHADOW_RULES_CONFIG: CANDIDATE };
    stack = await startCells({
      build: TEST_BUILD,
      routers: 2,
      vars: { GITLAB_CONTROL_REFRESH_SECONDS: "1", GITLAB_TOPOLOGY_RETRIES: "0" },
      routerVars: [{ ...shadow, GITLAB_SHADOW_SAMPLE: "1" }, { ...shadow, GITLAB_SHADOW_SAMPLE: "0" }],
      routerOptions: [captureBinding("r0"), captureBinding("r1")],
      extraWorkers: [CAPTURE_WORKER],
    });
  });
  after(async () => {
    if (stack) await stopCells(stack);
  });

  test("at sample 1 exactly rulesctl diff's disagreements are reported, and routing is the active ruleset's", async (t) => {
    const expected = rulesctlDiff(t);
    assert.deepEqual([...expected.keys()].sort(), ["GET /snippets/5", "POST /snippets/7/raw"], "the changed rule's requests");
    const reported = new Map();
    for (const r of TABLE) {
      const key = `${r.method ?? "GET"} ${r.path}`;
      const shadowed = await send(stack, 0, r);
      const plain = await send(stack, 1, r);
      // The same routing with and without the shadow: rule, hand-ons,
      // upstream (but a spread's, drawn per request), status.
      const spread = plain.line.action === "spread";
      for (const field of ["rule", "fell_through", "status", "action", ...(spread ? [] : ["upstream"])]) {
        assert.deepEqual(shadowed.line[field], plain.line[field], `${key}: ${field}`);
      }
      assert.equal(shadowed.res.status, plain.res.status, key);
      // Sample 0: nothing evaluated, no line.
      assert.deepEqual(plain.shadow, [], `${key}: r1 evaluates nothing`);
      assert.equal(plain.point.blob11, "", key);
      assert.equal(plain.point.blob12, "", key);
      // Sample 1: every request evaluated; the point names the shadow's rule.
      assert.notEqual(shadowed.point.blob11, "", `${key}: evaluated`);
      assert.ok(shadowed.shadow.length <= 1, key);
      const [line] = shadowed.shadow;
      if (line) {
        assert.equal(`${line.method} ${line.path}`, key);
        assert.equal(line.ruleset, "cells");
        assert.equal(line.shadow_ruleset, CANDIDATE);
        assert.equal(line.request_id, shadowed.line.request_id, "the line ties to the request's");
        assert.equal(shadowed.point.blob12, line.difference);
        assert.equal(shadowed.point.blob11, line.shadow.rule ?? "(none)");
        reported.set(key, { difference: line.difference, active: line.active.rule, shadow: line.shadow.rule });
        // Both decisions, never a claim value (the snippet id).
        assert.equal(line.active.classify_type, "SNIPPET_ID");
        assert.ok(!JSON.stringify(line.active).includes('"5"') && !JSON.stringify(line.active).includes('"7"'), JSON.stringify(line));
      } else {
        assert.equal(shadowed.point.blob12, "", `${key}: agreed`);
      }
    }
    assert.deepEqual(Object.fromEntries(reported), Object.fromEntries(expected));
  });

  test("the control document's shadow_sample switches it at run time", async () => {
    const snippet = TABLE[0];
    try {
      await setControl(stack, { shadow_sample: 0, note: "shadow off" });
      await eventually(async () => {
        const r = await send(stack, 0, snippet);
        assert.equal(r.point.blob11, "", "r0 stopped evaluating");
        assert.deepEqual(r.shadow, []);
      }, 10_000);
      await setControl(stack, { shadow_sample: 1, note: "shadow on" });
      await eventually(async () => {
        const r = await send(stack, 1, snippet);
        assert.equal(r.point.blob12, "rule", "r1 evaluates at the document's share");
        assert.equal(r.shadow.length, 1);
      }, 10_000);
    } finally {
      await setControl(stack, {});
    }
  });
});
