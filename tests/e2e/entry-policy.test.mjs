// The entry decides nothing (docs/decisions.md, "The edge"): every
// position, status and header name it uses comes from Rust at run time
// (router_core::wire::layout, headerKind, droppedBy). This holds the
// source to that: a status code or a header name written into entry.js
// fails here.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "./harness.mjs";

/** entry.js without its comments (line and block). */
function code() {
  const text = readFileSync(join(ROOT, "src", "entry.js"), "utf8");
  return text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/(^|[^:"'`\\])\/\/.*$/gm, "$1");
}

test("entry.js holds no status code: the plan carries which to report and which to hold", () => {
  const found = code().match(/(?<![\w.])[1-5][0-9]{2}(?![\w.])/g) ?? [];
  assert.deepEqual(found, [], `status-like numbers in entry.js: ${found.join(", ")}`);
});

test("entry.js names no HTTP header: Rust decides every header's fate", () => {
  const strings = code().match(/(["'`])(?:\\.|(?!\1).)*\1/g) ?? [];
  const headerLike = strings
    .map((s) => s.slice(1, -1))
    .filter((s) => /^[A-Za-z][A-Za-z0-9]*(-[A-Za-z0-9]+)+$/.test(s))
    // Log scopes the entry writes when the glue itself is broken.
    .filter((s) => !["wasm-glue"].includes(s));
  assert.deepEqual(headerLike, [], `header-like names in entry.js: ${headerLike.join(", ")}`);
});

test("the check finds what it looks for", () => {
  assert.match('if (status === 404)', /(?<![\w.])[1-5][0-9]{2}(?![\w.])/);
  assert.ok(/^[A-Za-z][A-Za-z0-9]*(-[A-Za-z0-9]+)+$/.test("retry-after"));
});
