// Panic recovery relies on glue internals of wasm-bindgen and the worker
// crate (src/entry.js, `missingGlue`). At start-up the entry checks them
// and, when one is missing, logs one clear error and keeps serving without
// recovery. Checked here against the real build, and against a copy of it
// whose glue lacks one of those internals (as an upgrade could make it).
import { test } from "node:test";
import assert from "node:assert/strict";
import { cpSync, readFileSync, writeFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { startStack, request, ROOT } from "./harness.mjs";

const glueErrors = (stack) => stack.logs.filter((l) => l.includes('"scope":"wasm-glue"'));

test("the real build has every glue internal panic recovery needs", async () => {
  const stack = await startStack({ ruleset: "session_prefix" });
  try {
    const res = await request(`${stack.url}/explore`);
    assert.equal(res.status, 200);
    assert.deepEqual(glueErrors(stack), []);
  } finally {
    await stack.stop();
  }
});

test("a glue without the reinit export logs one clear error and still routes", async () => {
  const copy = "target/glue-test-build";
  rmSync(join(ROOT, copy), { recursive: true, force: true });
  cpSync(join(ROOT, "build"), join(ROOT, copy), { recursive: true });
  const shim = join(ROOT, copy, "worker", "shim.mjs");
  const text = readFileSync(shim, "utf8");
  assert.ok(text.includes('"__wbg___wbindgen_reinit_"'), "the entry looks the export up by this prefix");
  writeFileSync(shim, text.replaceAll('"__wbg___wbindgen_reinit_"', '"__wbg___renamed_by_an_upgrade_"'));
  const stack = await startStack({ ruleset: "session_prefix", build: copy });
  try {
    const res = await request(`${stack.url}/explore`);
    assert.equal(res.status, 200, "requests are still served");
    assert.equal(res.json().cell, "1");
    const errors = glueErrors(stack);
    assert.equal(errors.length, 1, errors.join("\n"));
    assert.match(errors[0], /panic recovery is off: the glue lacks __wbg___wbindgen_reinit_\*/);
  } finally {
    await stack.stop();
    rmSync(join(ROOT, copy), { recursive: true, force: true });
  }
});
